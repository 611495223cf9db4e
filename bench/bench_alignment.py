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

import numpy as np
import torch

from vsekit.alignment import Aligner
from vsekit.alignment.evaluate import evaluate_aligner, evaluate_scores
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
    parser.add_argument("--run", default=None, help="the aligner's run directory (its log.jsonl: minutes)")
    parser.add_argument(
        "--fuse", action="store_true", help="also S_kl + w * the shipped joint model's cosine"
    )
    parser.add_argument("--skip-regions", action="store_true", help="do not time the region extraction")
    args = parser.parse_args()
    torch.set_num_threads(2)
    corpus = load_corpus(SHARED)
    dev_ids = corpus.split("dev").image_ids()
    n_total = len(corpus.split("train").image_ids()) + len(dev_ids)
    result = {
        "date": date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, torch threads 2",
        "backbone": "mobilenet_v2",
    }
    if not args.skip_regions:
        result["regions"] = time_regions([corpus.images[i] for i in dev_ids[: args.images]], n_total)
    if args.run:
        log = [json.loads(line) for line in (Path(args.run) / "log.jsonl").read_text().splitlines()]
        result["training"] = {
            "epochs": len(log),
            "minutes": round(sum(e.get("time_s", e.get("train_s", 0.0)) for e in log) / 60, 1),
            "dev_rsum_by_epoch": [e["dev"]["rsum"] for e in log if "dev" in e],
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
        if args.fuse:
            result["fusion"] = fuse_with_joint_model(aligner, corpus, dev_ids)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "alignment.json").write_text(json.dumps(result, indent=1) + "\n")


def _zscore(scores: np.ndarray) -> np.ndarray:
    return (scores - scores.mean()) / scores.std()


def fuse_with_joint_model(aligner: Aligner, corpus, dev_ids: list[str]) -> dict:
    """Issue 10, item 8: does S_kl + w * cosine(shipped joint model) rank dev better than either alone?

    Both score matrices are z-scored (S_kl sums over words, the cosine lies in [-1, 1]); w is chosen on
    the even-numbered dev images (with their captions) and reported on the odd-numbered ones, so the
    weight never sees the images it is judged on."""
    import vsekit
    from vsekit.metrics.ranking import positives_from_ids, ranking_metrics
    from vsekit.retrieval import embed_split

    space = embed_split(vsekit.load_model(device="cpu"), corpus, "dev")
    regions = aligner.regions(corpus, image_ids=space.image_ids, progress=False)
    scores = evaluate_scores(aligner.model, torch.from_numpy(regions.features), space.captions)
    s_kl = _zscore(np.asarray(scores, dtype=np.float64))
    cosine = _zscore(space.scores().astype(np.float64))
    halves = {}
    for name, start in (("tune", 0), ("held_out", 1)):
        rows = list(range(start, len(space.image_ids), 2))
        keep = {space.image_ids[r] for r in rows}
        cols = [j for j, i in enumerate(space.caption_image_ids) if i in keep]
        positives = positives_from_ids(
            [space.image_ids[r] for r in rows], [space.caption_image_ids[j] for j in cols]
        )
        halves[name] = (np.ix_(rows, cols), positives)

    def rsum(weight: float, half: str) -> dict:
        index, positives = halves[half]
        return ranking_metrics((cosine + weight * s_kl)[index], positives)

    grid = [0.0, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0]
    tuned = {w: rsum(w, "tune")["rsum"] for w in grid}
    best = max(tuned, key=tuned.get)
    held = {"joint alone": rsum(0.0, "held_out"), f"fused w={best}": rsum(best, "held_out")}
    index, positives = halves["held_out"]
    held["aligner alone"] = ranking_metrics(s_kl[index], positives)
    for name, m in held.items():
        print(
            f"held-out half, {name}: i2t R@1 {m['i2t']['r1']:.1f} "
            f"t2i R@1 {m['t2i']['r1']:.1f} rsum {m['rsum']:.1f}"
        )
    return {"weight": best, "tune_rsum_by_weight": tuned, "held_out": held}


if __name__ == "__main__":
    main()
