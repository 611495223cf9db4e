"""Benchmark: the near-duplicate threshold of ``vsekit index duplicates`` (retrieval/duplicates.py).

Training photos only (never dev): a seeded sample of Flickr8K train photos, each embedded by the shipped
``vse`` as itself and as three copies a collection really holds: re-encoded as JPEG quality 60, resized
to half size, cropped by 5 % on each side. Positives are (photo, copy) cosines; negatives are each
photo's nearest *other* photo among a larger seeded sample of train photos (the hardest distinct pair it
has). The threshold is the lowest on a grid whose precision is at least 0.99 (a false group costs a
person more than a missed copy); precision and recall at it, the best-F1 value and the grid are written
to bench/results/duplicates.json. The Flickr8K photos here are stored at 224 x 224 px, so the half-size
copy (112 px, upscaled again by the CNN's resize) is far harsher than a phone's export of a 12-megapixel
photo, which the CNN sees at the same 224 px as the original.

    python bench/bench_duplicates.py [--photos 300] [--others 1000] [--threads 2]
"""

from __future__ import annotations

import argparse
import io
import os
import random
import sys
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import run_meta, write_result  # noqa: E402
from vsekit.api import load_model  # noqa: E402
from vsekit.vision.preprocess import load_image  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("VSEKIT_SHARED_DATA", REPO.parent / "shared" / "data" / "flickr8k"))


def variants(image: Image.Image) -> dict[str, Image.Image]:
    buf = io.BytesIO()
    image.save(buf, format="JPEG", quality=60)
    w, h = image.size
    dx, dy = round(w * 0.05), round(h * 0.05)
    return {
        "jpeg60": Image.open(io.BytesIO(buf.getvalue())).convert("RGB"),
        "half": image.resize((max(1, w // 2), max(1, h // 2)), Image.BICUBIC),
        "crop5": image.crop((dx, dy, w - dx, h - dy)),
    }


def prf(pos: np.ndarray, neg: np.ndarray, t: float) -> dict[str, float]:
    tp, fn, fp = int((pos >= t).sum()), int((pos < t).sum()), int((neg >= t).sum())
    precision = tp / (tp + fp) if tp + fp else 1.0
    recall = tp / (tp + fn)
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"threshold": round(t, 3), "precision": precision, "recall": recall, "f1": f1}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--photos", type=int, default=300)
    parser.add_argument("--others", type=int, default=1000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=8)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    train = (SHARED / "Flickr8k_text" / "Flickr_8k.trainImages.txt").read_text().split()
    rng = random.Random(args.seed)
    chosen = rng.sample(train, args.photos + args.others)
    photos, others = chosen[: args.photos], chosen[args.photos :]
    model = load_model()
    start = time.perf_counter()
    originals = [load_image(SHARED / "Images" / name) for name in photos]
    base = model.embed_images(originals)
    copies = {kind: [] for kind in ("jpeg60", "half", "crop5")}
    for image in originals:
        for kind, copy in variants(image).items():
            copies[kind].append(copy)
    pos = {kind: np.sum(base * model.embed_images(imgs), axis=1) for kind, imgs in copies.items()}
    pool = np.concatenate([base, model.embed_images([SHARED / "Images" / n for n in others])])
    sims = base @ pool.T
    sims[np.arange(len(base)), np.arange(len(base))] = -1.0  # a photo is not its own neighbour
    neg = sims.max(axis=1)
    seconds = time.perf_counter() - start
    all_pos = np.concatenate(list(pos.values()))
    grid = np.round(np.arange(0.50, 0.995, 0.005), 3)
    scores = [prf(all_pos, neg, float(t)) for t in grid]
    best_f1 = max(scores, key=lambda s: s["f1"])
    chosen_t = min(s["threshold"] for s in scores if s["precision"] >= 0.99)
    result = {
        "meta": run_meta(threads=args.threads, model="vse (shipped)", split="Flickr8K train (seeded sample)"),
        "photos": args.photos,
        "others": args.others,
        "seconds": round(seconds, 1),
        "positives": {
            k: {"min": float(v.min()), "p5": float(np.percentile(v, 5)), "median": float(np.median(v))}
            for k, v in pos.items()
        },
        "nearest_other": {
            "max": float(neg.max()),
            "p95": float(np.percentile(neg, 95)),
            "median": float(np.median(neg)),
        },
        "best_f1": best_f1,
        "chosen": prf(all_pos, neg, chosen_t),
        "per_copy_recall_at_chosen": {k: float((v >= chosen_t).mean()) for k, v in pos.items()},
        "grid": [s for s in scores if s["threshold"] * 1000 % 20 == 0],
    }
    write_result("duplicates.json", result)
    print(f"threshold {chosen_t}: {result['chosen']}")
    for kind, v in pos.items():
        print(f"  {kind:7s} min {v.min():.3f}  p5 {np.percentile(v, 5):.3f}  median {np.median(v):.3f}")
    print(
        f"  nearest other: max {neg.max():.3f}  p95 {np.percentile(neg, 95):.3f}  median {np.median(neg):.3f}"
    )


if __name__ == "__main__":
    main()
