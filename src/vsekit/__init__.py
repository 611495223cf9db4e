"""vsekit: visual-semantic embeddings for ranking, describing, aligning and searching images and sentences.

The public API (see :mod:`vsekit.api`) is imported on first use, so ``import vsekit`` stays cheap::

    import vsekit
    model = vsekit.load_model()          # the shipped joint embedding
    model.embed_texts(["a dog"]).shape   # (1, 2048)
"""

from __future__ import annotations

import importlib
from typing import Any

from vsekit.version import __version__

__all__ = [
    "BuildReport",
    "CaptionGenerator",
    "FusedModel",
    "Hit",
    "Index",
    "SearchHit",
    "VSEModel",
    "__version__",
    "load_captioner",
    "load_fusion",
    "load_model",
    "rank_captions",
    "rank_images",
]

_API = {
    "BuildReport",
    "CaptionGenerator",
    "FusedModel",
    "Hit",
    "Index",
    "SearchHit",
    "VSEModel",
    "load_captioner",
    "load_fusion",
    "load_model",
    "rank_captions",
    "rank_images",
}


def __getattr__(name: str) -> Any:
    if name in _API:
        return getattr(importlib.import_module("vsekit.api"), name)
    raise AttributeError(f"module 'vsekit' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _API)
