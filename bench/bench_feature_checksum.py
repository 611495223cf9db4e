"""Benchmark: what the feature-matrix checksum costs (issue 15 item 4).

A finished extraction hashes its matrix (sha256 of the raw float16 file and the done mask) into
``meta.json``; ``FeatureStore.open`` checks it once per process per file version. Timed here on the
Flickr8K-size caches found under the cache root (read only; nothing is written): the hash, and for scale
reading every row as float32 (what training does with a cache once per run). Best of ``--repeat``, files
in the page cache (warm), one thread.

    python bench/bench_feature_checksum.py [--cache-root ~/.cache/vsekit] [--min-images 5000]

Writes bench/results/feature_checksum.json.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from _common import run_meta, write_result
from vsekit.resources import default_cache_root
from vsekit.vision.store import FeatureStore, _matrix_digest

RESULTS = Path(__file__).resolve().parent / "results" / "feature_checksum.json"


def _best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cache-root", type=Path, default=default_cache_root())
    parser.add_argument("--min-images", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rows, seen = [], set()
    for meta in sorted((args.cache_root / "features").glob("*/meta.json")):
        store = FeatureStore.open(meta.parent, verify=False)
        shape = (len(store.image_ids), store.dim, store.layers)
        if len(store.image_ids) < args.min_images or shape in seen or not store.done_mask().any():
            continue
        seen.add(shape)
        raw_path, done = store._raw_path(), store.done_mask()
        hash_s = _best(lambda: _matrix_digest(raw_path, done), args.repeat)  # noqa: B023
        read_s = _best(lambda: np.asarray(store._raw(), dtype=np.float32), args.repeat)  # noqa: B023
        mib = raw_path.stat().st_size / 2**20
        rows.append({"cache": store.layers, "images": shape[0], "dim": shape[1], "matrix_mib": round(mib, 1),
                     "checksum_s": round(hash_s, 3), "checksum_mib_per_s": round(mib / hash_s),
                     "read_all_rows_s": round(read_s, 3)})  # fmt: skip
        print(rows[-1], flush=True)
    out = {
        "benchmark": "feature_checksum",
        **run_meta(threads=1),  # hashing and reading are single-threaded
        "rows": rows,
    }
    write_result(RESULTS, out)


if __name__ == "__main__":
    main()
