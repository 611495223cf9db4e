"""Word vectors in context: the bidirectional RNN of Karpathy & Fei-Fei 2015 (sec. 3.1.2, Eq. 2-6).

Unlike the sentence encoders of the registry (:func:`~vsekit.text.build_text_encoder`), which give one
vector per sentence, this encoder gives one ``h``-dimensional vector ``s_t`` per word, so it has its own
builder (:class:`BRNNWordEncoder` from a config dict) and its own output: the words of a batch packed
into ``[n_words, h]`` with the sentence each belongs to. With ``f`` = ReLU:

    x_t   = W_w 1_t                                  (2)  word embedding (random, or GloVe 50-d)
    e_t   = f(W_e x_t + b_e)                         (3)
    h^f_t = f(e_t + W_f h^f_{t-1} + b_f)             (4)  forward stream
    h^b_t = f(e_t + W_b h^b_{t+1} + b_b)             (5)  backward stream (starts at each sentence's end)
    s_t   = f(W_d (h^f_t + h^b_t) + b_d)             (6)

Dropout (the paper: "in all layers except the recurrent ones") applies to x_t and to h^f_t + h^b_t.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from vsekit.data.vocab import Vocabulary
from vsekit.errors import VsekitError
from vsekit.text.encoders import pretrained_init_enabled

__all__ = ["BRNNWordEncoder", "PackedWords", "reverse_padded"]


@dataclass
class PackedWords:
    """The words of a batch of sentences: ``vectors [n_words, h]`` and ``sentence [n_words]`` (row of the
    sentence each word belongs to), plus ``lengths [B]``; words are in sentence order, then word order."""

    vectors: torch.Tensor
    sentence: torch.Tensor
    lengths: torch.Tensor


def reverse_padded(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Reverse each sequence of ``x [B, T, ...]`` within its own length (padding stays at the end)."""
    t = torch.arange(x.shape[1], device=x.device)[None, :]
    n = lengths.to(x.device)[:, None]
    index = torch.where(t < n, n - 1 - t, t)  # [B, T]
    return x.gather(1, index.view(*index.shape, *([1] * (x.ndim - 2))).expand_as(x))


class BRNNWordEncoder(nn.Module):
    """Eq. 2-6: a ReLU bidirectional RNN whose two streams are summed into each word's ``s_t``."""

    def __init__(
        self,
        vocab: Vocabulary,
        hidden_dim: int = 512,
        word_dim: int = 300,
        glove: bool = False,
        freeze_words: bool = False,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if hidden_dim < 1 or word_dim < 1 or not 0 <= dropout < 1:
            raise ValueError(
                f"bad BRNN sizes: hidden_dim={hidden_dim}, word_dim={word_dim}, dropout={dropout}"
            )
        from vsekit.text.glove import GLOVE_DIM

        self.vocab = vocab
        self.hidden_dim, self.word_dim = int(hidden_dim), int(word_dim)
        self.glove, self.freeze_words, self.dropout_p = bool(glove), bool(freeze_words), float(dropout)
        if self.glove and self.word_dim != GLOVE_DIM:
            raise ValueError(f"GloVe word vectors are {GLOVE_DIM}-d: set word_dim={GLOVE_DIM} with glove")
        self.embed = nn.Embedding(len(vocab), self.word_dim, padding_idx=vocab.pad_id)  # W_w, Eq. 2
        nn.init.uniform_(self.embed.weight, -0.1, 0.1)
        with torch.no_grad():
            self.embed.weight[vocab.pad_id].zero_()
        if self.glove and pretrained_init_enabled():
            self._init_from_glove()
        self.embed.weight.requires_grad_(not self.freeze_words)
        self.w_e = nn.Linear(self.word_dim, self.hidden_dim)  # Eq. 3
        # W_f and W_b (Eq. 4-5) as one [2, h, h] stack, so both streams advance in one matmul per step.
        self.w_rec = nn.Parameter(torch.empty(2, self.hidden_dim, self.hidden_dim))
        self.b_rec = nn.Parameter(torch.zeros(2, 1, self.hidden_dim))
        nn.init.orthogonal_(self.w_rec[0])
        nn.init.orthogonal_(self.w_rec[1])
        with torch.no_grad():
            self.w_rec.mul_(0.5)  # ReLU recurrences explode easily from an orthogonal (gain 1) start
        self.w_d = nn.Linear(self.hidden_dim, self.hidden_dim)  # Eq. 6
        self.drop = nn.Dropout(self.dropout_p)
        with torch.no_grad():  # small positive biases: ReLU units that start alive (all-zero s_t never learn)
            self.w_e.bias.fill_(0.1)
            self.w_d.bias.fill_(0.1)

    def _init_from_glove(self) -> None:
        from vsekit.text.glove import glove_lookup

        vectors, found = glove_lookup(self.vocab.words)
        found[: len(("pad", "unk", "start", "end"))] = False
        with torch.no_grad():
            rows = torch.from_numpy(np.flatnonzero(found))
            self.embed.weight[rows] = torch.from_numpy(vectors[found])

    @property
    def output_dim(self) -> int:
        return self.hidden_dim

    def config(self) -> dict:
        return {
            "hidden_dim": self.hidden_dim,
            "word_dim": self.word_dim,
            "glove": self.glove,
            "freeze_words": self.freeze_words,
            "dropout": self.dropout_p,
        }

    def token_ids(self, text: str) -> list[int]:
        """Word ids of ``text``; unknown words are <unk>. An empty sentence is an error."""
        ids = self.vocab.encode_text(text)
        if not ids:
            raise VsekitError(f"sentence {text!r} has no words to align")
        return ids

    def display_words(self, text: str) -> list[str]:
        """The words of ``text`` as the model sees them (unknown ones as <unk>); a sentence with no known
        word is an error (nothing to align)."""
        ids = self.token_ids(text)
        if all(i == self.vocab.unk_id for i in ids):
            raise VsekitError(f"sentence {text!r}: none of its words is in the aligner's vocabulary")
        return [self.vocab.word(i) for i in ids]

    def precompute(self, texts: Sequence[str], progress: bool = True) -> None:
        """Nothing to keep per text (its inputs are word ids); the interface of the MiniLM word encoder."""
        del texts, progress

    def prepare(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        """``tokens [B, T]`` padded with <pad> and ``lengths [B]`` (CPU int64)."""
        ids = [self.token_ids(t) for t in texts]
        lengths = torch.tensor([len(x) for x in ids], dtype=torch.int64)
        tokens = torch.full(
            (len(ids), int(lengths.max()) if ids else 0), self.vocab.pad_id, dtype=torch.int64
        )
        for row, x in enumerate(ids):
            tokens[row, : len(x)] = torch.tensor(x, dtype=torch.int64)
        return {"tokens": tokens, "lengths": lengths}

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor) -> PackedWords:
        """The ``s_t`` of every real word of the batch (padding never enters either stream)."""
        x = self.drop(self.embed(tokens))  # Eq. 2
        e = torch.relu(self.w_e(x))  # Eq. 3, [B, T, h]
        streams = torch.stack([e, reverse_padded(e, lengths)])  # [2, B, T, h]: forward, backward
        h = e.new_zeros(2, e.shape[0], self.hidden_dim)
        outs = []
        for t in range(e.shape[1]):  # Eq. 4-5; padding comes after a sentence's words in both streams
            h = torch.relu(streams[:, :, t] + torch.bmm(h, self.w_rec.transpose(1, 2)) + self.b_rec)
            outs.append(h)
        hs = torch.stack(outs, dim=2)  # [2, B, T, h]
        both = hs[0] + reverse_padded(hs[1], lengths)  # h^f_t + h^b_t, back in word order
        s = torch.relu(self.w_d(self.drop(both)))  # Eq. 6, [B, T, h]
        mask = (
            torch.arange(tokens.shape[1], device=tokens.device)[None, :] < lengths.to(tokens.device)[:, None]
        )
        sentence = torch.arange(tokens.shape[0], device=tokens.device)[:, None].expand_as(mask)
        return PackedWords(s[mask], sentence[mask], lengths.to(tokens.device))
