"""The streaming Karpathy / COCO readers (ijson, one entry at a time) give the corpus the whole-file
readers give, and the same one-line errors on malformed files (which they hand to the whole-file reader)."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corpus_format_helpers import make_coco, make_karpathy_coco
from vsekit.data import corpus as corpus_module
from vsekit.data import jsonstream, load_coco, load_coco_dir, load_corpus, load_karpathy
from vsekit.data.formats import coco as coco_module
from vsekit.data.formats import karpathy as karpathy_module
from vsekit.errors import CorpusError

pytest.importorskip("ijson")


def snapshot(corpus):
    return (
        corpus.root,
        corpus.name,
        corpus.format,
        corpus.images,
        corpus.captions,
        corpus.splits,
        list(corpus.splits),
    )


def whole(load, *args):
    """``load(*args)`` through the whole-file readers (as without ijson)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(jsonstream, "available", lambda: False)
        return outcome(load, *args)


def streamed(load, *args):
    """``load(*args)`` with the whole-file JSON reader forbidden: it must stream."""
    with pytest.MonkeyPatch.context() as mp:
        for module in (corpus_module, coco_module, karpathy_module):
            mp.setattr(module, "read_json", lambda path: pytest.fail(f"{path} was read whole"))
        return outcome(load, *args)


def outcome(load, *args):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = snapshot(load(*args))
        except CorpusError as exc:
            result = ("error", str(exc))
    return result, [str(w.message) for w in caught]


def test_karpathy_streamed_equals_whole(tmp_path: Path) -> None:
    path = make_karpathy_coco(tmp_path)
    data = json.loads(path.read_text())
    data["images"][1]["sentences"][0] = {"tokens": ["only", "tokens"]}  # raw rebuilt from tokens
    data["images"][2]["sentences"] = []  # an image without captions: a warning, in both
    path.write_text(json.dumps(data))
    for load, args in ((load_karpathy, (path,)), (load_corpus, (path,)), (load_corpus, (tmp_path,))):
        reference = whole(load, *args)
        assert reference[0][0] != "error" and reference[1]
        assert streamed(load, *args) == reference


def test_coco_streamed_equals_whole(tmp_path: Path) -> None:
    root = make_coco(tmp_path)
    path = root / "annotations" / "captions_train2014.json"
    data = json.loads(path.read_text())  # annotations before images, and a float field
    path.write_text(json.dumps({"annotations": data["annotations"], "images": data["images"], "x": 1.5}))
    for load, args in (
        (load_coco, (path, root / "train2014")),
        (load_coco_dir, (root,)),
        (load_corpus, (root,)),
        (load_corpus, (path,)),
    ):
        reference = whole(load, *args)
        assert reference[0][0] != "error"
        assert streamed(load, *args) == reference


MALFORMED_KARPATHY = {
    "bad entry": lambda d: d["images"].__setitem__(1, 7),
    "missing split": lambda d: d["images"][0].pop("split"),
    "empty caption": lambda d: d["images"][2]["sentences"][0].__setitem__("raw", " "),
    "images not a list": lambda d: d.__setitem__("images", {"item": d["images"][0]}),
    "no images": lambda d: d.pop("images"),
    "empty images": lambda d: d.__setitem__("images", []),
}


@pytest.mark.parametrize("case", sorted(MALFORMED_KARPATHY))
def test_malformed_karpathy_reports_as_the_whole_reader(tmp_path: Path, case: str) -> None:
    path = make_karpathy_coco(tmp_path)
    data = json.loads(path.read_text())
    MALFORMED_KARPATHY[case](data)
    path.write_text(json.dumps(data))
    for load in (load_karpathy, load_corpus):
        assert outcome(load, path) == whole(load, path)


@pytest.mark.parametrize(
    "text",
    [
        '{"images": [1, 2,',  # truncated: the error names the line
        '\ufeff{"dataset": "coco", "images": []}',  # a byte-order mark
        '{"images": [], "images": []}',  # a repeated key (json.load keeps the last)
        "[1, 2]",
        '{"images": [], "annotations": {"item": 1}}',
    ],
)
def test_odd_json_files_read_as_the_whole_reader(tmp_path: Path, text: str) -> None:
    path = tmp_path / "dataset_x.json"
    path.write_text(text, encoding="utf-8")
    for load in (load_karpathy, load_corpus):
        assert outcome(load, path) == whole(load, path)


def test_malformed_coco_reports_as_the_whole_reader(tmp_path: Path) -> None:
    root = make_coco(tmp_path)
    path = root / "annotations" / "captions_val2014.json"
    data = json.loads(path.read_text())
    for mutate in (
        lambda d: d["annotations"].append({"image_id": 99, "caption": "x"}),
        lambda d: d["images"].append(dict(d["images"][0])),
        lambda d: d.pop("annotations"),
    ):
        broken = json.loads(json.dumps(data))
        mutate(broken)
        path.write_text(json.dumps(broken))
        for load, args in ((load_coco, (path, root / "val2014")), (load_coco_dir, (root,))):
            result = outcome(load, *args)
            assert result == whole(load, *args) and result[0][0] == "error"


def _depth(value) -> int:
    """Brute force: how many arrays / objects nest at the deepest point of a parsed value."""
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    return 0


_TRICKY = st.text(alphabet='[]{}"\\\\ab', max_size=8)  # brackets, quotes and backslashes inside strings
_JSON = st.recursive(
    st.none() | st.integers() | _TRICKY,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TRICKY, inner, max_size=3),
    max_leaves=30,
)


@settings(max_examples=200, deadline=None)
@given(value=_JSON, chunk=st.integers(1, 9))
def test_depth_scan_agrees_with_the_parsed_value_across_chunk_boundaries(tmp_path_factory, value, chunk):
    path = tmp_path_factory.mktemp("depth") / "v.json"
    path.write_text(json.dumps(value))
    depth, size, mtime = _depth(value), path.stat().st_size, path.stat().st_mtime_ns
    assert not jsonstream._exceeds(str(path), size, mtime, depth, chunk)
    if depth:
        assert jsonstream._exceeds(str(path), size, mtime, depth - 1, chunk)


def test_a_deeply_nested_file_is_refused_clearly_within_a_memory_limit(tmp_path):
    """Regression: ijson built 10 GB of parent paths for 100,000 nested brackets (a 100 KB file) before
    its first event; the depth scan sends the file to the whole-file reader, which names the problem. Run
    in a child limited to 2 GiB of address space: the old code died there of MemoryError."""
    path = tmp_path / "dataset_deep.json"
    path.write_bytes(b'{"images": [' + b'{"a": [' * 50_000)
    child = (
        "import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))\n"
        "from vsekit.data import load_karpathy\n"
        "from vsekit.errors import CorpusError\n"
        "try:\n    load_karpathy(sys.argv[1])\nexcept CorpusError as e:\n    print(e)\n"
    )
    args = [sys.executable, "-c", child, str(path)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == f"{path}: invalid JSON: nested too deeply"
