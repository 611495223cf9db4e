"""Benchmark: the dependency Tree-LSTM (T-LSTM seed) against the GRU / LSTM / bag-of-words encoders.

Two parts, both written into bench/results/tree_lstm.json:

* ``--collect RUN_DIR...``: finished ``vsekit train`` runs ranked on Flickr8K dev (1,000 images x 5,000
  captions, ``flickr`` protocol) with R@1/5/10/20/50 (the seed's Table 3 reports 20 and 50 too), median
  rank and rsum (R@1+5+10 both ways, as everywhere in this project), best epoch, training minutes (wall
  time from ``RUN_DIR.time`` if the run was started under ``/usr/bin/time -v``, else the logged epoch
  times) and the model file's size.
* ``--speed``: sentences per second, forward only (eval mode, no grad, batch 128, ``prepare`` included,
  parses cached) and per training step (forward + loss + backward + Adam, batch 128), for the GRU of
  ``kiros-gru`` and the Tree-LSTM recipes given, on the same captions, threads and machine, interleaved
  over ``--repeats`` rounds (median).

    python bench/bench_tree_lstm.py --speed tree-lstm-vs --threads 1
    python bench/bench_tree_lstm.py --collect bench/runs/tree-lstm-vs bench/runs/kiros-bow
    python bench/bench_tree_lstm.py --readme
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from _common import load_now, run_meta, write_result

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("VSEKIT_SHARED_DATA", REPO.parent / "shared" / "data" / "flickr8k"))
RESULTS = REPO / "bench" / "results" / "tree_lstm.json"
KS = (1, 5, 10, 20, 50)


def _load() -> dict:
    return json.loads(RESULTS.read_text()) if RESULTS.is_file() else {"rows": [], "speed": None}


def _save(data: dict) -> None:
    data.update(
        benchmark="tree_lstm",
        split="Flickr8K dev (1,000 images x 5,000 captions, flickr protocol)",
        **run_meta(threads="per row (rows: the training's, speed: --threads)", torch=torch.__version__),
    )
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    write_result(RESULTS, data, indent=2, default=float)


def _recalls(ranks: np.ndarray) -> dict:
    out = {f"r{k}": float(100.0 * np.mean(ranks <= k)) for k in KS}
    return {**out, "medr": float(np.median(ranks)), "meanr": float(np.mean(ranks))}


def _wall_s(run_dir: Path) -> float | None:
    """Wall time from a ``/usr/bin/time -v`` report next to the run (``RUN_DIR.log``)."""
    log = run_dir.with_suffix(".log")
    if not log.is_file():
        return None
    m = re.search(
        r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([\d.]+)", log.read_text()
    )
    if not m:
        return None
    h, mnt, s = int(m.group(1) or 0), int(m.group(2)), float(m.group(3))
    return h * 3600 + mnt * 60 + s


def _cpu_s(run_dir: Path) -> float | None:
    """User + system CPU seconds from the same report: comparable between a loaded and a quiet machine."""
    log = run_dir.with_suffix(".log")
    if not log.is_file():
        return None
    text = log.read_text()
    user = re.search(r"User time \(seconds\): ([\d.]+)", text)
    system = re.search(r"System time \(seconds\): ([\d.]+)", text)
    return float(user.group(1)) + float(system.group(1)) if user and system else None


def collect(run_dir: Path) -> dict:
    from vsekit.data import load_corpus
    from vsekit.embedding.evaluate import model_features
    from vsekit.embedding.model import load_model
    from vsekit.metrics.ranking import embedding_ranks

    config = json.loads((run_dir / "config.json").read_text())
    log = [json.loads(line) for line in (run_dir / "log.jsonl").read_text().splitlines() if line.strip()]
    best = max((e for e in log if "dev" in e), key=lambda e: e["dev"]["rsum"])
    model, fne, _ = load_model(run_dir / "model.safetensors")
    dev = load_corpus(SHARED).split("dev")
    image_ids = dev.image_ids()
    with torch.inference_mode():
        feats = model_features(model, fne, dev, image_ids, progress=False)
        img = model.embed_images(torch.as_tensor(feats, dtype=torch.float32))
        cap = model.embed_texts([c.text for c in dev.captions])
    i2t, t2i = embedding_ranks(img, cap, image_ids, dev.caption_image_ids())
    m_i2t, m_t2i = _recalls(i2t), _recalls(t2i)
    wall = _wall_s(run_dir)
    return {
        "recipe": config["name"],
        "text_encoder": config["text_encoder"],
        "text_encoder_kwargs": config["text_encoder_kwargs"],
        "head": config.get("head", "linear"),
        "embed_dim": config["embed_dim"],
        "loss": config["loss"]
        + (
            f" after {config['max_violation_after_epoch']} sum epochs"
            if config.get("max_violation_after_epoch")
            else ""
        ),
        "features": f"{config['backbone']} {config['image_features']}",
        "epoch_cap": config["epochs"],
        "best_epoch": best["epoch"],
        "epochs_run": len(log),
        "dev": {
            "i2t": m_i2t,
            "t2i": m_t2i,
            "rsum": sum(m[f"r{k}"] for m in (m_i2t, m_t2i) for k in (1, 5, 10)),
        },
        "dev_rsum_logged": best["dev"]["rsum"],
        "train_min": (wall if wall is not None else sum(e.get("time_s", 0.0) for e in log)) / 60,
        "train_min_is_wall": wall is not None,
        "train_cpu_min": (_cpu_s(run_dir) or 0.0) / 60 or None,
        "threads": config.get("num_threads"),
        "model_mb": (run_dir / "model.safetensors").stat().st_size / 2**20,
        "params": sum(p.numel() for p in model.parameters()),
    }


def _speed_models(recipes: list[str], vocab) -> dict:
    from vsekit.embedding.model import JointEmbedding
    from vsekit.embedding.trainer import load_recipe
    from vsekit.text import EMBED_DIM_KWARG, build_text_encoder

    models = {}
    for name in ["kiros-gru", *recipes]:
        cfg = load_recipe(name)
        kwargs = {EMBED_DIM_KWARG[cfg.text_encoder]: cfg.embed_dim, **cfg.text_encoder_kwargs}
        enc = build_text_encoder(cfg.text_encoder, vocab, **kwargs)
        models[cfg.name] = JointEmbedding(
            enc, 1280, cfg.backbone, cfg.image_features, vocab, head=cfg.head, embed_dim=cfg.embed_dim
        )
    return models


def _one_round(model, texts: list[str], batch: int) -> tuple[float, float]:
    from vsekit.embedding.losses import ContrastiveLoss

    enc = model.text_encoder
    model.eval()
    start = time.perf_counter()
    with torch.no_grad():
        for i in range(0, len(texts), batch):
            model.encode_texts(**enc.prepare(texts[i : i + batch]))
    fwd = len(texts) / (time.perf_counter() - start)
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-4)
    criterion = ContrastiveLoss(0.2, False)
    gen = torch.Generator().manual_seed(0)
    start = time.perf_counter()
    for i in range(0, len(texts), batch):
        chunk = texts[i : i + batch]
        img, cap = model(torch.randn(len(chunk), 1280, generator=gen), **enc.prepare(chunk))
        loss = criterion(img, cap, torch.arange(len(chunk)))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    step = len(texts) / (time.perf_counter() - start)
    return fwd, step


def speed(recipes: list[str], threads: int, repeats: int, n_batches: int, batch: int = 128) -> dict:
    from vsekit.data import load_corpus
    from vsekit.data.vocab import build_vocabulary

    torch.set_num_threads(threads)
    corpus = load_corpus(SHARED)
    vocab = build_vocabulary(corpus, "train", 1, 1000)
    texts = [c.text for c in corpus.split("dev").captions][: batch * n_batches]
    models = _speed_models(recipes, vocab)
    for model in models.values():
        model.text_encoder.precompute(texts, progress=False)  # parses are per corpus, not per batch
    runs: dict[str, list[tuple[float, float]]] = {name: [] for name in models}
    for _ in range(repeats):  # interleaved, so a change of load hits every model alike
        for name, model in models.items():
            runs[name].append(_one_round(model, texts, batch))
    out = {}
    for name, rounds in runs.items():
        fwd = statistics.median(r[0] for r in rounds)
        step = statistics.median(r[1] for r in rounds)
        out[name] = {
            "forward_sent_per_s": fwd,
            "train_sent_per_s": step,
            "params": sum(p.numel() for p in models[name].parameters()),
        }
    gru = out["kiros-gru"]
    for row in out.values():
        row["forward_vs_gru"] = row["forward_sent_per_s"] / gru["forward_sent_per_s"]
        row["train_vs_gru"] = row["train_sent_per_s"] / gru["train_sent_per_s"]
    return {
        "threads": threads,
        "batch": batch,
        "sentences": len(texts),
        "repeats": repeats,
        "load_avg_before": load_now()["loadavg_1m"],
        "models": out,
    }


def readme_table(data: dict) -> str:
    head = (
        "| model | head | loss | i2t R@1 | R@5 | R@10 | R@20 | R@50 | Med r "
        "| t2i R@1 | R@5 | R@10 | R@20 | R@50 | Med r | rsum | train min (CPU min) | best epoch |\n"
        "| --- | --- | --- |" + " ---: |" * 15
    )
    lines = [head]
    for r in data["rows"]:
        i, t = r["dev"]["i2t"], r["dev"]["t2i"]
        cells = [f"{i[f'r{k}']:.1f}" for k in KS] + [f"{i['medr']:g}"]
        cells += [f"{t[f'r{k}']:.1f}" for k in KS] + [f"{t['medr']:g}"]
        lines.append(
            f"| {r['recipe']} | {r['head']} | {r['loss']} | "
            + " | ".join(cells)
            + f" | {r['dev']['rsum']:.1f} | {r['train_min']:.1f} ({r.get('train_cpu_min') or 0:.1f})"
            + f" | {r['best_epoch']} of {r['epochs_run']} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--collect", nargs="*", default=[], type=Path, help="finished run directories")
    parser.add_argument(
        "--speed", nargs="*", default=None, help="Tree-LSTM recipes to time against kiros-gru"
    )
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batches", type=int, default=5, help="batches of 128 dev captions per round")
    parser.add_argument("--readme", action="store_true", help="print the README table")
    args = parser.parse_args()
    data = _load()
    if args.collect:
        rows = {r["recipe"]: r for r in data["rows"]}
        for run_dir in args.collect:
            row = collect(run_dir)
            rows[row["recipe"]] = row
            print(f"{row['recipe']}: rsum {row['dev']['rsum']:.1f}")
        data["rows"] = list(rows.values())
        _save(data)
    if args.speed is not None:
        data["speed"] = speed(args.speed, args.threads, args.repeats, args.batches)
        _save(data)
        print(json.dumps(data["speed"], indent=2))
    if args.readme:
        print(readme_table(data))


if __name__ == "__main__":
    main()
