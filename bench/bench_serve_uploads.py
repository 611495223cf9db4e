"""Benchmark: does a large upload hold up the others (issue 21 item 5)?

``vsekit serve`` runs as a child process on 127.0.0.1 over an index of 8 bundled sample photos. One
client uploads a ~40-megapixel PNG (the issue's 39.7 MP case) to ``POST /api/search/image`` ``--uploads``
times in a row; meanwhile another asks ``GET /api/info`` and ``GET /api/search?q=...`` every 50 ms. Reported:
the latency of those small requests while an upload is in flight (p50, p90, max), the upload's own time,
and the same with no upload (the baseline). ``--src DIR`` runs the server from another checkout's
``src`` (e.g. ``/work/main/src`` for the code before the change) with this interpreter.

    python bench/bench_serve_uploads.py [--uploads 3] [--side 6300] [--src DIR] [--label after] [--no-poll]

Writes (merges its ``--label`` entry into) bench/results/serve_uploads.json, with date, machine, load
average, threads and git commit.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np

from _common import git_commit, latency_ms, load_now, run_meta, write_result

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "serve_uploads.json"


def _big_png(side: int) -> bytes:
    """A ``side`` x ``side`` RGB PNG of smooth gradients (compresses to a few MB, decodes to ~3 bytes/px)."""
    from PIL import Image

    ramp = np.arange(side, dtype=np.uint16)
    pixels = np.empty((side, side, 3), np.uint8)
    pixels[..., 0] = (ramp[None, :] // 25).astype(np.uint8)
    pixels[..., 1] = (ramp[:, None] // 25).astype(np.uint8)
    pixels[..., 2] = 128
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG", compress_level=6)
    return out.getvalue()


def _summary(values: list[float]) -> dict[str, float | int]:
    if not values:
        return {"n": 0}
    rounded = {k: round(v, 1) for k, v in latency_ms(values, (50, 90)).items()}
    return {"n": len(values), **rounded, "max_ms": round(1000 * max(values), 1)}


def _poll(url: str, stop: threading.Event, busy: threading.Event, out: dict[str, list[float]]) -> None:
    """``/api/info`` and a text search every 50 ms; each latency filed by whether an upload was in flight
    when it was asked."""
    with httpx.Client(timeout=120) as client:
        while not stop.is_set():
            for kind, path, params in (
                ("info", "/api/info", None),
                ("search", "/api/search", {"q": "a dog"}),
            ):
                in_flight = busy.is_set()
                start = time.perf_counter()
                response = client.get(url + path, params=params)
                elapsed = time.perf_counter() - start
                if response.status_code != 200:
                    raise RuntimeError(f"{path}: {response.status_code} {response.text[:200]}")
                if in_flight:  # asked while an upload was in flight (a blocked one ends after it)
                    out[f"{kind}_during_upload"].append(elapsed)
                elif not busy.is_set():
                    out[f"{kind}_idle"].append(elapsed)
            time.sleep(0.05)


def _serve(index: Path, src: Path | None) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "COLUMNS": "300"}
    if src is not None:
        env["PYTHONPATH"] = str(src)
    command = [sys.executable, "-m", "vsekit", "serve", str(index), "--port", "8731"]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    line = server.stdout.readline()
    match = re.search(r"(http://127\.0\.0\.1:\d+)", line)
    if not match:
        server.kill()
        raise RuntimeError(f"the server did not start: {line}{server.stdout.read()[:2000]}")
    url = match.group(1)
    for _ in range(600):  # the old code prints before binding: wait for the socket
        try:
            httpx.get(url + "/api/info", timeout=5)
            break
        except httpx.TransportError:
            time.sleep(0.1)
    return server, url


def _git_commit(src: Path | None) -> str:
    where = src.parent if src is not None else REPO
    result = subprocess.run(["git", "-C", str(where), "rev-parse", "HEAD"], capture_output=True, text=True)
    return result.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--uploads", type=int, default=3)
    parser.add_argument("--side", type=int, default=6300, help="the PNG's side in pixels (6300: 39.7 MP)")
    parser.add_argument("--src", type=Path, default=None, help="run the server from this src folder")
    parser.add_argument("--label", default="after")
    parser.add_argument(
        "--no-poll", action="store_true", help="uploads alone (their time with nothing else asked)"
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    import vsekit
    from vsekit.resources import sample_data_path

    load_before = load_now()
    png = _big_png(args.side)
    with tempfile.TemporaryDirectory(prefix="bench_serve_uploads_") as tmp:
        photos = Path(tmp) / "photos"
        photos.mkdir()
        for path in sorted((sample_data_path() / "Images").glob("*.jpg"))[:8]:
            shutil.copyfile(path, photos / path.name)
        vsekit.Index.build(photos, Path(tmp) / "index", progress=False)
        server, url = _serve(Path(tmp) / "index", args.src)
        try:
            httpx.get(url + "/api/search", params={"q": "a dog"}, timeout=120)  # warm the text model
            files = {
                "file": ("warm.jpg", (photos / sorted(os.listdir(photos))[0]).read_bytes(), "image/jpeg")
            }
            httpx.post(url + "/api/search/image", files=files, timeout=120)  # and the CNN
            latencies: dict[str, list[float]] = {
                k: [] for k in ("info_idle", "search_idle", "info_during_upload", "search_during_upload")
            }
            stop, busy = threading.Event(), threading.Event()
            poller = threading.Thread(target=_poll, args=(url, stop, busy, latencies), daemon=True)
            if not args.no_poll:
                poller.start()
            time.sleep(2.0)  # a baseline with no upload
            upload_s = []
            for _ in range(args.uploads):
                busy.set()
                start = time.perf_counter()
                response = httpx.post(
                    url + "/api/search/image", files={"file": ("big.png", png, "image/png")}, timeout=300
                )
                upload_s.append(time.perf_counter() - start)
                busy.clear()
                if response.status_code != 200:
                    raise RuntimeError(f"upload: {response.status_code} {response.text[:200]}")
                time.sleep(1.0)
            stop.set()
            if poller.is_alive():
                poller.join(timeout=120)
        finally:
            server.terminate()
            server.wait(timeout=30)

    entry = {
        "server_src": str(args.src) if args.src else "this checkout",
        "upload": {"pixels": args.side * args.side, "bytes": len(png), "count": args.uploads},
        "small_requests_meanwhile": not args.no_poll,
        "upload_s": [round(s, 3) for s in upload_s],
        **{k: _summary(v) for k, v in latencies.items()},
        **run_meta(
            threads={"torch": _torch_threads(), "omp": os.environ.get("OMP_NUM_THREADS")},
            commit=_git_commit(args.src) if args.src is not None else git_commit(),  # the server's code
        ),
        "load_average": {"before": load_before["loadavg"], "after": load_now()["loadavg"]},
    }
    results = json.loads(args.out.read_text()) if args.out.is_file() else {}
    results["benchmark"] = "small requests while a 40-megapixel PNG upload is processed (issue 21 item 5)"
    results.setdefault("runs", {})[args.label] = entry
    write_result(args.out, results, indent=2)
    print(json.dumps(entry, indent=2))


def _torch_threads() -> int:
    import torch

    return torch.get_num_threads()


if __name__ == "__main__":
    main()
