"""The aligner's regions from EfficientNet-Lite0 instead of MobileNetV2 (issue 35 item 5, richer regions),
measured alone on val1000.

    python bench/aligner_backbone.py     # read the runs' logs, write bench/results/aligner_backbone.json

The runs (side by side, one torch thread each, nice 5; ``/usr/bin/time -v`` gives the peak RSS)::

    vsekit train-aligner --data ../shared/data/flickr8k --recipe minilm-grid-val1000 \\
        --out /work/runs/align-mnv2 --num-threads 1 --no-progress
    vsekit train-aligner --data ../shared/data/flickr8k --recipe bench/recipes/aligner-lite0-val1000.json \\
        --out /work/runs/align-lite0 --num-threads 1 --no-progress

Both are the shipped aligner's step recipe under the selection protocol (frozen MiniLM word states + MLP
head, S_kl over the whole image and its 2 x 2 and 3 x 3 grid cells, Adam 5e-4 times 0.1 after 6 epochs,
12 epochs, patience 4), trained on train-minus-val1000 and ranked on val1000 after every epoch; the second
reads its 14 regions from Lite0's last conv map (the CNN of the shipped `vse` and captioner) instead of
MobileNetV2's. Dev is not read.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from _common import dev_recalls, read_run_log, run_meta, time_v, write_result

RUNS = Path("/work/runs")
ROWS = [
    {
        "name": "MobileNetV2 grid (the shipped aligner's regions)",
        "recipe": "minilm-grid-val1000",
        "run": RUNS / "align-mnv2",
    },
    {
        "name": "EfficientNet-Lite0 grid",
        "recipe": "bench/recipes/aligner-lite0-val1000.json",
        "run": RUNS / "align-lite0",
    },
]


def row(spec: dict[str, Any]) -> dict[str, Any]:
    run = spec["run"]
    history = read_run_log(run)
    epochs = [
        {
            "epoch": h["epoch"],
            "loss": round(h["loss"], 4),
            **dev_recalls(h["dev"]),
            "time_s": round(h["time_s"], 1),
        }
        for h in history
    ]
    best = max(epochs, key=lambda e: e["rsum"])
    config = json.loads((run / "config.json").read_text())
    return {
        "name": spec["name"],
        "recipe": spec["recipe"],
        "run": str(run),
        "backbone": config["backbone"],
        "epochs_done": len(epochs),
        "epochs": config["epochs"],
        "best": best,
        "val1000": epochs,
        "training_s": round(sum(e["time_s"] for e in epochs), 1),
        "peak_rss_mb": time_v(run.with_suffix(".time")).get("peak_rss_mb"),
    }


def main() -> None:
    rows = [row(spec) for spec in ROWS]
    write_result(
        "aligner_backbone.json",
        {
            "benchmark": "The aligner's grid regions from EfficientNet-Lite0 against MobileNetV2, on val1000",
            "meta": run_meta(
                threads=1,
                note="the two runs side by side, nice 5; a probe's extraction joined them after 12 min",
            ),
            "protocol": "train-minus-val1000 / val1000 (flickr8k-val1000 slice); dev not read; 12 epochs",
            "rows": rows,
        },
    )
    for r in rows:
        print(r["name"], r["best"])


if __name__ == "__main__":
    main()
