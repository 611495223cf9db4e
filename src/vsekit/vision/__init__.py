"""The image side: CNN backbones, preprocessing, the one feature path (FeatureSpec -> features, cached), FNE.

Call :func:`compute_features` (a :class:`FeatureSpec` and images) or :func:`features_for_model` (a saved
model's ``config["image"]`` and images); both take an image collection, a corpus, an id -> path mapping,
or a list of files or PIL images.

The names below are imported on first use: reading a photo (:mod:`vsekit.vision.preprocess`) or the class
table (:mod:`vsekit.vision.classes`) does not import the backbones and torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vsekit.vision.backbones import BACKBONES, BackboneSpec, load_backbone, prepare_for_inference
    from vsekit.vision.features import (
        FEATURE_KINDS,
        FeatureConfig,
        FeatureStore,
        cache_dir_for,
        cache_lock,
        check_model_features,
        compute_features,
        default_cache_root,
        extract_features,
        extract_fne,
        feature_config,
        features_for_model,
        image_features,
        require_fne,
    )
    from vsekit.vision.fne import DEFAULT_THRESHOLDS, FullNetworkEmbedding
    from vsekit.vision.preprocess import Preprocessing, load_image
    from vsekit.vision.spec import FeatureSpec

__all__ = [
    "BACKBONES",
    "DEFAULT_THRESHOLDS",
    "FEATURE_KINDS",
    "BackboneSpec",
    "FeatureConfig",
    "FeatureSpec",
    "FeatureStore",
    "FullNetworkEmbedding",
    "Preprocessing",
    "cache_dir_for",
    "cache_lock",
    "check_model_features",
    "compute_features",
    "default_cache_root",
    "extract_features",
    "extract_fne",
    "feature_config",
    "features_for_model",
    "image_features",
    "load_backbone",
    "load_image",
    "prepare_for_inference",
    "require_fne",
]

_HOMES = {
    "BACKBONES": "backbones",
    "BackboneSpec": "backbones",
    "load_backbone": "backbones",
    "prepare_for_inference": "backbones",
    "DEFAULT_THRESHOLDS": "fne",
    "FullNetworkEmbedding": "fne",
    "Preprocessing": "preprocess",
    "load_image": "preprocess",
    "FeatureSpec": "spec",
} | dict.fromkeys(
    (
        "FEATURE_KINDS",
        "FeatureConfig",
        "FeatureStore",
        "cache_dir_for",
        "cache_lock",
        "check_model_features",
        "compute_features",
        "default_cache_root",
        "extract_features",
        "extract_fne",
        "feature_config",
        "features_for_model",
        "image_features",
        "require_fne",
    ),
    "features",
)


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(f"vsekit.vision.{_HOMES[name]}"), name)
    raise AttributeError(f"module 'vsekit.vision' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES))
