"""FAISS IVF-PQ for collections past RAM: trained on a sample, filled in chunks, resumable after a kill.

The vectors stay where they are (a memory-mapped ``.npy``, float16 or float32); the index holds only
their PQ codes (``m`` bytes per vector with 8-bit codes) and ids, so 10M 256-d vectors need about 400 MB
of index instead of 5 GB of float16 vectors. Searches re-rank the candidates exactly from the stored
vectors (:func:`vsekit.retrieval.search.rerank_search`), so the PQ approximation only decides which
rows are candidates, never their order or scores.

Structure (:func:`ivfpq_params`), for ``n`` vectors of dimension ``dim``:

* ``nlist`` = the largest power of two <= sqrt(n) inverted lists (each list holds about sqrt(n) vectors
  or more; FAISS's guide suggests 4-16 sqrt(n), which makes the coarse k-means and the assignment of
  every vector 4-16x costlier: at 10M on one core that is the difference between minutes and an hour).
  The coarse quantizer is spherical k-means over inner products (the vectors are unit-norm).
* ``m`` sub-quantizers of at least 4 dimensions each (the largest of 64, 48, 32, 24, 16, 12, 8, 4, 2
  that divides ``dim``; 64 bytes a vector at 256-d and above), ``nbits`` = 8 bits each (fewer when
  the training sample is under 256 rows). With 8 dimensions a sub-quantizer, the PQ order of 64-d
  clustered vectors put half the true top 10 outside the best 100 candidates.
* Trained on ``train`` = max(50,000, 40 nlist) rows (FAISS's k-means asks for 39 per centroid), a
  seeded sample read from the store in order; then filled ``chunk_rows`` at a time.

**Kill-safety** (:func:`build_ivfpq` with ``checkpoint``): the trained, empty index is written
atomically to the checkpoint file, then the index is re-written there every ``checkpoint_rows`` vectors
added; a re-run loads the checkpoint and adds only the rows after its ``ntotal``. The result is
byte-identical to an uninterrupted build (training is seeded, encoding deterministic). The caller
writes the final index atomically and removes the checkpoint.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

import numpy as np

from vsekit.errors import VsekitError
from vsekit.fileio import atomic_write_bytes

__all__ = ["build_ivfpq", "ivfpq_params", "is_ivfpq"]

logger = logging.getLogger(__name__)

_SEED, _TRAIN_MIN, _TRAIN_PER_LIST = 1234, 50_000, 40
_M_CHOICES = (64, 48, 32, 24, 16, 12, 8, 4, 2)


def _faiss():
    try:
        import faiss
    except ImportError as exc:  # pragma: no cover - faiss-cpu is a dependency
        raise VsekitError("the IVF-PQ engine needs faiss-cpu (pip install faiss-cpu)") from exc
    return faiss


def ivfpq_params(n: int, dim: int) -> dict[str, int]:
    """nlist, m, nbits and the training sample size for ``n`` vectors of ``dim`` (module docstring)."""
    if n < 1 or dim < 1:
        raise VsekitError(f"an IVF-PQ index needs vectors; got {n} of dimension {dim}")
    nlist = 2 ** int(math.floor(math.log2(math.sqrt(n)))) if n > 1 else 1
    m = next((m for m in _M_CHOICES if dim % m == 0 and dim // m >= 4), 1)
    train = min(n, max(_TRAIN_MIN, _TRAIN_PER_LIST * nlist))
    nbits = max(1, min(8, int(math.floor(math.log2(train))))) if train > 1 else 1
    return {"nlist": nlist, "m": m, "nbits": nbits, "train": train}


def is_ivfpq(index) -> bool:
    """Whether ``index`` is an IVF-PQ index (searched with exact re-ranking)."""
    return isinstance(index, _faiss().IndexIVFPQ)


def _check_store(vectors: np.ndarray) -> None:
    if getattr(vectors, "ndim", 0) != 2 or vectors.dtype not in (np.float16, np.float32):
        raise VsekitError(
            f"IVF-PQ needs a [n, dim] float16 or float32 store, got {getattr(vectors, 'shape', '?')} "
            f"{getattr(vectors, 'dtype', type(vectors).__name__)}"
        )


def _train(vectors: np.ndarray, params: dict[str, int]):
    faiss = _faiss()
    n, dim = vectors.shape
    quantizer = faiss.IndexFlatIP(dim)
    index = faiss.IndexIVFPQ(
        quantizer, dim, params["nlist"], params["m"], params["nbits"], faiss.METRIC_INNER_PRODUCT
    )
    index.cp.seed, index.cp.spherical = _SEED, True
    index.pq.cp.seed = _SEED
    rows = np.sort(np.random.default_rng(_SEED).choice(n, size=params["train"], replace=False))
    sample = np.concatenate(  # read in order, a chunk at a time (a memmap reads only these rows)
        [np.asarray(vectors[rows[i : i + 65_536]], dtype=np.float32) for i in range(0, len(rows), 65_536)]
    )
    index.train(sample)
    logger.info("trained IVF-PQ %s on %d of %d vectors", params, len(sample), n)
    return index


def _load_checkpoint(path: Path, dim: int, n: int, params: dict[str, int]):
    faiss = _faiss()
    try:
        index = faiss.deserialize_index(np.frombuffer(path.read_bytes(), dtype=np.uint8))
    except (OSError, RuntimeError) as exc:
        logger.warning("%s: unreadable IVF-PQ checkpoint (%s); starting over", path, exc)
        return None
    ok = (
        isinstance(index, faiss.IndexIVFPQ)
        and index.d == dim
        and index.nlist == params["nlist"]
        and index.pq.M == params["m"]
        and index.ntotal <= n
    )
    if not ok:
        logger.warning("%s: a checkpoint of another IVF-PQ build; starting over", path)
        return None
    logger.info("resuming the IVF-PQ build from %s at %d of %d vectors", path, index.ntotal, n)
    return index


def build_ivfpq(
    vectors: np.ndarray,
    *,
    params: dict[str, int] | None = None,
    checkpoint: Path | None = None,
    chunk_rows: int = 65_536,
    checkpoint_rows: int = 1_000_000,
):
    """An IVF-PQ index over ``vectors`` (``[n, dim]``, a memmap is read a chunk at a time), filled in
    order (row i gets id i). ``params``: :func:`ivfpq_params` unless given. ``checkpoint``: a file to
    resume from and to save progress to (module docstring); the caller removes it when done."""
    _check_store(vectors)
    n, dim = vectors.shape
    params = {**ivfpq_params(n, dim), **(params or {})}
    index = _load_checkpoint(checkpoint, dim, n, params) if checkpoint and checkpoint.is_file() else None
    if index is None:
        index = _train(vectors, params)
        if checkpoint is not None:
            atomic_write_bytes(checkpoint, _faiss().serialize_index(index).tobytes())
    since = 0
    for start in range(int(index.ntotal), n, chunk_rows):
        block = np.ascontiguousarray(vectors[start : start + chunk_rows], dtype=np.float32)
        index.add(block)
        since += len(block)
        if checkpoint is not None and since >= checkpoint_rows and index.ntotal < n:
            atomic_write_bytes(checkpoint, _faiss().serialize_index(index).tobytes())
            logger.info("IVF-PQ: %d of %d vectors added (checkpointed)", index.ntotal, n)
            since = 0
    return index
