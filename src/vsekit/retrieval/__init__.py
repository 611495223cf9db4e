"""Retrieval in the joint space: ranking captions for images and images for sentences, an index of a
photo collection (exact or FAISS search), and multimodal vector arithmetic (Kiros et al. 2014, Eq. 15).

The names below are imported on first use: ``vsekit index update`` and ``vsekit index info`` import
:mod:`vsekit.retrieval.index` without the ranking helpers (and their torch).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vsekit.retrieval.arithmetic import arithmetic_query, resort_by_mean
    from vsekit.retrieval.index import BuildReport, Index, SearchHit
    from vsekit.retrieval.ranking import Hit, SplitEmbeddings, embed_split, rank, top_k

__all__ = [
    "BuildReport",
    "Hit",
    "Index",
    "SearchHit",
    "SplitEmbeddings",
    "arithmetic_query",
    "embed_split",
    "rank",
    "resort_by_mean",
    "top_k",
]

_HOMES = {
    "arithmetic_query": "arithmetic",
    "resort_by_mean": "arithmetic",
    "BuildReport": "index",
    "Index": "index",
    "SearchHit": "index",
    "Hit": "ranking",
    "SplitEmbeddings": "ranking",
    "embed_split": "ranking",
    "rank": "ranking",
    "top_k": "ranking",
}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(f"vsekit.retrieval.{_HOMES[name]}"), name)
    raise AttributeError(f"module 'vsekit.retrieval' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES))
