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

Then the epoch chosen there, trained on all of train (``bench/recipes/aligner-minilm-ft1-retrain.json``,
``eval_every`` = its epochs, so the trainer ranks dev once, after the last epoch)::

    python bench/aligner_text_finetune.py --retrained /work/runs/aligner-minilm-ft1-retrain \
        --out-model /work/runs/aligner-ft1-candidate.safetensors

saves it in float16 (as an aligner ships), ranks dev with that file and adds both to the JSON.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from _common import REPO, RESULTS, dev_recalls, read_run_log, run_meta, time_v, write_result
from aligner_backbone import row

RUNS = Path("/work/runs")
SHARED = REPO.parent / "shared" / "data" / "flickr8k"
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


def retrained(run: Path, out_model: Path) -> dict:
    """The run's aligner (the last epoch's: ranked once on dev by the trainer) in float16, dev ranked with
    that file; training time and peak RSS from the run's log and ``/usr/bin/time -v`` output."""
    from vsekit.alignment import Aligner, load_aligner, save_aligner
    from vsekit.alignment.evaluate import evaluate_aligner
    from vsekit.data import load_corpus

    model, extra = load_aligner(run / "aligner.safetensors")
    save_aligner(
        model, out_model, extra={**extra, "selection": "flickr8k-val1000 (epoch chosen there)"}, half=True
    )
    dev = evaluate_aligner(Aligner(load_aligner(out_model)[0]), load_corpus(SHARED), "dev", progress=False)
    log = read_run_log(run)
    return {
        "recipe": "bench/recipes/aligner-minilm-ft1-retrain.json",
        "run": str(run),
        "model": str(out_model),
        "epochs": len(log),
        "dev_float32_trainer": dev_recalls(log[-1]["dev"]),
        "dev_float16": dev_recalls(dev),
        "training_s": round(sum(e["time_s"] for e in log), 1),
        "meta": run_meta(
            threads="2 (--num-threads 2)",
            note="the retrain alone at nice 0; a vse training's view extraction at nice 10 and a "
            "packing probe at nice 15 beside it",
        ),
        **time_v(run.with_suffix(".time")),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--retrained", type=Path, help="the retrain's run directory (reads dev once)")
    parser.add_argument("--out-model", type=Path, help="where the float16 candidate goes")
    args = parser.parse_args()
    if args.retrained:
        path = RESULTS / "aligner_text_finetune.json"
        result = json.loads(path.read_text())
        result["retrained"] = retrained(args.retrained, args.out_model)
        write_result(path.name, result)
        print(json.dumps(result["retrained"], indent=1))
        return
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
