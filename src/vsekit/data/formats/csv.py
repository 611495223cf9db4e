"""A one-file ``image,caption[,split]`` CSV (the popular Kaggle form of Flickr8K/Flickr30K)."""

from __future__ import annotations

import csv
import os
from pathlib import Path

from vsekit.data.corpus_types import Caption, Corpus, ordered_splits
from vsekit.data.formats import flickr8k
from vsekit.data.formats._shared import (
    default_images_dir,
    disk_images,
    keep_captions,
    list_dir,
    warn_uncaptioned,
)
from vsekit.errors import CorpusError


def load_csv(path: str | os.PathLike[str], images_dir: str | os.PathLike[str] | None = None) -> Corpus:
    """Read an ``image,caption[,split]`` CSV (csv module quoting, so captions may contain commas).

    The image folder defaults to `Images/` or `images/` next to the CSV, else the CSV's folder. Without a
    split column the splits come from Flickr8K split files next to the CSV, else one split "all" made of
    the images the CSV names (those missing on disk are dropped with a warning, since no split file says
    they must exist; if none is on disk the image folder is wrong and that is an error).
    """
    path = Path(path)
    img_dir = Path(images_dir) if images_dir is not None else default_images_dir(path)
    images = disk_images(img_dir)
    on_disk = list_dir(img_dir)
    expected = "expected header 'image,caption' (optional third column 'split')"
    try:
        f = open(path, encoding="utf-8-sig", newline="")
    except FileNotFoundError:
        raise CorpusError(f"{path}: file does not exist") from None
    captions: list[Caption] = []
    row_splits: dict[str, list[str]] = {}
    split_of: dict[str, tuple[str, int]] = {}
    with f:
        reader = csv.reader(f)
        try:
            header = next(reader, None)
            if header is None:
                raise CorpusError(f"{path}: empty file; {expected}")
            columns = [h.strip().lower() for h in header]
            if columns not in (["image", "caption"], ["image", "caption", "split"]):
                raise CorpusError(f"{path}:1: {expected}, found {','.join(header)!r}")
            has_split = len(columns) == 3
            for row in reader:
                lineno = reader.line_num
                if not row or not any(field.strip() for field in row):
                    continue
                if len(row) != len(columns):
                    raise CorpusError(
                        f"{path}:{lineno}: expected {len(columns)} fields ({','.join(columns)}), "
                        f"found {len(row)} (quote captions that contain commas)"
                    )
                image_id, text = row[0].strip(), row[1].strip()
                if not image_id:
                    raise CorpusError(f"{path}:{lineno}: empty image name")
                if not text:
                    raise CorpusError(f"{path}:{lineno}: empty caption")
                captions.append(Caption(image_id, text, f"{path}:{lineno}"))
                split = row[2].strip() if has_split else ""
                if not split:
                    continue
                if image_id not in on_disk:
                    raise CorpusError(
                        f"{path}:{lineno}: image '{image_id}' of split '{split}' is not in {img_dir}"
                    )
                previous = split_of.get(image_id)
                if previous is None:
                    split_of[image_id] = (split, lineno)
                    row_splits.setdefault(split, []).append(image_id)
                elif previous[0] != split:
                    raise CorpusError(
                        f"{path}:{lineno}: image '{image_id}' is in split '{split}' here but in split "
                        f"'{previous[0]}' on line {previous[1]}"
                    )
        except csv.Error as e:
            raise CorpusError(f"{path}:{reader.line_num}: malformed CSV: {e}") from None
        except UnicodeDecodeError as e:
            raise CorpusError(
                f"{path}: not UTF-8 text ({e.reason} near line {reader.line_num + 1})"
            ) from None

    if has_split:
        splits = ordered_splits(row_splits)
    else:
        splits, _ = flickr8k.read_splits(path.parent, on_disk, img_dir)
        if not splits:
            named = list(dict.fromkeys(c.image_id for c in captions))
            present = [i for i in named if i in images]
            if named and not present:
                raise CorpusError(
                    f"{path}: none of the {len(named)} images it names is in {img_dir} "
                    "(pass images_dir= to point at the image folder)"
                )
            splits = {"all": present}
    captions = keep_captions(captions, images, path)
    corpus = Corpus(
        root=path.parent,
        name=path.parent.resolve().name or path.stem,
        format="csv",
        images=images,
        captions=captions,
        splits=splits,
    )
    warn_uncaptioned(corpus)
    return corpus
