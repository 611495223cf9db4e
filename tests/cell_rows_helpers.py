"""Checks shared by the two kinds whose feature rows are the cells of a map (``grid``: the last conv map;
``pre-head``: the last block's): cached, uncached and either engine give the same rows, and a model
over them embeds photos as it embeds their cached rows (the path of search and ``Index.build``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from vsekit.data import Vocabulary, load_corpus
from vsekit.embedding.model import JointEmbedding
from vsekit.resources import sample_data_path
from vsekit.text import build_text_encoder
from vsekit.vision.features import FeatureSpec, compute_features, image_features

WORDS = "a dog runs on the grass black cat sits in red car man rides bike".split()


def assert_rows_repeat(corpus: Any, ids: list[str], spec: FeatureSpec, rows: np.ndarray, kw: dict) -> None:
    """Cached and uncached are the same numbers, a second read comes from the cache, and the PyTorch engine
    gives them up to one float16 step of the largest values (2^-10 of them)."""
    files = [corpus.images[i] for i in ids]
    uncached = compute_features(files, spec, cache=False, device="cpu", progress=False)
    np.testing.assert_array_equal(uncached, rows)
    by_torch = compute_features(files, spec, cache=False, device="cpu", progress=False, engine="torch")
    np.testing.assert_allclose(by_torch, rows, rtol=0, atol=2e-3 * np.abs(rows).max())
    again, _ = image_features(corpus, ids, spec.backbone, spec.kind, **kw)
    np.testing.assert_array_equal(again, rows)


def assert_embeds_photos_as_cached(tmp_path: Path, image_dim: int, kind: str, **image_side: Any) -> None:
    """A tiny model over ``kind`` rows (``image_side``: its pool or head) embeds two sample photos from
    their files as from their cached rows."""
    from vsekit.embedding.pipeline import VSEModel

    corpus = load_corpus(sample_data_path())
    ids = sorted(corpus.images)[:2]
    vocab = Vocabulary(WORDS)
    torch.manual_seed(0)
    text = build_text_encoder("gru", vocab, word_dim=8, hidden_dim=16)
    model = VSEModel(JointEmbedding(text, image_dim, "mobilenet_v2", kind, vocab, cells=49, **image_side))
    vectors = model.embed_images([corpus.images[i] for i in ids])
    assert vectors.shape == (2, 16)
    cached = model.corpus_features(corpus, ids, cache_root=tmp_path, progress=False)
    np.testing.assert_allclose(vectors, model.embed_features(cached), atol=1e-6)


def assert_saves_and_loads_exactly(model: JointEmbedding, tmp_path: Path) -> None:
    """The model written and read back has its config and embeds rows to the same bits."""
    from vsekit.embedding.model import load_model, save_model

    save_model(model, tmp_path / "m.safetensors")
    loaded, _, _ = load_model(tmp_path / "m.safetensors")
    assert isinstance(loaded, JointEmbedding) and loaded.config == model.config
    rows = torch.randn(5, model.image_dim)
    torch.testing.assert_close(loaded.embed_images(rows), model.embed_images(rows), rtol=0, atol=0)
