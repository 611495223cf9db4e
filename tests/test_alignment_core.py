"""The BRNN word vectors (Eq. 2-6), the S_kl score (Eq. 7-8) and the MRF (Eq. 10-12) against brute force."""

import itertools

import numpy as np
import pytest
import torch

from vsekit.alignment.mrf import mrf_align, segments
from vsekit.alignment.score import alignment_scores
from vsekit.data.vocab import Vocabulary
from vsekit.errors import VsekitError
from vsekit.text.brnn import BRNNWordEncoder, reverse_padded

VOCAB = Vocabulary(["a", "dog", "runs", "on", "grass", "red", "ball"])


def _brnn_by_hand(enc: BRNNWordEncoder, ids: list[int]) -> torch.Tensor:
    """Eq. 2-6 word by word for one sentence, written out as in the paper."""
    relu = torch.relu
    x = enc.embed.weight[ids]
    e = relu(x @ enc.w_e.weight.T + enc.w_e.bias)
    hf, hb = [], [None] * len(ids)
    h = torch.zeros(enc.hidden_dim)
    for t in range(len(ids)):
        h = relu(e[t] + enc.w_rec[0] @ h + enc.b_rec[0, 0])
        hf.append(h)
    h = torch.zeros(enc.hidden_dim)
    for t in reversed(range(len(ids))):
        h = relu(e[t] + enc.w_rec[1] @ h + enc.b_rec[1, 0])
        hb[t] = h
    return torch.stack([relu(enc.w_d.weight @ (f + b) + enc.w_d.bias) for f, b in zip(hf, hb, strict=True)])


def test_brnn_matches_the_equations_word_by_word_with_padding():
    torch.manual_seed(0)
    enc = BRNNWordEncoder(VOCAB, hidden_dim=6, word_dim=5).eval()
    texts = ["a dog runs on grass", "red ball", "dog"]
    packed = enc(**enc.prepare(texts))
    assert packed.vectors.shape == (8, 6) and packed.sentence.tolist() == [0] * 5 + [1] * 2 + [2]
    for k, text in enumerate(texts):
        want = _brnn_by_hand(enc, VOCAB.encode_text(text))
        torch.testing.assert_close(packed.vectors[packed.sentence == k], want, rtol=1e-5, atol=1e-5)


def test_reverse_padded_keeps_padding_in_place():
    x = torch.tensor([[1, 2, 3, 0], [4, 5, 0, 0]])
    assert reverse_padded(x, torch.tensor([3, 2])).tolist() == [[3, 2, 1, 0], [5, 4, 0, 0]]


def test_empty_sentence_is_a_clear_error():
    enc = BRNNWordEncoder(VOCAB, hidden_dim=4, word_dim=4)
    with pytest.raises(VsekitError, match="no words"):
        enc.prepare(["a dog", " !! "])


def _brute_scores(regions, words, sentence, n_sent, kind):
    out = np.zeros((len(regions), n_sent))
    for k, image in enumerate(regions):
        for t, s in enumerate(words):
            dots = [float(v @ s) for v in image]
            out[k, sentence[t]] += max(dots) if kind == "max" else sum(max(0.0, d) for d in dots)
    return out


@pytest.mark.parametrize("kind", ["max", "sum_pos"])
def test_scores_match_a_brute_force_loop(kind):
    gen = torch.Generator().manual_seed(1)
    regions = torch.randn(5, 4, 3, generator=gen)
    lengths = [3, 1, 4, 2]
    words = torch.randn(sum(lengths), 3, generator=gen)
    sentence = torch.repeat_interleave(torch.arange(4), torch.tensor(lengths))
    want = _brute_scores(regions.numpy(), words.numpy(), sentence.tolist(), 4, kind)
    got = alignment_scores(regions, words, sentence, 4, kind, max_elements=13)  # several image blocks
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)


def test_score_by_hand():
    # two regions (1, 0) and (0, 1); words (2, 1) and (-1, 3): Eq. 8 = max(2, 1) + max(-1, 3) = 5,
    # Eq. 7 = (2 + 1) + (0 + 3) = 6
    regions = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])
    words = torch.tensor([[2.0, 1.0], [-1.0, 3.0]])
    sentence = torch.tensor([0, 0])
    assert alignment_scores(regions, words, sentence, 1, "max").item() == 5.0
    assert alignment_scores(regions, words, sentence, 1, "sum_pos").item() == 6.0


def _brute_mrf(unary, beta):
    best, arg = -np.inf, None
    for path in itertools.product(range(unary.shape[1]), repeat=unary.shape[0]):
        e = sum(unary[j, a] for j, a in enumerate(path)) + beta * sum(
            a == b for a, b in itertools.pairwise(path)
        )
        if e > best + 1e-12:
            best, arg = e, list(path)
    return arg, best


@pytest.mark.parametrize("seed", range(12))
def test_mrf_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    n, m = rng.integers(1, 6), rng.integers(1, 5)
    unary = rng.normal(size=(n, m))
    beta = float(rng.choice([0.0, 0.3, 1.0, 5.0]))
    path, energy = mrf_align(unary, beta)
    want_path, want_energy = _brute_mrf(unary, beta)
    assert energy == pytest.approx(want_energy)
    assert path == want_path  # continuous random unaries: the optimum is unique


def test_mrf_beta_interpolates_between_words_and_one_region():
    unary = np.array([[1.0, 0.0], [0.0, 0.9], [1.0, 0.0]])
    assert mrf_align(unary, 0.0)[0] == [0, 1, 0]
    assert mrf_align(unary, 10.0)[0] == [0, 0, 0]
    assert segments([0, 0, 2, 2, 2, 1]) == [(0, 2, 0), (2, 5, 2), (5, 6, 1)]
