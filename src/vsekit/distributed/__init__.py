"""Sharded work on a Ray cluster: feature extraction (:mod:`~vsekit.distributed.extract`) and photo-index
building (:mod:`~vsekit.distributed.index`) split into shards that an actor pool computes, each shard
merged into the same files the single-process path writes.

Ray is optional (``pip install 'vsekit[distributed]'``) and imported only when a sharded run starts, so
the rest of vsekit works without it. The generic part, an actor pool with per-shard retries, is
:mod:`~vsekit.distributed.pool`.
"""

from vsekit.distributed.pool import RayOptions, require_ray

__all__ = ["RayOptions", "require_ray"]
