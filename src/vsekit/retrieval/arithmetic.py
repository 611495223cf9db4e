"""Multimodal vector arithmetic (Kiros, Salakhutdinov and Zemel 2014, sec. 3.2, Eq. 15).

With unit-norm image and sentence embeddings, *image of a blue car* - "blue" + "red" lands near images of
red cars: given a query q (an image's or a sentence's embedding), negative words w_n and positive words
w_p (each embedded and unit-normed), the answer is the x that maximises the cosine

    x* = argmax_x (q - w_n + w_p)^T x / ||q - w_n + w_p||                                   (Eq. 15)

Several minus or plus terms are summed (each term unit-norm, as in the paper's single-word case). The
paper also re-sorts the top N by their distance to the mean of those N images, which removes the odd
poor result among good ones (sec. 3.2, "we found a simple strategy ..."): :func:`resort_by_mean`.
"""

from __future__ import annotations

import numpy as np

from vsekit.errors import VsekitError

__all__ = ["arithmetic_query", "resort_by_mean"]


def _unit(vectors: np.ndarray, what: str) -> np.ndarray:
    vectors = np.atleast_2d(np.asarray(vectors, dtype=np.float32))
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    if (norms == 0).any():
        raise VsekitError(f"{what}: a zero vector has no direction (empty sentence or unknown words?)")
    return vectors / norms


def arithmetic_query(
    query: np.ndarray, plus: np.ndarray | None = None, minus: np.ndarray | None = None
) -> np.ndarray:
    """The unit vector ``(q - sum w_n + sum w_p) / ||...||`` of Eq. 15, float32 ``[K]``.

    ``query``: one embedding ``[K]``; ``plus`` / ``minus``: word (or phrase) embeddings ``[m, K]`` (or
    None / empty). Every term is normalised to unit length first, as the paper assumes.
    """
    q = _unit(query, "query")[0]
    total = q.copy()
    for terms, sign, what in ((minus, -1.0, "minus"), (plus, 1.0, "plus")):
        if terms is not None and len(terms):
            total += sign * _unit(terms, what).sum(axis=0)
    norm = float(np.linalg.norm(total))
    if norm < 1e-6:
        raise VsekitError("the arithmetic query cancels out (query - minus + plus is the zero vector)")
    return (total / norm).astype(np.float32)


def resort_by_mean(vectors: np.ndarray, order: np.ndarray) -> np.ndarray:
    """``order`` (indices of the top N results) re-sorted by Euclidean distance to the mean of their
    ``vectors[order]``, nearest first; ties keep the original order (a stable sort)."""
    order = np.asarray(order, dtype=np.int64)
    if len(order) == 0:
        return order
    top = np.asarray(vectors[order], dtype=np.float32)
    distance = np.linalg.norm(top - top.mean(axis=0, keepdims=True), axis=1)
    return order[np.argsort(distance, kind="stable")]
