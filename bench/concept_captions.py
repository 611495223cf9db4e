"""Captions that say what is there (issue 33 item 3): the shipped captioner with and without its concept
guard.

    python bench/concept_captions.py                        # everyday + val1000, the shipped guard settings
    python bench/concept_captions.py --grid 3,1,0.5 6,1,0.5 # also these (weight, floor, name_at) settings
    python bench/concept_captions.py --dev                  # and Flickr8K dev, read once for the report

Writes bench/results/concept_captions.json. Three sets:

* **everyday** (bench/everyday/labels.json, 152 photos that are not Flickr8K, a validation set): CHAIR_s and
  CHAIR_i (Rohrbach et al. 2018, :mod:`vsekit.metrics.chair`), the share of captions naming the photo's main
  subject, how many person and dog words the captions hold, and examples;
* **flickr8k-val1000** (validation slice): BLEU-4 / METEOR / CIDEr-D. The shipped captioner trained on these
  photos, so this only checks that the guard leaves Flickr8K-style photos alone; the guard's table was built
  without them (bench/ship_caption_guard.py);
* **dev** (only with ``--dev``): the same scores, for the report of the final setting. Never tuned on.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch

from _common import run_meta, write_result
from vsekit.api import load_captioner
from vsekit.captioning.evaluate import caption_split
from vsekit.captioning.guard import GuardSettings
from vsekit.data import load_corpus
from vsekit.data.splits import load_validation_slice
from vsekit.metrics.captions import score_captions
from vsekit.metrics.chair import ObjectVocabulary, chair, subject_named
from vsekit.vision import features as vision_features

HERE = Path(__file__).resolve().parent
LABELS = HERE / "everyday" / "labels.json"
PHOTOS = HERE.parent.parent / "shared" / "data" / "everyday" / "photos"
FLICKR = HERE.parent.parent / "shared" / "data" / "flickr8k"
EXAMPLES = (
    *("animals/ocv-001.jpg", "things/gc-025.jpg", "animals/gc-003.jpg", "buildings/gc-064.jpg"),
    *("things/gc-027.jpg", "vehicles/ocv-045.jpg", "people/ocv-120.jpg", "food/ocv-023.jpg"),
)


def everyday_scores(captions: dict[str, str], labels: dict[str, dict]) -> dict[str, Any]:
    names = sorted(labels)
    texts = [captions[n] for n in names]
    scores = chair(texts, [labels[n]["objects"] for n in names], [labels[n]["maybe"] for n in names])
    vocab = ObjectVocabulary()
    mentions = [m for t in texts for m in vocab.mentions(t)]
    return {
        **scores,
        "subject_named": subject_named(texts, [labels[n]["main"] for n in names]),
        "person_words": mentions.count("person"),
        "dog_words": mentions.count("dog"),
        "examples": {n: captions[n] for n in EXAMPLES if n in captions},
    }


def flickr_scores(generator, corpus, ids: list[str], references: dict) -> dict[str, Any]:
    t0 = time.perf_counter()
    captions = generator.describe_corpus(corpus, ids, 1, progress=False)
    seconds = time.perf_counter() - t0
    best = {i: c[0] for i, c in zip(ids, captions, strict=True)}
    scores = score_captions(best, references)
    return {k: scores.get(k) for k in ("bleu4", "meteor", "cider")} | {"captions_per_s": len(ids) / seconds}


def run_setting(generator, guard, settings, everyday_feats, labels, corpus, val_ids, val_refs) -> dict:
    """Scores of one setting (``settings`` None: the guard off)."""
    generator.guard = None if settings is None else guard
    if settings is not None:
        guard.settings = settings
    names = sorted(labels)
    captions = generator.describe_features(everyday_feats, 1, everyday_feats)
    row = {"guard": None if settings is None else settings.to_dict()}
    row["everyday"] = everyday_scores({n: c[0] for n, c in zip(names, captions, strict=True)}, labels)
    if val_ids:
        row["val1000"] = flickr_scores(generator, corpus, val_ids, val_refs)
    print(json.dumps({k: v for k, v in row.items()}, default=str)[:400], flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", nargs="*", default=[], help="WEIGHT,FLOOR,NAME_AT settings (everyday)")
    parser.add_argument("--dev", action="store_true", help="also score Flickr8K dev (once, for the report)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    labels = json.loads(LABELS.read_text())
    generator = load_captioner(device="cpu")
    guard, shipped = generator.guard, generator.guard.settings
    feats = vision_features.features_for_model(
        generator.image, [PHOTOS / n for n in sorted(labels)], None, cache=False, device="cpu", progress=False
    )
    corpus = load_corpus(FLICKR)
    val_ids = list(load_validation_slice("flickr8k-val1000").image_ids)
    refs = corpus.split("train").captions_by_image()
    val_refs = {i: refs[i] for i in val_ids}
    rows = [
        run_setting(generator, guard, s, feats, labels, corpus, val_ids, val_refs) for s in (None, shipped)
    ]
    grid = [GuardSettings(*map(float, g.split(","))) for g in args.grid]
    rows += [run_setting(generator, guard, s, feats, labels, corpus, [], {}) for s in grid]
    result: dict[str, Any] = {
        "meta": run_meta(threads=1, backbone=generator.image["backbone"], captioner="captioner (shipped)"),
        "before": rows[0],
        "after": rows[1],
        "grid": rows[2:],
    }
    if args.dev:
        result["dev"] = {}
        for label, settings in (("before", None), ("after", shipped)):
            generator.guard, guard.settings = (None if settings is None else guard), shipped
            split = caption_split(generator, corpus, "dev", progress=False)
            result["dev"][label] = {k: split.result.get(k) for k in ("bleu4", "meteor", "cider", "n_images")}
            print(label, result["dev"][label], flush=True)
    write_result("concept_captions.json", result, default=float)


if __name__ == "__main__":
    main()
