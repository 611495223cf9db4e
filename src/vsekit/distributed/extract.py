"""`vsekit extract --distributed ray`: the feature cache filled by a Ray actor pool.

The images still to do are cut into shards of whole CNN batches (so every batch holds the images the
single-process run would put in it); each actor loads the CNN once (:func:`vsekit.vision.features.
cnn_extractor`) and returns a shard's float16 rows; the driver writes them into the cache's memory map and
commits the shard (rows flushed, then the done mask, then ``meta.json``, each atomically) before taking the
next. The cache is the single-process one, byte for byte: same directory, same files, same rows. A shard
is committed whole or not at all, so a rerun computes only the shards that are missing. Actors read the
images by absolute path: on a multi-node cluster the images must be on a file system every node mounts
at the same path; the cache is written by the driver alone.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from vsekit.data.corpus import Corpus
from vsekit.data.images import ImageCollection
from vsekit.distributed.pool import RayOptions, ShardPool, ray_session
from vsekit.errors import VsekitError
from vsekit.vision.engine import default_engine
from vsekit.vision.features import FeatureSpec, FeatureStore, cnn_extractor, extract_features, extract_fne

__all__ = ["FeatureShardWorker", "RayExtractor", "ray_extract"]

ShardRows = tuple[list[str], np.ndarray | None, dict[str, str]]


class FeatureShardWorker:
    """Lives in an actor: the CNN, built once; ``worker(items)`` -> ``(ok ids, float16 rows, {id: error})``
    for a shard of ``(id, absolute path)`` items, batched exactly as the single-process cache batches."""

    def __init__(self, spec: FeatureSpec, device: str, batch_size: int, engine: str | None = None) -> None:
        self.cnn = cnn_extractor(spec, device, engine)
        self.batch_size = batch_size
        self.dims = self.cnn.dims
        self.engine = getattr(self.cnn, "engine", "torch")  # the one that actually runs (auto resolved)

    def __call__(self, items: list[tuple[str, str]]) -> ShardRows:
        ok_ids: list[str] = []
        rows: list[np.ndarray] = []
        bad: dict[str, str] = {}
        for _, ids, batch_rows, batch_bad in self.cnn.batches(items, self.batch_size):
            if batch_rows is not None:
                ok_ids.extend(ids)
                rows.append(batch_rows)
            bad.update(batch_bad)
        return ok_ids, (np.concatenate(rows) if rows else None), bad


class RayExtractor:
    """The cache's extractor (``spec``, ``dims``, ``batches``) backed by a :class:`ShardPool`: each
    "batch" it yields is a whole shard, committed by the cache as it arrives (``commit_every_batch``)."""

    commit_every_batch = True

    def __init__(self, pool: ShardPool, spec: FeatureSpec, shard_size: int) -> None:
        self.pool = pool
        self.spec = spec
        self.shard_size = shard_size
        self.dims: dict[str, Any] = pool.attr("dims")
        # the engine the actors run, recorded in the cache's meta.json as a local run's is
        self.engine: str = pool.attr("engine") or "torch"

    def batches(
        self, items: list[tuple[str, Any]], batch_size: int
    ) -> Iterator[tuple[list, list[str], np.ndarray | None, dict[str, str]]]:
        size = max(1, round(self.shard_size / batch_size)) * batch_size  # whole batches per shard
        shards = [
            (f"{start}-{start + len(chunk) - 1}", [(i, str(Path(p).absolute())) for i, p in chunk])
            for start in range(0, len(items), size)
            if (chunk := items[start : start + size])
        ]
        by_key = dict(shards)
        for key, (ok_ids, rows, bad) in self.pool.run(shards):
            yield by_key[key], ok_ids, rows, bad


def _factory(
    spec: FeatureSpec,
    options: RayOptions,
    device: str,
    batch_size: int,
    worker_factory: Callable | None,
    stack: contextlib.ExitStack,
    engine: str | None = None,
) -> Callable[[Any], RayExtractor]:
    """The cache's ``make_extractor``: called only when some image is missing, it joins or starts Ray
    then (a rerun with everything cached starts no cluster) and starts the pool; ``stack`` ends both."""

    def make(_device: Any) -> RayExtractor:
        stack.enter_context(ray_session(options))
        build = worker_factory or (lambda: FeatureShardWorker(spec, device, batch_size, engine))
        pool = stack.enter_context(ShardPool(build, options))
        return RayExtractor(pool, spec, options.shard_size)

    return make


def ray_extract(
    corpus: Corpus | ImageCollection,
    backbone: str = "mobilenet_v2",
    *,
    fne: bool = False,
    layers: str = "one-layer",
    fit_split: str = "train",
    options: RayOptions | None = None,
    device: str = "auto",
    batch_size: int = 32,
    worker_factory: Callable[[], Any] | None = None,
    engine: str | None = None,
    **kwargs: Any,
) -> FeatureStore:
    """:func:`~vsekit.vision.features.extract_features` (``fne``: :func:`~vsekit.vision.features.
    extract_fne`, whose statistics and codes the driver fits and writes) with the CNN on a Ray actor pool;
    the same cache, the same files. ``layers``: the kind without ``fne`` (``one-layer``, ``pre-head``,
    ``grid``).

    ``options``: the cluster and the pool (:class:`RayOptions`). ``worker_factory``: what each actor builds
    (default a :class:`FeatureShardWorker`). ``engine``: the CNN engine of every actor (None: this
    process's :func:`~vsekit.vision.engine.default_engine`, so ``--engine`` reaches the actors).
    ``kwargs``: ``cache_dir``, ``cache_root``, ``weights``,
    ``skip_bad_images``, ``progress``.
    """
    options = options or RayOptions()
    if kwargs.get("weights") is not None:  # actors run in other folders, maybe on other machines
        kwargs["weights"] = Path(kwargs["weights"]).absolute()
    spec = FeatureSpec(backbone, "fne" if fne else layers, weights=kwargs.get("weights"))
    engine = engine if engine is not None else default_engine()
    with contextlib.ExitStack() as stack:
        make = _factory(spec, options, device, batch_size, worker_factory, stack, engine)
        common = dict(device=device, batch_size=batch_size, make_extractor=make, **kwargs)
        if fne:
            if not isinstance(corpus, Corpus):
                raise VsekitError("FNE statistics are fitted on a corpus split, not on an image collection")
            return extract_fne(corpus, backbone, fit_split=fit_split, **common)
        return extract_features(corpus, backbone, layers, **common)
