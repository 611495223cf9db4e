"""Retrieval in the joint space: ranking captions for images and images for sentences (and, next, an
index of a photo collection, search and vector arithmetic)."""

from vsekit.retrieval.ranking import Hit, SplitEmbeddings, embed_split, rank, top_k

__all__ = ["Hit", "SplitEmbeddings", "embed_split", "rank", "top_k"]
