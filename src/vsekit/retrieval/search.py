"""Nearest neighbours by cosine among unit vectors: exact (chunked matrix products) or FAISS.

Every engine answers the same question, the ``k`` largest inner products ``q . x`` (the cosine, all
vectors being unit-norm), as ``(scores [q, k], rows [q, k])`` best first, with row -1 / score -inf where
fewer than ``k`` vectors exist.

Engines and the rules ``engine="auto"`` follows (:func:`resolve_engine`):

* ``exact``: matrix products over the stored matrix, ``chunk_rows`` rows at a time, keeping a running
  top-k, so a memory-mapped collection larger than RAM still searches (it streams from disk); float16
  storage is scored approximately (by torch's float16 product, or, in a process without torch and for
  at most :data:`F16_NUMPY_MAX` stored values, by NumPy in float32) and its candidates rescored exactly. Equal
  scores are ordered by row (lower first), so results are reproducible. ``auto`` picks it below
  :data:`ANN_MIN_VECTORS` vectors, where a full scan takes milliseconds and loses no recall.
* ``flat``: FAISS ``IndexFlatIP`` (exact too; the vectors are copied into RAM). Offered as a reference.
* ``hnsw``: FAISS ``IndexHNSWFlat`` (inner product), M = 32, efConstruction = 80; ``auto`` picks it from
  :data:`ANN_MIN_VECTORS` vectors on, while their float32 copy fits :data:`HNSW_MAX_BYTES`. The graph
  and a float32 copy of the vectors live in RAM (about 256 bytes per vector on top of the vectors), and
  a search process reads the whole file.
* ``ivf``: FAISS ``IndexIVFFlat``, nlist = 4 sqrt(n) lists, trained on up to 50,000 vectors with a fixed
  seed.
* ``ivfpq``: FAISS ``IndexIVFPQ`` for collections past RAM (:mod:`vsekit.retrieval.ivfpq`: trained on a
  sample, filled in chunks from the memory-mapped store, holding only PQ codes, ``m`` bytes a vector).
  Its candidates (the best ``max(100, 10 k)`` by PQ score) are re-ranked by exact cosine from the stored
  vectors (:func:`rerank_search`), so the results are exact among the candidates; only which rows are
  candidates is approximate. ``auto`` picks it where HNSW's float32 copy would pass
  :data:`HNSW_MAX_BYTES` (1M photos of the shipped 2,048-d ``vse``: HNSW would hold 8 GB in RAM, need
  twice that to be written, and be read whole by every search process).

For ``hnsw``, ``ivf`` and ``ivfpq``, :func:`calibrate` picks efSearch / nprobe when the structure is
built: the smallest value (doubling) whose recall@10 against exact search reaches 0.99 on real
sentences (the 500 captions of the bundled sample, embedded by the index's model) and 0.95 on
photo-like queries (200 stored vectors pushed away to a cosine of about 0.3, as a new photo lies
from its best match); for ``ivfpq`` the recall is that of the re-ranked results, and the candidate
count doubles instead of nprobe once a doubling of nprobe stops paying (:func:`_calibrate_ivfpq`).
"""

from __future__ import annotations

import logging
import math
import sys
import warnings
from typing import Any, Protocol

import numpy as np

from vsekit.errors import VsekitError
from vsekit.retrieval.ivfpq import build_ivfpq, is_ivfpq

__all__ = [
    "ANN_ENGINES",
    "ANN_MIN_VECTORS",
    "HNSW_MAX_BYTES",
    "ENGINES",
    "IVFPQ_CANDIDATES",
    "PHOTO_RECALL_TARGET",
    "TEXT_RECALL_TARGET",
    "ann_search",
    "build_ann",
    "calibrate",
    "deserialize_ann",
    "exact_search",
    "faiss_search",
    "photo_like_queries",
    "rerank_search",
    "resolve_engine",
    "serialize_ann",
    "set_search_params",
]

logger = logging.getLogger(__name__)

ENGINES = ("auto", "exact", "flat", "hnsw", "ivf", "ivfpq")
#: Engines whose structure is built once (with the index) and saved beside the embeddings.
ANN_ENGINES = ("hnsw", "ivf", "ivfpq")
#: IVF-PQ re-ranks at least this many candidates per query exactly (10 k when that is more).
IVFPQ_CANDIDATES, IVFPQ_CANDIDATES_PER_K = 100, 10
#: The calibration grows IVF-PQ's candidates up to this many (each is a row read from the store).
IVFPQ_CANDIDATES_MAX = 4096
#: ``auto`` searches exactly below this many vectors and builds HNSW from it on.
ANN_MIN_VECTORS = 50_000
#: ... HNSW while its float32 vectors take at most this many bytes (2 GiB: 1M x 512-d, 262,144 x 2,048-d),
#: IVF-PQ past it (module docstring).
HNSW_MAX_BYTES = 2 << 30
HNSW_M, HNSW_EF_CONSTRUCTION, HNSW_EF_SEARCH = 32, 80, 128
_IVF_TRAIN_MAX, _IVF_SEED = 50_000, 1234


def resolve_engine(engine: str, n_vectors: int, dim: int = 0) -> str:
    """The engine ``engine`` means for ``n_vectors`` vectors of ``dim`` dimensions (``auto``: see the
    module docstring; ``dim`` 0: HNSW from :data:`ANN_MIN_VECTORS` on, whatever the size)."""
    if engine not in ENGINES:
        raise VsekitError(f"unknown search engine {engine!r}; known: {', '.join(ENGINES)}")
    if engine == "auto":
        if n_vectors < ANN_MIN_VECTORS:
            return "exact"
        return "hnsw" if 4 * n_vectors * dim <= HNSW_MAX_BYTES else "ivfpq"
    return engine


def _as_queries(queries: np.ndarray, dim: int) -> np.ndarray:
    queries = np.atleast_2d(np.asarray(queries, dtype=np.float32))
    if queries.shape[1] != dim:
        raise VsekitError(f"queries are {queries.shape[1]}-d, the index holds {dim}-d vectors")
    return np.ascontiguousarray(queries)


def _best_first(scores: np.ndarray, rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Per query, the ``k`` best of the candidate ``(scores, rows)``: score descending, then row."""
    out_s = np.full((len(scores), k), -np.inf, dtype=np.float32)
    out_r = np.full((len(scores), k), -1, dtype=np.int64)
    for q in range(len(scores)):
        valid = rows[q] >= 0
        s_q, r_q = scores[q, valid], rows[q, valid]
        order = np.lexsort((r_q, -s_q))[:k]
        out_s[q, : len(order)], out_r[q, : len(order)] = s_q[order], r_q[order]
    return out_s, out_r


#: Bound on |score from float16 inputs - exact score| for unit vectors: the query rounded to float16
#: moves a cosine by at most 2^-11, the float16 output rounding by at most 2^-11 more; doubled for margin.
_F16_TOL = 2.0**-9
#: Query rows x block rows scored at once (a float32 score matrix of 256 MB at most).
_SCORES_MAX = 1 << 26
#: Float16 values a search of a process without torch scores in NumPy rather than importing torch: NumPy
#: converts about 2e8 float16 values a second to float32 and torch takes about 2.4 s to import (the
#: two are level near 5e8 values), so a cold search of a small float16 index, or of the segments an
#: IVF-PQ index has not indexed, no longer waits for torch.
F16_NUMPY_MAX = 1 << 27


def _candidates(scores: np.ndarray, k: int, tol: float) -> tuple[np.ndarray, np.ndarray]:
    """Per query, the fewest best rows of ``scores`` (approximate within ``tol``), best first, that surely
    hold the exact best ``k`` and every row tied with the k-th: grown until the last candidate is more
    than ``2 tol`` below the k-th (no row left out can then reach the exact top k, or tie with it)."""
    n = scores.shape[1]
    take = min(n, k + 16)
    while True:
        rows = (
            np.argpartition(-scores, take - 1, axis=1)[:, :take]
            if take < n
            else np.tile(np.arange(n), (len(scores), 1))
        )
        values = np.take_along_axis(scores, rows, axis=1)
        order = np.argsort(-values, axis=1, kind="stable")
        values, rows = np.take_along_axis(values, order, axis=1), np.take_along_axis(rows, order, axis=1)
        if take == n or bool((values[:, -1] < values[:, k - 1] - 2 * tol).all()):
            return values, rows
        take = min(n, 2 * take)


def _block_best(
    queries: np.ndarray, block: np.ndarray, k: int, f16_numpy: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """Exact float32 scores of candidate rows of one block (``rows`` within the block) for each query.

    A float32 block is scored directly by NumPy's matrix product (no torch: a cold search of a float32
    index imports none). A float16 block is scored approximately, then only the candidates are rescored
    from the stored values: exact. The approximate scores come from torch's float16 matrix product
    (about as fast as float32 from half the bytes; converting the block to float32 first is some 15x
    slower), or, with ``f16_numpy``, from NumPy in float32 after that conversion (a small search in a
    process without torch: :data:`F16_NUMPY_MAX`); either is within ``_F16_TOL`` of the exact score, so
    the candidates, and the answer, are the same. Conversions go through NumPy (torch's float16 ->
    float32 cast is about 100x slower on CPU)."""
    block = np.asarray(block)
    k = min(k, block.shape[0])
    if block.dtype == np.float32:
        return _candidates(queries @ block.T, k, 0.0)
    if block.dtype != np.float16:
        raise VsekitError(f"stored vectors must be float32 or float16, not {block.dtype}")
    tol = _F16_TOL * max(1.0, float(np.linalg.norm(queries, axis=1).max()))  # stored rows are unit-norm
    approx = _f16_scores_numpy(queries, block) if f16_numpy else _f16_scores_torch(queries, block)
    rows = _candidates(approx, k, tol)[1]
    exact = np.empty(rows.shape, dtype=np.float32)
    for q0 in range(0, len(queries), 256):  # candidate rows [256, c, K] in float32 at a time
        # float64 sums rounded to float32: a row's score does not depend on how many candidates
        # share the product (a float32 batched product's rounding does), so segments and one array agree
        candidates = block[rows[q0 : q0 + 256]].astype(np.float64)
        scores = np.matmul(candidates, queries[q0 : q0 + 256, :, None].astype(np.float64))[:, :, 0]
        exact[q0 : q0 + 256] = scores.astype(np.float32)
    return exact, rows


def _torch_loaded() -> bool:
    return "torch" in sys.modules


def _f16_scores_torch(queries: np.ndarray, block: np.ndarray) -> np.ndarray:
    import torch

    with warnings.catch_warnings():  # a read-only memmap is only read
        warnings.simplefilter("ignore", UserWarning)
        b = torch.from_numpy(block)
    with torch.inference_mode():
        return (torch.from_numpy(queries.astype(np.float16)) @ b.T).numpy().astype(np.float32)


def _f16_scores_numpy(queries: np.ndarray, block: np.ndarray) -> np.ndarray:
    return queries.astype(np.float32) @ block.astype(np.float32).T


def exact_search(
    vectors: np.ndarray, queries: np.ndarray, k: int, chunk_rows: int = 65_536
) -> tuple[np.ndarray, np.ndarray]:
    """The exact top ``k`` of ``vectors`` (``[n, K]`` float32 or float16, may be a memmap) per query.

    Over blocks of ``chunk_rows`` rows (one block in memory at a time; a memory-mapped
    collection streams from disk); each block's candidates join the running best.
    """
    if k < 1:
        raise VsekitError(f"k must be >= 1, got {k}")
    queries_np = _as_queries(queries, vectors.shape[1])
    f16_numpy = not _torch_loaded() and vectors.shape[0] * vectors.shape[1] <= F16_NUMPY_MAX
    best_s = np.full((len(queries_np), k), -np.inf, dtype=np.float32)
    best_r = np.full((len(queries_np), k), -1, dtype=np.int64)
    group = max(1, _SCORES_MAX // max(1, min(chunk_rows, len(vectors))))
    for start in range(0, len(vectors), chunk_rows):
        block = vectors[start : start + chunk_rows]
        for q0 in range(0, len(queries_np), group):
            scores, rows = _block_best(queries_np[q0 : q0 + group], block, k, f16_numpy)
            merged = _best_first(
                np.concatenate([best_s[q0 : q0 + group], scores], axis=1),
                np.concatenate([best_r[q0 : q0 + group], rows + start], axis=1),
                k,
            )
            best_s[q0 : q0 + group], best_r[q0 : q0 + group] = merged
    return best_s, best_r


# --------------------------------------------------------------------------- FAISS
def _faiss():
    try:
        import faiss
    except ImportError as exc:  # pragma: no cover - faiss-cpu is a dependency
        raise VsekitError("the FAISS engines need faiss-cpu (pip install faiss-cpu)") from exc
    return faiss


def _add_in_chunks(index, vectors: np.ndarray, chunk_rows: int = 65_536) -> None:
    for start in range(0, len(vectors), chunk_rows):
        index.add(np.ascontiguousarray(vectors[start : start + chunk_rows], dtype=np.float32))


def build_ann(vectors: np.ndarray, engine: str, checkpoint=None):
    """A FAISS index over ``vectors`` for ``engine`` (``flat``, ``hnsw``, ``ivf`` or ``ivfpq``), search
    settings set. ``checkpoint``: for ``ivfpq``, a file to resume a killed build from (see
    :func:`vsekit.retrieval.ivfpq.build_ivfpq`)."""
    faiss = _faiss()
    n, dim = vectors.shape
    if engine == "ivfpq":
        index = build_ivfpq(vectors, checkpoint=checkpoint)
        logger.info("built FAISS ivfpq over %d vectors", n)
        return index
    if engine == "flat":
        index = faiss.IndexFlatIP(dim)
    elif engine == "hnsw":
        index = faiss.IndexHNSWFlat(dim, HNSW_M, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = HNSW_EF_CONSTRUCTION
    elif engine == "ivf":
        nlist = max(1, min(int(4 * math.sqrt(n)), n))
        index = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, nlist, faiss.METRIC_INNER_PRODUCT)
        sample = np.random.default_rng(_IVF_SEED).choice(n, size=min(n, _IVF_TRAIN_MAX), replace=False)
        index.cp.seed = _IVF_SEED
        index.train(np.ascontiguousarray(vectors[np.sort(sample)], dtype=np.float32))
    else:
        raise VsekitError(f"{engine!r} is not a FAISS engine (flat, hnsw, ivf, ivfpq)")
    _add_in_chunks(index, vectors)
    logger.info("built FAISS %s over %d vectors", engine, n)
    return index


def set_search_params(index, params: dict[str, int] | None = None) -> None:
    """efSearch (HNSW) or nprobe (IVF): ``params`` as :func:`calibrate` chose them, else the defaults
    (they are not all kept by FAISS's serialisation, so the index manifest records them)."""
    faiss = _faiss()
    params = params or {}
    if isinstance(index, faiss.IndexHNSW):
        index.hnsw.efSearch = int(params.get("efSearch", HNSW_EF_SEARCH))
    elif isinstance(index, faiss.IndexIVF):
        index.nprobe = int(params.get("nprobe", min(index.nlist, max(8, index.nlist // 8))))


#: Recall@10 against exact search that :func:`calibrate` asks of sentence queries and of photo queries.
#: Sentences need more than 0.95: on Flickr8K dev, recall@10 0.95-0.97 cost 0.6-0.7 points of t2i R@10,
#: 0.99 costs at most 0.2 (README, "Search a photo collection").
TEXT_RECALL_TARGET, PHOTO_RECALL_TARGET = 0.99, 0.95


def photo_like_queries(vectors: np.ndarray, n_queries: int = 200, seed: int = _IVF_SEED) -> np.ndarray:
    """Queries like a photo that is not in the collection: ``n_queries`` stored vectors (a seeded
    sample), each plus three times a random unit vector, renormalised (cosine about 0.32 to the vector
    it came from; stored vectors themselves would be far easier queries)."""
    rng = np.random.default_rng(seed)
    n, dim = vectors.shape
    sample = np.sort(rng.choice(n, size=min(n, n_queries), replace=False))
    noise = rng.standard_normal((len(sample), dim)).astype(np.float32)
    queries = np.asarray(vectors[sample], dtype=np.float32)
    queries += 3.0 * noise / np.linalg.norm(noise, axis=1, keepdims=True)
    return queries / np.linalg.norm(queries, axis=1, keepdims=True)


def _recall(
    index, vectors: np.ndarray, queries: np.ndarray, truth: np.ndarray, k: int, params: dict
) -> float:
    _, found = ann_search(index, vectors, queries, k, params)
    return float(np.mean([len(set(t) & set(f)) / k for t, f in zip(truth, found, strict=True)]))


def calibrate(
    index,
    vectors: np.ndarray,
    text_queries: np.ndarray | None = None,
    k: int = 10,
    targets: tuple[float, float] = (TEXT_RECALL_TARGET, PHOTO_RECALL_TARGET),
) -> dict[str, int]:
    """The smallest efSearch / nprobe (doubling) whose recall@k against exact search reaches its target
    on every query set: ``text_queries`` (real sentences embedded by the index's model; the index
    uses the captions of the bundled sample) against ``targets[0]``, and :func:`photo_like_queries`
    against ``targets[1]``.

    Real sentences are what the searches are: a sentence's best photos lie at a cosine of about 0.3 to
    0.4 and on the other side of the image-text gap of the joint space, which no perturbation of the
    stored photo vectors reproduces well. On Flickr8K dev the bundled sample's 500 captions give a
    recall at most 0.012 below that of the 5,000 dev captions at every setting (never above it).
    """
    faiss = _faiss()
    n = vectors.shape[0]
    if n <= k:
        return {}
    sets = [(photo_like_queries(vectors), targets[1])]
    if text_queries is not None and len(text_queries):
        sets.insert(0, (np.asarray(text_queries, dtype=np.float32), targets[0]))
    truths = [exact_search(vectors, q, k)[1] for q, _ in sets]
    if is_ivfpq(index):
        return _calibrate_ivfpq(index, vectors, sets, truths, k)
    hnsw = isinstance(index, faiss.IndexHNSW)
    name, value, limit = ("efSearch", 16, 4096) if hnsw else ("nprobe", 1, index.nlist)
    while True:
        set_search_params(index, {name: value})
        recalls = [_recall(index, vectors, q, t, k, {}) for (q, _), t in zip(sets, truths, strict=True)]
        if all(r >= target for r, (_, target) in zip(recalls, sets, strict=True)) or value >= limit:
            logger.info("%s = %d gives recall@%d %s on the calibration queries", name, value, k, recalls)
            return {name: value}
        value = min(value * 2, limit)


def _calibrate_ivfpq(index, vectors: np.ndarray, sets: list, truths: list, k: int) -> dict[str, int]:
    """:func:`calibrate` for IVF-PQ: nprobe doubles as for IVF, but once a doubling gains less than
    0.005 of recall on the worst query set (the re-ranked candidates, not the lists scanned, are the
    limit: PQ scores put some true neighbours below the cut) the candidate count doubles instead, up
    to :data:`IVFPQ_CANDIDATES_MAX`."""
    params = {"nprobe": 1, "candidates": max(IVFPQ_CANDIDATES, IVFPQ_CANDIDATES_PER_K * k)}
    most = max(params["candidates"], min(int(index.ntotal), IVFPQ_CANDIDATES_MAX))
    previous = None
    while True:
        set_search_params(index, params)
        recalls = [_recall(index, vectors, q, t, k, params) for (q, _), t in zip(sets, truths, strict=True)]
        met = all(r >= target for r, (_, target) in zip(recalls, sets, strict=True))
        if met or (params["nprobe"] >= index.nlist and params["candidates"] >= most):
            logger.info("%s gives recall@%d %s on the calibration queries", params, k, recalls)
            return dict(params)
        stalled = previous is not None and min(recalls) - min(previous) < 0.005
        if (stalled or params["nprobe"] >= index.nlist) and params["candidates"] < most:
            params["candidates"] = min(2 * params["candidates"], most)
        else:
            params["nprobe"] = min(2 * params["nprobe"], index.nlist)
        previous = recalls


def faiss_search(index, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``index.search`` with the module's conventions (row -1 and score -inf for missing results)."""
    if k < 1:
        raise VsekitError(f"k must be >= 1, got {k}")
    scores, rows = index.search(_as_queries(queries, index.d), k)
    scores = scores.astype(np.float32)
    scores[rows < 0] = -np.inf
    return scores, rows.astype(np.int64)


class StoredRows(Protocol):
    """What re-ranking reads the stored vectors through: a shape, and rows by number (a memory-mapped
    array, or a segment that checks the blocks of the rows read: :mod:`vsekit.retrieval.segments`)."""

    @property
    def shape(self) -> tuple[int, ...]: ...

    def __getitem__(self, rows: Any) -> np.ndarray: ...


def rerank_search(
    index, vectors: np.ndarray | StoredRows, queries: np.ndarray, k: int, candidates: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The best ``k`` of ``index``'s ``candidates`` per query (default ``max(100, 10 k)``), re-ranked by
    their exact float32 cosine from the stored ``vectors`` (float16 or float32, may be a memmap: each
    query reads its candidate rows in row order). Ties go to the lower row, as in :func:`exact_search`."""
    if k < 1:
        raise VsekitError(f"k must be >= 1, got {k}")
    queries = _as_queries(queries, vectors.shape[1])
    want = candidates or max(IVFPQ_CANDIDATES, IVFPQ_CANDIDATES_PER_K * k)
    want = max(k, min(want, int(index.ntotal)))
    _, rows = index.search(queries, want)
    rows = rows.astype(np.int64)
    exact = np.full(rows.shape, -np.inf, dtype=np.float32)
    for q, query in enumerate(queries):
        slots = np.flatnonzero(rows[q] >= 0)
        slots = slots[np.argsort(rows[q, slots], kind="stable")]
        stored = np.asarray(vectors[rows[q, slots]], dtype=np.float32)
        exact[q, slots] = stored @ query
    return _best_first(exact, rows, k)


def ann_search(
    index, vectors: np.ndarray | StoredRows, queries: np.ndarray, k: int, params: dict[str, int] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """A FAISS index's top ``k``: IVF-PQ re-ranked from ``vectors`` (:func:`rerank_search`, with the
    calibrated ``params["candidates"]`` when given), any other as FAISS answers (:func:`faiss_search`)."""
    if is_ivfpq(index):
        return rerank_search(index, vectors, queries, k, (params or {}).get("candidates"))
    return faiss_search(index, queries, k)


def serialize_ann(index) -> bytes:
    """FAISS's own binary format (no pickle), for an atomic write."""
    return _faiss().serialize_index(index).tobytes()


def deserialize_ann(data: Any, params: dict[str, int] | None = None):
    """The FAISS structure in ``data`` (:func:`serialize_ann`'s bytes, or a read-only map of its file) with
    ``params`` set, read in place: its large arrays (inverted lists, PQ codes, flat vectors) are views of
    ``data``, which the structure keeps alive; ``data`` must not change while it is used. FAISS's own
    ``deserialize_index`` copied the bytes twice (into a vector, then into the structure): 0.1 s of a cold
    search's 0.4 s on the 1M index's 78 MB IVF-PQ file (bench/results/cold_search_1m.json)."""
    faiss = _faiss()
    array = np.frombuffer(data, dtype=np.uint8)
    reader = faiss.ZeroCopyIOReader(faiss.swig_ptr(array), array.size)
    index = faiss.read_index(reader, faiss.IO_FLAG_MMAP_IFC)
    index.referenced_objects = [*getattr(index, "referenced_objects", []), array]  # FAISS's keep-alive list
    set_search_params(index, params)
    return index
