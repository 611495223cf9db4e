"""The structure-content neural language model (SC-NLM) of Kiros et al. 2014: the network.

A multiplicative log-bilinear language model (sec. 2.3-2.5). With previous words w_{n-c..n-1}, the POS
tags of the next k+1 positions t_n..t_{n+k} and a content vector u:

    E     = W_fk^T W_fv                       folded K x V word embeddings            (sec. 2.4)
    r_hat = sum_i C(i) E(:, w_i)              predicted next-word representation      (Eq. 10)
    u_hat = ReLU(sum_i T(i) t_i + T_u u + b)  attribute = structure + content         (Eq. 11)
    f     = (W_fk r_hat) * (W_fd u_hat)       factor outputs, F of them               (Eq. 9)
    P(w_n = i | ...) = softmax_i(W_fv(:, i)^T f + b_i)                                (sec. 2.4)

Sizes (defaults, the paper's where it gives them): K = G = 300, F = 100 (sec. 2.5); previous-word context
c = 5 and forward structure context k + 1 = 5 tags (not given in the paper); content vector D = the joint
space (the shipped joint model's size). The captioner around it is :mod:`vsekit.captioning.scnlm`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from vsekit.errors import VsekitError

__all__ = ["SCNLM", "TAG_END", "TAG_PAD", "SCNLMConfig", "perplexity", "template_tensor"]

TAG_PAD, TAG_END = "<pad>", "<end>"  # tag ids 0 and 1: beyond the sentence / the position of <end>


@dataclass
class SCNLMConfig:
    """Architecture, training and generation settings of an SC-NLM (stored in the model file)."""

    word_dim: int = 300  # K: word representations (paper: 300)
    attr_dim: int = 300  # G: attribute / structure embeddings (paper: G = K = 300)
    factors: int = 100  # F (paper: 100)
    context: int = 5  # previous words n - 1
    forward: int = 5  # structure tags t_n .. t_{n+k}, i.e. k + 1
    content_dim: int = 1024  # D of the content vector u (set from the joint model)
    vocab_size: int = 0  # set from the data
    n_tags: int = 0  # set from the data
    # training
    min_count: int = 5  # rarer training words become <unk>
    epochs: int = 8
    batch_captions: int = 128  # captions per batch (all their positions): T_u u is computed once each
    lr: float = 2e-3
    lr_decay: float = 0.8  # per epoch
    content_dropout: float = 0.0
    seed: int = 0
    lm_discount: float = 0.75
    # generation (sec. 5.2)
    min_len: int = 4
    max_len: int = 12
    n_neighbours: int = 5  # N nearest words and sentences
    n_templates: int = 12  # most frequent training POS sequences tried for every image

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SCNLMConfig:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


class SCNLM(nn.Module):
    """The structure-content neural language model of Kiros et al. 2014, Eq. 9-11."""

    def __init__(self, config: SCNLMConfig) -> None:
        super().__init__()
        cfg = self.config = config
        if (
            min(cfg.vocab_size, cfg.n_tags, cfg.word_dim, cfg.attr_dim, cfg.factors, cfg.context, cfg.forward)
            <= 0
        ):
            raise VsekitError(f"SC-NLM config has a non-positive size: {cfg}")
        # Factored tensor T u = W_fv^T diag(W_fd u) W_fk (Eq. 9); W_fv also folds into the embeddings E.
        self.W_fk = nn.Linear(cfg.word_dim, cfg.factors, bias=False)  # F x K
        self.W_fd = nn.Linear(cfg.attr_dim, cfg.factors, bias=False)  # F x G
        self.W_fv = nn.Parameter(torch.randn(cfg.factors, cfg.vocab_size) / math.sqrt(cfg.factors))  # F x V
        self.b = nn.Parameter(torch.zeros(cfg.vocab_size))  # output biases b_i
        # [C(1) ... C(n-1)] side by side: one K x (n-1)K matrix applied to the concatenated context (Eq. 10).
        self.C = nn.Linear(cfg.context * cfg.word_dim, cfg.word_dim, bias=False)
        # Structure variables: a learned tag lookup table and [T(n) ... T(n+k)] side by side (Eq. 11).
        self.tag_emb = nn.Embedding(cfg.n_tags, cfg.attr_dim)
        self.T = nn.Linear(cfg.forward * cfg.attr_dim, cfg.attr_dim, bias=False)
        # T_u u + b of Eq. 11 (the Linear's bias is b).
        self.T_u = nn.Linear(cfg.content_dim, cfg.attr_dim)
        self.content_dropout = nn.Dropout(cfg.content_dropout)

    def folded_embeddings(self) -> torch.Tensor:
        """E^T = (W_fk^T W_fv)^T: the V x K word representations of sec. 2.4 (row i = E(:, i))."""
        return self.W_fv.t() @ self.W_fk.weight

    def content(self, u: torch.Tensor) -> torch.Tensor:
        """T_u u + b of Eq. 11 ``[B, G]``: computed once per sentence, shared by all its positions."""
        return self.T_u(self.content_dropout(u))

    def step_logits(
        self, context: torch.Tensor, tags: torch.Tensor, content: torch.Tensor, E: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Next-word logits ``[B, V]`` from word ids ``[B, c]``, tag ids ``[B, k+1]`` and ``content(u)``
        ``[B, G]``."""
        E = self.folded_embeddings() if E is None else E
        r_hat = self.C(E[context].flatten(1))  # Eq. 10
        u_hat = F.relu(self.T(self.tag_emb(tags).flatten(1)) + content)  # Eq. 11
        f = self.W_fk(r_hat) * self.W_fd(u_hat)  # factor outputs (sec. 2.4)
        return f @ self.W_fv + self.b  # softmax logits (sec. 2.4)

    def forward(self, context: torch.Tensor, tags: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """Logits ``[B, V]`` for one position per row, conditioned on content vectors ``u`` ``[B, D]``."""
        return self.step_logits(context, tags, self.content(u))

    @torch.no_grad()
    def map_decode(
        self,
        u: torch.Tensor,
        templates: torch.Tensor,
        lengths: torch.Tensor,
        banned: Sequence[int] = (0, 1, 2, 3),
    ) -> list[list[int]]:
        """MAP (greedy argmax) word ids for each row: content ``u`` ``[R, D]``, tag ids ``[R, >= L + k + 1]``
        (the template, then the <end> tag, then padding), template lengths ``[R]``. Row r gets exactly
        ``lengths[r]`` words; ``banned`` ids (specials by default) are never chosen."""
        cfg = self.config
        E = self.folded_embeddings()
        content = self.content(u)
        n_rows, steps = u.shape[0], int(lengths.max()) if len(lengths) else 0
        words = torch.full((n_rows, cfg.context + steps), 2, dtype=torch.long)  # <start> padding
        ban = torch.zeros(cfg.vocab_size, dtype=torch.bool)
        ban[list(banned)] = True
        for n in range(steps):
            logits = self.step_logits(
                words[:, n : n + cfg.context], templates[:, n : n + cfg.forward], content, E
            )
            words[:, cfg.context + n] = logits.masked_fill(ban, float("-inf")).argmax(-1)
        out = words[:, cfg.context :].tolist()
        return [row[: int(length)] for row, length in zip(out, lengths.tolist(), strict=True)]


def template_tensor(templates: Sequence[Sequence[int]], forward: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Tag ids padded as ``template + <end> + <pad>...`` to a common width, and the lengths."""
    width = max((len(t) for t in templates), default=0) + forward + 1
    out = torch.zeros(len(templates), width, dtype=torch.long)
    for i, t in enumerate(templates):
        out[i, : len(t)] = torch.as_tensor(list(t), dtype=torch.long)
        out[i, len(t)] = 1
    return out, torch.as_tensor([len(t) for t in templates], dtype=torch.long)


@torch.no_grad()
def perplexity(model: SCNLM, data: tuple[np.ndarray, ...], u: torch.Tensor, batch: int = 4096) -> float:
    device = model.b.device
    ctx, tags, tgt, own = (torch.from_numpy(a).to(device) for a in data)
    u = u.to(device)
    model.eval()
    E, total = model.folded_embeddings(), 0.0
    content = model.content(u)
    for i in range(0, len(tgt), batch):
        logits = model.step_logits(ctx[i : i + batch], tags[i : i + batch], content[own[i : i + batch]], E)
        total += F.cross_entropy(logits, tgt[i : i + batch], reduction="sum").item()
    return math.exp(total / max(len(tgt), 1))
