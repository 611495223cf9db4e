"""Evaluate a trained joint embedding on a corpus split, and rank one query against a set.

The features are always those the model was trained on: the backbone and kind recorded in the model, and
for FNE the statistics saved with it (never refitted on the evaluation corpus, which would leak its
statistics into the codes and change what the thresholds mean).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from vsekit.data.corpus import Corpus
from vsekit.embedding.model import EnsembleEmbedding, JointEmbedding
from vsekit.errors import VsekitError
from vsekit.metrics.ranking import PROTOCOLS, evaluate_protocol
from vsekit.vision.features import check_model_features, image_features, readable_image_ids, require_fne
from vsekit.vision.fne import FullNetworkEmbedding
from vsekit.vision.spec import FeatureSpec

__all__ = [
    "captioned_images",
    "evaluate_model",
    "model_features",
]

logger = logging.getLogger(__name__)

_RESULT_KEYS = ("i2t", "t2i", "rsum", "protocol", "n_images", "n_captions")


def captioned_images(corpus: Corpus, split: str) -> tuple[Corpus, list[str]]:
    """``split`` of ``corpus`` and the ids of its images that have captions, in order; the others (their
    image-to-text rank is undefined) are left out with a warning naming how many."""
    part = corpus.split(split)
    by_image = part.captions_by_image()
    ids = [i for i, caps in by_image.items() if caps]
    if len(ids) < len(by_image):
        warnings.warn(
            f"split '{split}': {len(by_image) - len(ids)} image(s) without captions left out", stacklevel=3
        )
    return part, ids


def model_features(
    model: JointEmbedding | EnsembleEmbedding,
    fne: FullNetworkEmbedding | None,
    corpus: Corpus,
    image_ids: Sequence[str],
    feature_fn=None,
    **feature_kwargs: Any,
) -> np.ndarray:
    """Image features of ``image_ids`` as the model expects them (its backbone, kind and FNE).

    Goes through ``feature_fn`` (default :func:`~vsekit.vision.features.image_features`, the cached path).
    """
    image = model.config["image"]
    require_fne(image, fne)
    feature_fn = feature_fn or image_features
    feats, _ = feature_fn(
        corpus, list(image_ids), image["backbone"], image["kind"], fne=fne, **feature_kwargs
    )
    return check_model_features(image, feats)


def evaluate_model(
    model: JointEmbedding | EnsembleEmbedding,
    fne: FullNetworkEmbedding | None,
    corpus: Corpus,
    split: str,
    protocol: str = "flickr",
    batch_size: int = 256,
    feature_fn=None,
    skip_bad_images: bool = False,
    **feature_kwargs: Any,
) -> dict[str, Any]:
    """Recall@K / median rank of ``model`` on ``split`` of ``corpus`` under ``protocol``.

    Returns ``{"i2t": {r1, r5, r10, medr, meanr}, "t2i": {...}, "rsum", "protocol", "n_images",
    "n_captions", "backbone", "features"}`` with recalls in percent. Images of the split without any
    caption are left out (with a warning): their i2t rank is undefined. ``feature_fn`` replaces
    :func:`~vsekit.vision.features.image_features` (tests); ``feature_kwargs`` go to it (``cache_root``,
    ``device``, ``progress``, ...). ``skip_bad_images`` leaves unreadable photos (and their captions) out,
    each reported once, instead of stopping at the first; the result's ``n_images`` says how many stayed.
    """
    if protocol not in PROTOCOLS:
        raise VsekitError(f"unknown protocol {protocol!r}; known: {', '.join(PROTOCOLS)}")
    part, ids = captioned_images(corpus, split)
    if skip_bad_images and ids:
        ids = _readable(model, corpus, ids, feature_kwargs)
    if not ids:
        raise VsekitError(f"{corpus.root}: split '{split}' has no captioned images to evaluate")
    kept = set(ids)
    captions = [c for c in part.captions if c.image_id in kept]
    feats = model_features(model, fne, corpus, ids, feature_fn=feature_fn, **feature_kwargs)
    img = model.embed_images(feats)
    cap = model.embed_texts([c.text for c in captions], batch_size=batch_size)
    try:
        result = evaluate_protocol(img, cap, ids, [c.image_id for c in captions], protocol)
    except ValueError as exc:  # e.g. coco1k on a split that is not a multiple of 1,000 images
        raise VsekitError(f"split '{split}': {exc}") from exc
    out = {k: result[k] for k in _RESULT_KEYS}
    out["backbone"] = model.config["image"]["backbone"]
    out["features"] = model.config["image"]["kind"]
    return out


def _readable(
    model: JointEmbedding | EnsembleEmbedding, corpus: Corpus, ids: list[str], feature_kwargs: dict
) -> list[str]:
    """The ids of ``ids`` whose photos can be read (features cached), warning once for each other one."""
    options = {
        k: v for k, v in feature_kwargs.items() if k in ("cache_dir", "cache_root", "device", "progress")
    }
    kept, _ = readable_image_ids(corpus, FeatureSpec.from_config(model.config["image"]), ids, **options)
    return kept
