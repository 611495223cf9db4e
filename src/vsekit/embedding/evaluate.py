"""Evaluate a trained joint embedding on a corpus split, and rank one query against a set.

The features are always those the model was trained on: the backbone and kind recorded in the model, and
for FNE the statistics saved with it (never refitted on the evaluation corpus, which would leak its
statistics into the codes and change what the thresholds mean).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from vsekit.data.corpus import Corpus
from vsekit.embedding.model import JointEmbedding
from vsekit.errors import VsekitError
from vsekit.metrics.ranking import PROTOCOLS, evaluate_protocol
from vsekit.vision.features import check_model_features, features_for_model, image_features, require_fne
from vsekit.vision.fne import FullNetworkEmbedding

__all__ = [
    "evaluate_model",
    "features_for_files",
    "model_features",
    "rank_captions",
    "rank_images",
]

_RESULT_KEYS = ("i2t", "t2i", "rsum", "protocol", "n_images", "n_captions")


def _check_fne(model: JointEmbedding, fne: FullNetworkEmbedding | None) -> None:
    if model.config["image"]["kind"] == "fne" and fne is None:
        raise VsekitError("this model reads Full-Network Embedding features but no FNE statistics were given")


def model_features(
    model: JointEmbedding,
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
    model: JointEmbedding,
    fne: FullNetworkEmbedding | None,
    corpus: Corpus,
    split: str,
    protocol: str = "flickr",
    batch_size: int = 256,
    feature_fn=None,
    **feature_kwargs: Any,
) -> dict[str, Any]:
    """Recall@K / median rank of ``model`` on ``split`` of ``corpus`` under ``protocol``.

    Returns ``{"i2t": {r1, r5, r10, medr, meanr}, "t2i": {...}, "rsum", "protocol", "n_images",
    "n_captions", "backbone", "features"}`` with recalls in percent. Images of the split without any
    caption are left out (with a warning): their i2t rank is undefined. ``feature_fn`` replaces
    :func:`~vsekit.vision.features.image_features` (tests); ``feature_kwargs`` go to it (``cache_root``,
    ``device``, ``progress``, ...).
    """
    if protocol not in PROTOCOLS:
        raise VsekitError(f"unknown protocol {protocol!r}; known: {', '.join(PROTOCOLS)}")
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


# -- one-off ranking ---------------------------------------------------------------------------------


def features_for_files(
    paths: Sequence[str | os.PathLike[str]],
    model: JointEmbedding,
    fne: FullNetworkEmbedding | None,
    device: str | torch.device = "auto",
    weights: str | os.PathLike[str] | None = None,
) -> np.ndarray:
    """Features of arbitrary image files (no corpus, no cache) exactly as the model was trained on them.

    The same CNN step as the feature cache (:func:`vsekit.vision.features_for_model`), so a photo gets
    the features it would have had inside a corpus. FNE models apply their saved statistics.
    """
    return features_for_model(
        model.config["image"], list(paths), fne, weights=weights, cache=False, device=device, progress=False
    )


def rank_captions(
    model: JointEmbedding,
    image_features_row: np.ndarray | torch.Tensor,
    captions: Sequence[str],
    top: int = 5,
) -> list[tuple[str, float]]:
    """Image annotation for one image: the ``top`` captions by cosine, as ``(caption, score)``."""
    if not captions:
        raise VsekitError("no captions to rank")
    feats = torch.as_tensor(np.asarray(image_features_row)).reshape(1, -1)
    img = model.embed_images(feats)[0]
    scores = model.embed_texts(list(captions)) @ img
    order = torch.argsort(scores, descending=True, stable=True)[:top].tolist()
    return [(captions[j], float(scores[j])) for j in order]


def rank_images(
    model: JointEmbedding,
    sentence: str,
    features: np.ndarray | torch.Tensor,
    image_ids: Sequence[str],
    top: int = 5,
) -> list[tuple[str, float]]:
    """Image search for one sentence: the ``top`` images by cosine, as ``(image_id, score)``."""
    if len(image_ids) == 0:
        raise VsekitError("no images to rank")
    query = model.embed_texts([sentence])[0]
    scores = model.embed_images(features) @ query
    order = torch.argsort(scores, descending=True, stable=True)[:top].tolist()
    return [(image_ids[j], float(scores[j])) for j in order]
