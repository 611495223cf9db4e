"""Several photo indexes searched as one: each shard answers its own top k, the answers merge by score.

A collection too large for one index (or built on several machines) is several index directories, each
built by ``vsekit index build`` with the same model. :class:`ShardedIndex` opens them together; a query
is embedded once, every shard finds its best ``k`` with its own engine (exact, HNSW, IVF or IVF-PQ), and
the merged top ``k`` is the best ``k`` of those lists by cosine. That is exactly the top ``k`` of the
union: every one of the union's best ``k`` is among its own shard's best ``k``. Ties go to the earlier
shard, then the lower row, as a single index orders them (row ``r`` of shard ``s`` is global id
``offset(s) + r``, the shards' sizes summed before it).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from vsekit.errors import ConfigMismatchError, VsekitError
from vsekit.retrieval.index import Index
from vsekit.retrieval.query import SearchHit, hits_from, without_copies
from vsekit.retrieval.search import _best_first

if TYPE_CHECKING:  # a photo query loads the model (torch) where it is embedded
    from vsekit.embedding.pipeline import ImageInput

__all__ = ["ShardedIndex", "merge_top_k"]


def merge_top_k(
    parts: Sequence[tuple[np.ndarray, np.ndarray]], sizes: Sequence[int], k: int
) -> tuple[np.ndarray, np.ndarray]:
    """The best ``k`` per query of every shard's ``(scores [q, k_s], rows [q, k_s])`` (row -1: none),
    rows made global by adding the sizes of the shards before; score descending, then global row."""
    if len(parts) != len(sizes) or not parts:
        raise VsekitError(f"merge_top_k: {len(parts)} result sets for {len(sizes)} shards")
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    scores = np.concatenate([np.asarray(s, dtype=np.float32) for s, _ in parts], axis=1)
    rows = np.concatenate(
        [np.where(r >= 0, r + off, -1) for (_, r), off in zip(parts, offsets, strict=True)], axis=1
    )
    return _best_first(scores, rows, k)


class ShardedIndex:
    """Index directories built with one model, searched together (module docstring). Hits carry the
    global id and the photo's absolute path (shards may index different folders)."""

    def __init__(self, shards: Sequence[Index]) -> None:
        if not shards:
            raise VsekitError("a sharded search needs at least one index directory")
        first = shards[0].manifest["model"]
        for shard in shards[1:]:
            other = shard.manifest["model"]
            if other["sha256"] != first["sha256"]:
                raise ConfigMismatchError(
                    f"{shard.path}: built with model {other['name']} (sha256 {other['sha256'][:12]}), "
                    f"not {first['name']} (sha256 {first['sha256'][:12]}) as {shards[0].path}; "
                    "shards searched together need one model"
                )
        self.shards = list(shards)
        self.sizes = [len(s) for s in self.shards]
        self.paths = [str(s.photos_dir / p) for s in self.shards for p in s.paths]

    @classmethod
    def open(cls, dirs: Sequence[str | os.PathLike[str]]) -> ShardedIndex:
        """The index directories ``dirs`` (each written by ``vsekit index build``), as one."""
        return cls([Index.open(Path(d)) for d in dirs])

    def __len__(self) -> int:
        return sum(self.sizes)

    def _vector(self, row: int) -> np.ndarray:
        for shard, size in zip(self.shards, self.sizes, strict=True):
            if row < size:
                return np.asarray(shard.vectors[row], dtype=np.float32)
            row -= size
        raise IndexError(row)

    def nearest(
        self, queries: np.ndarray, k: int, engine: str | None = None, leave_out: str | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Merged ``(scores, global rows)`` of the ``k`` best per unit query vector (``leave_out``: the
        photos whose bytes have this sha256 are not searched)."""
        if k < 1:
            raise VsekitError(f"k must be >= 1, got {k}")
        queries = np.atleast_2d(np.asarray(queries, dtype=np.float32))
        parts = []
        for s in self.shards:
            if not len(s):
                empty = (
                    np.full((len(queries), 0), -np.inf, np.float32),
                    np.full((len(queries), 0), -1, np.int64),
                )
                parts.append(empty)
                continue
            keep = without_copies(s._view, None, leave_out) if leave_out is not None else None
            parts.append(s._nearest(queries, min(k, len(s)), engine, view=s._view, keep=keep))
        return merge_top_k(parts, self.sizes, k)

    def copies(self, sha256: str) -> list[str]:
        """The photos of every shard whose bytes have ``sha256`` (absolute paths, as hits show them)."""
        return [str(s.photos_dir / p) for s in self.shards for p in s.copies(sha256)]

    def search_vectors(
        self,
        queries: np.ndarray,
        k: int = 10,
        *,
        min_score: float | None = None,
        resort: int = 0,
        engine: str | None = None,
        leave_out: str | None = None,
    ) -> list[list[SearchHit]]:
        """As :meth:`Index.search_vectors`, over every shard."""
        want = max(1, min(max(k, resort), len(self)))
        scores, rows = self.nearest(queries, want, engine, leave_out)
        return hits_from(scores, rows, self.paths, self._vector, k, min_score, resort)

    def search(
        self,
        text: str | None = None,
        image: ImageInput | None = None,
        *,
        vector: np.ndarray | None = None,
        plus: Sequence[str] = (),
        minus: Sequence[str] = (),
        weight: float | None = None,
        k: int = 10,
        min_score: float | None = None,
        resort: int = 0,
        engine: str | None = None,
        leave_out: str | None = None,
    ) -> list[SearchHit]:
        """As :meth:`Index.search`; the query is embedded once, by the first shard's model."""
        query = self.shards[0].query_vector(text, image, vector=vector, plus=plus, minus=minus, weight=weight)
        options: dict[str, Any] = dict(min_score=min_score, resort=resort, engine=engine, leave_out=leave_out)
        return self.search_vectors(query[None], k, **options)[0]

    def search_texts(
        self, texts: Sequence[str], k: int = 10, min_score: float | None = None, engine: str | None = None
    ) -> list[list[SearchHit]]:
        return self.search_vectors(self.shards[0].embed_texts(texts), k, min_score=min_score, engine=engine)
