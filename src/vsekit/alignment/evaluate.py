"""Ranking a corpus split by S_kl: the same R@K / median-rank JSON as the joint embedding's evaluation."""

from __future__ import annotations

import warnings
from typing import Any

import torch

from vsekit.alignment.model import Aligner
from vsekit.alignment.trainer import evaluate_scores
from vsekit.data.corpus import Corpus
from vsekit.errors import VsekitError
from vsekit.metrics.ranking import positives_from_ids, ranking_metrics

__all__ = ["evaluate_aligner"]


def evaluate_aligner(
    aligner: Aligner,
    corpus: Corpus,
    split: str,
    protocol: str = "flickr",
    region_fn: Any = None,
    **region_kwargs: Any,
) -> dict[str, Any]:
    """R@1/5/10, median and mean rank of ranking every image of ``split`` against every caption by S_kl.

    Keys as :func:`vsekit.embedding.evaluate.evaluate_model`: ``i2t``, ``t2i``, ``rsum``, ``protocol``,
    ``n_images``, ``n_captions``, ``backbone``, ``features`` (here ``regions-grid`` or
    ``regions-proposals``). The region features are the model's own (cached). ``region_fn(corpus, ids,
    spec, **kw)`` replaces the extraction (tests). Only the all-images protocols (``flickr``, ``coco5k``).
    """
    if protocol not in ("flickr", "coco5k"):
        raise VsekitError(f"protocol {protocol!r} is not available for an aligner (use flickr or coco5k)")
    part = corpus.split(split)
    by_image = part.captions_by_image()
    ids = [i for i, caps in by_image.items() if caps]
    if len(ids) < len(by_image):
        warnings.warn(
            f"split '{split}': {len(by_image) - len(ids)} image(s) without captions left out", stacklevel=2
        )
    if not ids:
        raise VsekitError(f"{corpus.root}: split '{split}' has no captioned images to evaluate")
    kept = set(ids)
    captions = [c for c in part.captions if c.image_id in kept]
    spec = aligner.model.region_spec
    if region_fn is not None:
        regions = region_fn(corpus, ids, spec, **region_kwargs)
    else:
        regions = aligner.regions(corpus, image_ids=ids, **region_kwargs)
    feats = torch.from_numpy(regions.features)
    scores = evaluate_scores(aligner.model, feats, [c.text for c in captions])
    result = ranking_metrics(scores, positives_from_ids(ids, [c.image_id for c in captions]))
    result.update(protocol=protocol, n_images=len(ids), n_captions=len(captions))
    result["backbone"] = spec.backbone
    result["features"] = spec.layers
    return result
