"""CIDEr-D of many candidate captions at once, against references prepared once: the reward of
self-critical sequence training (Rennie et al. 2017), where every training step scores hundreds of sampled
captions.

The numbers are pycocoevalcap's ``CiderScorer`` (CIDEr-D: TF-IDF n-gram vectors, n = 1..4, candidate
counts clipped to the reference's, Gaussian length penalty with sigma 6, mean over references, x 10),
with one difference that SCST needs: the document frequencies are fixed when the scorer is built, from
``df_references`` (the training captions; Rennie et al. compute them on the training set), instead of
from the references of whatever images are being scored. Built with ``df_references=None`` the document
frequencies come from ``references`` themselves, which is exactly pycocoevalcap's score of a set of those
images (tested against it).

Captions are sequences of non-negative word ids. An n-gram is an int64 key (its ids + 1 as digits in
base ``max id + 2``), so counting, IDF look-up and the clipped dot products are sorts, ``searchsorted``
and scatter-adds over whole batches: no Python loop per caption. ``bench/bench_scst.py`` times it against
the per-caption scorer.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import torch

from vsekit.errors import VsekitError

__all__ = ["CiderD"]

_MAX = torch.iinfo(torch.int64).max  # padding key: sorts after every real n-gram


def _ngram_keys(tokens: torch.Tensor, lengths: torch.Tensor, base: int, n_max: int) -> torch.Tensor:
    """Keys of every n-gram (n = 1..n_max) of each row of ``tokens [S, T]`` (valid up to ``lengths``);
    ``[S, K]`` with invalid positions set to ``_MAX``."""
    s, t = tokens.shape
    digits = tokens.long() + 1
    out = []
    for n in range(1, n_max + 1):
        if t < n:
            break
        key = torch.zeros(s, t - n + 1, dtype=torch.long)
        for k in range(n):  # Horner: ((d1 * b + d2) * b + d3) ...
            key = key * base + digits[:, k : t - n + 1 + k]
        valid = torch.arange(t - n + 1)[None, :] + n <= lengths[:, None]
        out.append(torch.where(valid, key, _MAX))
    return torch.cat(out, dim=1) if out else torch.full((s, 0), _MAX, dtype=torch.long)


def _count(keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Distinct keys per row and their counts: ``(unique [S, K], tf [S, K])``, padding ``_MAX`` / 0."""
    s, k = keys.shape
    ordered, _ = keys.sort(dim=1)
    valid = ordered != _MAX
    first = valid.clone()
    first[:, 1:] &= ordered[:, 1:] != ordered[:, :-1]
    run = first.long().cumsum(dim=1) - 1  # index of the run each position belongs to
    slot = torch.where(valid, run, k)  # invalid positions go to a spare column, dropped below
    tf = torch.zeros(s, k + 1).scatter_add_(1, slot, valid.float())[:, :k]
    unique = torch.full((s, k + 1), _MAX, dtype=torch.long)
    unique.scatter_(1, torch.where(first, run, k), ordered)
    return unique[:, :k], tf


def _lookup(sorted_keys: torch.Tensor, values: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
    """``values`` at the position of each ``query`` key in ``sorted_keys`` (rows matched when both are
    2-D), 0 where the key is absent."""
    if sorted_keys.shape[-1] == 0:
        return torch.zeros(query.shape, dtype=values.dtype)
    query = query.contiguous()
    pos = torch.searchsorted(sorted_keys, query).clamp_max(sorted_keys.shape[-1] - 1)
    if sorted_keys.ndim == 1:
        found, got = sorted_keys[pos] == query, values[pos]
    else:
        found, got = sorted_keys.gather(-1, pos) == query, values.gather(-1, pos)
    return torch.where(found & (query != _MAX), got, torch.zeros((), dtype=values.dtype))


class CiderD:
    """CIDEr-D scorer over a fixed set of images' references (``references[i]``: image i's captions, each
    a sequence of word ids). ``df_references`` (default: ``references``) gives the document frequencies;
    ``max_id`` is the largest id a candidate may hold (default: the largest in the references)."""

    def __init__(
        self,
        references: Sequence[Sequence[Sequence[int]]],
        df_references: Sequence[Sequence[Sequence[int]]] | None = None,
        n: int = 4,
        sigma: float = 6.0,
        max_id: int | None = None,
    ) -> None:
        if not references or any(len(refs) == 0 for refs in references):
            raise VsekitError("CIDEr-D needs at least one reference caption for every image")
        self.n, self.sigma = n, sigma
        df_refs = references if df_references is None else df_references
        top = max(
            max((max(r, default=0) for refs in rs for r in refs), default=0) for rs in (references, df_refs)
        )
        self.max_id = int(max(top, max_id or 0))  # the largest word id a candidate may use
        self.base = self.max_id + 2
        if self.base**n >= 2**62:
            raise VsekitError(f"CIDEr-D: word ids up to {top} do not fit {n}-gram keys in 64 bits")
        self._df_keys, self._df = self._document_frequencies(df_refs)
        self.ref_len = math.log(float(len(df_refs)))  # pycocoevalcap: log(number of images)
        self._prepare(references)

    # -- set-up -------------------------------------------------------------------------------------

    def _keys_of(self, captions: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        width = max((len(c) for c in captions), default=0)
        tokens = torch.zeros(len(captions), max(width, 1), dtype=torch.long)
        for row, c in enumerate(captions):
            if any(w < 0 for w in c):
                raise VsekitError("CIDEr-D: word ids must be non-negative")
            tokens[row, : len(c)] = torch.as_tensor(list(c), dtype=torch.long)
        lengths = torch.tensor([len(c) for c in captions], dtype=torch.long)
        return _ngram_keys(tokens, lengths, self.base, self.n), lengths

    def _document_frequencies(
        self, refs: Sequence[Sequence[Sequence[int]]]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Sorted n-gram keys and in how many images' reference sets each occurs."""
        df: Counter[int] = Counter()
        for image_refs in refs:
            keys, _ = self._keys_of(image_refs)
            present = keys.unique()
            df.update(present[present != _MAX].tolist())
        keys = torch.tensor(sorted(df), dtype=torch.long)
        return keys, torch.tensor([df[k] for k in keys.tolist()], dtype=torch.float64)

    def _vectors(self, keys: torch.Tensor, lengths: torch.Tensor):
        """TF-IDF vectors of captions: distinct keys, weights, n-gram order (0-based), norms per order and
        the length pycocoevalcap uses (the number of bigrams)."""
        unique, tf = _count(keys)
        df = _lookup(self._df_keys, self._df, unique)
        weight = tf.double() * (self.ref_len - torch.log(df.clamp_min(1.0)))
        weight = torch.where(unique != _MAX, weight, torch.zeros((), dtype=torch.float64))
        order = torch.zeros_like(unique)
        for k in range(1, self.n):
            order += (unique >= self.base**k).long()
        order = torch.where(unique != _MAX, order, 0)
        norm2 = torch.zeros(unique.shape[0], self.n, dtype=torch.float64).scatter_add_(1, order, weight**2)
        return unique, weight, order, norm2.sqrt(), (lengths - 1).clamp_min(0).double()

    def _prepare(self, references: Sequence[Sequence[Sequence[int]]]) -> None:
        flat = [r for refs in references for r in refs]
        keys, lengths = self._keys_of(flat)
        unique, weight, _, norm, length = self._vectors(keys, lengths)
        self._ref_keys, self._ref_w, self._ref_norm, self._ref_length = unique, weight, norm, length
        most = max(len(refs) for refs in references)
        self._image_refs = torch.full((len(references), most), -1, dtype=torch.long)
        start = 0
        for i, refs in enumerate(references):
            self._image_refs[i, : len(refs)] = torch.arange(start, start + len(refs))
            start += len(refs)

    @property
    def n_images(self) -> int:
        return self._image_refs.shape[0]

    # -- scoring ------------------------------------------------------------------------------------

    def score(self, images: torch.Tensor, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """CIDEr-D (pycocoevalcap scale: x10, not x100) of each candidate: row ``s`` of ``tokens [S, T]``
        (its first ``lengths[s]`` ids) against the references of image ``images[s]``; float64 ``[S]``."""
        images, lengths = images.long().cpu(), lengths.long().cpu()
        if images.numel() and (int(images.min()) < 0 or int(images.max()) >= self.n_images):
            raise VsekitError(f"CIDEr-D: image index out of range (scorer holds {self.n_images} images)")
        tokens = tokens.long().cpu()
        real = torch.arange(tokens.shape[1])[None, :] < lengths[:, None]
        if bool(((tokens < 0) | (tokens > self.max_id))[real].any()):
            raise VsekitError(
                f"CIDEr-D: candidate word ids must be in 0..{self.max_id} (the scorer's max_id)"
            )
        keys = _ngram_keys(tokens, lengths, self.base, self.n)
        unique, hyp_w, order, hyp_norm, hyp_len = self._vectors(keys, lengths)
        refs = self._image_refs[images]  # [S, R], -1 = none
        has_ref = refs >= 0
        r = refs.clamp_min(0)
        s, width = refs.shape
        ref_keys = self._ref_keys[r].view(s * width, -1)
        ref_w = self._ref_w[r].view(s * width, -1)
        query = unique.repeat_interleave(width, dim=0)  # [S*R, K]
        matched = _lookup(ref_keys, ref_w, query).view(s, width, -1)  # the reference's weight of each key
        clipped = torch.minimum(hyp_w[:, None, :], matched) * matched  # min(vec_hyp, vec_ref) * vec_ref
        val = torch.zeros(s, width, self.n, dtype=torch.float64)
        val.scatter_add_(2, order[:, None, :].expand(-1, width, -1), clipped)
        norms = hyp_norm[:, None, :] * self._ref_norm[r]
        val = torch.where(norms != 0, val / torch.where(norms != 0, norms, 1.0), val)
        delta = hyp_len[:, None] - self._ref_length[r]
        val = val * torch.exp(-(delta**2) / (2 * self.sigma**2))[..., None]
        per_ref = torch.where(has_ref, val.mean(dim=2), 0.0)
        return per_ref.sum(dim=1) / has_ref.sum(dim=1) * 10.0
