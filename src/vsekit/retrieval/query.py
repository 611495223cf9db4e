"""Answering a query against an open photo index: the query vector, the filters, the nearest rows, the hits.

A query is a sentence, a photo or a given vector, with optional ``plus`` / ``minus`` words (Kiros et
al. 2014, Eq. 15: :func:`~vsekit.retrieval.arithmetic.arithmetic_query`). The filters (a folder with
its subfolders, the EXIF date taken) become per-segment row masks from one indexed query. The nearest
rows come from the snapshot's segments with the index's engine (:mod:`vsekit.retrieval.search`); a
segment's saved FAISS structure is memory-mapped from the file its snapshot holds open, checked once
against the checksum the store recorded, read in place and kept. The hits are cut to ``k``, optionally
after the paper's re-sort of the top results by distance to their mean.

:class:`Searching` is the query half of :class:`vsekit.retrieval.index.Index` (the other half opens,
builds and describes it); the index supplies the snapshot it holds, its folder, its model and the lock
that serialises the model's forward passes and the FAISS cache.
"""

from __future__ import annotations

import datetime as dt
import mmap
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

import numpy as np

from vsekit.errors import VsekitError
from vsekit.retrieval.arithmetic import ArithmeticRule, arithmetic_query, load_arithmetic_rule, resort_by_mean
from vsekit.retrieval.search import deserialize_ann, resolve_engine
from vsekit.retrieval.segments import LivePaths, Segment, Snapshot
from vsekit.retrieval.store import DB, damaged, reader
from vsekit.retrieval.store.blocks import mismatch

if TYPE_CHECKING:
    from vsekit.embedding.pipeline import ImageInput, VSEModel
    from vsekit.retrieval.text_engine import TextTower

__all__ = [
    "MAX_QUERY_CHARS",
    "RouteScores",
    "SearchHit",
    "Searching",
    "filter_masks",
    "hits_from",
    "without_copies",
]

MAX_QUERY_CHARS = 1000


@dataclass(frozen=True)
class SearchHit:
    """One result: ``id`` (the row, stable until the next update), ``path`` relative to the photo folder,
    ``score`` (the cosine; with the concept route the fused score, :mod:`vsekit.retrieval.answer`). A fused
    hit also has its ``joint`` cosine, its ``concept`` score, the ``route`` that found it (``joint``,
    ``concept`` or ``both``) and the class that matched (``label``)."""

    id: int
    path: str
    score: float
    joint: float | None = None
    concept: float | None = None
    route: str | None = None
    label: str | None = None


@dataclass
class RouteScores:
    """Both routes' scores of a sentence over the candidates either route proposes (positions ``ids``):
    ``joint`` cosines, ``concept`` scores, and each candidate's best-matching class (``classes``, the class
    that adds most to its concept score) with that class's probability (``probabilities``); the best score
    of each route over every photo the filters keep (``best_joint``, ``best_concept``)."""

    ids: np.ndarray
    joint: np.ndarray
    concept: np.ndarray
    classes: np.ndarray
    probabilities: np.ndarray
    best_joint: float
    best_concept: float


class Searching:
    """The queries of an open index (mixed into :class:`~vsekit.retrieval.index.Index`, which sets
    these attributes and the :attr:`model` property)."""

    path: Path
    _view: Snapshot
    _lock: threading.Lock
    _faiss: dict[tuple[str, str, str | None], Any]

    @property
    def model(self) -> VSEModel:
        raise NotImplementedError  # Index's property

    @property
    def manifest(self) -> dict[str, Any]:
        raise NotImplementedError  # Index's property

    def text_side(self) -> TextTower | VSEModel:
        raise NotImplementedError  # Index's method

    def arithmetic_rule(self, weight: float | None = None) -> ArithmeticRule:
        """How this index's model weighs and reads the ``plus`` / ``minus`` words (the rule shipped for the
        model file, else Kiros Eq. 15's), with ``weight`` instead of its weight when one is given."""
        model = self.manifest["model"]
        return load_arithmetic_rule(str(model["name"]), str(model["sha256"])).with_weight(weight)

    def embed_texts(self, texts: Sequence[str]) -> np.ndarray:
        """Unit query vectors of sentences (the model's text side, :meth:`text_side`)."""
        texts = [_check_text(t) for t in texts]
        side = self.text_side()
        with self._lock:  # one forward pass at a time: concurrent requests share the model
            return side.embed_texts(texts)

    def embed_image(self, image: ImageInput) -> np.ndarray:
        """The unit vector of a photo (a path or a PIL image; it need not be in the index)."""
        model = self.model
        with self._lock:
            return model.embed_images([image])[0]

    def query_vector(
        self,
        text: str | None = None,
        image: ImageInput | None = None,
        *,
        vector: np.ndarray | None = None,
        plus: Sequence[str] = (),
        minus: Sequence[str] = (),
        weight: float | None = None,
    ) -> np.ndarray:
        """The unit query vector: a sentence, a photo or a given vector, with Eq. 15 arithmetic applied by
        the model's rule (:meth:`arithmetic_rule`; ``weight``: the words' weight instead of its)."""
        given = [x is not None for x in (text, image, vector)]
        if sum(given) != 1:
            raise VsekitError("give exactly one of text, image or vector as the query")
        if text is not None:
            base = self.embed_texts([text])[0]
        elif image is not None:
            base = self.embed_image(image)
        else:
            base = np.asarray(vector, dtype=np.float32).reshape(-1)
        if not plus and not minus:
            return base
        rule = self.arithmetic_rule(weight)
        plus_v = self.embed_texts(rule.texts(plus)) if plus else None
        minus_v = self.embed_texts(rule.texts(minus)) if minus else None
        return arithmetic_query(base, plus_v, minus_v, rule.weight)

    def search(
        self,
        text: str | None = None,
        image: ImageInput | None = None,
        *,
        vector: np.ndarray | None = None,
        plus: Sequence[str] = (),
        minus: Sequence[str] = (),
        weight: float | None = None,
        k: int = 10,
        min_score: float | None = None,
        resort: int = 0,
        engine: str | None = None,
        folder: str | None = None,
        taken_after: str | dt.date | None = None,
        taken_before: str | dt.date | None = None,
        leave_out: str | None = None,
    ) -> list[SearchHit]:
        """The ``k`` photos nearest a sentence, a photo (path or PIL image) or a vector, with optional
        ``minus`` / ``plus`` words (Kiros et al. 2014, Eq. 15, by the model's rule: :meth:`arithmetic_rule`;
        ``weight`` overrides its words' weight) and the paper's re-sort of the top
        ``resort`` results by distance to their mean (0: off). Hits below ``min_score`` are dropped.
        Filters: ``folder`` (a folder relative to the photo folder, with its subfolders), and the EXIF
        date taken, ``taken_after <= taken < taken_before`` (dates or ISO text; photos without a date
        are left out when either is given); ``leave_out``: the photos whose bytes have this sha256 (the
        photo searched by and its exact copies) are not searched."""
        query = self.query_vector(text, image, vector=vector, plus=plus, minus=minus, weight=weight)
        return self.search_vectors(
            query[None], k, min_score=min_score, resort=resort, engine=engine,
            folder=folder, taken_after=taken_after, taken_before=taken_before, leave_out=leave_out,
        )[0]  # fmt: skip

    def search_texts(
        self, texts: Sequence[str], k: int = 10, min_score: float | None = None, engine: str | None = None
    ) -> list[list[SearchHit]]:
        """One list of hits per sentence (embedded in one batch)."""
        return self.search_vectors(self.embed_texts(texts), k, min_score=min_score, engine=engine)

    def search_vectors(
        self,
        queries: np.ndarray,
        k: int = 10,
        *,
        min_score: float | None = None,
        resort: int = 0,
        engine: str | None = None,
        folder: str | None = None,
        taken_after: str | dt.date | None = None,
        taken_before: str | dt.date | None = None,
        leave_out: str | None = None,
    ) -> list[list[SearchHit]]:
        """Hits for each unit query vector ``[q, K]`` (see :meth:`search`)."""
        if k < 1:
            raise VsekitError(f"k must be >= 1, got {k}")
        view = self._view
        if len(view) == 0:
            return [[] for _ in np.atleast_2d(queries)]
        keep = filter_masks(view, folder, taken_after, taken_before)
        if leave_out is not None:
            keep = without_copies(view, keep, leave_out)
        want = min(max(k, resort), len(view))
        scores, rows = self._nearest(queries, want, engine, view=view, keep=keep)
        return hits_from(scores, rows, LivePaths(view), view.vector, k, min_score, resort)

    def photo_sha256(self, photo_id: int) -> str:
        """The sha256 of the bytes of indexed photo ``photo_id`` (a hit's id) as the index recorded them."""
        view = self._view
        if not 0 <= int(photo_id) < len(view):
            raise VsekitError(f"no photo with id {photo_id} (the index holds {len(view)})")
        record = view.record(view.path(int(photo_id)))
        if record is None:  # the position's photo is recorded under another id: damage
            raise damaged(view.out / DB, f"no record of the photo at {photo_id}", view.out)
        return str(record["sha256"])

    def copies(self, sha256: str) -> list[str]:
        """The ids (paths) of the indexed photos whose bytes have ``sha256``: a photo and its exact copies."""
        return self._view.read(reader.copies, sha256)

    def route_scores(
        self,
        query: np.ndarray,
        relevance: np.ndarray,
        top: int,
        candidates: int,
        *,
        folder: str | None = None,
        taken_after: str | dt.date | None = None,
        taken_before: str | dt.date | None = None,
    ) -> RouteScores:
        """Both routes for one sentence (its unit ``query`` vector and its ``relevance`` to each class,
        :meth:`~vsekit.retrieval.concepts.ConceptRoute.relevance`): each proposes its best ``candidates``
        photos (the joint space through the index's engine, the concept route exactly over every photo's
        stored top ``top`` classes), and every candidate is scored by both."""
        view = self._view
        keep = filter_masks(view, folder, taken_after, taken_before)
        want = min(candidates, len(view))
        scores, rows = self._nearest(query[None], want, None, view=view, keep=keep)
        joint_rows = rows[0][rows[0] >= 0]
        ids, probs = view.concepts(top)
        weighted = probs * relevance[ids.astype(np.int64)]  # [n, T]: each class's share of the score
        concept = weighted.sum(axis=1)
        if keep is not None:
            concept = np.where(_position_mask(view, keep), concept, -np.inf)
        concept_rows = np.argsort(-concept, kind="stable")[:want]
        concept_rows = concept_rows[np.isfinite(concept[concept_rows])]
        pool = np.unique(np.concatenate([joint_rows, concept_rows])).astype(np.int64)
        best_joint = float(scores[0][0]) if len(joint_rows) else float("-inf")
        best_concept = float(concept[concept_rows[0]]) if len(concept_rows) else float("-inf")
        return _pool_scores(
            view, query, pool, (ids[pool], probs[pool]), weighted[pool], (best_joint, best_concept)
        )

    def photo_route_scores(
        self, query: np.ndarray, relevance: np.ndarray, top: int, position: int
    ) -> RouteScores:
        """:meth:`route_scores` of the one photo at ``position`` (a hit's id), as a search scores it when it
        is a candidate; ``best_joint`` and ``best_concept`` are its own scores."""
        view = self._view
        if not 0 <= position < len(view):
            raise VsekitError(f"no photo with id {position} (the index holds {len(view)})")
        ids, probs = view.concepts(top)
        pool = np.asarray([position], dtype=np.int64)
        weighted = probs[pool] * relevance[ids[pool].astype(np.int64)]
        found = _pool_scores(view, query, pool, (ids[pool], probs[pool]), weighted, (0.0, 0.0))
        found.best_joint, found.best_concept = float(found.joint[0]), float(found.concept[0])
        return found

    def _nearest(
        self,
        queries: np.ndarray,
        k: int,
        engine: str | None,
        *,
        view: Snapshot | None = None,
        keep: dict[int, np.ndarray] | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        view = view or self._view
        requested = engine or view.settings["engine"]
        chosen = resolve_engine(requested, len(view), int(view.settings["model"]["embed_dim"]))
        if chosen == "flat":
            chosen = "exact"  # the same answer; the store searches it from the maps
        # ``auto`` takes the ANN structure a segment has, whichever: an index built before ``auto`` chose
        # IVF-PQ for large indexes keeps searching its HNSW structures
        any_ann = requested == "auto" and chosen != "exact"
        return view.nearest(queries, k, chosen, keep, self._ann_of, any_ann)

    def _ann_of(self, segment: Segment, engine: str) -> tuple[Any, dict[str, int]]:
        """A segment's saved FAISS structure (mapped from the file its snapshot holds open, checked
        once) and its search settings."""
        assert segment.ann is not None  # asked only for segments with an ANN structure
        _, name, params = segment.ann
        sha = self._view.read(reader.file_sha, name)
        # keyed by content too: a repaired ANN file may be given a name a replaced one had
        key = (str(self.path / name), name, sha)
        with self._lock:
            if key not in self._faiss:
                self._faiss[key] = (self._read_ann(segment, name, params, sha), dict(params))
            return self._faiss[key]

    def _read_ann(self, segment: Segment, name: str, params: dict[str, int], sha: str | None) -> Any:
        """The FAISS structure in the file ``name`` of ``segment``, refused when its bytes differ from
        the checksum the store recorded (a damaged file must not answer queries), or when the store
        records none (only an index in the old format has none). The file the snapshot holds open is
        memory-mapped, as its segments are, and the structure read in place (no copy of it in memory)."""
        path = self.path / name
        try:
            if segment.ann_file is not None and os.fstat(segment.ann_file.fileno()).st_size:
                data: Any = mmap.mmap(segment.ann_file.fileno(), 0, access=mmap.ACCESS_READ)
            else:  # an empty file (mmap refuses those) is refused below
                data = path.read_bytes() if segment.ann_file is None else b""
        except OSError as exc:
            raise damaged(path, exc.strerror or str(exc), self.path) from None
        if not sha and self._view.generation:
            raise damaged(path, "the index records no checksum for it", self.path)
        why = mismatch(data, sha) if sha else None  # every block: FAISS reads all of the file
        if why is not None:
            raise damaged(path, why, self.path)
        try:
            return deserialize_ann(data, params)
        except RuntimeError as exc:
            raise damaged(path, str(exc).splitlines()[0] if str(exc) else "unreadable", self.path) from None


def _iso(value: str | dt.date | None, name: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, dt.date):
        return value.isoformat()
    try:
        return (
            dt.datetime.fromisoformat(str(value)).isoformat()
            if "T" in str(value)
            else dt.date.fromisoformat(str(value)).isoformat()
        )
    except ValueError:
        raise VsekitError(f"{name}: {value!r} is not a date (YYYY-MM-DD or YYYY-MM-DDTHH:MM:SS)") from None


def filter_masks(
    view: Snapshot, folder: str | None, after: str | dt.date | None, before: str | dt.date | None
) -> dict[int, np.ndarray] | None:
    """Per segment, the rows the filters keep (one indexed query), or None without filters."""
    inside = None
    if folder is not None:
        name = str(PurePosixPath(folder.strip("/"))) if folder.strip("/") else ""
        if name not in ("", "."):
            if ".." in PurePosixPath(name).parts:
                raise VsekitError(f"folder {folder!r}: give a folder inside the photo folder")
            inside = name
    since, until = _iso(after, "taken_after"), _iso(before, "taken_before")
    if inside is None and since is None and until is None:
        return None
    return view.keep_masks(inside, since, until)


def _pool_scores(
    view: Snapshot,
    query: np.ndarray,
    pool: np.ndarray,
    classes: tuple[np.ndarray, np.ndarray],
    weighted: np.ndarray,
    best: tuple[float, float],
) -> RouteScores:
    """Both routes' scores of the photos at positions ``pool``, given their top ``classes`` ``(ids,
    probs)`` and ``weighted`` (``probs`` times the query's relevance to each class: the ConSE terms), rows
    in ``pool``'s order; ``best``: ``(best_joint, best_concept)``."""
    ids, probs = classes
    joint = np.array([float(view.vector(int(r)) @ query) for r in pool], dtype=np.float32)
    top = np.argmax(weighted, axis=1)[:, None] if len(pool) else np.zeros((0, 1), np.int64)
    return RouteScores(
        ids=pool,
        joint=joint,
        concept=weighted.sum(axis=1).astype(np.float32),
        classes=np.take_along_axis(ids, top, axis=1)[:, 0],
        probabilities=np.take_along_axis(probs, top, axis=1)[:, 0],
        best_joint=best[0],
        best_concept=best[1],
    )


def without_copies(
    view: Snapshot, keep: dict[int, np.ndarray] | None, sha256: str
) -> dict[int, np.ndarray] | None:
    """``keep`` (per-segment row masks; None: every live row) less the photos whose bytes have ``sha256``
    (a few rows left out: the engines search a little deeper, :func:`~vsekit.retrieval.segments.nearest`)."""
    found = view.read(reader.places_of, sha256)
    if not found:
        return keep
    if keep is None:
        keep = {}
        for segment in view.segments:
            keep[segment.n] = np.ones(segment.rows, dtype=bool)
            keep[segment.n][segment.dead] = False
    for n, row in found:
        if n in keep and 0 <= row < len(keep[n]):
            keep[n][row] = False
    return keep


def _position_mask(view: Snapshot, keep: dict[int, np.ndarray]) -> np.ndarray:
    """Per-segment row masks (:func:`filter_masks`) as one mask over the snapshot's live positions."""
    parts = []
    for segment in view.segments:
        live = np.ones(segment.rows, dtype=bool)
        live[segment.dead] = False
        parts.append(keep.get(segment.n, np.zeros(segment.rows, dtype=bool))[live])
    return np.concatenate(parts) if parts else np.zeros(0, dtype=bool)


def hits_from(
    scores: np.ndarray,
    rows: np.ndarray,
    paths: Sequence[str],
    vector_of: Callable[[int], np.ndarray],
    k: int,
    min_score: float | None,
    resort: int,
) -> list[list[SearchHit]]:
    """Hits per query from its nearest ``rows`` (best first, -1 = none) and their ``scores``: the top
    ``resort`` re-sorted by distance to their mean (Kiros et al. 2014's re-sort; ``vector_of(row)`` gives
    a stored vector), cut to ``k``, hits below ``min_score`` dropped. Shared by one index and shards."""
    out = []
    for s_q, r_q in zip(scores, rows, strict=True):
        keep = r_q >= 0
        s_q, r_q = s_q[keep], r_q[keep]
        if resort > 1 and len(r_q):
            # a re-sorted hit keeps its cosine to the query as its score
            top = np.stack([vector_of(int(r)) for r in r_q[:resort]])
            order = resort_by_mean(top, np.arange(len(top)))
            s_q = np.concatenate([s_q[:resort][order], s_q[resort:]])
            r_q = np.concatenate([r_q[:resort][order], r_q[resort:]])
        hits = [SearchHit(int(r), paths[r], float(s)) for s, r in zip(s_q[:k], r_q[:k], strict=True)]
        out.append([h for h in hits if min_score is None or h.score >= min_score])
    return out


def _check_text(text: str) -> str:
    if not isinstance(text, str) or not text.strip():
        raise VsekitError("empty query: give a sentence or a word")
    if len(text) > MAX_QUERY_CHARS:
        raise VsekitError(f"query of {len(text)} characters; the limit is {MAX_QUERY_CHARS}")
    return text
