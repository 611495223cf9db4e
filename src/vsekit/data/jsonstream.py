"""Reading a large JSON file one array item at a time (ijson), for the Karpathy and COCO corpus readers.

``json.load`` of COCO's Karpathy file (616K captions, 146 MB) builds every entry as Python objects at
once, about 1 GB at its peak, several times what the corpus keeps (``bench/bench_corpus_memory.py``).
:func:`stream_items` yields the items of one top-level array instead, each dropped once read.

The streaming readers only ever handle well-formed files: :func:`top_level_kinds` tells the caller
what the file's top-level values are (an object holding the arrays it needs, or not), and anything
else, invalid JSON included, goes to the reader over the whole parsed file (:class:`NotStreamable`),
whose errors name the file and line. ijson is in the ``train`` extra (large caption files are training
data); without it every file is read whole, which gives the same corpus with more memory at its peak.

**Deep nesting.** ijson's C parser gives every event the dotted path of its parents, and builds the events
of a whole read buffer at once: ``[[[[...`` 100,000 deep, a 100 KB file, held 10 GB of path strings
before the first event came back. Caption files nest a handful of levels, so a file that nests deeper
than :data:`MAX_DEPTH` is not streamed (:func:`nesting_depth_exceeds`, one pass of NumPy over its bytes
before ijson reads it); the whole-file reader then reports it (``json`` refuses what nests too deeply
with a clear error, and small depths parse as they always have).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

try:
    import ijson
except ImportError:  # pragma: no cover - ijson is in the train extra; without it files are read whole
    ijson = None

__all__ = [
    "STREAM_ERRORS",
    "NotStreamable",
    "available",
    "nesting_depth_exceeds",
    "stream_items",
    "top_level_kinds",
    "top_level_value",
]


class NotStreamable(Exception):
    """The file is not one the streaming reader handles; read it whole instead."""


#: What a streaming read may raise that means "read it whole" (which then reports any real error).
STREAM_ERRORS: tuple[type[BaseException], ...] = (NotStreamable, UnicodeDecodeError, ValueError)
if ijson is not None:
    STREAM_ERRORS = (*STREAM_ERRORS, ijson.JSONError)


def available() -> bool:
    return ijson is not None


def stream_items(path: Path, key: str) -> Iterator[Any]:
    """The items of the array at top-level ``key``, one at a time (check its kind first:
    :func:`top_level_kinds`). Numbers come as int / float, as ``json.load`` gives them."""
    with open(path, "rb") as f:
        yield from ijson.items(f, f"{key}.item", use_float=True)


def top_level_value(path: Path, key: str) -> Any:
    """The value of top-level ``key`` (None when absent); for small values (a name), it is built whole."""
    with open(path, "rb") as f:
        return next(ijson.items(f, key, use_float=True), None)


def has_key(path: Path, key: str) -> bool:
    """Whether the top-level object has ``key``, at the C parser's speed: the first item of an array
    value is enough; any other value (absent, empty, a scalar) is small to build."""
    missing = object()
    for prefix in (f"{key}.item", key):
        with open(path, "rb") as f:
            if next(ijson.items(f, prefix, use_float=True), missing) is not missing:
                return True
    return False


def top_level_kinds(path: Path, keys: Iterable[str], stop_early: bool = True) -> dict[str, str]:
    """``{key: kind}`` for the top-level values of the JSON object in ``path`` (kind: ``array``, ``map``,
    ``string``, ``number``, ``boolean``, ``null``); a key repeated at the top level is refused
    (``json.load`` would keep the last one). ``stop_early``: stop once every one of ``keys`` was seen
    (else read to the end, so that absent keys are known to be absent). Not an object: NotStreamable."""
    if nesting_depth_exceeds(path):
        raise NotStreamable
    wanted, kinds, pending = set(keys), {}, None
    with open(path, "rb") as f:
        events = ijson.parse(f, use_float=True)
        first = next(events, None)
        if first is None or first[1] != "start_map":
            raise NotStreamable
        for prefix, event, value in events:
            if prefix == "" and event == "map_key":
                if value in kinds or "." in value:  # ijson joins nested keys with dots
                    raise NotStreamable
                pending = value
            elif pending is not None and prefix == pending:
                kinds[pending] = _KINDS.get(event, event)
                pending = None
                if stop_early and wanted <= kinds.keys():
                    break
    return kinds


#: Deeper than any caption file nests (Karpathy's and COCO's files: 4 to 6); deeper files are read whole.
MAX_DEPTH = 64
_CHUNK = 1 << 20  # bytes a depth scan holds at once (its arrays: a few times this)
_QUOTE, _BACKSLASH = ord('"'), ord("\\")
_KIND = np.zeros(256, np.int8)  # byte -> 1 opens, -1 closes, 2 quote, 3 backslash, 0 anything else
_KIND[list(b"[{")], _KIND[list(b"]}")], _KIND[_QUOTE], _KIND[_BACKSLASH] = 1, -1, 2, 3


def nesting_depth_exceeds(path: Path, limit: int = MAX_DEPTH) -> bool:
    """Whether the JSON text in ``path`` opens more than ``limit`` arrays or objects inside each other
    (brackets inside strings do not count). Read in chunks of :data:`_CHUNK` bytes; a chunk carries over
    the depth, whether it ends inside a string and how many backslashes end it."""
    stat = path.stat()
    return _exceeds(str(path), stat.st_size, stat.st_mtime_ns, limit)


@functools.lru_cache(maxsize=8)  # a corpus is detected, then read: one scan (keyed by size and mtime)
def _exceeds(path: str, size: int, mtime_ns: int, limit: int, chunk_bytes: int = _CHUNK) -> bool:
    depth, in_string, backslashes = 0, False, 0
    with open(path, "rb") as f:
        while chunk := f.read(chunk_bytes):
            b = np.frombuffer(chunk, np.uint8)
            where = np.flatnonzero(_KIND[b])  # the few bytes that matter: brackets, quotes, backslashes
            kind = _KIND[b[where]]
            escapes = bool(backslashes) or bool((kind == 3).any())
            quotes = _unescaped_quotes(b, backslashes)[where] if escapes else kind == 2
            inside = (np.cumsum(quotes) + in_string) % 2 == 1  # a quote itself is never a bracket
            step = np.where(inside | (kind > 1), 0, kind).astype(np.int64)
            levels = depth + np.cumsum(step)
            if len(levels) and int(levels.max()) > limit:
                return True
            depth = int(levels[-1]) if len(levels) else depth
            in_string = bool(inside[-1]) if len(inside) else in_string
            backslashes = _trailing_backslashes(b, backslashes)
    return False


def _unescaped_quotes(b: np.ndarray, carried: int) -> np.ndarray:
    """Where ``b`` holds a quote that an odd run of backslashes does not escape (``carried``: the
    backslashes that ended the previous chunk)."""
    index = np.arange(len(b))
    last_other = np.maximum.accumulate(np.where(b != _BACKSLASH, index, -1))  # last other byte up to i
    run = np.where(last_other >= 0, index - last_other, index + 1 + carried)  # backslashes ending at i
    before = np.concatenate(([carried], run[:-1]))  # ... ending just before i
    return (b == _QUOTE) & (before % 2 == 0)


def _trailing_backslashes(b: np.ndarray, carried: int) -> int:
    others = np.flatnonzero(b != _BACKSLASH)
    return len(b) - 1 - int(others[-1]) if len(others) else carried + len(b)


_KINDS = {"start_map": "map", "start_array": "array", "integer": "number", "double": "number"}
