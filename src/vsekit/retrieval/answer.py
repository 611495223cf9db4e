"""One answer policy for every front end: what a search returns, how the two routes are fused, and when
"no photo matches well" (the CLI, the web API, the page and the Python API all call :func:`answer`).

A sentence is searched by two routes (docs/concepts.md, "Two routes to meaning"):

* the **joint space**: the cosine between the sentence and the photo in the learned embedding;
* the **concept route**: ConSE over the photo's top ImageNet classes (:mod:`vsekit.retrieval.concepts`).

Fused score (both routes' candidates, re-scored by both): the more confident route decides::

    fused(x, q) = max(cos(q, x), a * concept(x, q) + b + c * named(q))   (concept term where concept >= g > 0)

so a photo the joint space knows well keeps its cosine, and one that only the classifier recognises is lifted
above the joint space's noise floor by its concept evidence. ``named(q)``, the query's best relevance to any
class (``max_c max(0, cos(q, e(c)) - margin)``), says how plainly the query names a thing the classifier
knows: "a cat" names one (0.40), "a dog runs on the grass" hardly (0.15, through "lawn mower"), so the concept
route's word counts for more in the first (a query-dependent weight of the routes, as Yan et al. 2004 learn
per query class for video retrieval). (A weighted sum, ``cos + w * concept``, was measured beside it: its best
weight that keeps Flickr8K val1000's text->image R@1 helps everyday photos less, and larger weights cost R@1,
the classes of a photo of people and dogs adding noise to distinctions the joint space makes;
bench/results/concept_route.json keeps both.) The weak verdict asks both routes: a search is weak when the
best cosine is below ``joint_below + u * named(q)`` and the best concept score below ``concept_below``: a
query that plainly names a class the classifier knows needs a higher cosine to count as found by the joint
space (which learned few such objects from Flickr8K, and gives everyday nouns middling cosines with many
photos), and its concept score decides. ``a``, ``b``, ``c``, ``u`` and the two thresholds are chosen on the
validation sets only (flickr8k-val1000 scored by a model trained without it, and the everyday set of
bench/everyday/), by ``ship/concept_route.py``, and shipped as ``<model>-routes.json`` pinned to the model
file; the gate ``g`` is fixed (see that script). A hit says which route found it (``route``: the route whose
term is its fused score, ``both`` when both routes pass their own weak thresholds) and, for a concept, which
class (``label``).

A photo query ("more like this") and arithmetic (Kiros et al. 2014, Eq. 15) stay in the joint space, where
those operations are defined. Arithmetic weighs and reads its words by the rule shipped for the model
(:func:`vsekit.retrieval.arithmetic.load_arithmetic_rule`; for ``vse``, chosen on flickr8k-val1000: the
words' difference weighted 1.25, each word read as "a photo of WORD"), which ``weight`` overrides. An index
built before the concept route searches the joint space only and says how to add the concepts
(``vsekit index update``).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from vsekit.errors import VsekitError, command, printable
from vsekit.fileio import file_sha256
from vsekit.resources import pinned_sidecar
from vsekit.retrieval.arithmetic import ArithmeticRule
from vsekit.retrieval.concepts import ConceptRoute, concepts_setting
from vsekit.retrieval.confidence import is_weak, language_warning, load_confidence
from vsekit.retrieval.query import RouteScores, SearchHit

__all__ = [
    "Answer",
    "PhotoConcept",
    "RoutePolicy",
    "answer",
    "fuse",
    "fusion_rule",
    "joint_answer",
    "load_policy",
    "photo_concept",
    "shards_answer",
    "with_score",
]

ROUTES_FORMAT = "vsekit.search-routes"
#: Candidates each route proposes before fusion (re-scored by both routes).
CANDIDATES = 100


@dataclass(frozen=True)
class RoutePolicy:
    """The shipped fusion of a model: the concept term's ``scale`` and ``offset`` (``a`` and ``b``), the
    least concept evidence that counts (``gate``, ``g``), the offset's rise with the query's best class
    relevance (``lift``, ``c``), the concept route's ``margin``, the two weak thresholds and the joint
    threshold's rise with that relevance (``joint_lift``, ``u``; module docstring)."""

    scale: float
    offset: float
    margin: float
    joint_below: float
    concept_below: float
    gate: float = 0.0
    lift: float = 0.0
    joint_lift: float = 0.0

    def for_query(self, relevance: np.ndarray) -> RoutePolicy:
        """The policy for one query whose relevance to the classes is ``relevance`` ``[classes]``: the
        offset raised by ``lift * named`` and the weak verdict's joint threshold by ``joint_lift * named``,
        ``named = max(relevance)`` (``c`` and ``u``, module docstring)."""
        named = float(np.max(relevance)) if np.size(relevance) else 0.0
        return replace(
            self,
            offset=self.offset + self.lift * named,
            joint_below=self.joint_below + self.joint_lift * named,
            lift=0.0,
            joint_lift=0.0,
        )

    def fused(self, joint: np.ndarray, concept: np.ndarray) -> np.ndarray:
        """``max(cos, a * concept + b)``, the concept term only where the concept evidence counts: a trace
        of a class (a probability of 0.01 on a vaguely related one) must not lift a photo by ``b``."""
        counts = (concept > 0) & (concept >= self.gate)
        term = np.where(counts, self.scale * concept + self.offset, -np.inf)
        return np.maximum(joint, term)

    def weak(self, scores: RouteScores) -> bool:
        """No photo matches well: neither route's best reaches its threshold."""
        return scores.best_joint < self.joint_below and scores.best_concept < self.concept_below

    def route(self, joint: float, concept: float) -> str:
        """``both`` when both routes pass their own thresholds, else the route whose term is the fused
        score."""
        if joint >= self.joint_below and concept >= self.concept_below:
            return "both"
        counts = concept > 0 and concept >= self.gate
        return "concept" if counts and self.scale * concept + self.offset > joint else "joint"


def fuse(scores: RouteScores, policy: RoutePolicy) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The candidates' order (best first; ties by the cosine), their fused scores and routes."""
    fused = policy.fused(scores.joint, scores.concept)
    order = np.lexsort((-scores.joint, -fused))
    routes = [policy.route(float(j), float(c)) for j, c in zip(scores.joint, scores.concept, strict=True)]
    return order, fused, routes


def fusion_rule(fusion: dict[str, Any]) -> str:
    """A routes file's ``fusion`` in words, as the docs and the model card print it:
    ``max(cos, a x concept + b + c x named), concept >= g`` (the lift only when there is one)."""
    lift = f" + {fusion['lift']:g} x named" if fusion.get("lift") else ""
    terms = f"{fusion['scale']:g} x concept + {fusion['offset']:g}{lift}"
    return f"max(cos, {terms}), concept >= {fusion.get('gate', 0):g}"


@functools.lru_cache(maxsize=16)  # read once per model file, not on every search
def load_policy(model: str, model_sha256: str) -> RoutePolicy | None:
    """The routes policy shipped for model ``model`` (a shipped name) and exactly that file, or None."""
    data = pinned_sidecar(model, model_sha256, "routes", ROUTES_FORMAT)
    if data is None:
        return None
    weak, fusion = data["weak"], data["fusion"]
    return RoutePolicy(
        float(fusion["scale"]),
        float(fusion["offset"]),
        float(data["margin"]),
        float(weak["joint_below"]),
        float(weak["concept_below"]),
        float(fusion.get("gate", 0.0)),
        float(fusion.get("lift", 0.0)),
        float(weak.get("joint_lift", 0.0)),
    )


@dataclass
class Answer:
    """What a search answers: ``hits`` best first; ``weak`` (None: not decided for this kind of query or
    model); ``best`` (the best cosine, and with the concept route the best concept score);
    ``warning`` (the query does not read as English); ``notice`` (a route that is off, and why);
    ``routes`` (the routes searched); ``reranked`` (how many top hits the aligner re-ordered);
    ``left_out`` (a photo query: the indexed photos with the query photo's bytes, left out of the hits;
    None: not a photo query, or one asked to keep them); ``arithmetic`` (a query with ``plus`` / ``minus``
    words: the rule it was computed by, :class:`~vsekit.retrieval.arithmetic.ArithmeticRule`)."""

    query: str | None
    hits: list[SearchHit]
    weak: bool | None = None
    best: dict[str, float] | None = None
    warning: str | None = None
    notice: str | None = None
    routes: tuple[str, ...] = ("joint",)
    reranked: int = 0
    left_out: list[str] | None = None
    arithmetic: ArithmeticRule | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "weak": self.weak,
            "best": None if self.best is None else {k: round(v, 6) for k, v in self.best.items()},
            "warning": self.warning,
            "notice": self.notice,
            "routes": list(self.routes),
            "reranked": self.reranked,
            "left_out": None if self.left_out is None else [printable(p) for p in self.left_out],
            "arithmetic": None if self.arithmetic is None else self.arithmetic.to_json(),
        }


def answer(
    index: Any,
    text: str | None = None,
    image: Any = None,
    *,
    plus: Sequence[str] = (),
    minus: Sequence[str] = (),
    weight: float | None = None,
    k: int = 10,
    rerank: int = 0,
    min_score: float | None = None,
    joint_only: bool = False,
    like: int | None = None,
    image_sha256: str | None = None,
    keep_query: bool = False,
    **options: Any,
) -> Answer:
    """The answer to one query on ``index`` (a :class:`vsekit.Index`): hits, the weak verdict, the
    language warning and which routes searched (module docstring). ``rerank=N`` re-orders the top ``N``
    of a sentence by the vse+aligner fusion; ``joint_only`` searches the joint space alone (cosine scores,
    the ranking ``vsekit eval`` measures); ``weight``: the ``plus`` / ``minus`` words' weight instead of the
    model's (module docstring); ``options``: ``vector``, ``resort``, ``engine``, ``folder``,
    ``taken_after``, ``taken_before`` as in :meth:`vsekit.Index.search` (``folder``: a folder of the index
    or an absolute path inside its photo folder, :meth:`vsekit.Index.search_folder`).

    A photo query, more like this, is ``image`` (a file, or a picture whose bytes have ``image_sha256``)
    or ``like``, an indexed photo's id (its stored vector is the query): the photo searched by, and every
    indexed photo with the same bytes, is left out of the hits (``keep_query``: kept)."""
    if rerank < 0:
        raise VsekitError(f"rerank must be >= 0, got {rerank}")
    sentence = text is not None and image is None and not plus and not minus
    if rerank and not sentence:
        raise VsekitError("rerank applies to a sentence query without --plus/--minus")
    if weight is not None and not plus and not minus:
        raise VsekitError("an arithmetic weight applies to a query with plus/minus words")
    if options.get("folder") is not None:  # a folder the index does not have is an error, not "no results"
        options["folder"] = index.search_folder(options["folder"]) or None
    model = index.manifest["model"]
    confidence = load_confidence(str(model["name"]), str(model["sha256"])) if sentence else None
    policy = load_policy(str(model["name"]), str(model["sha256"])) if sentence and not joint_only else None
    result = Answer(query=text, hits=[])
    result.left_out = _photo_query(index, image, like, image_sha256, keep_query, options)
    if plus or minus:
        result.arithmetic = index.arithmetic_rule(weight)
    if sentence and policy is not None and not options.get("resort") and _has_concepts(index):
        assert text is not None  # (a sentence query)
        hits = _fused(index, text, max(k, rerank), policy, options, result)
    else:
        if policy is not None:
            result.notice = (
                f"only the joint space searched: this index has no concepts yet; "
                f"{command('index', 'update', index.path)} adds them (everyday objects the CNN recognises)"
            )
        arithmetic = dict(plus=plus, minus=minus, weight=weight) if plus or minus else {}
        hits = index.search_joint(text, image, k=max(k, rerank), **arithmetic, **options)
        if confidence is not None:
            result.weak = is_weak([h.score for h in hits], confidence.weak_below)
            result.best = {"joint": max((h.score for h in hits), default=float("-inf"))}
    if rerank:
        hits = index.rerank(text, hits, rerank)
        result.reranked = min(rerank, len(hits))
    result.hits = [h for h in hits[:k] if min_score is None or h.score >= min_score]
    if confidence is not None:
        assert text is not None  # (confidence is loaded for a sentence query only)
        result.warning = language_warning(text, confidence.english_words)
    return result


def shards_answer(
    shards: Any,
    text: str | None = None,
    image: Any = None,
    *,
    image_sha256: str | None = None,
    keep_query: bool = False,
    **options: Any,
) -> Answer:
    """The answer of several indexes searched as one (a :class:`~vsekit.retrieval.shards.ShardedIndex`):
    the joint space alone (the shards have no fused route), the weak verdict and language warning of a
    sentence, and, as in :func:`answer`, a photo query's own photo and its exact copies left out;
    ``options`` as :meth:`ShardedIndex.search`."""
    sha256 = image_sha256
    if sha256 is None and isinstance(image, str | os.PathLike) and Path(image).is_file():
        sha256 = file_sha256(image)
    leave_out = None if keep_query else sha256
    if options.get("weight") is not None and not options.get("plus") and not options.get("minus"):
        raise VsekitError("an arithmetic weight applies to a query with plus/minus words")
    hits = shards.search(text, image, leave_out=leave_out, **options)
    sentence = image is None and not options.get("plus") and not options.get("minus")
    found = joint_answer(shards, text if sentence else None, hits)
    found.query = text
    if options.get("plus") or options.get("minus"):
        found.arithmetic = shards.shards[0].arithmetic_rule(options.get("weight"))
    found.left_out = None if leave_out is None else shards.copies(leave_out)
    if sentence and text is not None:
        found.notice = "several indexes are searched in the joint space only (the concept route reads one)"
    return found


def joint_answer(index: Any, sentence: str | None, hits: list[SearchHit]) -> Answer:
    """The answer of joint-space ``hits`` (a sharded search, a batch of sentences): for a ``sentence``, the
    weak verdict and the language warning from the calibration shipped for the model of ``index`` (an
    index or the first of several)."""
    found = Answer(query=sentence, hits=hits)
    if sentence is None:
        return found
    first = index.shards[0] if hasattr(index, "shards") else index
    model = first.manifest["model"]
    confidence = load_confidence(str(model["name"]), str(model["sha256"]))
    if confidence is not None:
        found.weak = is_weak([h.score for h in hits], confidence.weak_below)
        found.warning = language_warning(sentence, confidence.english_words)
    return found


def _photo_query(
    index: Any, image: Any, like: int | None, sha256: str | None, keep: bool, options: dict[str, Any]
) -> list[str] | None:
    """For a photo query: ``like``'s stored vector as the query, and the query photo's bytes left out
    (``options["leave_out"]``); returns the indexed photos left out (None: not a photo query, or ``keep``)."""
    if like is not None:
        if image is not None or options.get("vector") is not None:
            raise VsekitError("give one photo to search by: an image or an indexed photo's id")
        sha256 = index.photo_sha256(int(like))  # an id the index does not have: its one line
        options["vector"] = np.asarray(index.vectors[int(like)], dtype=np.float32)
    elif sha256 is None and isinstance(image, str | os.PathLike) and Path(image).is_file():
        sha256 = file_sha256(image)
    if keep or sha256 is None:
        return None
    options["leave_out"] = sha256
    return index.copies(sha256)


def _has_concepts(index: Any) -> bool:
    manifest = index.manifest
    backbone = manifest["model"].get("config", {}).get("image", {}).get("backbone")
    return manifest.get("concepts") == concepts_setting(str(backbone))


def _fused(
    index: Any, text: str, k: int, policy: RoutePolicy, options: dict, result: Answer
) -> list[SearchHit]:
    """Both routes' candidates, fused and labelled (module docstring); sets ``result``'s verdict."""
    route: ConceptRoute = index.concept_route(policy.margin)
    query, relevance = index.embed_texts([text])[0], route.relevance([text])[0]
    filters = {key: options[key] for key in ("folder", "taken_after", "taken_before") if options.get(key)}
    scores = index.route_scores(query, relevance, _top(index), CANDIDATES, **filters)
    policy = policy.for_query(relevance)
    order, fused, routes = fuse(scores, policy)
    paths, hits = index.paths, []
    for i in order[:k]:
        joint, concept = float(scores.joint[i]), float(scores.concept[i])
        label = route.table.name(int(scores.classes[i])) if _labelled(routes[i], concept) else None
        position = int(scores.ids[i])
        hits.append(SearchHit(position, paths[position], float(fused[i]), joint, concept, routes[i], label))
    result.routes = ("joint", "concept")
    result.best = {"joint": scores.best_joint, "concept": scores.best_concept}
    result.weak = policy.weak(scores)
    return hits


def _labelled(route: str, concept: float) -> bool:
    """Whether a hit names its class: the concept route found it (alone or with the joint space) through
    a class the query names (a positive concept score)."""
    return route != "joint" and concept > 0


@dataclass(frozen=True)
class PhotoConcept:
    """The class through which the concept route matches a query with one photo: its ``class_id``, name
    (``label``, a hit's label), the photo's ``probability`` of it (as the index stores it) and the hit's
    ``route`` (``concept`` or ``both``)."""

    class_id: int
    label: str
    probability: float
    route: str


def photo_concept(index: Any, text: str, photo: int) -> PhotoConcept | None:
    """The class a search for ``text`` labels the photo at row ``photo`` with (a fused hit's ``label``,
    by the same rule: module docstring), or None: no label, or the concept route is off here (the model
    ships no fusion, or the index has no concepts yet)."""
    model = index.manifest["model"]
    policy = load_policy(str(model["name"]), str(model["sha256"]))
    if policy is None or not _has_concepts(index):
        return None
    route: ConceptRoute = index.concept_route(policy.margin)
    query, relevance = index.embed_texts([text])[0], route.relevance([text])[0]
    scores = index.photo_route_scores(query, relevance, _top(index), photo)
    found = policy.for_query(relevance).route(float(scores.joint[0]), float(scores.concept[0]))
    if not _labelled(found, float(scores.concept[0])):
        return None
    class_id = int(scores.classes[0])
    return PhotoConcept(class_id, route.table.name(class_id), float(scores.probabilities[0]), found)


def _top(index: Any) -> int:
    return int(index.manifest["concepts"]["top"])


def with_score(hit: SearchHit, score: float) -> SearchHit:
    """``hit`` with another ``score`` (a re-rank's fused score), its route details kept."""
    return replace(hit, score=score)
