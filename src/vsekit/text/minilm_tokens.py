"""Word vectors in context from the pretrained MiniLM: the "modern variant" of the BRNN (sec. 3.1.2).

Same interface as :class:`~vsekit.text.brnn.BRNNWordEncoder` (``prepare`` then ``forward`` gives
:class:`~vsekit.text.brnn.PackedWords`), so the S_kl score, the Eq. 9 loss and the MRF are unchanged. The
words of a sentence are the ones the BRNN path uses (:func:`~vsekit.data.vocab.tokenize`); the frozen
all-MiniLM-L6-v2 reads them (``is_split_into_words``), and each word's vector is the mean of the last
hidden states of its word pieces. A trained head maps it to ``s_t``:

    x_t = LayerNorm(mean of the piece states of word t)            384-d, frozen up to here
    s_t = f(W_d f(W_e x_t + b_e) + b_d)      ("mlp", f = ReLU, as Eq. 3 and Eq. 6)
    s_t = W_e x_t + b_e                      ("linear")

With ``finetune_last = N`` the top N transformer layers train with the head (as
:class:`~vsekit.text.pretrained.MiniLMEncoder` tunes them for the joint space): the frozen bottom's piece
states are cached per text, and every forward runs the top layers over them before the pooling per word.

The transformer runs once per distinct sentence (cached per text, float16 ``[n_words, 384]``: only what
the head needs, in a bounded LRU of :data:`CACHE_SIZE` sentences that a trainer widens to its corpus with
:meth:`MiniLMWordEncoder.precompute`); its frozen weights live outside the module tree, so a saved aligner
holds only the head (and the tuned top layers, if any; a packed aligner one set per member, its *towers*).
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Sequence

import torch
from torch import nn
from torch.nn.utils.rnn import pad_sequence
from tqdm.auto import tqdm

from vsekit.data.vocab import tokenize
from vsekit.errors import VsekitError
from vsekit.text.brnn import PackedWords
from vsekit.text.lru import LRUCache
from vsekit.text.pretrained import (
    _Frozen,
    _load_transformer,
    minilm_model_dir,
    run_layers,
    split_top_layers,
)

__all__ = ["CACHE_SIZE", "WORD_HEADS", "MiniLMWordEncoder", "pool_packed", "pool_pieces"]

WORD_HEADS: tuple[str, ...] = ("mlp", "linear")
_DIM = 384  # all-MiniLM-L6-v2 hidden size
_PROGRESS_MIN = 4096
#: Sentences a MiniLMWordEncoder keeps by default (about 9 KB each for a 12-word caption in float16:
#: some 40 MB); :meth:`MiniLMWordEncoder.precompute` widens it to a training corpus.
CACHE_SIZE = 4096


def pool_pieces(states: torch.Tensor, word_ids: Sequence[int | None], n_words: int) -> torch.Tensor:
    """``[n_words, D]``: the mean of the piece states ``states [T, D]`` of each word (``word_ids[t]`` is
    the word of piece ``t``, None for [CLS]/[SEP]/padding). A word with no piece (cut off by truncation)
    gets zeros."""
    index = torch.tensor([-1 if w is None else w for w in word_ids], dtype=torch.int64)
    keep = index >= 0
    sums = states.new_zeros(n_words, states.shape[-1]).index_add_(0, index[keep], states[keep])
    counts = torch.bincount(index[keep], minlength=n_words).clamp(min=1).to(states.dtype)
    return sums / counts[:, None]


def pool_packed(states: torch.Tensor, word_index: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """:func:`pool_pieces` for a padded batch: ``states [B, T, D]``, ``word_index [B, T]`` (the word of
    each piece, -1 for [CLS]/[SEP]/padding) and ``lengths [B]`` words per sentence give the packed
    ``[sum(lengths), D]`` word vectors, sentence then word order."""
    offsets = torch.cumsum(lengths, 0) - lengths
    keep = word_index >= 0
    target = (word_index + offsets[:, None])[keep]
    total = int(lengths.sum())
    sums = states.new_zeros(total, states.shape[-1]).index_add_(0, target, states[keep])
    counts = torch.bincount(target, minlength=total).clamp(min=1).to(states.dtype)
    return sums / counts[:, None]


class MiniLMWordEncoder(nn.Module):
    """MiniLM token states pooled per word, then a trained head to ``hidden_dim`` (``s_t``); the
    transformer frozen, or its top ``finetune_last`` layers trained too."""

    def __init__(
        self,
        hidden_dim: int = 512,
        head: str = "mlp",
        dropout: float = 0.0,
        batch_size: int = 128,
        cache: bool = True,
        cache_half: bool = True,
        cache_size: int = CACHE_SIZE,
        finetune_last: int = 0,
        towers: int = 1,
    ) -> None:
        super().__init__()
        if hidden_dim < 1 or not 0 <= dropout < 1 or batch_size < 1:
            raise ValueError(f"bad MiniLM word sizes: hidden_dim={hidden_dim}, dropout={dropout}")
        if not 0 <= finetune_last <= 6:
            raise ValueError(f"finetune_last must be in [0, 6], got {finetune_last}")
        if towers < 1 or (towers > 1 and not finetune_last):
            raise ValueError(f"towers > 1 (packed tuned members) needs finetune_last > 0, got {towers}")
        if head not in WORD_HEADS:
            raise ValueError(f"unknown MiniLM word head {head!r}; known: {', '.join(WORD_HEADS)}")
        path = minilm_model_dir()
        self.tokenizer, model, self.max_length = _load_transformer(path)
        if int(json.loads((path / "config.json").read_text())["hidden_size"]) != _DIM:
            raise VsekitError(f"{path}: expected a {_DIM}-d MiniLM")
        self._frozen = _Frozen(model)
        self.finetune_last, self.towers = int(finetune_last), int(towers)
        top = split_top_layers(model, self.finetune_last)  # registered: trained and saved
        if top is not None and self.towers > 1:  # one copy of the tuned layers per packed member
            top = nn.ModuleList([copy.deepcopy(layer) for _ in range(self.towers) for layer in top])
        self.layers = top
        self.hidden_dim, self.head_kind, self.dropout_p = int(hidden_dim), head, float(dropout)
        self.batch_size, self.use_cache, self.cache_half = int(batch_size), bool(cache), bool(cache_half)
        self._cache: LRUCache[str, torch.Tensor] = LRUCache(cache_size if self.use_cache else 0)
        self.encoded_count = 0  # sentences that went through the transformer (tests, benchmarks)
        self.norm = nn.LayerNorm(_DIM)
        self.drop = nn.Dropout(self.dropout_p)
        self.w_e = nn.Linear(_DIM * self.towers, self.hidden_dim)
        self.w_d = nn.Linear(self.hidden_dim, self.hidden_dim) if head == "mlp" else None
        if self.w_d is not None:
            with torch.no_grad():  # ReLU units that start alive, as the BRNN does
                self.w_e.bias.fill_(0.1)
                self.w_d.bias.fill_(0.1)

    @property
    def output_dim(self) -> int:
        return self.hidden_dim

    def config(self) -> dict:
        tuned = {"finetune_last": self.finetune_last} if self.finetune_last else {}
        if self.towers > 1:
            tuned["towers"] = self.towers
        return {"kind": "minilm", "head": self.head_kind, "dropout": self.dropout_p} | tuned

    # -- words ----------------------------------------------------------------------------------------

    def words(self, text: str) -> list[str]:
        """The words of ``text`` (the BRNN's tokenisation); an empty sentence is an error."""
        words = tokenize(text)
        if not words:
            raise VsekitError(f"sentence {text!r} has no words to align")
        return words

    def display_words(self, text: str) -> list[str]:
        """The words shown by ``align`` (every word has a vector: word pieces cover any word)."""
        return self.words(text)

    def prepare(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        """Frozen: ``states [n_words, 384]`` (float32, the pooled piece states of every word, packed in
        sentence then word order) and ``lengths [B]``. With ``finetune_last``: the frozen bottom's piece
        states ``[B, T, 384]`` padded, their ``mask`` and ``word_index [B, T]``, and ``lengths``."""
        if isinstance(texts, str):
            raise TypeError("prepare() takes a sequence of texts, not a single string")
        texts = list(texts)
        lengths = torch.tensor([len(self.words(t)) for t in texts], dtype=torch.int64)  # errors first
        items = self._cache.lookup(texts, self._encode)
        if self.finetune_last:
            return self._pad(items) | {"lengths": lengths}
        states = torch.cat(items).float() if items else torch.empty(0, _DIM)
        return {"states": states, "lengths": lengths}

    @staticmethod
    def _pad(items: list[torch.Tensor]) -> dict[str, torch.Tensor]:
        """Cached ``[T, 385]`` rows (piece states, then each piece's word index) as a padded batch."""
        if not items:
            empty = torch.zeros(0, 0, dtype=torch.int64)
            return {"states": torch.zeros(0, 0, _DIM), "mask": empty, "word_index": empty}
        padded = pad_sequence(items, batch_first=True)  # zeros past each caption's pieces
        sizes = torch.tensor([item.shape[0] for item in items])
        mask = (torch.arange(padded.shape[1]) < sizes[:, None]).long()
        word_index = padded[..., _DIM].long().masked_fill(mask == 0, -1)
        return {"states": padded[..., :_DIM].float(), "mask": mask, "word_index": word_index}

    def forward(
        self,
        states: torch.Tensor,
        lengths: torch.Tensor,
        mask: torch.Tensor | None = None,
        word_index: torch.Tensor | None = None,
    ) -> PackedWords:
        if self.layers is not None:
            if mask is None or word_index is None:
                raise ValueError("a tuned MiniLMWordEncoder needs 'mask' and 'word_index' from prepare()")
            states, lengths = states.to(self.w_e.weight.dtype), lengths.to(states.device)
            x = torch.cat([self.norm(pool_packed(run_layers(t, states, mask), word_index, lengths))
                           for t in self._towers()], dim=1)  # fmt: skip
        else:
            x = self.norm(states.to(self.w_e.weight.dtype))
        x = self.drop(x)
        s = self.w_e(x)
        if self.w_d is not None:
            s = torch.relu(self.w_d(self.drop(torch.relu(s))))
        sentence = torch.repeat_interleave(torch.arange(len(lengths), device=s.device), lengths.to(s.device))
        return PackedWords(s, sentence, lengths.to(s.device))

    def _towers(self) -> list[nn.ModuleList]:
        """The tuned layers of each packed member (one member unless packed: :mod:`vsekit.alignment.pack`)."""
        assert self.layers is not None
        n = self.finetune_last
        return [self.layers[k * n : (k + 1) * n] for k in range(self.towers)]

    # -- the frozen part ------------------------------------------------------------------------------

    def _apply(self, fn, recurse: bool = True):  # noqa: ANN001 - nn.Module's own signature
        super()._apply(fn, recurse)
        self._frozen.model._apply(fn)
        return self

    def train(self, mode: bool = True) -> MiniLMWordEncoder:
        super().train(mode)
        self._frozen.model.eval()
        return self

    def precompute(self, texts: Sequence[str], progress: bool = True) -> None:
        """Make the cache room for every distinct text of ``texts`` (a trainer's captions, seen every
        epoch), so no epoch evicts one the next needs. Frozen, they are encoded on first use; with tuned
        top layers all at once, in batches that depend on ``texts`` alone, so a resumed run reads the
        same piece states as an uninterrupted one (see ``MiniLMEncoder.precompute``)."""
        distinct = list(dict.fromkeys(texts))
        self._cache.reserve(len(distinct))
        if self.finetune_last and self.use_cache:
            self._cache.lookup(distinct, functools.partial(self._encode, progress=progress))

    @torch.inference_mode()
    def piece_states(self, texts: list[str]) -> list[tuple[torch.Tensor, list[int | None]]]:
        """For each text: the hidden states of its pieces ``[T, 384]`` (padding dropped) and each piece's
        word index, from the top of the transformer this encoder holds frozen."""
        out = []
        for start in range(0, len(texts), self.batch_size):
            out.extend(self._run(texts[start : start + self.batch_size]))
        return out

    def _run(self, batch: list[str]) -> list[tuple[torch.Tensor, list[int | None]]]:
        model = self._frozen.model
        device = next(model.parameters()).device
        enc = self.tokenizer(
            [self.words(t) for t in batch],
            is_split_into_words=True,
            padding=True,
            truncation=True,
            max_length=self.max_length,
            return_tensors="pt",
        )
        hidden = model(**{k: v.to(device) for k, v in enc.items()}).last_hidden_state.float().cpu()
        real = enc["attention_mask"].sum(dim=1).tolist()  # padding dropped: its pieces belong to no word
        return [(hidden[b, : real[b]], enc.word_ids(b)[: real[b]]) for b in range(len(batch))]

    @torch.inference_mode()
    def _encode(self, texts: list[str], progress: bool = True) -> dict[str, torch.Tensor]:
        """Each text's cached row (:meth:`_cached_row`), batched by length (less padding); a bar past a few
        thousand texts unless ``progress`` is off."""
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out: dict[str, torch.Tensor] = {}
        starts = range(0, len(order), self.batch_size)
        quiet = not progress or len(texts) < _PROGRESS_MIN
        bar = tqdm(starts, desc="MiniLM words", unit="batch", leave=False, disable=quiet)
        for start in bar:
            batch = [texts[i] for i in order[start : start + self.batch_size]]
            for text, (states, word_ids) in zip(batch, self._run(batch), strict=True):
                out[text] = self._cached_row(text, states, word_ids)
        self.encoded_count += len(texts)
        return out

    def _cached_row(self, text: str, states: torch.Tensor, word_ids: list[int | None]) -> torch.Tensor:
        """Frozen: the pooled ``[n_words, 384]``. Tuned top layers: the real pieces' states with each
        piece's word index (-1 for [CLS]/[SEP]) as a last column, ``[T, 385]``."""
        if self.finetune_last:
            index = torch.tensor([-1 if w is None else w for w in word_ids], dtype=states.dtype)
            row = torch.cat([states, index[:, None]], dim=1)
        else:
            row = pool_pieces(states, word_ids, len(self.words(text)))
        return row.half() if self.cache_half else row
