"""Benchmark: how search costs grow with the collection (issue 14, item 5), for the scaling report.

At 1K, 10K, 100K and 1M vectors (the first n rows of ``bench_ivfpq_10m.py``'s clustered 256-d float16
store: its rows are independent draws, so a prefix is a sample of the same distribution), on this
machine with one thread:

* exact search (vsekit's chunked torch scan of the float16 memmap): single-query p50 / p99;
* IVF-PQ (:mod:`vsekit.retrieval.ivfpq`): build time (train + fill), index bytes, calibration time and
  the nprobe / candidates it picks (photo-like queries, recall@10 >= 0.95), then single-query p50 / p99
  and recall@10 on 100 new draws from the mixture (not in the store, not used to calibrate).

Merged with the 10M run (``ivfpq_10m.json``), the 1M numbers of ``search.json`` and the extraction /
training / corpus measurements into ``scaling.json`` by ``bench/scaling_report.py``.

    nice -n 15 python bench/bench_scaling.py --store /work/scratch-ivfpq/vectors-10000000x256.npy
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_ivfpq_10m as B  # noqa: E402
from _common import load_now, run_meta, write_result  # noqa: E402

K = 10


def one_size(vectors: np.ndarray, new_queries: np.ndarray) -> dict:
    from vsekit.retrieval.ivfpq import build_ivfpq, ivfpq_params
    from vsekit.retrieval.search import ann_search, calibrate, exact_search, serialize_ann

    n = len(vectors)
    row: dict = {"n": n, "load_start": load_now()}
    exact_timing, truth = B._timed(lambda q: exact_search(vectors, q, K), new_queries)
    row["exact"] = exact_timing
    start = time.perf_counter()
    index = build_ivfpq(vectors)
    row["ivfpq_build_s"] = time.perf_counter() - start
    row["ivfpq_params"] = ivfpq_params(*vectors.shape)
    row["ivfpq_bytes"] = len(serialize_ann(index))
    start = time.perf_counter()
    params = calibrate(index, vectors)
    row["calibration_s"], row["calibrated"] = time.perf_counter() - start, params
    index.nprobe = params.get("nprobe", 1)
    timing, found = B._timed(lambda q: ann_search(index, vectors, q, K, params), new_queries)
    row["ivfpq_query"] = {**timing, "recall@10_new": B._recall(truth, found)}
    row["memory"] = B._mem()
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, required=True)
    ap.add_argument("--sizes", default="1000,10000,100000,1000000")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "scaling_search.json")
    args = ap.parse_args()
    import faiss
    import torch

    faiss.omp_set_num_threads(1)
    torch.set_num_threads(1)
    store = np.load(args.store, mmap_mode="r")
    mixture = B.Mixture(store.shape[1], 20_000, 0.9)  # the 10M store's defaults
    new_queries = mixture.draw(100, seed=11)
    result = {
        "benchmark": "scaling_search",
        **run_meta(threads=1, note="nice 15, on a machine shared with other jobs"),
        "vectors": f"first n rows of {args.store.name} (clustered mixture, float16, memory-mapped)",
        "rows": [],
    }
    for n in [int(s) for s in args.sizes.split(",")]:
        row = one_size(store[:n], new_queries)
        print(json.dumps(row), flush=True)
        result["rows"].append(row)
        write_result(args.out, result)


if __name__ == "__main__":
    main()
