"""Sentence encoders for the joint space, built by name from a config (open_clip-style factory,
:mod:`vsekit.text.factory`).

``build_text_encoder(name, vocab, **kwargs)`` is the one way the trainer and ``load_model`` make an
encoder, so a saved model only needs ``encoder.config()`` (which includes ``name``) to be rebuilt.

The names below are imported on first use: reading the MiniLM files (:mod:`vsekit.text.minilm_files`) for
a search through a cached ONNX graph does not import the encoders and torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vsekit.text.encoders import (
        BagOfWordsEncoder,
        RNNEncoder,
        TextEncoder,
        no_pretrained_init,
        pretrained_init_enabled,
    )
    from vsekit.text.factory import EMBED_DIM_KWARG, TEXT_ENCODERS, build_text_encoder, encoder_spec
    from vsekit.text.tree_lstm import TreeLSTMEncoder

__all__ = [
    "EMBED_DIM_KWARG",
    "TEXT_ENCODERS",
    "BagOfWordsEncoder",
    "RNNEncoder",
    "TextEncoder",
    "TreeLSTMEncoder",
    "build_text_encoder",
    "encoder_spec",
    "no_pretrained_init",
    "pretrained_init_enabled",
]

_HOMES = {name: "factory" for name in __all__} | {
    "BagOfWordsEncoder": "encoders",
    "RNNEncoder": "encoders",
    "TextEncoder": "encoders",
    "no_pretrained_init": "encoders",
    "pretrained_init_enabled": "encoders",
    "TreeLSTMEncoder": "tree_lstm",
}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(f"vsekit.text.{_HOMES[name]}"), name)
    raise AttributeError(f"module 'vsekit.text' has no attribute {name!r}")
