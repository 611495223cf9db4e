"""GPO over the CNN's grid (issue 35 item 1): the image side pooled by VSE-infinity's Generalized Pooling
Operator against the one-vector image, alone, on val1000.

    python bench/gpo.py          # read the two runs' logs, write bench/results/gpo.json

The runs (one at a time, nice 10, on the shared 2-core machine; ``/usr/bin/time -v`` gives the peak RSS)::

    vsekit train --data /work/shared/data/flickr8k --recipe bench/recipes/joint-onevector-seed1.json \\
        --out /work/runs/gpo-baseline/onevector-seed1 --no-progress
    vsekit train --data /work/shared/data/flickr8k --recipe bench/recipes/joint-gpo-seed1.json \\
        --out /work/runs/gpo-seed1 --no-progress        # --resume continues an interrupted run exactly

Both are member seed 1 of the re-selected ``vse`` recipe without training views (vse-best-effnet-val1000:
frozen MiniLM + residual head, hardest negative after 2 sum epochs, dropout 0.4 on the image features,
15 epochs, StepLR at 9), trained on train-minus-val1000 and scored on val1000 after every epoch; the GPO
run changes only the image side (the 7 x 7 x 1280 grid of the same centre crop, each cell projected, then
GPO). Without views on both sides: six crops of the grid would be 4.5 GB of float16 for the 6,000
photos. For context the file also carries, from ``bench/results/joint_space.json``, the same seed's
baseline as the 4-seed run trained it (the one-vector rerun should repeat it) and the six-crop views
member of seed 1 (the shipped recipe's member). Dev is not read.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

from _common import REPO, load_now, run_meta, write_result

RUNS = Path("/work/runs")
ROWS = [
    {
        "name": "one vector (the CNN's average pool)",
        "recipe": "bench/recipes/joint-onevector-seed1.json",
        "run": RUNS / "gpo-baseline" / "onevector-seed1",
        "time_log": RUNS / "gpo-baseline" / "train.log",
    },
    {
        "name": "GPO over the 7 x 7 grid, dropout per cell",
        "recipe": "bench/recipes/joint-gpo-seed1.json",
        "run": RUNS / "gpo-seed1",
        "time_log": RUNS / "gpo-seed1.log",
    },
    {
        "name": "GPO over the 7 x 7 grid, dropout per channel",
        "recipe": "bench/recipes/joint-gpo-channel-seed1.json",
        "run": RUNS / "gpo-channel-seed1",
        "time_log": RUNS / "gpo-channel-seed1.log",
    },
]


def read_log(run: Path) -> list[dict[str, Any]]:
    path = run / "log.jsonl"
    lines = path.read_text().splitlines() if path.is_file() else []
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:  # a line still being written
            break
    return out


def peak_rss_mb(time_log: Path) -> float | None:
    """``Maximum resident set size`` from ``/usr/bin/time -v`` output (absent while the run goes)."""
    if not time_log.is_file():
        return None
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", time_log.read_text(errors="replace"))
    return round(int(m.group(1)) / 1024, 1) if m else None


def stopped_early(time_log: Path) -> bool:
    """The trainer said it stopped on patience (no better val1000 rsum in ``patience`` evaluations)."""
    return time_log.is_file() and "early stopping" in time_log.read_text(errors="replace")


def load_during(samples: list[tuple[float, float]], start: float, end: float) -> dict | None:
    inside = [l1 for t, l1 in samples if start <= t <= end]
    if not inside:
        return None
    return {"samples": len(inside), "mean_1m": round(sum(inside) / len(inside), 2), "max_1m": max(inside)}


def recalls(dev: dict[str, Any]) -> dict[str, float]:
    return {f"{side}_{k}": round(dev[side][k], 2) for side in ("i2t", "t2i") for k in ("r1", "r5", "r10")}


def row(spec: dict[str, Any], samples: list[tuple[float, float]]) -> dict[str, Any]:
    recipe = json.loads((REPO / spec["recipe"]).read_text())
    log = read_log(spec["run"])
    curve = [
        {
            "epoch": e["epoch"],
            "rsum": round(e["dev"]["rsum"], 2),
            **recalls(e["dev"]),
            "time_s": round(e["time_s"], 1),
        }
        for e in log
        if e.get("dev")
    ]
    best = max(curve, key=lambda c: c["rsum"], default=None)
    times = [e["time_s"] for e in log]
    out: dict[str, Any] = {
        "name": spec["name"],
        "recipe": spec["recipe"],
        "run": str(spec["run"]),
        "seed": recipe["seed"],
        "image": {
            "features": recipe["image_features"],
            "pool": recipe.get("image_pool"),
            "grid_dropout": recipe.get("grid_dropout"),
        },
        "threads": recipe.get("num_threads"),
        "epochs_done": len(log),
        "epochs": recipe["epochs"],
        "stopped_early": stopped_early(spec["time_log"]),
        "finished": len(log) == recipe["epochs"] or stopped_early(spec["time_log"]),
        "val1000": curve,
        "best": best,
        "training_s": round(sum(times), 1),
        "epoch1_s": round(times[0], 1) if times else None,
        "later_epoch_mean_s": round(sum(times[1:]) / len(times[1:]), 1) if len(times) > 1 else None,
        "peak_rss_mb": peak_rss_mb(spec["time_log"]),
    }
    log_path = spec["run"] / "log.jsonl"
    if log_path.is_file() and times:
        end = log_path.stat().st_mtime
        out["load_during_run"] = load_during(samples, end - sum(times), end)
    return out


def learned_weights(model_path: Path) -> dict[str, Any] | None:
    """GPO's weights theta_1..theta_49 in the selected model, and how much of them the top ranks hold."""
    if not model_path.is_file():
        return None
    from vsekit.embedding.model import JointEmbedding, load_model

    model = load_model(model_path)[0]
    assert isinstance(model, JointEmbedding) and model.image_pool is not None and model.cells
    theta = model.image_pool.weights(model.cells).detach()
    top = {f"top_{k}": round(float(theta[:k].sum()), 3) for k in (1, 5, 10, 25)}
    return {"theta": [round(float(t), 4) for t in theta], **top, "argmax_rank": int(theta.argmax()) + 1}


def context() -> dict[str, Any]:
    """The same seed's rows in bench/results/joint_space.json (R@1 and rsum per epoch only)."""
    d = json.loads((REPO / "bench" / "results" / "joint_space.json").read_text())
    views = next(e for e in d["experiments"] if e["recipe"].endswith("joint-views-seed1.json"))
    keep = ("name", "recipe", "run", "seed", "best", "training_s", "later_epoch_mean_s")
    return {
        "baseline_seed1_in_4_seed_run": {k: d["baselines"]["1"][k] for k in keep},
        "views_seed1": {k: views[k] for k in keep},
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--load-log", type=Path, default=RUNS / "gpo-load.log")
    parser.add_argument("--extract-log", type=Path, default=RUNS / "gpo-extract" / "extract.log")
    args = parser.parse_args()
    samples = []
    if args.load_log.is_file():
        for line in args.load_log.read_text().splitlines():
            t, l1, *_ = line.split()
            samples.append((float(t), float(l1)))
    base, *gpos = (row(spec, samples) for spec in ROWS)
    for gpo in gpos:
        if base["best"] and gpo["best"]:
            gpo["vs_one_vector_best"] = {
                k: round(gpo["best"][k] - base["best"][k], 2) for k in ("rsum", "i2t_r1", "t2i_r1")
            }
        gpo["theta"] = learned_weights(Path(gpo["run"]) / "model.safetensors")
    extraction = None
    if args.extract_log.is_file():
        lines = [line for line in args.extract_log.read_text().splitlines() if line.endswith("s")]
        extraction = " / ".join(line.rsplit("\r", 1)[-1] for line in lines) or None
    payload = {
        "benchmark": "GPO over the CNN's grid features against the one-vector image, alone, on val1000",
        "meta": run_meta(
            threads="1 (one vector) / 2 (GPO), as each recipe's num_threads",
            note="one training at a time (the one-vector run beside the grid extraction), nice 10, "
            "2-core machine shared with other sessions' jobs",
        ),
        "load_now": load_now(),
        "protocol": "train-minus-val1000 / val1000 (flickr8k-val1000 slice); dev not read; seed 1; "
        "15 epochs; no training views (centre crop only) on any row",
        "backbone": "efficientnet_lite0 (224 centre crop; grid: its last conv map, 7 x 7 x 1280, "
        "float16 cache)",
        "grid_extraction": extraction,
        "grid_cache_gb": round(6000 * 49 * 1280 * 2 / 1e9, 2),
        "rows": [base, *gpos],
        "context": context(),
    }
    write_result("gpo.json", payload)
    for r in (base, *gpos):
        b = r["best"]
        best = (
            f"best epoch {b['epoch']}: rsum {b['rsum']:.1f}, R@1 {b['i2t_r1']:.1f} / {b['t2i_r1']:.1f}"
            if b
            else "-"
        )
        print(f"{r['name']:<40} {r['epochs_done']:>2}/{r['epochs']} epochs  {best}  {r['training_s']:.0f} s")


if __name__ == "__main__":
    main()
