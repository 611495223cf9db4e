"""Tokenizer and vocabulary: determinism, specials, persistence, train-only building."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import vsekit
from vsekit.data import Caption, Corpus, Vocabulary, build_vocabulary, load_corpus, tokenize
from vsekit.errors import CorpusError

SAMPLE = Path(vsekit.__file__).parent / "sample" / "flickr8k"


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("A dog runs .", ["a", "dog", "runs"]),
        ("A boy in a t-shirt.", ["a", "boy", "in", "a", "tshirt"]),
        ("  Two\tdogs\n play  ", ["two", "dogs", "play"]),
        ('A " Penzance welcomes you " stone', ["a", "penzance", "welcomes", "you", "stone"]),
        ("2 dollar bills, 10 o'clock", ["2", "dollar", "bills", "10", "oclock"]),
        ("snake_case ... !!", ["snakecase"]),
        ("", []),
        ("Café", ["café"]),
    ],
)
def test_tokenize(text: str, tokens: list[str]) -> None:
    assert tokenize(text) == tokens


def test_build_orders_by_count_then_alphabet() -> None:
    vocab = Vocabulary.build([["b", "a", "c"], ["c", "a"], ["d", "c"]])
    assert vocab.words == ["<pad>", "<unk>", "<start>", "<end>", "c", "a", "b", "d"]
    assert [vocab.index(s) for s in ("<pad>", "<unk>", "<start>", "<end>")] == [0, 1, 2, 3]
    assert vocab.counts == {"c": 3, "a": 2, "b": 1, "d": 1}
    assert vocab.counts_by_index() == [0, 0, 0, 0, 3, 2, 1, 1]
    assert len(vocab) == 8 and "c" in vocab and "z" not in vocab
    assert vocab.word(4) == "c"
    with pytest.raises(IndexError):
        vocab.word(8)


def test_build_is_independent_of_input_order() -> None:
    lists = [["x", "y"], ["y", "z"], ["z", "x"], ["w"]]
    assert Vocabulary.build(lists) == Vocabulary.build(list(reversed(lists)))


def test_min_count_and_max_size() -> None:
    lists = [["a"] * 5, ["b"] * 3, ["c"] * 3, ["d"]]
    assert Vocabulary.build(lists, min_count=3).words[4:] == ["a", "b", "c"]
    assert Vocabulary.build(lists, max_size=2).words[4:] == ["a", "b"]  # specials not counted
    assert len(Vocabulary.build(lists, min_count=2, max_size=10)) == 4 + 3
    assert len(Vocabulary.build(lists, max_size=0)) == 4
    with pytest.raises(ValueError):
        Vocabulary.build(lists, min_count=0)


def test_encode_decode() -> None:
    vocab = Vocabulary.build([tokenize("a dog runs on the grass"), tokenize("a dog")])
    ids = vocab.encode(["a", "dog", "flies"], add_start_end=True)
    assert ids[0] == vocab.start_id and ids[-1] == vocab.end_id and ids[3] == vocab.unk_id
    assert vocab.decode(ids) == ["a", "dog", "<unk>"]
    assert vocab.decode(ids + [vocab.pad_id, vocab.pad_id], strip_special=False) == [
        "<start>", "a", "dog", "<unk>", "<end>", "<pad>", "<pad>",
    ]  # fmt: skip
    assert vocab.encode_text("A dog flies.") == vocab.encode(["a", "dog", "flies"])
    assert vocab.index("flies") == vocab.unk_id


def test_save_load_round_trip(tmp_path: Path) -> None:
    vocab = Vocabulary.build([tokenize("a dog runs"), tokenize("a cat sits"), tokenize("a dog")])
    path = tmp_path / "sub" / "vocab.json"
    vocab.save(path)
    assert list(path.parent.iterdir()) == [path]  # no temp file left behind
    loaded = Vocabulary.load(path)
    assert loaded == vocab
    assert loaded.counts == vocab.counts and loaded.words == vocab.words
    assert Vocabulary.from_dict(vocab.to_dict()) == vocab
    vocab.save(path)  # overwriting works (os.replace)
    assert Vocabulary.load(path) == vocab


def vocab_json(words: list, counts: list) -> str:
    specials = ["<pad>", "<unk>", "<start>", "<end>"]
    return json.dumps({"version": 1, "specials": specials, "words": words, "counts": counts})


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("{not json", "invalid vocabulary JSON"),
        ("[1, 2]", "expected a JSON object"),
        ('{"version": 1, "specials": ["<pad>"], "words": [], "counts": []}', "field 'specials'"),
        (vocab_json(["a"], []), "field 'counts'"),
        (vocab_json(["a", "a"], [1, 1]), "twice"),
        (vocab_json(["a"], [-1]), "non-negative"),
    ],
)
def test_load_malformed_names_file(tmp_path: Path, content: str, fragment: str) -> None:
    path = tmp_path / "vocab.json"
    path.write_text(content)
    with pytest.raises(CorpusError) as excinfo:
        Vocabulary.load(path)
    assert str(path) in str(excinfo.value) and fragment in str(excinfo.value)
    with pytest.raises(CorpusError, match="does not exist"):
        Vocabulary.load(tmp_path / "absent.json")


def test_saved_file_is_plain_json(tmp_path: Path) -> None:
    Vocabulary.build([["dog", "dog", "cat"]]).save(tmp_path / "v.json")
    data = json.loads((tmp_path / "v.json").read_text())
    assert data["words"] == ["dog", "cat"] and data["counts"] == [2, 1]


def test_build_vocabulary_uses_train_split_only(tmp_path: Path) -> None:
    images = {name: tmp_path / name for name in ("t.jpg", "d.jpg")}
    captions = [Caption("t.jpg", "A dog runs", "x:1"), Caption("d.jpg", "A zebra sleeps", "x:2")]
    corpus = Corpus(
        root=tmp_path, name="toy", format="csv", images=images, captions=captions,
        splits={"train": ["t.jpg"], "dev": ["d.jpg"]},
    )  # fmt: skip
    vocab = build_vocabulary(corpus)
    assert "dog" in vocab and "zebra" not in vocab and "sleeps" not in vocab
    assert "zebra" in build_vocabulary(corpus, split="dev")
    with pytest.raises(CorpusError, match="available: train, dev"):
        build_vocabulary(corpus, split="test")


def test_build_vocabulary_on_sample() -> None:
    corpus = load_corpus(SAMPLE)
    vocab = build_vocabulary(corpus, split="dev")
    assert vocab.words[4] == "a"  # the most frequent word of any English caption set
    small = build_vocabulary(corpus, split="dev", min_count=5)
    assert len(small) < len(vocab)
    assert all(count >= 5 for count in small.counts.values())
