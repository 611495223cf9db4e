"""What the corpus readers share: directory listings, text and JSON files read with errors that name the
file and line, the checks every format makes (disjoint splits, captions of missing images, images
without captions), and the streamed-else-whole JSON route."""

from __future__ import annotations

import json
import logging
import os
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from vsekit.data import jsonstream
from vsekit.data.corpus_types import Caption, Corpus
from vsekit.errors import TRAIN_EXTRA_PIP, CorpusError

logger = logging.getLogger(__name__)

IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff"})


def list_dir(directory: Path) -> set[str]:
    """File names in `directory` (one listing: far cheaper than a stat per image)."""
    try:
        with os.scandir(directory) as entries:
            return {e.name for e in entries if not e.is_dir()}
    except FileNotFoundError:
        raise CorpusError(f"{directory}: image folder does not exist") from None
    except NotADirectoryError:
        raise CorpusError(f"{directory}: image folder is not a directory") from None
    except ValueError:  # a NUL byte in the name
        raise CorpusError(f"{str(directory)!r}: not a valid folder name") from None


def disk_images(directory: Path) -> dict[str, Path]:
    """Every image file in `directory`, by name (hidden files and non-images are skipped)."""
    return {
        name: directory / name
        for name in sorted(list_dir(directory))
        if not name.startswith(".") and Path(name).suffix.lower() in IMAGE_EXTENSIONS
    }


def find_dir(base: Path, names: Iterable[str]) -> Path | None:
    for name in names:
        if (base / name).is_dir():
            return base / name
    return None


def default_images_dir(anchor: Path) -> Path:
    """`Images/` or `images/` next to a captions file, else its own folder."""
    return find_dir(anchor.parent, ("Images", "images")) or anchor.parent


def read_lines(path: Path) -> list[str]:
    """Lines without their line ends; CRLF files (some Flickr8K copies) read like LF files.

    Only \\n, \\r\\n and \\r end a line (universal newlines), as in an editor: ``str.splitlines`` would
    also split a caption at \\x1c, \\x0c or U+2028 and shift every later line number.
    """
    try:
        with open(path, encoding="utf-8-sig") as f:
            lines = f.read().split("\n")
    except FileNotFoundError:
        raise CorpusError(f"{path}: file does not exist") from None
    except UnicodeDecodeError as e:
        raise CorpusError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    if lines[-1] == "":
        lines.pop()
    return lines


def read_json(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8-sig") as f:
            return json.load(f)
    except FileNotFoundError:
        raise CorpusError(f"{path}: file does not exist") from None
    except json.JSONDecodeError as e:
        raise CorpusError(f"{path}:{e.lineno}: invalid JSON: {e.msg}") from None
    except UnicodeDecodeError as e:
        raise CorpusError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except RecursionError:
        raise CorpusError(f"{path}: invalid JSON: nested too deeply") from None


def check_disjoint(splits: dict[str, list[str]], where: dict[str, str]) -> None:
    """An image in two splits would leak test data into training: refuse it."""
    owner: dict[str, str] = {}
    for split, ids in splits.items():
        for image_id in ids:
            other = owner.setdefault(image_id, split)
            if other != split:
                raise CorpusError(
                    f"image '{image_id}' is in split '{other}' ({where[other]}) "
                    f"and in split '{split}' ({where[split]})"
                )


def keep_captions(captions: list[Caption], images: dict[str, Path], what: Path) -> list[Caption]:
    """Drop (with a warning) captions of images that are neither on disk nor in a split.

    Split membership was checked before this, so what is left are strays such as the original Flickr8K
    line naming ``2258277193_586949ec62.jpg.1``: not worth failing a run for, worth a visible warning.
    """
    kept = [c for c in captions if c.image_id in images]
    dropped = [c for c in captions if c.image_id not in images]
    if dropped:
        n_images = len({c.image_id for c in dropped})
        warnings.warn(
            f"{what}: dropped {len(dropped)} caption(s) of {n_images} image(s) that are not on disk and "
            f"in no split (first: {dropped[0].source}: '{dropped[0].image_id}')",
            stacklevel=3,
        )
    return kept


def warn_uncaptioned(corpus: Corpus) -> None:
    captioned = {c.image_id for c in corpus.captions}
    for split, ids in corpus.splits.items():
        bare = [i for i in ids if i not in captioned]
        if bare:
            warnings.warn(
                f"{corpus.root}: {len(bare)} image(s) of split '{split}' have no caption "
                f"(first: '{bare[0]}')",
                stacklevel=3,
            )


def read_streamed(stream: Callable[[], Corpus], whole: Callable[[], Corpus]) -> Corpus:
    """``stream()`` (one entry at a time: :mod:`vsekit.data.jsonstream`), else ``whole()`` (the reader
    over the parsed file): without ijson, for a file the stream does not handle, and for any error,
    which the whole-file reader then reports as it always has (naming the file, entry and line)."""
    if not jsonstream.available():
        logger.info("ijson is not installed (the train extra: %s): reading the file whole", TRAIN_EXTRA_PIP)
        return whole()
    try:
        return stream()
    except jsonstream.STREAM_ERRORS + (OSError, CorpusError):
        return whole()
