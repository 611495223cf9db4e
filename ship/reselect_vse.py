"""Re-select the shipped joint model (`vse`) under the selection protocol (issue 24 item 1).

    python ship/reselect_vse.py --run /work/runs/vse-effnet-val1000

The run is ``vsekit train --recipe bench/recipes/vse-best-effnet-val1000.json``: the shipped recipe
(vse-best-effnet) trained on ``train-minus-val1000`` with seeds 0-3, every epoch scored on ``val1000``.
This script reads the members' logs (finished or not) and writes bench/results/vse_reselect.json: per seed
the val1000 curve, the epoch val1000 picks, and the two seeds val1000 would put in the ensemble, beside
what dev picked for the shipped model (seeds 1 and 2, epochs 14 and 15). Dev is not read here.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from _common import RESULTS as RESULTS_DIR
from _common import read_run_log, run_meta, write_result

RESULTS = RESULTS_DIR / "vse_reselect.json"
SHIPPED = {"seeds": [1, 2], "best_epochs": [14, 15], "selected_on": "dev"}


def member(seed_dir: Path) -> dict:
    log = read_run_log(seed_dir) if (seed_dir / "log.jsonl").is_file() else []
    scored = [e for e in log if e.get("dev")]
    curve = [
        {"epoch": e["epoch"], "rsum": round(e["dev"]["rsum"], 2), "i2t_r1": e["dev"]["i2t"]["r1"],
         "t2i_r1": e["dev"]["t2i"]["r1"]}
        for e in scored
    ]  # fmt: skip
    best = max(curve, key=lambda c: c["rsum"], default=None)
    return {"epochs_done": len(log), "val1000": curve, "best": best}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--run", type=Path, required=True)
    args = parser.parse_args()
    config = json.loads((args.run / "config.json").read_text())
    members = {seed: member(args.run / f"seed-{seed}") for seed in config["ensemble_seeds"]}
    done = {s: m for s, m in members.items() if m["best"] is not None}
    ranked = sorted(done, key=lambda s: -done[s]["best"]["rsum"])
    finished = all(m["epochs_done"] >= config["epochs"] for m in members.values())
    payload = {
        "benchmark": "re-selection of the shipped vse under the selection protocol (val1000)",
        **run_meta(threads=config.get("num_threads")),
        "backbone": config["backbone"],
        "run": str(args.run),
        "recipe": config["name"],
        "finished": finished,
        "members": members,
        "val1000_ranking": ranked,
        "val1000_would_ensemble": ranked[:2] if len(ranked) >= 2 and finished else None,
        "shipped": SHIPPED,
    }
    write_result(RESULTS, payload, indent=2)
    for seed, m in members.items():
        b = m["best"]
        best = f"best epoch {b['epoch']} rsum {b['rsum']:.1f}" if b else "no epoch yet"
        print(f"seed {seed}: {m['epochs_done']} epochs, {best}")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
