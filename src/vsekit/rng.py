"""Random-number-generator state of a training process, as checkpoint-friendly tensors and plain values.

Both trainers save this with every checkpoint and restore it on ``--resume``, which is what lets an
interrupted run continue with the same shuffles and dropout masks as an uninterrupted one. The NumPy key
array travels as an int64 tensor because checkpoints are read back with ``torch.load(weights_only=True)``,
which refuses NumPy arrays.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch

__all__ = ["rng_state", "seed_all", "set_rng_state"]


def seed_all(seed: int) -> None:
    """Seed every RNG a checkpoint saves (torch, NumPy, Python) from a run's ``seed``, so the states saved
    with the first checkpoint, and so an interrupted run's resumed states, depend on the seed alone."""
    torch.manual_seed(seed)
    np.random.seed(seed % 2**32)
    random.seed(seed)


def rng_state() -> dict[str, Any]:
    """The current torch (CPU and CUDA), NumPy and Python RNG states."""
    state = np.random.get_state(legacy=True)
    assert isinstance(state, tuple)  # the global RandomState is MT19937, whose legacy state is the tuple
    kind, keys, pos, has_gauss, cached = state
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        "numpy": {
            "kind": kind,
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached": float(cached),
        },
        "python": random.getstate(),
    }


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` returned (CUDA states only where CUDA is available)."""
    torch.set_rng_state(state["torch"])
    if state.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    n = state["numpy"]
    keys = n["keys"].numpy().astype(np.uint32)
    np.random.set_state((n["kind"], keys, n["pos"], n["has_gauss"], n["cached"]))
    random.setstate(state["python"])
