"""How varied a set of generated captions is, and the usual failures of CIDEr optimisation.

Fine-tuning a captioner for CIDEr (self-critical training) is known to shrink its language: fewer distinct
captions, a smaller vocabulary, and endings that pad for n-gram matches ("... in front of a a", "... with a").
These numbers are logged beside the scores so such a drift is seen, not only the score going up.
"""

from __future__ import annotations

from collections.abc import Iterable

from vsekit.data.vocab import tokenize

__all__ = ["DANGLING_WORDS", "caption_diversity"]

#: Words a well-formed English caption does not end with (articles, prepositions, conjunctions).
DANGLING_WORDS = frozenset(
    "a an the and or of with in on at to for from by into onto near while his her their its".split()
)


def caption_diversity(captions: Iterable[str]) -> dict[str, float]:
    """``mean_words``; ``distinct_pct`` (share of distinct captions); ``vocab_used`` (distinct words);
    ``repeat_end_pct`` (captions whose last two words are the same word, "a a"); ``dangling_end_pct``
    (captions ending in an article, preposition or conjunction). Percentages of the captions, x100."""
    token_lists = [tokenize(c) for c in captions]
    n = len(token_lists)
    if n == 0:
        return {"mean_words": 0.0, "distinct_pct": 0.0, "vocab_used": 0.0, "repeat_end_pct": 0.0,
                "dangling_end_pct": 0.0}  # fmt: skip
    repeat = sum(len(t) >= 2 and t[-1] == t[-2] for t in token_lists)
    dangling = sum(bool(t) and t[-1] in DANGLING_WORDS for t in token_lists)
    return {
        "mean_words": sum(map(len, token_lists)) / n,
        "distinct_pct": 100.0 * len({" ".join(t) for t in token_lists}) / n,
        "vocab_used": float(len({w for t in token_lists for w in t})),
        "repeat_end_pct": 100.0 * repeat / n,
        "dangling_end_pct": 100.0 * dangling / n,
    }
