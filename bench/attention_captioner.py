"""The soft-attention captioner (issue 35 item 4) against the m-RNN, on the validation slice flickr8k-val1000.

    python bench/attention_captioner.py --run /work/runs/attn-val1000 \
        --joint /work/runs/vse-views-val1000.safetensors [--beam 7] [--threads 1]

Reads the run of ``bench/recipes/attn-lstm-effnet-val1000.json`` (trained on train-minus-val1000, the epoch
kept by greedy CIDEr-D on the slice) and scores its best epoch on the slice with the yardstick's decodings:
greedy (every metric, METEOR included when Java is there), greedy with the repeat guard (``--no-repeat-ngram
3``), and a beam of ``--beam`` reranked with a joint model that never saw the slice, the rerank's weight and
length penalty tuned on the slice over the grid of ``ship/ship_models.py`` on the float16 weights (as the
m-RNN's were: ``bench/results/captioner_rerank_val1000_views.json``; the beam alone is that grid's weight 0,
length penalty 0, CIDEr-D and BLEU-4 only). Nothing is shipped and dev is not read.
Writes ``bench/results/attention_captioner.json``: the run's per-epoch curve, the final numbers, and the
m-RNN's numbers on the same slice from the files that hold them.
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import time
from pathlib import Path

import torch

from _common import RESULTS, run_meta, write_result
from vsekit.captioning.captioner import load_captioner, save_captioner
from vsekit.captioning.trainer import default_score_fn, tune_captioner_rerank
from vsekit.data import load_corpus
from vsekit.data.splits import apply_validation_slice, load_validation_slice
from vsekit.data.vocab import tokenize
from vsekit.metrics.captions import score_captions
from vsekit.metrics.diversity import caption_diversity
from vsekit.vision.features import image_features

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data" / "flickr8k"
SLICE = "flickr8k-val1000"
# ship/ship_models.py's grid (the m-RNN's rerank on the slice was tuned over the same one)
GRID = {"weights": (0, 1, 2, 3, 5, 10, 20), "length_penalties": (0.0, 0.5, 1.0, 1.5, 2.0)}
MRNN_RERANK = RESULTS / "captioner_rerank_val1000_views.json"


def repeated_trigram_pct(captions: list[str]) -> float:
    """Share of captions (x100) in which some three-word sequence occurs twice."""

    def repeats(words: list[str]) -> bool:
        grams = [tuple(words[i : i + 3]) for i in range(len(words) - 2)]
        return len(set(grams)) < len(grams)

    return 100.0 * sum(repeats(tokenize(c)) for c in captions) / max(len(captions), 1)


def scored(texts: list[str], ids: list[str], refs: dict, meteor: bool) -> dict:
    scores = score_captions(dict(zip(ids, texts, strict=True)), refs, meteor=meteor)
    extra = {**caption_diversity(texts), "repeat_trigram_pct": repeated_trigram_pct(texts)}
    return {k: (round(float(v), 2) if v is not None else None) for k, v in {**scores, **extra}.items()}


def curve(run: Path) -> list[dict]:
    """The run's epochs as logged: train loss (the likelihood part), seconds, the slice's greedy scores."""
    out = []
    for line in (run / "log.jsonl").read_text().splitlines():
        e = json.loads(line)
        d = e.get("dev") or {}
        out.append(
            {
                "epoch": e["epoch"],
                "train_loss": e.get("train_loss"),
                "train_s": e.get("train_s"),
                "time_s": round(e.get("time_s", 0.0), 1),
                "best": bool(e.get("best")),
                **{
                    k: d.get(k) for k in ("cider", "bleu4", "meteor", "rouge_l", "mean_words", "distinct_pct")
                },
                **{k: d.get(k) for k in ("vocab_used", "repeat_end_pct", "decode_s")},
            }
        )
    return out


def peak_rss_mb(log: Path | None) -> float | None:
    """``Maximum resident set size`` from a ``/usr/bin/time -v`` report at the end of the run's log."""
    if log is None or not log.is_file():
        return None
    found = re.findall(r"Maximum resident set size \(kbytes\): (\d+)", log.read_text(errors="replace"))
    return round(int(found[-1]) / 1024, 1) if found else None


def mrnn_reference() -> dict:
    """The m-RNN's numbers on the slice (recipe mrnn-lstm-effnet-val1000), from the files that hold them."""
    views = json.loads(MRNN_RERANK.read_text())
    beam7 = next(b for b in views["beams"] if b["beam"] == 7)
    return {
        "recipe": "mrnn-lstm-effnet-val1000",
        "greedy": {
            "cider": 48.6,
            "best_epoch": 15,
            "epochs": 20,
            "source": "docs/captioning.md, 'Re-selected on val1000' (the run's log is not kept)",
        },
        "beam7_alone": {k: round(beam7["beam_only"][k], 2) for k in ("cider", "bleu4")},
        "beam7_rerank": {
            **{k: round(beam7["best"][k], 2) for k in ("cider", "bleu4")},
            "weight": beam7["best"]["weight"],
            "length_penalty": beam7["best"]["length_penalty"],
        },
        "rerank_joint_model": views["joint_model"],
        "source": f"bench/results/{MRNN_RERANK.name} (date {views['date']}, commit {views['commit']})",
    }


def evaluate(run: Path, corpus, split: str, beam: int, joint: Path) -> tuple[dict, dict]:
    """``(scores, the captioner's meta)`` of a run's best epoch on the slice: greedy (with and without the
    repeat guard) and the beam reranked with ``joint``, tuned on the slice on the float16 weights."""
    refs = {i: caps for i, caps in corpus.split(split).captions_by_image().items() if caps}
    ids = list(refs)
    captioner = load_captioner(run / "captioner.safetensors")
    spec = captioner.image
    feats, _ = image_features(corpus, ids, spec["backbone"], spec["kind"], progress=False)
    results: dict = {}
    for name, kwargs in (("greedy", {}), ("greedy_no_repeat_3", {"no_repeat_ngram": 3})):
        t0 = time.perf_counter()
        texts = captioner.caption(feats, decoding="greedy", **kwargs)
        seconds = time.perf_counter() - t0
        results[name] = {**scored(texts, ids, refs, meteor=True), "decode_s": round(seconds, 1)}
        print(run, name, results[name])
    with tempfile.TemporaryDirectory() as tmp:  # the float16 weights, as ship_models tunes the m-RNN's
        tuned = Path(tmp) / "tuned.safetensors"
        save_captioner(captioner, tuned, half=True)
        info = tune_captioner_rerank(
            tuned, corpus, split, beam, default_score_fn, say=print, joint_model_path=joint,
            search_grid=GRID,
        )  # fmt: skip
    best = info["best"]
    results[f"beam{beam}_rerank"] = {
        "cider": round(best["cider"], 2),
        "bleu4": round(best["bleu4"], 2),
        "weight": best["weight"],
        "length_penalty": best["length_penalty"],
        # the beam's best candidate unreranked (weight 0, no length penalty), from the same decoding
        "beam_alone": {k: round(info["beam_only"][k], 2) for k in ("cider", "bleu4")},
        "seconds": info["seconds"],
        "grid": info["grid"],
    }
    return results, captioner.meta


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, required=True, help="the attention run directory")
    parser.add_argument("--joint", type=Path, required=True, help="a joint model trained without the slice")
    parser.add_argument(
        "--mrnn-run",
        type=Path,
        help="a run of mrnn-lstm-effnet-val1000 to score the same way, beside the numbers on file",
    )
    parser.add_argument("--beam", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--log", type=Path, help="the run's console log (its /usr/bin/time -v report)")
    parser.add_argument("--out", type=Path, default=RESULTS / "attention_captioner.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    corpus = apply_validation_slice(load_corpus(SHARED), load_validation_slice(SLICE))
    split = load_validation_slice(SLICE).name
    photos = len(corpus.split(split).image_ids())
    results, meta = evaluate(args.run, corpus, split, args.beam, args.joint)
    mrnn = mrnn_reference()
    if args.mrnn_run is not None:  # the yardstick's recipe rerun, decoded and reranked like the attention
        scores, mrnn_meta = evaluate(args.mrnn_run, corpus, split, args.beam, args.joint)
        mrnn["rerun"] = {
            "run": str(args.mrnn_run),
            "best_epoch": mrnn_meta.get("epoch"),
            "curve": curve(args.mrnn_run),
            **scores,
        }
    record = {
        "benchmark": "attention captioner (Xu et al. 2015 soft attention) on Flickr8K val1000",
        **run_meta(threads=args.threads),
        "split": f"{split} ({photos} photos of train, slice {SLICE}); dev not read",
        "recipe": meta.get("recipe", {}).get("name"),
        "run": str(args.run),
        "best_epoch": meta.get("epoch"),
        "rerank_joint_model": str(args.joint),
        "training": {"curve": curve(args.run), "peak_rss_mb": peak_rss_mb(args.log)},
        "attention": results,
        "mrnn": mrnn,
    }
    write_result(args.out, record, indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
