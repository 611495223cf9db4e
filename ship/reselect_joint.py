"""Re-select a single-seed joint model under the selection protocol (issue 24 item 1): its epoch chosen on
the validation slice, then a fixed-epoch retrain on all of train, dev read once.

    python ship/reselect_joint.py bow --selection-run runs/bow-val1000 --retrain-run runs/bow-retrain

``--selection-run``: ``vsekit train --recipe bench/recipes/NAME-val1000.json`` (trained on
``train-minus-val1000``, every epoch scored on ``val1000``); ``--retrain-run``: ``vsekit train --recipe
bench/recipes/NAME-retrain.json`` (all of train, exactly the chosen number of epochs, ``eval_every`` =
epochs: dev scored once, after the last epoch, choosing nothing). Nothing here trains or evaluates: it
checks that the retrain ran the slice's choice and writes both curves, the dev report and the shipped
file's dev numbers beside them to bench/results/NAME_reselect.json. Run it before shipping the retrain.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from _common import RESULTS, model_extra, read_run_log, run_meta, write_result
from vsekit.resources import pretrained_path


def _ranking(metrics: dict) -> dict:
    keys = ("r1", "r5", "r10", "medr")
    return {d: {k: round(metrics[d][k], 2) for k in keys} for d in ("i2t", "t2i")} | {
        "rsum": round(metrics["rsum"], 2)
    }


def _file_dev(path: Path) -> dict:
    extra = model_extra(path)
    return {"recipe": extra.get("recipe"), "dev": _ranking(extra["dev"])}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("name", help="the shipped model this re-selects (bow, ...)")
    parser.add_argument("--selection-run", type=Path, required=True)
    parser.add_argument("--retrain-run", type=Path, required=True)
    args = parser.parse_args()
    chosen_log = read_run_log(args.selection_run)
    scored = [e for e in chosen_log if e.get("dev")]
    best = max(scored, key=lambda e: e["dev"]["rsum"])
    retrain_config = json.loads((args.retrain_run / "config.json").read_text())
    retrain_log = read_run_log(args.retrain_run)
    if retrain_config["epochs"] != best["epoch"] or len(retrain_log) != best["epoch"]:
        raise SystemExit(
            f"reselect_joint.py: the slice chose epoch {best['epoch']}, the retrain ran "
            f"{len(retrain_log)} of {retrain_config['epochs']} epochs"
        )
    dev_reads = [e for e in retrain_log if e.get("dev")]
    if len(dev_reads) != 1 or dev_reads[0]["epoch"] != best["epoch"]:
        raise SystemExit("reselect_joint.py: the retrain must score dev once, after its last epoch")
    payload = {
        "benchmark": f"{args.name} re-selected on the validation slice, retrained on train, dev read once",
        **run_meta(threads=retrain_config.get("num_threads")),
        "selection": {
            "run": str(args.selection_run),
            "recipe": json.loads((args.selection_run / "config.json").read_text()),
            "curve": [{"epoch": e["epoch"], "rsum": round(e["dev"]["rsum"], 2)} for e in scored],
            "chosen_epoch": best["epoch"],
            "chosen": _ranking(best["dev"]),
            "train_s": round(sum(e.get("time_s", 0.0) for e in chosen_log), 1),
        },
        "retrain": {
            "run": str(args.retrain_run),
            "recipe": retrain_config,
            "dev": _ranking(dev_reads[0]["dev"]),
            "train_s": round(sum(e.get("time_s", 0.0) for e in retrain_log), 1),
        },
        "previous": _file_dev(pretrained_path(args.name)),
    }
    out = write_result(RESULTS / f"{args.name}_reselect.json", payload, indent=2)
    print(f"{out}: val1000 chose epoch {best['epoch']}; retrain dev rsum {payload['retrain']['dev']['rsum']}")


if __name__ == "__main__":
    main()
