"""The concept guard: captions that say what the photo's CNN sees, not what Flickr8K usually shows.

The shipped captioner learned Flickr8K's world (people, dogs, outdoor sports); on an everyday photo its
language model fills the gap with that world ("a little boy in a blue shirt ..." for a cat). The CNN whose
pooled features it reads also carries an ImageNet-1k classifier (:mod:`vsekit.vision.classes`), so a
photo's class probabilities ``p(c | x)`` cost one matrix product. The guard uses them twice:

1. **Evidence for object words.** A shipped table ``evidence[c, w]`` (``ship/ship_caption_guard.py``:
   WordNet hypernyms and co-occurrence in Flickr8K's training captions) says how strongly class ``c``
   supports object word ``w``; a photo's evidence for ``w`` is ``e(w | x) = min(1, sum_c p(c|x)
   evidence[c, w])``, ConSE's convex combination (Norouzi et al. 2014, Eq. 1) with learned class-word
   weights. Words differ in how much evidence the classifier can give them (dog breeds are ImageNet
   classes, men are not), so each is measured against ``typical[w]``, its median evidence over the
   training photos that show it. Beam search adds ``weight * log(min(1, e / (floor * typical)))`` to each
   watched word's log-probability: a log-linear product of the language model with the classifier's
   evidence that leaves words with evidence like real photos of them alone and makes an unsupported "dog"
   cost ``weight * log(floor * typical / e)``.
2. **Naming the subject.** Classes are grouped by the name a caption would use (``"tabby"`` -> ``"cat"``);
   when one name holds at least ``name_at`` of the probability and no guarded candidate says it, the
   caption is decoded again with that name forced in (``"a cat ..."``, a one-constraint case of the
   constrained beam search of Anderson et al. 2017, the constraint put first).

The decoding policy (:meth:`vsekit.captioning.generator.CaptionGenerator`): a guarded caption says each
content word at most once (:meth:`ConceptGuard.said_once`, a rule of the beam search); candidates that
repeat a three-word sequence are dropped (:meth:`ConceptGuard.fluent`); a forced caption is kept only
when the words after the name cost nothing (:meth:`ConceptGuard.supported`: its continuation invents no
watched object); otherwise the caption is the plain name ("a fish", "a tape measure": the class's own
lemma when the captioner has no word for it), and so it is when no candidate is left at all (the most
probable name).

**When.** The classifier has no person class, so on the photos the captioner knows best (Flickr8K's people
outdoors) the guard would bar words it has every reason to say. It therefore decodes only photos *unlike*
the captioner's training photos: a photo's familiarity is the cosine to its ``k``-th nearest training photo
(the deep k-nearest-neighbour out-of-distribution score of Sun et al. 2022, on unit features in a 128-d SVD
basis of the training photos, shipped in the guard's file); photos at least ``familiar_at`` familiar are
captioned as without the guard. A familiar photo is guarded all the same when its classifier puts at
least ``novel_at`` of its probability on *novel* classes, those that are the sure top class (p >= 0.2) of
none of the training photos (on the everyday set, fish underwater, pyramids and windmills came out
familiar: Flickr8K has swimmers, deserts and fields, but its photos are never a sure "coral reef").

The knobs (``weight``, ``floor``, ``name_at``) were chosen on the everyday validation set, ``familiar_at``
and ``novel_at`` on flickr8k-val1000 and the everyday set (``bench/concept_captions.py``).

A guarded caption must name an object its evidence supports (:meth:`ConceptGuard.grounded`); when none
does, the caption is the subject's name.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vsekit.captioning.decode import Caption
from vsekit.captioning.scnlm_rerank import STOPWORDS as FUNCTION_WORDS
from vsekit.data.vocab import SPECIALS, Vocabulary
from vsekit.errors import VsekitError
from vsekit.fileio import atomic_save_safetensors, read_vsekit_safetensors
from vsekit.resources import PACKAGE_DIR

__all__ = [
    "GUARD_FORMAT",
    "ConceptGuard",
    "Familiarity",
    "GuardSettings",
    "Subject",
    "load_guard",
    "save_guard_table",
]

logger = logging.getLogger(__name__)

GUARD_FORMAT = "vsekit.caption-guard"
GUARD_PATH = PACKAGE_DIR / "pretrained" / "caption-guard.safetensors"
_VOWELS = tuple("aeiou")


@dataclass(frozen=True)
class GuardSettings:
    """``weight``: log-probability cost per e-fold of missing evidence; ``floor``: evidence that costs
    nothing, in units of the word's typical evidence; ``name_at``: probability of a class name above which
    the caption must say it. Chosen on the everyday set (bench/concept_captions.py --grid): weights 1-10 x
    floors 0.1-4 x name_at 0.2-0.5; the largest floor and weight 6 bar most invented people and every dog.
    ``familiar_at``: familiarity (:class:`Familiarity`) from which a photo is captioned without the guard
    (above 1: every photo is guarded); chosen on flickr8k-val1000: the highest that costs its captions no
    more than 1 CIDEr-D point. ``novel_at``: share of a photo's class probability on classes the training
    photos never show (:attr:`ConceptGuard.novel`) from which a familiar photo is guarded too (above 1:
    never); chosen with ``familiar_at``, the pair that invents least on the everyday set within that
    CIDEr-D point. ``ground``: a guarded caption must name a supported object (:meth:`ConceptGuard.grounded`);
    ``once``: a guarded caption says each content word at most once (:meth:`ConceptGuard.said_once`)."""

    weight: float = 6.0
    floor: float = 4.0
    name_at: float = 0.3
    familiar_at: float = 0.6
    novel_at: float = 0.6
    ground: bool = True
    once: bool = True

    def to_dict(self) -> dict[str, float | bool]:
        return asdict(self)


@dataclass(frozen=True)
class Subject:
    """A photo's main subject by the classifier: the name a caption uses and its summed probability."""

    name: str
    probability: float

    @property
    def phrase(self) -> str:
        """The name with its indefinite article ("an owl")."""
        return ("an " if self.name.startswith(_VOWELS) else "a ") + self.name


def _unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


@dataclass(frozen=True)
class Familiarity:
    """How much photos look like the captioner's training photos (module docstring, "When"): the cosine to
    the ``k``-th nearest of ``reference`` (unit rows) in ``basis`` ``[D, d]``."""

    basis: np.ndarray
    reference: np.ndarray
    k: int = 20

    @classmethod
    def fit(cls, features: np.ndarray, dim: int = 128, k: int = 20) -> Familiarity:
        """From the training photos' features: the top-``dim`` right singular vectors of the unit features
        (not centred: the direction every photo shares carries the score) and the photos in them."""
        x = _unit(features)
        basis = np.linalg.svd(x, full_matrices=False)[2][:dim].T
        return cls(basis, _unit(x @ basis), min(k, len(x)))

    def scores(self, features: np.ndarray) -> np.ndarray:
        """``[n]`` familiarity of each row of ``features`` (in [-1, 1])."""
        sims = _unit(_unit(features) @ self.basis) @ self.reference.T
        return np.partition(sims, -self.k, axis=1)[:, -self.k]


class ConceptGuard:
    """The guard for one captioner vocabulary (module docstring).

    Args:
        words: the watched object words (caption words), one per column of ``evidence``.
        evidence: ``[classes, words]`` support of each class for each word, in [0, 1].
        typical: ``[words]`` each word's typical evidence in photos that show it (default 1).
        class_names: each class's name in a caption.
        vocab: the captioner's vocabulary (watched words it lacks are ignored).
        settings: the knobs.
        familiarity: which photos are like the training photos (None: every photo is guarded).
        novel: ``[classes]`` bool, the classes no training photo shows (None: none is).
    """

    def __init__(
        self,
        words: Sequence[str],
        evidence: np.ndarray,
        class_names: Sequence[str],
        vocab: Vocabulary,
        settings: GuardSettings | None = None,
        typical: np.ndarray | None = None,
        familiarity: Familiarity | None = None,
        novel: np.ndarray | None = None,
    ) -> None:
        evidence = np.asarray(evidence, dtype=np.float32)
        typical = np.ones(len(words), np.float32) if typical is None else np.asarray(typical, np.float32)
        if evidence.shape != (len(class_names), len(words)):
            raise VsekitError(
                f"guard table: evidence {evidence.shape} does not match {len(class_names)} classes x "
                f"{len(words)} words"
            )
        known = [j for j, w in enumerate(words) if w in vocab]
        self.words = [words[j] for j in known]
        self.word_ids = np.array([vocab.index(w) for w in self.words], dtype=np.int64)
        self.evidence = evidence[:, known]
        self.typical = typical[known]
        self.class_names = list(class_names)
        self.vocab = vocab
        self.settings = settings or GuardSettings()
        self.familiarity = familiarity
        self.novel = np.zeros(len(class_names), bool) if novel is None else np.asarray(novel, dtype=bool)
        if self.novel.shape != (len(class_names),):
            raise VsekitError(f"guard table: {self.novel.shape} novel flags for {len(class_names)} classes")
        names = sorted(set(self.class_names))
        self._name_index = {n: i for i, n in enumerate(names)}
        self._names = names
        self._groups = np.array([self._name_index[n] for n in self.class_names])
        content = [w not in FUNCTION_WORDS and w not in SPECIALS for w in vocab.words]
        self._content = torch.tensor(content, dtype=torch.bool)  # the said-once mask, built once

    def unfamiliar(self, features: np.ndarray, probabilities: np.ndarray | None = None) -> np.ndarray:
        """``[n]`` bool: the photos to guard (module docstring, "When"): those unlike the training photos
        (all of them without a reference) and, given their class ``probabilities``, those whose classifier
        puts at least ``novel_at`` of its probability on novel classes."""
        if self.familiarity is None:
            return np.ones(len(features), dtype=bool)
        unlike = self.familiarity.scores(features) < self.settings.familiar_at
        if probabilities is None or not self.novel.any():
            return unlike
        return unlike | (self.novelty(probabilities) >= self.settings.novel_at)

    def novelty(self, probabilities: np.ndarray) -> np.ndarray:
        """``[n]``: each photo's class probability on classes none of the training photos shows."""
        return np.asarray(probabilities, dtype=np.float32) @ self.novel.astype(np.float32)

    def word_evidence(self, probabilities: np.ndarray) -> np.ndarray:
        """``[n, W]``: e(w | x) for every watched word (module docstring, step 1)."""
        return np.minimum(np.asarray(probabilities, dtype=np.float32) @ self.evidence, 1.0)

    def word_bias(self, probabilities: np.ndarray) -> torch.Tensor:
        """``[n, V]`` additive log-probability bias: ``weight * log(min(1, e / (floor * typical)))`` on
        watched words, 0 elsewhere."""
        return self.bias_of(self.word_evidence(probabilities))

    def bias_of(self, e: np.ndarray) -> torch.Tensor:
        """:meth:`word_bias` from the evidence ``e`` ``[n, W]`` already computed (:meth:`word_evidence`)."""
        s = self.settings
        cost = s.weight * np.log(np.clip(e / (s.floor * self.typical), 1e-6, 1.0))
        bias = np.zeros((len(e), len(self.vocab)), dtype=np.float32)
        bias[:, self.word_ids] = cost
        return torch.from_numpy(bias)

    def subjects(self, probabilities: np.ndarray, threshold: float | None = None) -> list[Subject | None]:
        """Each photo's main subject, when one caption name holds at least ``threshold`` (default
        ``name_at``) of the probability."""
        threshold = self.settings.name_at if threshold is None else threshold
        p = np.asarray(probabilities, dtype=np.float32)
        mass = np.zeros((len(p), len(self._names)), dtype=np.float32)
        np.add.at(mass.T, self._groups, p.T)  # sum the classes that share a name
        best = mass.argmax(axis=1)
        return [
            Subject(self._names[b], float(mass[i, b])) if mass[i, b] >= threshold else None
            for i, b in enumerate(best)
        ]

    def prefix_ids(self, subject: Subject) -> list[int] | None:
        """The forced caption start ("a cat") as word ids, or None when the captioner lacks a word of it."""
        words = subject.phrase.split()
        return [self.vocab.index(w) for w in words] if all(w in self.vocab for w in words) else None

    @staticmethod
    def fluent(captions: Sequence[Caption]) -> list[Caption]:
        """The captions that repeat no three-word sequence: with its Flickr8K subjects barred, the language
        model may fill a caption with "brown and white brown and white ..."."""
        out = []
        for c in captions:
            grams = list(zip(c.tokens, c.tokens[1:], c.tokens[2:], strict=False))
            if len(set(grams)) == len(grams):
                out.append(c)
        return out

    def said_once(self) -> torch.Tensor | None:
        """``[V]`` bool: the words a guarded caption says at most once (None when ``once`` is off): every
        word but the function words. Its Flickr8K subjects barred, the language model loops on colours and
        scenery ("a fish sits in a green green and white yellow and yellow ..."); no repeated trigram
        (:meth:`fluent`) misses most such loops, and a guarded photo's caption rarely has reason to say a
        content word twice."""
        return self._content if self.settings.once else None

    def grounded(self, captions: Sequence[Caption], evidence: np.ndarray) -> list[Caption]:
        """The captions that name at least one watched object with evidence ``evidence`` (one image's row of
        :meth:`word_evidence`) at least its typical evidence, as much as half the training photos that show
        it: with its Flickr8K subjects barred, the language model may write a caption about nothing ("a
        black and white is standing in front of a sign"), which then fills the gap with scenery the photo
        may not have. (Not the words the bias leaves free: 50 words, "dog" among them, are never free.)"""
        if not self.settings.ground:
            return list(captions)
        ids = set(self.word_ids[np.asarray(evidence) >= self.typical].tolist())
        return [c for c in captions if ids.intersection(c.tokens)]

    @staticmethod
    def supported(captions: Sequence[Caption], bias: torch.Tensor, skip: int = 0) -> list[Caption]:
        """The captions whose words after the first ``skip`` cost nothing under ``bias`` (one image's row of
        :meth:`word_bias`): a forced "a fish ..." is kept only if the rest invents nothing."""
        row = bias.numpy()
        return [c for c in captions if float(row[list(c.tokens[skip:])].sum()) > -1e-6]

    @staticmethod
    def names_subject(text: str, subject: Subject) -> bool:
        """Whether a caption says the subject's name (singular or plural)."""
        words = text.split()
        name = subject.name.split()
        n = len(name)
        plural = [*name[:-1], name[-1] + "s"]
        return any(words[i : i + n] in (name, plural) for i in range(len(words) - n + 1))


def save_guard_table(
    path: str | os.PathLike[str],
    evidence: np.ndarray,
    meta: Mapping[str, Any],
    typical: np.ndarray | None = None,
    familiarity: Familiarity | None = None,
    novel: np.ndarray | None = None,
) -> Path:
    """Write the guard's table: ``evidence`` ``[1000, W]`` (float16), ``typical`` ``[W]``, the familiarity
    reference (float16), the ``novel`` class flags ``[1000]`` and ``meta`` (``words``, ``class_names``,
    ``backbone``, optional ``settings``, provenance) as JSON header fields."""
    header = {k: json.dumps(v) for k, v in meta.items() if k != "format"}
    header["format"] = GUARD_FORMAT
    header["format_version"] = "1"
    tensors = {"evidence": torch.from_numpy(np.asarray(evidence, dtype=np.float16)).contiguous()}
    if novel is not None:
        tensors["novel"] = torch.from_numpy(np.asarray(novel, dtype=np.uint8)).contiguous()
    if typical is not None:
        tensors["typical"] = torch.from_numpy(np.asarray(typical, dtype=np.float32)).contiguous()
    if familiarity is not None:
        header["familiar_k"] = str(familiarity.k)
        for name in ("basis", "reference"):
            array = np.asarray(getattr(familiarity, name), dtype=np.float16)
            tensors[f"familiar_{name}"] = torch.from_numpy(array).contiguous()
    return atomic_save_safetensors(tensors, path, header)


def load_guard(
    vocab: Vocabulary,
    backbone: str,
    path: str | os.PathLike[str] | None = None,
    settings: GuardSettings | None = None,
) -> ConceptGuard:
    """The shipped guard table (or ``path``) for a captioner with ``vocab`` reading ``backbone`` features;
    ``settings`` override the file's tuned knobs."""
    path = Path(path) if path is not None else GUARD_PATH
    header, tensors = read_vsekit_safetensors(path, GUARD_FORMAT, "caption guard", 1)
    try:
        meta = {
            k: json.loads(header[k]) for k in ("words", "class_names", "backbone", "settings") if k in header
        }
        words, names, evidence = meta["words"], meta["class_names"], tensors["evidence"].float().numpy()
        typical = tensors["typical"].numpy() if "typical" in tensors else None
        novel = tensors["novel"].numpy().astype(bool) if "novel" in tensors else None
        tuned = GuardSettings(**meta.get("settings", {}))
        familiarity = None
        if "familiar_reference" in tensors:
            basis, reference = (tensors[f"familiar_{n}"].float().numpy() for n in ("basis", "reference"))
            familiarity = Familiarity(basis, reference, int(header["familiar_k"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise VsekitError(f"{path}: damaged caption guard file ({type(exc).__name__}: {exc})") from exc
    if meta.get("backbone") != backbone:
        raise VsekitError(f"{path}: the guard reads {meta.get('backbone')} classes, the captioner {backbone}")
    return ConceptGuard(words, evidence, names, vocab, settings or tuned, typical, familiarity, novel)
