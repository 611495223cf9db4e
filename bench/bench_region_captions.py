"""Benchmark: region snippets, the region captioner, its proxy evaluation, and the README pictures.

    python bench/bench_region_captions.py --aligner ALIGNER --run RUN [--recipe region-lstm]
        [--eval-images 300] [--skip-train] [--pictures]

1. snippets + training: :func:`train_region_captioner` (the MRF snippets of every train and dev caption
   are written to RUN/snippets-*.jsonl, resumable; then the m-RNN on them, resumable with the engine).
2. proxy evaluation on the first ``--eval-images`` dev images: every (image, region) that received a dev
   snippet is an item; the region captioner (beam 3) and the baseline, the shipped full-frame captioner
   fed the crop of the region's box (beam 3, no reranking), are scored against the item's snippets.
3. ``--pictures``: a `regions` picture of one dev photo and three "snippet -> best regions" strips over
   the dev images (Fig. 7 and 9), written to docs/.

Writes the key ``region_captions`` of bench/results/alignment.json (other keys are left as they are).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch
from PIL import Image

from _common import run_meta, write_result
from vsekit.alignment import Aligner
from vsekit.alignment.describe import (
    describe_regions,
    draw_regions,
    draw_snippet_gallery,
    regions_for_snippet,
)
from vsekit.alignment.region_captions import (
    RegionCaptioner,
    load_region_caption_recipe,
    train_region_captioner,
)
from vsekit.alignment.region_eval import (
    crop_predictions,
    region_predictions,
    score_region_captions,
    snippet_references,
)
from vsekit.alignment.snippets import read_snippets
from vsekit.captioning.generator import CaptionGenerator, DecodeSettings
from vsekit.data import load_corpus

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("VSEKIT_SHARED_DATA", REPO.parent / "shared" / "data" / "flickr8k"))
RESULTS = REPO / "bench" / "results" / "alignment.json"
QUERIES = ("dog in the water", "a red shirt", "snow")


def train(args: argparse.Namespace, aligner: Aligner, corpus) -> dict:
    config = load_region_caption_recipe(args.recipe)
    t0 = time.perf_counter()
    summary = train_region_captioner(aligner, corpus, config, args.run, resume=True, device="cpu", log=print)
    minutes = (time.perf_counter() - t0) / 60
    train_snips = read_snippets(Path(args.run) / "snippets-train.jsonl")
    return {
        "recipe": config.name,
        "beta": config.beta,
        "min_snippet_words": config.min_snippet_words,
        "context": config.context,
        "n_train_snippets": summary["n_train_snippets"],
        "n_train_items": len({(s.image_id, s.region) for s in train_snips}),
        "mean_snippet_words": round(sum(s.end - s.start for s in train_snips) / len(train_snips), 2),
        "best_epoch": summary["best_epoch"],
        "epochs_completed": summary["epochs_completed"],
        "dev_greedy": summary["best_dev"],
        "epoch_minutes": round(sum(e.get("time_s", 0) for e in summary["history"]) / 60, 1),
        "this_call_minutes": round(minutes, 1),
        "file_mb": round(Path(summary["model_path"]).stat().st_size / 2**20, 2),
    }


def evaluate(args: argparse.Namespace, aligner: Aligner, corpus) -> dict:
    dev = read_snippets(Path(args.run) / "snippets-dev.jsonl")
    ids = [i for i, caps in corpus.split("dev").captions_by_image().items() if caps][: args.eval_images]
    refs = snippet_references(dev, ids)
    items = list(refs)
    regions = aligner.regions(corpus, image_ids=ids, progress=False)
    reader = RegionCaptioner.load(Path(args.run) / "captioner.safetensors")
    t0 = time.perf_counter()
    ours = region_predictions(reader, regions, ids, items)
    ours_s = time.perf_counter() - t0
    generator = CaptionGenerator("mrnn", "captioner", DecodeSettings(beam_size=3), rerank=False, device="cpu")
    t0 = time.perf_counter()
    crops = crop_predictions(generator, corpus, regions, ids, items)
    crops_s = time.perf_counter() - t0
    examples = [
        {
            "item": f"{i}#{r}",
            "refs": refs[(i, r)][:3],
            "region_captioner": ours[(i, r)],
            "crop_baseline": crops[(i, r)],
        }
        for i, r in items[:8]
    ]
    return {
        "proxy": "references = the aligner's MRF snippets of the dev captions on each (image, region); "
        f"first {len(ids)} dev images, {len(items)} items; beam 3 for both",
        "region_captioner": score_region_captions(ours, refs) | {"seconds": round(ours_s, 1)},
        "crop_baseline": score_region_captions(crops, refs) | {"seconds": round(crops_s, 1)},
        "examples": examples,
    }


def pictures(args: argparse.Namespace, aligner: Aligner, corpus) -> dict:
    docs = REPO / "docs"
    reader = RegionCaptioner.load(Path(args.run) / "captioner.safetensors")
    ids = [i for i, caps in corpus.split("dev").captions_by_image().items() if caps]
    name = args.photo or ids[0]
    small = Image.open(corpus.images[name]).convert("RGB")  # the shared photos are 224 x 224: show at 2x
    photo = small.resize((small.width * 2, small.height * 2), Image.Resampling.BICUBIC)
    result = describe_regions(aligner, reader, photo, top=4)
    draw_regions(photo, result, docs / "regions-example.jpg")
    regions = aligner.regions(corpus, image_ids=ids, progress=False)
    galleries = {}
    for k, query in enumerate(QUERIES):
        hits = regions_for_snippet(aligner, query, regions.features, regions.boxes, ids, top=5)
        out = docs / f"snippet-query-{k + 1}.jpg"
        draw_snippet_gallery(query, hits, corpus.images, out)
        galleries[query] = {"file": str(out.relative_to(REPO)), "hits": hits}
    return {
        "regions_example": {**result, "image": name, "shown_at": "2x"},
        "snippet_queries": galleries,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--aligner", default="aligner")
    parser.add_argument("--run", required=True)
    parser.add_argument("--recipe", default="region-lstm")
    parser.add_argument("--eval-images", type=int, default=300)
    parser.add_argument("--skip-train", action="store_true")
    parser.add_argument("--skip-eval", action="store_true")
    parser.add_argument("--pictures", action="store_true")
    parser.add_argument("--photo", default=None, help="dev image id for the regions picture")
    args = parser.parse_args()
    torch.set_num_threads(1)
    corpus = load_corpus(SHARED)
    aligner = Aligner.load(args.aligner, device="cpu")
    run: dict = {"run": str(args.run)}
    if not args.skip_train:
        run["training"] = train(args, aligner, corpus)
    if not args.skip_eval:
        run["dev_proxy"] = evaluate(args, aligner, corpus)
        print(json.dumps({k: run["dev_proxy"][k] for k in ("region_captioner", "crop_baseline")}, indent=1))
    pics = pictures(args, aligner, corpus) if args.pictures else None
    # merge: only this key, and in it only this recipe's run (two runs may finish at about the same time)
    results = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}
    entry = results.setdefault("region_captions", {})
    entry.update(
        **run_meta(threads=1),  # torch threads
        backbone="mobilenet_v2",
        aligner=str(args.aligner),
        aligner_recipe=aligner.extra.get("recipe"),
        regions=aligner.model.region_spec.layers,
    )
    entry.setdefault("runs", {}).setdefault(args.recipe, {}).update(run)
    if pics is not None:
        entry["pictures"] = pics
    write_result(RESULTS, results)


if __name__ == "__main__":
    main()
