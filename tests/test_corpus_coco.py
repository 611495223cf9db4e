"""The COCO captions reader (data/formats/coco.py): one file, a folder of them, errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from corpus_format_helpers import (
    make_coco,
)
from vsekit.data import (
    load_coco,
    load_coco_dir,
)
from vsekit.errors import CorpusError


def test_load_coco_file(tmp_path: Path) -> None:
    root = make_coco(tmp_path)
    corpus = load_coco(root / "annotations" / "captions_train2014.json", root / "train2014")
    assert corpus.format == "coco"
    assert corpus.splits == {"train": ["COCO_train2014_000000000001.jpg", "COCO_train2014_000000000002.jpg"]}
    assert corpus.captions_by_image()["COCO_train2014_000000000002.jpg"] == [
        "image 2 caption 0",
        "image 2 caption 1",
    ]


def test_load_coco_dir(tmp_path: Path) -> None:
    corpus = load_coco_dir(make_coco(tmp_path))
    assert list(corpus.splits) == ["train", "val"]
    assert len(corpus) == 3 and len(corpus.captions) == 6
    assert (
        corpus.split("dev").images["COCO_val2014_000000000003.jpg"]
        == tmp_path / "val2014" / "COCO_val2014_000000000003.jpg"
    )


def test_coco_unknown_image_id(tmp_path: Path) -> None:
    root = make_coco(tmp_path)
    path = root / "annotations" / "captions_val2014.json"
    data = json.loads(path.read_text())
    data["annotations"].append({"id": 9, "image_id": 42, "caption": "orphan"})
    path.write_text(json.dumps(data))
    with pytest.raises(
        CorpusError, match=re.escape(f"{path}:annotations[2]: image_id 42 is not in 'images'")
    ):
        load_coco(path, root / "val2014")


def test_coco_missing_image(tmp_path: Path) -> None:
    root = make_coco(tmp_path)
    (root / "train2014" / "COCO_train2014_000000000002.jpg").unlink()
    with pytest.raises(
        CorpusError, match=r"captions_train2014\.json:images\[1\]: image 'COCO_train2014_000000000002\.jpg'"
    ):
        load_coco_dir(root)
