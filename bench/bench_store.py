"""The photo index store at 10K, 100K (and 1M) photos (issues 27, 36): synthetic unit float16 1,024-d
vectors in 4,096 clusters through the store's own API (no CNN).

Per size: build (10 segments of n/10, one commit each), exact search p50 over those 10 segments against
the same vectors in one array (same run), compaction into one segment, open (first in a process: the
cheap structural checks and the header blocks' CRCs; again: checked already), RSS of an open index in a
fresh process (anonymous memory, i.e. beyond the memory-mapped vectors), add 1 photo, add 1,000, delete
1, a folder-filtered search; then an IVF-PQ structure over the big segment and, each in a fresh process,
the first search after ``Index.open`` with the ``ivfpq`` engine and with the exact one (a fresh process
checks the blocks it reads: the exact search every block of every segment, IVF-PQ only its candidate
rows' blocks). Bytes written are /proc/self/io ``write_bytes`` (what reached the block layer: file data
and the database's WAL; a child's writes are not counted).

    python bench/bench_store.py [--sizes 10000 100000 1000000] [--queries 30] [--out store.json]

Writes bench/results/store.json (``--key 1m`` merges its one size into that file as ``meta_1m`` and
``size_1m`` instead).
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "bench")]

import numpy as np  # noqa: E402
import torch  # noqa: E402

from _common import run_meta, write_result  # noqa: E402
from vsekit.retrieval import segments as segments_module  # noqa: E402
from vsekit.retrieval.build import add_vectors, compact_store, new_store, write_ann  # noqa: E402
from vsekit.retrieval.index import Index  # noqa: E402
from vsekit.retrieval.search import exact_search  # noqa: E402
from vsekit.retrieval.store import NewSegment, PhotoRecord, Store, StoreChange, writer_lock  # noqa: E402

DIM, PARTS, BLOCK = 1024, 10, 50_000


def written() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("write_bytes:"):
            return int(line.split()[1])
    return 0


CLUSTERS = 4096


def cluster_centers(dim: int) -> np.ndarray:
    """:data:`CLUSTERS` seeded unit centres in ``dim`` dimensions."""
    centers = np.random.default_rng(4096).standard_normal((CLUSTERS, dim), dtype=np.float32)
    return centers / np.linalg.norm(centers, axis=1, keepdims=True)


_CENTERS = cluster_centers(DIM)


def unit_block(start: int, n: int, centers: np.ndarray = _CENTERS, divisor: float = 32.0) -> np.ndarray:
    """Vectors ``start .. start + n``: unit, in :data:`CLUSTERS` clusters (noise of standard deviation
    1 / ``divisor`` per dimension around each centre: at 1,024-d and 32, a cosine of about 0.7 to the
    centre), as photos' embeddings are clustered; uniform random vectors in 1,024-d have no neighbours for
    an ANN structure to find (its calibration then asks for every list and 4,096 candidates)."""
    members = centers[(np.arange(start, start + n) * 2_654_435_761) % CLUSTERS]
    v = members + np.random.default_rng(start).standard_normal(members.shape, dtype=np.float32) / divisor
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return v.astype(np.float16)


def photo(i: int) -> PhotoRecord:
    folder = f"{2000 + i % 20}/{1 + i % 12:02d}"
    taken = f"{2000 + i % 20}-{1 + i % 12:02d}-{1 + i % 28:02d}T12:00:00"
    return PhotoRecord(
        f"{folder}/IMG_{i:07d}.jpg", 1000 + i, i, hashlib.sha256(str(i).encode()).hexdigest(), taken
    )


def timed(fn):
    gc.collect()
    w0, t0 = written(), time.perf_counter()
    result = fn()
    return result, round(time.perf_counter() - t0, 4), written() - w0


def build(out: Path, n: int) -> None:
    """``PARTS`` segments of n / PARTS rows, each written in blocks and committed in one transaction."""
    new_store(out, DIM, dtype="float16", engine="exact")
    with writer_lock(out):
        store = Store.open(out)
        try:
            bounds = np.linspace(0, n, PARTS + 1).astype(int)
            for a, b in zip(bounds[:-1], bounds[1:], strict=True):
                blocks = (unit_block(s, min(BLOCK, b - s)) for s in range(a, b, BLOCK))
                seg, sha = store.write_segment(blocks, b - a, DIM, "float16")
                store.commit(StoreChange(segments=[NewSegment(seg, [photo(i) for i in range(a, b)], sha)]))
        finally:
            store.close()


def p50(fn, queries: np.ndarray) -> float:
    fn(queries[:1])  # warm
    times = []
    for q in queries:
        t0 = time.perf_counter()
        fn(q[None])
        times.append(time.perf_counter() - t0)
    return round(1000 * float(np.median(times)), 3)


RSS_CHILD = """
import sys, numpy as np
sys.path.insert(0, {src!r})
from vsekit.retrieval.index import Index
def rss():
    fields = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines() if ":" in l)
    return int(fields["RssAnon"].split()[0]) * 1024, int(fields["RssFile"].split()[0]) * 1024
before = rss()
index = Index.open({out!r})
index.search_vectors(np.ones((1, {dim}), np.float32) / {dim} ** 0.5, k=10)
after = rss()
print(after[0] - before[0], after[1] - before[1])
"""


COLD_CHILD = """
import json, sys, time
t0 = time.perf_counter()
sys.path.insert(0, {src!r})
import numpy as np
import faiss, torch
torch.set_num_threads(1); faiss.omp_set_num_threads(1)
from vsekit.retrieval.index import Index
t1 = time.perf_counter()
index = Index.open({out!r})
t2 = time.perf_counter()
q = np.random.default_rng(7).standard_normal((2, {dim})).astype(np.float32)
q /= np.linalg.norm(q, axis=1, keepdims=True)
index.search_vectors(q[:1], k=10, engine={engine!r})
t3 = time.perf_counter()
index.search_vectors(q[1:], k=10, engine={engine!r})
t4 = time.perf_counter()
print(json.dumps({{"imports_s": t1 - t0, "open_s": t2 - t1, "first_search_s": t3 - t2, "again_s": t4 - t3}}))
"""


def cold_search(out: Path, engine: str) -> dict[str, float]:
    """A fresh process: imports, ``Index.open``, its first search with ``engine`` (the blocks it reads
    checked), a second search; and the whole process's wall time."""
    code = COLD_CHILD.format(src=str(ROOT / "src"), out=str(out), dim=DIM, engine=engine)
    t0 = time.perf_counter()
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    times = json.loads(found.stdout.strip().splitlines()[-1])
    times["process_s"] = time.perf_counter() - t0
    return {key: round(value, 4) for key, value in times.items()}


def add_ivfpq(out: Path) -> None:
    """An IVF-PQ structure over the index's largest segment, committed (calibrated on photo-like queries)."""
    with writer_lock(out):
        store = Store.open(out)
        try:
            n = max(store.segments(), key=lambda s: s[1])[0]
            store.commit(StoreChange(anns=[(n, *write_ann(store, n, "ivfpq", lambda: None))]))
        finally:
            store.close()


def rss_of_open_index(out: Path) -> dict[str, int]:
    code = RSS_CHILD.format(src=str(ROOT / "src"), out=str(out), dim=DIM)
    anon, file = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    return {"anonymous_bytes": int(anon), "mapped_file_bytes": int(file)}


def run_size(root: Path, n: int, n_queries: int) -> dict:
    out = root / f"store-{n}"
    queries = unit_block(10**9, n_queries).astype(np.float32)
    result: dict = {"photos": n}
    _, result["build_s"], result["build_bytes"] = timed(lambda: build(out, n))
    index = Index.open(out)
    view = index._view
    result["segments_searched"] = len(view.segments)
    result["exact_p50_ms_segments"] = p50(lambda q: index.search_vectors(q, k=10), queries)
    result["nearest_p50_ms_segments"] = p50(lambda q: view.nearest(q, 10, "exact"), queries)
    index = view = None  # the 10-segment generation is let go before the compaction
    _, result["compact_s"], result["compact_bytes"] = timed(lambda: compact_store(out))
    segments_module.forget_checks()
    one, result["open_first_s"], _ = timed(lambda: Index.open(out))
    _, result["open_again_s"], _ = timed(lambda: Index.open(out))
    array = one._view.segments[0].vectors  # the same vectors, one memory-mapped array
    result["nearest_p50_ms_one_array"] = p50(lambda q: exact_search(array, q, 10), queries)
    result["exact_p50_ms_one_segment"] = p50(lambda q: one.search_vectors(q, k=10), queries)
    result["segments_over_one_array"] = round(
        result["nearest_p50_ms_segments"] / result["nearest_p50_ms_one_array"], 3
    )
    result["rss_open_index"] = rss_of_open_index(out)
    ids = [n + i for i in range(1000)]
    _, result["add_1_s"], result["add_1_bytes"] = timed(
        lambda: add_vectors(out, [photo(ids[0])], unit_block(ids[0], 1), auto_compact=False)
    )
    _, result["add_1000_s"], result["add_1000_bytes"] = timed(
        lambda: add_vectors(out, [photo(i) for i in ids[1:]], unit_block(ids[1], 999), auto_compact=False)
    )
    _, result["delete_1_s"], result["delete_1_bytes"] = timed(
        lambda: add_vectors(out, removed=[photo(5).id], auto_compact=False)
    )
    one.refresh()
    result["segments_after_updates"] = len(one._view.segments)
    result["exact_p50_ms_after_updates"] = p50(lambda q: one.search_vectors(q, k=10), queries)
    result["folder_p50_ms"] = p50(lambda q: one.search_vectors(q, k=10, folder="2005/06"), queries)
    result["taken_p50_ms"] = p50(
        lambda q: one.search_vectors(q, k=10, taken_after="2019-01-01", taken_before="2020-01-01"), queries
    )
    one = None
    _, result["ivfpq_build_s"], _ = timed(lambda: add_ivfpq(out))
    result["cold_ivfpq"] = cold_search(out, "ivfpq")
    result["cold_exact"] = cold_search(out, "exact")
    result["disk_bytes"] = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    shutil.rmtree(out)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=30)
    parser.add_argument("--dir", type=Path, default=None, help="where the stores are written (a disk)")
    parser.add_argument("--out", default="store.json")
    parser.add_argument("--key", default=None, help="merge into --out as meta_<key>, size_<key>")
    args = parser.parse_args()
    torch.set_num_threads(1)
    import faiss

    faiss.omp_set_num_threads(1)
    rows, load_at_start = [], [round(x, 2) for x in os.getloadavg()]
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for n in args.sizes:
            rows.append(run_size(Path(tmp), n, args.queries))
            print(rows[-1], flush=True)
    meta = run_meta(
        threads=1,
        vectors="synthetic unit float16 1,024-d, 4,096 clusters",
        note="machine shared with other sessions",
        loadavg_at_start=load_at_start,
    )
    if args.key:
        merged = json.loads((ROOT / "bench" / "results" / args.out).read_text(encoding="utf-8"))
        merged[f"meta_{args.key}"], merged[f"size_{args.key}"] = meta, rows[0]
        path = write_result(args.out, merged)
    else:
        path = write_result(args.out, {"meta": meta, "sizes": rows})
    print(f"wrote {path}")
    print(
        "| photos | build s | add 1 ms / MB | add 1000 s | delete 1 ms | compact s | open s (first/again) "
        "| RSS MB | search ms 10 seg / 1 array (ratio) | folder ms |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['photos']:,} | {r['build_s']} | {1000 * r['add_1_s']:.0f} / {r['add_1_bytes'] / 1e6:.2f} "
            f"| {r['add_1000_s']} | {1000 * r['delete_1_s']:.0f} | {r['compact_s']} "
            f"| {r['open_first_s']} / {r['open_again_s']} "
            f"| {r['rss_open_index']['anonymous_bytes'] / 1e6:.0f} "
            f"| {r['nearest_p50_ms_segments']} / {r['nearest_p50_ms_one_array']} "
            f"({r['segments_over_one_array']}) "
            f"| {r['folder_p50_ms']} |"
        )


if __name__ == "__main__":
    main()
