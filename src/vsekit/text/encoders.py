"""Sentence encoders that map a caption into the joint space (Kiros et al. 2014, sec. 2.1-2.2).

Every encoder is an ``nn.Module`` with one small interface, so that the joint model, the trainer and the
evaluation never care which one they hold:

* ``output_dim``: K, the size of the joint space;
* ``prepare(texts)``: tokenisation and padding into CPU tensors, outside autograd (the trainer moves them
  to the device);
* ``forward(**prepared)``: ``[B, K]`` sentence vectors, *not* normalised (the joint model normalises both
  modalities, so the score is the cosine, Kiros et al. sec. 2.2);
* ``config()``: JSON-able kwargs, including ``name``, that rebuild the same architecture with
  ``build_text_encoder(**config, vocab=vocab)``.

Two encoders live here:

* :class:`RNNEncoder` (GRU or LSTM): the sentence vector is the last hidden state ``m_N`` after reading
  the words one by one (Kiros sec. 2.2; Vilalta et al. 2017 sec. 3.2 use a GRU). Sequences are packed,
  so padding never enters the recurrence.
* :class:`BagOfWordsEncoder`: the linear encoder ``v = sum_i w_i`` of Kiros sec. 3.2, whose additivity is
  what makes multimodal vector arithmetic (Eq. 12-15) work.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence

from vsekit.data.vocab import Vocabulary

__all__ = [
    "BagOfWordsEncoder",
    "RNNEncoder",
    "TextEncoder",
    "init_from_glove",
    "no_pretrained_init",
    "pretrained_init_enabled",
    "word_table",
]

_PRETRAINED_INIT: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "vsekit_pretrained_init", default=True
)


@contextlib.contextmanager
def no_pretrained_init() -> Iterator[None]:
    """Build encoders without reading pretrained vectors (GloVe): their weights are about to be loaded.

    ``load_model`` rebuilds an encoder from its config and then overwrites every weight from the file;
    reading GloVe first would waste time and, worse, fail where the GloVe package is not installed.
    """
    token = _PRETRAINED_INIT.set(False)
    try:
        yield
    finally:
        _PRETRAINED_INIT.reset(token)


def pretrained_init_enabled() -> bool:
    """False inside :func:`no_pretrained_init` (encoders should then skip loading pretrained weights)."""
    return _PRETRAINED_INIT.get()


def init_from_glove(embed: nn.Embedding, vocab: Vocabulary) -> float:
    """Overwrite the rows of ``embed`` (``[V, 50]``) for words GloVe knows; return the coverage.

    Rows of unknown words keep their random initialisation; <pad> is never overwritten. The coverage is
    the fraction of the regular words (the 4 specials excluded) that GloVe knows.
    """
    from vsekit.text.glove import glove_lookup

    vectors, found = glove_lookup(vocab.words)
    found[vocab.pad_id] = False
    with torch.no_grad():
        rows = torch.from_numpy(np.flatnonzero(found))
        embed.weight[rows] = torch.from_numpy(vectors[found]).to(embed.weight.dtype)
    n_special = 4  # <pad>, <unk>, <start>, <end> never count towards coverage
    n_regular = len(vocab) - n_special
    return float(found[n_special:].sum()) / n_regular if n_regular else 0.0


def word_table(vocab: Vocabulary, dim: int, glove: bool, freeze: bool) -> tuple[nn.Embedding, float | None]:
    """An encoder's word vectors ``[V, dim]``: uniform in +-0.1 with a zero <pad> row, then (``glove``, and
    pretrained initialisation on) GloVe's vector for every word it knows, frozen with ``freeze``. Returns
    the table and the GloVe coverage (None without GloVe)."""
    embed = nn.Embedding(len(vocab), dim, padding_idx=vocab.pad_id)
    nn.init.uniform_(embed.weight, -0.1, 0.1)
    with torch.no_grad():
        embed.weight[vocab.pad_id].zero_()
    coverage = init_from_glove(embed, vocab) if glove and pretrained_init_enabled() else None
    embed.weight.requires_grad_(not freeze)
    return embed, coverage


class TextEncoder(nn.Module):
    """The interface of every sentence encoder (see the module docstring)."""

    name: str = "base"
    output_dim: int

    def prepare(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    # called with prepare()'s dict as keywords; each encoder names the keys it takes as its parameters
    # (``*args: Any, **prepared: Any`` is the signature any such override is compatible with)
    def forward(self, *args: Any, **prepared: Any) -> torch.Tensor:
        raise NotImplementedError

    def config(self) -> dict:
        raise NotImplementedError

    def precompute(
        self, texts: Sequence[str], cache_root: str | os.PathLike[str] | None = None, progress: bool = False
    ) -> None:
        """Compute (or read from the disk cache under ``cache_root``) what ``prepare`` needs for ``texts``
        that is costly and fixed, once per corpus: the trainer calls it with the training and dev captions.

        Only the Tree-LSTM (dependency parses) has anything to do; for the others this does nothing.
        """
        del texts, cache_root, progress

    def share_frozen(self, other: TextEncoder) -> None:
        """Use ``other``'s frozen, untrained parts instead of this encoder's own copy (ensembles).

        Only encoders that hold something frozen outside their trained weights (the pretrained MiniLM and
        its per-text cache) have anything to share; for the others this does nothing.
        """
        del other


def _token_ids(vocab: Vocabulary, text: str) -> list[int]:
    """Word ids of a caption; a caption with no word left after tokenisation reads as one <unk>.

    An empty sequence has no last hidden state (and ``pack_padded_sequence`` refuses length 0); a query
    such as "!!!" is better answered as "some unknown word" than with an error.
    """
    return vocab.encode_text(text) or [vocab.unk_id]


class RNNEncoder(TextEncoder):
    """GRU/LSTM sentence encoder: the final hidden state of the last layer is the sentence vector.

    Word vectors: a ``[V, word_dim]`` table, uniform(-0.1, 0.1) at random (as VSE++), or with
    ``glove=True`` a ``[V, 50]`` table whose rows for words GloVe knows are the GloVe 6B/50d vectors
    (Kiros et al. initialise W_T from pretrained vectors); if ``word_dim != 50`` a learned linear layer
    (no bias) maps 50 -> word_dim. ``freeze_words=True`` keeps the table fixed, as Kiros et al. do
    (footnote 3); the projection, if any, is still trained. The GloVe coverage of the vocabulary is kept
    in ``glove_coverage``.
    """

    def __init__(
        self,
        vocab: Vocabulary,
        cell: str = "gru",
        word_dim: int = 300,
        hidden_dim: int = 1024,
        num_layers: int = 1,
        glove: bool = False,
        freeze_words: bool = False,
    ) -> None:
        super().__init__()
        if cell not in ("gru", "lstm"):
            raise ValueError(f"cell must be 'gru' or 'lstm', got {cell!r}")
        if word_dim < 1 or hidden_dim < 1 or num_layers < 1:
            raise ValueError(
                f"word_dim, hidden_dim and num_layers must be >= 1 "
                f"(got {word_dim}, {hidden_dim}, {num_layers})"
            )
        from vsekit.text.glove import GLOVE_DIM

        self.vocab = vocab
        self.name = cell
        self.word_dim, self.hidden_dim, self.num_layers = int(word_dim), int(hidden_dim), int(num_layers)
        self.glove, self.freeze_words = bool(glove), bool(freeze_words)
        self.output_dim = self.hidden_dim
        self.glove_coverage: float | None = None

        table_dim = GLOVE_DIM if self.glove else self.word_dim
        self.embed, self.glove_coverage = word_table(vocab, table_dim, self.glove, self.freeze_words)
        self.word_proj = (
            nn.Linear(table_dim, self.word_dim, bias=False) if table_dim != self.word_dim else nn.Identity()
        )
        rnn = nn.GRU if cell == "gru" else nn.LSTM
        self.rnn = rnn(self.word_dim, self.hidden_dim, num_layers=self.num_layers, batch_first=True)

    def prepare(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        """``tokens`` ``[B, T]`` padded with <pad> and ``lengths`` ``[B]`` (CPU int64)."""
        ids = [_token_ids(self.vocab, t) for t in texts]
        lengths = torch.tensor([len(x) for x in ids], dtype=torch.int64)
        tokens = torch.full((len(ids), max(map(len, ids), default=0)), self.vocab.pad_id, dtype=torch.int64)
        for row, x in enumerate(ids):
            tokens[row, : len(x)] = torch.tensor(x, dtype=torch.int64)
        return {"tokens": tokens, "lengths": lengths}

    def forward(self, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        x = self.word_proj(self.embed(tokens))  # [B, T, word_dim]
        # Packing runs each sentence for exactly its own length: the state after word N is m_N (Kiros
        # sec. 2.2), untouched by the padding that follows it in the batch.
        packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        _, state = self.rnn(packed)
        h_n = state[0] if isinstance(state, tuple) else state  # LSTM returns (h_n, c_n)
        return h_n[-1]  # [B, hidden_dim]: last layer, back in the caller's batch order

    def config(self) -> dict:
        return {
            "name": self.name,
            "word_dim": self.word_dim,
            "hidden_dim": self.hidden_dim,
            "num_layers": self.num_layers,
            "glove": self.glove,
            "freeze_words": self.freeze_words,
        }


class BagOfWordsEncoder(TextEncoder):
    """The linear encoder of Kiros et al. sec. 3.2: ``v = sum_i w_i``, no nonlinearity, no bias.

    Because ``v`` is a plain sum, ``v(blue car) - w_blue + w_red = v(red car)`` exactly, which is what
    Eq. 12-15 rely on. The word vectors live in the joint space (``[V, K]``), so a single word is also a
    query: :meth:`word_vectors`.
    """

    name = "bow"

    def __init__(self, vocab: Vocabulary, output_dim: int = 1024) -> None:
        super().__init__()
        if output_dim < 1:
            raise ValueError(f"output_dim must be >= 1, got {output_dim}")
        self.vocab = vocab
        self.output_dim = int(output_dim)
        self.embed = nn.EmbeddingBag(len(vocab), self.output_dim, mode="sum", padding_idx=vocab.pad_id)
        nn.init.uniform_(self.embed.weight, -0.1, 0.1)
        with torch.no_grad():
            self.embed.weight[vocab.pad_id].zero_()

    def prepare(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        """All word ids in one flat ``tokens`` tensor and each sentence's start in ``offsets``."""
        ids = [_token_ids(self.vocab, t) for t in texts]
        lengths = [len(x) for x in ids]
        offsets = torch.tensor([0, *np.cumsum(lengths)[:-1].tolist()] if ids else [], dtype=torch.int64)
        tokens = torch.tensor([i for x in ids for i in x], dtype=torch.int64)
        return {"tokens": tokens, "offsets": offsets}

    def forward(self, tokens: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        return self.embed(tokens, offsets)  # [B, K] = sum of the word vectors of each sentence

    def word_vectors(self, words: Sequence[str]) -> torch.Tensor:
        """Unnormalised joint-space vectors of single words (unknown words give the <unk> vector)."""
        ids = torch.tensor([self.vocab.index(w) for w in words], dtype=torch.int64)
        return self.embed.weight[ids.to(self.embed.weight.device)]

    def config(self) -> dict:
        return {"name": self.name, "output_dim": self.output_dim}
