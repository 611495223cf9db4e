"""Small corpora in each supported format, written on the fly (tiny real images, hand-made caption files),
for the corpus reader tests (tests/test_corpus*.py); and the one-line check of their errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

import vsekit
from vsekit.errors import CorpusError

SAMPLE = Path(vsekit.__file__).parent / "sample" / "flickr8k"


def write_image(path: Path) -> Path:
    """A tiny real image (JPEG or PNG by extension) so fixtures look like the real thing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (4, 4), (200, 30, 30)).save(path)
    return path


def write_text(path: Path, lines: list[str], newline: str = "\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes("".join(line + newline for line in lines).encode("utf-8"))
    return path


def make_flickr8k(
    root: Path,
    splits: dict[str, list[str]] | None = None,
    no_split: tuple[str, ...] = ("d.jpg",),
    extra_token_lines: tuple[str, ...] = (),
    newline: str = "\n",
) -> Path:
    """Standard layout: Images/, Flickr8k_text/Flickr8k.token.txt, Flickr_8k.<split>Images.txt."""
    splits = {"train": ["a.jpg", "b.jpg"], "dev": ["c.jpg"]} if splits is None else splits
    ids = [i for ids in splits.values() for i in ids] + list(no_split)
    for image_id in ids:
        write_image(root / "Images" / image_id)
    lines = [f"{i}#{n}\t{i[0]} caption number {n} ." for i in ids for n in range(2)]
    lines.insert(2, "")  # blank lines are skipped
    write_text(root / "Flickr8k_text" / "Flickr8k.token.txt", lines + list(extra_token_lines), newline)
    for split, split_ids in splits.items():
        write_text(root / "Flickr8k_text" / f"Flickr_8k.{split}Images.txt", split_ids, newline)
    return root


def error_message(excinfo: pytest.ExceptionInfo[CorpusError]) -> str:
    message = str(excinfo.value)
    assert "\n" not in message, "errors must be one line"
    return message


def karpathy_entry(filename: str, split: str, filepath: str | None = None, n: int = 2) -> dict:
    entry = {
        "filename": filename,
        "split": split,
        "sentences": [
            {"raw": f"{filename} sentence {k} .", "tokens": [filename, "sentence", str(k)]} for k in range(n)
        ],
    }
    if filepath is not None:
        entry["filepath"] = filepath
    return entry


def make_karpathy_coco(root: Path) -> Path:
    entries = [
        karpathy_entry("COCO_val2014_1.jpg", "test", "val2014"),
        karpathy_entry("COCO_train2014_2.jpg", "train", "train2014"),
        karpathy_entry("COCO_val2014_3.jpg", "val", "val2014"),
        karpathy_entry("COCO_val2014_4.jpg", "restval", "val2014"),
    ]
    for e in entries:
        write_image(root / e["filepath"] / e["filename"])
    path = root / "dataset_coco.json"
    path.write_text(json.dumps({"dataset": "coco", "images": entries}))
    return path


def make_coco(root: Path) -> Path:
    for split, ids in (("train2014", [1, 2]), ("val2014", [3])):
        images = [{"id": i, "file_name": f"COCO_{split}_{i:012d}.jpg"} for i in ids]
        annotations = [
            {"id": 100 * i + k, "image_id": i, "caption": f"image {i} caption {k}\n"}
            for i in ids
            for k in range(2)
        ]
        for image in images:
            write_image(root / split / image["file_name"])
        (root / "annotations").mkdir(parents=True, exist_ok=True)
        (root / "annotations" / f"captions_{split}.json").write_text(
            json.dumps({"info": {}, "images": images, "annotations": annotations})
        )
    return root
