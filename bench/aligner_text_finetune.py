"""MiniLM's top layer tuned for the aligner's word states (issue 35 item 5), against the frozen encoder, on
val1000.

    python bench/aligner_text_finetune.py   # the runs' logs -> bench/results/aligner_text_finetune.json

The runs (side by side, one torch thread each, nice 5; ``/usr/bin/time -v`` gives the peak RSS)::

    vsekit train-aligner --data ../shared/data/flickr8k --recipe bench/recipes/NAME.json \\
        --out /work/runs/NAME --keep-epochs --num-threads 1 --no-progress

``aligner-minilm-ft1-val1000`` and ``aligner-minilm-ft1-slow-val1000`` are ``minilm-grid-val1000`` (the
shipped aligner's step recipe under the selection protocol: train-minus-val1000, ranked on val1000 after
every epoch) with one change, ``finetune_last: 1`` (the top transformer layer trained with the word head;
the bottom five run once per caption and their piece states are cached), at the recipe's rate and at a
fifth of it. The frozen baseline is that recipe's run made on this machine on 2026-11-27 for the aligner's
val1000 proxy (``/work/runs/align-minilm-grid-val1000``, the same seed). Dev is not read.
"""

from __future__ import annotations

from pathlib import Path

from _common import run_meta, write_result
from aligner_backbone import row

RUNS = Path("/work/runs")
ROWS = [
    {
        "name": "frozen MiniLM (the shipped aligner's recipe)",
        "recipe": "minilm-grid-val1000",
        "run": RUNS / "align-minilm-grid-val1000",
    },
    {
        "name": "tuned top layer (at the recipe's rate)",
        "recipe": "bench/recipes/aligner-minilm-ft1-val1000.json",
        "run": RUNS / "aligner-minilm-ft1-val1000",
    },
    {
        "name": "tuned top layer, rate / 5 (finetune_lr_scale 0.2)",
        "recipe": "bench/recipes/aligner-minilm-ft1-slow-val1000.json",
        "run": RUNS / "aligner-minilm-ft1-slow-val1000",
    },
]


def main() -> None:
    rows = [row(spec) for spec in ROWS]
    write_result(
        "aligner_text_finetune.json",
        {
            "benchmark": "The aligner with MiniLM's top layer tuned against the frozen encoder, on val1000",
            "meta": run_meta(
                threads=1,
                note="the two tuned runs side by side, nice 5 (load about 2); the frozen run earlier the "
                "same day beside the aligner proxy's constant-rate branch",
            ),
            "protocol": "train-minus-val1000 / val1000 (flickr8k-val1000 slice); dev not read; 12 epochs; "
            "MobileNetV2 grid regions; seed 0",
            "rows": rows,
        },
    )
    for r in rows:
        print(r["name"], r["best"])


if __name__ == "__main__":
    main()
