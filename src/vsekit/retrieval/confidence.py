"""Confidence of a text search: "no photo matches well" and "this query is not English" (issue 22 item 6).

A joint embedding always returns its nearest photos, even for "a cat" in a collection without cats or for
"zzzz qqqq": the scores are merely low. :func:`is_weak` says so when the best score is below a threshold
calibrated per model (``ship/calibrate_confidence.py``: the threshold that maximises F1 of "has a good
match" on a slice of Flickr8K train photos, never dev), shipped next to the model as
``<model>-confidence.json`` and found by :func:`load_confidence` only for the exact model file it was made
for (sha256). The text encoders read English; :func:`language_warning` flags a query written in another
script, or whose words are mostly not among the English words of the training captions.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from vsekit.resources import pinned_sidecar

__all__ = ["CONFIDENCE_FORMAT", "Confidence", "is_weak", "language_warning", "load_confidence"]

CONFIDENCE_FORMAT = "vsekit.search-confidence"
#: Below this share of known words (or of Latin letters), a query is flagged as probably not English.
KNOWN_SHARE = 0.5
_WORD = re.compile(r"[^\W\d_]+")


@dataclass(frozen=True)
class Confidence:
    """A model's calibrated threshold (``weak_below``) and the English words its queries are checked
    against."""

    weak_below: float
    english_words: frozenset[str]


@functools.lru_cache(maxsize=16)  # read once per model file (4,482 words), not on every search
def load_confidence(model: str, model_sha256: str) -> Confidence | None:
    """The shipped calibration of model ``model`` (a shipped name such as ``vse``), or None when there is
    none or it was made for another file than the one with ``model_sha256`` (then no search is called
    weak: an uncalibrated threshold would be noise)."""
    data = pinned_sidecar(model, model_sha256, "confidence", CONFIDENCE_FORMAT)
    if data is None:
        return None
    return Confidence(float(data["weak_below"]), frozenset(data.get("english_words", ())))


def is_weak(scores: Sequence[float] | np.ndarray, threshold: float) -> bool:
    """True when no score reaches ``threshold``: the search found nothing that matches well (an empty
    result list is weak too)."""
    values = np.asarray(scores, dtype=np.float64)
    return values.size == 0 or float(values.max()) < threshold


def language_warning(text: str, english_words: frozenset[str]) -> str | None:
    """Why ``text`` is probably not English (one line), or None.

    Flagged when most of its letters are not Latin (Japanese, Cyrillic, Greek, ...), or when fewer than
    half of its words are among ``english_words`` (the words of the captions the model learnt from).
    """
    letters = [c for c in text if c.isalpha()]
    if not letters:
        return None
    latin = sum(unicodedata.name(c, "").startswith("LATIN") for c in letters)
    if latin / len(letters) < KNOWN_SHARE:
        return "the query is not in the Latin alphabet; the text encoder reads English only"
    words = _WORD.findall(text.lower())
    if not english_words or not words:
        return None
    known = sum(w in english_words for w in words)
    if known / len(words) < KNOWN_SHARE:
        return (
            f"only {known} of {len(words)} words of the query are English words the model knows; "
            "the text encoder reads English only"
        )
    return None
