"""The next `vse` candidate (issue 24 item 3): a fixed-epoch retrain of a recipe chosen on val1000.

    python ship/vse_candidate.py --run /work/runs/vse-views-retrain
    python ship/vse_candidate.py --run /work/runs/vft1-retrain \
        --recipe bench/recipes/vse-views-ft1-retrain.json --model PACKED.safetensors \
        --ensemble-dev DEV.json --evidence views-ft1

The run is ``vsekit train --recipe bench/recipes/vse-views-retrain.json``: the six-crop training views
(bench/results/joint_space.json: better than the baseline on val1000 for all four seeds), members and
epochs chosen there, retrained on all of train for exactly that many epochs; each member scores dev once,
after its last epoch, and the packed ensemble once more (the trainer's report). Nothing here chooses.
Writes bench/results/vse_views_candidate.json: the val1000 evidence (per seed: views vs the baseline),
each member's dev numbers and the ensemble's, beside the shipped `vse` (chosen on dev).

The second form is for members trained one per process (``vsekit train --seed S --out RUN/seed-S``),
packed by ``ship/pack_members.py`` and scored on dev once, either by ``ship/ship_models.py vse PACKED --out
CANDIDATE`` (the float16 file that would ship, its dev numbers in its header: pass it as ``--model``) or
by ``vsekit eval --split dev --json DEV.json`` (``--ensemble-dev``);
its val1000 evidence is bench/results/text_finetune.json's views rows (issue 35 item 3) and it writes
``vse_views_ft1_candidate.json``; with ``--evidence views-ft1-head`` (the same members with Lite0's head
tuned, ``"image_features": "pre-head"``) the evidence is bench/results/cnn_head_probe.json's ft1 arms and
it writes ``vse_views_ft1_head_candidate.json``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from _common import RESULTS as RESULTS_DIR
from _common import model_extra, read_run_log, run_meta, time_v, write_result
from vsekit.resources import pretrained_path

RESULTS = RESULTS_DIR / "vse_views_candidate.json"


def _dev(metrics: dict) -> dict:
    return {
        "i2t": {k: round(metrics["i2t"][k], 2) for k in ("r1", "r5", "r10")},
        "t2i": {k: round(metrics["t2i"][k], 2) for k in ("r1", "r5", "r10")},
        "rsum": round(metrics["rsum"], 2),
    }


def _file_dev(path: Path) -> dict | None:
    extra = model_extra(path)
    return _dev(extra["dev"]) if extra.get("dev") else None


def _val1000_evidence() -> list[dict]:
    """Per seed: the best val1000 rsum of the six-crop views member and of the baseline member."""
    space = json.loads((RESULTS_DIR / "joint_space.json").read_text())
    base = {b["seed"]: b["best"]["rsum"] for b in space["baselines"].values()}
    rows = []
    for e in space["experiments"]:
        if e["recipe"].startswith("bench/recipes/joint-views") and "ten" not in e["recipe"]:
            if "infonce" not in e["recipe"]:
                best = max(e["val1000"], key=lambda c: c["rsum"])
                rows.append({"seed": e["seed"], "views": best["rsum"], "baseline": base[e["seed"]]})
    return sorted(rows, key=lambda r: r["seed"])


def _ft1_evidence() -> list[dict]:
    """Per seed: the best val1000 rsum of the views member with MiniLM's top layer tuned and frozen."""
    d = json.loads((RESULTS_DIR / "text_finetune.json").read_text())
    frozen = d["views_frozen"]
    return [
        {"seed": r["seed"], "views_ft1": r["best"]["rsum"], "views": frozen[str(r["seed"])]["best"]["rsum"]}
        for r in d["views_finetuned"]
    ]


def _head_evidence() -> list[dict]:
    """Per seed: the best val1000 rsum of the ft1 member with Lite0's head tuned and frozen."""
    rows = {r["arm"]: r for r in json.loads((RESULTS_DIR / "cnn_head_probe.json").read_text())["rows"]}
    return [
        {
            "seed": seed,
            "views_ft1_head": rows[f"views-ft1-tuned{tail}"]["best"]["rsum"],
            "views_ft1": rows[f"views-ft1-frozen{tail}"]["best"]["rsum"],
        }
        for seed, tail in ((1, ""), (3, "-seed3"))
    ]


EVIDENCE = {
    "views": (_val1000_evidence, RESULTS),
    "views-ft1": (_ft1_evidence, "vse_views_ft1_candidate.json"),
    "views-ft1-head": (_head_evidence, "vse_views_ft1_head_candidate.json"),
}


def _ensemble_dev(model: Path, eval_json: Path | None) -> dict | None:
    """The packed ensemble's dev numbers: from ``vsekit eval --json`` when given, else the file's header."""
    if eval_json is not None:
        return _dev(json.loads(eval_json.read_text()))
    return _file_dev(model)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--run", type=Path, required=True, help="the run folder (its members in seed-S/)")
    parser.add_argument("--recipe", type=Path, help="the recipe (default: RUN/config.json)")
    parser.add_argument("--model", type=Path, help="the packed ensemble (default: RUN/model.safetensors)")
    parser.add_argument("--ensemble-dev", type=Path, help="`vsekit eval --split dev --json` of --model")
    parser.add_argument("--evidence", choices=sorted(EVIDENCE), default="views")
    parser.add_argument(
        "--time-logs",
        type=Path,
        nargs="+",
        help="per member, in the recipe's seed order: the log of its `/usr/bin/time -v` run (wall, peak RSS)",
    )
    parser.add_argument(
        "--baseline",
        type=Path,
        help="the vse file the candidate is compared with (default: the shipped one; after shipping the "
        "candidate, the previous release's file in src/vsekit/pretrained/previous/)",
    )
    args = parser.parse_args()
    config = json.loads((args.recipe or args.run / "config.json").read_text())
    evidence, out = EVIDENCE[args.evidence]
    members = {}
    seeds = config["ensemble_seeds"]
    if args.time_logs and len(args.time_logs) != len(seeds):
        parser.error(f"--time-logs: {len(args.time_logs)} logs for the {len(seeds)} members {seeds}")
    time_logs = dict(zip(seeds, args.time_logs, strict=True)) if args.time_logs else {}
    for seed in config["ensemble_seeds"]:
        log = read_run_log(args.run / f"seed-{seed}")
        scored = [e for e in log if e.get("dev")]
        members[str(seed)] = {
            "epochs": len(log),
            "dev_reads": len(scored),
            "dev": _dev(scored[-1]["dev"]) if scored else None,
            "train_s": round(sum(e.get("time_s", 0.0) for e in log), 1),
            **(time_v(time_logs[seed]) if seed in time_logs else {}),
        }
    payload = {
        "benchmark": f"the next vse candidate: {config['name']}, chosen on val1000, retrained on train",
        **run_meta(threads=config.get("num_threads")),
        "run": str(args.run),
        "recipe": config,
        "val1000_evidence": evidence(),
        "members": members,
        "ensemble_dev": _ensemble_dev(args.model or args.run / "model.safetensors", args.ensemble_dev),
        "shipped_vse_dev": _file_dev(args.baseline or pretrained_path("vse")),
        "baseline": str(args.baseline) if args.baseline else "the shipped vse",
    }
    write_result(out, payload, indent=2)
    print(json.dumps({k: payload[k] for k in ("members", "ensemble_dev", "shipped_vse_dev")}, indent=1))


if __name__ == "__main__":
    main()
