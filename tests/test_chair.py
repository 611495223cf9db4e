"""CHAIR (Rohrbach et al. 2018) and "subject named" on a tiny set whose values were counted by hand."""

from __future__ import annotations

import pytest

from vsekit.errors import VsekitError
from vsekit.metrics.chair import ObjectVocabulary, chair, subject_named

# Three photos, labelled as bench/everyday/labels.json labels them.
OBJECTS = [["cat", "blanket"], ["castle", "tree", "sky"], ["person", "dog", "grass"]]
MAYBE = [[], ["person"], []]
CAPTIONS = [
    "a little boy in a blue shirt is playing with a yellow toy",  # boy, shirt, toy: 3 mentions, 3 invented
    "two men stand in front of a large building near the trees",  # person (maybe), building (castle), tree
    "a brown puppy runs through the grass with a man",  # dog, grass, person: all grounded
]


def test_chair_counts_invented_mentions_and_captions() -> None:
    result = chair(CAPTIONS, OBJECTS, MAYBE)
    # mentions: 3 + 3 + 3 = 9; invented: boy, shirt, toy (caption 1 only) -> CHAIR_i 3/9, CHAIR_s 1/3
    assert result == {
        "chair_s": pytest.approx(1 / 3),
        "chair_i": pytest.approx(3 / 9),
        "mentions": 9,
        "invented": 3,
    }


def test_maybe_objects_are_not_invented_but_unlabelled_ones_are() -> None:
    without_maybe = chair(CAPTIONS, OBJECTS)  # "two men" near the castle is now invented too
    assert without_maybe["invented"] == 4
    assert without_maybe["chair_s"] == pytest.approx(2 / 3)


def test_synonyms_plurals_and_kinds() -> None:
    vocab = ObjectVocabulary()
    assert vocab.mentions("two women and some children watch the puppies") == ["person", "person", "dog"]
    assert vocab.mentions("a palm tree by the ocean") == ["palm tree", "sea"]
    # a castle may be called a building; a building may not be called a castle
    assert "building" in vocab.present(["castle"])
    assert "castle" not in vocab.present(["building"])


def test_subject_named() -> None:
    captions = ["a tabby sleeping on a blanket", "a large building", "a dog runs"]
    # cat named (tabby is a cat); "building" is too general for a castle; dog named
    assert subject_named(captions, ["cat", "castle", "dog"]) == pytest.approx(2 / 3)
    assert subject_named(["a castle on a hill"], ["building"]) == 1.0


def test_no_mentions_and_mismatched_lengths() -> None:
    assert chair(["a view of something"], [["sky"]]) == {
        "chair_s": 0.0,
        "chair_i": 0.0,
        "mentions": 0,
        "invented": 0,
    }
    with pytest.raises(VsekitError, match="2 captions but 1 object lists"):
        chair(["a", "b"], [["cat"]])


def test_label_words_used_as_verbs_are_not_objects() -> None:
    vocab = ObjectVocabulary(["stand", "sign"])  # "stand" labels a tripod stand, but captions say "stands"
    assert vocab.mentions("a man stands by a sign") == ["person", "sign"]
