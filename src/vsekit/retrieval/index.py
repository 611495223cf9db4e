"""An index of a folder of photos: embed every photo once, then search it by text, photo or arithmetic.

``Index.build(photos, out)`` embeds every photo with a joint model (the shipped ``vse`` by default) into
the photo index store in ``out`` (:mod:`vsekit.retrieval.store`): per-photo records in ``store.sqlite``
and the vectors in immutable ``segments/<n>.npy`` files; ``docs/index-store.md`` describes the files and
their promises. **Incremental**: building again (or :meth:`Index.update`) embeds new files, re-embeds
changed ones (size or mtime changed and different bytes), tombstones deleted ones and writes only
what changed, as one new segment in one committed generation. **Resumable**: see
:mod:`vsekit.retrieval.build`. An open index holds the generation it opened (a reader never sees half
an update); :meth:`Index.refresh` moves it to the newest one. Unreadable photos are reported and
recorded, never zero-filled; an index refuses photos embedded by another model. An index in the format
before the store (``index.json`` + ``embeddings-*.npy``) opens read-only and is converted by the next
build or update without re-embedding.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

from vsekit.data import load_corpus
from vsekit.embedding.pipeline import ImageInput, VSEModel
from vsekit.errors import ConfigMismatchError, VsekitError
from vsekit.resources import is_shipped_joint_model, sample_data_path
from vsekit.retrieval.arithmetic import arithmetic_query, resort_by_mean
from vsekit.retrieval.build import Builder, BuildReport, ChunkResult, ChunkRunner, compact, embed_chunk
from vsekit.retrieval.legacy import FORMAT, FORMAT_VERSION, legacy_snapshot, read_manifest
from vsekit.retrieval.photos import PhotoFile
from vsekit.retrieval.search import deserialize_ann, resolve_engine
from vsekit.retrieval.segments import LivePaths, LiveVectors, Segment, Snapshot, open_snapshot
from vsekit.retrieval.store import (
    DB,
    GENERATION_MARK,
    LEGACY_MANIFEST,
    SEGMENTS,
    Store,
    check_out_dir,
    damaged,
    id_bytes,
    id_text,
    writer_lock,
)

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "BuildReport",
    "ChunkResult",
    "ChunkRunner",
    "Index",
    "SearchHit",
    "embed_chunk",
]

logger = logging.getLogger(__name__)

DTYPES = ("float32", "float16")
MAX_QUERY_CHARS = 1000


@dataclass(frozen=True)
class SearchHit:
    """One result: ``id`` (the row, stable until the next update), ``path`` relative to the photo folder,
    cosine ``score``."""

    id: int
    path: str
    score: float


# ----------------------------------------------------------------------------- model identity
def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _model_identity(model: VSEModel, name: str) -> dict[str, Any]:
    if model.path is None:
        raise VsekitError("an index needs a model loaded from a file (its sha256 identifies the index)")
    return {
        "name": name,
        "sha256": _file_sha256(Path(model.path)),
        "config": model.config,
        "embed_dim": model.embed_dim,
    }


def _load_model(model: str | os.PathLike[str] | VSEModel | None, device: str) -> tuple[VSEModel, str]:
    """The model and the name the manifest records (a shipped name, or the file's absolute path)."""
    if isinstance(model, VSEModel):
        return model, str(Path(model.path).resolve()) if model.path is not None else ""
    loaded = VSEModel.load(model, device=device)
    if model is None or is_shipped_joint_model(model):
        return loaded, "vse" if model is None else str(model)
    return loaded, str(Path(loaded.path).resolve())


_Builder = Builder  # the name the kill tests hook (``_Builder._write_chunk``: a chunk committed)


class Index:
    """A searchable index of a photo folder (see the module docstring).

    ``Index.build(photos, out)`` / ``Index.open(out)``; ``update()``; ``search(text=..., image=...,
    plus=..., minus=..., k=..., folder=..., taken_after=..., taken_before=...)`` returns
    :class:`SearchHit` (path relative to the photo folder, cosine). An open index holds the generation
    it opened; :meth:`refresh` moves it to the newest committed one. The model is loaded on the first
    query that needs it; queries are safe from several threads.
    """

    def __init__(self, path: Path, view: Snapshot, model: VSEModel | None = None) -> None:
        self.path = Path(path)
        self._view = view
        self.report: BuildReport | None = None
        self._model = model
        self._lock = threading.Lock()
        self._faiss: dict[tuple[str, str], Any] = {}
        self._checked_at = time.monotonic()
        self._probe: sqlite3.Connection | None = None

    # -- building --------------------------------------------------------------------------------
    @classmethod
    def build(
        cls,
        photos_dir: str | os.PathLike[str],
        out_dir: str | os.PathLike[str],
        model: str | os.PathLike[str] | VSEModel | None = None,
        *,
        dtype: str | None = None,
        engine: str | None = None,
        chunk_size: int = 32,
        device: str = "auto",
        progress: bool = True,
        runner: ChunkRunner | None = None,
        ready: Callable[[PhotoFile], bool] | None = None,
    ) -> Index:
        """Index every photo under ``photos_dir`` into ``out_dir`` (or bring an existing index up to date).

        ``model``: a shipped name (default ``vse``), a model file or a loaded :class:`VSEModel`; an
        existing index built with another model is refused. ``dtype``: ``float32`` (default) or
        ``float16`` storage; ``engine``: ``auto`` (default), ``exact``, ``flat``, ``hnsw``, ``ivf`` or
        ``ivfpq`` (:mod:`vsekit.retrieval.search`). ``chunk_size`` photos are committed at a time. The
        :class:`BuildReport` is in ``index.report``. ``runner`` embeds the chunks elsewhere (the Ray
        actor pool of :mod:`vsekit.distributed.index`); the store written is the same. ``ready(photo)``
        picks which new or changed files are read now (the others are neither added nor removed: see
        :mod:`vsekit.retrieval.watch`). An ``out_dir`` that holds other files and no index is refused
        before anything is written.
        """
        out, photos = Path(out_dir), Path(photos_dir).expanduser().resolve()
        if dtype is not None and dtype not in DTYPES:
            raise VsekitError(f"unknown index dtype {dtype!r}; known: {', '.join(DTYPES)}")
        resolve_engine(engine or "auto", 0)
        if chunk_size < 1:
            raise VsekitError(f"chunk_size must be >= 1, got {chunk_size}")
        if not photos.is_dir():
            raise VsekitError(f"{photos}: not a folder of photos")
        check_out_dir(out)  # before the model loads and before anything is written
        loaded, name = _load_model(model, device)
        identity = _model_identity(loaded, name)
        with writer_lock(out):
            store = _open_store_for_writing(out)
            try:
                builder = Builder(
                    store=store,
                    photos_dir=photos,
                    model=loaded,
                    identity=identity,
                    dtype=dtype,
                    engine=engine,
                    chunk_size=chunk_size,
                    progress=progress,
                    runner=runner,
                    text_queries=lambda: calibration_sentences(loaded),
                    ready=ready,
                )
                report = builder.run()
            except sqlite3.Error as exc:
                raise VsekitError(
                    f"{out / DB}: cannot write ({exc}); the previous generation is kept"
                ) from None
            finally:
                store.close()
        index = cls.open(out, model=loaded)
        index.report = report
        return index

    def update(
        self,
        progress: bool = True,
        chunk_size: int = 32,
        ready: Callable[[PhotoFile], bool] | None = None,
    ) -> BuildReport:
        """Bring the index up to date with its folder (new, changed, deleted files); see :meth:`build`
        (``ready``: which new or changed files to read now)."""
        fresh = Index.build(
            self.photos_dir, self.path, self.model, chunk_size=chunk_size, progress=progress, ready=ready
        )
        self._view = fresh._view
        self.report = fresh.report
        return fresh.report

    def compact(self) -> bool:
        """Merge every segment into one and drop tombstoned rows (``vsekit index compact``); then
        hold the new generation. False when there was nothing to merge."""
        with writer_lock(self.path):
            store = _open_store_for_writing(self.path)
            try:
                if "model" not in store.settings():
                    raise VsekitError(
                        f"{self.path}: an index in the old format; run `vsekit index update` first"
                    )
                done = compact(store, everything=True, text_queries=lambda: calibration_sentences(self.model))
            finally:
                store.close()
        self.refresh()
        return done

    @classmethod
    def open(cls, out_dir: str | os.PathLike[str], model: VSEModel | None = None) -> Index:
        """An index written by :meth:`build` (its model is loaded when a query first needs it); an
        index in the format before the store opens read-only until the next build or update."""
        out = Path(out_dir)
        return cls(out, _open_view(out), model)

    # -- generations -----------------------------------------------------------------------------
    def generation(self) -> int:
        """The committed generation this index holds (0: an index in the old format)."""
        return self._view.generation

    def refresh(self) -> bool:
        """Move to the newest committed generation (cheap: shared segments stay mapped); True if it moved."""
        if not (self.path / DB).is_file():
            return False
        view = open_snapshot(self.path, self._view if self._view.generation else None)
        if view.generation == self._view.generation:
            view.close()
            return False
        self._view = view  # searches in flight keep the snapshot they started with
        return True

    def maybe_refresh(self, every_s: float = 1.0) -> bool:
        """:meth:`refresh` if a newer generation was committed, checking at most once per ``every_s``
        seconds (one small query): what a server calls between requests."""
        now = time.monotonic()
        if now - self._checked_at < every_s or not (self.path / DB).is_file():
            return False
        self._checked_at = now
        with self._lock:
            try:
                if self._probe is None:
                    self._probe = sqlite3.connect(
                        self.path / DB, isolation_level=None, check_same_thread=False
                    )
                newest = self._probe.execute("SELECT coalesce(max(n), 0) FROM generations").fetchone()[0]
            except sqlite3.Error as exc:
                logger.warning("%s: cannot check for a newer generation (%s)", self.path, exc)
                return False
        return newest != self._view.generation and self.refresh()

    # -- what it is ------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._view)

    @property
    def manifest(self) -> dict[str, Any]:
        """The index's settings (photo folder, model identity, dtype, engine; ``ann``/``ann_params``: the
        largest segment's ANN structure, if any)."""
        view = self._view
        largest = max(view.segments, key=lambda s: s.rows, default=None)
        ann = largest.ann if largest is not None else None
        return dict(view.settings) | {
            "embeddings": None if largest is None else _segment_file(view, largest),
            "ann": Path(ann[1]).name if ann else None,
            "ann_params": dict(ann[2]) if ann else {},
            "generation": view.generation,
        }

    @property
    def vectors(self) -> np.ndarray | LiveVectors:
        """The live vectors, row i = hit id i (one memory-mapped array when the index is one segment)."""
        view = self._view
        if len(view.segments) == 1 and not len(view.segments[0].dead):
            return view.segments[0].vectors
        return LiveVectors(view)

    @property
    def paths(self) -> LivePaths:
        """The photo ids (paths relative to the photo folder), row i = hit id i."""
        return LivePaths(self._view)

    @property
    def photos_dir(self) -> Path:
        return Path(self._view.settings["photos"])

    def info(self) -> dict[str, Any]:
        """Photo folder, counts, unreadable files, model, storage and engine, bytes on disk."""
        view = self._view
        m = view.settings
        failed = {id_text(i): e for i, e in view.query("SELECT id, reason FROM failed ORDER BY id")}
        files = [self.path / n for (n,) in view.query("SELECT name FROM files WHERE state = 'live'")]
        files += [self.path / DB, self.path / LEGACY_MANIFEST]
        files += [self.path / name for name in {s.ann[1] for s in view.segments if s.ann}]
        if not view.generation:
            files += [self.path / self._legacy_embeddings()]
        return {
            "index": str(self.path),
            "photos": m["photos"],
            "count": len(self),
            "failed": failed,
            "model": m["model"]["name"],
            "model_sha256": m["model"]["sha256"],
            "embed_dim": m["model"]["embed_dim"],
            "dtype": m["dtype"],
            "engine": resolve_engine(m["engine"], len(self)),
            "generation": view.generation,
            "segments": len(view.segments),
            "tombstones": sum(len(s.dead) for s in view.segments),
            "bytes": sum(f.stat().st_size for f in set(files) if f.is_file()),
        }

    def _legacy_embeddings(self) -> str:
        return (read_manifest(self.path) or {}).get("embeddings", "")

    def folders(self, limit: int | None = None) -> list[str]:
        """The folders (relative to the photo folder) that directly hold photos, sorted; one indexed
        query, not a walk over every photo (what a ``folder=`` filter accepts, with its subfolders)."""
        sql = "SELECT DISTINCT folder FROM photos WHERE folder != ? ORDER BY folder"
        rows = self._view.query(sql + (f" LIMIT {int(limit)}" if limit is not None else ""), (b"",))
        return [id_text(f) for (f,) in rows]

    # -- captions --------------------------------------------------------------------------------
    def caption(self, photo_id: str) -> str | None:
        """The stored caption of a photo (None: none stored, or no such photo)."""
        record = self._view.record(photo_id)
        return None if record is None else record["caption"]

    def captions(self, photo_ids: Sequence[str]) -> dict[str, str]:
        """The stored captions of ``photo_ids`` (a photo without one is left out): a query per 500 ids,
        not one per photo (a page of results asks for all of its captions at once)."""
        found: dict[str, str] = {}
        ids = list(photo_ids)
        for start in range(0, len(ids), 500):
            chunk = [id_bytes(i) for i in ids[start : start + 500]]
            marks = ",".join("?" * len(chunk))
            sql = f"SELECT id, caption FROM photos WHERE caption IS NOT NULL AND id IN ({marks})"
            found.update({id_text(i): c for i, c in self._view.query(sql, chunk)})
        return found

    def uncaptioned(self) -> list[str]:
        """The ids of photos without a stored caption (new or changed since their caption), sorted."""
        return [
            id_text(i) for (i,) in self._view.query("SELECT id FROM photos WHERE caption IS NULL ORDER BY id")
        ]

    def set_captions(self, captions: dict[str, str | None]) -> int:
        """Store captions by photo id (photos the index does not hold are skipped); returns how many
        were stored. A caption is dropped when its photo changes."""
        with writer_lock(self.path):
            store = _open_store_for_writing(self.path)
            try:
                done = store.set_captions(captions)
            finally:
                store.close()
        self._view = open_snapshot(self.path, self._view)  # captions need no new generation
        return done

    @property
    def model(self) -> VSEModel:
        """The index's joint model (loaded once; a file that changed since the build is refused)."""
        with self._lock:
            return self._model_unlocked()

    def _model_unlocked(self) -> VSEModel:
        """:attr:`model`, for a caller that holds ``self._lock``."""
        if self._model is None:
            recorded = self._view.settings["model"]
            model, name = _load_model(recorded["name"], "auto")
            found = _model_identity(model, name)["sha256"]
            if found != recorded["sha256"]:
                raise ConfigMismatchError(
                    f"{self.path}: built with model {recorded['name']} (sha256 "
                    f"{recorded['sha256'][:12]}), but that file now has sha256 {found[:12]}; rebuild it"
                )
            self._model = model
        return self._model

    # -- queries ---------------------------------------------------------------------------------
    def embed_texts(self, texts: Sequence[str]) -> np.ndarray:
        texts = [_check_text(t) for t in texts]
        model = self.model
        with self._lock:  # one forward pass at a time: concurrent requests share the model
            return model.embed_texts(texts)

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
    ) -> np.ndarray:
        """The unit query vector: a sentence, a photo or a given vector, with Eq. 15 arithmetic applied."""
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
        plus_v = self.embed_texts(list(plus)) if plus else None
        minus_v = self.embed_texts(list(minus)) if minus else None
        return arithmetic_query(base, plus_v, minus_v)

    def search(
        self,
        text: str | None = None,
        image: ImageInput | None = None,
        *,
        vector: np.ndarray | None = None,
        plus: Sequence[str] = (),
        minus: Sequence[str] = (),
        k: int = 10,
        min_score: float | None = None,
        resort: int = 0,
        engine: str | None = None,
        folder: str | None = None,
        taken_after: str | dt.date | None = None,
        taken_before: str | dt.date | None = None,
    ) -> list[SearchHit]:
        """The ``k`` photos nearest a sentence, a photo (path or PIL image) or a vector, with optional
        ``minus`` / ``plus`` words (Kiros et al. 2014, Eq. 15) and the paper's re-sort of the top
        ``resort`` results by distance to their mean (0: off). Hits below ``min_score`` are dropped.
        Filters: ``folder`` (a folder relative to the photo folder, with its subfolders), and the EXIF
        date taken, ``taken_after <= taken < taken_before`` (dates or ISO text; photos without a date
        are left out when either is given)."""
        query = self.query_vector(text, image, vector=vector, plus=plus, minus=minus)
        return self.search_vectors(
            query[None], k, min_score=min_score, resort=resort, engine=engine,
            folder=folder, taken_after=taken_after, taken_before=taken_before,
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
    ) -> list[list[SearchHit]]:
        """Hits for each unit query vector ``[q, K]`` (see :meth:`search`)."""
        if k < 1:
            raise VsekitError(f"k must be >= 1, got {k}")
        view = self._view
        if len(view) == 0:
            return [[] for _ in np.atleast_2d(queries)]
        keep = _filter_masks(view, folder, taken_after, taken_before)
        want = min(max(k, resort), len(view))
        scores, rows = self._nearest(queries, want, engine, view=view, keep=keep)
        return hits_from(scores, rows, LivePaths(view), view.vector, k, min_score, resort)

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
        chosen = resolve_engine(engine or view.settings["engine"], len(view))
        if chosen == "flat":
            chosen = "exact"  # the same answer; the store searches it from the maps
        return view.nearest(queries, k, chosen, keep, self._ann_of)

    def _ann_of(self, segment: Segment, engine: str) -> tuple[Any, dict[str, int]]:
        """A segment's saved FAISS structure (read from the file its snapshot holds open, checked
        once) and its search settings."""
        _, name, params = segment.ann
        key = (str(self.path / name), name)
        with self._lock:
            if key not in self._faiss:
                path = self.path / name
                try:
                    if segment.ann_file is not None:
                        fd = segment.ann_file.fileno()
                        data = os.pread(fd, os.fstat(fd).st_size, 0)
                    else:
                        data = path.read_bytes()
                except OSError as exc:
                    raise damaged(path, exc.strerror or str(exc), self.path) from None
                found = self._view.query("SELECT sha256 FROM files WHERE name = ?", (name,))
                sha = found[0][0] if found else None
                if sha and hashlib.sha256(data).hexdigest() != sha:
                    raise damaged(path, "sha256 differs from the one the index recorded", self.path)
                try:
                    self._faiss[key] = (deserialize_ann(data, params), dict(params))
                except RuntimeError as exc:
                    raise damaged(
                        path, str(exc).splitlines()[0] if str(exc) else "unreadable", self.path
                    ) from None
            return self._faiss[key]


def _segment_file(view: Snapshot, segment: Segment) -> str:
    if not view.generation:
        return (read_manifest(view.out) or {}).get("embeddings", "")
    return f"{SEGMENTS}/{segment.n}.npy"


def _open_view(out: Path) -> Snapshot:
    """The newest generation of the store in ``out``, or a read-only view of an old-format index."""
    if (out / DB).is_file():
        try:
            return open_snapshot(out)
        except VsekitError:
            if (out / LEGACY_MANIFEST).is_file() and _store_is_empty(out):
                return legacy_snapshot(out, read_manifest(out))
            raise
    manifest = read_manifest(out)
    if manifest is None:
        what = "does not exist" if not out.exists() else "has no store.sqlite"
        raise VsekitError(f"{out}: not a vsekit photo index ({what}); run `vsekit index build` first")
    return legacy_snapshot(out, manifest)


def _store_is_empty(out: Path) -> bool:
    """A store that never committed (a conversion killed before its commit)."""
    try:
        conn = sqlite3.connect(out / DB)
        try:
            return not conn.execute("SELECT count(*) FROM generations").fetchone()[0]
        finally:
            conn.close()
    except sqlite3.Error:
        return False


def _open_store_for_writing(out: Path) -> Store:
    """The store of ``out`` for a writer. A damaged database is moved aside and a new store started
    (whose build embeds every photo again); the files the damaged one listed, when it can still list
    them, and the damaged database itself are then deleted as the new store's dead files."""
    if not (out / DB).exists() and (out / GENERATION_MARK).is_file():
        return _new_store_beside_old_segments(out, "the index database is missing")
    try:
        store = Store.open(out, create=True)
        store.settings()
        if (out / DB).stat().st_size <= 64 << 20:
            result = store.conn.execute("PRAGMA quick_check").fetchone()[0]
            if result != "ok":
                raise sqlite3.DatabaseError(result)
            store.check_records()
        return store
    except (VsekitError, sqlite3.DatabaseError, ValueError) as exc:
        logger.warning(
            "%s: damaged index database (%s); rebuilding the index", out / DB, str(exc).split(";")[0]
        )
        with contextlib.suppress(NameError, sqlite3.Error):
            store.close()
    owned = _salvage_file_names(out / DB)
    moved = []
    for name in (DB, f"{DB}-wal", f"{DB}-shm", GENERATION_MARK):
        aside = name.replace(DB, f"{DB}.damaged") if name.startswith(DB) else f"{name}.damaged"
        with contextlib.suppress(FileNotFoundError):
            os.replace(out / name, out / aside)
            moved.append(aside)
    store = _new_store_beside_old_segments(out, "" if owned else "the damaged database lists no files")
    with store.transaction() as c:
        c.executemany(
            "INSERT OR REPLACE INTO files VALUES (?, 'dead', NULL, NULL)", [(n,) for n in owned + moved]
        )
    store.collect()
    return store


def _new_store_beside_old_segments(out: Path, why: str) -> Store:
    """A new database in ``out``, numbering its segments past every file in ``segments/`` (an old
    file is never reused, overwritten or deleted unless a database lists it); ``why`` the old ones stay."""
    store = Store.open(out, create=True)
    numbers = [int(p.stem) for p in (out / SEGMENTS).glob("*.npy") if p.stem.isdigit()]
    store.set_settings({"next_segment": max(numbers, default=0) + 1})
    if why and numbers:
        logger.warning("%s: %s; its old segments stay in %s", out, why, out / SEGMENTS)
    return store


def _salvage_file_names(path: Path) -> list[str]:
    """The files a damaged store database still lists (best effort; none when it cannot say)."""
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            names = [str(n) for (n,) in conn.execute("SELECT name FROM files")]
        finally:
            conn.close()
    except sqlite3.Error:
        return []
    return [n for n in names if n.startswith(f"{SEGMENTS}/") and ".." not in Path(n).parts]


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


def _filter_masks(
    view: Snapshot, folder: str | None, after: str | dt.date | None, before: str | dt.date | None
) -> dict[int, np.ndarray] | None:
    """Per segment, the rows the filters keep (one indexed query), or None without filters."""
    clauses, params = [], []
    if folder is not None:
        name = str(PurePosixPath(folder.strip("/"))) if folder.strip("/") else ""
        if name not in ("", "."):
            if ".." in PurePosixPath(name).parts:
                raise VsekitError(f"folder {folder!r}: give a folder inside the photo folder")
            clauses.append("(folder = ? OR (folder >= ? AND folder < ?))")
            params += [id_bytes(name), id_bytes(name + "/"), id_bytes(name + "0")]  # '0' follows '/'
    if after is not None:
        clauses.append("taken >= ?")
        params.append(_iso(after, "taken_after"))
    if before is not None:
        clauses.append("taken < ?")
        params.append(_iso(before, "taken_before"))
    if not clauses:
        return None
    return view.keep_masks(" AND ".join(clauses), params)


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


def calibration_sentences(model: VSEModel) -> np.ndarray | None:
    """The bundled sample's captions embedded by ``model``: the real sentences that calibrate the ANN
    search settings (:func:`vsekit.retrieval.search.calibrate`); None when the sample is not installed."""
    try:
        texts = [c.text for c in load_corpus(sample_data_path()).captions]
    except (OSError, VsekitError) as exc:
        logger.warning("no bundled sample to calibrate with sentences (%s); photo-like queries only", exc)
        return None
    return model.embed_texts(texts)


def _check_text(text: str) -> str:
    if not isinstance(text, str) or not text.strip():
        raise VsekitError("empty query: give a sentence or a word")
    if len(text) > MAX_QUERY_CHARS:
        raise VsekitError(f"query of {len(text)} characters; the limit is {MAX_QUERY_CHARS}")
    return text
