"""Duplicate photos, two kinds: exact copies (the same bytes, or the same decoded pixels) and
near-duplicates (groups of photos whose joint-space vectors are almost the same).

:func:`find_duplicates` is what ``vsekit index duplicates``, ``/api/duplicates`` and the page show: exact
copies first (same sha256, which the index records; or, for pairs whose vectors agree to 1e-4, the same
upright RGB pixels, decoded to check), then near-duplicate groups over distinct photos (a photo's exact
copies ride along with it). Each group names a suggested keeper (the most pixels, then the most bytes, then
the earliest date taken, then the shortest path) and its photos' bytes, resolution and date. Nothing here
deletes or moves a file.

The joint space is semantic: two different photos of one subject (two fish over sand) can score 0.82. A pair
below :data:`CERTAIN_COSINE` is therefore kept only if the two photos also *look* alike: their difference
hashes (dHash, 16 x 16 brightness gradients of the upright grey photo) differ in at most
:data:`DHASH_BITS` of 256 bits. On the everyday labelled set (``bench/bench_duplicate_kinds.py``) every
distinct pair above 0.74 differed in 99 bits or more, while re-saved, resized, cropped and burst copies of
one photo differed in at most 95, and those beyond 64 all scored 0.78 or more.

Two photos are near-duplicates when the cosine of their vectors is at least ``threshold``; a group is a
connected component of that relation (union-find), so a burst of five shots of one scene is one group
even if the first and last are a little further apart. The search is exact: blocks of rows against all
rows (``[block, n]`` cosines at a time, bounded memory), which costs ``n^2 * K`` multiply-adds: about a
second for 10,000 photos and a few minutes for 100,000 on 2 cores.

The default threshold is measured, not guessed: ``bench/bench_duplicates.py`` embeds 300 Flickr8K training
photos and copies of them re-encoded (JPEG quality 60), resized to half size and cropped by 5 %, and
compares their cosines with the cosine of each photo's nearest *other* photo among 1,300. 0.74 is the
lowest threshold at which 99 % of the pairs it calls duplicates are copies (recall: 100 % of the
re-encoded and cropped copies, 42 % of the half-size ones, which on these 224-px photos are 112 px); the
joint space is semantic, so two different photos of one scene can pass it (the hardest distinct pair
scored 0.83). See ``bench/results/duplicates.json``.
"""

from __future__ import annotations

import functools
import hashlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from PIL import Image
from tqdm.auto import tqdm

from vsekit.errors import ImageError, VsekitError
from vsekit.vision.preprocess import EXIF_ORIENTATION, load_image

if TYPE_CHECKING:
    from vsekit.retrieval.segments import LiveVectors

__all__ = [
    "DEFAULT_THRESHOLD",
    "DuplicateGroup",
    "GroupPhoto",
    "duplicate_groups",
    "duplicate_pairs",
    "find_duplicates",
]

logger = logging.getLogger(__name__)

#: Cosine at or above which two photos count as near-duplicates (the shipped ``vse``; see the module doc).
DEFAULT_THRESHOLD = 0.74
#: Vectors this close may be the same pixels in other bytes (a re-saved PNG, stripped metadata): decoded
#: to check. The same pixels give the same vector, so no exact copy is missed by this cut.
SAME_PIXELS_COSINE = 0.9999
#: From this cosine on a pair is a near-duplicate without looking at the pixels (module docstring).
CERTAIN_COSINE = 0.85
#: Below it, the most dHash bits (of 256) two near-duplicates may differ in.
DHASH_BITS = 64
_DHASH_SIDE = 16
_BLOCK = 512


def duplicate_pairs(
    vectors: np.ndarray | LiveVectors, threshold: float = DEFAULT_THRESHOLD, progress: bool = False
) -> list[tuple[int, int, float]]:
    """Every pair ``(i, j, cosine)`` with ``i < j`` and cosine >= ``threshold`` (unit-norm rows)."""
    if not -1.0 <= threshold <= 1.0:
        raise VsekitError(f"threshold must be a cosine between -1 and 1, got {threshold}")
    n = len(vectors)
    pairs: list[tuple[int, int, float]] = []
    starts = range(0, n, _BLOCK)
    for start in tqdm(starts, desc="compare photos", unit="block", disable=not progress or n <= _BLOCK):
        block = np.asarray(vectors[start : start + _BLOCK], dtype=np.float32)
        rest = np.asarray(vectors[start:], dtype=np.float32)  # only j >= start: each pair once
        cosines = block @ rest.T
        rows, cols = np.nonzero(cosines >= threshold)
        for r, c in zip(rows.tolist(), cols.tolist(), strict=True):
            i, j = start + r, start + c
            if i < j:
                pairs.append((i, j, float(cosines[r, c])))
    return pairs


def duplicate_groups(
    vectors: np.ndarray | LiveVectors,
    paths: Sequence[str],
    threshold: float = DEFAULT_THRESHOLD,
    progress: bool = False,
) -> list[list[str]]:
    """Groups of near-duplicate photos (two or more paths each): largest first, paths sorted in a group."""
    if len(vectors) != len(paths):
        raise VsekitError(f"{len(vectors)} vectors for {len(paths)} paths")
    parent = list(range(len(paths)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]  # path halving keeps the trees flat
            i = parent[i]
        return i

    for i, j, _ in duplicate_pairs(vectors, threshold, progress):
        a, b = root(i), root(j)
        if a != b:
            parent[max(a, b)] = min(a, b)
    members: dict[int, list[str]] = {}
    for i, path in enumerate(paths):
        members.setdefault(root(i), []).append(path)
    groups = [sorted(group) for group in members.values() if len(group) > 1]
    return sorted(groups, key=lambda g: (-len(g), g[0]))


@dataclass(frozen=True)
class GroupPhoto:
    """One photo of a group: ``path`` (relative to the photo folder), its ``bytes``, upright ``width`` and
    ``height`` (None when the file cannot be read now), ``taken`` (EXIF date, if any) and, in a near
    group, the paths of its exact ``copies``."""

    path: str
    bytes: int
    width: int | None
    height: int | None
    taken: str | None
    copies: tuple[str, ...] = ()

    def keep_order(self) -> tuple:
        """Sort key of the suggested keeper: most pixels, most bytes, earliest taken, shortest path."""
        pixels = (self.width or 0) * (self.height or 0)
        return (-pixels, -self.bytes, self.taken is None, self.taken or "", len(self.path), self.path)

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "bytes": self.bytes,
            "width": self.width,
            "height": self.height,
            "taken": self.taken,
            "copies": list(self.copies),
        }


@dataclass
class DuplicateGroup:
    """``kind`` ``exact`` (same bytes or pixels) or ``near``; ``score``: 1 for exact copies, else the
    lowest cosine between two of its photos; ``photos``: the suggested keeper first."""

    kind: str
    score: float
    photos: list[GroupPhoto] = field(default_factory=list)

    @property
    def keeper(self) -> GroupPhoto:
        return self.photos[0]

    def others(self) -> list[str]:
        """Every path but the keeper's (with their exact copies in a near group, and the keeper's)."""
        rest = [q for p in self.photos[1:] for q in (p.path, *p.copies)]
        return rest + list(self.keeper.copies)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "score": round(self.score, 4),
            "keeper": self.keeper.path,
            "photos": [p.to_dict() for p in self.photos],
        }


def find_duplicates(
    vectors: np.ndarray | LiveVectors,
    paths: Sequence[str],
    records: Mapping[str, Mapping[str, Any]],
    photos_dir: Path,
    threshold: float = DEFAULT_THRESHOLD,
    progress: bool = False,
) -> tuple[list[DuplicateGroup], list[DuplicateGroup]]:
    """``(exact, near)`` groups (module docstring), largest first. ``records[path]``: the index's ``size``,
    ``sha256`` and ``taken`` of each photo."""
    if len(vectors) != len(paths):
        raise VsekitError(f"{len(vectors)} vectors for {len(paths)} paths")
    pairs = duplicate_pairs(vectors, min(threshold, SAME_PIXELS_COSINE), progress)
    sets = _Union(len(paths))
    by_sha: dict[str, int] = {}
    for i, path in enumerate(paths):
        sets.join(i, by_sha.setdefault(str(records[path]["sha256"]), i))
    pixels: dict[int, str | None] = {}
    for i, j, cos in pairs:
        if cos >= SAME_PIXELS_COSINE and sets.find(i) != sets.find(j):
            digest = _pixel_digest(photos_dir, paths, i, pixels)
            if digest is not None and digest == _pixel_digest(photos_dir, paths, j, pixels):
                sets.join(i, j)
    looks: dict[int, np.ndarray | None] = {}
    pairs = [
        (i, j, cos)
        for i, j, cos in pairs
        if cos >= CERTAIN_COSINE or cos < threshold or _look_alike(photos_dir, paths, i, j, looks)
    ]
    photo = _photo_reader(paths, records, photos_dir)
    exact_sets = sets.members()
    exact = [_group("exact", 1.0, [photo(i) for i in members]) for members in exact_sets if len(members) > 1]
    near = _near_groups(vectors, pairs, threshold, sets, exact_sets, photo)
    order = lambda g: (-len(g.photos), g.keeper.path)  # noqa: E731
    return sorted(exact, key=order), sorted(near, key=order)


def _near_groups(vectors, pairs, threshold, exact, exact_sets, photo) -> list[DuplicateGroup]:
    """Connected components of the near pairs over distinct photos (one per exact set)."""
    near = _Union(len(exact.parent))
    for i, j, cos in pairs:
        if cos >= threshold:
            near.join(exact.find(i), exact.find(j))
    first = {exact.find(m[0]): m for m in exact_sets}
    groups = []
    for roots in near.members():
        distinct = [r for r in roots if r in first]
        if len(distinct) < 2:
            continue
        members = []
        for r in distinct:  # each distinct photo: its set's keeper, the rest as its copies
            copies = sorted((photo(i) for i in first[r]), key=GroupPhoto.keep_order)
            members.append(replace(copies[0], copies=tuple(c.path for c in copies[1:])))
        keep = [first[r][0] for r in distinct]
        rows = np.asarray(np.stack([np.asarray(vectors[i], dtype=np.float32) for i in keep]))
        score = float((rows @ rows.T)[np.triu_indices(len(keep), 1)].min())
        groups.append(_group("near", score, members))
    return groups


def _group(kind: str, score: float, photos: list[GroupPhoto]) -> DuplicateGroup:
    return DuplicateGroup(kind, score, sorted(photos, key=GroupPhoto.keep_order))


class _Union:
    """Union-find over ``n`` items (path halving; the smaller index is the root)."""

    def __init__(self, n: int) -> None:
        self.parent = list(range(n))

    def find(self, i: int) -> int:
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def join(self, i: int, j: int) -> None:
        a, b = self.find(i), self.find(j)
        if a != b:
            self.parent[max(a, b)] = min(a, b)

    def members(self) -> list[list[int]]:
        out: dict[int, list[int]] = {}
        for i in range(len(self.parent)):
            out.setdefault(self.find(i), []).append(i)
        return list(out.values())


def _pixel_digest(photos_dir: Path, paths: Sequence[str], i: int, cache: dict[int, str | None]) -> str | None:
    """sha256 of photo ``i``'s upright RGB pixels and size (None: unreadable now)."""
    if i not in cache:
        try:
            image = load_image(photos_dir / paths[i])
            cache[i] = hashlib.sha256(f"{image.size}".encode() + image.tobytes()).hexdigest()
        except ImageError:
            cache[i] = None
    return cache[i]


def _look_alike(photos_dir: Path, paths: Sequence[str], i: int, j: int, cache: dict) -> bool:
    """Whether photos ``i`` and ``j`` differ in at most :data:`DHASH_BITS` dHash bits (unreadable: no)."""
    for k in (i, j):
        if k not in cache:
            try:
                grey = load_image(photos_dir / paths[k]).convert("L")
                small = np.asarray(
                    grey.resize((_DHASH_SIDE + 1, _DHASH_SIDE), Image.Resampling.BILINEAR), dtype=np.int16
                )
                cache[k] = small[:, 1:] > small[:, :-1]
            except ImageError:
                cache[k] = None
    a, b = cache[i], cache[j]
    return a is not None and b is not None and int((a != b).sum()) <= DHASH_BITS


def _photo_reader(paths: Sequence[str], records: Mapping[str, Mapping[str, Any]], photos_dir: Path):
    """``photo(i)``: the :class:`GroupPhoto` of row ``i`` (its size read from the file's header, once: an
    exact copy's photo is shown in its exact group and again in a near group)."""

    @functools.cache
    def photo(i: int) -> GroupPhoto:
        path, record = paths[i], records[paths[i]]
        width, height = _upright_size(photos_dir / path)
        return GroupPhoto(path, int(record["size"]), width, height, record.get("taken"))

    return photo


def _upright_size(path: Path) -> tuple[int | None, int | None]:
    """Width and height as a viewer shows the photo (EXIF orientations 5-8 swap them), header only."""
    try:
        with Image.open(path) as img:
            width, height = img.size
            turned = img.getexif().get(EXIF_ORIENTATION, 1) in (5, 6, 7, 8)
    except (OSError, ValueError, Image.DecompressionBombError):
        return None, None
    return (height, width) if turned else (width, height)
