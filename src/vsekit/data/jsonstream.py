"""Reading a large JSON file one array item at a time (ijson), for the Karpathy and COCO corpus readers.

``json.load`` of COCO's Karpathy file (616K captions, 146 MB) builds every entry as Python objects at
once, about 1 GB at its peak, several times what the corpus keeps (``bench/bench_corpus_memory.py``).
:func:`stream_items` yields the items of one top-level array instead, each dropped once read.

The streaming readers only ever handle well-formed files: :func:`top_level_kinds` tells the caller
what the file's top-level values are (an object holding the arrays it needs, or not), and anything
else, invalid JSON included, goes to the reader over the whole parsed file (:class:`NotStreamable`),
whose errors name the file and line. ijson is in the ``train`` extra (large caption files are training
data); without it every file is read whole, which gives the same corpus with more memory at its peak.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

try:
    import ijson
except ImportError:  # pragma: no cover - ijson is in the train extra; without it files are read whole
    ijson = None

__all__ = [
    "STREAM_ERRORS",
    "NotStreamable",
    "available",
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


_KINDS = {"start_map": "map", "start_array": "array", "integer": "number", "double": "number"}
