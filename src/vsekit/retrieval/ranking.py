"""Ranking in the joint space: captions for images (annotation), images for sentences (search).

Everything here works on unit-norm embeddings, so the score is the cosine ``x . v`` (Kiros et al. 2014,
sec. 2.2) and any model, single or ensemble, ranks the same way. Ties keep the candidates' order
(a stable sort), so results are reproducible. :func:`embed_split` embeds one split of a captioned corpus
(all images x all captions, the evaluation protocol's candidate sets) for the demo and ``vsekit rank``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from vsekit.data.corpus import Corpus
from vsekit.embedding.pipeline import VSEModel
from vsekit.errors import VsekitError
from vsekit.metrics.ranking import evaluate_protocol

__all__ = ["Hit", "SplitEmbeddings", "embed_split", "rank", "top_k"]


@dataclass(frozen=True)
class Hit:
    """One ranked candidate: its position in the candidate list, its key (caption or image id), score."""

    index: int
    key: str
    score: float


def top_k(scores: np.ndarray | torch.Tensor, k: int) -> list[tuple[int, float]]:
    """The ``k`` best ``(index, score)`` of a 1-D score vector, best first; ties keep index order."""
    row = torch.as_tensor(np.asarray(scores, dtype=np.float32))
    if row.ndim != 1:
        raise ValueError(f"top_k takes one score vector, got shape {tuple(row.shape)}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    order = torch.argsort(row, descending=True, stable=True)[:k].tolist()
    return [(j, float(row[j])) for j in order]


def rank(queries: np.ndarray, candidates: np.ndarray, keys: Sequence[str], top: int = 5) -> list[list[Hit]]:
    """For each query embedding ``[q, K]``, the ``top`` candidates ``[n, K]`` by cosine, as :class:`Hit`.

    Annotation: queries are image embeddings and candidates caption embeddings (keys: the captions);
    search: queries are sentence embeddings and candidates image embeddings (keys: the image ids).
    """
    queries, candidates = np.atleast_2d(queries), np.atleast_2d(candidates)
    if len(keys) != len(candidates) or len(candidates) == 0:
        raise VsekitError(f"{len(candidates)} candidates with {len(keys)} keys: nothing to rank")
    if queries.shape[1] != candidates.shape[1]:
        raise VsekitError(
            f"queries are {queries.shape[1]}-d, candidates {candidates.shape[1]}-d: not one joint space"
        )
    scores = queries @ candidates.T
    return [[Hit(j, keys[j], s) for j, s in top_k(row, top)] for row in scores]


@dataclass
class SplitEmbeddings:
    """Every captioned image and every caption of one corpus split, embedded by one model."""

    image_ids: list[str]
    captions: list[str]
    caption_image_ids: list[str]
    images: np.ndarray  # [n_images, K]
    texts: np.ndarray  # [n_captions, K]

    def scores(self) -> np.ndarray:
        """``[n_images, n_captions]`` cosines."""
        return self.images @ self.texts.T

    def evaluate(self, protocol: str = "flickr") -> dict[str, Any]:
        """Recall@K, median and mean rank in both directions (see :mod:`vsekit.metrics.ranking`)."""
        return evaluate_protocol(self.images, self.texts, self.image_ids, self.caption_image_ids, protocol)

    def captions_for_images(self, top: int = 5) -> list[list[Hit]]:
        return rank(self.images, self.texts, self.captions, top)

    def images_for(self, sentence_embeddings: np.ndarray, top: int = 5) -> list[list[Hit]]:
        return rank(sentence_embeddings, self.images, self.image_ids, top)


def embed_split(
    model: VSEModel, corpus: Corpus, split: str, skip_bad_images: bool = False, **feature_kwargs: Any
) -> SplitEmbeddings:
    """Embed the captioned images and the captions of ``split`` (image features through the cache).

    ``skip_bad_images`` leaves unreadable photos and their captions out (each reported once) instead of
    stopping at the first."""
    part = corpus.split(split)
    ids = [i for i, caps in part.captions_by_image().items() if caps]
    if skip_bad_images and ids:
        ids, _ = model.readable_ids(corpus, ids, **feature_kwargs)
    if not ids:
        raise VsekitError(f"{corpus.root}: split '{split}' has no captioned images with readable photos")
    kept = set(ids)
    captions = [c for c in part.captions if c.image_id in kept]
    feats = model.corpus_features(corpus, ids, **feature_kwargs)
    return SplitEmbeddings(
        image_ids=ids,
        captions=[c.text for c in captions],
        caption_image_ids=[c.image_id for c in captions],
        images=model.embed_features(feats),
        texts=model.embed_texts([c.text for c in captions]),
    )
