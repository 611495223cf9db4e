"""Caption metrics (pycocoevalcap): exact values on tiny hand-checked sets, both tokenizers, METEOR's
Java subprocess (scored, failing, hanging: always reaped), and input errors that name the ids at fault."""

from __future__ import annotations

import math
import subprocess
import sys
import warnings

import pytest

from vsekit.errors import VsekitError
from vsekit.metrics import captions as metrics
from vsekit.metrics.captions import METRIC_KEYS, java_available, score_captions

HAS_JAVA = java_available()
NO_JAVA_REASON = "no working `java` on PATH (METEOR and the PTB tokenizer need a JRE)"

# Two images with no word in common, so CIDEr's document frequencies give every n-gram a weight.
DOG = "a brown dog runs across the green grass"
KIDS = "two children play with an orange ball"
PERFECT_PRED = {"dog": DOG, "kids": KIDS}
PERFECT_REFS = {"dog": [DOG, DOG, DOG], "kids": [KIDS, KIDS, KIDS]}


@pytest.fixture(params=["ptb", "fallback"])
def tokenizer(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test with the Java PTB tokenizer (skipped without Java) and with the fallback tokenizer."""
    if request.param == "ptb":
        if not HAS_JAVA:
            pytest.skip(NO_JAVA_REASON)
    else:
        monkeypatch.setattr(metrics, "java_available", lambda: False)
    return request.param


def score(predictions, references, tokenizer: str) -> dict[str, float | None]:
    """score_captions without METEOR; the fallback path must warn exactly once, the PTB path never."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = score_captions(predictions, references, meteor=False)
    assert len(caught) == (1 if tokenizer == "fallback" else 0), [str(w.message) for w in caught]
    if caught:  # METEOR was not asked for: the warning is about the tokenizer only
        assert "fallback tokenizer" in str(caught[0].message) and "METEOR" not in str(caught[0].message)
    assert tuple(result) == METRIC_KEYS
    assert result["meteor"] is None
    return result


def test_perfect_predictions(tokenizer: str) -> None:
    result = score(PERFECT_PRED, PERFECT_REFS, tokenizer)
    # pycocoevalcap adds 1e-15 / 1e-9 to every n-gram precision: "perfect" is 100 - O(1e-7).
    for n in (1, 2, 3, 4):
        assert result[f"bleu{n}"] == pytest.approx(100.0, abs=1e-5)
    assert result["rouge_l"] == pytest.approx(100.0)
    # CIDEr-D is x10 per image; x100 on top: a caption equal to all its references scores 1000.
    assert result["cider"] == pytest.approx(1000.0)


def test_prediction_equal_to_one_of_several_different_references(tokenizer: str) -> None:
    refs = {"dog": [DOG, "a dog running on a lawn", DOG], "kids": [KIDS, "kids with a ball", KIDS]}
    result = score(PERFECT_PRED, refs, tokenizer)
    for n in (1, 2, 3, 4):  # every n-gram is in the identical reference; its length is the closest
        assert result[f"bleu{n}"] == pytest.approx(100.0, abs=1e-5)
    assert 100.0 < result["cider"] < 1000.0  # CIDEr averages over all references, the odd one costs


def test_disjoint_vocabulary_scores_zero(tokenizer: str) -> None:
    preds = {"dog": "zebra giraffe elephant lion", "kids": "violin trumpet cello drum"}
    result = score(preds, PERFECT_REFS, tokenizer)
    for n in (1, 2, 3, 4):
        assert result[f"bleu{n}"] == pytest.approx(0.0, abs=1e-6)
    assert result["rouge_l"] == 0.0
    assert result["cider"] == 0.0


def test_hand_computed_corpus_bleu(tokenizer: str) -> None:
    preds = {"a": "the the the cat", "b": "a dog"}
    refs = {"a": ["the cat sat", "a cat"], "b": ["a dog runs fast", "the brown dog runs"]}
    # Corpus BLEU sums clipped counts and lengths over both images before dividing.
    # Unigrams: a: "the" x3 clipped to 1 (its largest count in one reference) + "cat" 1 = 2 of 4;
    #           b: "a" + "dog" = 2 of 2                                  -> p1 = 4/6
    # Bigrams:  a: "the the" x2 (0), "the cat" (1) = 1 of 3; b: "a dog" = 1 of 1 -> p2 = 2/4
    # Lengths:  candidate 4 + 2 = 6; closest reference length: a: 3 (|3-4| = 1 beats |2-4|), b: 4 -> r = 7
    # Brevity penalty exp(1 - r/c) = exp(1 - 7/6) = exp(-1/6) = 0.84648
    # BLEU-1 = p1 * BP = 0.66667 * 0.84648 = 0.56432
    # BLEU-2 = sqrt(p1 * p2) * BP = 0.57735 * 0.84648 = 0.48872
    bp = math.exp(1 - 7 / 6)
    result = score(preds, refs, tokenizer)
    assert result["bleu1"] == pytest.approx(100 * (4 / 6) * bp, rel=1e-6)
    assert result["bleu2"] == pytest.approx(100 * math.sqrt((4 / 6) * (2 / 4)) * bp, rel=1e-6)
    assert result["bleu1"] == pytest.approx(56.432, abs=1e-3)
    assert result["bleu2"] == pytest.approx(48.872, abs=1e-3)


def test_empty_prediction_scores_zero_without_crashing(tokenizer: str) -> None:
    alone = score({"kids": KIDS}, {"kids": PERFECT_REFS["kids"]}, tokenizer)
    # Adding an image whose prediction is empty (or only punctuation) halves the per-image means.
    for empty in ("", "  ...  "):
        result = score({"dog": empty, "kids": KIDS}, PERFECT_REFS, tokenizer)
        assert result["rouge_l"] == pytest.approx(alone["rouge_l"] / 2)
        assert result["cider"] == pytest.approx(1000.0 / 2)  # kids alone is 1000, the empty one 0
        assert 0.0 < result["bleu1"] < 100.0  # corpus BLEU: perfect precision, brevity penalty
        assert all(
            isinstance(result[k], float) and math.isfinite(result[k]) for k in METRIC_KEYS if k != "meteor"
        )


def test_single_image_cider_is_zero(tokenizer: str) -> None:
    # coco-caption's idf: every n-gram occurs in the references of all (one) images, so weighs nothing.
    assert score({"dog": DOG}, {"dog": PERFECT_REFS["dog"]}, tokenizer)["cider"] == 0.0


def test_only_predicted_images_count() -> None:
    refs = dict(PERFECT_REFS, extra=["a completely different picture of a city at night"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert score_captions(PERFECT_PRED, refs, meteor=False) == score_captions(
            PERFECT_PRED, PERFECT_REFS, meteor=False
        )


def test_fallback_warns_once_and_skips_meteor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metrics, "java_available", lambda: False)
    refs = {"a": ["A man's T-shirt, (red)!", "a man in a red shirt"]}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = score_captions({"a": "A man in a red T-shirt."}, refs)  # meteor=True requested
    assert len(caught) == 1
    message = str(caught[0].message)
    assert "METEOR" in message and "Java" in message and "default-jre-headless" in message
    assert "tokenizer" in message
    assert tuple(result) == METRIC_KEYS
    assert result["meteor"] is None
    assert all(isinstance(result[k], float) for k in METRIC_KEYS if k != "meteor")


@pytest.mark.skipif(not HAS_JAVA, reason=NO_JAVA_REASON)
def test_meteor_false_does_not_warn() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert score_captions(PERFECT_PRED, PERFECT_REFS, meteor=False)["meteor"] is None


@pytest.mark.skipif(not HAS_JAVA, reason=NO_JAVA_REASON)
def test_ptb_tokenization_matches_pycocoevalcap() -> None:
    from pycocoevalcap.tokenizer.ptbtokenizer import PTBTokenizer

    texts = ["A man's T-shirt, (red)!", "Don't stop...", "", "  ?!  ", "Café naïve -- at 3:30 p.m.", "ok"]
    theirs = PTBTokenizer().tokenize({i: [{"caption": t}] for i, t in enumerate(texts)})
    assert metrics._ptb_tokenize(texts) == [theirs[i][0] for i in range(len(texts))]
    assert metrics._ptb_tokenize(texts)[0] == "a man 's t-shirt -lrb- red -rrb-"  # coco-caption keeps -lrb-
    # Java also breaks lines at \r (and \u2028, ...); that must not shift later captions.
    assert metrics._ptb_tokenize(["one\rtwo", "three\u2028four", "five"]) == ["one two", "three four", "five"]


# --- METEOR: the Java subprocess -------------------------------------------------------------------


@pytest.fixture
def spawned(monkeypatch: pytest.MonkeyPatch) -> list[subprocess.Popen]:
    """Record the processes pycocoevalcap's Meteor starts."""
    import pycocoevalcap.meteor.meteor as meteor_module

    procs: list[subprocess.Popen] = []
    real_popen = subprocess.Popen

    class Recording:
        PIPE = subprocess.PIPE

        @staticmethod
        def Popen(cmd, **kwargs):  # noqa: N802 - stands in for subprocess.Popen
            proc = real_popen(cmd, **kwargs)
            procs.append(proc)
            return proc

    monkeypatch.setattr(meteor_module, "subprocess", Recording)
    return procs


@pytest.mark.skipif(not HAS_JAVA, reason=NO_JAVA_REASON)
def test_meteor_scores_and_stops_java(spawned: list[subprocess.Popen]) -> None:
    preds = dict(PERFECT_PRED, other="a cat")
    refs = dict(PERFECT_REFS, other=["a cat sleeps on a red sofa", "a grey cat on a couch"])
    result = score_captions(preds, refs)  # one call only: the jar takes 5-10 s to load its paraphrases
    assert isinstance(result["meteor"], float)
    assert 50.0 < result["meteor"] < 100.0  # two perfect captions and one short partial match
    assert len(spawned) == 1
    assert all(proc.returncode is not None for proc in spawned)  # reaped, not left running


def _fake_meteor(monkeypatch: pytest.MonkeyPatch, spawned: list[subprocess.Popen], script: str) -> None:
    """Make Meteor start `python -c script` instead of the jar; tokenise without Java."""
    import pycocoevalcap.meteor.meteor as meteor_module

    recording = meteor_module.subprocess
    real = recording.Popen

    def popen(cmd, **kwargs):
        return real([sys.executable, "-c", script], **kwargs)

    monkeypatch.setattr(recording, "Popen", staticmethod(popen))
    monkeypatch.setattr(metrics, "java_available", lambda: True)
    monkeypatch.setattr(
        metrics, "_ptb_tokenize", lambda texts: [" ".join(metrics.tokenize(t)) for t in texts]
    )


def test_meteor_subprocess_failure_is_reported(monkeypatch: pytest.MonkeyPatch, spawned) -> None:
    _fake_meteor(monkeypatch, spawned, "import sys; sys.stderr.write('no paraphrase table'); sys.exit(3)")
    with pytest.raises(VsekitError, match="METEOR's Java subprocess failed.*no paraphrase table"):
        score_captions(PERFECT_PRED, PERFECT_REFS)
    assert len(spawned) == 1 and spawned[0].returncode is not None


def test_meteor_hang_times_out(monkeypatch: pytest.MonkeyPatch, spawned) -> None:
    _fake_meteor(monkeypatch, spawned, "import time; time.sleep(60)")
    monkeypatch.setattr(metrics, "METEOR_TIMEOUT_S", 0.5)
    with pytest.raises(VsekitError, match=r"METEOR \(Java\) did not finish within 0.5 s"):
        score_captions(PERFECT_PRED, PERFECT_REFS)
    assert len(spawned) == 1 and spawned[0].returncode is not None


# --- input errors ------------------------------------------------------------------------------------


def test_missing_references_are_named() -> None:
    preds = {f"img{i}": "a dog" for i in range(9)}
    with pytest.raises(
        VsekitError, match=r"8 predicted image id\(s\) have no references: 'img1', 'img2'"
    ) as err:
        score_captions(preds, {"img0": ["a dog"]})
    assert "and 3 more" in str(err.value) and "'img0'" not in str(err.value)


def test_empty_reference_list_is_named() -> None:
    with pytest.raises(VsekitError, match=r"empty reference list: 'kids'"):
        score_captions(PERFECT_PRED, {"dog": [DOG], "kids": []})


def test_empty_prediction_set() -> None:
    with pytest.raises(VsekitError, match="no predictions"):
        score_captions({}, PERFECT_REFS)


def test_single_string_reference_is_named() -> None:
    with pytest.raises(VsekitError, match=r"single string for 'dog'"):
        score_captions(PERFECT_PRED, {"dog": DOG, "kids": [KIDS]})


def test_non_string_prediction_is_named() -> None:
    with pytest.raises(VsekitError, match=r"one caption string per image; 'dog'"):
        score_captions({"dog": [DOG], "kids": KIDS}, PERFECT_REFS)


def test_reference_without_words_is_named(tokenizer: str) -> None:
    with pytest.raises(VsekitError, match=r"reference 1 of image 'kids' has no words"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            score_captions(PERFECT_PRED, {"dog": [DOG], "kids": [KIDS, " . "]}, meteor=False)
