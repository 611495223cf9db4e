"""Caption metrics as coco-caption computes them: BLEU-1..4, METEOR, ROUGE-L and CIDEr-D.

`score_captions` wraps pycocoevalcap (the PyPI packaging of the coco-caption evaluation code used by Karpathy
& Fei-Fei 2015 and later papers) so that numbers are comparable with published tables:

* **Corpus level**, every score multiplied by 100 (as the papers print them). BLEU is corpus BLEU (clipped
  n-gram counts and lengths summed over all images, the "closest" reference length for the brevity
  penalty; pycocoevalcap adds 1e-15 / 1e-9 to each precision, so a perfect score is 100 - 1e-7, not
  exactly 100). METEOR is the METEOR 1.5 jar's aggregate over the set. ROUGE-L (beta 1.2) and CIDEr are
  the mean of the per-image scores.
* **CIDEr is CIDEr-D**, exactly as pycocoevalcap's ``Cider`` computes it: TF-IDF n-gram vectors (n = 1..4)
  with the candidate's counts clipped to the reference's, a Gaussian length penalty (sigma 6), averaged
  over the references and multiplied by 10 -- so a caption identical to all of its references scores
  1000 here. Document frequencies come from the references of the evaluated images (the coco-caption
  convention): scores depend on which images are in the set, an n-gram found in the references of every
  image weighs nothing, and a set of one image always scores CIDEr 0. Compare CIDEr only over the same
  image set (e.g. the full 1,000-image test split).
* **Tokenisation.** With Java, captions go through the Stanford PTB tokenizer jar shipped in pycocoevalcap
  (``-preserveLines -lowerCase``, then the same punctuation tokens dropped as pycocoevalcap's
  ``PTBTokenizer``; the output is identical). Without Java, METEOR is not computed (``None``), one warning
  says so, and all captions are tokenised with `vsekit.data.vocab.tokenize` (Karpathy's: lower-case,
  non-alphanumerics dropped). The two differ on clitics and hyphens ("man's" -> "man 's" vs "mans",
  "t-shirt" kept vs "tshirt"), which are rare in captions. Measured with the first reference of each
  image as the prediction, scored against the other four (fallback minus PTB): on the 100-image sample
  in `vsekit/sample/flickr8k` no score moves at all; on the 1,000 Flickr8K dev images BLEU-1..4 move by
  <= 0.03 points, ROUGE-L by 0.02 and CIDEr by +0.16 (80.37 -> 80.52). With the captions turned back into
  raw text (capitalised, punctuation and "'s" attached, as COCO's are) the fallback differs by <= 0.09
  BLEU and 0.16 CIDEr on the sample, <= 0.02 BLEU and 0.07 CIDEr on dev. Negligible next to differences
  between models, but say which tokenizer was used.
* **Edge cases.** An empty prediction (or one that is only punctuation) is scored 0 by every metric. A
  reference caption with no words after tokenisation is an error (pycocoevalcap's ROUGE-L would count
  an empty candidate as matching it, and its CIDEr crashes when no reference has any n-gram).

pycocoevalcap is in the ``train`` extra (evaluation, like training, is not part of the base install);
without it :func:`score_captions` raises one :class:`~vsekit.errors.MissingExtraError` saying how to
install it, and :func:`require_caption_metrics` lets a long job (captioning a split, training) say so
before it starts.

Cost: METEOR dominates (its jar loads a paraphrase table on every call), so score a whole split in one
call; the figures are in the README's caption-generation section.
"""

from __future__ import annotations

import functools
import os
import subprocess
import threading
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from vsekit.data.vocab import tokenize
from vsekit.errors import VsekitError, missing_train_extra

__all__ = ["METRIC_KEYS", "java_available", "require_caption_metrics", "score_captions"]

METRIC_KEYS: tuple[str, ...] = ("bleu1", "bleu2", "bleu3", "bleu4", "meteor", "rouge_l", "cider")

# Wall-clock limits for the Java subprocesses, so a wedged JVM gives an error instead of a hang.
PTB_TIMEOUT_S = 300.0
METEOR_TIMEOUT_S = 900.0
_JAVA_PROBE_TIMEOUT_S = 30.0

_JRE_HINT = "install a Java runtime (e.g. `apt-get install default-jre-headless`)"
_MAX_NAMED = 5


@functools.lru_cache(maxsize=1)
def java_available() -> bool:
    """True when a working `java` is on PATH (`java -version` runs and succeeds); the answer is cached."""
    try:
        done = subprocess.run(
            ["java", "-version"], capture_output=True, timeout=_JAVA_PROBE_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


def score_captions(
    predictions: Mapping[str, str],
    references: Mapping[str, Sequence[str]],
    *,
    meteor: bool = True,
) -> dict[str, float | None]:
    """Score generated captions against ground truth; returns {key: score x 100} for every `METRIC_KEYS`.

    `predictions` maps an image id to its one generated caption (may be empty: it scores 0); `references`
    maps an image id to its ground-truth captions. Every predicted id must have references; references of
    images without a prediction are ignored (also for CIDEr's document frequencies). Scores are over the
    whole set (see the module docstring). `meteor=False` skips METEOR (the slowest metric: its jar is slow to
    start) and returns ``None`` for it. Without Java METEOR is ``None`` too, the other metrics use the
    fallback tokenizer, and one warning says so (without the METEOR part when `meteor=False`).

    Raises `VsekitError` for an empty prediction set, predicted ids without references, an empty
    reference list, a reference with no words, or a Java subprocess that fails or times out, and
    `MissingExtraError` (a VsekitError) without pycocoevalcap (the ``train`` extra).
    """
    require_caption_metrics()
    ids = _validate(predictions, references)
    use_java = java_available()
    if not use_java:
        skipped = (
            "METEOR is not computed (returned as None; it needs Java to run the METEOR 1.5 jar) and "
            if meteor
            else ""
        )
        warnings.warn(
            f"caption metrics: Java not found, so {skipped}BLEU, ROUGE-L and CIDEr are computed with "
            "vsekit's fallback tokenizer (lower-case, punctuation stripped) instead of coco-caption's Java "
            f"PTB tokenizer, which can differ slightly from published numbers -- {_JRE_HINT}.",
            stacklevel=2,
        )
    # One batch (predictions first, then references) so the PTB tokenizer's JVM starts once.
    texts = [predictions[i] for i in ids] + [ref for i in ids for ref in references[i]]
    tokens = _ptb_tokenize(texts) if use_java else [" ".join(tokenize(text)) for text in texts]
    res: dict[str, list[str]] = {}
    gts: dict[str, list[str]] = {}
    position = len(ids)
    for n, i in enumerate(ids):
        res[i] = [tokens[n]]
        count = len(references[i])
        gts[i] = tokens[position : position + count]
        position += count
        for k, (raw, tok) in enumerate(zip(references[i], gts[i], strict=True)):
            if not tok:
                raise VsekitError(f"reference {k} of image {i!r} has no words after tokenisation: {raw!r}")
    return _compute(gts, res, meteor=meteor and use_java)


def require_caption_metrics() -> None:
    """Raise MissingExtraError, naming the extra, when pycocoevalcap is not installed (it is imported where
    it is used, never at module import: the base install has no caption metrics)."""
    try:
        import pycocoevalcap  # noqa: F401
    except ImportError:
        raise missing_train_extra("pycocoevalcap", "caption metrics (BLEU, METEOR, ROUGE-L, CIDEr)") from None


def _validate(predictions: Mapping[str, str], references: Mapping[str, Sequence[str]]) -> list[str]:
    """Check the inputs; return the predicted ids in order."""
    if not isinstance(predictions, Mapping) or not isinstance(references, Mapping):
        raise VsekitError("predictions and references must be mappings (image id -> caption(s))")
    if not predictions:
        raise VsekitError("no predictions to score (the predictions mapping is empty)")
    ids = list(predictions)
    not_str = [i for i in ids if not isinstance(predictions[i], str)]
    if not_str:
        raise VsekitError(
            f"predictions must be one caption string per image; {_name(not_str)} "
            f"(e.g. {predictions[not_str[0]]!r})"
        )
    missing = [i for i in ids if i not in references]
    if missing:
        raise VsekitError(f"{len(missing)} predicted image id(s) have no references: {_name(missing)}")
    bare = [i for i in ids if isinstance(references[i], str)]
    if bare:
        raise VsekitError(
            f"references must be a list of captions per image, got a single string for {_name(bare)}"
        )
    empty = [i for i in ids if len(references[i]) == 0]
    if empty:
        raise VsekitError(f"{len(empty)} image(s) have an empty reference list: {_name(empty)}")
    bad = [i for i in ids if not all(isinstance(ref, str) for ref in references[i])]
    if bad:
        raise VsekitError(f"references must be strings; not so for {_name(bad)}")
    return ids


def _name(ids: Sequence[Any]) -> str:
    """A few ids for an error message: 'a', 'b', 'c' and 4 more."""
    named = ", ".join(repr(i) for i in ids[:_MAX_NAMED])
    return named + (f" and {len(ids) - _MAX_NAMED} more" if len(ids) > _MAX_NAMED else "")


def _ptb_tokenize(texts: list[str]) -> list[str]:
    """Stanford PTB tokenisation exactly as pycocoevalcap's PTBTokenizer, one JVM for the whole batch.

    Same jar, flags and punctuation filter as `pycocoevalcap.tokenizer.ptbtokenizer.PTBTokenizer`, but the
    text goes through stdin (its wrapper writes a temporary file into site-packages, which fails on a
    read-only install), the exit status and line count are checked (its wrapper silently drops captions
    when Java fails), and there is a timeout. Each caption's whitespace is collapsed first: Java also
    breaks lines at "\\r" and other separators, which would shift every later caption.
    """
    from pycocoevalcap.tokenizer import ptbtokenizer

    jar_dir = os.path.dirname(os.path.abspath(ptbtokenizer.__file__))
    cmd = ["java", "-cp", ptbtokenizer.STANFORD_CORENLP_3_4_1_JAR, "edu.stanford.nlp.process.PTBTokenizer"]
    cmd += ["-preserveLines", "-lowerCase"]
    lines = "\n".join(" ".join(text.split()) for text in texts) + "\n"
    try:
        done = subprocess.run(
            cmd, cwd=jar_dir, input=lines.encode(), capture_output=True, timeout=PTB_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise VsekitError(f"the PTB tokenizer (Java) did not finish within {PTB_TIMEOUT_S:g} s") from exc
    except OSError as exc:
        raise VsekitError(f"could not start Java for the PTB tokenizer: {exc}; {_JRE_HINT}") from exc
    out = done.stdout.decode("utf-8").split("\n")
    if out and out[-1] == "":
        out.pop()
    if done.returncode != 0 or len(out) != len(texts):
        err = done.stderr.decode("utf-8", "replace").strip()[-500:]
        raise VsekitError(
            f"the PTB tokenizer (Java) failed: exit status {done.returncode}, {len(out)} lines back for "
            f"{len(texts)} captions; stderr: {err or '(empty)'}"
        )
    drop = set(ptbtokenizer.PUNCTUATIONS)
    return [" ".join(w for w in line.rstrip().split(" ") if w not in drop) for line in out]


def _compute(
    gts: dict[str, list[str]], res: dict[str, list[str]], *, meteor: bool
) -> dict[str, float | None]:
    """Run the pycocoevalcap scorers on tokenised captions; scores x 100."""
    from pycocoevalcap.bleu.bleu import Bleu
    from pycocoevalcap.cider.cider import Cider
    from pycocoevalcap.rouge.rouge import Rouge

    bleu, _ = Bleu(4).compute_score(gts, res, verbose=0)  # the default verbose=1 prints to stdout
    rouge, _ = Rouge().compute_score(gts, res)
    cider, _ = Cider().compute_score(gts, res)
    meteor_score = _meteor(gts, res) if meteor else None
    scores: dict[str, float | None] = {f"bleu{n + 1}": 100.0 * float(b) for n, b in enumerate(bleu)}
    scores["meteor"] = None if meteor_score is None else 100.0 * meteor_score
    scores["rouge_l"] = 100.0 * float(rouge)
    scores["cider"] = 100.0 * float(cider)
    return {key: scores[key] for key in METRIC_KEYS}


def _meteor(gts: dict[str, list[str]], res: dict[str, list[str]]) -> float:
    """METEOR 1.5 through pycocoevalcap's `Meteor`, with its Java process always stopped afterwards.

    pycocoevalcap's `Meteor` starts the jar in its constructor and only stops it in `__del__`; it reads
    the jar's answers with blocking `readline`s, and its `compute_score` holds a lock that it never
    releases when an exception escapes, after which `__del__` deadlocks the garbage collector. Here a
    watchdog kills the process after `METEOR_TIMEOUT_S` (a dead process unblocks the reads: EOF), the
    process is always stopped and reaped, and the lock replaced so `__del__` is harmless.
    """
    from pycocoevalcap.meteor.meteor import Meteor

    # "|||" separates fields in the jar's protocol; pycocoevalcap strips it from candidates only.
    gts = {i: [ref.replace("|||", " ") for ref in refs] for i, refs in gts.items()}
    try:
        scorer = Meteor()
    except OSError as exc:
        raise VsekitError(f"could not start Java for METEOR: {exc}; {_JRE_HINT}") from exc
    proc = scorer.meteor_p
    fired = threading.Event()

    def _kill() -> None:
        fired.set()
        proc.kill()

    watchdog = threading.Timer(METEOR_TIMEOUT_S, _kill)
    watchdog.daemon = True
    watchdog.start()
    try:
        score, _ = scorer.compute_score(gts, res)
        return float(score)
    except (OSError, ValueError) as exc:  # a closed pipe, or a line that is not a number (EOF gives "")
        err = _stop(scorer)
        if fired.is_set():
            raise VsekitError(
                f"METEOR (Java) did not finish within {METEOR_TIMEOUT_S:g} s; killed it"
            ) from exc
        raise VsekitError(
            f"METEOR's Java subprocess failed (exit status {proc.returncode}): {type(exc).__name__}: {exc}; "
            f"stderr: {err or '(empty)'}"
        ) from exc
    finally:
        watchdog.cancel()
        _stop(scorer)


def _stop(scorer: Any) -> str:
    """Stop and reap the METEOR process (idempotent); return the tail of its stderr."""
    proc = scorer.meteor_p
    try:
        proc.stdin.close()
    except OSError:  # flushing into a dead process
        pass
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    err = ""
    if proc.stderr is not None and not proc.stderr.closed:
        err = proc.stderr.read().decode("utf-8", "replace").strip()[-500:]
        proc.stderr.close()
    if proc.stdout is not None:
        proc.stdout.close()
    scorer.lock = threading.Lock()  # the old one may still be held by a failed compute_score
    return err
