"""Benchmark: where the memory of `vsekit extract` goes (peak RSS per suspect), issue 13 item 3.

Runs `vsekit extract` (MobileNetV2, one-layer, fresh cache) as a child process over a slice of
../shared/data/flickr8k (the first --images photos, default 1,000), once per suspect removed or changed:
glibc malloc arenas, the oneDNN primitive cache, batch size; plus the floor (python + torch + vsekit
imported, the backbone built) and, unless --skip-full, the default command and `--fne` over all of Flickr8K.

Peak RSS is measured by a tiny launcher process that runs the command and reads its own
RUSAGE_CHILDREN. Reading RUSAGE_CHILDREN in a big parent is wrong on Linux: exec() records the forked
copy's RSS as the child's high-water mark, so a 1 GB parent reports 1 GB for `true` (this is what made
bench_extract.py report 3.2 GB for a 0.7 GB extraction before).

Writes the table under the key "memory" of bench/results/extract.json (the other keys are kept).

    python bench/bench_extract_memory.py [--images 1000] [--skip-full]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import run_meta, write_result

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("VSEKIT_SHARED_DATA", REPO.parent / "shared" / "data" / "flickr8k"))
RESULTS = REPO / "bench" / "results"

# Runs argv[1:] with output discarded, prints the child's peak RSS in KiB (Linux ru_maxrss units).
_LAUNCHER = (
    "import resource, subprocess, sys\n"
    "r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)\n"
    "sys.stderr.buffer.write(r.stderr[-2000:] if r.returncode else b'')\n"
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    "sys.exit(r.returncode)\n"
)

_FLOOR = (
    "import torch\n"
    "from vsekit.vision.extract import _CNN\n"
    "from vsekit.vision.store import _spec_for_layers\n"
    "_CNN(_spec_for_layers('mobilenet_v2', 'one-layer', None), 'cpu')\n"
)


def peak_rss(cmd: list[str], env: dict[str, str] | None = None) -> dict:
    """Wall seconds and peak RSS (MB) of ``cmd`` run from a small launcher process."""
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", _LAUNCHER, *cmd],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
    )
    elapsed = time.perf_counter() - start
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed: {proc.stderr.strip()}")
    return {"wall_s": elapsed, "peak_rss_mb": int(proc.stdout.split()[-1]) / 1024}


def extract_cmd(data: Path, cache_dir: Path, batch_size: int = 32) -> list[str]:
    return [
        sys.executable, "-m", "vsekit", "extract", "--data", str(data),
        "--cache-dir", str(cache_dir), "--batch-size", str(batch_size),
    ]  # fmt: skip


def make_slice(n: int, where: Path) -> Path:
    """A Flickr8K-layout corpus of the first ``n`` photos (symlinks) with their captions."""
    images = sorted(p.name for p in (SHARED / "Images").glob("*.jpg"))[:n]
    (where / "Images").mkdir(parents=True)
    for name in images:
        (where / "Images" / name).symlink_to(SHARED / "Images" / name)
    keep = set(images)
    lines = (SHARED / "captions.txt").read_text().splitlines()
    rows = [lines[0]] + [line for line in lines[1:] if line.split(",", 1)[0] in keep]
    (where / "captions.txt").write_text("\n".join(rows) + "\n")
    return where


SUSPECTS: list[tuple[str, dict[str, str], int]] = [
    ("default (batch 32)", {}, 32),
    ("MALLOC_ARENA_MAX=2", {"MALLOC_ARENA_MAX": "2"}, 32),
    ("ONEDNN_PRIMITIVE_CACHE_CAPACITY=0", {"ONEDNN_PRIMITIVE_CACHE_CAPACITY": "0"}, 32),
    ("batch 8", {}, 8),
    ("batch 16", {}, 16),
    ("batch 64", {}, 64),
]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--images", type=int, default=1000, help="photos in the slice")
    parser.add_argument("--skip-full", action="store_true", help="skip the whole-Flickr8K run")
    args = parser.parse_args()
    if not SHARED.is_dir():
        sys.exit(f"{SHARED}: Flickr8K not found (set VSEKIT_SHARED_DATA)")

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        data = make_slice(args.images, Path(tmp) / "slice")
        floor = peak_rss([sys.executable, "-c", _FLOOR])
        rows.append({"suspect": "floor: imports + backbone built, no image", "images": 0, **floor})
        for k, (label, env, batch) in enumerate(SUSPECTS):
            run = peak_rss(extract_cmd(data, Path(tmp) / f"c{k}", batch), env)
            rows.append({"suspect": label, "images": args.images, "batch_size": batch, **run})
        if not args.skip_full:
            full = peak_rss(extract_cmd(SHARED, Path(tmp) / "full"))
            n = len(list((SHARED / "Images").glob("*.jpg")))
            rows.append({"suspect": "default, all of Flickr8K", "images": n, "batch_size": 32, **full})
            fne = peak_rss([*extract_cmd(SHARED, Path(tmp) / "fne"), "--fne"])
            rows.append({"suspect": "--fne, all of Flickr8K", "images": n, "batch_size": 32, **fne})

    print(f"{'suspect':<45}{'images':>8}{'peak RSS MB':>13}{'wall s':>9}")
    for r in rows:
        print(f"{r['suspect']:<45}{r['images']:>8}{r['peak_rss_mb']:>13.0f}{r['wall_s']:>9.1f}")

    path = RESULTS / "extract.json"
    out = json.loads(path.read_text()) if path.exists() else {}
    out["memory"] = {
        **run_meta(threads="vsekit extract's default (torch: one per core)"),
        "backbone": "mobilenet_v2 one-layer",
        "how": "peak RSS of a child `vsekit extract`, fresh cache, read by a small launcher",
        "rows": rows,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_result(path, out, indent=2)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
