"""Self-critical training of the captioner (issue 24 item 2): its curves, and what the reward costs.

    python bench/bench_scst.py --run /work/runs/scst-effnet [--threads 1]

Writes bench/results/scst.json, whether or not the run has finished:

* ``start``: the captioner the run starts from (the run's ``init_captioner.safetensors``), decoded greedily
  and scored exactly as each epoch is (the recipe's selection images: the first ``eval_images`` of its
  ``dev_split``, CIDEr-D / BLEU through vsekit's metrics, the caption-diversity numbers); measured once and
  kept in the JSON.
* ``curves``: the run's ``log.jsonl``, one row per finished epoch (training reward of the samples, of the
  greedy baseline, sample length; selection-split scores and diversity; seconds).
* ``reward_cost``: seconds to score one SCST step's captions (50 images x 5 samples, the run's own
  captioner, training document frequencies) with the batched scorer (vsekit.metrics.cider_reward) and with
  pycocoevalcap's per-caption Python scorer given the same document frequencies.

Dev is never read here: the run selects on its validation slice; dev is measured once, for the chosen
model, with ``vsekit caption --split dev`` (bench/bench_captioning.py).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections import defaultdict
from pathlib import Path

import torch

from _common import run_meta, write_result

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("VSEKIT_SHARED_DATA", REPO.parent / "shared" / "data" / "flickr8k"))
RESULTS = REPO / "bench" / "results" / "scst.json"


def _run_data(run: Path, with_reward: bool):
    from vsekit.captioning.mrnn_data import load_caption_data
    from vsekit.captioning.trainer import INIT_NAME, CaptionTrainConfig, _init_captioner, selection_corpus
    from vsekit.data import load_corpus
    from vsekit.vision.features import image_features

    config = CaptionTrainConfig.from_dict(json.loads((run / "config.json").read_text()))
    if not with_reward:
        config = CaptionTrainConfig(**{**config.to_dict(), "objective": "xent"})
    corpus = selection_corpus(load_corpus(SHARED), config)
    assert (run / INIT_NAME).is_file(), f"{run}: no {INIT_NAME}"
    init = _init_captioner(config, run, resumed=True)
    return config, init, load_caption_data(corpus, config, image_features, init)


def start_scores(run: Path) -> dict:
    """The starting captioner on the run's selection images, scored as every epoch is."""
    from vsekit.captioning.trainer import default_score_fn
    from vsekit.metrics.diversity import caption_diversity

    config, init, data = _run_data(run, with_reward=False)
    texts = init.caption(data.dev_x, decoding="greedy", max_len=config.max_decode_words)
    scores = default_score_fn(dict(zip(data.dev_ids, texts, strict=True)), data.dev_refs)
    scores = {**scores, **caption_diversity(texts)}
    return {k: (round(float(v), 2) if isinstance(v, float) else v) for k, v in scores.items()}


def reward_cost(run: Path, images: int = 50, samples: int = 5, repeats: int = 3) -> dict:
    """Seconds per SCST step's worth of captions: batched CIDEr-D vs pycocoevalcap's per-caption scorer."""
    from pycocoevalcap.cider.cider_scorer import CiderScorer

    from vsekit.captioning.scst import sample_tokens
    from vsekit.metrics.cider_reward import CiderD

    config, init, data = _run_data(run, with_reward=True)
    t0 = time.perf_counter()
    scorer = CiderD(data.reward_refs, max_id=data.reward_max_id)
    build_s = time.perf_counter() - t0
    rows = torch.tensor(data.reward_rows[:images])
    feats = data.train_x[rows].repeat_interleave(samples, 0)
    tokens, lengths = sample_tokens(
        init.model, feats, config.max_decode_words, torch.Generator().manual_seed(0)
    )
    index = torch.arange(images).repeat_interleave(samples)
    t0 = time.perf_counter()
    for _ in range(repeats):
        fast = scorer.score(index, tokens, lengths)
    fast_s = (time.perf_counter() - t0) / repeats
    # pycocoevalcap with the same (training) document frequencies and ref_len
    words = {i: w for i, w in enumerate(init.vocab.words)}
    ref_text = [
        [" ".join(f"w{i}" if i not in words else words[i] for i in r) for r in refs]
        for refs in data.reward_refs
    ]
    df_scorer = CiderScorer(n=4, sigma=6.0)
    for refs in ref_text:
        df_scorer += ("", refs)
    df_scorer.compute_doc_freq()
    df = defaultdict(float, df_scorer.document_frequency)

    class Images(list):
        def __len__(self) -> int:
            return len(ref_text)

    t0 = time.perf_counter()
    for _ in range(repeats):
        slow = CiderScorer(n=4, sigma=6.0)
        for k in range(len(index)):
            caption = " ".join(words[i] for i in tokens[k, : lengths[k]].tolist())
            slow += (caption, ref_text[int(index[k])])
        slow.document_frequency = df
        slow.crefs = Images(slow.crefs)
        expected = slow.compute_cider()
    slow_s = (time.perf_counter() - t0) / repeats
    diff = float((fast - torch.tensor(expected, dtype=torch.float64)).abs().max())
    return {
        "captions": len(index),
        "batched_s": round(fast_s, 4),
        "pycocoevalcap_s": round(slow_s, 4),
        "speed_up": round(slow_s / fast_s, 1),
        "max_abs_difference": diff,
        "batched_setup_s": round(build_s, 2),
        "training_images": len(data.reward_refs),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--run", type=Path, required=True, help="the SCST run directory")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-cost", action="store_true", help="skip the reward timing")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    previous = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}
    log = [json.loads(line) for line in (args.run / "log.jsonl").read_text().splitlines() if line.strip()]
    config = json.loads((args.run / "config.json").read_text())
    same_run = previous.get("run") == str(args.run)
    start = previous.get("start") if same_run and previous.get("start") else start_scores(args.run)
    cost = previous.get("reward_cost") if args.no_cost else reward_cost(args.run)
    best = max((e for e in log if e.get("best")), key=lambda e: e["epoch"], default=None)
    payload = {
        "benchmark": "self-critical sequence training of the captioner (Flickr8K, selection on val1000)",
        **run_meta(threads=args.threads, torch=torch.__version__),
        "training_threads": config.get("num_threads"),
        "backbone": config["backbone"],
        "run": str(args.run),
        "recipe": config,
        "finished": bool(log) and (log[-1]["epoch"] >= config["epochs"]),
        "epochs_done": len(log),
        "selection": f"{config['dev_split']}, first {config['eval_images']} images, greedy, CIDEr-D",
        "start": start,
        "best_epoch": best["epoch"] if best else None,
        "curves": [
            {
                "epoch": e["epoch"],
                **{k: v for k, v in e.items() if k.startswith("train_")},
                "val": {k: v for k, v in e["dev"].items() if k != "decode_s"},
                "seconds": round(e["time_s"], 1),
            }
            for e in log
        ],
        "reward_cost": cost,
        "dev": previous.get("dev") if same_run else None,  # measured once, for the chosen model only
        "note": "training under heavy shared load (about 7 sessions on 2 cores): seconds are not speeds",
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    write_result(RESULTS, payload, indent=2)
    s = start
    print(f"start: val CIDEr {s['cider']:.1f} B-4 {s['bleu4']:.1f} words {s['mean_words']:.1f}")
    for row in payload["curves"]:
        v = row["val"]
        print(
            f"epoch {row['epoch']}: reward {row['train_reward']:.1f} val CIDEr {v['cider']:.1f} "
            f"B-4 {v['bleu4']:.1f} "
            f"words {v['mean_words']:.1f} distinct {v['distinct_pct']:.0f}% vocab {v['vocab_used']:.0f} "
            f"'a a' {v['repeat_end_pct']:.1f}% dangling {v['dangling_end_pct']:.1f}%"
        )
    if cost:
        print(
            f"reward: {cost['captions']} captions in {cost['batched_s']} s batched, "
            f"{cost['pycocoevalcap_s']} s with pycocoevalcap"
        )
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
