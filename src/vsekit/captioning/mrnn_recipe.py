"""The captioner's training recipe: :class:`CaptionTrainConfig` (every field a run depends on, checked
strictly) and the shipped captioning recipes by name. ``decoder`` picks the network: the m-RNN over one
pooled vector per photo, or the soft-attention LSTM over the grid of the last conv map.

A recipe is JSON of these fields (``src/vsekit/recipes/captioning/*.json``); an unknown or out-of-range
field is refused with one line naming the file and the field, before any data is read.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from vsekit.captioning.mrnn import CELLS
from vsekit.captioning.scst import BASELINES
from vsekit.resources import CAPTION_RECIPES_DIR
from vsekit.training import Recipe, field_error, list_recipe_names, load_recipe_file
from vsekit.vision.features import FEATURE_KINDS

__all__ = [
    "CAPTION_RECIPES_DIR",
    "DECODERS",
    "OBJECTIVES",
    "CaptionTrainConfig",
    "list_caption_recipes",
    "load_caption_recipe",
]

OBJECTIVES = ("xent", "scst")
#: The caption networks: "mrnn" (vsekit.captioning.mrnn) and "attention" (vsekit.captioning.attention)
DECODERS = ("mrnn", "attention")


@dataclass
class CaptionTrainConfig(Recipe):
    """A captioner training run; recipes in ``src/vsekit/recipes/captioning/*.json`` are these as JSON.

    ``null`` switches an option off: ``image_rank`` (an unfactored W_hi), ``lr_decay_epochs`` (a
    constant learning rate), ``rerank_beam`` (no reranking; > 0: after training, tune the reranking of
    this many beam candidates on dev), ``patience`` (no early stopping), ``num_threads`` (torch's default).
    """

    RESUMABLE: ClassVar[frozenset[str]] = Recipe.RESUMABLE | {"rerank_beam", "eval_every"}
    # Recipe files and checkpoints written before null was the one off value used 0 for these.
    ZERO_MEANS_OFF: ClassVar[frozenset[str]] = frozenset(
        {"lr_decay_epochs", "image_rank", "num_threads", "rerank_beam"}
    )

    name: str = "custom"
    description: str = ""
    method: str = "mrnn"
    cell: str = "lstm"
    word_dim: int = 256
    hidden_dim: int = 512
    dropout: float = 0.5
    image_dropout: float = 0.5
    image_rank: int | None = None
    backbone: str = "mobilenet_v2"
    image_features: str = "one-layer"
    min_word_count: int = 5  # Karpathy's threshold: words seen fewer times become <unk>
    max_caption_words: int = 30  # longer training captions are cut (a handful in Flickr8K)
    max_decode_words: int = 20
    batch_size: int = 128
    epochs: int = 20
    optimizer: str = "adam"
    lr: float = 4e-4
    weight_decay: float = 0.0
    lr_decay_epochs: int | None = None
    lr_decay_gamma: float = 0.5
    grad_clip_value: float = 5.0  # element-wise, as in the paper
    patience: int | None = 5
    rerank_beam: int | None = None
    seed: int = 0
    num_threads: int | None = None
    train_split: str = "train"
    dev_split: str = "dev"
    # the selection protocol: a validation slice file (recipes/splits/); train_split / dev_split must then
    # name "<source>-minus-<slice>" and the slice (vsekit.data.splits.check_selection_splits)
    validation_slice: str | None = None
    eval_images: int | None = None  # select on the first N images of dev_split only (cheaper epochs)
    # score dev_split every N epochs and after the last; eval_every = epochs: a fixed-epoch run (settings
    # chosen on a validation slice, retrained on all of train) that reads its dev split once, at the end
    eval_every: int = 1
    # "xent": teacher-forced word prediction; "scst": self-critical sequence training for CIDEr-D
    # (Rennie et al. 2017), which starts from the captioner ``init_from`` (a shipped name or a file)
    objective: str = "xent"
    init_from: str | None = None
    scst_samples: int = 5  # captions sampled per image and step
    scst_baseline: str = "greedy"  # "greedy" (Rennie et al.) or "mean" of the other samples (Luo 2020)
    # "mrnn": the image once, as a bias (one pooled vector); "attention": soft attention over the cells of
    # "grid" features at every word (Xu et al. 2015), with the four fields below
    decoder: str = "mrnn"
    annotation_dim: int = 512  # each 1280-d cell projected once per photo to this width
    attention_dim: int = 512  # the hidden layer of the attention MLP
    attention_gate: bool = True  # the gate beta_t on the context (Xu et al., section 4.2.1)
    attention_reg: float = 1.0  # lambda of the doubly stochastic penalty; 0 switches it off

    def validate(self, source: str = "config") -> CaptionTrainConfig:
        def bad(name: str, why: str) -> Exception:
            return field_error(source, name, getattr(self, name), why)

        if self.method != "mrnn":
            raise bad("method", "names a method this trainer does not train (only 'mrnn')")
        if self.cell not in CELLS:
            raise bad("cell", f"must be one of {', '.join(CELLS)}")
        if self.decoder not in DECODERS:
            raise bad("decoder", f"must be one of {', '.join(DECODERS)}")
        if self.decoder == "attention":
            self._validate_attention(bad)
        else:
            pooled = [k for k in FEATURE_KINDS if k != "grid"]  # the m-RNN reads one vector per image
            if self.image_features not in pooled:
                raise bad("image_features", f"must be one of {', '.join(pooled)} (grid: decoder 'attention')")
        if self.optimizer not in ("adam", "rmsprop"):
            raise bad("optimizer", "must be 'adam' or 'rmsprop'")
        for name in (
            "word_dim",
            "hidden_dim",
            "batch_size",
            "epochs",
            "min_word_count",
            "max_decode_words",
            "eval_every",
        ):
            if getattr(self, name) < 1:
                raise bad(name, "must be >= 1")
        for name in ("image_rank", "lr_decay_epochs", "patience", "rerank_beam", "num_threads"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise bad(name, "must be >= 1 or null")
        if self.lr <= 0:
            raise bad("lr", "must be > 0")
        if self.objective not in OBJECTIVES:
            raise bad("objective", f"must be one of {', '.join(OBJECTIVES)}")
        if self.objective == "scst" and not self.init_from:
            raise bad(
                "init_from", "must name the cross-entropy captioner that self-critical training starts from"
            )
        if self.scst_baseline not in BASELINES:
            raise bad("scst_baseline", f"must be one of {', '.join(BASELINES)}")
        if self.scst_samples < (2 if self.scst_baseline == "mean" else 1):
            raise bad("scst_samples", "must be >= 1 (>= 2 with the 'mean' baseline)")
        if self.eval_images is not None and self.eval_images < 1:
            raise bad("eval_images", "must be >= 1 or null")
        return self

    def _validate_attention(self, bad: Callable[[str, str], Exception]) -> None:
        """The attention decoder's fields, and the m-RNN options it does not have."""
        if self.image_features != "grid":
            raise bad("image_features", "must be 'grid' for decoder 'attention' (it attends over the cells)")
        if self.cell != "lstm":
            raise bad("cell", "must be 'lstm' for decoder 'attention'")
        for name in ("annotation_dim", "attention_dim"):
            if getattr(self, name) < 1:
                raise bad(name, "must be >= 1")
        if self.attention_reg < 0:
            raise bad("attention_reg", "must be >= 0")
        if self.image_rank is not None:
            raise bad("image_rank", "is an m-RNN option (factored W_hi); the attention decoder has no W_hi")
        if self.objective != "xent" or self.init_from is not None:
            name = "objective" if self.objective != "xent" else "init_from"
            raise bad(name, "self-critical training and init_from are m-RNN only (decoder 'attention': xent)")


def list_caption_recipes() -> list[str]:
    """Names of the captioning recipes shipped in ``src/vsekit/recipes/captioning``."""
    return list_recipe_names(CAPTION_RECIPES_DIR)


def load_caption_recipe(name_or_path: str | os.PathLike[str]) -> CaptionTrainConfig:
    """A shipped captioning recipe by name (``"mrnn-lstm"``) or a JSON file of config fields by path."""
    return load_recipe_file(CaptionTrainConfig, name_or_path, CAPTION_RECIPES_DIR, "captioning recipe")
