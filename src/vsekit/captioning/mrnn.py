"""The multimodal recurrent network that generates captions (Karpathy & Fei-Fei 2015, section 3.2).

    b_v = W_hi [CNN(I)]                                                   (Eq. 13)
    h_t = f(W_hx x_t + W_hh h_{t-1} + b_h + 1(t=1) * b_v)                (Eq. 14)
    y_t = softmax(W_oh h_t + b_o)                                         (Eq. 15)

The image enters once, as an extra bias on the first step; x_1 is the START vector, h_0 = 0, and the
target after the last word is END. ``cell="rnn"`` is Eq. 14 with f = ReLU (the paper's vanilla RNN);
``cell="lstm"`` is the LSTM its appendix found better, with b_v added to the four gate pre-activations
of the first step (the same "bias at t = 1" conditioning, so the two cells differ only in f).

Because h_0 = 0 (and c_0 = 0), the first step is computed by hand with the cell's own weights and the
image bias, and the remaining steps run through ``nn.RNN``/``nn.LSTM`` (oneDNN kernels) from that state:
no Python loop over time in training. Padding after END needs no packing: the network is causal, so
padded positions never influence earlier outputs, and the loss masks them.

The softmax biases b_o start at the log unigram frequencies of the training words (appendix: the model
then predicts the chance distribution from the first step and converges faster).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn

from vsekit.data.vocab import Vocabulary
from vsekit.errors import VsekitError

__all__ = ["CELLS", "MultimodalRNN", "MultimodalRNNConfig", "caption_batch", "perplexity"]

CELLS = ("lstm", "rnn")


@dataclass
class MultimodalRNNConfig:
    """Architecture of a :class:`MultimodalRNN` (stored in every saved captioner)."""

    image_dim: int
    vocab_size: int
    cell: str = "lstm"
    word_dim: int = 256
    hidden_dim: int = 512
    dropout: float = 0.5  # on the word vectors and on h_t before the softmax (not inside the recurrence)
    image_dropout: float = 0.5  # on CNN(I) before W_hi
    image_rank: int = 0  # > 0: W_hi factored as (D x r)(r x H), for wide FNE features (18K x 2K is 37M)

    def validate(self) -> MultimodalRNNConfig:
        if self.cell not in CELLS:
            raise VsekitError(f"unknown captioner cell {self.cell!r}; known: {', '.join(CELLS)}")
        if int(self.image_rank) < 0:
            raise VsekitError(f"captioner config: image_rank must be >= 0, got {self.image_rank}")
        for name in ("image_dim", "vocab_size", "word_dim", "hidden_dim"):
            if int(getattr(self, name)) <= 0:
                raise VsekitError(f"captioner config: {name} must be positive, got {getattr(self, name)}")
        for name in ("dropout", "image_dropout"):
            if not 0.0 <= float(getattr(self, name)) < 1.0:
                raise VsekitError(f"captioner config: {name} must be in [0, 1), got {getattr(self, name)}")
        return self

    def to_dict(self) -> dict:
        return asdict(self)


class MultimodalRNN(nn.Module):
    """Caption generator p(w_t | w_<t, I) of Eq. 13-15, for a vanilla RNN or an LSTM cell."""

    def __init__(self, config: MultimodalRNNConfig) -> None:
        super().__init__()
        self.config = config.validate()
        gates = 4 if config.cell == "lstm" else 1
        self.word_embedding = nn.Embedding(config.vocab_size, config.word_dim)  # x_t
        self.image_dropout = nn.Dropout(config.image_dropout)
        if config.image_rank:  # W_hi (Eq. 13), factored
            self.image_bias: nn.Module = nn.Sequential(
                nn.Linear(config.image_dim, config.image_rank, bias=False),
                nn.Linear(config.image_rank, gates * config.hidden_dim),
            )
        else:
            self.image_bias = nn.Linear(config.image_dim, gates * config.hidden_dim)  # W_hi (Eq. 13)
        rnn_cls = nn.LSTM if config.cell == "lstm" else nn.RNN
        rnn_kwargs = {} if config.cell == "lstm" else {"nonlinearity": "relu"}
        # W_hx, W_hh, b_h (Eq. 14)
        self.rnn = rnn_cls(config.word_dim, config.hidden_dim, batch_first=True, **rnn_kwargs)
        self.dropout = nn.Dropout(config.dropout)
        self.output = nn.Linear(config.hidden_dim, config.vocab_size)  # W_oh, b_o (Eq. 15)
        self._init_weights()

    def _init_weights(self) -> None:
        nn.init.uniform_(self.word_embedding.weight, -0.1, 0.1)
        for layer in self.image_bias.modules():
            if isinstance(layer, nn.Linear):
                nn.init.normal_(
                    layer.weight, std=0.01 if layer.out_features > self.config.image_rank else 0.02
                )
                if layer.bias is not None:
                    nn.init.zeros_(layer.bias)
        nn.init.uniform_(self.output.weight, -0.1, 0.1)
        nn.init.zeros_(self.output.bias)
        if self.config.cell == "rnn":
            # A ReLU recurrence blows up from the default uniform init; start near the identity-free
            # small regime (Le et al. 2015 use identity; small orthogonal*0.5 trains stably here).
            nn.init.orthogonal_(self.rnn.get_parameter("weight_hh_l0"), gain=0.5)

    def init_output_bias(self, target_counts: torch.Tensor) -> None:
        """Set b_o to the log unigram frequencies of the training targets (Karpathy appendix).

        ``target_counts[v]`` is how often word v is a target in the training captions (END once per
        caption, <unk> for every rare word). Ids that are never targets (<pad>, <start>) get a floor
        count, so their probability starts tiny rather than -inf.
        """
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

    # -- one step (decoding) and the first step ------------------------------------------------------

    def _first_preactivation(self, features: torch.Tensor, start: torch.Tensor) -> torch.Tensor:
        """W_hx x_1 + b_h + b_v: the pre-activation of step 1 (h_0 = 0 removes the W_hh term)."""
        dtype = self.output.weight.dtype
        b_v = self.image_bias(self.image_dropout(features.to(dtype)))  # Eq. 13
        x_1 = self.dropout(self.word_embedding(start))
        # (the RNN's parameters by name: torch's types do not declare the attributes it creates for them)
        rnn = self.rnn.get_parameter
        return F.linear(x_1, rnn("weight_ih_l0"), rnn("bias_ih_l0") + rnn("bias_hh_l0")) + b_v

    def initial_state(self, features: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The recurrent state after step 1 (reading START and the image), shapes ``[1, n, H]``."""
        n = features.shape[0]
        start = torch.full((n,), Vocabulary.start_id, dtype=torch.long, device=features.device)
        pre = self._first_preactivation(features, start)
        if self.config.cell == "rnn":
            return (torch.relu(pre).unsqueeze(0),)  # Eq. 14 with f = ReLU
        i, f, g, o = pre.chunk(4, dim=-1)  # nn.LSTM's gate order; c_0 = 0 so the forget gate drops out
        c = torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        return h.unsqueeze(0), c.unsqueeze(0)

    def start(self, features: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        """Decoding entry point: ``(log p(w_1 | I) [n, V], state after step 1)``."""
        state = self.initial_state(features)
        return self.log_probs(self.state_output(state)), state

    @staticmethod
    def reorder_state(state: tuple[torch.Tensor, ...], index: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Select/repeat sequences of a state (beam search): ``index [m]`` into the batch dimension."""
        return tuple(s.index_select(1, index) for s in state)

    def state_output(self, state: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """h_t of a state tuple, ``[n, H]``."""
        return state[0][0]

    def log_probs(self, hidden: torch.Tensor) -> torch.Tensor:
        """log y_t (Eq. 15) from h_t ``[..., H]`` -> ``[..., V]``."""
        return F.log_softmax(self.output(self.dropout(hidden)).float(), dim=-1)

    def step(
        self, words: torch.Tensor, state: tuple[torch.Tensor, ...]
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        """Feed one word per sequence ``[n]``: returns ``(log p(next word) [n, V], new state)``."""
        x = self.dropout(self.word_embedding(words)).unsqueeze(1)
        hx = state if self.config.cell == "lstm" else state[0]
        out, new = self.rnn(x, hx)
        new_state = new if self.config.cell == "lstm" else (new,)
        return self.log_probs(out[:, 0]), new_state

    # -- training path ---------------------------------------------------------------------------------

    def hidden_states(self, features: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
        """h_t for teacher forcing, ``[n, T, H]``.

        ``inputs [n, T]`` holds START then the caption's words (padded); h_t at position t predicts the
        word after ``inputs[:, t]`` (the last real position predicts END).
        """
        state = self.initial_state(features)
        h1 = self.state_output(state).unsqueeze(1)
        if inputs.shape[1] == 1:
            return h1
        x = self.dropout(self.word_embedding(inputs[:, 1:]))
        hx = state if self.config.cell == "lstm" else state[0]
        rest, _ = self.rnn(x, hx)
        return torch.cat([h1, rest], dim=1)

    def forward(self, features: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
        """Logits ``[n, T, V]`` for teacher forcing (see :meth:`hidden_states`)."""
        return self.output(self.dropout(self.hidden_states(features, inputs)))

    def loss(self, features: torch.Tensor, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean negative log-likelihood per target word (padding = -100 is ignored).

        The softmax layer runs on the real positions only: with captions of mixed length a third or
        more of a padded batch is padding, and W_oh is the largest matrix product of a step.
        """
        keep = targets != -100
        hidden = self.hidden_states(features, inputs)[keep]
        logits = self.output(self.dropout(hidden))
        return F.cross_entropy(logits.float(), targets[keep])


def caption_batch(
    token_ids: Sequence[Sequence[int]], vocab: Vocabulary, max_len: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Teacher-forcing tensors for captions given as word ids (without START/END).

    Returns ``inputs [n, T]`` = START w_1 .. w_L (padded with <pad>) and ``targets [n, T]`` =
    w_1 .. w_L END (padded with -100), where ``T = max L + 1`` (captions longer than ``max_len`` words
    are cut, and still end with END).
    """
    seqs = [list(ids)[:max_len] if max_len else list(ids) for ids in token_ids]
    width = max((len(s) for s in seqs), default=0) + 1
    inputs = torch.full((len(seqs), width), vocab.pad_id, dtype=torch.long)
    targets = torch.full((len(seqs), width), -100, dtype=torch.long)
    for row, seq in enumerate(seqs):
        n = len(seq)
        inputs[row, 0] = vocab.start_id
        if n:
            inputs[row, 1 : n + 1] = torch.tensor(seq, dtype=torch.long)
            targets[row, :n] = torch.tensor(seq, dtype=torch.long)
        targets[row, n] = vocab.end_id
    return inputs, targets


def perplexity(mean_nll: float) -> float:
    """exp of the mean per-word negative log-likelihood (inf-safe)."""
    return math.exp(min(mean_nll, 700.0))
