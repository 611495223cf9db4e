"""Train the structure-content NLM (Kiros et al. 2014) on Flickr8K train, tune its rerank weights on dev,
and score its captions on the 1,000 dev images.

    VSEKIT_CACHE=/work/cache python bench/train_scnlm.py [--data ../shared/data/flickr8k] [--epochs 8]

Trains with ``vsekit.captioning.scnlm_trainer.train_scnlm_run`` into ``bench/runs/scnlm/`` (a resumable run
directory: ``--resume``), writes ``bench/runs/scnlm/scnlm-tuned.safetensors`` (the model with tuned rerank
weights, float16; bench/runs is git-ignored) and
``bench/results/captioning_scnlm.json``, and prints a table. The SC-NLM is conditioned on the shipped joint
model (MobileNetV2 one-layer features, frozen MiniLM). Rerank weights are tuned on the even-numbered half of
dev (500 images, by CIDEr, without METEOR); the scores are reported on all 1,000 dev images and, separately,
on the odd-numbered half that the tuning never saw.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch

from _common import peak_rss_mb, run_meta, write_result

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data", default=os.environ.get("VSEKIT_SHARED_DATA", str(ROOT.parent / "shared/data/flickr8k"))
    )
    parser.add_argument("--out", default=str(ROOT / "bench/runs/scnlm"))
    parser.add_argument("--json", default=str(ROOT / "bench/results/captioning_scnlm.json"))
    parser.add_argument("--recipe", default="scnlm", help="SC-NLM recipe name or JSON path")
    parser.add_argument("--epochs", type=int, default=None, help="override the recipe's epochs")
    parser.add_argument("--resume", action="store_true", help="continue the run in --out")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--limit", type=int, default=0, help="dev images to caption (0 = all)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from vsekit.captioning.scnlm import load_scnlm, tune_rerank_weights
    from vsekit.captioning.scnlm_trainer import load_scnlm_recipe, train_scnlm_run
    from vsekit.data.corpus import load_corpus
    from vsekit.embedding.evaluate import model_features
    from vsekit.embedding.model import load_model
    from vsekit.metrics.captions import java_available, score_captions
    from vsekit.resources import pretrained_path

    corpus = load_corpus(args.data)
    joint, fne, _ = load_model(pretrained_path("vse"))
    out = Path(args.out)
    config = load_scnlm_recipe(args.recipe)
    if args.epochs is not None:
        config = dataclasses.replace(config, epochs=args.epochs)

    t0 = time.perf_counter()
    summary = train_scnlm_run(corpus, config, out, resume=args.resume, progress=True, joint_model=joint)
    train_seconds = time.perf_counter() - t0
    captioner = load_scnlm(summary["model_path"], joint)
    captioner.history = summary["history"]
    net_seconds = sum(h["time_s"] for h in captioner.history)
    best = next(h for h in captioner.history if h["epoch"] == summary["best_epoch"])
    print(
        f"trained in {train_seconds / 60:.1f} min (epochs {net_seconds / 60:.1f} min); "
        f"best epoch {best['epoch']}"
    )

    dev = corpus.split("dev")
    ids = dev.image_ids()[: args.limit or None]
    refs = dev.captions_by_image()
    images = joint.embed_images(model_features(joint, fne, corpus, ids))
    cands = captioner.candidates(images, progress=True)
    caps_per_s = len(ids) / cands.seconds
    print(
        f"candidates for {len(ids)} images in {cands.seconds:.0f} s ({caps_per_s:.1f} images/s): "
        f"{cands.stats}"
    )

    def fast_score(pred: dict[str, str], ref: dict[str, list[str]]) -> dict[str, float]:
        return score_captions(pred, ref, meteor=False)

    tune = list(range(0, len(ids), 2))
    held = list(range(1, len(ids), 2))
    from vsekit.captioning.scnlm import SCNLMCandidates

    def part(rows: list[int]) -> SCNLMCandidates:
        return SCNLMCandidates([cands.captions[i] for i in rows], [cands.features[i] for i in rows])

    t1 = time.perf_counter()
    weights, grid = tune_rerank_weights(
        captioner,
        images[tune],
        [ids[i] for i in tune],
        refs,
        fast_score,
        metric="cider",
        candidates=part(tune),
    )
    print(f"tuned rerank weights in {time.perf_counter() - t1:.0f} s: {asdict(weights)}")

    # the shipped form, next to the run: float16 weights with the tuned rerank weights
    model_path = captioner.save(out / "scnlm-tuned.safetensors", half=True, extra={"data": "flickr8k train"})
    reloaded = load_scnlm(model_path, joint)  # what the CLI will use: float16 weights, int8 banks
    assert asdict(reloaded.rerank_weights) == asdict(weights)

    best_caps = captioner.rerank(cands, n_best=5)
    preds = {i: c[0] for i, c in zip(ids, best_caps, strict=True)}
    scores = score_captions(preds, refs)
    held_scores = score_captions({ids[i]: preds[ids[i]] for i in held}, refs, meteor=False)
    # the paper's unweighted variant, for reference: translation score only, no LM
    plain = {
        i: c[0] for i, c in zip(ids, captioner.rerank(cands, 1, type(weights)(0.0, 0.0, 1.0)), strict=True)
    }
    plain_scores = score_captions(plain, refs, meteor=False)
    train_texts = {" ".join(c.text.lower().split()) for c in corpus.split("train").captions}
    from vsekit.data.vocab import tokenize

    train_tok = {" ".join(tokenize(t)) for t in train_texts}
    verbatim = sum(p in train_tok for p in preds.values()) / len(preds)

    # Reloaded (float16) model: check generation on a few images matches in quality (not bit-exact).
    t2 = time.perf_counter()
    n_check = min(100, len(ids))
    re_caps = reloaded.generate(images[:n_check])
    reload_s = time.perf_counter() - t2
    same = sum(a[0] == b[0] for a, b in zip(re_caps, best_caps[:n_check], strict=True))

    result = {
        "method": "scnlm",
        "backbone": joint.config["image"]["backbone"],
        "features": joint.config["image"]["kind"],
        "split": "dev",
        "n_images": len(ids),
        **{k: scores[k] for k in ("bleu1", "bleu2", "bleu3", "bleu4", "meteor", "rouge_l", "cider")},
        "heldout_half": {"n_images": len(held), **held_scores},
        "translation_only": plain_scores,
        "verbatim_train_share": verbatim,
        "rerank_weights": asdict(weights),
        "tuning": {"images": "even-indexed half of dev (500)", "metric": "cider (no METEOR)", "grid": grid},
        "config": asdict(captioner.config),
        "history": captioner.history,
        "best_epoch": best["epoch"],
        "dev_perplexity": best["dev"]["ppl"],
        "train_seconds_total": train_seconds,
        "train_seconds_epochs": net_seconds,
        "generate_seconds": cands.seconds,
        "images_per_second": caps_per_s,
        "candidate_stats": cands.stats,
        "reloaded_float16_same_top1": f"{same}/{n_check}",
        "reloaded_generate_seconds": reload_s,
        "model_file_bytes": model_path.stat().st_size,
        **run_meta(threads=args.threads),
        "peak_rss_mb": peak_rss_mb(),
        "tokenizer": "ptb" if java_available() else "vsekit",
        "measured": time.strftime("%Y-%m-%d"),
        "examples": [
            {"image": i, "captions": c, "references": refs[i][:2]}
            for i, c in list(zip(ids, best_caps, strict=True))[:24]
        ],
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    write_result(Path(args.json), result, indent=2)

    keys = ("bleu1", "bleu2", "bleu3", "bleu4", "meteor", "rouge_l", "cider")
    print("\n| SC-NLM (Flickr8K dev) | " + " | ".join(keys) + " |")
    print("| --- |" + " ---: |" * len(keys))
    fmt = lambda d: " | ".join("-" if d.get(k) is None else f"{d[k]:.1f}" for k in keys)  # noqa: E731
    print(f"| tuned rerank, 1,000 images | {fmt(scores)} |")
    print(f"| tuned rerank, held-out 500 | {fmt(held_scores)} |")
    print(f"| translation score only | {fmt(plain_scores)} |")
    print(
        f"\nverbatim training captions: {verbatim:.1%}; file {model_path.stat().st_size / 1e6:.1f} MB; "
        f"{caps_per_s:.1f} images/s; reloaded fp16 same top-1 on {same}/{n_check}"
    )
    for ex in result["examples"][:12]:
        print(f"{ex['image']}: {ex['captions'][0]}   | ref: {ex['references'][0]}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
