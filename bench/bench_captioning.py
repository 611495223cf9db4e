"""Benchmark: caption generation on the Flickr8K dev split (1,000 images x 5 human captions).

Each row runs `vsekit caption --data ../shared/data/flickr8k --split dev --json ...` as a child process (the
command a user runs) and records BLEU-1..4, METEOR, ROUGE-L, CIDEr-D (pycocoevalcap, x100), the share of
generated captions found verbatim in the training captions, and generation speed (captions/s over the
decoding only; image features come from the cache). m-RNN rows are decoded greedily (beam 1) and with
beam 3; a run directory's ``log.jsonl`` gives the training time to its best epoch. Rows are merged into
bench/results/captioning.json by name, so runs can be benchmarked one at a time.

    python bench/bench_captioning.py --mrnn runs/cap-lstm [--mrnn runs/cap-rnn] [--nn] [--threads 2]
    python bench/bench_captioning.py --scnlm bench/runs/scnlm/scnlm.safetensors
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from _common import run_meta, write_result

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("VSEKIT_SHARED_DATA", REPO.parent / "shared" / "data" / "flickr8k"))
RESULTS = REPO / "bench" / "results" / "captioning.json"
THREADS = [1]  # set from --threads; recorded in every row (speed depends on it)
KEYS = ("bleu1", "bleu2", "bleu3", "bleu4", "meteor", "rouge_l", "cider")


def run_caption(args: list[str], threads: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "scores.json"
        cmd = [
            str(Path(sys.executable).parent / "vsekit"),
            "caption",
            "--data",
            str(SHARED),
            "--split",
            "dev",
        ]
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
        subprocess.run([*cmd, *args, "--json", str(out)], check=True, env=env, stdout=subprocess.DEVNULL)
        return json.loads(out.read_text())


def training_cost(run_dir: Path) -> dict:
    """Seconds of training (and dev decoding) up to the best epoch, from the run's log."""
    log = [json.loads(line) for line in (run_dir / "log.jsonl").read_text().splitlines() if line.strip()]
    best = max((e for e in log if e.get("best")), key=lambda e: e["epoch"])
    upto = [e for e in log if e["epoch"] <= best["epoch"]]
    return {
        "best_epoch": best["epoch"],
        "epochs_run": len(log),
        "train_s_to_best": round(sum(e["train_s"] + e.get("dev", {}).get("decode_s", 0) for e in upto), 1),
        "config": json.loads((run_dir / "config.json").read_text()),
    }


def has_rerank(model: Path) -> bool:
    from safetensors import safe_open

    with safe_open(str(model), framework="pt") as f:
        return "rerank" in json.loads((f.metadata() or {}).get("extra", "{}"))


def row(name: str, scores: dict, extra: dict | None = None) -> dict:
    return {
        "name": name,
        **{k: None if scores.get(k) is None else round(scores[k], 2) for k in KEYS},
        "in_training_set": scores.get("in_training_set"),
        "captions_per_s": scores.get("captions_per_s"),
        "backbone": scores.get("backbone"),
        "features": scores.get("features"),
        "method": scores.get("method"),
        "threads": THREADS[0],
        **(extra or {}),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mrnn", action="append", default=[], type=Path, help="m-RNN run directory")
    parser.add_argument("--scnlm", action="append", default=[], type=Path, help="SC-NLM model file")
    parser.add_argument("--joint-model", type=Path, help="joint model the SC-NLM was trained with")
    parser.add_argument("--nn", action="store_true", help="nearest-neighbour baseline (one-layer features)")
    parser.add_argument("--nn-fne", action="store_true", help="nearest-neighbour baseline on FNE features")
    parser.add_argument("--beams", default="1,3", help="beam sizes for m-RNN rows")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    THREADS[0] = args.threads
    if not SHARED.is_dir():
        raise SystemExit(f"{SHARED}: Flickr8K not found (set VSEKIT_SHARED_DATA)")
    rows = []
    for run_dir in args.mrnn:
        cost = training_cost(run_dir)
        cfg = cost.pop("config")
        model = run_dir / "captioner.safetensors"
        info = {"cell": cfg["cell"], "recipe": cfg["name"], **cost}
        for beam in (int(b) for b in args.beams.split(",")):
            decode = ["--decoding", "greedy"] if beam == 1 else ["--beam", str(beam), "--no-rerank"]
            scores = run_caption(["--model", str(model), *decode], args.threads)
            name = f"{run_dir.name} beam {beam}"
            rows.append(row(name, scores, {"beam": beam, "rerank": False, **info}))
            print(f"{name}: B-4 {scores['bleu4']:.1f} CIDEr {scores['cider']:.1f}", flush=True)
        if has_rerank(model):  # the captioner's default: its tuned beam reranked with the joint embedding
            scores = run_caption(["--model", str(model)], args.threads)
            name = f"{run_dir.name} beam {scores['beam']} + rerank"
            rows.append(row(name, scores, {"beam": scores["beam"], "rerank": scores["rerank"], **info}))
            print(f"{name}: B-4 {scores['bleu4']:.1f} CIDEr {scores['cider']:.1f}", flush=True)
    for path in args.scnlm:
        joint = ["--joint-model", str(args.joint_model)] if args.joint_model else []
        scores = run_caption(["--method", "scnlm", "--model", str(path), *joint], args.threads)
        rows.append(
            row(f"scnlm {path.parent.name}", scores, {"joint_model": str(args.joint_model or "shipped")})
        )
    if args.nn:
        rows.append(row("nearest neighbour", run_caption(["--method", "nn"], args.threads)))
    if args.nn_fne:
        scores = run_caption(["--method", "nn", "--features", "fne"], args.threads)
        rows.append(row("nearest neighbour (FNE)", scores))

    previous = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {"rows": []}
    merged = {r["name"]: r for r in previous.get("rows", [])}
    merged.update({r["name"]: r for r in rows})
    payload = {
        **run_meta(threads=args.threads, torch=torch.__version__),
        "split": "Flickr8K dev (1,000 images, 5 references each)",
        "rows": list(merged.values()),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    write_result(RESULTS, payload, indent=2)
    labels = ("B-1", "B-2", "B-3", "B-4", "MET", "R-L")
    print(f"{'row':34} " + " ".join(f"{x:>5}" for x in labels) + f" {'CIDEr':>6} {'train%':>6} {'cap/s':>7}")
    for r in payload["rows"]:
        vals = " ".join(f"{'-' if r[k] is None else format(r[k], '.1f'):>5}" for k in KEYS[:-1])
        print(
            f"{r['name']:34} {vals} {r['cider']:6.1f} "
            f"{'-' if r['in_training_set'] is None else format(r['in_training_set'], '.0f'):>6} "
            f"{r['captions_per_s'] or 0:7.1f}"
        )
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
