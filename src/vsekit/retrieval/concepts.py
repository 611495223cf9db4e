"""The concept route: a query scored against a photo through the 1,000 ImageNet classes its CNN recognises.

The joint space knows what Flickr8K's captions taught it; the CNN's ImageNet classifier knows cats, coffee
mugs, scissors and volcanoes. ConSE (Norouzi et al. 2014, Eq. 1) maps a photo into a sentence space as the
convex combination of its top-``T`` classes' name vectors, weighted by their probabilities; we score a
query ``q`` against photo ``x`` the same way in MiniLM's sentence space:

    concept(x, q) = sum_{t <= T} p(c_t | x) * max(0, cos(q, e(c_t)) - margin)        (after ConSE, Eq. 1)

with ``e(c)`` the sentence vector of class ``c``'s name and WordNet gloss (:func:`class_texts`). Two
departures from ConSE, both chosen on the everyday validation set (ship/concept_route.py): the
probabilities are not renormalised over the top ``T`` (a photo the classifier is unsure about keeps a low
score, which the weak-match signal needs), and a class counts only by how much more the query resembles it
than unrelated text does (the ``margin``).

A photo's top classes are stored in its index (sparse ``[n, T]`` ids and probabilities); the query side is
one sentence-encoder pass plus a ``[n, T]`` gather against a cached ``[1000]`` similarity row.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from vsekit.retrieval.store import pack_concepts
from vsekit.retrieval.text_engine import TextTower
from vsekit.vision.classes import (
    TOP_CLASSES,
    Classifier,
    ClassTable,
    class_table,
    load_classifier,
    top_classes,
)

if TYPE_CHECKING:  # the sentence encoder and the backbones (torch) load where they are used
    from vsekit.text.pretrained import MiniLMEncoder

__all__ = [
    "ConceptRoute",
    "SentenceVectors",
    "class_texts",
    "concept_scores",
    "concepts_setting",
    "packed_classes",
    "photo_classifier",
]

logger = logging.getLogger(__name__)


class SentenceVectors:
    """Unit sentence vectors of the pretrained all-MiniLM-L6-v2 (mean-pooled), computed with the vse's own
    text side so that a query's MiniLM runs once for both routes: as the ONNX graph of
    :mod:`vsekit.retrieval.text_engine`, or in PyTorch from the vse's encoder (a frozen one as it is; one
    whose top layers were tuned lends its frozen bottom and its cache to pretrained copies of those layers);
    else a MiniLM of its own."""

    def __init__(self, encoder: object | None = None) -> None:
        self._known: dict[str, np.ndarray] = {}  # precomputed texts (the class table)
        if isinstance(encoder, TextTower):
            self._tower: TextTower | None = encoder
            return
        from vsekit.text.pretrained import MiniLMEncoder

        self._tower = None
        self.encoder: MiniLMEncoder
        if isinstance(encoder, MiniLMEncoder) and encoder.finetune_last:
            pretrained = MiniLMEncoder(output_dim=1, head="linear", finetune_last=encoder.finetune_last)
            pretrained.share_frozen(encoder)
            encoder = pretrained.eval()
        elif not isinstance(encoder, MiniLMEncoder):
            encoder = MiniLMEncoder(output_dim=1, head="linear")
        self.encoder = encoder

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        if all(t in self._known for t in texts):
            vectors = np.stack([self._known[t] for t in texts]) if texts else np.zeros((0, 384), np.float32)
        else:
            vectors = self._encode(texts)
        return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)

    def _encode(self, texts: list[str]) -> np.ndarray:
        if self._tower is not None:
            return self._tower.sentences(texts)
        return self.encoder.sentences(texts).numpy().astype(np.float32)

    def precompute(self, texts: Sequence[str]) -> None:
        """Read (or encode once per machine and keep on disk) the vectors of ``texts``; the graph reads
        what PyTorch wrote (it was checked against it: :mod:`vsekit.retrieval.text_engine`)."""
        from vsekit.text.sentence_cache import cached_sentence_vectors

        identity = self.encoder.identity() if self._tower is None else self._tower.sentence_identity
        self._known.update(cached_sentence_vectors(texts, self._encode, identity))


def concept_scores(similarity: np.ndarray, ids: np.ndarray, probs: np.ndarray) -> np.ndarray:
    """ConSE scores ``[q, n]``: ``sum_t probs[n, t] * similarity[q, ids[n, t]]`` (module docstring).

    ``similarity`` ``[q, 1000]``: the queries' cosines to the class names; ``ids``/``probs`` ``[n, T]``:
    each photo's top classes and their probabilities."""
    similarity = np.atleast_2d(np.asarray(similarity, dtype=np.float32))
    if ids.size == 0:
        return np.zeros((similarity.shape[0], ids.shape[0]), dtype=np.float32)
    gathered = similarity[:, ids.astype(np.int64)]  # [q, n, T]
    return np.einsum("qnt,nt->qn", gathered, np.asarray(probs, dtype=np.float32))


def class_texts(table: ClassTable) -> list[str]:
    """What a class is called in the sentence space: its everyday name and WordNet's gloss ("tabby: a cat
    with a grey or tawny coat mottled with black"); the gloss names the kind of thing a lemma alone may
    not ("tabby", "papillon", "crane"). Chosen on the everyday validation set (ship/concept_route.py)."""
    return [f"{lemmas[0]}: {gloss}" for lemmas, gloss in zip(table.lemmas, table.glosses, strict=True)]


@dataclass
class ConceptRoute:
    """Queries against the class table: :meth:`relevance` gives each query's relevance to every class,
    ``max(0, cos(q, e(c)) - margin)``: a class a query merely resembles (every pair of English sentences
    has a cosine of 0.1 to 0.3) adds nothing, so a photo scores only through classes the query names."""

    sentences: SentenceVectors
    table: ClassTable
    margin: float = 0.25
    _class_vectors: np.ndarray | None = None

    @classmethod
    def create(cls, encoder: object | None = None, margin: float = 0.25) -> ConceptRoute:
        return cls(SentenceVectors(encoder), class_table(), margin)

    def class_vectors(self) -> np.ndarray:
        """``[1000, 384]`` unit vectors of the class texts (on disk after the first time on a machine)."""
        if self._class_vectors is None:
            texts = class_texts(self.table)
            self.sentences.precompute(texts)
            self._class_vectors = self.sentences(texts)
        return self._class_vectors

    def similarity(self, texts: Sequence[str]) -> np.ndarray:
        """``[q, 1000]``: each query's cosine to each class text."""
        return self.sentences(texts) @ self.class_vectors().T

    def relevance(self, texts: Sequence[str]) -> np.ndarray:
        """``[q, 1000]``: ``max(0, similarity - margin)``, what :func:`concept_scores` weighs by."""
        return np.maximum(self.similarity(texts) - self.margin, 0.0)


# ----------------------------------------------------------------------------- the photo side
#: What an index records once every photo's classes are stored (its ``concepts`` setting); an index
#: without it (built before the concept route) searches the joint space only until an update adds them.
def concepts_setting(backbone: str) -> dict[str, object]:
    return {"classes": "imagenet-1k", "backbone": backbone, "top": TOP_CLASSES, "format": 1}


def photo_classifier(spec: dict) -> Classifier | None:
    """The ImageNet classifier over the image features of a model whose image spec (``config["image"]``)
    is ``spec``, or None when its features are not the classifier's input (FNE codes, grid cells): then
    its indexes have no concept route. A model over ``pre-head`` cells (which trains its own copy of the
    CNN's head) gets the classifier behind the CNN's original head: the same classes as a one-layer
    model's."""
    from vsekit.vision.backbones import BACKBONES

    kind = spec.get("kind")
    if kind not in ("one-layer", "pre-head") or spec.get("backbone") not in BACKBONES:
        return None
    classifier = load_classifier(spec["backbone"], pre_head=kind == "pre-head")
    if kind == "pre-head":
        assert classifier.head is not None  # asked for
        cell_width, image_dim = classifier.head[0].shape[1], int(spec.get("image_dim", 0))
        return classifier if image_dim and image_dim % cell_width == 0 else None
    return classifier if classifier.dim == int(spec.get("image_dim", classifier.dim)) else None


def packed_classes(classifier: Classifier, features: np.ndarray) -> list[bytes]:
    """Each photo's top :data:`TOP_CLASSES` classes, packed as the store keeps them."""
    ids, probs = top_classes(classifier.probabilities(features), TOP_CLASSES)
    return [pack_concepts(i, p) for i, p in zip(ids, probs, strict=True)]
