"""Karpathy's ``dataset_{flickr8k,flickr30k,coco}.json`` split files, streamed one entry at a time when
ijson is there. Their splits are kept as written (``train``, ``val``, ``test``, ``restval``)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from vsekit.data import jsonstream
from vsekit.data.corpus_types import Caption, Corpus, ordered_splits
from vsekit.data.formats._shared import (
    default_images_dir,
    list_dir,
    read_json,
    read_streamed,
    warn_uncaptioned,
)
from vsekit.errors import CorpusError


def from_data(path: Path, data: Any, images_dir: Path) -> Corpus:
    if not isinstance(data, dict) or not isinstance(data.get("images"), list):
        raise CorpusError(f"{path}: not a Karpathy split file (expected an object with an 'images' list)")
    return _from_entries(path, data["images"], data.get("dataset"), images_dir)


def streamed(path: Path, images_dir: Path) -> Corpus:
    if jsonstream.top_level_kinds(path, ["images"]).get("images") != "array":
        raise jsonstream.NotStreamable
    name = jsonstream.top_level_value(path, "dataset")
    return _from_entries(path, jsonstream.stream_items(path, "images"), name, images_dir)


def _from_entries(path: Path, entries: Iterable[Any], name: Any, images_dir: Path) -> Corpus:
    listings: dict[Path, set[str]] = {}
    images: dict[str, Path] = {}
    captions: list[Caption] = []
    splits: dict[str, list[str]] = {}
    for k, entry in enumerate(entries):
        where = f"{path}:images[{k}]"
        if not isinstance(entry, dict):
            raise CorpusError(f"{where}: expected an object, found {type(entry).__name__}")
        filename, filepath, split = entry.get("filename"), entry.get("filepath", ""), entry.get("split")
        if not isinstance(filename, str) or not filename:
            raise CorpusError(f"{where}: missing 'filename'")
        if not isinstance(filepath, str):
            raise CorpusError(f"{where}: 'filepath' must be a string")
        if not isinstance(split, str) or not split:
            raise CorpusError(f"{where}: missing 'split' (image '{filename}')")
        image_id = f"{filepath.strip('/')}/{filename}" if filepath else filename
        if image_id in images:
            raise CorpusError(f"{where}: image '{image_id}' is listed twice")
        folder = images_dir / filepath if filepath else images_dir
        listing = listings.get(folder)
        if listing is None:
            try:
                listing = listings[folder] = list_dir(folder)
            except CorpusError as exc:  # name the entry too: its 'filepath' is what points there
                raise CorpusError(f"{where}: {exc}") from None
        if filename not in listing:
            raise CorpusError(f"{where}: image '{image_id}' of split '{split}' is not in {images_dir}")
        images[image_id] = folder / filename
        splits.setdefault(split, []).append(image_id)
        sentences = entry.get("sentences", [])
        if not isinstance(sentences, list):
            raise CorpusError(f"{where}: 'sentences' must be a list")
        for j, sentence in enumerate(sentences):
            raw = sentence.get("raw") if isinstance(sentence, dict) else None
            if raw is None and isinstance(sentence, dict) and isinstance(sentence.get("tokens"), list):
                raw = " ".join(str(t) for t in sentence["tokens"])
            if not isinstance(raw, str) or not raw.strip():
                raise CorpusError(f"{where}.sentences[{j}]: empty caption")
            captions.append(Caption(image_id, raw.strip(), where))
    corpus = Corpus(
        root=path.parent,
        name=name if isinstance(name, str) and name else path.stem,
        format="karpathy",
        images=images,
        captions=captions,
        splits=ordered_splits(splits),
    )
    warn_uncaptioned(corpus)
    return corpus


def load_karpathy(
    json_path: str | os.PathLike[str], images_dir: str | os.PathLike[str] | None = None
) -> Corpus:
    """Read Karpathy's ``dataset_*.json``; image path = images_dir / filepath / filename.

    Image ids include the filepath when there is one (``val2014/COCO_val2014_...jpg``). Split names stay
    as written: "val" (reachable as "dev"), "test", "train" and COCO's "restval", kept apart because the
    standard COCO recipe trains on ``split("train+restval")`` while others train on "train" alone.
    """
    path = Path(json_path)
    img_dir = Path(images_dir) if images_dir is not None else default_images_dir(path)
    return read_streamed(
        lambda: streamed(path, img_dir),
        lambda: from_data(path, read_json(path), img_dir),
    )
