"""A running server while `vsekit index update` changes its index (issue 21 item 2): errors, answers
with a photo count no generation committed, and how long a committed update takes to be served.

For each engine (``exact``, ``hnsw``): bundled sample photos copied under new names into a folder,
indexed (``Index.build`` with the shipped model), served by the real app (``create_app`` under uvicorn
on 127.0.0.1, in a thread of this process, as tests/serve_helpers.py runs it). Client threads send
``/api/search``, ``/api/info``, ``/api/similar/{id}`` and ``/api/thumb/{id}`` in a loop while a child
process runs ``vsekit index update`` several times, each after adding and removing photos in the
folder. A poller reads the store's ``generations`` table every 20 ms (the moment a generation is
committed); an ``/api/info`` poller every 50 ms (the moment the server shows it).

Recorded: requests and errors (non-2xx, by status) per endpoint, ``/api/info`` answers whose count is
not the count of a committed generation, and per update the time from its commit to the first
``/api/info`` answer (sent after the commit) that shows it. Nothing is asserted.

    nice -n 10 python bench/bench_live_update.py [--updates 6] [--photos 24] [--threads 3]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "bench"), str(ROOT / "tests")]

import httpx  # noqa: E402

from _common import run_meta, write_result  # noqa: E402
from serve_helpers import running_server  # noqa: E402

QUERIES = ["a dog runs on the grass", "children playing", "a man on a bike", "people at the beach"]


class Watch:
    """Polls the store's committed generations (number -> (photo count, first seen at))."""

    def __init__(self, db: Path) -> None:
        self.db, self.seen, self.stop = db, {}, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        conn = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, check_same_thread=False)
        while not self.stop.is_set():
            try:
                for n, photos in conn.execute("SELECT n, photos FROM generations"):
                    self.seen.setdefault(n, (photos, time.monotonic()))
            except sqlite3.Error:
                pass
            time.sleep(0.02)
        conn.close()


def client_loop(base: str, stop: threading.Event, stats: dict, safe_ids: int, seed: int) -> None:
    """Requests of the four kinds in turn (ids below ``safe_ids`` exist in every generation)."""
    rng = random.Random(seed)
    with httpx.Client(base_url=base, timeout=60) as client:
        while not stop.is_set():
            kind = rng.choice(["search", "info", "similar", "thumb"])
            url = {
                "search": f"/api/search?q={rng.choice(QUERIES)}&k=10",
                "info": "/api/info",
                "similar": f"/api/similar/{rng.randrange(safe_ids)}?k=10",
                "thumb": f"/api/thumb/{rng.randrange(safe_ids)}",
            }[kind]
            try:
                answer = client.get(url)
                status = answer.status_code
                if kind == "info" and status == 200:
                    stats["info_counts"].append(answer.json()["count"])
                if kind in ("search", "similar") and status == 200:
                    found = {r["path"] for r in answer.json()["results"]}
                    stats["new_in_results"].update(p for p in found if p.startswith("new-"))
            except httpx.HTTPError as exc:
                status = type(exc).__name__
            stats["requests"][kind] += 1
            if status != 200:
                stats["errors"][f"{kind} {status}"] += 1


def info_poller(base: str, stop: threading.Event, stats: dict) -> None:
    """``/api/info`` every 50 ms: (sent at, count) for the time-to-serve."""
    with httpx.Client(base_url=base, timeout=60) as client:
        while not stop.is_set():
            sent = time.monotonic()
            try:
                answer = client.get("/api/info")
                stats["requests"]["info (poller)"] += 1
                if answer.status_code == 200:
                    stats["polls"].append((sent, answer.json()["count"]))
                    stats["info_counts"].append(answer.json()["count"])
                else:
                    stats["errors"][f"info (poller) {answer.status_code}"] += 1
            except httpx.HTTPError as exc:
                stats["errors"][f"info (poller) {type(exc).__name__}"] += 1
            time.sleep(0.05)


def change_folder(photos: Path, spare: list[Path], rng: random.Random, step: int) -> tuple[int, int]:
    """Add 3 photos (copies under new names) and remove 1 (never one of the first ids' photos)."""
    for j in range(3):
        shutil.copyfile(spare[(3 * step + j) % len(spare)], photos / f"new-{step:02d}-{j}.jpg")
    removable = sorted(p for p in photos.glob("*.jpg") if p.name.startswith(("new-", "z-")))
    gone = rng.choice(removable)
    gone.unlink()
    return 3, 1


def run_cli(command: list[str], step: int, watch: Watch) -> dict[str, Any]:
    """One ``vsekit index update`` / ``compact`` in a child process (niced, one thread)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    before = max(watch.seen) if watch.seen else 0
    began = time.monotonic()
    run = subprocess.run(["nice", "-n", "10", *command], env=env, capture_output=True, text=True)
    done = {
        "step": step,
        "command": command[2],
        "rc": run.returncode,
        "seconds": round(time.monotonic() - began, 2),
        "generation_before": before,
    }
    if run.returncode:
        done["stderr"] = run.stderr[-500:]
    return done


def run_engine(engine: str, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    import vsekit
    from vsekit.embedding.pipeline import VSEModel
    from vsekit.resources import sample_data_path
    from vsekit.serve.app import create_app

    images = sorted((Path(sample_data_path()) / "Images").glob("*.jpg"))
    photos, out = tmp / f"photos-{engine}", tmp / f"index-{engine}"
    photos.mkdir()
    for i, src in enumerate(images[: args.photos]):  # "a-" first in id order, "z-" removable
        shutil.copyfile(src, photos / f"{'a' if i < args.photos // 2 else 'z'}-{i:03d}.jpg")
    spare = images[args.photos :]
    model = VSEModel.load(None, device="cpu")
    index = vsekit.Index.build(photos, out, model, engine=engine, progress=False)
    start_count = len(index)
    app = create_app(index)
    stats: dict[str, Any] = {
        "requests": Counter(),
        "errors": Counter(),
        "info_counts": [],
        "polls": [],
        "new_in_results": set(),
    }
    watch = Watch(out / "store.sqlite")
    watch.thread.start()
    rng = random.Random(args.seed)
    updates = []
    with running_server(app) as base:
        httpx.get(f"{base}/api/search", params={"q": QUERIES[0]}, timeout=120)  # loads the text model
        stop = threading.Event()
        threads = [
            threading.Thread(target=client_loop, args=(base, stop, stats, args.photos // 2, args.seed + t))
            for t in range(args.threads)
        ]
        threads.append(threading.Thread(target=info_poller, args=(base, stop, stats)))
        for t in threads:
            t.start()
        time.sleep(2.0)
        vsekit_cli = str(Path(sys.executable).parent / "vsekit")
        for step in range(args.updates):
            change_folder(photos, spare, rng, step)
            updates.append(run_cli([vsekit_cli, "index", "update", str(out)], step, watch))
            time.sleep(args.settle)
            if args.compact_every and (step + 1) % args.compact_every == 0:
                updates.append(run_cli([vsekit_cli, "index", "compact", str(out)], step, watch))
                time.sleep(args.settle)
        time.sleep(2.0)
        stop.set()
        for t in threads:
            t.join()
    watch.stop.set()
    watch.thread.join()
    summary = summarise(engine, stats, watch, updates, start_count)
    summary["photos_in_folder_at_end"] = len(list(photos.glob("*.jpg")))
    summary["new_photos_added"] = 3 * args.updates
    summary["compactions"] = sum(u["command"] == "compact" for u in updates)
    summary["new_photos_seen_in_results"] = len(stats["new_in_results"])
    return summary


def summarise(engine: str, stats: dict, watch: Watch, updates: list, start_count: int) -> dict[str, Any]:
    committed = {photos for photos, _ in watch.seen.values()}
    never = [c for c in stats["info_counts"] if c not in committed]
    delays, previous = [], None
    for n in sorted(watch.seen):  # generations that changed the count (not a compaction's)
        photos, at = watch.seen[n]
        shown = [sent for sent, count in stats["polls"] if sent >= at and count == photos]
        if previous is not None and photos != previous:
            delays.append(round(shown[0] - at, 3) if shown else None)
        previous = photos
    measured = [d for d in delays if d is not None]
    return {
        "engine": engine,
        "photos_at_start": start_count,
        "updates": updates,
        "generations": {str(n): v[0] for n, v in sorted(watch.seen.items())},
        "requests": dict(stats["requests"]),
        "requests_total": sum(stats["requests"].values()),
        "errors": dict(stats["errors"]),
        "errors_total": sum(stats["errors"].values()),
        "info_answers": len(stats["info_counts"]),
        "info_counts_never_committed": len(never),
        "commit_to_served_s": delays,
        "commit_to_served_max_s": max(measured) if measured else None,
        "commit_to_served_mean_s": round(sum(measured) / len(measured), 3) if measured else None,
        "updates_never_served": sum(d is None for d in delays),
        "count_served_at_end": stats["polls"][-1][1] if stats["polls"] else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", nargs="*", default=["exact", "hnsw"])
    parser.add_argument("--updates", type=int, default=6)
    parser.add_argument("--photos", type=int, default=24, help="sample photos indexed at the start")
    parser.add_argument("--threads", type=int, default=3, help="client threads (plus one /api/info poller)")
    parser.add_argument("--settle", type=float, default=2.0, help="seconds between updates")
    parser.add_argument(
        "--compact-every", type=int, default=3, help="`vsekit index compact` after every N updates"
    )
    parser.add_argument("--seed", type=int, default=22)
    parser.add_argument("--out", default="live_update.json")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    started, load_before = time.monotonic(), os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="vsekit-live-") as tmp:
        engines = {engine: run_engine(engine, args, Path(tmp)) for engine in args.engines}
    result = {
        "meta": run_meta(threads=1, loadavg_before=[round(x, 2) for x in load_before]),
        "minutes": round((time.monotonic() - started) / 60, 1),
        "settings": {k: v for k, v in vars(args).items() if k != "out"},
        "engines": engines,
        "command": "nice -n 10 python bench/bench_live_update.py " + " ".join(sys.argv[1:]),
    }
    write_result(args.out, result)
    for engine, r in engines.items():
        keys = (
            "requests_total",
            "errors_total",
            "info_counts_never_committed",
            "commit_to_served_max_s",
            "count_served_at_end",
            "photos_in_folder_at_end",
            "new_photos_seen_in_results",
        )
        print(engine, {k: r[k] for k in keys}, r["errors"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
