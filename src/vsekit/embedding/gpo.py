"""GPO, the Generalized Pooling Operator of VSE-infinity (Chen et al. 2021, "Learning the Best Pooling
Strategy for Visual Semantic Embedding", CVPR, sec. 3).

A set of K feature vectors ``phi_1 .. phi_K`` (each D-dimensional: here the projected cells of the CNN's
last conv map) becomes one vector by sorting each dimension on its own and taking a weighted sum of the
sorted values::

    v_d = sum_{k=1..K} theta_k * max_k({phi_1d, ..., phi_Kd})        (sec. 3, the GPO)

where ``max_k`` is the k-th largest value of dimension d over the set. The same weights ``theta`` serve
every dimension. ``theta = (1, 0, .., 0)`` is max pooling, ``theta = (1/K, .., 1/K)`` is average pooling,
``theta = (1/k, .., 1/k, 0, .., 0)`` the mean of the top k: GPO learns where it wants to be between them.

The weights come from a small generator that sees only the positions k = 1..K (so it works for any K,
sec. 3, the weight generator): each position's sine/cosine encoding ``p_k`` (the Transformer's, of size
``d_pe`` = 32) runs through a bidirectional GRU (hidden size 32); the two directions' outputs are
averaged, a linear layer scores each position, and a softmax over k at temperature 0.1 gives ``theta``::

    h_k = (GRU_fwd(p)_k + GRU_bwd(p)_k) / 2,   theta_k = exp(w . h_k / T) / sum_j exp(w . h_j / T)

(Section numbers only: the paper is not in ``shared/seeds``, so its equations are not quoted by number.
The details that the paper leaves to its code, the direction average, the bias-free scoring layer and
T = 0.1, follow the authors' public implementation.)

A set may have fewer than K valid vectors (``lengths``): the padding is left out of the sort and gets
weight 0, and the weights of a set of n vectors are those the generator gives for n positions. The grid
of a CNN always has all its cells, so the joint embedding passes no ``lengths``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["GPO", "gpo_pool", "positional_encoding"]


def positional_encoding(length: int, dim: int) -> torch.Tensor:
    """``[length, dim]`` sine/cosine encodings of positions 0..length-1 (Vaswani et al. 2017, sec. 3.5):
    even columns ``sin(k / 10000^(i/dim))``, odd columns the cosine at the same frequency."""
    if dim % 2:
        raise ValueError(f"the sine/cosine encoding needs an even size, got {dim}")
    position = torch.arange(length, dtype=torch.float32)[:, None]
    frequency = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    pe = torch.zeros(length, dim)
    pe[:, 0::2] = torch.sin(position * frequency)
    pe[:, 1::2] = torch.cos(position * frequency)
    return pe


def _valid(lengths: torch.Tensor, k: int) -> torch.Tensor:
    """``[B, K]`` bool: position k of set b holds a vector (k < lengths[b])."""
    return torch.arange(k, device=lengths.device)[None, :] < lengths[:, None]


def gpo_pool(
    features: torch.Tensor, weights: torch.Tensor, lengths: torch.Tensor | None = None
) -> torch.Tensor:
    """The pooling itself: ``sum_k theta_k max_k(features)`` per dimension (see the module docstring).

    Args:
        features: ``[B, K, D]``, a set of K vectors per row.
        weights: ``theta``, ``[K]`` (one set of weights for every row) or ``[B, K]``.
        lengths: ``[B]``, how many of each row's K vectors are valid (the first ones); None: all.

    Returns ``[B, D]``. With ``lengths``, a row's padding is sorted last and multiplied by 0 whatever its
    weight, so it never changes the result.
    """
    # [B, D, K], contiguous: sorting along the last, contiguous axis is twice as fast on a CPU
    per_dim = features.transpose(1, 2).contiguous()
    if lengths is not None:
        valid = _valid(lengths, features.shape[1])[:, None, :]
        per_dim = per_dim.masked_fill(~valid, float("-inf"))
    ranked = per_dim.sort(dim=-1, descending=True).values  # max_k: the k-th largest value of each dimension
    if lengths is not None:
        ranked = ranked.masked_fill(~valid, 0.0)  # -inf * 0 would be nan
    theta = weights if weights.ndim == 2 else weights[None, :]
    return (ranked @ theta[..., None]).squeeze(-1)  # sum_k theta_k max_k, per dimension


class GPO(nn.Module):
    """The Generalized Pooling Operator: learned weights over sorted features (see the module docstring).

    Args:
        pe_dim: size of the positional encoding of k (32 in the paper).
        hidden: hidden size of each direction of the bidirectional GRU (32 in the paper).
        temperature: the softmax temperature over k (0.1 in the paper).
    """

    def __init__(self, pe_dim: int = 32, hidden: int = 32, temperature: float = 0.1) -> None:
        super().__init__()
        self.pe_dim, self.hidden, self.temperature = int(pe_dim), int(hidden), float(temperature)
        self.gru = nn.GRU(self.pe_dim, self.hidden, batch_first=True, bidirectional=True)
        self.score = nn.Linear(self.hidden, 1, bias=False)

    def weights(self, k: int) -> torch.Tensor:
        """``theta`` for a set of ``k`` vectors: ``[k]``, positive, summing to 1."""
        pe = positional_encoding(k, self.pe_dim).to(self.score.weight)
        out, _ = self.gru(pe[None])  # [1, k, 2 * hidden]: forward and backward outputs side by side
        h = (out[..., : self.hidden] + out[..., self.hidden :]) / 2  # the two directions averaged
        return F.softmax(self.score(h)[0, :, 0] / self.temperature, dim=0)

    def forward(self, features: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        """``[B, K, D]`` sets (``lengths``: valid vectors per row, None: all K) -> ``[B, D]``."""
        k = features.shape[1]
        if lengths is None:
            return gpo_pool(features, self.weights(k))
        theta = features.new_zeros(features.shape[0], k)
        for n in lengths.unique().tolist():  # the weights of a set of n vectors, for every row of length n
            theta[lengths == n, : int(n)] = self.weights(int(n))
        return gpo_pool(features, theta, lengths)
