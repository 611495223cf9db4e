"""The standard Flickr8K layout: ``Images/``, ``Flickr8k_text/Flickr8k.token.txt`` and the
``Flickr_8k.{train,dev,test}Images.txt`` split files (which the CSV reader also uses when it has no split
column)."""

from __future__ import annotations

import os
from pathlib import Path

from vsekit.data.corpus_types import Caption, Corpus
from vsekit.data.formats._shared import (
    check_disjoint,
    disk_images,
    find_dir,
    keep_captions,
    list_dir,
    read_lines,
    warn_uncaptioned,
)
from vsekit.errors import CorpusError

TOKEN_FILE = "Flickr8k.token.txt"

TEXT_DIR = "Flickr8k_text"

# "Flicker8k_Dataset" is the (misspelled) folder name inside the official Flickr8K zip.
IMAGE_DIRS = ("Images", "images", "Flicker8k_Dataset", "Flickr8k_Dataset")

_SPLIT_FILES = (
    ("train", "Flickr_8k.trainImages.txt"),
    ("dev", "Flickr_8k.devImages.txt"),
    ("test", "Flickr_8k.testImages.txt"),
)


def _read_split_file(path: Path, split: str, on_disk: set[str], images_dir: Path) -> list[str]:
    """Image ids listed in a Flickr8K split file; each must exist on disk (error names the line)."""
    ids: list[str] = []
    seen: set[str] = set()
    for lineno, line in enumerate(read_lines(path), 1):
        image_id = line.strip()
        if not image_id or image_id in seen:
            continue
        if image_id not in on_disk:
            raise CorpusError(
                f"{path}:{lineno}: image '{image_id}' of split '{split}' is not in {images_dir}"
            )
        seen.add(image_id)
        ids.append(image_id)
    return ids


def _split_files(directory: Path) -> list[tuple[str, Path]]:
    """Flickr8K split files in `directory` or its `Flickr8k_text/` folder, in train/dev/test order."""
    found = []
    for split, file_name in _SPLIT_FILES:
        for candidate in (directory / TEXT_DIR / file_name, directory / file_name):
            if candidate.is_file():
                found.append((split, candidate))
                break
    return found


def read_splits(
    directory: Path, on_disk: set[str], images_dir: Path
) -> tuple[dict[str, list[str]], dict[str, str]]:
    splits: dict[str, list[str]] = {}
    where: dict[str, str] = {}
    for split, path in _split_files(directory):
        splits[split] = _read_split_file(path, split, on_disk, images_dir)
        where[split] = str(path)
    check_disjoint(splits, where)
    return splits, where


def find_token(root: Path) -> Path | None:
    for candidate in (root / TEXT_DIR / TOKEN_FILE, root / TOKEN_FILE):
        if candidate.is_file():
            return candidate
    return None


def _parse_tokens(path: Path) -> list[Caption]:
    captions = []
    for lineno, line in enumerate(read_lines(path), 1):
        if not line.strip():
            continue
        key, tab, text = line.partition("\t")
        image_id, hash_, number = key.strip().rpartition("#")
        if not tab or not hash_ or not image_id or not number.isdigit():
            raise CorpusError(f"{path}:{lineno}: expected 'IMAGE.jpg#N<TAB>caption', found {line[:80]!r}")
        text = text.strip()
        if not text:
            raise CorpusError(f"{path}:{lineno}: empty caption")
        captions.append(Caption(image_id, text, f"{path}:{lineno}"))
    return captions


def read(root: Path, token_path: Path | None = None) -> Corpus:
    """The Flickr8K folder `root`, with its captions from `token_path` when given (a token file named
    directly), else from the standard token file found under `root`."""
    root = Path(root)
    if not root.is_dir():
        raise CorpusError(f"{root}: Flickr8K folder does not exist")
    token_path = token_path or find_token(root)
    if token_path is None:
        raise CorpusError(f"{root}: no {TEXT_DIR}/{TOKEN_FILE} (the standard Flickr8K caption file)")
    images_dir = find_dir(root, IMAGE_DIRS)
    if images_dir is None:
        raise CorpusError(f"{root}: no image folder (looked for {', '.join(IMAGE_DIRS)})")
    images = disk_images(images_dir)
    splits, _ = read_splits(root, list_dir(images_dir), images_dir)
    captions = keep_captions(_parse_tokens(token_path), images, token_path)
    corpus = Corpus(
        root=root,
        name=root.resolve().name or "flickr8k",
        format="flickr8k",
        images=images,
        captions=captions,
        splits=splits,
    )
    warn_uncaptioned(corpus)
    return corpus


def load_flickr8k(root: str | os.PathLike[str]) -> Corpus:
    """Read the standard Flickr8K layout: `Images/`, `Flickr8k_text/Flickr8k.token.txt`, split files.

    Splits are "train", "dev", "test" for whichever split files are present (the test split may be held
    back). Images on disk in no split are kept in `images` but in no split.
    """
    return read(Path(root))
