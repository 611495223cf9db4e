"""Sentence embeddings kept on disk per model and sentence list, like image features.

Ranking a photo against a corpus split embeds every caption of the split (5,000 for Flickr8K dev); with
the MiniLM encoder that costs tens of seconds on a CPU, paid again on every ``vsekit rank --image``. The
cache file is named by the model file's sha256 and the sha256 of the sentences in order, so a changed
model or a changed caption list never reuses stale vectors, and nothing else needs invalidating.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from vsekit.embedding.pipeline import VSEModel
from vsekit.fileio import atomic_save_npy, file_sha256
from vsekit.vision.features import default_cache_root

__all__ = ["cached_text_embeddings"]

logger = logging.getLogger(__name__)


def _cache_file(model: VSEModel, texts: Sequence[str], cache_root: str | os.PathLike[str] | None) -> Path:
    assert model.path is not None  # a model without a file is not cached
    digest = hashlib.sha256()
    for text in texts:
        digest.update(text.encode("utf-8") + b"\0")
    root = Path(cache_root) if cache_root is not None else default_cache_root()
    return root / "texts" / f"{file_sha256(model.path)[:16]}-{digest.hexdigest()[:16]}.npy"


def cached_text_embeddings(
    model: VSEModel,
    texts: Sequence[str],
    cache_root: str | os.PathLike[str] | None = None,
    progress: bool = True,
) -> np.ndarray:
    """``model.embed_texts(texts)``, read from the cache when this model embedded this list before.

    A model built in memory (no file) is embedded without the cache.
    """
    texts = list(texts)
    if model.path is None:
        return model.embed_texts(texts, progress=progress)
    path = _cache_file(model, texts, cache_root)
    if path.is_file():
        try:
            vectors = np.load(path, allow_pickle=False)
            if vectors.shape == (len(texts), model.embed_dim):
                return vectors
        except (OSError, ValueError) as exc:  # a damaged cache file is recomputed, never trusted
            logger.warning("%s: unreadable sentence cache, recomputing (%s)", path, exc)
    vectors = model.embed_texts(texts, progress=progress)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_save_npy(path, vectors)
    return vectors
