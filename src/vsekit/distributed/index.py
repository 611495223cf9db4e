"""`vsekit index build --distributed ray`: the photo index's chunks embedded by a Ray actor pool.

The single-process build already cuts the photos to embed into chunks whose names hash their content
and commits each one atomically under ``pending/`` (:mod:`vsekit.retrieval.index`). Here the chunks that
are not committed yet are the shards: each actor loads the joint model once (checking that its file has
the sha256 the index records), embeds whole chunks with :func:`~vsekit.retrieval.index.embed_chunk` (the
function the single-process build runs), and the driver commits each chunk as it comes back, then writes
the embeddings, the ANN structure and the manifest exactly as the single-process build does. A rerun
after a failure or a kill embeds only the chunks that are missing. Actors read the photos by absolute
path (on a multi-node cluster, a file system every node mounts at the same path); the index is written
by the driver alone.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from vsekit.distributed.pool import RayOptions, ShardPool, ray_session
from vsekit.embedding.pipeline import VSEModel
from vsekit.errors import ConfigMismatchError
from vsekit.retrieval.index import ChunkResult, Index, embed_chunk
from vsekit.retrieval.photos import PhotoFile

__all__ = ["IndexShardWorker", "RayChunkRunner", "ray_build_index"]


def _sha256(path: str | os.PathLike[str]) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class IndexShardWorker:
    """Lives in an actor: the joint model, loaded once and checked against the index's sha256;
    ``worker((chunk, previous))`` is :func:`~vsekit.retrieval.index.embed_chunk`."""

    def __init__(self, model: str, sha256: str, device: str) -> None:
        self.model = VSEModel.load(model, device=device)
        assert self.model.path is not None  # VSEModel.load keeps the file's path
        found = _sha256(self.model.path)
        if found != sha256:
            raise ConfigMismatchError(
                f"{self.model.path}: the model file on this Ray node has sha256 {found[:12]}, the index "
                f"was built with {sha256[:12]}; install the same model on every node"
            )

    def __call__(self, payload: tuple[list[PhotoFile], dict[str, tuple[str, np.ndarray]]]) -> ChunkResult:
        chunk, previous = payload
        return embed_chunk(self.model, chunk, previous)


class RayChunkRunner:
    """An :data:`~vsekit.retrieval.index.ChunkRunner` on a Ray actor pool. Ray is joined or started, and
    the pool started, only when some chunk is missing (an index already up to date starts no cluster);
    :meth:`close` ends both."""

    def __init__(
        self, options: RayOptions, device: str = "auto", worker_factory: Callable[[], Any] | None = None
    ) -> None:
        self.options = options
        self.device = device
        self.worker_factory = worker_factory
        self.stack = contextlib.ExitStack()

    def __call__(
        self, identity: dict[str, Any], chunks: list[tuple[str, list[PhotoFile], dict]]
    ) -> Iterator[tuple[str, ChunkResult]]:
        model, sha, device = identity["name"], identity["sha256"], self.device
        build = self.worker_factory or (lambda: IndexShardWorker(model, sha, device))
        self.stack.enter_context(ray_session(self.options))
        pool = self.stack.enter_context(ShardPool(build, self.options))
        shards = [(key, ([_absolute(p) for p in chunk], previous)) for key, chunk, previous in chunks]
        yield from pool.run(shards)

    def close(self) -> None:
        self.stack.close()


def _absolute(photo: PhotoFile) -> PhotoFile:
    return PhotoFile(photo.id, Path(photo.path).absolute(), photo.size, photo.mtime_ns)


def ray_build_index(
    photos_dir: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    model: str | os.PathLike[str] | None = None,
    *,
    options: RayOptions | None = None,
    device: str = "auto",
    worker_factory: Callable[[], Any] | None = None,
    **kwargs: Any,
) -> Index:
    """:meth:`Index.build <vsekit.retrieval.index.Index.build>` with the photos embedded on a Ray actor
    pool; the same index files. ``kwargs``: ``dtype``, ``engine``, ``chunk_size``, ``progress``."""
    options = options or RayOptions()
    if model is not None and os.path.exists(model):  # a file: actors need its absolute path
        model = Path(model).absolute()
    runner = RayChunkRunner(options, device, worker_factory)
    try:
        return Index.build(photos_dir, out_dir, model, device=device, runner=runner, **kwargs)
    finally:
        runner.close()
