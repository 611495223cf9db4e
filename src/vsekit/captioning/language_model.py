"""Interpolated Kneser-Ney trigram language model (Chen & Goodman 1998), used to rerank SC-NLM captions.

Kiros et al. 2014, sec. 5.2: candidate captions are scored by "a Kneser-Ney trigram model ... the
log-probability of the candidate under the model". nltk ships ``nltk.lm.KneserNeyInterpolated``, but it
recomputes counts on every ``score`` call (about a millisecond each): reranking tens of thousands of
candidates would take minutes. The model is small, so it is written out here with every table
precomputed, and everything is derived from the trigram counts alone (that is also what is saved).

With a fixed absolute discount D (0.75 by default), sentences padded as ``<s> <s> w_1 ... w_N </s>``:

    P3(w | u v) = max(c(uvw) - D, 0) / c(uv.)  +  D * N1+(uv.) / c(uv.) * P2(w | v)
    P2(w | v)   = max(N1+(.vw) - D, 0) / N1+(.v.)  +  D * N1+(v.) / N1+(.v.) * P1(w)
    P1(w)       = max(N1+(.w) - D, 0) / N1+(..)  +  D * N1+(.) / N1+(..) / |W|

where the lower orders use continuation counts (N1+(.vw) = how many distinct words precede "v w"), an
unseen context falls back to the next order with weight 1, and the last level interpolates with the
uniform distribution over the |W| predictable words (the vocabulary, ``<unk>`` and ``</s>``; ``<s>`` is
never predicted). Every level sums to one over W, so P3 does too (tested).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np

__all__ = ["BOS", "EOS", "UNK", "KneserNeyTrigramLM"]

BOS, EOS, UNK = "<s>", "</s>", "<unk>"


class KneserNeyTrigramLM:
    """Interpolated Kneser-Ney trigram LM over a fixed word list (other words become ``<unk>``).

    Build with :meth:`fit`; save with :meth:`to_arrays` / rebuild with :meth:`from_arrays`.
    """

    def __init__(
        self, words: Sequence[str], trigram_counts: dict[tuple[int, int, int], int], discount: float = 0.75
    ) -> None:
        if not 0.0 < discount < 1.0:
            raise ValueError(f"discount must be in (0, 1), got {discount}")
        # ids: 0 = <s>, 1 = </s>, 2 = <unk>, then the words (specials given in `words` are skipped).
        self.words: list[str] = [BOS, EOS, UNK] + [w for w in words if w not in (BOS, EOS, UNK)]
        self._ids = {w: i for i, w in enumerate(self.words)}
        self.discount = float(discount)
        self.trigram_counts = dict(trigram_counts)
        self.n_predictable = len(self.words) - 1  # everything but <s>

        d = self.discount
        ctx3_total: Counter[tuple[int, int]] = Counter()  # c(uv.)
        ctx3_types: Counter[tuple[int, int]] = Counter()  # N1+(uv.)
        cont2: Counter[tuple[int, int]] = Counter()  # N1+(.vw)
        for (u, v, w), c in self.trigram_counts.items():
            ctx3_total[(u, v)] += c
            ctx3_types[(u, v)] += 1
            cont2[(v, w)] += 1
        ctx2_total: Counter[int] = Counter()  # N1+(.v.) = sum_w N1+(.vw)
        ctx2_types: Counter[int] = Counter()  # N1+(v.) among continuation bigrams
        cont1: Counter[int] = Counter()  # N1+(.w): distinct bigram types ending in w
        for (v, w), c in cont2.items():
            ctx2_total[v] += c
            ctx2_types[v] += 1
            cont1[w] += 1
        total1 = sum(cont1.values())
        uniform = 1.0 / self.n_predictable
        # P1 as a dense vector (index = word id; <s> gets 0).
        p1 = np.zeros(len(self.words), dtype=np.float64)
        if total1:
            for w, c in cont1.items():
                p1[w] = max(c - d, 0.0) / total1
            p1[1:] += d * len(cont1) / total1 * uniform
        else:
            p1[1:] = uniform
        self._p1 = p1
        self._cont2 = dict(cont2)
        self._ctx2 = {v: (ctx2_total[v], d * ctx2_types[v] / ctx2_total[v]) for v in ctx2_total}
        self._ctx3 = {uv: (ctx3_total[uv], d * ctx3_types[uv] / ctx3_total[uv]) for uv in ctx3_total}

    # -- building ------------------------------------------------------------------------------------

    @classmethod
    def fit(
        cls, sentences: Iterable[Sequence[str]], words: Sequence[str] | None = None, discount: float = 0.75
    ) -> KneserNeyTrigramLM:
        """Count the trigrams of ``sentences`` (token lists); ``words`` fixes the vocabulary (default: all
        words seen). Out-of-vocabulary tokens are counted as ``<unk>``."""
        sentences = [list(s) for s in sentences]
        if words is None:
            words = sorted({w for s in sentences for w in s})
        lm_ids = {
            w: i for i, w in enumerate([BOS, EOS, UNK] + [w for w in words if w not in (BOS, EOS, UNK)])
        }
        counts: Counter[tuple[int, int, int]] = Counter()
        for s in sentences:
            ids = [0, 0, *(lm_ids.get(w, 2) for w in s), 1]
            counts.update(zip(ids, ids[1:], ids[2:], strict=False))
        return cls(words, dict(counts), discount)

    def to_arrays(self) -> tuple[list[str], np.ndarray, np.ndarray]:
        """``(words, trigrams [T, 3] int32 ids, counts [T] int32)``: everything the model is built from."""
        keys = sorted(self.trigram_counts)
        tri = np.asarray(keys, dtype=np.int32).reshape(-1, 3)
        cnt = np.asarray([self.trigram_counts[k] for k in keys], dtype=np.int32)
        return self.words[3:], tri, cnt

    @classmethod
    def from_arrays(
        cls, words: Sequence[str], trigrams: np.ndarray, counts: np.ndarray, discount: float = 0.75
    ) -> KneserNeyTrigramLM:
        """Inverse of :meth:`to_arrays`."""
        tri = np.asarray(trigrams, dtype=np.int64).reshape(-1, 3)
        cnt = np.asarray(counts, dtype=np.int64).reshape(-1)
        table = {
            (int(u), int(v), int(w)): int(c) for (u, v, w), c in zip(tri.tolist(), cnt.tolist(), strict=True)
        }
        return cls(words, table, discount)

    # -- scoring -------------------------------------------------------------------------------------

    def word_id(self, word: str) -> int:
        return self._ids.get(word, 2)

    def _p2(self, v: int, w: int) -> float:
        ctx = self._ctx2.get(v)
        if ctx is None:
            return float(self._p1[w])
        total, backoff = ctx
        return max(self._cont2.get((v, w), 0) - self.discount, 0.0) / total + backoff * float(self._p1[w])

    def _p3(self, u: int, v: int, w: int) -> float:
        ctx = self._ctx3.get((u, v))
        if ctx is None:
            return self._p2(v, w)
        total, backoff = ctx
        return max(self.trigram_counts.get((u, v, w), 0) - self.discount, 0.0) / total + backoff * self._p2(
            v, w
        )

    def prob(self, word: str, context: Sequence[str] = ()) -> float:
        """P(word | last two words of ``context``); a short context is padded with ``<s>``."""
        ctx = [BOS, BOS, *context][-2:]
        return self._p3(self.word_id(ctx[0]), self.word_id(ctx[1]), self.word_id(word))

    def logprob(self, tokens: Sequence[str]) -> float:
        """Natural-log probability of the whole sentence, ``</s>`` included."""
        ids = [0, 0, *(self.word_id(w) for w in tokens), 1]
        return sum(math.log(self._p3(u, v, w)) for u, v, w in zip(ids, ids[1:], ids[2:], strict=False))

    def perplexity(self, sentences: Iterable[Sequence[str]]) -> float:
        """Per-token perplexity (``</s>`` counted as a token)."""
        total, n = 0.0, 0
        for s in sentences:
            total += self.logprob(s)
            n += len(s) + 1
        return math.exp(-total / max(n, 1))

    def __repr__(self) -> str:
        n_words, n_tri = len(self.words) - 3, len(self.trigram_counts)
        return f"KneserNeyTrigramLM({n_words} words, {n_tri} trigrams, D={self.discount})"
