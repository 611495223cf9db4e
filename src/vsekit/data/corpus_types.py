"""The corpus type every reader returns: `Corpus` (images, captions, named splits) and its `Caption`.

The readers, one module per format, are in :mod:`vsekit.data.formats`; :func:`vsekit.data.corpus.load_corpus`
detects the format and calls one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from vsekit.data.images import ImageCollection
from vsekit.errors import CorpusError

__all__ = ["Caption", "Corpus", "ordered_splits"]

# "dev", "val" and "validation" name the same thing in different datasets; recipes may use any of them.
_SPLIT_ALIASES: tuple[frozenset[str], ...] = (frozenset({"dev", "val", "validation"}),)

# Order in which splits are listed (unknown names follow, in order of first appearance).
_SPLIT_ORDER = ("train", "restval", "dev", "val", "validation", "test")


@dataclass(frozen=True)
class Caption:
    """One caption; `source` ("file:line" or "file:images[12]") lets later errors point at its origin."""

    image_id: str
    text: str
    source: str


class Corpus:
    """Images, their captions and named splits, loaded from any supported format.

    `images` maps an image id (the file name relative to the image folder, e.g.
    ``"1000268201_693b08cb0e.jpg"``) to its path. `captions` keeps file order. `splits` maps a split name
    to its ordered image ids; images that belong to no split (Flickr8K has 91) stay in `images`.
    """

    def __init__(
        self,
        *,
        root: Path,
        name: str,
        format: str,
        images: dict[str, Path],
        captions: list[Caption],
        splits: dict[str, list[str]],
    ) -> None:
        self.root = Path(root)
        self.name = name
        self.format = format
        self.images = images
        self.captions = captions
        self.splits = splits
        for split_name, ids in splits.items():
            missing = [i for i in ids if i not in images]
            if missing:
                raise CorpusError(
                    f"{self.root}: split '{split_name}' names {len(missing)} image(s) not in the corpus "
                    f"(first: {missing[0]})"
                )

    # -- splits --------------------------------------------------------------------------------------

    def _resolve_split(self, name: str) -> str:
        if name in self.splits:
            return name
        for group in _SPLIT_ALIASES:
            if name in group:
                for alias in _SPLIT_ORDER:
                    if alias in group and alias in self.splits:
                        return alias
        available = ", ".join(self.splits) if self.splits else "none"
        raise CorpusError(f"{self.root}: no split '{name}' in corpus '{self.name}' (available: {available})")

    def default_split(self, preferred: str = "test") -> str:
        """The split a command uses when none is asked for: ``preferred`` when the corpus has it, else its
        only split (a CSV without a split column has just ``all``); several others are an error that lists
        them and says how to choose."""
        try:
            return self._resolve_split(preferred)
        except CorpusError:
            pass
        if len(self.splits) == 1:
            return next(iter(self.splits))
        available = ", ".join(self.splits) if self.splits else "none"
        raise CorpusError(
            f"{self.root}: corpus '{self.name}' has no '{preferred}' split; choose one with --split "
            f"(available: {available}; join several with '+', e.g. --split {'+'.join(list(self.splits)[:2])})"
        )

    def split(self, name: str) -> Corpus:
        """The images and captions of one split (aliases dev/val/validation; "a+b" joins splits).

        Captions come grouped by image in split order (file order within an image), so with 5 captions per
        image caption ``k`` belongs to image ``k // 5``: what retrieval evaluation wants.
        """
        parts = [self._resolve_split(part.strip()) for part in name.split("+")]
        return self.subset(
            (image_id for part in parts for image_id in self.splits[part]), split="+".join(parts)
        )

    def subset(self, image_ids: Iterable[str], split: str = "subset") -> Corpus:
        """The given images (in that order) and their captions, as a one-split corpus named ``split``."""
        ids = list(dict.fromkeys(image_ids))
        unknown = [i for i in ids if i not in self.images]
        if unknown:
            raise CorpusError(
                f"{self.root}: {len(unknown)} image id(s) not in this corpus, e.g. {unknown[0]!r}"
            )
        position = {image_id: k for k, image_id in enumerate(ids)}
        captions = sorted(
            (c for c in self.captions if c.image_id in position), key=lambda c: position[c.image_id]
        )
        return Corpus(
            root=self.root,
            name=self.name,
            format=self.format,
            images={image_id: self.images[image_id] for image_id in ids},
            captions=captions,
            splits={split: ids},
        )

    # -- views ---------------------------------------------------------------------------------------

    def image_ids(self) -> list[str]:
        """Image ids in a stable order: split order for a single-split corpus, else sorted."""
        if len(self.splits) == 1:
            (ordered,) = self.splits.values()
            in_split = set(ordered)
            return list(ordered) + sorted(i for i in self.images if i not in in_split)
        return sorted(self.images)

    def captions_by_image(self) -> dict[str, list[str]]:
        """Caption texts per image, keyed in `image_ids()` order (an image without captions maps to [])."""
        grouped: dict[str, list[str]] = {image_id: [] for image_id in self.image_ids()}
        for caption in self.captions:
            grouped.setdefault(caption.image_id, []).append(caption.text)
        return grouped

    def caption_texts(self) -> list[str]:
        """Caption texts, parallel to `captions` and `caption_image_ids()`."""
        return [c.text for c in self.captions]

    def caption_image_ids(self) -> list[str]:
        """The image id of each caption, parallel to `captions` (the ground truth for retrieval)."""
        return [c.image_id for c in self.captions]

    def image_collection(self) -> ImageCollection:
        """The corpus's images as an :class:`ImageCollection` (same name, root and ids; no captions)."""
        return ImageCollection(name=self.name, root=self.root, images=self.images)

    def verify_images(self) -> list[str]:
        """Ids whose file is missing on disk now (load only checked once; files can go away later)."""
        return [image_id for image_id, path in self.images.items() if not path.is_file()]

    def __len__(self) -> int:
        return len(self.images)

    def __repr__(self) -> str:
        splits = ", ".join(f"{k}={len(v)}" for k, v in self.splits.items())
        return (
            f"Corpus(name={self.name!r}, format={self.format!r}, images={len(self.images)}, "
            f"captions={len(self.captions)}, splits={{{splits}}}, root={str(self.root)!r})"
        )


def ordered_splits(splits: dict[str, list[str]]) -> dict[str, list[str]]:
    known = [s for s in _SPLIT_ORDER if s in splits]
    return {s: splits[s] for s in known + [s for s in splits if s not in known]}
