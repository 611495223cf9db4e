"""Benchmark: region extraction cost (grid vs proposals) and S_kl ranking of a trained aligner on dev.

    python bench/bench_alignment.py [--images 200] [--model runs/align/aligner.safetensors]

Times both region modes, uncached, on the first ``--images`` dev photos of ../shared/data/flickr8k
(MobileNetV2, torch threads 2) and extrapolates to the 7,000 train + dev photos; with ``--model``, ranks
the dev split by S_kl (1,000 images x 5,000 captions) and times that. Prints a table and writes
bench/results/alignment.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from datetime import date
from pathlib import Path

import torch

from vsekit.alignment import Aligner
from vsekit.alignment.evaluate import evaluate_aligner
from vsekit.data import load_corpus
from vsekit.vision.regions import RegionSpec, region_features

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("VSEKIT_SHARED_DATA", REPO.parent / "shared" / "data" / "flickr8k"))
RESULTS = REPO / "bench" / "results"


def time_regions(paths: list[Path], n_total: int) -> dict:
    out = {}
    for mode in ("grid", "proposals"):
        spec = RegionSpec(mode=mode)
        region_features(paths[:2], spec, progress=False)  # load the backbone once
        t0 = time.perf_counter()
        region_features(paths, spec, cache=False, progress=False)
        seconds = time.perf_counter() - t0
        rate = len(paths) / seconds
        out[mode] = {
            "regions": spec.n_regions,
            "images": len(paths),
            "img_per_s": round(rate, 2),
            "train_dev_minutes": round(n_total / rate / 60, 1),
        }
        print(
            f"{mode:>9}: {spec.n_regions} regions, {rate:6.2f} img/s, "
            f"{n_total} photos ~ {n_total / rate / 60:.1f} min"
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--images", type=int, default=200)
    parser.add_argument("--model", default=None)
    args = parser.parse_args()
    torch.set_num_threads(2)
    corpus = load_corpus(SHARED)
    dev_ids = corpus.split("dev").image_ids()
    n_total = len(corpus.split("train").image_ids()) + len(dev_ids)
    result = {
        "date": date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, torch threads 2",
        "backbone": "mobilenet_v2",
        "regions": time_regions([corpus.images[i] for i in dev_ids[: args.images]], n_total),
    }
    if args.model:
        aligner = Aligner.load(args.model, device="cpu")
        aligner.regions(corpus, image_ids=dev_ids, progress=False)  # cached before timing the ranking
        t0 = time.perf_counter()
        metrics = evaluate_aligner(aligner, corpus, "dev")
        metrics["seconds"] = round(time.perf_counter() - t0, 1)
        result["dev"] = {"model": str(args.model), "extra": aligner.extra.get("train"), **metrics}
        i2t, t2i = metrics["i2t"], metrics["t2i"]
        print(
            f"dev i2t {i2t['r1']:.1f}/{i2t['r5']:.1f}/{i2t['r10']:.1f} medr {i2t['medr']}, "
            f"t2i {t2i['r1']:.1f}/{t2i['r5']:.1f}/{t2i['r10']:.1f} medr {t2i['medr']} "
            f"({metrics['seconds']} s)"
        )
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "alignment.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
