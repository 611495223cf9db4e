"""Benchmark: epoch time of data-parallel training at 1 vs N processes (torchrun, gloo, CPU).

Runs ``torchrun --nproc-per-node N -m vsekit train`` for each N on the same recipe (one member: ``--seed``
makes an ensemble recipe train one model), ``--num-threads 1`` per process, and reads the per-epoch
``time_s`` of rank 0's ``log.jsonl`` (training + dev evaluation on rank 0), the command's wall time and
the CPU time of all its processes (process start and feature loading included; on a loaded machine the
CPU time is the steadier figure). Writes bench/results/ddp.json.

    python bench/bench_ddp.py --data ../shared/data/flickr8k --recipe vse-best --epochs 2 --procs 1 2

Image features must be cached already (``vsekit extract``); otherwise the first run extracts them.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from _common import run_meta, write_result

RESULTS = Path(__file__).resolve().parent / "results" / "ddp.json"


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def recipe_file(recipe: str, backbone: str | None, work: Path) -> str:
    """``recipe`` as is, or a copy of it on another backbone (one whose features are cached already)."""
    if backbone is None:
        return recipe
    from vsekit.embedding.trainer import load_recipe

    config = load_recipe(recipe)
    data = {**config.to_dict(), "name": f"{config.name}-{backbone}", "backbone": backbone}
    path = work / f"{data['name']}.json"
    path.write_text(json.dumps(data, indent=2))
    return str(path)


def run_once(data: str, recipe: str, epochs: int, seed: int, procs: int, work: Path) -> dict:
    out = work / f"run-{procs}"
    shutil.rmtree(out, ignore_errors=True)
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    cmd = [torchrun, "--standalone", f"--nproc-per-node={procs}", "-m", "vsekit", "train"]
    cmd += ["--data", data, "--recipe", recipe, "--out", str(out), "--epochs", str(epochs)]
    cmd += ["--seed", str(seed), "--num-threads", "1", "--no-progress"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    t0, cpu0 = time.perf_counter(), _children_cpu()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    wall, cpu = time.perf_counter() - t0, _children_cpu() - cpu0
    log = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    return {
        "procs": procs,
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),  # user + system of every process of the run (load-independent work)
        "epoch_s": [round(e["time_s"], 1) for e in log],
        "loss": [e["loss"] for e in log],
        "dev_rsum": [e["dev"]["rsum"] for e in log if e.get("dev")],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--recipe", default="vse-best")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--backbone", default=None, help="run the recipe on another backbone's cached features")
    ap.add_argument("--procs", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--note", default="", help="load on the machine while it ran, and the like")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-ddp-"))
    recipe = recipe_file(args.recipe, args.backbone, work)
    runs = []
    for procs in args.procs:
        runs.append(run_once(args.data, recipe, args.epochs, args.seed, procs, work))
        print(json.dumps(runs[-1]), flush=True)
    base = runs[0]["epoch_s"][-1]
    for r in runs:
        r["speedup_last_epoch"] = round(base / r["epoch_s"][-1], 2)
    result = {
        **run_meta(threads=1, torch=torch.__version__, backend="gloo"),
        "recipe": args.recipe,
        "backbone": args.backbone or "the recipe's",
        "seed": args.seed,
        "epochs": args.epochs,
        "threads_per_process": 1,
        "data": Path(args.data).name,
        "note": args.note,
        "runs": runs,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    write_result(RESULTS, result, indent=2)
    shutil.rmtree(work, ignore_errors=True)
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
