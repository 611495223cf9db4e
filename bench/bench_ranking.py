"""Benchmark: joint-embedding recipes on Flickr8K, ranked on the dev split.

For each recipe: `vsekit train` on ../shared/data/flickr8k (train split; model selection on dev) as a child
process, timed, with its own peak RSS (wait4); then the best model's dev metrics (1,000 images x 5,000
captions, `flickr` protocol) and the time of the ranking evaluation itself (scores + ranks, embeddings
given). Prints a table and writes bench/results/ranking.json (rows are merged by recipe name, so recipes
can be benchmarked one at a time). An ensemble recipe's row also lists each member's best dev epoch and
metrics (from ``RUN/seed-<s>/log.jsonl``); its train time is the sum over the members.

    python bench/bench_ranking.py kiros-gru fne-gru vse-best [--threads 2] [--runs-dir bench/runs]
    python bench/bench_ranking.py --reuse runs/kiros-gru       # collect a finished run without retraining
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

from _common import run_meta, write_result

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("VSEKIT_SHARED_DATA", REPO.parent / "shared" / "data" / "flickr8k"))
RESULTS = REPO / "bench" / "results" / "ranking.json"


def _read_rows() -> dict[str, dict]:
    previous = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {"rows": []}
    return {r["recipe"]: r for r in previous["rows"]}


def run_training(recipe: str, out_dir: Path, threads: int) -> dict:
    cmd = [
        str(Path(sys.executable).parent / "vsekit"),
        "train",
        "--data",
        str(SHARED),
        "--recipe",
        recipe,
        "--out",
        str(out_dir),
        "--num-threads",
        str(threads),
        "--no-progress",
    ]
    if (out_dir / "checkpoint.pt").is_file():
        cmd.append("--resume")
    start = time.perf_counter()
    proc = subprocess.Popen(cmd)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"training {recipe} failed (exit {os.waitstatus_to_exitcode(status)})")
    return {"train_wall_s": wall, "train_peak_rss_mb": usage.ru_maxrss / 1024}


def collect(run_dir: Path) -> dict:
    from vsekit.data import load_corpus
    from vsekit.embedding.evaluate import model_features
    from vsekit.embedding.model import load_model
    from vsekit.metrics.ranking import evaluate_protocol

    config = json.loads((run_dir / "config.json").read_text())
    seeds = config.get("ensemble_seeds")
    member_dirs = [run_dir / f"seed-{s}" for s in seeds] if seeds else [run_dir]
    logs = [
        [json.loads(line) for line in (d / "log.jsonl").read_text().splitlines() if line.strip()]
        for d in member_dirs
    ]
    bests = [max((e for e in log if "dev" in e), key=lambda e: e["dev"]["rsum"]) for log in logs]
    model, fne, meta = load_model(run_dir / "model.safetensors")
    dev = load_corpus(SHARED).split("dev")
    image_ids = dev.image_ids()
    with torch.inference_mode():
        feats = model_features(model, fne, dev, image_ids, progress=False)
        img = model.embed_images(torch.as_tensor(feats, dtype=torch.float32)).numpy()
        cap = model.embed_texts([c.text for c in dev.captions]).numpy()
    start = time.perf_counter()
    metrics = evaluate_protocol(img, cap, image_ids, dev.caption_image_ids(), "flickr")
    eval_s = time.perf_counter() - start
    size_mb = (run_dir / "model.safetensors").stat().st_size / 2**20
    return {
        "recipe": config.get("name", run_dir.name),
        "backbone": config["backbone"],
        "features": config["image_features"],
        "text_encoder": config["text_encoder"],
        "loss": config["loss"]
        + (
            f" (after {config['max_violation_after_epoch']} sum epochs)"
            if config.get("max_violation_after_epoch")
            else ""
        ),
        "embed_dim": model.embed_dim,
        "best_epoch": bests[0]["epoch"] if not seeds else [b["epoch"] for b in bests],
        "epochs_run": len(logs[0]) if not seeds else [len(log) for log in logs],
        "dev": {"i2t": metrics["i2t"], "t2i": metrics["t2i"], "rsum": metrics["rsum"]},
        "dev_rsum_logged": bests[0]["dev"]["rsum"] if not seeds else meta["dev"]["rsum"],
        "eval_1k_x_5k_s": eval_s,
        # from the runs' own logs (for an ensemble: every member's epochs)
        "train_epochs_time_s": sum(e.get("time_s", 0.0) for log in logs for e in log),
        "model_mb": size_mb,
        **(
            {
                "ensemble_seeds": seeds,
                "members": [
                    {"seed": s, "best_epoch": b["epoch"], "epochs_run": len(log), "dev": b["dev"]}
                    for s, b, log in zip(seeds, bests, logs, strict=True)
                ],
            }
            if seeds
            else {}
        ),
    }


def _save(measured: dict[str, dict]) -> dict[str, dict]:
    """Merge ``measured`` into ranking.json as it is now and return all rows.

    Several benchmark processes may run side by side (one per core): the merge happens under a lock, at
    write time, so rows another process wrote while this one trained are kept.
    """
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    with open(RESULTS.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        rows = {**_read_rows(), **measured}
        out = {
            "benchmark": "ranking",
            "split": "Flickr8K dev (1,000 images x 5,000 captions, flickr protocol)",
            **run_meta(threads="per row (each training's --num-threads)", torch=torch.__version__),
            "rows": list(rows.values()),
        }
        write_result(RESULTS, out, indent=2, default=float)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("recipes", nargs="*", help="recipe names (or JSON paths) to train and measure")
    parser.add_argument("--reuse", nargs="*", default=[], type=Path, help="finished run dirs to collect")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs-dir", type=Path, default=REPO / "bench" / "runs")
    args = parser.parse_args()
    if not SHARED.is_dir():
        raise SystemExit(f"{SHARED}: Flickr8K not found (set VSEKIT_SHARED_DATA)")

    rows = _read_rows()  # for --reuse: keep the cost a run was measured with
    measured: dict[str, dict] = {}
    for recipe in args.recipes:
        out_dir = args.runs_dir / Path(recipe).stem
        cost = run_training(recipe, out_dir, args.threads)
        row = collect(out_dir)
        row.update(cost, threads=args.threads)
        measured[row["recipe"]] = row
        _save(measured)  # after each recipe: a long list interrupted later keeps what it measured
    for run_dir in args.reuse:
        row = collect(run_dir)
        old = rows.get(row["recipe"], {})
        row.update({k: old[k] for k in ("train_wall_s", "train_peak_rss_mb", "threads") if k in old})
        measured[row["recipe"]] = row
    rows = _save(measured)

    print(
        f"{'recipe':<22}{'features':<22}{'text':<8}{'loss':<16}{'i2t R@1/5/10':>18}{'medr':>6}"
        f"{'t2i R@1/5/10':>18}{'medr':>6}{'rsum':>8}{'train min':>10}"
    )
    for r in rows.values():
        i, t = r["dev"]["i2t"], r["dev"]["t2i"]
        train_min = f"{r.get('train_wall_s', r['train_epochs_time_s']) / 60:.1f}"
        print(
            f"{r['recipe']:<22}{r['backbone'] + ' ' + r['features']:<22}{r['text_encoder']:<8}"
            f"{r['loss'][:15]:<16}{i['r1']:6.1f}{i['r5']:6.1f}{i['r10']:6.1f}{i['medr']:6.0f}"
            f"{t['r1']:6.1f}{t['r5']:6.1f}{t['r10']:6.1f}{t['medr']:6.0f}{r['dev']['rsum']:8.1f}{train_min:>10}"
        )
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
