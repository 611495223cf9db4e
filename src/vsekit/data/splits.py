"""Validation slices: a fixed, seeded set of training images held out to select models on.

The selection protocol (docs/joint-embedding.md, "Selecting models honestly"): every choice a recipe makes
(epochs, seeds, ensemble members, rerank weights, beam, length penalty) is made on a *validation slice*
carved from the training split; the model trains on the rest of the training split; the dev split is read
once per shipped model, for the report. A slice is a JSON file (shipped ones live in
``src/vsekit/recipes/splits/``) listing its image ids and how they were drawn:

    {"name": "val1000", "corpus": "flickr8k", "source_split": "train", "size": 1000, "seed": 0,
     "method": "sha256-rank", "source_count": 6000, "source_sha256": "...", "image_ids": [...]}

``sha256-rank``: the ``size`` images of the source split with the smallest ``sha256("<seed>:<image id>")``,
listed in sorted order. The draw depends on nothing but the ids and the seed (not on file order, not on a
NumPy or Python version), so anyone with the split file can re-make the slice and check it.

:func:`apply_validation_slice` gives a corpus two more splits: ``<name>`` (the slice) and
``train-minus-<name>`` (the rest of the source split, in its order); recipes name them as their training
and selection splits.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vsekit.data.corpus import Corpus
from vsekit.errors import CorpusError, VsekitError
from vsekit.fileio import read_named_json
from vsekit.resources import SPLITS_DIR

__all__ = [
    "SLICE_METHOD",
    "ValidationSlice",
    "apply_validation_slice",
    "check_selection_splits",
    "corpus_for_selection",
    "draw_slice",
    "ids_sha256",
    "load_validation_slice",
    "make_validation_slice",
    "write_validation_slice",
]

SLICE_METHOD = "sha256-rank"


def ids_sha256(image_ids: list[str]) -> str:
    """The fingerprint of a set of image ids (sorted, one per line): what a slice was drawn from."""
    return hashlib.sha256("\n".join(sorted(image_ids)).encode()).hexdigest()


def draw_slice(image_ids: list[str], size: int, seed: int) -> list[str]:
    """The ``size`` ids with the smallest ``sha256("<seed>:<id>")``, sorted (the ``sha256-rank`` method)."""
    unique = sorted(set(image_ids))
    if not 0 < size < len(unique):
        raise VsekitError(f"a validation slice of {size} images needs more than {size} source images")
    ranked = sorted(unique, key=lambda i: hashlib.sha256(f"{seed}:{i}".encode()).hexdigest())
    return sorted(ranked[:size])


@dataclass(frozen=True)
class ValidationSlice:
    """A slice file's content; ``path`` is where it was read from (for error messages)."""

    name: str
    source_split: str
    image_ids: tuple[str, ...]
    seed: int
    method: str = SLICE_METHOD
    corpus: str = ""
    source_count: int = 0
    source_sha256: str = ""
    description: str = ""
    path: str = ""

    @property
    def fit_split(self) -> str:
        """The name of the training split without the slice."""
        return f"{self.source_split}-minus-{self.name}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "corpus": self.corpus,
            "source_split": self.source_split,
            "size": len(self.image_ids),
            "seed": self.seed,
            "method": self.method,
            "source_count": self.source_count,
            "source_sha256": self.source_sha256,
            "image_ids": list(self.image_ids),
        }


def make_validation_slice(
    corpus: Corpus, name: str, size: int, seed: int, source_split: str = "train", description: str = ""
) -> ValidationSlice:
    """Draw a slice of ``size`` images from ``corpus``'s ``source_split`` (captioned images only)."""
    split = corpus.split(source_split)
    captioned = [i for i, caps in split.captions_by_image().items() if caps]
    return ValidationSlice(
        name=name,
        source_split=source_split,
        image_ids=tuple(draw_slice(captioned, size, seed)),
        seed=seed,
        corpus=corpus.name,
        source_count=len(captioned),
        source_sha256=ids_sha256(captioned),
        description=description,
    )


def load_validation_slice(name_or_path: str | os.PathLike[str]) -> ValidationSlice:
    """A shipped slice by name (``"flickr8k-val1000"``) or a slice JSON file by path; errors name the file."""
    data, path = read_named_json(name_or_path, SPLITS_DIR, "validation slice")

    def bad(why: str) -> VsekitError:
        return VsekitError(f"{path}: not a validation slice ({why})")

    if not isinstance(data, dict):
        raise bad("expected a JSON object")
    ids = data.get("image_ids")
    if not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids):
        raise bad("field 'image_ids' must be a non-empty list of image ids")
    if len(set(ids)) != len(ids):
        raise bad("field 'image_ids' lists an image twice")
    for key, kind in (("name", str), ("source_split", str), ("seed", int)):
        if not isinstance(data.get(key), kind):
            raise bad(f"field '{key}' must be {kind.__name__}")
    if data.get("size", len(ids)) != len(ids):
        raise bad(f"field 'size' says {data['size']} but 'image_ids' lists {len(ids)}")
    return ValidationSlice(
        name=data["name"],
        source_split=data["source_split"],
        image_ids=tuple(ids),
        seed=data["seed"],
        method=str(data.get("method", SLICE_METHOD)),
        corpus=str(data.get("corpus", "")),
        source_count=int(data.get("source_count", 0)),
        source_sha256=str(data.get("source_sha256", "")),
        description=str(data.get("description", "")),
        path=str(path),
    )


def apply_validation_slice(corpus: Corpus, vslice: ValidationSlice) -> Corpus:
    """``corpus`` with two more splits: ``vslice.name`` and ``vslice.fit_split`` (the source split minus the
    slice, in the source's order). Every slice image must be in the source split: a slice made for another
    corpus is a CorpusError naming the slice file and an image it lacks."""
    where = vslice.path or vslice.name
    if vslice.source_split not in corpus.splits:
        raise CorpusError(
            f"{where}: the slice is drawn from split '{vslice.source_split}', which {corpus.root} "
            "does not have"
        )
    source = corpus.splits[vslice.source_split]
    held = set(vslice.image_ids)
    missing = sorted(held - set(source))
    if missing:
        raise CorpusError(
            f"{where}: {len(missing)} slice image(s) are not in split '{vslice.source_split}' of "
            f"{corpus.root} (first: {missing[0]}): this slice was made for another corpus"
        )
    for name in (vslice.name, vslice.fit_split):
        if name in corpus.splits:
            raise CorpusError(f"{where}: {corpus.root} already has a split named '{name}'")
    splits = {
        **corpus.splits,
        vslice.fit_split: [i for i in source if i not in held],
        vslice.name: [i for i in source if i in held],
    }
    return Corpus(
        root=corpus.root,
        name=corpus.name,
        format=corpus.format,
        images=corpus.images,
        captions=corpus.captions,
        splits=splits,
    )


def check_selection_splits(
    source: str, train_split: str, dev_split: str, vslice: ValidationSlice | None
) -> None:
    """With a slice, a recipe trains on ``<source>-minus-<slice>`` and selects on the slice: anything else
    (selecting on dev, training on the whole source split) breaks the protocol and is an error naming the
    recipe field."""
    if vslice is None:
        return
    if dev_split != vslice.name:
        raise VsekitError(
            f"{source}: field 'dev_split' must be {vslice.name!r} with validation_slice "
            f"{vslice.path or vslice.name!r} (models are selected on the slice; got {dev_split!r})"
        )
    if train_split != vslice.fit_split:
        raise VsekitError(
            f"{source}: field 'train_split' must be {vslice.fit_split!r} with validation_slice "
            f"{vslice.path or vslice.name!r} (the slice's images are held out of training; "
            f"got {train_split!r})"
        )


def corpus_for_selection(
    corpus: Corpus, train_split: str, dev_split: str, validation_slice: str | None, source: str
) -> Corpus:
    """What a trainer trains and selects on: ``corpus`` itself without a slice; with one (a shipped name or
    a file), ``corpus`` plus the slice's two splits, after :func:`check_selection_splits`."""
    if validation_slice is None:
        return corpus
    vslice = load_validation_slice(validation_slice)
    check_selection_splits(source, train_split, dev_split, vslice)
    return apply_validation_slice(corpus, vslice)


def write_validation_slice(vslice: ValidationSlice, path: str | os.PathLike[str]) -> Path:
    """Write ``vslice`` as JSON (ids one per line, so a diff shows which images changed)."""
    from vsekit.fileio import atomic_write_text

    data = vslice.to_dict()
    ids = data.pop("image_ids")
    head = json.dumps(data, indent=2)[:-2]  # without the closing "\n}"
    body = ",\n".join(f"    {json.dumps(i)}" for i in ids)
    return atomic_write_text(Path(path), f'{head},\n  "image_ids": [\n{body}\n  ]\n}}\n')
