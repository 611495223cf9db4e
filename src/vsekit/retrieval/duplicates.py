"""Near-duplicate photos: groups of photos whose joint-space vectors are almost the same.

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

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from tqdm.auto import tqdm

from vsekit.errors import VsekitError

if TYPE_CHECKING:
    from vsekit.retrieval.segments import LiveVectors

__all__ = ["DEFAULT_THRESHOLD", "duplicate_groups", "duplicate_pairs"]

logger = logging.getLogger(__name__)

#: Cosine at or above which two photos count as near-duplicates (the shipped ``vse``; see the module doc).
DEFAULT_THRESHOLD = 0.74
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
