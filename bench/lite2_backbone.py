"""Does the shipped joint-embedding recipe get better on EfficientNet-Lite2? (issue 35 item 2)

    python bench/lite2_backbone.py --extraction-s 2580

The shipped ``vse`` is the six-crop views recipe (bench/recipes/joint-views-seed{1,3}.json), an ensemble
of seeds 1 and 3. Its val1000 proxy, trained on ``train-minus-val1000`` on EfficientNet-Lite0 features, is
``/work/runs/vse-views-val1000.safetensors`` (runs in /work/runs/vse-views-val1000/seed-{1,3}). The Lite2
pair is the same two recipes with ``backbone: efficientnet_lite2`` (bench/recipes/joint-views-lite2-seed
{1,3}.json), trained with

    vsekit train --data /work/shared/data/flickr8k --recipe bench/recipes/joint-views-lite2-seed1.json \\
        --out /work/runs/vse-views-lite2-val1000/seed-1 --num-threads 1        (then seed 3)

and packed with ``python ship/pack_members.py --run /work/runs/vse-views-lite2-val1000 --seeds 1 3
--out /work/runs/vse-views-lite2-val1000.safetensors``. Both packed pairs are scored here the same way
(:func:`vsekit.embedding.evaluate.evaluate_model`, the flickr protocol: the slice's 1,000 photos x 5,000
captions, centre-crop features) on the validation slice ``flickr8k-val1000`` only; dev and test are not
read. Per member, the best val1000 epoch and the training seconds come from the runs' logs. The
extraction time of the Lite2 features (centre crop of every photo, five more views of the training
photos) is measured outside (``--extraction-s``: the wall time before seed 1's first epoch).

Writes bench/results/lite2_backbone.json.
"""

from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path

from _common import RESULTS, read_run_log, run_meta, write_result
from vsekit.data import load_corpus
from vsekit.data.splits import apply_validation_slice, load_validation_slice
from vsekit.embedding.evaluate import evaluate_model
from vsekit.embedding.model import load_model
from vsekit.fileio import file_sha256

RUNS = Path("/work/runs")
SLICE = "flickr8k-val1000"  # the slice file; the split it adds is called "val1000"
PAIRS = {
    "efficientnet_lite0": (RUNS / "vse-views-val1000", RUNS / "vse-views-val1000.safetensors"),
    "efficientnet_lite2": (RUNS / "vse-views-lite2-val1000", RUNS / "vse-views-lite2-val1000.safetensors"),
}
SEEDS = (1, 3)
KEYS = ("r1", "r5", "r10", "medr")


def member(seed_dir: Path) -> dict:
    """The member's val1000 curve (rsum per epoch), its best epoch, and its training seconds."""
    if not (seed_dir / "log.jsonl").is_file():
        return {"epochs_done": 0}
    log = read_run_log(seed_dir)
    scored = [e for e in log if e.get("dev")]
    best = max(scored, key=lambda e: e["dev"]["rsum"], default=None)
    return {
        "epochs_done": len(log),
        "val1000_rsum": [round(e["dev"]["rsum"], 2) for e in scored],
        "best_epoch": best["epoch"] if best else None,
        "best_val1000": _short(best["dev"]) if best else None,
        "train_s": round(sum(e.get("time_s", 0.0) for e in log), 1),
        "epoch1_s": round(log[0].get("time_s", 0.0), 1) if log else None,
    }


def _short(metrics: dict) -> dict:
    out = {d: {k: round(float(metrics[d][k]), 2) for k in KEYS} for d in ("i2t", "t2i")}
    out["rsum"] = round(float(metrics["rsum"]), 2)
    return out


def score(path: Path, corpus) -> dict:
    model, fne, meta = load_model(path, device="cpu")
    metrics = evaluate_model(model, fne, corpus, "val1000", progress=False)
    return {
        "file": str(path),
        "sha256": file_sha256(path)[:12],
        "recipe": meta.get("recipe"),
        "members": [{"seed": m["seed"], "epoch": m["epoch"]} for m in meta.get("members", [])],
        "n_images": metrics["n_images"],
        "n_captions": metrics["n_captions"],
        "backbone": metrics["backbone"],
        "val1000": _short(metrics),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", type=Path, default=Path("/work/shared/data/flickr8k"))
    parser.add_argument("--extraction-s", type=float, default=None, help="Lite2 feature extraction wall time")
    args = parser.parse_args()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the known 5 dropped captions of one missing photo
        corpus = apply_validation_slice(load_corpus(args.data), load_validation_slice(SLICE))
    pairs: dict[str, dict] = {}
    for backbone, (run, packed) in PAIRS.items():
        members = {str(s): member(run / f"seed-{s}") for s in SEEDS}
        pairs[backbone] = {"run": str(run), "members": members}
        if packed.is_file():
            pairs[backbone]["pair"] = score(packed, corpus)
            print(backbone, json.dumps(pairs[backbone]["pair"]["val1000"]))
    lite0, lite2 = (pairs[b].get("pair") for b in PAIRS)
    delta = None
    if lite0 and lite2:
        a, b = lite0["val1000"], lite2["val1000"]
        delta = {d: {k: round(b[d][k] - a[d][k], 2) for k in KEYS} for d in ("i2t", "t2i")}
        delta["rsum"] = round(b["rsum"] - a["rsum"], 2)
        print("lite2 - lite0", json.dumps(delta))
    payload = {
        "benchmark": "the shipped vse recipe (six-crop views, seeds 1+3) on EfficientNet-Lite2 vs Lite0",
        **run_meta(threads=1),
        "protocol": (
            "train-minus-val1000 / val1000 (flickr8k-val1000 slice of Flickr8K train; flickr protocol, 1000 "
            "photos x 5000 captions, centre crop); each pair = the two members packed in float16 "
            "(ship/pack_members.py); dev and test not read"
        ),
        "recipes": {
            "efficientnet_lite0": [
                "bench/recipes/joint-views-seed1.json",
                "bench/recipes/joint-views-seed3.json",
            ],
            "efficientnet_lite2": [
                "bench/recipes/joint-views-lite2-seed1.json",
                "bench/recipes/joint-views-lite2-seed3.json",
            ],
        },
        "pairs": pairs,
        "lite2_minus_lite0": delta,
        "lite2_extraction_s": args.extraction_s,
        "notes": (
            "train_s sums the epochs' time_s (epoch 1 includes encoding the captions with MiniLM); the Lite2 "
            "extraction (all photos' centre crops + five views of the training photos, ONNX Runtime, 1 "
            "thread, nice 10) ran beside other jobs on the 2-core machine; Lite0's runs were trained on "
            "Lite0 features extracted earlier"
        ),
    }
    out = write_result(RESULTS / "lite2_backbone.json", payload, indent=2)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
