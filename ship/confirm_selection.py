"""Does the selection protocol make the shipped file's choice? (issue 24 item 1, for a model not retrained)

    python ship/confirm_selection.py region-captioner --run runs/region-val1000 --metric cider

``--run``: the shipped recipe trained on ``train-minus-val1000`` with every epoch scored on ``val1000``
(``bench/recipes/<recipe>-val1000.json``). Compares the slice's best epoch by ``--metric`` with the epoch
the shipped file was selected at (chosen on dev); the same epoch means the protocol ships the same
settings, and the file stays. Nothing is trained or evaluated here, and dev is not read. Writes
bench/results/<name>_reselect.json (name with '-' as '_').
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from _common import RESULTS, model_extra, read_run_log, run_meta, write_result
from vsekit.resources import pretrained_path


def shipped_epoch(name: str) -> int:
    return int(model_extra(pretrained_path(name))["epoch"])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("name", help="the shipped model (region-captioner, ...)")
    parser.add_argument("--run", type=Path, required=True)
    parser.add_argument("--metric", default="rsum", help="the slice's selection score in the run's log")
    args = parser.parse_args()
    log = read_run_log(args.run)
    scored = [e for e in log if e.get("dev")]
    best = max(scored, key=lambda e: e["dev"][args.metric])
    shipped = shipped_epoch(args.name)
    config = json.loads((args.run / "config.json").read_text())
    payload = {
        "benchmark": f"{args.name}: the selection protocol's choice against the shipped file's",
        **run_meta(threads=config.get("num_threads")),
        "run": str(args.run),
        "recipe": config,
        "metric": args.metric,
        "curve": [{"epoch": e["epoch"], args.metric: round(e["dev"][args.metric], 2)} for e in scored],
        "chosen_epoch": best["epoch"],
        "chosen": {k: v for k, v in best["dev"].items() if isinstance(v, int | float)},
        "shipped_epoch": shipped,
        "same_choice": best["epoch"] == shipped,
        "train_s": round(sum(e.get("train_s", e.get("time_s", 0.0)) for e in log), 1),
    }
    out = RESULTS / f"{args.name.replace('-', '_')}_reselect.json"
    write_result(out, payload, indent=2)
    verdict = "the same" if payload["same_choice"] else "another"
    print(f"{out}: val1000 chose epoch {best['epoch']}, the shipped file epoch {shipped}: {verdict} choice")


if __name__ == "__main__":
    main()
