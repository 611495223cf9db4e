"""The joint-embedding training recipe: :class:`TrainConfig` (every field a run depends on, checked
strictly) and the shipped recipes by name.

A recipe is JSON of these fields (``src/vsekit/recipes/*.json``); an unknown or out-of-range field is
refused with one line naming the file and the field, before any data is read.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from vsekit.embedding.model import GRID_DROPOUTS, HEADS, IMAGE_POOLS
from vsekit.errors import VsekitError
from vsekit.resources import RECIPES_DIR
from vsekit.text import EMBED_DIM_KWARG, TEXT_ENCODERS
from vsekit.training import Recipe, field_error, list_recipe_names, load_recipe_file
from vsekit.vision.features import FEATURE_KINDS
from vsekit.vision.preprocess import VIEWS

__all__ = ["LOSSES", "RECIPES_DIR", "TRAIN_VIEW_SETS", "TrainConfig", "list_recipes", "load_recipe"]

#: The named sets of views a training photo is seen through (``TrainConfig.train_views``): one view per
#: photo per epoch, drawn at random; evaluation always reads the centre crop. See
#: :data:`vsekit.vision.preprocess.VIEWS` for what each view is.
TRAIN_VIEW_SETS: dict[str, tuple[str, ...]] = {
    "centre": ("centre",),
    "flip": ("centre", "centre-flip"),
    "six-crop": VIEWS[:6],  # the centre crop, its mirror, the four corners
    "ten-crop": VIEWS,  # and the corners' mirrors
}

LOSSES = ("sum", "max_violation", "infonce")


@dataclass
class TrainConfig(Recipe):
    """Everything that defines a training run; recipes in ``src/vsekit/recipes/*.json`` are these as JSON.

    Loss schedule: ``loss="sum"`` is the sum of hinges over all in-batch negatives (Kiros Eq. 6) for
    every epoch. ``loss="max_violation"`` is the hardest negative (VSE++); with
    ``max_violation_after_epoch=N`` the first N epochs are a warm-up with the sum of hinges and epochs
    N+1.. use the hardest negative (None: hardest negative from the first epoch, no warm-up). The loss of
    a batch is the sum over its pairs, as in the papers (see ``ContrastiveLoss``). ``loss="infonce"`` is
    the symmetric cross-entropy over the batch's similarity matrix with a learned temperature (started at
    ``temperature``; see ``InfoNCELoss``), the mean over the batch's pairs; ``margin`` is unused then.

    ``train_views``: a name in :data:`TRAIN_VIEW_SETS`; each training photo is seen through one view of
    that set per epoch, drawn from the run's seeded batch-order generator (so resume stays exact), its
    features cached per view. ``"centre"`` (the default) is the evaluation crop only, as before.

    ``image_pool``: how the cells of ``image_features="grid"`` (the last conv map, 7 x 7 at 224 pixels)
    become one image vector: ``"gpo"`` projects each cell and pools them with VSE-infinity's learned
    Generalized Pooling Operator (:mod:`vsekit.embedding.gpo`); null for the pooled kinds.
    ``grid_dropout``: how ``image_dropout`` masks a grid row: ``"cell"`` (every value on its own) or
    ``"channel"`` (one mask per image over the channels, shared by its cells: with uniform GPO weights
    the one-vector model's dropout exactly).

    ``image_features="pre-head"``: the cells of the last block's map (the input of the CNN's 1 x 1 head
    conv); the model keeps a copy of the head, started from the CNN's ImageNet weights, and trains it with
    the rest (:mod:`vsekit.embedding.cnn_head`), so the pooled vector W_I reads is learned one layer deep.

    ``ensemble_seeds``: train one model per seed (``seed`` is then unused) and ship their ensemble (see
    the module docstring); None trains the single model of ``seed``.

    ``patience`` counts dev evaluations (every ``eval_every`` epochs) without a better rsum; None never
    stops early (the best epoch is still the one kept). ``lr_decay_epochs`` is StepLR's step size
    (None: constant learning rate). ``text_encoder_kwargs`` go to the encoder constructor; its output
    size is ``embed_dim`` (K), which must not be repeated there.
    """

    name: str = "custom"
    description: str = ""
    text_encoder: str = "gru"
    text_encoder_kwargs: dict = field(default_factory=lambda: {"word_dim": 300})
    embed_dim: int = 1024
    backbone: str = "mobilenet_v2"
    image_features: str = "one-layer"
    image_pool: str | None = None
    grid_dropout: str = "cell"
    image_dropout: float = 0.0
    image_rank: int | None = None
    head: str = "linear"
    train_split: str = "train"
    dev_split: str = "dev"
    loss: str = "sum"
    margin: float = 0.2
    temperature: float = 0.07
    max_violation_after_epoch: int | None = None
    batch_size: int = 128
    epochs: int = 25
    lr: float = 2e-4
    lr_decay_epochs: int | None = None
    lr_decay_gamma: float = 0.1
    grad_clip: float | None = 2.0
    weight_decay: float = 0.0
    vocab_min_count: int = 1
    vocab_max_size: int | None = 1000
    patience: int | None = 5
    seed: int = 0
    ensemble_seeds: list[int] | None = None
    eval_every: int = 1
    num_threads: int | None = None
    # the selection protocol: a validation slice (recipes/splits/); train_split / dev_split must then name
    # "<source>-minus-<slice>" and the slice (vsekit.data.splits.check_selection_splits)
    validation_slice: str | None = None
    train_views: str = "centre"

    def validate(self, source: str = "config") -> TrainConfig:
        """Raise VsekitError naming ``source`` and the field for any out-of-range value; returns self."""

        def bad(name: str, why: str) -> VsekitError:
            return field_error(source, name, getattr(self, name), why)

        if self.text_encoder not in TEXT_ENCODERS:
            raise bad("text_encoder", f"must be one of {', '.join(TEXT_ENCODERS)}")
        if self.image_features not in FEATURE_KINDS:
            raise bad("image_features", f"must be one of {', '.join(FEATURE_KINDS)}")
        if self.loss not in LOSSES:
            raise bad("loss", f"must be one of {', '.join(LOSSES)}")
        if not 0.01 <= self.temperature <= 1.0:
            raise bad("temperature", "must be in [0.01, 1] (InfoNCE's clamp range)")
        if self.image_features == "grid" and self.image_pool not in IMAGE_POOLS:
            raise bad("image_pool", f"must be one of {', '.join(IMAGE_POOLS)} for grid features")
        if self.image_features != "grid" and self.image_pool is not None:
            raise bad("image_pool", "pools the cells of grid features; set it to null for pooled ones")
        if self.grid_dropout not in GRID_DROPOUTS:
            raise bad("grid_dropout", f"must be one of {', '.join(GRID_DROPOUTS)}")
        if self.image_features != "grid" and self.grid_dropout != "cell":
            raise bad("grid_dropout", "masks the cells of grid features; leave it 'cell' for pooled ones")
        if self.train_views not in TRAIN_VIEW_SETS:
            raise bad("train_views", f"must be one of {', '.join(TRAIN_VIEW_SETS)}")
        if self.train_views != "centre" and self.image_features not in ("one-layer", "pre-head"):
            raise bad("train_views", "views of a photo exist for one-layer and pre-head image features only")
        if self.max_violation_after_epoch is not None:
            if self.loss != "max_violation":
                raise bad(
                    "max_violation_after_epoch", "is a warm-up for loss='max_violation'; set it to null"
                )
            if self.max_violation_after_epoch < 0:
                raise bad("max_violation_after_epoch", "must be >= 0 or null")
        if self.head not in HEADS:
            raise bad("head", f"must be one of {', '.join(HEADS)}")
        embed_key = EMBED_DIM_KWARG.get(self.text_encoder)
        if embed_key in self.text_encoder_kwargs and self.head != "twin":
            raise bad(
                "text_encoder_kwargs",
                f"must not set {embed_key!r}: the output size is embed_dim (only head 'twin' maps it to K)",
            )
        for name in ("embed_dim", "batch_size", "epochs", "eval_every", "vocab_min_count"):
            if getattr(self, name) < 1:
                raise bad(name, "must be >= 1")
        if not 0.0 <= self.image_dropout < 1.0:
            raise bad("image_dropout", "must be in [0, 1)")
        for name in ("lr_decay_epochs", "patience", "num_threads", "vocab_max_size", "image_rank"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise bad(name, "must be >= 1 or null")
        if not self.lr > 0:
            raise bad("lr", "must be > 0")
        if self.margin < 0 or self.weight_decay < 0 or not 0 < self.lr_decay_gamma <= 1:
            name = (
                "margin" if self.margin < 0 else "weight_decay" if self.weight_decay < 0 else "lr_decay_gamma"
            )
            raise bad(name, "is out of range")
        if self.grad_clip is not None and not self.grad_clip > 0:
            raise bad("grad_clip", "must be > 0 or null")
        if self.ensemble_seeds is not None and (
            not self.ensemble_seeds or len(set(self.ensemble_seeds)) != len(self.ensemble_seeds)
        ):
            raise bad("ensemble_seeds", "must be a non-empty list of distinct seeds or null")
        return self

    def max_violation_at(self, epoch: int) -> bool:
        """Whether 1-based ``epoch`` uses the hardest-negative loss."""
        return self.loss == "max_violation" and epoch > (self.max_violation_after_epoch or 0)


def list_recipes() -> list[str]:
    """Names of the recipes shipped in ``src/vsekit/recipes``."""
    return list_recipe_names(RECIPES_DIR)


def load_recipe(name_or_path: str | os.PathLike[str]) -> TrainConfig:
    """A shipped recipe by name (``"kiros-gru"``) or any JSON file of TrainConfig fields by path."""
    return load_recipe_file(TrainConfig, name_or_path, RECIPES_DIR, "recipe")
