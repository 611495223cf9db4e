"""Aligning text segments to regions with a chain MRF (Karpathy & Fei-Fei 2015, sec. 3.1.4, Eq. 10-12).

Each word j gets a region a_j; the alignment maximises

    E(a) = sum_j psi_U(a_j) + sum_j psi_B(a_j, a_{j+1})          (10)
    psi_U(a_j = i) = v_i . s_j                                    (11)
    psi_B(a_j, a_{j+1}) = beta * 1[a_j = a_{j+1}]                 (12)

beta = 0 gives each word its best region; a large beta aligns the whole sentence to one region. Solved
exactly by Viterbi in O(N M): the best predecessor of region i at word j is either i itself (+ beta) or
the best region of word j-1 overall, so no M x M table is needed.
"""

from __future__ import annotations

import numpy as np

__all__ = ["mrf_align", "segments"]


def mrf_align(unary: np.ndarray, beta: float) -> tuple[list[int], float]:
    """The region of every word maximising Eq. 10, and that maximum. ``unary`` is ``[N words, M regions]``."""
    unary = np.asarray(unary, dtype=np.float64)
    n, m = unary.shape
    if n == 0 or m == 0:
        raise ValueError(f"the MRF needs at least one word and one region, got unary of shape {unary.shape}")
    best = unary[0].copy()  # best energy of words 0..j with word j at region i
    back = np.zeros((n, m), dtype=np.int64)
    for j in range(1, n):
        k = int(best.argmax())  # first best: ties break towards the lower region index
        stay = best + beta
        switch = best[k]
        back[j] = np.where(stay >= switch, np.arange(m), k)
        best = np.maximum(stay, switch) + unary[j]
    path = [int(best.argmax())]
    for j in range(n - 1, 0, -1):
        path.append(int(back[j, path[-1]]))
    return path[::-1], float(best.max())


def segments(path: list[int]) -> list[tuple[int, int, int]]:
    """Runs of equal regions as ``(start word, end word exclusive, region)``: the aligned text segments."""
    out: list[tuple[int, int, int]] = []
    for j, region in enumerate(path):
        if out and out[-1][2] == region:
            out[-1] = (out[-1][0], j + 1, region)
        else:
            out.append((j, j + 1, region))
    return out
