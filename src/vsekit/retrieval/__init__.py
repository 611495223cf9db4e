"""Retrieval in the joint space: ranking captions for images and images for sentences, an index of a
photo collection (exact or FAISS search), and multimodal vector arithmetic (Kiros et al. 2014, Eq. 15)."""

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
