"""Ranking a corpus split by S_kl: the same R@K / median-rank JSON as the joint embedding's evaluation."""

from __future__ import annotations

from typing import Any, TypeGuard

import torch

from vsekit.alignment.model import ALIGNER_FORMAT, Aligner
from vsekit.alignment.trainer import evaluate_scores
from vsekit.data.corpus import Corpus
from vsekit.embedding.evaluate import captioned_images
from vsekit.errors import VsekitError
from vsekit.metrics.ranking import positives_from_ids, ranking_metrics

__all__ = ["evaluate_aligner", "evaluate_aligner_file", "is_aligner_file"]


def is_aligner_file(name_or_path: str | None) -> TypeGuard[str]:
    """Whether ``--model`` names an aligner: the shipped name ``aligner`` or a file whose safetensors
    header says ``format: vsekit.aligner`` (anything unreadable is left to the joint-model loader)."""
    if name_or_path is None:
        return False
    if name_or_path == "aligner":
        return True
    try:
        from safetensors import safe_open

        with safe_open(str(name_or_path), framework="pt") as f:
            return (f.metadata() or {}).get("format") == ALIGNER_FORMAT
    except Exception:  # not a file, not safetensors: not an aligner
        return False


def evaluate_aligner_file(
    name_or_path: str,
    corpus: Corpus,
    split: str,
    protocol: str = "flickr",
    device: str = "auto",
    **kwargs: Any,
) -> dict[str, Any]:
    """:func:`evaluate_aligner` of the aligner at ``name_or_path`` (``kwargs`` to the region extraction)."""
    return evaluate_aligner(Aligner.load(name_or_path, device=device), corpus, split, protocol, **kwargs)


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
    part, ids = captioned_images(corpus, split)
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
