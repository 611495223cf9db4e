"""Multimodal vector arithmetic (Kiros, Salakhutdinov and Zemel 2014, sec. 3.2, Eq. 15).

With unit-norm image and sentence embeddings, *image of a blue car* - "blue" + "red" lands near images of
red cars: given a query q (an image's or a sentence's embedding), negative words w_n and positive words
w_p (each embedded and unit-normed), the answer is the x that maximises the cosine

    x* = argmax_x (q - w_n + w_p)^T x / ||q - w_n + w_p||                                   (Eq. 15)

Several minus or plus terms are summed (each term unit-norm, as in the paper's single-word case). The
words' difference may carry a ``weight`` (the paper's is 1)::

    q' = (q + weight * (sum w_p - sum w_n)) / ||...||

and each word may be read in a ``phrase`` (``"a photo of {}"``: "beach" is embedded as "a photo of beach").
With the shipped ``vse`` a photo's embedding outweighs a bare word's difference: at weight 1 its top results
stay the photo's own scene (a cat minus "cat" plus "dog" is the cat again). Each shipped model's rule (weight
and phrase) is chosen on the validation slice, for photo queries, and shipped as ``<model>-arithmetic.json``
pinned to the model file (:func:`load_arithmetic_rule`; ``ship/arithmetic_weight.py``,
bench/results/arithmetic.json); a model without one keeps the paper's rule (weight 1, bare words).

The paper also re-sorts the top N by their distance to the mean of those N images, which removes the odd
poor result among good ones (sec. 3.2, "we found a simple strategy ..."): :func:`resort_by_mean`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from vsekit.errors import VsekitError
from vsekit.resources import pinned_sidecar

__all__ = [
    "ARITHMETIC_FORMAT",
    "PAPER_RULE",
    "ArithmeticRule",
    "arithmetic_query",
    "check_weight",
    "load_arithmetic_rule",
    "resort_by_mean",
]

ARITHMETIC_FORMAT = "vsekit.arithmetic"
#: The paper's weight.
PAPER_WEIGHT = 1.0


def _unit(vectors: np.ndarray, what: str) -> np.ndarray:
    vectors = np.atleast_2d(np.asarray(vectors, dtype=np.float32))
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    if (norms == 0).any():
        raise VsekitError(f"{what}: a zero vector has no direction (empty sentence or unknown words?)")
    return vectors / norms


def check_weight(weight: float) -> float:
    """``weight`` as a float, or a VsekitError: the words' weight must be a finite number above 0."""
    value = float(weight)
    if not math.isfinite(value) or value <= 0:
        raise VsekitError(f"the arithmetic weight must be a number above 0, got {weight}")
    return value


def arithmetic_query(
    query: np.ndarray,
    plus: np.ndarray | None = None,
    minus: np.ndarray | None = None,
    weight: float = PAPER_WEIGHT,
) -> np.ndarray:
    """The unit vector ``(q + weight * (sum w_p - sum w_n)) / ||...||`` of Eq. 15, float32 ``[K]``.

    ``query``: one embedding ``[K]``; ``plus`` / ``minus``: word (or phrase) embeddings ``[m, K]`` (or
    None / empty); ``weight``: how much the words count against the query (1: the paper's Eq. 15). Every
    term is normalised to unit length first, as the paper assumes.
    """
    weight = check_weight(weight)
    q = _unit(query, "query")[0]
    total = q.copy()
    for terms, sign, what in ((minus, -1.0, "minus"), (plus, 1.0, "plus")):
        if terms is not None and len(terms):
            total += (sign * weight) * _unit(terms, what).sum(axis=0)
    norm = float(np.linalg.norm(total))
    if norm < 1e-6:
        raise VsekitError("the arithmetic query cancels out (query - minus + plus is the zero vector)")
    return (total / norm).astype(np.float32)


@dataclass(frozen=True)
class ArithmeticRule:
    """How a model's arithmetic weighs and reads its words: ``weight`` (module docstring) and ``phrase``,
    a template with one ``{}`` each word is put in before it is embedded (``"{}"``: the bare word)."""

    weight: float = PAPER_WEIGHT
    phrase: str = "{}"

    def __post_init__(self) -> None:
        object.__setattr__(self, "weight", check_weight(self.weight))
        if not isinstance(self.phrase, str) or self.phrase.count("{}") != 1:
            raise VsekitError(f"an arithmetic phrase needs one '{{}}' for the word, got {self.phrase!r}")

    def texts(self, words: Sequence[str]) -> list[str]:
        """What is embedded for ``words``: each word in the phrase."""
        return [self.phrase.replace("{}", w) for w in words]

    def with_weight(self, weight: float | None) -> ArithmeticRule:
        """This rule with another ``weight`` (None: this one's)."""
        return self if weight is None else ArithmeticRule(weight, self.phrase)

    def to_json(self) -> dict[str, float | str]:
        return {"weight": self.weight, "phrase": self.phrase}


#: Kiros et al.'s Eq. 15: weight 1, bare words; the rule of a model without ``<model>-arithmetic.json``.
PAPER_RULE = ArithmeticRule()


@functools.lru_cache(maxsize=16)  # read once per model file, not on every search
def load_arithmetic_rule(model: str, model_sha256: str) -> ArithmeticRule:
    """The rule shipped for model ``model`` (a shipped name) and exactly that file
    (``<model>-arithmetic.json``), else :data:`PAPER_RULE`."""
    data = pinned_sidecar(model, model_sha256, "arithmetic", ARITHMETIC_FORMAT)
    if data is None:
        return PAPER_RULE
    return ArithmeticRule(float(data["weight"]), str(data.get("phrase", "{}")))


def resort_by_mean(vectors: np.ndarray, order: np.ndarray) -> np.ndarray:
    """``order`` (indices of the top N results) re-sorted by Euclidean distance to the mean of their
    ``vectors[order]``, nearest first; ties keep the original order (a stable sort)."""
    order = np.asarray(order, dtype=np.int64)
    if len(order) == 0:
        return order
    top = np.asarray(vectors[order], dtype=np.float32)
    distance = np.linalg.norm(top - top.mean(axis=0, keepdims=True), axis=1)
    return order[np.argsort(distance, kind="stable")]
