"""Tokenizer and word vocabulary for captions.

The tokenizer follows Karpathy's preprocessing of the Flickr8K/30K/COCO splits (lower-case, whitespace
split, punctuation removed), so token counts and vocabulary sizes are comparable with published numbers.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from vsekit.data.corpus import Corpus
from vsekit.errors import CorpusError
from vsekit.fileio import atomic_write_json

__all__ = ["PAD", "UNK", "START", "END", "SPECIALS", "Vocabulary", "build_vocabulary", "tokenize"]

PAD, UNK, START, END = "<pad>", "<unk>", "<start>", "<end>"
SPECIALS: tuple[str, ...] = (PAD, UNK, START, END)
_FORMAT_VERSION = 1

# \W is "not a word character" (Unicode-aware); "_" is a word character but not alphanumeric.
_NON_ALNUM = re.compile(r"[\W_]+")


def tokenize(text: str) -> list[str]:
    """Lower-case, split on whitespace, strip non-alphanumerics ("t-shirt" -> "tshirt"), drop empties."""
    tokens = (_NON_ALNUM.sub("", token) for token in text.lower().split())
    return [token for token in tokens if token]


class Vocabulary:
    """Word <-> id mapping with fixed specials: <pad>=0, <unk>=1, <start>=2, <end>=3.

    `counts` keeps each word's training frequency (e.g. to initialise an output bias to log-frequency).
    """

    pad_id, unk_id, start_id, end_id = 0, 1, 2, 3

    def __init__(self, words: Sequence[str], counts: dict[str, int] | None = None) -> None:
        """Build from regular words in id order (ids start after the specials)."""
        self._itos: list[str] = list(SPECIALS) + list(words)
        self._stoi: dict[str, int] = {}
        for i, word in enumerate(self._itos):
            if word in self._stoi:
                raise ValueError(f"vocabulary word {word!r} appears twice (ids {self._stoi[word]} and {i})")
            self._stoi[word] = i
        counts = counts or {}
        self.counts: dict[str, int] = {word: int(counts.get(word, 0)) for word in words}

    @classmethod
    def build(
        cls, token_lists: Iterable[Sequence[str]], min_count: int = 1, max_size: int | None = None
    ) -> Vocabulary:
        """Most frequent words first, ties alphabetical (deterministic across runs and machines).

        `min_count` drops rare words; `max_size` caps the regular words (specials not counted).
        """
        if min_count < 1:
            raise ValueError(f"min_count must be >= 1, got {min_count}")
        if max_size is not None and max_size < 0:
            raise ValueError(f"max_size must be >= 0, got {max_size}")
        counter: Counter[str] = Counter()
        for tokens in token_lists:
            counter.update(tokens)
        for special in SPECIALS:
            counter.pop(special, None)
        ranked = sorted((w for w, c in counter.items() if c >= min_count), key=lambda w: (-counter[w], w))
        if max_size is not None:
            ranked = ranked[:max_size]
        return cls(ranked, {w: counter[w] for w in ranked})

    # -- lookup --------------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._itos)

    def __contains__(self, word: object) -> bool:
        return word in self._stoi

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Vocabulary):
            return NotImplemented
        return self._itos == other._itos and self.counts == other.counts

    def __repr__(self) -> str:
        return f"Vocabulary({len(self)} entries: {len(SPECIALS)} specials + {len(self.counts)} words)"

    @property
    def words(self) -> list[str]:
        """All entries in id order, specials included."""
        return list(self._itos)

    def index(self, word: str) -> int:
        """The id of `word`; the <unk> id for an unknown word (as `encode` does)."""
        return self._stoi.get(word, self.unk_id)

    def word(self, i: int) -> str:
        """The word with id `i`."""
        if not 0 <= i < len(self._itos):
            raise IndexError(f"vocabulary id {i} out of range 0..{len(self._itos) - 1}")
        return self._itos[i]

    def counts_by_index(self) -> list[int]:
        """Training frequency per id (0 for specials), aligned with the ids."""
        return [self.counts.get(w, 0) if i >= len(SPECIALS) else 0 for i, w in enumerate(self._itos)]

    def encode(self, tokens: Iterable[str], add_start_end: bool = False) -> list[int]:
        """Ids for `tokens` (unknown -> <unk>); optionally wrapped in <start> ... <end>."""
        ids = [self._stoi.get(token, self.unk_id) for token in tokens]
        return [self.start_id, *ids, self.end_id] if add_start_end else ids

    def encode_text(self, text: str, add_start_end: bool = False) -> list[int]:
        """`encode(tokenize(text))`: the one path from raw caption to ids."""
        return self.encode(tokenize(text), add_start_end=add_start_end)

    def decode(self, ids: Iterable[int], strip_special: bool = True) -> list[str]:
        """Words for `ids`; `strip_special` drops <pad>, <start> and <end> (<unk> stays: it held a word)."""
        drop = {self.pad_id, self.start_id, self.end_id} if strip_special else set()
        return [self.word(int(i)) for i in ids if int(i) not in drop]

    # -- persistence ---------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form: specials, regular words in id order, and their counts."""
        words = self._itos[len(SPECIALS) :]
        return {
            "version": _FORMAT_VERSION,
            "specials": list(SPECIALS),
            "words": words,
            "counts": [self.counts.get(w, 0) for w in words],
        }

    @classmethod
    def from_dict(cls, data: Any, source: str = "vocabulary") -> Vocabulary:
        """Inverse of `to_dict`; a malformed dict raises CorpusError naming `source` and the field."""
        if not isinstance(data, dict):
            raise CorpusError(f"{source}: expected a JSON object, found {type(data).__name__}")
        if data.get("version") != _FORMAT_VERSION:
            raise CorpusError(
                f"{source}: field 'version' is {data.get('version')!r}, expected {_FORMAT_VERSION}"
            )
        if data.get("specials") != list(SPECIALS):
            raise CorpusError(
                f"{source}: field 'specials' is {data.get('specials')!r}, expected {list(SPECIALS)}"
            )
        words, counts = data.get("words"), data.get("counts")
        if not isinstance(words, list) or not all(isinstance(w, str) and w for w in words):
            raise CorpusError(f"{source}: field 'words' must be a list of non-empty strings")
        if not isinstance(counts, list) or len(counts) != len(words):
            raise CorpusError(f"{source}: field 'counts' must be a list as long as 'words' ({len(words)})")
        if not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in counts):
            raise CorpusError(f"{source}: field 'counts' must hold non-negative integers")
        try:
            return cls(words, dict(zip(words, counts, strict=True)))
        except ValueError as e:
            raise CorpusError(f"{source}: field 'words': {e}") from None

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write JSON atomically (temp file + os.replace) so a crash never leaves half a vocabulary."""
        atomic_write_json(path, self.to_dict(), ensure_ascii=False)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Vocabulary:
        """Read a file written by `save`; a missing or malformed file raises CorpusError naming it."""
        path = Path(path)
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except FileNotFoundError:
            raise CorpusError(f"{path}: vocabulary file does not exist") from None
        except json.JSONDecodeError as e:
            raise CorpusError(f"{path}:{e.lineno}: invalid vocabulary JSON: {e.msg}") from None
        except UnicodeDecodeError as e:
            raise CorpusError(f"{path}: not UTF-8 text ({e.reason})") from None
        return cls.from_dict(data, source=str(path))


def build_vocabulary(
    corpus: Corpus, split: str = "train", min_count: int = 1, max_size: int | None = None
) -> Vocabulary:
    """Vocabulary from the captions of one split only (default "train").

    Dev/test words must not enter the vocabulary: otherwise their embeddings exist (trained or not) and
    evaluation sees fewer <unk>s than a model facing new text would, which flatters the scores.
    """
    subset = corpus.split(split)
    return Vocabulary.build((tokenize(c.text) for c in subset.captions), min_count, max_size)
