"""Data-parallel training with ``torch.distributed``; at world size 1 every function is the identity.

Launched by ``torchrun`` (``torchrun --nproc-per-node N -m vsekit train ...``): :func:`init_from_env`
joins the process group that torchrun's environment (``WORLD_SIZE``, ``RANK``, ``MASTER_ADDR``...)
describes, with gloo on CPU and NCCL on CUDA. Without ``WORLD_SIZE`` > 1 nothing is initialised and a
run is bit for bit what it was before data parallelism existed.

The scheme (what makes W ranks x B pairs equal to 1 rank x W*B pairs, up to float summation order):

- ``batch_size`` in a recipe is the *global* batch. Every rank draws the same epoch order from the same
  seeded generator (so the generator state, which the checkpoint holds, is the same on every rank), cuts
  it into the same global batches, and takes its :func:`shard` of each: every W-th pair. A rank can get
  an empty share of a short last batch; it still takes part in every collective and every step.
- A contrastive loss passes embeddings and image ids through :func:`gather_for_loss`, which returns the
  whole global batch in its original order, this rank's rows keeping their gradient (open_clip's
  ``gather_features`` with ``gather_with_grad=False``). Every rank then computes the *same* global loss,
  each backpropagating only through its own rows, so the sum over ranks of the gradients is the gradient
  of the global loss. :func:`sync_gradients` all-reduces that sum (not DDP's mean, which would divide
  by W, and which would hang on a rank whose share of the last batch is empty).
- :func:`broadcast_from_main` runs a function (reading the checkpoint, the dev evaluation) on rank 0 and
  hands its result to every rank, so all ranks resume from one checkpoint and stop early together.

The checkpoint holds no per-rank state (weights and optimiser state are identical on all ranks, the
epoch order comes from the one generator), so a run resumes with any world size.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterable, Iterator
from datetime import timedelta
from typing import Any, TypeVar

import torch

from vsekit.errors import VsekitError

__all__ = [
    "barrier",
    "broadcast_from_main",
    "fork_rng",
    "gather_for_loss",
    "init_from_env",
    "is_main_process",
    "main_first",
    "rank",
    "refuse_data_parallel",
    "shard",
    "shut_down",
    "sync_gradients",
    "world_size",
]

logger = logging.getLogger(__name__)

T = TypeVar("T", torch.Tensor, list)
R = TypeVar("R")


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


def _env_world_size() -> int:
    try:
        return int(os.environ.get("WORLD_SIZE", "1"))
    except ValueError as exc:
        raise VsekitError(
            f"environment variable WORLD_SIZE={os.environ['WORLD_SIZE']!r} is not a number"
        ) from exc


def init_from_env(device: torch.device) -> bool:
    """Join the process group torchrun describes (``WORLD_SIZE`` > 1); True if this call initialised it.

    NCCL when ``device`` is CUDA (each process then uses GPU ``LOCAL_RANK``), gloo otherwise. A group
    that is already initialised (a test, a caller of the library) is used as it is.
    """
    if _initialised() or _env_world_size() <= 1:
        return False
    if not torch.distributed.is_available():
        raise VsekitError("WORLD_SIZE > 1 but this PyTorch build has no torch.distributed")
    backend = "nccl" if device.type == "cuda" else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    torch.distributed.init_process_group(backend, timeout=timedelta(minutes=30))
    logger.info("rank %d of %d joined the process group (%s)", rank(), world_size(), backend)
    return True


def shut_down(initialised: bool) -> None:
    """Leave the process group if :func:`init_from_env` joined it (``initialised``)."""
    if initialised and _initialised():
        torch.distributed.destroy_process_group()


def refuse_data_parallel(what: str, why: str) -> None:
    """One clear line for a trainer that cannot run on several processes (checked from the environment,
    so it refuses before any process group exists)."""
    if world_size() > 1 or _env_world_size() > 1:
        raise VsekitError(f"{what} trains on one process only ({why}); run it without torchrun")


def shard(order: T) -> T:
    """This rank's share of a global batch (or of any order): every ``world_size``-th item from ``rank``.

    At world size 1 the order is returned as is, which keeps single-process runs bit-identical.
    :func:`gather_for_loss` is its inverse.
    """
    n = world_size()
    return order if n == 1 else order[rank() :: n]


def gather_for_loss(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Every rank's ``tensors`` (rows = this rank's :func:`shard` of a global batch), in global order.

    This rank's rows are its own tensors and keep their gradient; the other ranks' rows are constants.
    So ``gather_for_loss(shard(batch)) == (batch,)``, and a loss computed on the gathered rows is the
    loss of the global batch on every rank. The tensors share their first dimension (the pairs of the
    batch: embeddings, image ids...); shares may differ in size by one or be empty. They travel as raw
    bytes in one all-gather (exact for any dtype). Identity at world size 1.
    """
    n = world_size()
    if n == 1:
        return tensors
    rows = tensors[0].shape[0]
    device = tensors[0].device
    widths = [_row_bytes(t) for t in tensors]
    size = torch.tensor([rows], dtype=torch.int64, device=device)
    sizes = [torch.zeros_like(size) for _ in range(n)]
    torch.distributed.all_gather(sizes, size)
    counts = [int(s) for s in sizes]
    packed = torch.zeros((max(counts), sum(widths)), dtype=torch.uint8, device=device)
    if rows:
        packed[:rows] = torch.cat([_as_bytes(t, rows) for t in tensors], 1)
    parts = [torch.empty_like(packed) for _ in range(n)]
    torch.distributed.all_gather(parts, packed)
    # rank r's j-th row is row j * n + r of the global batch (shard takes every n-th from r)
    position = torch.cat([torch.arange(counts[r]) * n + r for r in range(n)])
    order = torch.argsort(position).to(device)
    out, start = [], 0
    for t, width in zip(tensors, widths, strict=True):
        pieces = [
            t if r == rank() else _unpack(parts[r][: counts[r], start : start + width], t) for r in range(n)
        ]
        out.append(torch.cat(pieces)[order])
        start += width
    return tuple(out)


def _row_bytes(t: torch.Tensor) -> int:
    per_row = 1
    for d in t.shape[1:]:
        per_row *= d
    return per_row * t.element_size()


def _as_bytes(t: torch.Tensor, rows: int) -> torch.Tensor:
    """``t``'s rows as raw bytes, ``[rows, row bytes]`` (a fresh copy: any strides in, stride 1 out)."""
    flat = torch.empty(t.numel(), dtype=t.dtype, device=t.device)
    flat.copy_(t.detach().reshape(-1))
    return flat.view(torch.uint8).reshape(rows, -1)


def _unpack(raw: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Rows of raw bytes back into ``like``'s dtype and row shape."""
    fresh = torch.empty(raw.shape, dtype=torch.uint8, device=raw.device).copy_(raw)  # aligned, stride 1
    return fresh.view(like.dtype).reshape(raw.shape[0], *like.shape[1:])


def sync_gradients(params: Iterable[torch.Tensor]) -> None:
    """Sum every parameter's gradient over the ranks (the gradient of the global loss, see the module
    docstring). A gradient that is None on every rank stays None. No-op at world size 1."""
    if world_size() == 1:
        return
    params = list(params)
    if not params:
        return
    device = params[0].device
    present = torch.tensor([p.grad is not None for p in params], dtype=torch.float32, device=device)
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([torch.cat([g.reshape(-1).float() for g in grads]), present])
    torch.distributed.all_reduce(flat)
    offset = 0
    for p, g in zip(params, grads, strict=True):
        p.grad = flat[offset : offset + g.numel()].view_as(g).to(g.dtype).clone()
        offset += g.numel()
    for p, anywhere in zip(params, flat[offset:].tolist(), strict=True):
        if anywhere == 0:
            p.grad = None


def broadcast_from_main(fn: Callable[..., R], *args: Any) -> R:
    """``fn(*args)`` computed on rank 0 only, its result (or its exception, re-raised) on every rank."""
    if world_size() == 1:
        return fn(*args)
    box: list[Any] = [None]
    if is_main_process():
        try:
            box[0] = (True, fn(*args))
        except Exception as exc:  # noqa: BLE001 - handed to every rank, then raised on each
            box[0] = (False, exc)
    torch.distributed.broadcast_object_list(box, src=0)
    ok, value = box[0]
    if not ok:
        raise value
    return value


def barrier() -> None:
    """Wait for every rank (no-op at world size 1)."""
    if world_size() > 1:
        torch.distributed.barrier()


@contextlib.contextmanager
def main_first() -> Iterator[None]:
    """Rank 0 runs the block first (filling a shared cache), the other ranks after it finished."""
    if not is_main_process():
        barrier()
    try:
        yield
    finally:
        if is_main_process():
            barrier()


def fork_rng(seed: int, epoch: int) -> None:
    """Give ranks > 0 their own global-RNG stream for ``epoch`` (dropout masks), derived from ``seed``,
    ``epoch`` and the rank. Rank 0 keeps its stream (the one the checkpoint saves); at world size 1
    nothing changes."""
    if world_size() > 1 and not is_main_process():
        torch.manual_seed((seed * 1_000_003 + epoch) * 1_009 + rank())
