"""On-disk cache of frozen sentence vectors (the MiniLM encoder's mean-pooled states).

A training run sees the same 30,000 captions every epoch; the frozen transformer encodes them once per
process, which costs 4 to 11 minutes on 2 cores before the first epoch can start. This keeps them on
disk, one safetensors file per (encoder identity, list of distinct texts), so the next run of any recipe
on the same corpus reads them in about a second. The identity is everything the vectors depend on: the
weights package and its version, the weights file's size, the maximum length, the pooling, and the
torch and transformers versions (an ONNX Runtime graph of the encoder, checked against it when exported,
reads what its PyTorch original wrote: :mod:`vsekit.retrieval.text_engine`). A file that does not match
its name (another identity or other texts) or cannot be read is computed again and replaced; one writer
per file (an exclusive lock), readers of a finished file never wait.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vsekit.fileio import atomic_write_bytes
from vsekit.resources import default_cache_root

logger = logging.getLogger(__name__)

FORMAT = "vsekit.sentence-vectors"
FORMAT_VERSION = 1

#: ``encode(texts)``: the vectors ``[len(texts), d]`` of ``texts``, in order.
Encode = Callable[[list[str]], np.ndarray]


def cache_key(texts: Sequence[str], identity: dict[str, Any]) -> str:
    """sha256 over the identity and the texts, in order (the file's name and its check)."""
    payload = json.dumps({"identity": identity, "texts": list(texts)}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def cached_sentence_vectors(
    texts: Sequence[str],
    encode: Encode,
    identity: dict[str, Any],
    cache_root: str | os.PathLike[str] | None = None,
) -> dict[str, np.ndarray]:
    """``{text: float32 vector}`` for every distinct text of ``texts``: read from the cache, or
    ``encode``d (all at once) and written there. ``identity`` names the encoder (see the module docstring)."""
    unique = list(dict.fromkeys(texts))
    if not unique:
        return {}
    key = cache_key(unique, identity)
    root = Path(cache_root) if cache_root is not None else default_cache_root()
    path = root / "sentences" / f"{key[:40]}.safetensors"
    found = _read(path, key, len(unique))
    if found is not None:
        return dict(zip(unique, found, strict=True))
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one writer; a second process finds the file written
        found = _read(path, key, len(unique))
        if found is None:
            found = np.asarray(encode(unique), dtype=np.float32)
            _write(path, found, key)
    return dict(zip(unique, found, strict=True))


def _read(path: Path, key: str, n: int) -> np.ndarray | None:
    """The cached vectors, or None when the file is absent, unreadable or made for other texts."""
    if not path.is_file():
        return None
    from safetensors import SafetensorError
    from safetensors.numpy import load

    try:
        data = path.read_bytes()
        header = json.loads(data[8 : 8 + int.from_bytes(data[:8], "little")]).get("__metadata__", {})
        vectors = load(data)["vectors"]
    except (OSError, ValueError, KeyError, SafetensorError) as exc:
        logger.warning("%s: unreadable sentence-vector cache (%s); encoding again", path, exc)
        return None
    if header.get("format") != FORMAT or header.get("key") != key or vectors.shape[0] != n:
        logger.warning("%s: made for other texts or another encoder; encoding again", path)
        return None
    return vectors


def _write(path: Path, vectors: np.ndarray, key: str) -> None:
    from safetensors.numpy import save

    meta = {"format": FORMAT, "format_version": str(FORMAT_VERSION), "key": key}
    atomic_write_bytes(path, save({"vectors": np.ascontiguousarray(vectors)}, metadata=meta))
    logger.info("%s: %d sentence vectors cached", path, vectors.shape[0])
