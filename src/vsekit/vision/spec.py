"""Which image features: one frozen description shared by extraction, the cache, models and captioners.

A :class:`FeatureSpec` names the backbone, the kind of features (``one-layer`` pooled activations,
``fne`` Full-Network Embedding codes, or ``grid``: the cells of the last conv map, unpooled), the
weights (None: the installed weights package; else a file) and the preprocessing. A model records the
first two in its ``config["image"]``;
:meth:`FeatureSpec.from_config` turns that back into a spec. The fitted FNE statistics are not part of the
spec: they are state that travels with a model (see :class:`~vsekit.vision.fne.FullNetworkEmbedding`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vsekit.errors import VsekitError
from vsekit.vision.backbones import BACKBONES
from vsekit.vision.preprocess import Preprocessing

__all__ = ["FEATURE_KINDS", "GRID_STRIDE", "FeatureSpec"]

FEATURE_KINDS = ("one-layer", "fne", "grid", "pre-head")

#: The total stride of the backbones' last conv map (MobileNetV2 and EfficientNet-Lite): a ``crop``-sided
#: input gives a ``ceil(crop / 32)``-sided map (7 x 7 at 224 pixels).
GRID_STRIDE = 32


@dataclass(frozen=True)
class FeatureSpec:
    """Backbone, feature kind, weights identity and preprocessing: everything that picks the features.

    Attributes:
        backbone: a name in :data:`~vsekit.vision.backbones.BACKBONES`.
        kind: ``"one-layer"`` (float32 pooled penultimate activations), ``"fne"`` (int8 {-1, 0, 1}
            Full-Network Embedding codes, computed from all layers' activations) or ``"grid"`` (the
            ``h x w`` cells of the last conv map of the same crop, each a ``C``-vector, one row of
            ``h*w*C`` floats per image, cell-major: their mean is the ``one-layer`` vector) or
            ``"pre-head"`` (the same cells one layer earlier: the last block's map, the input of the CNN's
            1 x 1 head conv, ``h*w*320`` floats, which a joint model with a trainable head reads).
        weights: None for the backbone's installed weights package, else the path of a weights file.
        preprocessing: None for the backbone's own (what its weights were trained with).
    """

    backbone: str = "mobilenet_v2"
    kind: str = "one-layer"
    weights: str | os.PathLike[str] | None = None  # a path is stored as its expanded str
    preprocessing: Preprocessing | None = None

    def __post_init__(self) -> None:
        if self.backbone not in BACKBONES:
            raise VsekitError(f"unknown backbone {self.backbone!r}; known: {', '.join(sorted(BACKBONES))}")
        if self.kind not in FEATURE_KINDS:
            raise VsekitError(f"unknown feature kind {self.kind!r}; known: {', '.join(FEATURE_KINDS)}")
        if self.weights is not None:
            object.__setattr__(self, "weights", os.fspath(Path(self.weights).expanduser()))
        if self.preprocessing is None:
            object.__setattr__(self, "preprocessing", BACKBONES[self.backbone].preprocessing)

    @classmethod
    def from_config(
        cls, image: Mapping[str, Any], weights: str | os.PathLike[str] | None = None
    ) -> FeatureSpec:
        """The spec of a saved model's or captioner's ``config["image"]`` (``{"backbone", "kind", ...}``)."""
        try:
            backbone, kind = image["backbone"], image["kind"]
        except (KeyError, TypeError) as exc:
            raise VsekitError(f"image feature config {image!r} lacks 'backbone' or 'kind'") from exc
        return cls(backbone=backbone, kind=kind, weights=weights)

    @property
    def layers(self) -> str:
        """The layer set the CNN taps: ``"one-layer"``, ``"full"`` (every layer) for FNE, ``"grid"`` or
        ``"pre-head"``."""
        return {"one-layer": "one-layer", "fne": "full", "grid": "grid", "pre-head": "pre-head"}[self.kind]

    @property
    def cell_rows(self) -> bool:
        """Whether a feature row is the cells of a map (``grid``, ``pre-head``), not one pooled vector."""
        return self.kind in ("grid", "pre-head")

    @property
    def grid_cells(self) -> int:
        """The number of cells of the last conv map (and of the last block's) on this spec's crop (49 at
        224 pixels)."""
        assert self.preprocessing is not None  # __post_init__ fills it in
        side = -(-self.preprocessing.crop // GRID_STRIDE)
        return side * side

    @property
    def needs_fne(self) -> bool:
        return self.kind == "fne"

    def describe(self) -> str:
        weights = "" if self.weights is None else f", weights {self.weights}"
        return f"{self.backbone} {self.kind}{weights}"
