"""Benchmark: Flickr8K-dev-size extraction (1,000 photos) on the single-process path against a Ray actor pool
of 1 and 2 workers on this machine (issue 14 item 2).

Each configuration runs in a fresh child process (imports, model load and, for Ray, the local cluster's
start all counted) into a fresh cache directory; MobileNetV2 one-layer, batch 32, shards of 256 photos.
The Ray runs start a local 2-CPU cluster (`ray.init(address="local", num_cpus=2)`), its start timed
separately. After the runs the cache files of every configuration are compared, byte for byte, with those
of the single-process run with as many torch threads per process.

    python bench/bench_ray.py [--images 1000] [--rounds 1] [--configs 1 3] [--out bench/results/ray.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import load_now, run_meta, write_result

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("VSEKIT_SHARED_DATA", REPO.parent / "shared" / "data" / "flickr8k"))

# name: (engine, torch threads of the single process / Ray workers, threads per worker)
CONFIGS = {
    "single process, 2 torch threads": ("single", 2, 0),
    "single process, 1 torch thread": ("single", 1, 0),
    "Ray, 1 worker x 1 thread": ("ray", 1, 1),
    "Ray, 2 workers x 1 thread": ("ray", 2, 1),
}


def run_one(engine: str, n: int, threads: int, images: int, cache_dir: str) -> dict:
    """One configuration, in this (fresh) process: seconds to start Ray, to extract, in all."""
    start = time.perf_counter()
    import torch

    from vsekit.data import load_corpus

    dev = load_corpus(SHARED).split("dev")
    dev = dev.subset(dev.image_ids()[:images], split="dev")
    out = {"images": len(dev.image_ids())}
    if engine == "single":
        from vsekit.vision.features import extract_features

        torch.set_num_threads(n)
        t0 = time.perf_counter()
        extract_features(dev, cache_dir=cache_dir, batch_size=32, progress=False)
    else:
        import ray

        from vsekit.distributed import RayOptions
        from vsekit.distributed.extract import ray_extract

        t0 = time.perf_counter()
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
        out["ray_init_s"] = round(time.perf_counter() - t0, 2)
        t0 = time.perf_counter()
        options = RayOptions(workers=n, threads=threads, shard_size=256)
        ray_extract(dev, options=options, cache_dir=cache_dir, batch_size=32, progress=False)
        ray.shutdown()
    out["extract_s"] = round(time.perf_counter() - t0, 2)
    out["total_s"] = round(time.perf_counter() - start, 2)
    return out


def _versions() -> dict:
    import ray
    import torch

    return {"ray": ray.__version__, "torch": torch.__version__, "python": platform.python_version()}


def _warm_page_cache(images: int) -> None:
    from vsekit.data import load_corpus

    dev = load_corpus(SHARED).split("dev")
    for image_id in dev.image_ids()[:images]:
        dev.images[image_id].read_bytes()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument(
        "--configs", nargs="+", type=int, help="run only these configurations (0-based, in table order)"
    )
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "ray.json")
    parser.add_argument("--one", nargs=5, help=argparse.SUPPRESS)  # engine n threads images cache_dir
    args = parser.parse_args()
    if args.one:
        engine, n, threads, images, cache_dir = args.one
        print(json.dumps(run_one(engine, int(n), int(threads), int(images), cache_dir)))
        return
    if not (SHARED / "Images").is_dir():
        sys.exit(f"{SHARED}: Flickr8K not found (set VSEKIT_SHARED_DATA)")
    _warm_page_cache(args.images)  # every configuration reads the photos from memory, not the disk
    runs, same = [], {}
    with tempfile.TemporaryDirectory(prefix="bench-ray-") as tmp:
        for r in range(args.rounds):
            for k, (name, (engine, n, threads)) in enumerate(CONFIGS.items()):
                if args.configs is not None and k not in args.configs:
                    continue
                cache = Path(tmp) / f"{r}-{engine}-{n}-{threads}"
                load_before = load_now()["loadavg_1m"]
                proc = subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        "--one",
                        engine,
                        str(n),
                        str(threads),
                        str(args.images),
                        str(cache),
                    ],
                    capture_output=True,
                    text=True,
                    env={**os.environ, "OMP_NUM_THREADS": str(max(n if engine == "single" else threads, 1))},
                )
                if proc.returncode:
                    sys.exit(f"{name}: failed\n{proc.stderr[-3000:]}")
                row = {"config": name, "round": r, **json.loads(proc.stdout.strip().splitlines()[-1])}
                row["load_avg_1min_before_after"] = [load_before, load_now()["loadavg_1m"]]
                row["img_per_s_extract"] = round(row["images"] / row["extract_s"], 1)
                print(json.dumps(row), flush=True)
                runs.append(row)
                # the reference has the same torch threads per process (the CNN's sums depend on them)
                reference = Path(tmp) / f"{r}-single-{threads or n}-0"
                same[f"{r}: {name}"] = all(
                    (cache / f).read_bytes() == (reference / f).read_bytes()
                    for f in ("meta.json", "raw.f16", "done.npy")
                )
    result = {
        **run_meta(threads="per row (CONFIGS: torch threads per process / Ray worker)"),
        "versions": _versions(),
        "note": "run under nice 15 on the shared 2-core machine beside other jobs: timings are pessimistic; "
        "compare the rows of one run",
        "backbone": "mobilenet_v2 one-layer, batch 32, Ray shards of 256 photos",
        "data": f"first {args.images} Flickr8K dev photos",
        "runs": runs,
        "cache_identical_to_single_process": same,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_result(args.out, result)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
