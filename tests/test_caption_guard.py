"""The concept guard (captioning/guard.py) on a hand-made language model: an object word the photo's classes
do not support loses to one they support, and a confident class gets named where the model would not say
it."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from vsekit.captioning.decode import beam_search
from vsekit.captioning.guard import (
    ConceptGuard,
    Familiarity,
    GuardSettings,
    Subject,
    load_guard,
    save_guard_table,
)
from vsekit.data.vocab import Vocabulary
from vsekit.errors import VsekitError

VOCAB = Vocabulary(["a", "dog", "cat", "bird", "sits", "an", "owl"])
A, DOG, CAT, BIRD, SITS, AN, OWL = (VOCAB.index(w) for w in ("a", "dog", "cat", "bird", "sits", "an", "owl"))
#: next-word probabilities after each word: "a" is followed by dog 0.6, bird 0.3, cat 0.1 (Flickr8K's
#: prior: dogs); an animal "sits" (0.9) or ends; "sits" ends.
NEXT = {
    A: {DOG: 0.6, BIRD: 0.3, CAT: 0.1},
    DOG: {SITS: 0.9},
    CAT: {SITS: 0.9},
    BIRD: {SITS: 0.9},
    OWL: {SITS: 0.9},
}


class TableModel:
    """A step model whose next word depends only on the previous one (the StepModel protocol)."""

    def _logp(self, words: torch.Tensor) -> torch.Tensor:
        logp = torch.full((len(words), len(VOCAB)), -30.0)
        for row, w in enumerate(words.tolist()):
            table = NEXT.get(w, {})
            for nxt, p in table.items():
                logp[row, nxt] = math.log(p)
            logp[row, Vocabulary.end_id] = math.log(max(1.0 - sum(table.values()), 1e-9))
        return logp

    def start(self, features: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
        logp = torch.full((len(features), len(VOCAB)), -30.0)
        logp[:, A] = 0.0
        return logp, (torch.full((len(features),), A),)

    def step(self, words: torch.Tensor, state: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, tuple]:
        return self._logp(words), (words,)

    def reorder_state(self, state: tuple[torch.Tensor, ...], index: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (state[0].index_select(0, index),)


def guard(settings: GuardSettings) -> ConceptGuard:
    """Three classes (a terrier, a tabby, an owl) supporting the words dog, cat and bird (and owl)."""
    evidence = np.array([[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 1]], dtype=np.float32)
    return ConceptGuard(["dog", "cat", "bird", "owl"], evidence, ["dog", "cat", "owl"], VOCAB, settings)


def words(caption) -> list[str]:
    return VOCAB.decode(caption.tokens)


def test_unsupported_object_loses_to_a_supported_one() -> None:
    features = torch.zeros(1, 2)
    tabby = np.array([[0.02, 0.95, 0.03]])  # the classifier sees a cat
    unguarded = beam_search(TableModel(), features, beam_size=3)[0][0]
    assert words(unguarded) == ["a", "dog", "sits"]
    bias = guard(GuardSettings(weight=2.0, floor=0.1)).word_bias(tabby)
    guarded = beam_search(TableModel(), features, beam_size=3, word_bias=bias)[0][0]
    assert words(guarded) == ["a", "cat", "sits"]
    # dog: evidence 0.02 costs 2 log(0.02 / 0.1); cat: 0.95 >= floor costs nothing
    assert bias[0, DOG].item() == pytest.approx(2 * math.log(0.2))
    assert bias[0, CAT].item() == 0.0 and bias[0, SITS].item() == 0.0


def test_confident_class_gets_named_by_a_forced_prefix() -> None:
    features = torch.zeros(1, 2)
    owl = np.array([[0.1, 0.1, 0.8]])
    g = guard(GuardSettings(weight=0.5, floor=0.1, name_at=0.5))
    # the weak guard alone still prefers a Flickr8K word: no caption says "owl"
    captions = beam_search(TableModel(), features, beam_size=3, n_best=3, word_bias=g.word_bias(owl))[0]
    subject = g.subjects(owl)[0]
    assert subject == Subject("owl", pytest.approx(0.8))
    assert not any(g.names_subject(" ".join(words(c)), subject) for c in captions)
    prefix = torch.tensor([g.prefix_ids(subject)])
    forced = beam_search(TableModel(), features, beam_size=3, word_bias=g.word_bias(owl), prefix=prefix)[0][0]
    assert words(forced) == ["an", "owl", "sits"]


def test_subjects_sum_classes_sharing_a_name_and_respect_the_threshold() -> None:
    evidence = np.zeros((3, 1), dtype=np.float32)
    g = ConceptGuard(["dog"], evidence, ["dog", "dog", "cat"], VOCAB, GuardSettings(name_at=0.5))
    assert g.subjects(np.array([[0.3, 0.3, 0.4]]))[0] == Subject("dog", pytest.approx(0.6))
    assert g.subjects(np.array([[0.2, 0.2, 0.45]]))[0] is None  # neither name holds half
    assert g.prefix_ids(Subject("pliers", 0.9)) is None  # beyond the captioner's words


def test_guard_table_round_trip_and_errors(tmp_path) -> None:
    path = tmp_path / "guard.safetensors"
    evidence = np.array([[1, 0], [0, 1]], dtype=np.float32)
    meta = {
        "words": ["dog", "cat"],
        "class_names": ["dog", "cat"],
        "backbone": "tiny",
        "settings": {"weight": 3},
    }
    save_guard_table(path, evidence, meta)
    loaded = load_guard(VOCAB, "tiny", path)
    assert loaded.settings == GuardSettings(weight=3.0)
    assert loaded.words == ["dog", "cat"] and np.array_equal(loaded.evidence, evidence)
    with pytest.raises(VsekitError, match="reads tiny classes"):
        load_guard(VOCAB, "efficientnet_lite0", path)
    with pytest.raises(VsekitError, match="does not match"):
        ConceptGuard(["dog"], evidence, ["dog", "cat"], VOCAB)


def test_familiarity_is_the_cosine_to_the_kth_nearest_training_photo() -> None:
    """Brute force: with a full basis the score is the k-th largest cosine to the reference photos."""
    rng = np.random.default_rng(0)
    train, photos = rng.standard_normal((40, 6)), rng.standard_normal((5, 6))
    fam = Familiarity.fit(train, dim=6, k=3)
    unit = lambda x: x / np.linalg.norm(x, axis=1, keepdims=True)  # noqa: E731
    truth = np.sort(unit(photos) @ unit(train).T, axis=1)[:, -3]
    assert fam.scores(photos) == pytest.approx(truth, abs=1e-5)
    assert fam.scores(train[:4] * 7) == pytest.approx(
        np.sort(unit(train[:4]) @ unit(train).T)[:, -3], abs=1e-5
    )


def test_only_unfamiliar_photos_are_guarded_and_the_reference_round_trips(tmp_path) -> None:
    rng = np.random.default_rng(1)
    train = np.abs(rng.standard_normal((30, 4))) + np.array(
        [5.0, 0, 0, 0]
    )  # training photos share a direction
    strange = np.array([[0.0, 0.0, 0.0, 1.0]])
    evidence = np.eye(2, dtype=np.float32)
    g = ConceptGuard(["dog", "cat"], evidence, ["dog", "cat"], VOCAB, GuardSettings(familiar_at=0.9))
    assert g.unfamiliar(np.vstack([train[:2], strange])).tolist() == [True, True, True]  # no reference: all
    meta = {"words": ["dog", "cat"], "class_names": ["dog", "cat"], "backbone": "tiny"}
    path = save_guard_table(
        tmp_path / "g.safetensors", evidence, meta, familiarity=Familiarity.fit(train, 3, 5)
    )
    loaded = load_guard(VOCAB, "tiny", path, GuardSettings(familiar_at=0.9))
    assert loaded.familiarity is not None and loaded.familiarity.k == 5
    assert loaded.unfamiliar(np.vstack([train[:2], strange])).tolist() == [False, False, True]


def test_a_familiar_photo_sure_of_a_novel_class_is_guarded_and_the_flags_round_trip(tmp_path) -> None:
    """novel_at: a photo like the training photos is still guarded when its classifier puts that much of
    its probability on classes no training photo shows (here "cat")."""
    rng = np.random.default_rng(3)
    train = np.abs(rng.standard_normal((30, 4))) + np.array([5.0, 0, 0, 0])
    photos = train[:3]
    probs = np.array([[0.9, 0.1], [0.4, 0.6], [0.0, 1.0]], dtype=np.float32)  # p(dog), p(cat)
    meta = {"words": ["dog", "cat"], "class_names": ["dog", "cat"], "backbone": "tiny"}
    path = save_guard_table(
        tmp_path / "g.safetensors",
        np.eye(2, dtype=np.float32),
        meta,
        familiarity=Familiarity.fit(train, 3, 5),
        novel=np.array([False, True]),
    )
    g = load_guard(VOCAB, "tiny", path, GuardSettings(familiar_at=0.9, novel_at=0.5))
    assert g.novel.tolist() == [False, True]
    assert g.novelty(probs) == pytest.approx([0.1, 0.6, 1.0])
    assert g.unfamiliar(photos).tolist() == [False, False, False]  # without probabilities: familiarity only
    assert g.unfamiliar(photos, probs).tolist() == [False, True, True]
    g.settings = GuardSettings(familiar_at=0.9, novel_at=2.0)  # above 1: never
    assert g.unfamiliar(photos, probs).tolist() == [False, False, False]
    old = save_guard_table(tmp_path / "old.safetensors", np.eye(2, dtype=np.float32), meta)
    assert not load_guard(VOCAB, "tiny", old).novel.any()  # a table from before the flags: no novel class
    with pytest.raises(VsekitError, match="novel flags"):
        ConceptGuard(["dog"], np.ones((2, 1)), ["dog", "cat"], VOCAB, novel=np.array([True]))


def test_a_guarded_caption_must_name_an_object_its_evidence_supports() -> None:
    """grounded: "a dog sits" (a dog's evidence at its typical level) stays; "a sits" (names nothing) and
    "a cat sits" (a cat's evidence below its typical) go; words the guard does not watch ("sits") neither
    ground nor bar a caption. The bias never leaves "dog" free here (floor 4 x typical 0.5 > 1), so the
    test is the evidence, not the bias."""
    from vsekit.captioning.decode import Caption

    g = ConceptGuard(
        ["dog", "cat"], np.eye(2, dtype=np.float32), ["dog", "cat"], VOCAB, typical=np.full(2, 0.5)
    )
    evidence = g.word_evidence(np.array([[0.6, 0.4]], dtype=np.float32))[0]
    assert g.word_bias(np.array([[0.6, 0.4]], dtype=np.float32))[0][DOG] < 0
    caps = [Caption((A, DOG, SITS), -1.0), Caption((A, SITS), -1.0), Caption((A, CAT, SITS), -1.0)]
    assert g.grounded(caps, evidence) == [caps[0]]
    assert g.grounded(caps[1:], evidence) == []
    assert g.grounded(caps, np.array([0.5, 0.5])) == [caps[0], caps[2]]  # at the typical level: both


def test_a_guarded_caption_says_content_words_once_and_the_knobs_switch_the_checks_off() -> None:
    """said_once: every word but function words and specials ("a", "an"; <end>) at most once; ``once``
    and ``ground`` off give no mask and keep every caption."""
    from vsekit.captioning.decode import Caption

    g = ConceptGuard(["dog"], np.ones((1, 1), np.float32), ["dog"], VOCAB, typical=np.ones(1))
    mask = g.said_once()
    assert mask is not None and mask.tolist() == [False] * 4 + [w not in ("a", "an") for w in VOCAB.words[4:]]
    quiet = ConceptGuard(["dog"], np.ones((1, 1)), ["dog"], VOCAB, GuardSettings(once=False))
    assert quiet.said_once() is None
    caps = [Caption((A, SITS), -1.0)]
    assert g.grounded(caps, np.zeros(1)) == []
    lax = ConceptGuard(["dog"], np.ones((1, 1)), ["dog"], VOCAB, GuardSettings(ground=False), np.ones(1))
    assert lax.grounded(caps, np.zeros(1)) == caps


def test_the_shipped_captioner_captions_familiar_photos_as_without_the_guard() -> None:
    """The guard decodes only the photos its familiarity marks; the others get the plain beam's caption."""
    from vsekit.captioning.generator import CaptionGenerator

    plain = CaptionGenerator(rerank=False, device="cpu", guard=False)
    guarded = CaptionGenerator(rerank=False, device="cpu", guard=True)
    assert guarded.guard is not None and guarded.guard.familiarity is not None
    feats = np.abs(np.random.default_rng(2).standard_normal((6, guarded.image["image_dim"]))).astype(
        np.float32
    )
    guarded.guard.settings = GuardSettings(familiar_at=-2.0)  # every photo familiar
    assert guarded.describe_features(feats) == plain.describe_features(feats)
    guarded.guard.settings = GuardSettings(familiar_at=2.0)  # none
    everywhere = guarded.describe_features(feats)
    middle = float(np.median(guarded.guard.familiarity.scores(feats)))
    guarded.guard.settings = GuardSettings(familiar_at=middle)
    mask = guarded.guard.unfamiliar(feats, guarded.classifier.probabilities(feats))
    mixed, unguarded = guarded.describe_features(feats), plain.describe_features(feats)
    assert 0 < mask.sum() < len(feats)
    assert everywhere != unguarded  # the guard changes some caption, so the mix is a real test
    assert mixed == [everywhere[i] if mask[i] else unguarded[i] for i in range(len(feats))]
