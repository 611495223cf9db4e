"""Benchmark: `vsekit index build` over the everyday photos (152) before and after "a build scans once and
reads each photo once" (issue 36 item 4), in the same run.

``before`` is another commit's ``src/`` (``git archive REV src``; default: the commit where this branch
left ``main``, so that nothing else differs), ``after`` this checkout's. For each, one probe build
in-process counts the opens of every photo file (``os.open``, ``open``: Pillow opens a path with
``builtins.open``) and the listings of the photo folder (``os.scandir``) during the CLI's build, and
times the read step alone over every photo (before: ``read_photo`` then ``date_taken``, the two reads;
after: ``read_photo_dated``, one); then full ``vsekit index build`` runs into a fresh ``--out`` each, in
fresh processes, the two versions interleaved so that the load of the shared machine falls on both
alike. A first build of each (not timed) fills the model caches (the ONNX graphs). Wall and CPU (user +
system) times are kept with the load average before and after each run.

    python bench/bench_build_reads.py [--before REV] [--runs 3] [--photos FOLDER]

Writes bench/results/build_reads.json.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import REPO, load_now, run_meta, write_result

EVERYDAY = REPO.parent / "shared" / "data" / "everyday" / "photos"
PROBE = r"""
import builtins, io, json, os, sys, time
from collections import Counter
from vsekit.retrieval import photos as P
from vsekit.retrieval.photos import scan_photos

folder, out = os.path.realpath(sys.argv[1]), sys.argv[2]
files = {os.path.realpath(p.path) for p in scan_photos(folder).photos}
opens, walks = Counter(), Counter()

def counting(real, counter):
    def wrapper(path, *args, **kwargs):
        if isinstance(path, (str, bytes, os.PathLike)):
            counter[os.path.realpath(os.fsdecode(path))] += 1
        return real(path, *args, **kwargs)
    return wrapper

real = os.open, builtins.open, io.open, os.scandir
os.open, builtins.open, io.open = (counting(f, opens) for f in real[:3])
os.scandir = counting(real[3], walks)
from vsekit.cli import main
sys.argv = ["vsekit", "index", "build", folder, "--out", out]
try:
    main()
except SystemExit as exc:
    assert not exc.code, exc.code
os.open, builtins.open, io.open, os.scandir = real
per_photo = Counter(opens[f] for f in files)
folders = {os.path.realpath(r) for r, _, _ in os.walk(folder)}

scan = scan_photos(folder).photos
if hasattr(P, "read_photo_dated"):
    step, how = (lambda p: P.read_photo_dated(p)), "read_photo_dated"
else:
    from vsekit.retrieval.build import date_taken
    step, how = (lambda p: (P.read_photo(p), date_taken(p.path))), "read_photo + date_taken"
times = []
for _ in range(5):
    start = time.perf_counter()
    for p in scan:
        step(p)
    times.append(time.perf_counter() - start)
print(json.dumps({
    "photos": len(files),
    "opens_per_photo": {str(k): v for k, v in sorted(per_photo.items())},
    "walks_of_each_folder": sorted(Counter(walks[f] for f in folders).items()),
    "read_step": how,
    "read_step_s_per_photo_median": round(sorted(times)[2] / len(scan), 6),
    "read_step_s_per_photo_min": round(min(times) / len(scan), 6),
}))
"""


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, *argv], capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)}: {done.stdout[-400:]} {done.stderr[-800:]}")
    return done


def _build(photos: Path, out: Path, env: dict[str, str]) -> dict[str, float]:
    load = load_now()["loadavg_1m"]
    start, cpu = time.perf_counter(), _cpu()
    _run(["-m", "vsekit", "index", "build", str(photos), "--out", str(out)], env)
    return {
        "wall_s": round(time.perf_counter() - start, 3),
        "cpu_s": round(_cpu() - cpu, 3),
        "load_1min": [load, load_now()["loadavg_1m"]],
    }


def _summary(runs: list[dict[str, float]]) -> dict:
    walls = [r["wall_s"] for r in runs]
    return {
        "median_wall_s": round(statistics.median(walls), 3),
        "min_wall_s": min(walls),
        "median_cpu_s": round(statistics.median(r["cpu_s"] for r in runs), 3),
        "runs": runs,
    }


def _shown(path: Path) -> str:
    """``path`` as the results show it: relative to the checkout's parent where it lies under it."""
    path = path.resolve()
    return str(path.relative_to(REPO.parent) if path.is_relative_to(REPO.parent) else path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--before", help="The commit whose src/ is 'before' (default: where this branch left main)."
    )
    parser.add_argument("--runs", type=int, default=3, help="Timed builds of each version.")
    parser.add_argument("--photos", type=Path, default=EVERYDAY)
    args = parser.parse_args()
    git = (
        ["git", "rev-parse", "--short", args.before] if args.before else ["git", "merge-base", "HEAD", "main"]
    )
    rev = subprocess.run(git, cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()[:7]
    with tempfile.TemporaryDirectory(prefix="vsekit-reads-") as tmp:
        root = Path(tmp)
        archive = subprocess.run(["git", "archive", rev, "src"], cwd=REPO, capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(root)], input=archive.stdout, check=True)
        (root / "before").mkdir()
        (root / "src").rename(root / "before" / "src")
        sources = {"before": root / "before" / "src", "after": REPO / "src"}
        envs = {}
        for label, src in sources.items():
            env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
            env |= {"PYTHONPATH": str(src), "PYTHONPYCACHEPREFIX": str(root / f"pycache-{label}")}
            envs[label] = env
        probes = {}
        for label, env in envs.items():  # also the untimed first build: caches filled, bytecode written
            done = _run(["-c", PROBE, str(args.photos), str(root / f"probe-{label}")], env)
            probes[label] = json.loads(done.stdout.splitlines()[-1])
            print(label, probes[label], flush=True)
        timed: dict[str, list] = {label: [] for label in envs}
        for i in range(args.runs):
            for label in envs if i % 2 == 0 else reversed(envs):
                row = _build(args.photos, root / f"out-{label}-{i}", envs[label])
                timed[label].append(row)
                print(label, row, flush=True)
    result = {
        "benchmark": "build_reads",
        "target": "a build scans once and reads each photo once: bytes, hash, decode, EXIF (issue 36 item 4)",
        "meta": run_meta(
            threads="vsekit defaults (2 cores, shared with other workers)",
            photos=_shown(args.photos),
            before=rev,
        ),
        **{label: {"probe": probes[label], "build": _summary(timed[label])} for label in envs},
    }
    write_result("build_reads.json", result)
    for label in envs:
        b = result[label]["build"]
        print(f"{label:<7} median {b['median_wall_s']} s wall, {b['median_cpu_s']} s CPU", flush=True)


if __name__ == "__main__":
    main()
