"""Re-select the shipped Tree-LSTM model under the selection protocol of issue 24 (flickr8k-val1000).

    vsekit train --data FLICKR8K --recipe bench/recipes/tree-lstm-p1-val1000.json \
        --out RUNS/tree-lstm-p1-val1000 --num-threads 1
    python ship/tree_lstm_reselect.py --run RUNS/tree-lstm-p1-val1000

The run trains on train minus the slice and keeps its best epoch by val1000 rsum (the trainer's
selection); this script reads the run's val1000 curve from its log, ranks Flickr8K dev once with the kept
model, and writes bench/results/tree_lstm_reselect.json beside the shipped ``tree-lstm`` (selected on dev).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from _common import SHARED, run_meta, write_result
from aligner_reselect import _short, curve, time_v
from vsekit.data import load_corpus
from vsekit.embedding.evaluate import evaluate_model
from vsekit.embedding.pipeline import VSEModel


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--run", type=Path, required=True)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    points = curve(args.run)
    best = max(points, key=lambda p: p["val1000"]["rsum"])
    vse = VSEModel.load(str(args.run / "model.safetensors"), device="cpu")
    start = time.perf_counter()
    dev = evaluate_model(vse.network, vse.fne, load_corpus(SHARED), "dev", device="cpu")
    dev_once = {**_short(dev), "seconds": round(time.perf_counter() - start, 1)}
    print(f"best val1000 epoch {best['epoch']}; dev (read once): {dev_once}", flush=True)
    shipped = VSEModel.load("tree-lstm", device="cpu")
    result = {
        "meta": run_meta(threads=args.threads, note="load average is at the end (the evaluation)"),
        "protocol": "train on train-minus-val1000, epoch chosen on val1000 (flickr8k-val1000), dev read once",
        "run": {
            "dir": str(args.run),
            "recipe": json.loads((args.run / "config.json").read_text())["name"],
            "curve": points,
            "best_epoch_val1000": best["epoch"],
            "training_seconds_sum_of_epochs": round(sum(p["seconds"] for p in points), 1),
            **time_v(args.run.parent / f"{args.run.name}.time"),
        },
        "dev_once": dev_once,
        "shipped_tree_lstm_dev": _short(shipped.meta["dev"]) | {"selected_on": "dev"},
    }
    print(write_result("tree_lstm_reselect.json", result))


if __name__ == "__main__":
    main()
