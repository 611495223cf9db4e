"""The three places data-parallel training will plug in; at world size 1 each is the identity.

Trainers never ask which rank they are on. They shard the epoch order with :func:`shard`, write files only
through :class:`~vsekit.training.rundir.RunDir` (which asks :func:`is_main_process`), and a contrastive
loss that wants negatives from every rank passes its embeddings through :func:`gather_for_loss`. Adding
``torch.distributed`` later means filling in these functions (and wrapping the model in
DistributedDataParallel where the trainer builds it), not touching the trainers' loops.
"""

from __future__ import annotations

from typing import TypeVar

import torch

__all__ = ["gather_for_loss", "is_main_process", "rank", "shard", "world_size"]

T = TypeVar("T", torch.Tensor, list)


def _initialised() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def world_size() -> int:
    """Number of training processes (1 unless torch.distributed has been initialised)."""
    return torch.distributed.get_world_size() if _initialised() else 1


def rank() -> int:
    """This process's rank (0 unless torch.distributed has been initialised)."""
    return torch.distributed.get_rank() if _initialised() else 0


def is_main_process() -> bool:
    """Whether this process writes the run's files (checkpoint, log, best model, config)."""
    return rank() == 0


def shard(order: T) -> T:
    """This rank's share of an epoch's order (a permutation tensor or a list of batches).

    Every rank draws the same order from the same seeded generator, so the generator state stays
    identical across ranks; each then takes every ``world_size``-th item. At world size 1 the order is
    returned as is, which keeps single-process runs bit-identical.
    """
    n = world_size()
    return order if n == 1 else order[rank() :: n]


def gather_for_loss(x: torch.Tensor) -> torch.Tensor:
    """Hook for a loss that scores against every rank's batch: concatenate ``x`` over ranks.

    Identity at world size 1. With more ranks this is where an all-gather that keeps this rank's
    gradient goes (open_clip's ``gather_features``); the loss then builds its score matrix from the
    gathered embeddings and image ids.
    """
    if world_size() == 1:
        return x
    raise NotImplementedError("data-parallel training: gather_for_loss needs an all-gather with gradients")
