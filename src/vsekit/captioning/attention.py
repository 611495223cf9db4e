"""A soft-attention LSTM captioner over the grid of a CNN's last conv map (Xu et al. 2015, "Show, Attend
and Tell", sections 3.1.2 and 4.2; equation numbers of arXiv:1502.03044v3).

The image is L annotation vectors a_1 .. a_L (here the L = 7 x 7 cells of EfficientNet-Lite0's last conv
map, 1280-d each, projected once per photo to D dimensions: a_i = dropout(ReLU(W_p cell_i + b_p))).
At every step t the LSTM reads the previous word and a context vector z_t that is a weighted mean of the
annotations, the weights chosen from the previous hidden state:

    e_ti  = w_e^T tanh(W_a a_i + W_h h_{t-1} + b_a)                       (Eq. 4, f_att an MLP)
    alpha_ti = exp(e_ti) / sum_k exp(e_tk)                                 (Eq. 5)
    z_t   = beta_t * sum_i alpha_ti a_i,   beta_t = sigmoid(f_beta(h_{t-1}))  (Eq. 6 and 13; the gate
                                                                           beta of section 4.2.1, optional)
    i, f, o, g = sigma, sigma, sigma, tanh of T [E y_{t-1}; h_{t-1}; z_t]  (Eq. 1)
    c_t   = f * c_{t-1} + i * g,   h_t = o * tanh(c_t)                     (Eq. 2, 3)
    p(y_t) ~ exp(L_o tanh(E y_{t-1} + L_h h_t + L_z z_t))                 (Eq. 7, the deep output layer;
                                                                           the tanh as in the authors' code)

h_0 and c_0 are predicted from the mean annotation by two one-layer MLPs, f_init,h and f_init,c (section
3.1.2): h_0 = tanh(W_ih mean_i a_i), c_0 = tanh(W_ic mean_i a_i). The first word is predicted from START.

Training minimises the per-word negative log-likelihood plus, optionally, the doubly stochastic penalty of
section 4.2.1 (Eq. 14), lambda * sum_i (1 - sum_t alpha_ti)^2 per caption, which asks every cell to be
attended to about once over the caption. The penalty is added per caption and divided by the number of
target words, like the likelihood, so lambda weighs it against the caption's summed log-likelihood as in
the paper.

Decoding (greedy, sampling, beam search, the repeat guard, the rerank) drives the model through the same
step interface as the m-RNN (:class:`vsekit.captioning.decode.StepModel`): ``start``, ``step``,
``reorder_state``. The state carries the photo's annotations and their attention keys W_a a_i, so beam
search reorders them with h and c. Features arrive as the cache stores them: one row of L * C floats per
photo, cell-major (``[n, L * C]``), so the decoders' ``[n, D]`` contract holds unchanged.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

from vsekit.data.vocab import Vocabulary
from vsekit.errors import VsekitError

__all__ = ["AttentionState", "SoftAttentionCaptioner", "SoftAttentionConfig"]

#: The decoding state, four tensors: (h_t [n, H], c_t [n, H], annotations a [n, L, D], keys W_a a + b_a
#: [n, L, A]); typed as the decoders' state (vsekit.captioning.decode.StepModel).
AttentionState = tuple[torch.Tensor, ...]


@dataclass
class SoftAttentionConfig:
    """Architecture of a :class:`SoftAttentionCaptioner` (stored in every saved captioner)."""

    cells: int  # L: annotation vectors per photo (49 for a 7 x 7 map)
    cell_dim: int  # C: the width of one cell as the feature cache stores it (1280 for Lite0)
    vocab_size: int
    word_dim: int = 256  # m: E y (also the width of the deep output layer, Eq. 7)
    hidden_dim: int = 512  # n: the LSTM
    annotation_dim: int = 512  # D: a_i, each cell projected once per photo
    attention_dim: int = 512  # the hidden layer of f_att (Eq. 4)
    gate: bool = True  # beta_t (section 4.2.1)
    dropout: float = 0.5  # on the deep output layer before L_o (Eq. 7) and on E y_{t-1}
    image_dropout: float = 0.5  # on the projected annotations a_i
    attention_reg: float = 1.0  # lambda of the doubly stochastic penalty (Eq. 14); 0 switches it off

    @property
    def image_dim(self) -> int:
        """The width of a feature row: L * C."""
        return self.cells * self.cell_dim

    def validate(self) -> SoftAttentionConfig:
        for name in (
            "cells", "cell_dim", "vocab_size", "word_dim", "hidden_dim", "annotation_dim", "attention_dim"
        ):  # fmt: skip
            if int(getattr(self, name)) <= 0:
                raise VsekitError(
                    f"attention captioner config: {name} must be positive, got {getattr(self, name)}"
                )
        for name in ("dropout", "image_dropout"):
            if not 0.0 <= float(getattr(self, name)) < 1.0:
                raise VsekitError(
                    f"attention captioner config: {name} must be in [0, 1), got {getattr(self, name)}"
                )
        if float(self.attention_reg) < 0:
            raise VsekitError(
                f"attention captioner config: attention_reg must be >= 0, got {self.attention_reg}"
            )
        return self

    def to_dict(self) -> dict:
        return asdict(self)


class SoftAttentionCaptioner(nn.Module):
    """Caption generator p(y_t | y_<t, a) of Xu et al. 2015 with deterministic soft attention."""

    def __init__(self, config: SoftAttentionConfig) -> None:
        super().__init__()
        self.config = config.validate()
        c = config
        self.project = nn.Linear(c.cell_dim, c.annotation_dim)  # cells -> a_i, once per photo
        self.image_dropout = nn.Dropout(c.image_dropout)
        self.init_h = nn.Linear(c.annotation_dim, c.hidden_dim)  # f_init,h (section 3.1.2)
        self.init_c = nn.Linear(c.annotation_dim, c.hidden_dim)  # f_init,c
        self.att_key = nn.Linear(c.annotation_dim, c.attention_dim)  # W_a, b_a (Eq. 4)
        self.att_query = nn.Linear(c.hidden_dim, c.attention_dim, bias=False)  # W_h (Eq. 4)
        self.att_score = nn.Linear(c.attention_dim, 1)  # w_e (Eq. 4)
        self.gate = nn.Linear(c.hidden_dim, 1) if c.gate else None  # f_beta (section 4.2.1)
        self.word_embedding = nn.Embedding(c.vocab_size, c.word_dim)  # E
        self.cell = nn.LSTMCell(c.word_dim + c.annotation_dim, c.hidden_dim)  # T of Eq. 1, with h_{t-1}
        self.out_h = nn.Linear(c.hidden_dim, c.word_dim)  # L_h (Eq. 7)
        self.out_z = nn.Linear(c.annotation_dim, c.word_dim, bias=False)  # L_z (Eq. 7)
        self.dropout = nn.Dropout(c.dropout)
        self.output = nn.Linear(c.word_dim, c.vocab_size)  # L_o (Eq. 7)
        self._init_weights()

    def _init_weights(self) -> None:
        nn.init.uniform_(self.word_embedding.weight, -0.1, 0.1)
        nn.init.uniform_(self.output.weight, -0.1, 0.1)
        nn.init.zeros_(self.output.bias)

    def init_output_bias(self, target_counts: torch.Tensor) -> None:
        """L_o's bias at the log unigram frequencies of the training targets (as the m-RNN's b_o)."""
        counts = torch.as_tensor(target_counts, dtype=torch.float64).clamp_min(1e-3)
        if counts.shape != (self.config.vocab_size,):
            raise VsekitError(
                f"target_counts has shape {tuple(counts.shape)}; expected ({self.config.vocab_size},)"
            )
        with torch.no_grad():
            self.output.bias.copy_((counts / counts.sum()).log().float())

    @property
    def device(self) -> torch.device:
        return self.output.weight.device

    # -- the photo: annotations, attention keys and the initial state ----------------------------------

    def annotate(self, features: torch.Tensor) -> AttentionState:
        """``features [n, L * C]`` (cell-major rows) -> the state before word 1: (h_0, c_0, a, keys)."""
        c = self.config
        if features.ndim != 2 or features.shape[1] != c.image_dim:
            raise VsekitError(
                f"attention captioner: features have shape {tuple(features.shape)}; expected "
                f"[n, {c.image_dim}] ({c.cells} cells of {c.cell_dim})"
            )
        cells = features.to(self.output.weight.dtype).view(-1, c.cells, c.cell_dim)
        a = self.image_dropout(torch.relu(self.project(cells)))  # a_i [n, L, D]
        mean = a.mean(dim=1)
        h0, c0 = torch.tanh(self.init_h(mean)), torch.tanh(self.init_c(mean))  # f_init,h / f_init,c
        return h0, c0, a, self.att_key(a)

    def attend(
        self, h: torch.Tensor, a: torch.Tensor, keys: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The context z_t ``[n, D]`` and the weights alpha_t ``[n, L]`` from h_{t-1} (Eq. 4-6, 13)."""
        e = self.att_score(torch.tanh(keys + self.att_query(h).unsqueeze(1))).squeeze(-1)  # Eq. 4
        alpha = torch.softmax(e, dim=-1)  # Eq. 5
        z = torch.bmm(alpha.unsqueeze(1), a).squeeze(1)  # Eq. 13: the expected context, sum_i alpha_ti a_i
        if self.gate is not None:
            z = torch.sigmoid(self.gate(h)) * z  # beta_t (section 4.2.1)
        return z, alpha

    def _advance(
        self, words: torch.Tensor, state: AttentionState
    ) -> tuple[torch.Tensor, AttentionState, torch.Tensor]:
        """Read y_{t-1} = ``words [n]``: (the deep output's hidden layer [n, m], the new state, alpha_t)."""
        h, c, a, keys = state
        z, alpha = self.attend(h, a, keys)  # Eq. 4-6
        ey = self.dropout(self.word_embedding(words))
        h, c = self.cell(torch.cat([ey, z], dim=-1), (h, c))  # Eq. 1-3
        deep = torch.tanh(ey + self.out_h(h) + self.out_z(z))  # Eq. 7, inside L_o
        return deep, (h, c, a, keys), alpha

    def logits(self, deep: torch.Tensor) -> torch.Tensor:
        """L_o (Eq. 7) on the deep output's hidden layer."""
        return self.output(self.dropout(deep))

    # -- the decoders' step interface (vsekit.captioning.decode.StepModel) -----------------------------

    def start(self, features: torch.Tensor) -> tuple[torch.Tensor, AttentionState]:
        """Decoding entry point: ``(log p(y_1 | a) [n, V], state after reading START)``."""
        state = self.annotate(features)
        words = torch.full((features.shape[0],), Vocabulary.start_id, dtype=torch.long, device=self.device)
        return self.step(words, state)

    def step(self, words: torch.Tensor, state: AttentionState) -> tuple[torch.Tensor, AttentionState]:
        """Feed one word per sequence ``[n]``: returns ``(log p(next word) [n, V], new state)``."""
        deep, state, _ = self._advance(words, state)
        return F.log_softmax(self.logits(deep).float(), dim=-1), state

    @staticmethod
    def reorder_state(state: AttentionState, index: torch.Tensor) -> AttentionState:
        """Select/repeat sequences (beam search): ``index [m]`` into the batch dimension of every part,
        the photo's annotations and keys included."""
        return tuple(s.index_select(0, index) for s in state)

    # -- training path ---------------------------------------------------------------------------------

    def run(self, features: torch.Tensor, inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher forcing: the deep output layer ``[n, T, m]`` and the weights alpha ``[n, T, L]``.

        ``inputs [n, T]`` holds START then the caption's words (padded); position t predicts the word after
        ``inputs[:, t]``. The network is causal, so padding never changes the real positions.
        """
        state = self.annotate(features)
        deeps, alphas = [], []
        for t in range(inputs.shape[1]):
            deep, state, alpha = self._advance(inputs[:, t], state)
            deeps.append(deep)
            alphas.append(alpha)
        return torch.stack(deeps, dim=1), torch.stack(alphas, dim=1)

    def forward(self, features: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
        """Logits ``[n, T, V]`` for teacher forcing (see :meth:`run`)."""
        return self.logits(self.run(features, inputs)[0])

    def loss_terms(
        self, features: torch.Tensor, inputs: torch.Tensor, targets: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(loss, nll)``: the mean negative log-likelihood per target word (padding = -100 is ignored),
        and the loss that adds the doubly stochastic penalty lambda * sum_i (1 - sum_t alpha_ti)^2 of each
        caption (Eq. 14, over its real steps), divided by the same number of words. L_o runs on the real
        positions only."""
        keep = targets != -100
        deep, alpha = self.run(features, inputs)
        words = keep.sum().clamp_min(1)
        nll = F.cross_entropy(self.logits(deep[keep]).float(), targets[keep], reduction="sum") / words
        if not self.config.attention_reg:
            return nll, nll
        attended = (alpha * keep.unsqueeze(-1).to(alpha.dtype)).sum(dim=1)  # sum_t alpha_ti [n, L]
        penalty = ((1.0 - attended) ** 2).sum() / words
        return nll + self.config.attention_reg * penalty, nll

    def loss(self, features: torch.Tensor, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """The training loss of :meth:`loss_terms` (likelihood and the doubly stochastic penalty)."""
        return self.loss_terms(features, inputs, targets)[0]
