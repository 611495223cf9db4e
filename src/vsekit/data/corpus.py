"""Image-caption corpora: one `Corpus` type and readers for the four formats people actually have.

Supported formats (see `load_corpus` for auto-detection):

* ``flickr8k``: the standard Flickr8K download (``Images/``, ``Flickr8k_text/Flickr8k.token.txt`` and the
  ``Flickr_8k.{train,dev,test}Images.txt`` split files).
* ``csv``: a one-file ``image,caption[,split]`` CSV (the popular Kaggle form of Flickr8K/Flickr30K).
* ``karpathy``: Karpathy's ``dataset_{flickr8k,flickr30k,coco}.json`` split files. Their splits are kept as
  written (``train``, ``val``, ``test``, ``restval``); the usual COCO "Karpathy split" training set is
  ``train`` + ``restval``, reachable as ``corpus.split("train+restval")``.
* ``coco``: the official ``annotations/captions_<split><year>.json`` files with ``<split><year>/`` image
  folders. The split is named after the file with the year stripped (``captions_train2014.json`` ->
  ``"train"``, ``captions_val2017.json`` -> ``"val"``) so that recipes can say "train"/"val" for any year.

Loading never opens an image: existence is checked with one directory listing per image folder, so the
full Flickr8K loads in well under a second. Every problem a user can fix is a `CorpusError` whose message
names the file and line (``path:LINE: what is wrong``), the JSON entry, or the split at fault.

The `Corpus` type lives in :mod:`vsekit.data.corpus_types` and each format's reader in
:mod:`vsekit.data.formats` (``flickr8k``, ``csv``, ``karpathy``, ``coco``); this module detects the format
(`load_corpus`) and hands the readers on under their old names.
"""

from __future__ import annotations

import os
from pathlib import Path

from vsekit.data import jsonstream
from vsekit.data.corpus_types import Caption, Corpus
from vsekit.data.formats import coco, flickr8k, karpathy
from vsekit.data.formats._shared import (
    IMAGE_EXTENSIONS,
    default_images_dir,
    find_dir,
    read_json,
    read_streamed,
)
from vsekit.data.formats.coco import load_coco, load_coco_dir
from vsekit.data.formats.csv import load_csv
from vsekit.data.formats.flickr8k import load_flickr8k
from vsekit.data.formats.karpathy import load_karpathy
from vsekit.errors import CorpusError

__all__ = [
    "Caption",
    "Corpus",
    "IMAGE_EXTENSIONS",
    "load_coco",
    "load_coco_dir",
    "load_corpus",
    "load_csv",
    "load_flickr8k",
    "load_karpathy",
]

_CSV_NAMES = ("captions.csv", "captions.txt")


def _load_json_file(path: Path) -> Corpus:
    """A .json file: Karpathy ('images' and no 'annotations') or COCO ('images' and 'annotations'),
    streamed when it is well-formed (the kinds of its top-level values are read first)."""
    if not jsonstream.available():
        return _load_json_whole(path)
    try:
        images = jsonstream.top_level_kinds(path, ["images"]).get("images")
        annotations = images == "array" and jsonstream.has_key(path, "annotations")
    except jsonstream.STREAM_ERRORS + (OSError,):
        return _load_json_whole(path)
    if images == "array" and not annotations:
        return read_streamed(
            lambda: karpathy.streamed(path, default_images_dir(path)), lambda: _load_json_whole(path)
        )
    if images == "array":
        root = path.parent.parent if path.parent.name == "annotations" else path.parent
        split, _ = coco.split_name(path)
        return read_streamed(
            lambda: coco.streamed(path, coco.images_dir_for(root, path), split),
            lambda: _load_json_whole(path),
        )
    return _load_json_whole(path)


def _load_json_whole(path: Path) -> Corpus:
    data = read_json(path)
    images = data.get("images") if isinstance(data, dict) else None
    if isinstance(images, list) and "annotations" not in data:
        return karpathy.from_data(path, data, default_images_dir(path))
    if isinstance(images, list) and isinstance(data.get("annotations"), list):
        root = path.parent.parent if path.parent.name == "annotations" else path.parent
        split, _ = coco.split_name(path)
        return coco.from_data(path, data, coco.images_dir_for(root, path), split)
    raise CorpusError(
        f"{path}: JSON is neither a Karpathy split file ('images' with 'sentences') "
        "nor a COCO captions file ('images' and 'annotations')"
    )


def _looks_like_csv_header(path: Path) -> bool:
    try:
        with open(path, encoding="utf-8-sig", newline="") as f:
            first = f.readline()
    except (OSError, UnicodeDecodeError):
        return False
    return first.strip().lower().replace(" ", "").startswith("image,caption")


def _load_file(path: Path) -> Corpus:
    suffix = path.suffix.lower()
    if suffix == ".json":
        return _load_json_file(path)
    if suffix in (".csv", ".txt", ".tsv") and _looks_like_csv_header(path):
        return load_csv(path)
    if suffix == ".txt":
        for root in (path.parent, path.parent.parent):
            if find_dir(root, flickr8k.IMAGE_DIRS) is not None:
                return flickr8k.read(root, token_path=path)
    raise CorpusError(
        f"{path}: unknown corpus file (looked for a .json Karpathy/COCO file, a CSV with header "
        "'image,caption', or a Flickr8K token .txt next to an Images/ folder)"
    )


def load_corpus(path: str | os.PathLike[str]) -> Corpus:
    """Load a corpus from a folder or file, detecting its format.

    A folder is tried as: the standard Flickr8K layout, then one ``dataset_*.json`` (Karpathy), then
    ``annotations/captions_*.json`` (COCO), then ``captions.csv``/``captions.txt`` (CSV). A file is read by
    its extension and first line.
    """
    path = Path(path)
    if path.is_file():
        return _load_file(path)
    if not path.is_dir():
        raise CorpusError(f"{path}: no such file or folder")
    if flickr8k.find_token(path) is not None and find_dir(path, flickr8k.IMAGE_DIRS) is not None:
        return flickr8k.read(path)
    karpathy_files = sorted(path.glob("dataset_*.json"))
    if len(karpathy_files) > 1:
        names = ", ".join(p.name for p in karpathy_files)
        raise CorpusError(f"{path}: several Karpathy split files ({names}); pass the one to load")
    if karpathy_files:
        return load_karpathy(karpathy_files[0])
    if any((path / "annotations").glob("captions_*.json")):
        return load_coco_dir(path)
    for name in _CSV_NAMES:
        if (path / name).is_file():
            return load_csv(path / name)
    raise CorpusError(
        f"{path}: no corpus found (looked for {flickr8k.TEXT_DIR}/{flickr8k.TOKEN_FILE} with an Images/ "
        "folder, dataset_*.json, annotations/captions_*.json, captions.csv, captions.txt)"
    )
