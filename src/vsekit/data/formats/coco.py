"""The official COCO ``annotations/captions_<split><year>.json`` files with ``<split><year>/`` image
folders. The split is named after the file with the year stripped (``captions_train2014.json`` ->
``"train"``), so that recipes can say "train"/"val" for any year."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from vsekit.data import jsonstream
from vsekit.data.corpus_types import Caption, Corpus, ordered_splits
from vsekit.data.formats._shared import find_dir, list_dir, read_json, read_streamed, warn_uncaptioned
from vsekit.errors import CorpusError

_CAPTIONS_RE = re.compile(r"^captions_([A-Za-z]+?)(\d{4})?$")


def split_name(path: Path) -> tuple[str, str]:
    """(split, folder) from a captions file name: captions_train2014.json -> ("train", "train2014")."""
    match = _CAPTIONS_RE.match(path.stem)
    if match is None:
        return "all", path.stem
    return match.group(1).lower(), match.group(1) + (match.group(2) or "")


def from_data(path: Path, data: Any, images_dir: Path, split: str) -> Corpus:
    if not isinstance(data, dict) or not isinstance(data.get("images"), list):
        raise CorpusError(f"{path}: not a COCO captions file (expected 'images' and 'annotations' lists)")
    annotations = data.get("annotations")
    if not isinstance(annotations, list):
        raise CorpusError(f"{path}: not a COCO captions file (no 'annotations' list)")
    return _from_lists(path, data["images"], annotations, images_dir, split)


def streamed(path: Path, images_dir: Path, split: str) -> Corpus:
    kinds = jsonstream.top_level_kinds(path, ["images", "annotations"])
    if kinds.get("images") != "array" or kinds.get("annotations") != "array":
        raise jsonstream.NotStreamable
    images, annotations = (jsonstream.stream_items(path, key) for key in ("images", "annotations"))
    return _from_lists(path, images, annotations, images_dir, split)


def _read(path: Path, images_dir: Path, split: str) -> Corpus:
    return read_streamed(
        lambda: streamed(path, images_dir, split),
        lambda: from_data(path, read_json(path), images_dir, split),
    )


def _from_lists(
    path: Path, image_entries: Iterable[Any], annotations: Iterable[Any], images_dir: Path, split: str
) -> Corpus:
    on_disk = list_dir(images_dir)
    file_of: dict[Any, str] = {}
    images: dict[str, Path] = {}
    for k, entry in enumerate(image_entries):
        where = f"{path}:images[{k}]"
        if not isinstance(entry, dict) or "id" not in entry or not isinstance(entry.get("file_name"), str):
            raise CorpusError(f"{where}: expected an object with 'id' and 'file_name'")
        file_name = entry["file_name"]
        if not isinstance(entry["id"], int | str):
            raise CorpusError(f"{where}: 'id' must be a number or a string")
        if entry["id"] in file_of:
            raise CorpusError(f"{where}: image id {entry['id']} is listed twice")
        if file_name not in on_disk:
            raise CorpusError(f"{where}: image '{file_name}' of split '{split}' is not in {images_dir}")
        file_of[entry["id"]] = file_name
        images[file_name] = images_dir / file_name
    captions: list[Caption] = []
    for k, ann in enumerate(annotations):
        where = f"{path}:annotations[{k}]"
        if not isinstance(ann, dict) or "image_id" not in ann:
            raise CorpusError(f"{where}: expected an object with 'image_id' and 'caption'")
        if not isinstance(ann["image_id"], int | str):
            raise CorpusError(f"{where}: 'image_id' must be a number or a string")
        image_id = file_of.get(ann["image_id"])
        if image_id is None:
            raise CorpusError(f"{where}: image_id {ann['image_id']} is not in 'images'")
        text = ann.get("caption")
        if not isinstance(text, str) or not text.strip():
            raise CorpusError(f"{where}: empty caption")
        captions.append(Caption(image_id, text.strip(), where))
    corpus = Corpus(
        root=images_dir.parent,
        name="coco",
        format="coco",
        images=images,
        captions=captions,
        splits={split: list(images)},
    )
    warn_uncaptioned(corpus)
    return corpus


def load_coco(captions_json: str | os.PathLike[str], images_dir: str | os.PathLike[str]) -> Corpus:
    """Read one COCO captions file; its one split is named after the file with the year stripped.

    ``captions_train2014.json`` -> "train", ``captions_val2017.json`` -> "val" (any other name -> "all"),
    so recipes say "train"/"val" whatever the release. Image ids are the COCO ``file_name``s.
    """
    path = Path(captions_json)
    split, _ = split_name(path)
    return _read(path, Path(images_dir), split)


def images_dir_for(root: Path, path: Path) -> Path:
    split, folder = split_name(path)
    found = find_dir(root, (folder, split, "images"))
    if found is None:
        raise CorpusError(
            f"{path}: no image folder for split '{split}' (looked for {folder}/, images/ in {root})"
        )
    return found


def _merge(root: Path, corpora: list[Corpus], files: list[Path]) -> Corpus:
    images: dict[str, Path] = {}
    captions: list[Caption] = []
    splits: dict[str, list[str]] = {}
    for corpus, path in zip(corpora, files, strict=True):
        for image_id, image_path in corpus.images.items():
            if image_id in images:
                raise CorpusError(f"{path}: image '{image_id}' is also in another captions file")
            images[image_id] = image_path
        captions.extend(corpus.captions)
        for split, ids in corpus.splits.items():
            if split in splits:
                raise CorpusError(f"{path}: split '{split}' comes from two captions files")
            splits[split] = ids
    return Corpus(
        root=root,
        name="coco",
        format="coco",
        images=images,
        captions=captions,
        splits=ordered_splits(splits),
    )


def load_coco_dir(root: str | os.PathLike[str]) -> Corpus:
    """Read a COCO folder: ``annotations/captions_*.json`` plus one image folder per split.

    Each file's images are looked up in the folder named like the file (``captions_val2014.json`` ->
    ``root/val2014``), else ``root/<split>``, else ``root/images``.
    """
    root = Path(root)
    files = sorted((root / "annotations").glob("captions_*.json"))
    if not files:
        raise CorpusError(f"{root}: no annotations/captions_*.json (the COCO captions files)")
    corpora = []
    for path in files:
        split, _ = split_name(path)
        corpora.append(_read(path, images_dir_for(root, path), split))
    return _merge(root, corpora, files)
