"""The Karpathy JSON reader (data/formats/karpathy.py): split files with and without filepaths, errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from corpus_format_helpers import (
    error_message,
    karpathy_entry,
    make_karpathy_coco,
    write_image,
)
from vsekit.data import (
    load_karpathy,
)
from vsekit.errors import CorpusError


def test_karpathy_with_filepath(tmp_path: Path) -> None:
    corpus = load_karpathy(make_karpathy_coco(tmp_path))
    assert corpus.format == "karpathy" and corpus.name == "coco"
    assert list(corpus.splits) == ["train", "restval", "val", "test"]
    assert corpus.images["val2014/COCO_val2014_3.jpg"] == tmp_path / "val2014" / "COCO_val2014_3.jpg"
    assert corpus.split("dev").captions_by_image() == {
        "val2014/COCO_val2014_3.jpg": ["COCO_val2014_3.jpg sentence 0 .", "COCO_val2014_3.jpg sentence 1 ."]
    }
    train = corpus.split("train+restval")
    assert train.image_ids() == ["train2014/COCO_train2014_2.jpg", "val2014/COCO_val2014_4.jpg"]
    assert corpus.captions[0].source.endswith("dataset_coco.json:images[0]")


def test_karpathy_flickr_layout_default_images_dir(tmp_path: Path) -> None:
    write_image(tmp_path / "Images" / "p.jpg")
    write_image(tmp_path / "Images" / "q.jpg")
    path = tmp_path / "dataset_flickr8k.json"
    path.write_text(
        json.dumps(
            {
                "dataset": "flickr8k",
                "images": [karpathy_entry("p.jpg", "train"), karpathy_entry("q.jpg", "val")],
            }
        )
    )
    corpus = load_karpathy(path)
    assert corpus.splits == {"train": ["p.jpg"], "val": ["q.jpg"]}
    assert corpus.images["p.jpg"] == tmp_path / "Images" / "p.jpg"


def test_karpathy_missing_image_names_entry(tmp_path: Path) -> None:
    path = make_karpathy_coco(tmp_path)
    (tmp_path / "val2014" / "COCO_val2014_3.jpg").unlink()
    with pytest.raises(CorpusError) as excinfo:
        load_karpathy(path)
    message = error_message(excinfo)
    assert message.startswith(f"{path}:images[2]:") and "val2014/COCO_val2014_3.jpg" in message


def test_karpathy_empty_sentence(tmp_path: Path) -> None:
    write_image(tmp_path / "p.jpg")
    entry = karpathy_entry("p.jpg", "train")
    entry["sentences"][1]["raw"] = " "
    path = tmp_path / "dataset_x.json"
    path.write_text(json.dumps({"images": [entry]}))
    with pytest.raises(CorpusError, match=re.escape(f"{path}:images[0].sentences[1]: empty caption")):
        load_karpathy(path)


def test_invalid_json_names_line(tmp_path: Path) -> None:
    path = tmp_path / "dataset_bad.json"
    path.write_text('{"images": [\n  {"filename": }\n]}')
    with pytest.raises(CorpusError, match=re.escape(f"{path}:2: invalid JSON")):
        load_karpathy(path)
