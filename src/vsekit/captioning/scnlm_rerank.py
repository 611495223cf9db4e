"""Reranking the SC-NLM's candidate captions (Kiros et al. 2014, sec. 5.2): the features of a candidate
and the weighted score that orders them.

    score = translation + lm_weight * logP_KN / (words + 1) ** length_power

where the translation score is the cosine between the image and the candidate in the joint space,
multiplied by ``repeat_penalty ** (repeated non-stopwords)`` (footnote 9), and logP_KN the candidate's
natural-log probability under the Kneser-Ney trigram model of the training captions.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "DEFAULT_GRID",
    "STOPWORDS",
    "RerankWeights",
    "SCNLMCandidates",
    "count_repeats",
    "rerank_scores",
    "translation_score",
]

# Function words: repeating them is normal ("a dog and a cat"), so footnote 9's penalty ignores them.
STOPWORDS = frozenset(
    """a an the and or but of in on at to with by for from into onto over under up down out off near
    through across along around behind above below between while as its it his her their them they he
    she him this that these those there here who which what is are was were be been being has have
    had some other another each one""".split()
)


@dataclass
class RerankWeights:
    """score = translation * repeat_penalty ** repeats + lm_weight * logP_KN / (len + 1) ** length_power."""

    lm_weight: float = 0.05
    length_power: float = 1.0
    repeat_penalty: float = 0.5


# the weights :func:`~vsekit.captioning.scnlm.tune_rerank_weights` tries unless told otherwise
DEFAULT_GRID: dict[str, tuple[float, ...]] = {
    "lm_weight": (0.0, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5),
    "length_power": (0.0, 1.0),
    "repeat_penalty": (1.0, 0.7, 0.4),
}


def count_repeats(tokens: Sequence[str], stopwords: frozenset[str] = STOPWORDS) -> int:
    """How many tokens repeat an earlier non-stopword ("a dog and a dog" -> 1)."""
    seen: Counter[str] = Counter(t for t in tokens if t not in stopwords)
    return sum(c - 1 for c in seen.values())


def translation_score(
    cosine: float | np.ndarray, repeats: int | np.ndarray, penalty: float
) -> float | np.ndarray:
    """Footnote 9's multiplicative penalty: ``cosine * penalty ** repeats`` for a positive cosine; a
    negative one is divided instead, so a repeat always lowers the score."""
    factor = np.power(float(penalty), np.asarray(repeats, dtype=np.float64))
    cos = np.asarray(cosine, dtype=np.float64)
    out = np.where(cos >= 0, cos * factor, cos / np.maximum(factor, 1e-12))
    return float(out) if out.ndim == 0 else out


@dataclass
class SCNLMCandidates:
    """Unique candidates per image and their rerank features ``[n, 4]``: cosine to the image, repeated
    non-stopwords, KN log-probability, number of words."""

    captions: list[list[str]]
    features: list[np.ndarray]
    seconds: float = 0.0
    stats: dict[str, float] = field(default_factory=dict)


def rerank_scores(features: np.ndarray, w: RerankWeights) -> np.ndarray:
    """The score of each candidate from its features ``[n, 4]`` (the module docstring's sum)."""
    trans = translation_score(features[:, 0], features[:, 1], w.repeat_penalty)
    return trans + w.lm_weight * features[:, 2] / np.power(features[:, 3] + 1.0, w.length_power)
