"""Benchmark: photo search at 1M synthetic vectors (issue 11), within a bounded memory budget.

1M x 2048 float32 is 8.2 GB per copy, so this run keeps every copy in float16 (4.1 GB), as an index built
with ``--dtype float16`` stores it, and builds one structure at a time:

* *Vectors*: Gaussian with the mean and the top ``--components`` principal axes / variances of the
  shipped model's embeddings of all Flickr8K photos, plus isotropic noise carrying the rest of the
  variance, normalised; written once to a float16 ``.npy`` under ``--work`` and memory-mapped (as the
  index does). See ``bench_search.synthetic`` for the full-spectrum version used at 10K / 100K.
* *Queries*: ``pushed``: 100 stored vectors + 3 x a random unit vector, renormalised (as at 10K / 100K);
  ``captions``: the 500 captions of the bundled sample embedded by the shipped model (real text queries).
* *Exact vs FAISS flat*: vsekit's exact search (torch, chunked over the float16 memmap) against FAISS's
  exact index over the same float16 values (``IndexScalarQuantizer`` QT_fp16: ``IndexFlatIP`` would need
  a float32 copy, 8.2 GB more), single queries interleaved.
* *IVF*: one coarse quantizer (spherical k-means, ``--nlist`` lists, trained on ``--train`` vectors, in an
  HNSW graph for fast assignment) shared by IVF-SQfp16 (the vectors in float16) and IVF-PQ fast-scan
  (``--pq-m`` sub-quantizers x 4 bits) re-ranked exactly from float16 copies (``IndexRefine``): nprobe and
  k_factor sweeps, recall@10 against exact search, single-query p50 / p99.
* *HNSW* (``--hnsw``): ``IndexHNSWSQ`` (fp16 vectors, M 32, efConstruction 80), efSearch sweep.

Merged into bench/results/search.json under ``engines_1m``.

    python bench/bench_search_1m.py [--n 1000000] [--threads 2] [--hnsw]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_search as B  # noqa: E402
from _common import memory_gb, run_meta  # noqa: E402

K = 10


def generate(path: Path, n: int, spectrum, components: int, seed: int = 0) -> np.ndarray:
    """``n`` unit vectors (float16 ``.npy``, memory-mapped), written once and reused."""
    from vsekit.fileio import atomic_npy_memmap

    mean, axes, std = spectrum
    dim = len(mean)
    if not path.is_file():
        rng = np.random.default_rng(seed)
        top_axes, top_std = axes[:components], std[:components]
        rest = float(np.sqrt((std[components:] ** 2).sum() / dim)) + 1e-3
        with atomic_npy_memmap(path, "float16", (n, dim)) as out:
            for start in range(0, n, 50_000):
                m = min(50_000, n - start)
                x = mean + (rng.standard_normal((m, components), dtype=np.float32) * top_std) @ top_axes
                x += rng.standard_normal((m, dim), dtype=np.float32) * np.float32(rest)
                out[start : start + m] = x / np.linalg.norm(x, axis=1, keepdims=True)
    return np.load(path, mmap_mode="r")


def caption_queries() -> np.ndarray:
    import vsekit
    from vsekit.data import load_corpus
    from vsekit.resources import sample_data_path

    corpus = load_corpus(sample_data_path())
    return vsekit.load_model().embed_texts([c.text for c in corpus.captions])


def _recall(truth: np.ndarray, found: np.ndarray) -> float:
    return float(np.mean([len(set(t) & set(f)) / K for t, f in zip(truth, found, strict=True)]))


def _timed(search, queries: np.ndarray) -> tuple[dict, np.ndarray]:
    for q in queries[:3]:
        search(q[None])
    times, found = [], []
    for q in queries:
        start = time.perf_counter()
        found.append(search(q[None])[0])
        times.append(time.perf_counter() - start)
    return B._pct(times), np.asarray(found)


def exact_vs_flat(vectors, queries: np.ndarray) -> dict:
    import faiss

    from vsekit.retrieval.search import exact_search

    n, dim = vectors.shape
    start = time.perf_counter()
    flat = faiss.IndexScalarQuantizer(dim, faiss.ScalarQuantizer.QT_fp16, faiss.METRIC_INNER_PRODUCT)
    for s in range(0, n, 65_536):
        flat.add(np.asarray(vectors[s : s + 65_536], dtype=np.float32))
    build_s = time.perf_counter() - start
    mem = memory_gb()
    for q in queries[:3]:
        exact_search(vectors, q[None], K)
        flat.search(q[None], K)
    t_exact, t_flat, agree = [], [], []
    for q in queries:
        start = time.perf_counter()
        _, r_exact = exact_search(vectors, q[None], K)
        t_exact.append(time.perf_counter() - start)
        start = time.perf_counter()
        _, r_flat = flat.search(q[None], K)
        t_flat.append(time.perf_counter() - start)
        agree.append(len(set(r_exact[0]) & set(r_flat[0])) / K)
    out = {
        "queries": len(queries),
        "exact": {"engine": "vsekit exact (torch, float16 memmap, chunks of 65,536)", **B._pct(t_exact)},
        "flat": {
            "engine": "FAISS IndexScalarQuantizer QT_fp16 (exact over the same float16 values)",
            "build_s": build_s,
            "bytes_per_vector": flat.sa_code_size(),
            "top10_overlap_with_exact": float(np.mean(agree)),
            **B._pct(t_flat),
        },
        "memory_with_flat": mem,
    }
    out["exact_over_flat_p50"] = out["exact"]["p50_ms"] / out["flat"]["p50_ms"]
    return out


def train_quantizer(vectors, nlist: int, n_train: int, seed: int) -> tuple[np.ndarray, dict]:
    import faiss

    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(len(vectors), size=min(n_train, len(vectors)), replace=False))
    sample = np.asarray(vectors[rows], dtype=np.float32)
    start = time.perf_counter()
    km = faiss.Kmeans(vectors.shape[1], nlist, niter=10, seed=seed, spherical=True, verbose=False)
    km.cp.max_points_per_centroid = max(256, n_train // nlist + 1)
    km.train(sample)
    return km.centroids, {"train_s": time.perf_counter() - start, "train_vectors": len(sample)}


QUANTIZER = "hnsw"


def _hnsw_quantizer(centroids: np.ndarray):
    import faiss

    if QUANTIZER == "flat":  # exact assignment, batched through BLAS when adding
        q = faiss.IndexFlatIP(centroids.shape[1])
        q.add(centroids)
        return q
    q = faiss.IndexHNSWFlat(centroids.shape[1], 32, faiss.METRIC_INNER_PRODUCT)
    q.hnsw.efConstruction = 80
    q.add(centroids)
    q.hnsw.efSearch = 64
    return q


def _add(index, vectors) -> float:
    start = time.perf_counter()
    for s in range(0, len(vectors), 65_536):
        index.add(np.asarray(vectors[s : s + 65_536], dtype=np.float32))
    return time.perf_counter() - start


def _sweep(index, set_params, grid: list[dict], query_sets: dict, truths: dict) -> list[dict]:
    rows = []
    for params in grid:
        set_params(index, params)
        row = dict(params)
        for name, queries in query_sets.items():
            timing, found = _timed(lambda q: index.search(q, K)[1], queries)
            row[name] = {"recall@10": _recall(truths[name], found), **timing}
        rows.append(row)
        print(json.dumps(row), flush=True)
        if all(row[name]["recall@10"] >= 0.995 for name in query_sets):
            break
    return rows


def ivf_sq(vectors, centroids, query_sets, truths) -> dict:
    import faiss

    quantizer = _hnsw_quantizer(centroids)
    dim, nlist = vectors.shape[1], len(centroids)
    index = faiss.IndexIVFScalarQuantizer(
        quantizer, dim, nlist, faiss.ScalarQuantizer.QT_fp16, faiss.METRIC_INNER_PRODUCT
    )
    index.train(np.asarray(vectors[:1000], dtype=np.float32))  # quantizer trained: only the SQ (no-op)
    add_s = _add(index, vectors)
    mem = memory_gb()
    grid = [{"nprobe": p} for p in (8, 16, 32, 64, 128, 256, 512) if p <= nlist]
    sweep = _sweep(index, lambda ix, p: setattr(ix, "nprobe", p["nprobe"]), grid, query_sets, truths)
    out = {
        "engine": f"IVF{nlist}_{'HNSW32' if QUANTIZER == 'hnsw' else 'Flat'},SQfp16",
        "nlist": nlist,
        "add_s": add_s,
        "bytes_per_vector": index.sa_code_size() + 8,
        "memory": mem,
        "sweep": sweep,
    }
    index.reset()
    return out


def ivf_pq_refine(vectors, centroids, query_sets, truths, pq_m: int, n_train: int) -> dict:
    import faiss

    quantizer = _hnsw_quantizer(centroids)
    dim, nlist = vectors.shape[1], len(centroids)
    base = faiss.IndexIVFPQFastScan(quantizer, dim, nlist, pq_m, 4, faiss.METRIC_INNER_PRODUCT)
    rows = np.sort(np.random.default_rng(7).choice(len(vectors), size=n_train, replace=False))
    start = time.perf_counter()
    base.train(np.asarray(vectors[rows], dtype=np.float32))
    train_s = time.perf_counter() - start
    refine = faiss.IndexScalarQuantizer(dim, faiss.ScalarQuantizer.QT_fp16, faiss.METRIC_INNER_PRODUCT)
    index = faiss.IndexRefine(base, refine)
    add_s = _add(index, vectors)
    mem = memory_gb()

    def set_params(ix, p):
        faiss.downcast_index(ix.base_index).nprobe = p["nprobe"]
        ix.k_factor = p["k_factor"]

    grid = [{"nprobe": p, "k_factor": f} for f in (4, 16) for p in (8, 16, 32, 64, 128, 256) if p <= nlist]
    sweep = []
    for f in (4, 16):
        part = [g for g in grid if g["k_factor"] == f]
        sweep += _sweep(index, set_params, part, query_sets, truths)
    out = {
        "engine": f"IVF{nlist}_HNSW32,PQ{pq_m}x4fs, re-ranked exactly from float16 (IndexRefine)",
        "pq_train_s": train_s,
        "add_s": add_s,
        "bytes_per_vector_pq": base.code_size + 8,
        "bytes_per_vector_with_refine": base.code_size + 8 + refine.sa_code_size(),
        "memory": mem,
        "sweep": sweep,
    }
    index.reset()
    return out


def hnsw_sq(vectors, query_sets, truths) -> dict:
    import faiss

    index = faiss.IndexHNSWSQ(vectors.shape[1], faiss.ScalarQuantizer.QT_fp16, 32, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = 80
    index.train(np.asarray(vectors[:1000], dtype=np.float32))
    add_s = _add(index, vectors)
    mem = memory_gb()
    grid = [{"efSearch": e} for e in (32, 64, 128, 256, 512, 1024)]
    sweep = _sweep(index, lambda ix, p: setattr(ix.hnsw, "efSearch", p["efSearch"]), grid, query_sets, truths)
    return {"engine": "HNSW32,SQfp16", "build_s": add_s, "memory": mem, "sweep": sweep}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--components", type=int, default=512)
    parser.add_argument("--nlist", type=int, default=4096)
    parser.add_argument("--train", type=int, default=65_536)
    parser.add_argument("--pq-m", type=int, default=256)
    parser.add_argument("--flat-queries", type=int, default=40)
    parser.add_argument("--sweep-queries", type=int, default=500, help="queries of each set in the sweeps")
    parser.add_argument(
        "--quantizer", choices=["hnsw", "flat"], default="hnsw", help="IVF's coarse quantizer"
    )
    parser.add_argument("--hnsw", action="store_true")
    parser.add_argument("--skip", nargs="*", default=["ivf_pq"], choices=["flat", "ivf_sq", "ivf_pq"])
    parser.add_argument("--work", type=Path, default=Path("/tmp/vsekit-bench-1m"))
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args()
    global QUANTIZER
    QUANTIZER = args.quantizer

    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    import faiss
    import torch
    from threadpoolctl import threadpool_limits

    from vsekit.retrieval.search import exact_search

    torch.set_num_threads(args.threads)
    faiss.omp_set_num_threads(args.threads)
    threadpool_limits(args.threads)
    args.work.mkdir(parents=True, exist_ok=True)
    # sections measured by an earlier run (same N) are kept unless measured again
    saved = json.loads(B.RESULTS.read_text()).get("engines_1m", {}) if B.RESULTS.is_file() else {}
    result: dict = saved if saved.get("n") == args.n else {}
    result |= {"n": args.n, "dim": 2048, **run_meta(threads=args.threads), "load_before": B._load()}

    spectrum = B._real_spectrum(2048)
    total = float((spectrum[2] ** 2).sum())
    top = float((spectrum[2][: args.components] ** 2).sum())
    start = time.perf_counter()
    vectors = generate(
        args.work / f"synthetic-{args.n}-{args.components}.npy", args.n, spectrum, args.components
    )
    result["vectors"] = {
        "storage": "float16 .npy, memory-mapped",
        "bytes_per_vector": 2 * 2048,
        "components": args.components,
        "variance_in_components": top / total,
        "generate_or_open_s": time.perf_counter() - start,
    }
    query_sets = {
        "pushed": _pushed(vectors, 100),
        "captions": caption_queries(),
    }
    query_sets = {name: q[: args.sweep_queries] for name, q in query_sets.items()}
    needs_truth = args.hnsw or not {"ivf_sq", "ivf_pq"} <= set(args.skip)
    truths = {}
    if needs_truth:  # exact top 10 of every query (exact_vs_flat needs none)
        start = time.perf_counter()
        truths = {name: exact_search(vectors, q, K)[1] for name, q in query_sets.items()}
        result["truth_s"] = time.perf_counter() - start
    print(json.dumps(result), flush=True)

    def save(key: str, value) -> None:
        result[key] = value | {"date": run_meta()["date"], "load_at_end": B._load()}
        result["load_after"] = B._load()
        result["memory"] = memory_gb()
        print(json.dumps({key: value}, default=float), flush=True)
        if not args.no_save:
            B._save("engines_1m", result)

    if "flat" not in args.skip:
        save("exact_vs_flat", exact_vs_flat(vectors, query_sets["pushed"][: args.flat_queries]))
    if "ivf_sq" not in args.skip or "ivf_pq" not in args.skip:
        centroids, quantizer = train_quantizer(vectors, args.nlist, args.train, seed=1234)
        quantizer["nlist"] = args.nlist
        save("ivf_quantizer", quantizer)
        if "ivf_sq" not in args.skip:
            save("ivf_sq", ivf_sq(vectors, centroids, query_sets, truths))
        if "ivf_pq" not in args.skip:
            save("ivf_pq", ivf_pq_refine(vectors, centroids, query_sets, truths, args.pq_m, args.train))
    if args.hnsw:
        save("hnsw_sq", hnsw_sq(vectors, query_sets, truths))


def _pushed(vectors, n: int) -> np.ndarray:
    rng = np.random.default_rng(B.QUERY_SEED)
    rows = np.sort(rng.choice(len(vectors), size=n, replace=False))
    base = np.asarray(vectors[rows], dtype=np.float32)
    noise = rng.standard_normal(base.shape).astype(np.float32)
    q = base + 3.0 * noise / np.linalg.norm(noise, axis=1, keepdims=True)
    return (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)


if __name__ == "__main__":
    main()
