"""Benchmark: the web server under a bounded loopback load (issue 15 item 5).

``vsekit serve`` runs as a child process on 127.0.0.1 over an index of the 1,000 Flickr8K dev photos (the
shipped model; or the 100 bundled sample photos when ../shared is absent, or with ``--photos sample``).
After a warm-up of one request per kind (it loads the captioner), an httpx client sends ``--requests``
(2,000) requests with ``--concurrency`` (16) in flight, in a seeded shuffled mix of:

* ``search``: ``GET /api/search?q=<a caption>&k=10`` (8 of 16),
* ``search_image``: ``POST /api/search/image`` with a photo's JPEG bytes (4 of 16),
* ``caption``: ``POST /api/caption`` with a photo's JPEG bytes (2 of 16),
* ``caption_id``: ``GET /api/caption/{id}`` of an indexed photo (2 of 16).

Reported: errors (any non-200, wrong body or client exception; goal 0), p50/p99 latency per kind,
requests/s, the server's peak RSS (VmHWM) and its RSS sampled every 0.2 s with the number of answered
requests at that moment; memory flat: RSS when the 500th request was answered vs. at the last one, and
the slope of RSS over the second half of the run (bytes per request). Writes bench/results/serve_load.json.

    python bench/bench_serve_load.py [--requests 2000] [--concurrency 16] [--photos dev|sample] [--threads 1]
        [--only search search_image caption caption_id] [--out FILE] [--probe-at 1000 5000 [--probe-frames 8]]

``--probe-at``: the server runs under bench/serve_probe.py (tracemalloc on); after each of those many answers
it takes a snapshot (with its RSS and glibc's mallinfo2), and once idle after the last request it runs
``malloc_trim(0)``; the result gets a ``probe`` entry with the places whose traced memory grew most between
the first and the last snapshot, and the RSS that the trim gave back.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from _common import latency_ms, proc_status_kib, run_meta, write_result

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("VSEKIT_SHARED_DATA", REPO.parent / "shared" / "data" / "flickr8k"))
RESULTS = REPO / "bench" / "results" / "serve_load.json"
VSEKIT = str(Path(sys.executable).parent / "vsekit")
PROBE = REPO / "bench" / "serve_probe.py"
MIX = ["search"] * 8 + ["search_image"] * 4 + ["caption"] * 2 + ["caption_id"] * 2
K = 10


def _photos_and_queries(which: str, folder: Path) -> tuple[Path, list[str], str]:
    """A folder of photos (symlinks) to index, captions to search for, and which set it is."""
    from vsekit.data import load_corpus
    from vsekit.resources import sample_data_path

    use_dev = which == "dev" or (which == "auto" and SHARED.is_dir())
    corpus = load_corpus(SHARED).split("dev") if use_dev else load_corpus(sample_data_path())
    folder.mkdir(parents=True, exist_ok=True)
    for image_id in corpus.image_ids():
        (folder / image_id).symlink_to(Path(corpus.images[image_id]).resolve())
    name = "Flickr8K dev" if use_dev else "bundled sample"
    return folder, [c.text for c in corpus.captions], name


def _rss_kib(pid: int) -> dict[str, int]:
    return proc_status_kib(pid, ("VmRSS", "VmHWM"))


class _Sampler(threading.Thread):
    """The server's RSS every ``period`` seconds, with the number of requests answered by then."""

    def __init__(self, pid: int, answered: list[int], period: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.pid, self.answered, self.period = pid, answered, period
        self.samples: list[tuple[float, int, int]] = []  # (seconds, answered, RSS KiB)
        self.stop = threading.Event()

    def run(self) -> None:
        start = time.perf_counter()
        while not self.stop.is_set():
            rss = _rss_kib(self.pid)["VmRSS"]
            self.samples.append((round(time.perf_counter() - start, 2), self.answered[0], rss))
            self.stop.wait(self.period)


def _start_server(
    index_dir: Path, threads: int, probe: tuple[Path, int] | None
) -> tuple[subprocess.Popen, int]:
    """``vsekit serve``, or with ``probe`` = (folder, frames) the same server under bench/serve_probe.py."""
    import httpx

    port = _free_port()
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    cmd = [VSEKIT, "serve", str(index_dir), "--host", "127.0.0.1", "--port", str(port)]
    if probe is not None:
        cmd = [sys.executable, str(PROBE), str(index_dir), "--host", "127.0.0.1", "--port", str(port)]
        cmd += ["--probe-dir", str(probe[0]), "--frames", str(probe[1])]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    deadline = time.monotonic() + 180
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/api/info", timeout=2).status_code == 200:
                return proc, port
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise SystemExit(f"vsekit serve did not come up: {proc.stderr.read().decode()[-2000:]}")
        time.sleep(0.5)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _plan(n: int, queries: list[str], uploads: list[bytes], n_photos: int, seed: int, mix: list[str]) -> list:
    rng = random.Random(seed)
    kinds = [mix[i % len(mix)] for i in range(n)]
    rng.shuffle(kinds)
    return [(kind, rng.choice(queries), rng.choice(uploads), rng.randrange(n_photos)) for kind in kinds]


async def _one(client, kind: str, query: str, upload: bytes, photo_id: int) -> None:
    """One request; raises on anything but a 200 with the expected body."""
    if kind == "search":
        resp = await client.get("/api/search", params={"q": query, "k": K})
    elif kind == "search_image":
        files = {"file": ("photo.jpg", upload, "image/jpeg")}
        resp = await client.post("/api/search/image", params={"k": K}, files=files)
    elif kind == "caption":
        resp = await client.post("/api/caption", files={"file": ("photo.jpg", upload, "image/jpeg")})
    else:
        resp = await client.get(f"/api/caption/{photo_id}")
    if resp.status_code != 200:
        raise RuntimeError(f"{kind}: HTTP {resp.status_code} {resp.text[:200]}")
    body = resp.json()
    # up to 3 captions: a photo the concept guard names only by its subject gets that one caption
    ok = len(body["results"]) == K if kind.startswith("search") else 1 <= len(body["captions"]) <= 3
    if not ok:
        raise RuntimeError(f"{kind}: unexpected body {str(body)[:200]}")


async def _load(port: int, plan: list[tuple], concurrency: int, answered: list[int], marks: dict) -> dict:
    import httpx

    times: dict[str, list[float]] = {kind: [] for kind in dict.fromkeys(p[0] for p in plan)}
    errors: list[str] = []
    gate = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=120.0, limits=limits) as client:
        for kind in dict.fromkeys(p[0] for p in plan):  # warm-up: one of each kind (loads the captioner)
            await _one(client, kind, *next(p[1:] for p in plan if p[0] == kind))
        marks["warm"]()

        async def timed(kind: str, *args) -> None:
            async with gate:
                start = time.perf_counter()
                try:
                    await _one(client, kind, *args)
                    times[kind].append(time.perf_counter() - start)
                except Exception as exc:  # noqa: BLE001 -- every failure is counted, none stops the run
                    errors.append(f"{type(exc).__name__}: {exc}"[:300])
                answered[0] += 1
                marks.get(answered[0], lambda: None)()

        start = time.perf_counter()
        await asyncio.gather(*(timed(*p) for p in plan))
        wall = time.perf_counter() - start
    return {"times": times, "errors": errors, "wall_s": wall}


def _chain(first, then):
    def both() -> None:
        if first is not None:
            first()
        then()

    return both


def _probe_lines(log: Path, n: int, timeout: float = 300.0) -> list[dict]:
    """The first ``n`` lines of the probe's log, waiting for the server to write them."""
    deadline = time.monotonic() + timeout
    while True:
        lines = log.read_text().splitlines() if log.is_file() else []
        if len(lines) >= n or time.monotonic() > deadline:
            return [json.loads(line) for line in lines[:n]]
        time.sleep(0.5)


def _finish_probe(pid: int, folder: Path, snapshots: int) -> dict:
    """Wait for the snapshots, then malloc_trim the idle server; diff the first and last snapshots."""
    lines = _probe_lines(folder / "probe.jsonl", snapshots)
    os.kill(pid, signal.SIGUSR2)
    trim = _probe_lines(folder / "probe.jsonl", snapshots + 1)[-1]
    out = {"snapshots": lines, "malloc_trim_when_idle": trim}
    first, last = folder / "snap_1.tracemalloc", folder / f"snap_{snapshots}.tracemalloc"
    if snapshots > 1 and first.is_file() and last.is_file():
        out["tracemalloc_growth_top"] = _tracemalloc_diff(first, last)
    return out


def _tracemalloc_diff(first: Path, last: Path, top: int = 15) -> list[dict]:
    """The ``top`` places (file:line of the allocation, with its callers) whose traced memory grew most."""
    import tracemalloc

    keep = [tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, "<frozen *>")]
    old = tracemalloc.Snapshot.load(str(first)).filter_traces(keep)
    new = tracemalloc.Snapshot.load(str(last)).filter_traces(keep)
    rows = []
    for stat in new.compare_to(old, "traceback")[:top]:
        frames = [f"{Path(f.filename).name}:{f.lineno}" for f in stat.traceback]
        rows.append({"kib": round(stat.size_diff / 1024, 1), "blocks": stat.count_diff, "where": frames})
    return rows


def _ms(values: list[float]) -> dict:
    if not values:
        return {"requests": 0}
    return {"requests": len(values), **latency_ms(values)}


def run(args: argparse.Namespace, work: Path) -> dict:
    import vsekit

    photos, queries, name = _photos_and_queries(args.photos, work / "photos")
    start = time.perf_counter()
    index = vsekit.Index.build(photos, work / "index", progress=False)
    build_s = time.perf_counter() - start
    uploads = [p.read_bytes() for p in sorted(photos.iterdir())[:50]]
    mix = [kind for kind in MIX if not args.only or kind in args.only]
    plan = _plan(args.requests, queries, uploads, len(index), args.seed, mix)
    probe = (work / "probe", args.probe_frames) if args.probe_at else None
    proc, port = _start_server(index.path, args.threads, probe)
    answered, rss_at = [0], {}
    marks = {
        m: (lambda m=m: rss_at.__setitem__(m, _rss_kib(proc.pid)["VmRSS"]))
        for m in ("warm", 500, args.requests)
    }
    for m in args.probe_at or ():
        marks[m] = _chain(marks.get(m), lambda: os.kill(proc.pid, signal.SIGUSR1))
    sampler = _Sampler(proc.pid, answered)
    try:
        rss_start = _rss_kib(proc.pid)["VmRSS"]
        sampler.start()
        result = asyncio.run(_load(port, plan, args.concurrency, answered, marks))
        sampler.stop.set()
        sampler.join()
        hwm = _rss_kib(proc.pid)["VmHWM"]
        probed = _finish_probe(proc.pid, probe[0], len(args.probe_at)) if probe else None
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
    second_half = [(a, r) for _, a, r in sampler.samples if a >= args.requests // 2]
    slope = None
    if len({a for a, _ in second_half}) > 1:  # RSS (KiB) against requests answered: a line's slope, in bytes
        slope = np.polyfit(*zip(*second_half, strict=True), 1)[0] * 1024
    return {
        "photos": f"{name} ({len(index)} photos)",
        "model": index.info()["model"],
        "index_build_s": round(build_s, 1),
        "requests": args.requests,
        "concurrency": args.concurrency,
        "mix": {kind: mix.count(kind) / len(mix) for kind in dict.fromkeys(mix)},
        "server_omp_threads": args.threads,
        "malloc_arena_max": os.environ.get("MALLOC_ARENA_MAX", "glibc default"),
        "malloc_env": {k: v for k, v in os.environ.items() if k.startswith("MALLOC_")},
        "errors": len(result["errors"]),
        "error_examples": result["errors"][:10],
        "wall_s": round(result["wall_s"], 1),
        "requests_per_s": round(args.requests / result["wall_s"], 2),
        "all": _ms([t for ts in result["times"].values() for t in ts]),
        "per_kind": {kind: _ms(ts) for kind, ts in result["times"].items()},
        "rss_mib": {
            "before_warmup": round(rss_start / 1024, 1),
            "after_warmup": round(rss_at.get("warm", 0) / 1024, 1),
            "after_500": round(rss_at.get(500, 0) / 1024, 1),
            "after_last": round(rss_at.get(args.requests, 0) / 1024, 1),
            "peak_vmhwm": round(hwm / 1024, 1),
            "second_half_slope_bytes_per_request": None if slope is None else round(float(slope), 1),
        },
        **(
            {"probe": {"at_requests": args.probe_at, "tracemalloc_frames": args.probe_frames, **probed}}
            if probed
            else {}
        ),
        "rss_samples": [
            {"s": s, "answered": a, "rss_mib": round(r / 1024, 1)} for s, a, r in sampler.samples
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--photos", choices=["auto", "dev", "sample"], default="auto")
    parser.add_argument("--threads", type=int, default=1, help="OMP threads of the server (default 1)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", nargs="*", choices=sorted(set(MIX)), help="send only these kinds")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--probe-at",
        type=int,
        nargs="*",
        help="run the server under bench/serve_probe.py and take a "
        "tracemalloc snapshot after these many answers (then malloc_trim it when idle); diffs first vs last",
    )
    parser.add_argument("--probe-frames", type=int, default=8, help="tracemalloc frames (0: RSS only)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="serve_load_") as tmp:
        row = run(args, Path(tmp))
    row.update(run_meta(threads=args.threads))  # the server's OMP threads
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_result(args.out, {"benchmark": "serve_load", **row}, indent=2)
    summary = {k: v for k, v in row.items() if k != "rss_samples"}
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
