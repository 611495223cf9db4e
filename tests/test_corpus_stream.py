"""The streaming Karpathy / COCO readers (ijson, one entry at a time) give the corpus the whole-file
readers give, and the same one-line errors on malformed files (which they hand to the whole-file reader)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

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
