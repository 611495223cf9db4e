"""Full-Network Embedding: standardisation with train statistics and ternary discretisation."""

import numpy as np
import pytest

from vsekit.errors import ConfigMismatchError, VsekitError
from vsekit.vision.fne import FullNetworkEmbedding


def test_hand_computed_codes():
    # Feature 0: mean 2, std 1 (values 1, 3). Feature 1: mean 10, std 5 (values 5, 15).
    train = np.array([[1.0, 5.0], [3.0, 15.0]])
    fne = FullNetworkEmbedding().fit(train)
    np.testing.assert_allclose(fne.mean_, [2.0, 10.0])
    np.testing.assert_allclose(fne.std_, [1.0, 5.0])
    # z of feature 0: 2.2 -> 0.2 (> 0.15 -> 1), 1.8 -> -0.2 (between -> 0), 1.7 -> -0.3 (< -0.25 -> -1)
    # z of feature 1: 10.5 -> 0.1 (0), 11 -> 0.2 (1), 8 -> -0.4 (-1)
    test = np.array([[2.2, 10.5], [1.8, 11.0], [1.7, 8.0]])
    np.testing.assert_allclose(fne.standardize(test), [[0.2, 0.1], [-0.2, 0.2], [-0.3, -0.4]], atol=1e-6)
    codes = fne.transform(test)
    assert codes.dtype == np.int8
    np.testing.assert_array_equal(codes, [[1, 0], [0, 1], [-1, -1]])


def test_thresholds_are_strict_inequalities():
    fne = FullNetworkEmbedding().fit(np.array([[-1.0], [1.0]]))  # mean 0, std 1: z == x
    np.testing.assert_array_equal(
        fne.transform(np.array([[0.15], [-0.25], [0.1500001], [-0.2500001]])).ravel(), [0, 0, 1, -1]
    )


def test_constant_feature_and_single_image_fit():
    # A feature that never varies on the train set (dead channel) must not divide by zero.
    fne = FullNetworkEmbedding().fit(np.array([[0.0, 1.0], [0.0, 3.0]]))
    codes = fne.transform(np.array([[0.0, 2.0], [0.5, 2.0]]))
    np.testing.assert_array_equal(codes, [[0, 0], [1, 0]])
    one = FullNetworkEmbedding().fit(np.array([[4.0, -2.0]]))  # batch size 1 works
    np.testing.assert_array_equal(one.transform(np.array([4.0, -2.0])), [[0, 0]])
    assert np.isfinite(one.standardize(np.array([[5.0, -3.0]]))).all()


def test_streaming_fit_equals_one_pass():
    rng = np.random.default_rng(0)
    x = rng.normal(loc=1000.0, scale=0.01, size=(257, 7))  # large mean, tiny spread: a cancellation trap
    whole = FullNetworkEmbedding().fit(x)
    streamed = FullNetworkEmbedding()
    for start in range(0, len(x), 1):  # batches of one image
        streamed.partial_fit(x[start : start + 1])
    np.testing.assert_allclose(streamed.mean_, whole.mean_, rtol=1e-12)
    np.testing.assert_allclose(streamed.std_, x.std(axis=0), rtol=1e-7)
    np.testing.assert_array_equal(streamed.transform(x), whole.transform(x))


def test_save_load_round_trip(tmp_path):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(20, 5))
    fne = FullNetworkEmbedding(layer_names=["a", "b"], layer_dims=[2, 3]).fit(x)
    fne.save(tmp_path / "fne.safetensors")
    back = FullNetworkEmbedding.load(tmp_path / "fne.safetensors")
    assert back.layer_names == ["a", "b"] and back.layer_dims == [2, 3]
    assert back.thresholds == (-0.25, 0.15) and back.n_samples_ == 20
    np.testing.assert_array_equal(back.mean_, fne.mean_)
    np.testing.assert_array_equal(back.transform(x), fne.transform(x))


def test_errors(tmp_path):
    with pytest.raises(VsekitError, match="not fitted"):
        FullNetworkEmbedding().transform(np.zeros((1, 3)))
    fne = FullNetworkEmbedding().fit(np.zeros((2, 3)))
    with pytest.raises(ConfigMismatchError, match="fitted on 3"):
        fne.transform(np.zeros((1, 4)))
    with pytest.raises(VsekitError, match="not found"):
        FullNetworkEmbedding.load(tmp_path / "missing.safetensors")
    (tmp_path / "junk.safetensors").write_bytes(b"not a tensor file")
    with pytest.raises(VsekitError, match="junk.safetensors"):
        FullNetworkEmbedding.load(tmp_path / "junk.safetensors")
    with pytest.raises(ValueError):
        FullNetworkEmbedding(thresholds=(0.2, -0.1))


def test_to_from_tensors_round_trip():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(30, 6))
    fne = FullNetworkEmbedding(thresholds=(-0.3, 0.2), layer_names=["a", "b"], layer_dims=[4, 2]).fit(x)
    tensors, metadata = fne.to_tensors(prefix="fne.")
    assert set(tensors) == {"fne.mean", "fne.m2"} and all(v.dtype == np.float64 for v in tensors.values())
    assert all(isinstance(v, str) for v in metadata.values())
    back = FullNetworkEmbedding.from_tensors(tensors, metadata, prefix="fne.")
    assert back.thresholds == (-0.3, 0.2) and back.layer_dims == [4, 2] and back.n_samples_ == 30
    y = rng.normal(size=(10, 6))
    np.testing.assert_array_equal(back.standardize(y), fne.standardize(y))
    np.testing.assert_array_equal(back.transform(y), fne.transform(y))
    with pytest.raises(VsekitError, match="damaged"):
        FullNetworkEmbedding.from_tensors({"fne.mean": tensors["fne.mean"]}, metadata, prefix="fne.")
