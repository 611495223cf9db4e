"""Re-select the shipped aligner under the selection protocol of issue 24 (validation slice flickr8k-val1000).

    python ship/aligner_reselect.py --grid RUNS/align-minilm-grid-val1000 \
        --const RUNS/align-minilm-grid-constant-lr-val1000 [--out-model RUNS/aligner-val1000.safetensors]

The two runs are ``vsekit train-aligner`` with the recipes ``minilm-grid-val1000`` and
``minilm-grid-constant-lr-val1000`` (train minus the slice; every epoch ranked on the slice). A run's
``epochs/ep<N>.pt`` are copies of its ``checkpoint.pt`` after epoch N (``vsekit train-aligner --keep-epochs``;
the trainer otherwise keeps only the last one), so any epoch can be a member. The packing is
ship/ship_aligner.py's (the members' word-region dots summed, float16), and every choice is made on val1000:
each run's epoch is its best val1000 rsum, then the candidate packings below are ranked by val1000 rsum. Dev
is read once, for the chosen one. Nothing is written to src/vsekit/pretrained/: the packed file goes to
``--out-model``.

Then, with ``--retrained --grid RUN --const RUN --out-model OTHER``: the same members (the epochs chosen on
val1000, read from the JSON) taken from runs of the base recipes on all of train (``minilm-grid
--epochs 10``; ``minilm-grid-constant-lr`` branched at 6, to epoch 8), packed, dev read once for them.

Candidates (:func:`candidates`): the shipped scheme "grid best + grid last + constant-lr best", its
parts, and the same with the grid run's second-best epoch instead of its last.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch

from _common import RESULTS, SHARED, read_run_log, run_meta, time_v, write_result
from vsekit.alignment import Aligner, save_aligner
from vsekit.alignment.evaluate import evaluate_aligner
from vsekit.alignment.pack import as_half_file, kept_epoch
from vsekit.data import load_corpus
from vsekit.data.splits import apply_validation_slice, load_validation_slice

PAPER_BRNN = {"i2t": {"r1": 16.5, "r5": 40.6, "r10": 54.2}, "t2i": {"r1": 11.8, "r5": 32.1, "r10": 44.7}}
KEYS = ("r1", "r5", "r10", "medr")


def _short(metrics: dict[str, Any]) -> dict[str, Any]:
    out = {d: {k: round(metrics[d][k], 2) for k in KEYS} for d in ("i2t", "t2i")}
    return {**out, "rsum": round(metrics["rsum"], 2)}


def curve(run: Path) -> list[dict[str, Any]]:
    """The run's log: per epoch the loss, learning rate, seconds and val1000 numbers."""
    entries = read_run_log(run)
    return [
        {"epoch": e["epoch"], "loss": round(e["loss"], 4), "lr": e["lr"], "seconds": round(e["time_s"], 1)}
        | {"val1000": _short(e["dev"])}
        for e in entries
    ]


def best_epochs(points: list[dict[str, Any]]) -> list[int]:
    """Epochs by val1000 rsum, best first."""
    return [p["epoch"] for p in sorted(points, key=lambda p: -p["val1000"]["rsum"])]


def evaluate_pack(
    models: list, extra: dict, path: Path, corpus, split: str, record: str | None = None
) -> dict[str, Any]:
    """Rank ``split`` with ``models`` packed in float16 (the weights that would ship), then save them to
    ``path``, with the numbers in the file's header under ``record`` when given."""
    packed = as_half_file(models)
    start = time.perf_counter()
    metrics = evaluate_aligner(Aligner(packed), corpus, split, progress=False)
    out = {**_short(metrics), "seconds": round(time.perf_counter() - start, 1)}
    save_aligner(packed, path, extra=extra | ({record: out} if record else {}), half=True)
    return out


def candidates(grid: list[int], last: int, const: list[int]) -> dict[str, list[tuple[str, int]]]:
    """The packings tried on val1000: the shipped scheme (grid best + grid last + constant-lr best), its
    parts, and the same with the grid run's second best instead of its last epoch."""
    out: dict[str, list[tuple[str, int]]] = {
        "grid best": [("grid", grid[0])],
        "constant-lr best": [("const", const[0])],
        "grid best + constant-lr best": [("grid", grid[0]), ("const", const[0])],
    }
    for name, other in (("last", last), ("second", grid[1])):
        if other != grid[0]:
            out[f"grid best + grid {name}"] = [("grid", grid[0]), ("grid", other)]
            out[f"grid best + grid {name} + constant-lr best"] = [
                ("grid", grid[0]),
                ("grid", other),
                ("const", const[0]),
            ]
    return out


def training_time(run: Path, points: list[dict[str, Any]]) -> dict[str, Any]:
    """Seconds of the epochs this run trained (a branched run, ship/aligner_branch.py, did not train the
    epochs before its branch point: its ``BRANCHED`` file says which), wall time and peak RSS."""
    branched = json.loads((run / "BRANCHED").read_text()) if (run / "BRANCHED").is_file() else None
    first = branched["epoch"] + 1 if branched else 1
    out: dict[str, Any] = {"branched": branched, "epochs_trained_in_this_run": [first, points[-1]["epoch"]]}
    out["training_seconds_sum_of_epochs"] = round(sum(p["seconds"] for p in points if p["epoch"] >= first), 1)
    return out | time_v(run.parent / f"{run.name}.time")


def retrained(args: argparse.Namespace, snapshots: list[Path]) -> None:
    """``--retrained``: ``--grid``/``--const`` are runs of the base recipes on all of train; pack the epochs
    chosen on val1000 (read from bench/results/aligner_reselect.json, written before these runs started),
    rank dev once, add the result to that file. The trainer logs dev numbers every epoch; nothing here
    reads them (only each epoch's loss and seconds)."""
    path = RESULTS / args.result
    result = json.loads(path.read_text())
    members = [(r, int(e)) for r, e in (m.split(" epoch ") for m in result["chosen"]["members"])]
    runs = {"grid": args.grid, "const": args.const}
    models = [kept_epoch(runs[r], e, snapshots) for r, e in members]
    recipes = {name: json.loads((run / "config.json").read_text())["name"] for name, run in runs.items()}
    extra = {
        "recipe": "packed",
        "selection": "flickr8k-val1000 (members chosen there; these trained on all of train)",
        "packed_from": [{"recipe": recipes[r], "epoch": e} for r, e in members],
    }
    dev = evaluate_pack(models, extra, args.out_model, load_corpus(SHARED), "dev", record="dev")
    print(f"retrained on train, members {members}; dev (read once): {dev}", flush=True)
    losses = {
        name: [{k: p[k] for k in ("epoch", "loss", "lr", "seconds")} for p in curve(run)]
        for name, run in runs.items()
    }
    result["retrained_on_train"] = {
        "meta": run_meta(threads=args.threads, note="load average is at the end (the evaluation)"),
        "note": args.note,
        "members": [f"{recipes[r]} epoch {e}" for r, e in members],
        "runs": {
            name: {
                "dir": str(run),
                "recipe": recipes[name],
                "epochs": losses[name],
                **training_time(run, curve(run)),
            }
            for name, run in runs.items()
        },
        "model": str(args.out_model),
        "dev_once": dev,
    }
    print(write_result(path, result))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--grid", type=Path, required=True)
    parser.add_argument("--const", type=Path, required=True)
    parser.add_argument("--branched-from", type=Path, default=None, help="run holding const's early epochs")
    parser.add_argument("--out-model", type=Path, default=Path("/work/runs/aligner-val1000.safetensors"))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--note", default="", help="how the runs were made (recorded as is)")
    parser.add_argument("--retrained", action="store_true", help="runs on all of train: see retrained()")
    parser.add_argument("--result", default="aligner_reselect.json", help="the results file (bench/results/)")
    parser.add_argument(
        "--no-dev",
        action="store_true",
        help="leave dev unread for the slice-trained packing (read once, for the retrained one)",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.retrained:
        return retrained(args, [args.branched_from] if args.branched_from else [])
    corpus = apply_validation_slice(load_corpus(SHARED), load_validation_slice("flickr8k-val1000"))
    runs = {"grid": args.grid, "const": args.const}
    curves = {name: curve(run) for name, run in runs.items()}
    ranked = {name: best_epochs(points) for name, points in curves.items()}
    snapshots = [args.branched_from] if args.branched_from else []
    tried, models = {}, {}
    for label, members in candidates(ranked["grid"], curves["grid"][-1]["epoch"], ranked["const"]).items():
        for key in members:
            if key not in models:
                models[key] = kept_epoch(runs[key[0]], key[1], snapshots)
        extra = {"recipe": "packed", "members": [f"{r} epoch {e}" for r, e in members]}
        tmp = args.out_model.with_suffix(".candidate.safetensors")
        tried[label] = {"members": extra["members"]}
        tried[label]["val1000"] = evaluate_pack([models[k] for k in members], extra, tmp, corpus, "val1000")
        print(f"{label}: val1000 {tried[label]['val1000']}", flush=True)
    chosen = max(tried, key=lambda label: tried[label]["val1000"]["rsum"])
    members = [(r, e) for r, e in (m.split(" epoch ") for m in tried[chosen]["members"])]
    extra = {
        "recipe": "packed",
        "selection": "flickr8k-val1000",
        "packed_from": [{"recipe": json.loads((runs[r] / "config.json").read_text())["name"], "epoch": int(e)}
                        for r, e in members],
        "val1000": tried[chosen]["val1000"],
    }  # fmt: skip
    chosen_models = [models[(r, int(e))] for r, e in members]
    if args.no_dev:  # the packing is saved as it would ship; dev waits for the retrained members
        dev = None
        save_aligner(as_half_file(chosen_models), args.out_model, extra=extra, half=True)
    else:
        dev = evaluate_pack(chosen_models, extra, args.out_model, corpus, "dev", record="dev")
    print(f"chosen on val1000: {chosen}; dev (read once): {dev}", flush=True)
    shipped = json.loads((RESULTS / "alignment.json").read_text())["shipped"]
    result = {
        "meta": run_meta(threads=args.threads, note="load average is at the end (the evaluation)"),
        "protocol": "train on train-minus-val1000, every choice on val1000 (flickr8k-val1000), dev read once",
        "note": args.note,
        "runs": {
            name: {
                "dir": str(run),
                "recipe": json.loads((run / "config.json").read_text())["name"],
                "curve": curves[name],
                "best_epoch_val1000": ranked[name][0],
                **training_time(run, curves[name]),
            }
            for name, run in runs.items()
        },
        "candidates_val1000": tried,
        "chosen": {"label": chosen, "members": tried[chosen]["members"], "model": str(args.out_model)},
        "dev_once": dev,
        "shipped_aligner_dev": _short(shipped) | {"selected_on": "dev"},
        "paper_brnn_flickr8k_test": PAPER_BRNN,
    }
    print(write_result(args.result, result))


if __name__ == "__main__":
    main()
