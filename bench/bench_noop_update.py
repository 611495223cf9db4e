"""Benchmark: `vsekit index update` with nothing new, and `vsekit index info`, on an index of 10,000 photos
(issue 34 item 7: a no-op update loads no model, at most 1 s at 10K photos).

The photo folder is 10,000 hard links to the everyday photos (or the bundled sample) in 100 folders; the
index records each one with a random unit vector under the shipped vse's identity (taken from a real
4-photo build, with its concept-route setting), so an update scans 10,000 files, finds them all unchanged
and has nothing to embed, as on a real collection. Each command runs ``--runs`` times in a fresh process;
the median wall time (inflated by the load of a shared machine) and CPU time (user + system) are kept,
with whether the process imported torch. Python writes bytecode to a private cache
(``PYTHONPYCACHEPREFIX``), as an installed package has it.

    python bench/bench_noop_update.py --label before|after [--runs 5] [--src OTHER_CHECKOUT/src]

Merges its numbers under ``--label`` into bench/results/noop_update.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from _common import REPO, run_meta, time_vsekit, write_labelled

RESULTS = Path(__file__).resolve().parent / "results" / "noop_update.json"
EVERYDAY = REPO.parent / "shared" / "data" / "everyday" / "photos"
PROBE = (
    "import json, sys\nfrom vsekit.cli import main\nsys.argv = ['vsekit', *sys.argv[1:]]\n"
    "try:\n    main()\nexcept SystemExit:\n    pass\n"
    "print(json.dumps({'torch': 'torch' in sys.modules}))"
)


def _sources() -> list[Path]:
    from vsekit.resources import sample_data_path

    folder = EVERYDAY if EVERYDAY.is_dir() else sample_data_path() / "images"
    return sorted(p for p in folder.rglob("*") if p.suffix.lower() in (".jpg", ".jpeg", ".png"))


def make_index(root: Path, n: int) -> Path:
    """A folder of ``n`` hard-linked photos and an index recording each of them (module docstring)."""
    from vsekit.retrieval.build import add_vectors, new_store
    from vsekit.retrieval.index import Index
    from vsekit.retrieval.store import PhotoRecord, Store, StoreChange, writer_lock

    sources = _sources()
    small = root / "small"
    small.mkdir()
    for src in sources[:4]:
        shutil.copyfile(src, small / src.name)
    settings = Index.build(small, root / "small-index", progress=False).manifest
    photos, records = root / "photos", []
    for i in range(n):
        src = sources[i % len(sources)]
        path = photos / f"folder{i % 100:03d}" / f"{i:05d}{src.suffix.lower()}"
        path.parent.mkdir(parents=True, exist_ok=True)
        os.link(src, path)
        stat = path.stat()
        records.append(
            PhotoRecord(path.relative_to(photos).as_posix(), stat.st_size, stat.st_mtime_ns, "0" * 64)
        )
    out, dim = root / "index", int(settings["model"]["embed_dim"])
    new_store(out, dim, photos_dir=str(photos), model=settings["model"])
    with writer_lock(out):
        store = Store.open(out)
        store.set_settings({"concepts": settings["concepts"]})
        store.commit(StoreChange())
        store.close()
    vectors = np.random.default_rng(0).standard_normal((n, dim)).astype(np.float32)
    add_vectors(out, records, vectors / np.linalg.norm(vectors, axis=1, keepdims=True))
    return out


def _time(argv: list[str], runs: int, env: dict[str, str], expect: str) -> dict:
    timed = time_vsekit(argv, runs, env, expect)
    probe = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, env=env)
    return {**timed, "imports_torch": json.loads(probe.stdout.splitlines()[-1])["torch"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--label", required=True, help="Where the numbers go, e.g. before or after.")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--photos", type=int, default=10_000)
    parser.add_argument("--src", type=Path, help="Time the vsekit in this src/ folder (another commit's).")
    parser.add_argument("--src-commit", help="The commit --src was exported from (recorded as is).")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="vsekit-noop-") as tmp:
        root = Path(tmp)
        out = make_index(root, args.photos)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = str(root / "pycache")
        if args.src is not None:
            env["PYTHONPATH"] = str(args.src.resolve())
        subprocess.run(
            [sys.executable, "-m", "vsekit", "index", "info", str(out)], env=env, capture_output=True
        )
        commands = {
            "vsekit index update": _time(["index", "update", str(out)], args.runs, env, "0 added"),
            "vsekit index info": _time(["index", "info", str(out)], args.runs, env, "count"),
        }
    for name, row in commands.items():
        print(
            f"{name:<20} median {row['median_s']:.3f} s, cpu {row['median_cpu_s']:.3f} s, torch "
            f"{row['imports_torch']} (load {row['load_1min']})",
            flush=True,
        )
    timed = {"commit": args.src_commit or "unknown"} if args.src is not None else {}
    result = {**run_meta(threads="one process per run", photos=args.photos, **timed), "commands": commands}
    target = "a no-op `vsekit index update` loads no model, <= 1 s at 10K photos (issue 34 item 7)"
    write_labelled(RESULTS, args.label, result, "noop_update", target)


if __name__ == "__main__":
    main()
