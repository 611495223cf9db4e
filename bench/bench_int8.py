"""Benchmark: the int8 engine (``--engine onnxruntime-int8``) against the float ONNX Runtime engine.

* **accuracy**: ``vsekit eval --split dev`` of shipped models with each engine (features cached per
  engine; int8 rows are cached apart), i2t / t2i R@K and rsum, and the difference;
* **speed**: features of the bundled sample's 100 photos, uncached, ``--repeat`` passes after one warm-up,
  photos/s of each engine in the same run (interleaved), per backbone; and the first use's one-off cost
  (quantising and checking the graph).

The issue's rule for a default: ranking on dev moves by at most 0.5 rsum (and captions by 0.3 CIDEr).

    python bench/bench_int8.py [--models bow vse] [--repeat 3] [--threads 2]
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

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import load_now, run_meta, write_result  # noqa: E402
from vsekit.resources import sample_data_path  # noqa: E402
from vsekit.vision.features import compute_features  # noqa: E402
from vsekit.vision.spec import FeatureSpec  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("VSEKIT_SHARED_DATA", REPO.parent / "shared" / "data" / "flickr8k"))
ENGINES = ("onnxruntime", "onnxruntime-int8")
BACKBONE = {"bow": "mobilenet_v2", "vse": "efficientnet_lite0"}


def evaluate(model: str, engine: str, threads: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "m.json"
        cmd = [sys.executable, "-m", "vsekit", "eval", "--model", model, "--data", str(SHARED),
               "--split", "dev", "--engine", engine, "--json", str(out)]  # fmt: skip
        env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
        subprocess.run(cmd, check=True, capture_output=True, env=env)
        m = json.loads(out.read_text())
    return {"i2t": m["i2t"], "t2i": m["t2i"], "rsum": m["rsum"], "backbone": m["backbone"]}


def speed(backbone: str, repeat: int) -> dict:
    photos = sorted((sample_data_path() / "Images").glob("*.jpg"))
    spec = FeatureSpec(backbone)
    first = {}
    for engine in ENGINES:  # first use: export / quantise / check (cached afterwards)
        start = time.perf_counter()
        compute_features(photos[:8], spec, engine=engine, cache=False, progress=False)
        first[engine] = round(time.perf_counter() - start, 1)
    times: dict[str, list[float]] = {e: [] for e in ENGINES}
    for _ in range(repeat):
        for engine in ENGINES:
            start = time.perf_counter()
            compute_features(photos, spec, engine=engine, cache=False, progress=False)
            times[engine].append(time.perf_counter() - start)
    rate = {e: round(len(photos) / float(np.median(t)), 1) for e, t in times.items()}
    return {"img_per_s": rate, "int8_over_float": round(rate[ENGINES[1]] / rate[ENGINES[0]], 2),
            "first_use_s": first, "photos": len(photos), "passes": repeat}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["bow", "vse"])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    result = {"meta": run_meta(threads=args.threads, split="Flickr8K dev"), "models": {}, "speed": {}}
    for model in args.models:
        rows = {engine: evaluate(model, engine, args.threads) for engine in ENGINES}
        rows["rsum_change"] = round(rows[ENGINES[1]]["rsum"] - rows[ENGINES[0]]["rsum"], 2)
        result["models"][model] = rows
        print(model, "rsum", rows[ENGINES[0]]["rsum"], "->", rows[ENGINES[1]]["rsum"], flush=True)
    for backbone in sorted({BACKBONE[m] for m in args.models}):
        result["speed"][backbone] = speed(backbone, args.repeat)
        print(backbone, result["speed"][backbone], flush=True)
    result["meta"]["loadavg_end"] = load_now()["loadavg"]
    write_result("int8.json", result)


if __name__ == "__main__":
    main()
