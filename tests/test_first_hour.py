"""What a new user does in the first hour, as they would type it (issue: "a new user's first hour")."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from corpus_helpers import write_tiny_corpus
from vsekit.cli import app
from vsekit.data import load_corpus
from vsekit.errors import CorpusError
from vsekit.resources import pretrained_path, sample_data_path

runner = CliRunner()
shipped = pytest.mark.skipif(
    not pretrained_path("vse").is_file() or not pretrained_path("captioner").is_file(),
    reason="the shipped models are not in this checkout",
)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("VSEKIT_CACHE", str(tmp_path / "cache"))


def test_the_default_split_is_test_else_the_only_one_else_a_list(tmp_path):
    assert load_corpus(sample_data_path()).default_split() == "dev"  # the sample has only dev
    two = load_corpus(write_tiny_corpus(tmp_path / "c", n_train=4, n_dev=2, n_test=0))
    with pytest.raises(
        CorpusError, match=r"no 'test' split; choose one with --split \(available: train, dev"
    ):
        two.default_split()
    three = load_corpus(write_tiny_corpus(tmp_path / "d", n_train=4, n_dev=2, n_test=2))
    assert three.default_split() == "test"
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "captions.csv").write_text("image,caption\na.jpg,a dog\n")
    (plain / "Images").mkdir()
    (plain / "Images" / "a.jpg").touch()
    assert load_corpus(plain).default_split() == "all"


@shipped
def test_eval_on_the_sample_needs_no_split_and_writes_json_a_person_can_read(tmp_path, cache):
    out = tmp_path / "dev.json"
    result = runner.invoke(app, ["eval", "--data", str(sample_data_path()), "--json", str(out)])
    assert result.exit_code == 0, result.output
    payload = json.loads(out.read_text())
    assert payload["split"] == "dev" and payload["model"]["name"] == "vse"
    assert len(payload["model"]["sha256"]) == 64
    floats = [payload["rsum"], *payload["i2t"].values(), *payload["t2i"].values()]
    assert all(round(x, 2) == x for x in floats)


@shipped
def test_caption_takes_files_and_folders_and_one_bad_file_costs_only_itself(tmp_path, cache):
    photos = sorted((sample_data_path() / "Images").glob("*.jpg"))[:3]
    folder = tmp_path / "photos"
    (folder / "sub").mkdir(parents=True)
    shutil.copy(photos[0], folder / "a.jpg")
    shutil.copy(photos[1], folder / "sub" / "B.JPG")
    (folder / "broken.jpg").write_text("not a photo")
    result = runner.invoke(app, ["caption", str(folder), str(photos[2])])
    assert result.exit_code == 0, result.output
    assert "broken.jpg" in result.output and "1 of 4 image(s) could not be read" in result.output
    for name in ("a.jpg", "B.JPG", photos[2].name):
        assert name in result.output
    described = [
        line for line in result.output.splitlines() if line.startswith("  ") and "skipped" not in line
    ]
    assert len(described) == 3


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["rank", "--sentence", "   ", "--data", str(sample_data_path())], "--sentence is empty"),
        (["demo", "--n-images", "-1"], "--n-images"),
        (["demo", "--top", "0"], "--top"),
        (["caption", "/no/such/photo.jpg"], "/no/such/photo.jpg: no such image file or folder"),
    ],
)
def test_inputs_a_person_types_are_checked(args, message):
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert message in result.output


def test_an_unusable_cache_is_one_line_not_a_traceback(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = runner.invoke(
        app, ["extract", "--data", str(sample_data_path()), "--cache-root", str(blocker / "cache")]
    )
    assert result.exit_code == 2
    assert str(blocker) in result.output and "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_version_and_flags_without_a_type():
    from vsekit import __version__

    assert __version__ in runner.invoke(app, ["--version"]).output
    help_text = runner.invoke(app, ["extract", "--help"]).output
    assert "--fne" in help_text and "<bool>" not in help_text


@shipped
def test_rank_prints_the_image_path_not_its_repr(cache):
    photo = sorted((sample_data_path() / "Images").glob("*.jpg"))[0]
    result = runner.invoke(
        app, ["rank", "--image", str(photo), "--data", str(sample_data_path()), "--top", "1"]
    )
    assert result.exit_code == 0, result.output
    assert "PosixPath" not in result.output and photo.name in result.output.replace("\n", "")


def test_library_code_never_prints():
    """Only cli/ prints; the library reports through logging (so -v / -q and embedding apps control it)."""
    import ast
    from pathlib import Path

    import vsekit

    offenders = []
    for path in Path(vsekit.__file__).parent.rglob("*.py"):
        if "cli" in path.relative_to(Path(vsekit.__file__).parent).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "print":
                offenders.append(f"{path.name}:{node.lineno}")
            if (
                isinstance(node, ast.Attribute)
                and node.attr == "write"
                and getattr(node.value, "id", "") == "tqdm"
            ):
                offenders.append(f"{path.name}:{node.lineno}")
    assert offenders == []


@shipped
def test_sentence_embeddings_are_cached_per_model_and_sentence_list(tmp_path, monkeypatch):
    import numpy as np

    import vsekit
    from vsekit.embedding.text_cache import cached_text_embeddings

    model = vsekit.load_model(device="cpu")
    texts = ["a dog runs through the snow", "two children on a beach"]
    first = cached_text_embeddings(model, texts, tmp_path, progress=False)
    np.testing.assert_array_equal(first, model.embed_texts(texts))

    def no_encoder(*args, **kwargs):
        raise AssertionError("the cached sentences were embedded again")

    monkeypatch.setattr(model, "embed_texts", no_encoder)
    np.testing.assert_array_equal(cached_text_embeddings(model, texts, tmp_path, progress=False), first)
    monkeypatch.undo()
    (cache_file,) = (tmp_path / "texts").glob("*.npy")
    cache_file.write_bytes(b"damaged")  # a damaged cache file is recomputed, never trusted
    np.testing.assert_array_equal(cached_text_embeddings(model, texts, tmp_path, progress=False), first)
    other = cached_text_embeddings(model, texts[:1], tmp_path, progress=False)  # another list, another file
    assert other.shape == (1, model.embed_dim) and len(list((tmp_path / "texts").glob("*.npy"))) == 2


@shipped
def test_one_bad_photo_in_a_corpus_costs_only_itself_with_skip_bad_images(tmp_path, cache):
    """The advice in the error is an option that exists, and taking it gives results for the rest."""
    data = tmp_path / "corpus"
    shutil.copytree(sample_data_path(), data)
    bad = sorted((data / "Images").glob("*.jpg"))[5]
    bad.write_bytes(b"not a jpeg")

    stopped = runner.invoke(app, ["eval", "--data", str(data)])
    assert stopped.exit_code == 2 and bad.name in stopped.output and "--skip-bad-images" in stopped.output
    out = tmp_path / "dev.json"
    kept = runner.invoke(app, ["eval", "--data", str(data), "--skip-bad-images", "--json", str(out)])
    assert kept.exit_code == 0, kept.output
    assert json.loads(out.read_text())["n_images"] == 99
    searched = runner.invoke(
        app, ["rank", "--sentence", "a dog", "--data", str(data), "--skip-bad-images", "--top", "3"]
    )
    assert searched.exit_code == 0, searched.output
    described = runner.invoke(
        app, ["caption", "--data", str(data), "--skip-bad-images", "--json", str(tmp_path / "c.json")]
    )
    assert described.exit_code == 0, described.output
    assert json.loads((tmp_path / "c.json").read_text())["n_images"] == 99
