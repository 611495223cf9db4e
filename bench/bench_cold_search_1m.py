"""Benchmark: a cold ``vsekit search`` on a 1M-photo index, end to end (issue 36 item 9: open <= 0.3 s in a
fresh process, a cold search with the ANN engine answers in <= 1 s at 1M).

``bench_store.py`` times the store's parts at 1M on synthetic 1,024-d vectors in a Python child; this
bench times what a user runs: ``vsekit search INDEX "a sentence" --engine ivfpq`` in a fresh process
on an index that records the shipped ``vse`` (so its text side, the cached ONNX graph, is what embeds
the sentence) and holds 1,000,000 synthetic unit float16 vectors of the model's 2,048 dimensions (4 GB
of segments, in 4,096 clusters as ``bench_store.unit_block`` makes them), compacted into one segment,
which gets the ANN structure ``auto`` gives an index of that size (IVF-PQ). The
photos have no class rows, so the concept route has nothing to add (an index of real photos adds one
``[n, 10]`` gather, 17 ms at 152 photos in ``cold_start.json``); the photo files do not exist (a search
reads none).

Reported: the median of ``--runs`` fresh processes (wall and CPU), for ``--engine ivfpq`` and ``exact``,
and one process's stages (imports, open, text side, first sentence, first search). The page cache is
not dropped (a shared machine): the segments were just written, so "cold" means a new process.

    python bench/bench_cold_search_1m.py [--photos 1000000] [--runs 5] [--dir /big/disk] [--keep DIR]
        [--against-previous PAIRS]
"""

from __future__ import annotations

import argparse
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

from _common import STAGE_TIMER, run_meta, time_vsekit, write_result  # noqa: E402
from bench_store import cluster_centers, photo, unit_block  # noqa: E402
from vsekit.retrieval.build import compact_store, new_store  # noqa: E402
from vsekit.retrieval.index import Index  # noqa: E402
from vsekit.retrieval.store import NewSegment, Store, StoreChange, writer_lock  # noqa: E402

QUERY = "a dog runs through the grass"
PARTS, BLOCK = 10, 25_000

STAGES = (
    STAGE_TIMER
    + """
import vsekit.cli.search, vsekit.collection
mark("import")
index = vsekit.collection.Index.open(sys.argv[1]); len(index)
mark("open_index")
index.text_side()
mark("text_side")
query = index.embed_texts([sys.argv[2]])
mark("first_sentence")
index.search_vectors(query, k=10, engine="ivfpq")
mark("first_search_ivfpq")
print_stages()
"""
)


def build(out: Path, n: int, identity: dict) -> float:
    """The synthetic 1M index recording ``identity`` (the shipped vse's); seconds taken."""
    dim = int(identity["embed_dim"])
    centers, divisor = cluster_centers(dim), 2 * np.sqrt(dim)  # the same spread of cosines at 2,048-d
    start = time.perf_counter()
    new_store(out, dim, dtype="float16", engine="auto", photos_dir=str(out / "photos"), model=identity)
    with writer_lock(out):
        store = Store.open(out)
        try:
            bounds = np.linspace(0, n, PARTS + 1).astype(int)
            for a, b in zip(bounds[:-1], bounds[1:], strict=True):
                blocks = (unit_block(s, min(BLOCK, b - s), centers, divisor) for s in range(a, b, BLOCK))
                seg, sha = store.write_segment(blocks, b - a, dim, "float16")
                store.commit(StoreChange(segments=[NewSegment(seg, [photo(i) for i in range(a, b)], sha)]))
                print(f"  {b:,} vectors", flush=True)
        finally:
            store.close()
    return time.perf_counter() - start


def retarget(out: Path, identity: dict) -> bool:
    """Make a kept index record ``identity`` (the shipped vse now) when it recorded another model of the
    same dimension (the vse of an earlier release): its vectors are synthetic, so they belong to no model,
    and the search must embed its sentence with the shipped text side. True when it changed."""
    import sqlite3

    from vsekit.retrieval.store.settings import write_settings

    conn = sqlite3.connect(out / "store.sqlite", isolation_level=None)
    try:
        recorded = json.loads(conn.execute("SELECT value FROM settings WHERE key = 'model'").fetchone()[0])
        if recorded["sha256"] == identity["sha256"]:
            return False
        if recorded["embed_dim"] != identity["embed_dim"]:
            raise SystemExit(f"{out}: its vectors have {recorded['embed_dim']} dimensions; build it again")
        with writer_lock(out):
            conn.execute("BEGIN IMMEDIATE")
            write_settings(conn, {"model": identity})
            conn.execute("COMMIT")
        return True
    finally:
        conn.close()


def against_previous(out: Path, identity: dict, pairs: int, env: dict[str, str]) -> dict:
    """Median wall and CPU of ``pairs`` alternating cold searches (ivfpq) with the index recording the
    previous shipped vse, then the shipped one (the synthetic vectors fit either): the same machine and
    load for both, so the difference is the model's text side (graph size, file checksum)."""
    from vsekit.resources import previous_models
    from vsekit.retrieval.joint_model import load_model, model_identity

    kept = next(e for e in previous_models() if e["name"] == "vse")
    old = model_identity(load_model(kept["path"], "cpu")[0], "vse")
    argv = ["search", str(out), QUERY, "--engine", "ivfpq", "--top", "5"]
    runs: dict[str, list] = {"previous": [], "shipped": []}
    for i in range(pairs + 1):  # the first pair writes each model's graph and its checksum record
        for label, ident in (("previous", old), ("shipped", identity)):
            retarget(out, ident)
            timed = time_vsekit(argv, 1, env, expect="IMG_")
            if i:
                runs[label].append(timed)
    retarget(out, identity)
    return {
        "previous_sha256": kept["sha256"],
        "release": kept["release"],
        **{
            label: {
                "median_s": round(float(np.median([r["median_s"] for r in rs])), 3),
                "median_cpu_s": round(float(np.median([r["median_cpu_s"] for r in rs])), 3),
                "pairs": len(rs),
            }
            for label, rs in runs.items()
        },
    }


def stages(out: Path, env: dict[str, str]) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, "-c", STAGES, str(out), QUERY], capture_output=True, text=True, env=env, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--photos", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=None, help="where the 4 GB index is written")
    parser.add_argument("--keep", type=Path, default=None, help="build here and keep it (or reuse it)")
    parser.add_argument(
        "--against-previous",
        type=int,
        default=0,
        metavar="PAIRS",
        help="also time PAIRS alternating pairs of searches with the index recording the previous shipped "
        "vse (pretrained/previous/) and the shipped one: what the new model's text side costs, same load",
    )
    args = parser.parse_args()
    from vsekit.embedding.pipeline import VSEModel
    from vsekit.retrieval.joint_model import model_identity
    from vsekit.retrieval.text_engine import prepare_tower

    model = VSEModel.load("vse")
    identity = model_identity(model, "vse")
    prepare_tower(model, identity["sha256"])  # what `vsekit index build` leaves on the machine
    # bytecode in a private cache, written (as an installed package has it; as bench_cold_start.py does)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env |= {"OMP_NUM_THREADS": "1", "PYTHONPYCACHEPREFIX": str(Path.home() / ".cache/vsekit-pyc")}
    env["PYTHONPATH"] = str(ROOT / "src")  # this checkout's vsekit, the commit recorded
    tmp = None if args.keep else tempfile.mkdtemp(dir=args.dir)
    out = args.keep or Path(tmp) / "index"
    result: dict = {"photos": args.photos, "dim": identity["embed_dim"], "query": QUERY}
    if not (out / "store.sqlite").exists():
        result["build_s"] = round(build(out, args.photos, identity), 1)
    else:
        result["reused_index"] = str(out)  # built by an earlier run (its build time is not in this file)
        if retarget(out, identity):
            result["retargeted_to_shipped_vse"] = identity["sha256"]
    if not any(segment.ann for segment in Index.open(out)._view.segments):
        start = time.perf_counter()
        compact_store(out)  # one segment, with the ANN structure `auto` gives it (IVF-PQ at this size)
        result["compact_with_ann_s"] = round(time.perf_counter() - start, 1)
    result["engine_auto"] = Index.open(out).info()["engine"]
    try:
        result["disk_bytes"] = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
        for engine in ("ivfpq", "exact"):
            argv = ["search", str(out), QUERY, "--engine", engine, "--top", "5"]
            time_vsekit(argv, 1, env, expect="IMG_")  # the bytecode cache written, the page cache warm
            result[f"search_{engine}"] = time_vsekit(argv, args.runs, env, expect="IMG_")
        result["stages"] = stages(out, env)
        if args.against_previous:
            result["against_previous_vse"] = against_previous(out, identity, args.against_previous, env)
    finally:
        if tmp:
            shutil.rmtree(tmp)
    meta = run_meta(threads=1, vectors="synthetic unit float16 2,048-d (the shipped vse's), 4,096 clusters")
    path = write_result("cold_search_1m.json", meta | {"benchmark": "cold_search_1m", "result": result})
    print(json.dumps(result, indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
