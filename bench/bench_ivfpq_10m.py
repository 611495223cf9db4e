"""Benchmark: a 10M-vector IVF-PQ index built and queried on one machine within its RAM (issue 14, item 3).

*Vectors*: ``--n`` unit vectors of dimension ``--dim`` (256 by default: the shipped model's 2048-d
float16 store of 10M vectors would be 41 GB, more than this machine's free disk; 256-d is 5.1 GB),
generated in chunks straight into a float16 ``.npy`` that is then only memory-mapped. The distribution
is *clustered* (a mixture, not one Gaussian blob): ``--clusters`` centres drawn from an anisotropic
Gaussian (variance of axis i proportional to 1 / sqrt(i)) plus a shared mean direction (embedding
spaces have one: random photos lie at a cosine of about 0.2 to each other), cluster sizes Zipf-like
(weight of cluster j proportional to 1 / (j + 10)), each point its unit centre plus noise of the same
anisotropic shape at relative norm ``--spread`` (cosine to its centre about 0.75), renormalised. Every
chunk has its own seed, so a killed generation resumes where it stopped.

*Queries*: ``photo-like`` (the calibration rule's queries: 200 stored vectors pushed to a cosine of about
0.3, :func:`vsekit.retrieval.search.photo_like_queries`) and ``new`` (300 fresh draws from the same
mixture, not in the store: new photos of the same kinds of scenes). Exact top 10 by vsekit's chunked
brute force over the float16 memmap.

*Index*: :func:`vsekit.retrieval.ivfpq.build_ivfpq_file` (trained on a sample, filled in chunks from the
memmap, never all vectors in RAM), nprobe calibrated by the same recall@10 rule as the other engines,
searched with exact re-ranking of the candidates from the memmap. Single-query p50 / p99.

    nice -n 15 python bench/bench_ivfpq_10m.py --work /work/scratch-ivfpq [--n 10000000] [--dim 256]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from _common import latency_ms, load_now, memory_gb, proc_status_kib, run_meta, write_result

K = 10
_CHUNK = 250_000


class Mixture:
    """The clustered distribution (see the module docstring); ``draw(m, seed)`` gives ``m`` unit rows."""

    def __init__(self, dim: int, clusters: int, spread: float, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.scale = (1.0 / np.sqrt(np.arange(1, dim + 1))).astype(np.float32)
        self.scale /= np.linalg.norm(self.scale)  # a draw has expected squared norm 1
        mean = rng.standard_normal(dim).astype(np.float32) * self.scale
        mean *= 0.5 / np.linalg.norm(mean)
        centres = rng.standard_normal((clusters, dim)).astype(np.float32) * self.scale + mean
        self.centres = centres / np.linalg.norm(centres, axis=1, keepdims=True)
        weights = 1.0 / (np.arange(clusters) + 10.0)
        self.weights = weights / weights.sum()
        self.spread = np.float32(spread)

    def draw(self, m: int, seed: int) -> np.ndarray:
        rng = np.random.default_rng(seed)
        which = rng.choice(len(self.centres), size=m, p=self.weights)
        x = rng.standard_normal((m, len(self.scale)), dtype=np.float32) * (self.scale * self.spread)
        x += self.centres[which]
        return x / np.linalg.norm(x, axis=1, keepdims=True)


def generate(store: Path, n: int, mixture: Mixture) -> float:
    """Write ``n`` rows into the float16 store, chunk by chunk (resumes after a kill: a progress file
    names the chunks done). Returns the seconds spent."""
    start = time.perf_counter()
    done_file = store.with_suffix(".done")
    if not store.is_file():
        np.lib.format.open_memmap(store, mode="w+", dtype=np.float16, shape=(n, len(mixture.scale)))
        done_file.write_text("0")
    done = int(done_file.read_text()) if done_file.is_file() else n
    out = np.load(store, mmap_mode="r+")
    for s in range(done, n, _CHUNK):
        m = min(_CHUNK, n - s)
        out[s : s + m] = mixture.draw(m, seed=1_000_003 + s // _CHUNK)
        out.flush()
        done_file.write_text(str(s + m))
        print(f"generated {s + m:,} / {n:,} ({time.perf_counter() - start:.0f} s)", flush=True)
    del out
    return time.perf_counter() - start


def _mem() -> dict:
    """RSS now (anonymous: the process's own memory; file: store pages mapped in, which the kernel can
    drop) and the peak of the whole RSS."""
    fields = proc_status_kib(keys=("RssAnon", "RssFile", "VmRSS", "VmHWM"))
    return {key: round(kib / 1e6, 2) for key, kib in fields.items()}


def _timed(search, queries: np.ndarray) -> tuple[dict, np.ndarray]:
    for q in queries[:5]:
        search(q[None])
    times, found = [], []
    for q in queries:
        start = time.perf_counter()
        found.append(search(q[None])[1][0])
        times.append(time.perf_counter() - start)
    return latency_ms(times), np.asarray(found)


def _recall(truth: np.ndarray, found: np.ndarray) -> float:
    return float(np.mean([len(set(t) & set(f)) / K for t, f in zip(truth, found, strict=True)]))


def _save(result: dict, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    write_result(out, result)


def run(args, store: Path, mixture: Mixture, result: dict) -> None:
    import faiss
    import torch

    from vsekit.fileio import atomic_write_bytes
    from vsekit.retrieval.ivfpq import build_ivfpq, ivfpq_params
    from vsekit.retrieval.search import ann_search, calibrate, exact_search, photo_like_queries

    faiss.omp_set_num_threads(1)
    torch.set_num_threads(1)
    vectors = np.load(store, mmap_mode="r")
    queries = {"photo-like": photo_like_queries(vectors), "new": mixture.draw(300, seed=7)}
    start = time.perf_counter()
    truth = {name: exact_search(vectors, q, K)[1] for name, q in queries.items()}
    result["exact_truth_s"] = time.perf_counter() - start
    result["exact_truth_queries"] = {name: len(q) for name, q in queries.items()}
    result["memory_after_truth"] = _mem()
    _save(result, args.out)

    index_path = args.work / "ivfpq.faiss"
    params = ivfpq_params(*vectors.shape)
    start = time.perf_counter()
    if index_path.is_file():
        index = faiss.deserialize_index(np.frombuffer(index_path.read_bytes(), dtype=np.uint8))
        result["build_s"] = json.loads(args.out.read_text()).get("build_s")
    else:
        index = build_ivfpq(vectors, checkpoint=args.work / "ivfpq.partial")
        atomic_write_bytes(index_path, faiss.serialize_index(index).tobytes())
        (args.work / "ivfpq.partial").unlink(missing_ok=True)
        result["build_s"] = time.perf_counter() - start
    result["index"] = {
        "kind": f"IVF{params['nlist']},PQ{params['m']}x{params['nbits']} (inner product, spherical k-means)",
        **params,
        "bytes": index_path.stat().st_size,
        "bytes_per_vector": index_path.stat().st_size / len(vectors),
    }
    result["memory_after_build"] = _mem()
    print(json.dumps(result, indent=1), flush=True)
    _save(result, args.out)

    start = time.perf_counter()
    chosen = calibrate(index, vectors)
    result["calibration"] = {
        "params": chosen,
        "s": time.perf_counter() - start,
        "text_queries": "none (no text model at this dimension; photo-like only)",
    }
    _save(result, args.out)
    sweep = []
    nprobes = sorted(
        {
            max(1, chosen["nprobe"] // 4),
            max(1, chosen["nprobe"] // 2),
            chosen["nprobe"],
            min(index.nlist, 2 * chosen["nprobe"]),
        }
    )
    for nprobe in nprobes:
        for candidates in sorted({100, chosen["candidates"]}):
            p = {"nprobe": nprobe, "candidates": candidates}
            index.nprobe = nprobe
            row = {**p}
            for name, q in queries.items():
                timing, found = _timed(lambda x, p=p: ann_search(index, vectors, x, K, p), q)
                row[name] = {"recall@10": _recall(truth[name], found), **timing}
            sweep.append(row)
            print(json.dumps(row), flush=True)
    result["sweep"] = sweep
    result["memory_end"] = _mem()
    result["load_end"] = load_now()
    _save(result, args.out)


def query_stage(args, store: Path, mixture: Mixture) -> None:
    """``--stage truth``: the exact top 10 of the first ``--queries`` of the 300 new draws `all` uses,
    saved; ``--stage query``: a sweep of the saved index on them, merged into ``--out``."""
    import faiss
    import torch

    from vsekit.retrieval.search import ann_search, exact_search

    faiss.omp_set_num_threads(1)
    torch.set_num_threads(1)
    vectors = np.load(store, mmap_mode="r")
    queries = mixture.draw(300, seed=7)[: args.queries]
    truth_path = args.work / f"truth-new-{len(queries)}.npy"
    if not truth_path.is_file():
        start = time.perf_counter()
        truth = exact_search(vectors, queries, K)[1]
        np.save(truth_path, truth)
        truth_path.with_suffix(".json").write_text(json.dumps({"s": time.perf_counter() - start, **_mem()}))
        print(f"truth of {len(queries)} queries: {time.perf_counter() - start:.0f} s", flush=True)
    if args.stage == "truth":
        return
    truth = np.load(truth_path)
    index = faiss.deserialize_index(np.frombuffer((args.work / "ivfpq.faiss").read_bytes(), dtype=np.uint8))
    result = json.loads(args.out.read_text())
    result["exact_truth_new"] = {
        "queries": len(queries),
        **json.loads(truth_path.with_suffix(".json").read_text()),
    }
    sweep = []
    for nprobe in (16, 64, 256):
        for candidates in (100, 800):
            p = {"nprobe": nprobe, "candidates": candidates}
            index.nprobe = nprobe
            timing, found = _timed(lambda x, p=p: ann_search(index, vectors, x, K, p), queries)
            row = {**p, "new": {"recall@10": _recall(truth, found), **timing}}
            sweep.append(row)
            print(json.dumps(row), flush=True)
    result["sweep_new"] = sweep
    result["memory_query"] = _mem()
    result["load_query_end"] = load_now()
    _save(result, args.out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, required=True, help="folder for the float16 store and the index")
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--clusters", type=int, default=20_000)
    ap.add_argument("--spread", type=float, default=0.9)
    ap.add_argument(
        "--stage",
        choices=["generate", "all", "truth", "query"],
        default="all",
        help="truth / query: the exact top 10 of --queries new draws saved under --work, then a sweep of "
        "the saved index on them (a shorter run than `all`'s calibration on a loaded machine)",
    )
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "ivfpq_10m.json")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    mixture = Mixture(args.dim, args.clusters, args.spread)
    store = args.work / f"vectors-{args.n}x{args.dim}.npy"
    gen_s = generate(store, args.n, mixture)
    print(json.dumps({"generate_s": gen_s, **memory_gb()}), flush=True)
    if args.stage == "generate":
        return
    if args.stage in ("truth", "query"):
        query_stage(args, store, mixture)
        return
    result = {
        "benchmark": "ivfpq_10m",
        **run_meta(threads=1),
        "note": "run under nice -n 15 with 1 thread while other jobs used the machine: latencies pessimistic",
        "n": args.n,
        "dim": args.dim,
        "distribution": {
            "kind": "clustered mixture (module docstring)",
            "clusters": args.clusters,
            "spread": args.spread,
        },
        "store": {"path_kind": "float16 .npy, memory-mapped", "bytes": store.stat().st_size},
        "generate_s": gen_s,
        "load_start": load_now(),
    }
    run(args, store, mixture, result)


if __name__ == "__main__":
    main()
