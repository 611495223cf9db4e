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

This module is the index as a thing one opens, builds and describes; its neighbours hold the other
jobs: :mod:`~vsekit.retrieval.query` answers queries (the :class:`~vsekit.retrieval.query.Searching`
half of :class:`Index`), :mod:`~vsekit.retrieval.build` writes, :mod:`~vsekit.retrieval.opening` opens
the store for a reader or a writer, :mod:`~vsekit.retrieval.joint_model` loads and identifies the model.
"""

from __future__ import annotations

import contextlib
import difflib
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from vsekit.errors import VsekitError, command, printable
from vsekit.resources import previous_model
from vsekit.retrieval.build import Builder, BuildReport, ChunkResult, ChunkRunner, compact, embed_chunk
from vsekit.retrieval.joint_model import (
    calibration_sentences,
    check_recorded_model,
    load_model,
    load_recorded_model,
    model_identity,
)
from vsekit.retrieval.legacy import FORMAT, FORMAT_VERSION, read_manifest
from vsekit.retrieval.opening import open_for_reading, open_for_writing
from vsekit.retrieval.photos import PhotoFile
from vsekit.retrieval.query import SearchHit, Searching
from vsekit.retrieval.relocate import Relocation, moved_hint, relocate
from vsekit.retrieval.search import resolve_engine
from vsekit.retrieval.segments import LivePaths, LiveVectors, Segment, Snapshot, open_snapshot
from vsekit.retrieval.store import (
    DB,
    LEGACY_MANIFEST,
    SEGMENTS,
    build_command,
    check_out_dir,
    reader,
    writer_lock,
)
from vsekit.retrieval.store.schema import open_probe
from vsekit.retrieval.text_engine import TextTower, prepare_tower

if TYPE_CHECKING:  # the model (and torch) loads where used: an `index update` with nothing new needs none
    from vsekit.embedding.pipeline import VSEModel

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "BuildReport",
    "ChunkResult",
    "ChunkRunner",
    "Index",
    "Relocation",
    "SearchHit",
    "embed_chunk",
]

logger = logging.getLogger(__name__)

DTYPES = ("float32", "float16")

_IndexT = TypeVar("_IndexT", bound="Index")  # build and open give the class they are called on


class Index(Searching):
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
        self._tower: TextTower | None | bool = None  # None: not looked for yet; False: none here
        self._lock = threading.Lock()
        self._faiss: dict[tuple[str, str, str | None], Any] = {}
        self._checked_at = time.monotonic()
        self._probe: sqlite3.Connection | None = None

    # -- building --------------------------------------------------------------------------------
    @classmethod
    def build(
        cls: type[_IndexT],
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
        rebuild: bool = False,
        photos: list[PhotoFile] | None = None,
    ) -> _IndexT:
        """Index every photo under ``photos_dir`` into ``out_dir`` (or bring an existing index up to date).

        ``model``: a shipped name (default ``vse``), a model file or a loaded :class:`VSEModel`; an
        existing index built with another model is refused. ``dtype``: ``float32`` (default) or
        ``float16`` storage; ``engine``: ``auto`` (default), ``exact``, ``flat``, ``hnsw``, ``ivf`` or
        ``ivfpq`` (:mod:`vsekit.retrieval.search`). ``chunk_size`` photos are committed at a time. The
        :class:`BuildReport` is in ``index.report``. ``runner`` embeds the chunks elsewhere (the Ray
        actor pool of :mod:`vsekit.distributed.index`); the store written is the same. ``ready(photo)``
        picks which new or changed files are read now (the others are neither added nor removed: see
        :mod:`vsekit.retrieval.watch`). An ``out_dir`` that holds other files and no index is refused
        before anything is written. ``rebuild``: an index built with another model (a retrained shipped
        ``vse``, say) has every photo embedded again with this one, replaced in one commit. ``photos``:
        the folder's photos when the caller has just scanned it (not scanned again: ``vsekit index
        build`` checks the folder before the model loads).
        """
        out, folder = Path(out_dir), Path(photos_dir).expanduser().resolve()
        if dtype is not None and dtype not in DTYPES:
            raise VsekitError(f"unknown index dtype {dtype!r}; known: {', '.join(DTYPES)}")
        resolve_engine(engine or "auto", 0)
        if chunk_size < 1:
            raise VsekitError(f"chunk_size must be >= 1, got {chunk_size}")
        if not folder.is_dir():
            raise VsekitError(f"{folder}: not a folder of photos")
        check_out_dir(out)  # before the model loads and before anything is written
        loaded, name = load_model(model, device)
        options: dict[str, Any] = dict(dtype=dtype, engine=engine, chunk_size=chunk_size, ready=ready)
        options |= dict(progress=progress, scanned=photos)
        report = _write(out, folder, model_identity(loaded, name), lambda: loaded, runner, rebuild, **options)
        index = cls.open(out, model=loaded)
        index.report = report
        return index

    def update(
        self,
        progress: bool = True,
        chunk_size: int = 32,
        ready: Callable[[PhotoFile], bool] | None = None,
        photos: list[PhotoFile] | None = None,
    ) -> BuildReport:
        """Bring the index up to date with its folder (new, changed, deleted files); see :meth:`build`
        (``ready``: which new or changed files to read now). A photo folder that is not there is refused
        (a folder that moved: :meth:`relocate`). The model loads only when a photo is to be embedded or
        classified (an update that finds nothing new reads the store and the folder, no model); a model
        file whose bytes changed since the build is refused first all the same (its sha256 only).
        ``photos``: the folder's photos when the caller has just scanned it (not scanned again)."""
        if not self.photos_dir.is_dir():
            missing = f"{self.photos_dir}: the photo folder of {self.path} is not there"
            raise VsekitError(f"{missing}; {moved_hint(self.path)}")
        options: dict[str, Any] = dict(dtype=None, engine=None, chunk_size=chunk_size, ready=ready)
        options |= dict(progress=progress, scanned=photos)
        report = _write(self.path, self.photos_dir, self._identity(), lambda: self.model, **options)
        self._view = open_for_reading(self.path)
        self.report = report
        return report

    def _identity(self) -> dict[str, Any]:
        """The identity an update writes with: a loaded model's own (another model than the recorded one
        is then refused by the build), else the recorded one once the model file is checked against it."""
        with self._lock:
            loaded = self._model
        if loaded is not None:
            return model_identity(*load_model(loaded, "auto"))
        recorded = self._view.settings["model"]
        check_recorded_model(self.path, recorded, str(self.photos_dir))
        return recorded

    def relocate(self, photos_dir: str | os.PathLike[str], *, check_all: bool = False) -> Relocation:
        """Point the index at its photos' new folder (moved, renamed or mounted elsewhere) after checking that
        it holds the same photos (sizes, and the sha256 of a sample or, ``check_all``, of every one); no
        photo is embedded again (:mod:`vsekit.retrieval.relocate`). Then hold the new generation."""
        done = relocate(self.path, Path(photos_dir), check_all=check_all)
        self.refresh()
        return done

    def compact(self) -> bool:
        """Merge every segment into one and drop tombstoned rows (``vsekit index compact``); then
        hold the new generation. False when there was nothing to merge."""
        with writer_lock(self.path):
            store = open_for_writing(self.path)
            try:
                if "model" not in store.settings():
                    raise VsekitError(
                        f"{self.path}: an index in the old format; {command('index', 'update', self.path)} "
                        "converts it first"
                    )
                done = compact(store, everything=True, text_queries=lambda: calibration_sentences(self.model))
            finally:
                store.close()
        self.refresh()
        return done

    @classmethod
    def open(cls: type[_IndexT], out_dir: str | os.PathLike[str], model: VSEModel | None = None) -> _IndexT:
        """An index written by :meth:`build` (its model is loaded when a query first needs it); an
        index in the format before the store opens read-only until the next build or update."""
        out = Path(out_dir)
        return cls(out, open_for_reading(out), model)

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
        previous, self._view = self._view, view  # searches in flight keep the snapshot they started with
        if _model_sha(view) != _model_sha(previous):  # rebuilt with another model (`index build --rebuild`)
            with self._lock:
                self._model = None  # the new generation's model loads on the next query
                self._tower = None
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
                    self._probe = open_probe(self.path / DB)
                newest = reader.newest_generation(self._probe)
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

    def records(self) -> dict[str, dict[str, Any]]:
        """Every photo's ``size`` (bytes), ``sha256`` and ``taken`` (EXIF date or None), by path."""
        return self._view.records()

    def by_date(self, offset: int = 0, limit: int = 60) -> list[dict[str, Any]]:
        """A page of the index's photos for browsing: ``{"id", "path", "taken", "caption"}`` (``id`` the
        row a search hit would have), newest EXIF date taken first, photos without a date last by path;
        ``offset`` and ``limit`` select the page (``len(index)`` photos in all)."""
        if offset < 0 or limit < 0:
            raise VsekitError(f"offset and limit must be 0 or more (not {offset}, {limit})")
        return self._view.by_date(offset, limit)

    @property
    def photos_dir(self) -> Path:
        return Path(self._view.settings["photos"])

    def info(self) -> dict[str, Any]:
        """Photo folder, counts, unreadable files, model, storage and engine, bytes on disk."""
        view = self._view
        m = view.settings
        failed = view.read(reader.failed_reasons)
        files = [self.path / n for n in view.read(reader.live_files)]
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
            **_kept_release(m["model"], self.path, m["photos"]),
            "embed_dim": m["model"]["embed_dim"],
            "dtype": m["dtype"],
            "engine": resolve_engine(m["engine"], len(self), int(m["model"]["embed_dim"])),
            "generation": view.generation,
            "segments": len(view.segments),
            "tombstones": sum(len(s.dead) for s in view.segments),
            "concepts": _concepts_line(m, self.path),
            "bytes": sum(f.stat().st_size for f in set(files) if f.is_file()),
        }

    def _legacy_embeddings(self) -> str:
        return (read_manifest(self.path) or {}).get("embeddings", "")

    def folders(self, limit: int | None = None) -> list[str]:
        """The folders (relative to the photo folder) that directly hold photos, sorted; one indexed
        query, not a walk over every photo (what a ``folder=`` filter accepts, with its subfolders)."""
        return self._view.read(reader.folders, limit)

    def search_folder(self, folder: str | os.PathLike[str]) -> str:
        """``folder`` as the ``folder=`` filter takes it: a folder of the index relative to its photo folder
        (``""``: every photo). An absolute path inside the photo folder is made relative to it; a folder that
        holds no indexed photo, directly or below, or a path outside the photo folder, is an error that
        names the index's nearest folders (a typo is not "no results")."""
        given = name = str(folder)
        if name.startswith(("/", "~")):
            name = self._relative_folder(Path(name).expanduser())
        name = str(PurePosixPath(name.strip("/"))) if name.strip("/") else ""
        if name in ("", "."):
            return ""
        every = {str(PurePosixPath(*PurePosixPath(f).parts[:n])) for f in self.folders() for n in _depths(f)}
        if name in every:
            return name
        raise VsekitError(f"folder {printable(given)!r}: {_nearest(name, sorted(every), self.photos_dir)}")

    def _relative_folder(self, path: Path) -> str:
        root = self.photos_dir
        for candidate in (path, path.resolve()):
            with contextlib.suppress(ValueError):
                return candidate.relative_to(root).as_posix()
        raise VsekitError(f"folder {printable(str(path))!r}: outside the photo folder {root} of this index")

    # -- captions --------------------------------------------------------------------------------
    def caption(self, photo_id: str) -> str | None:
        """The stored caption of a photo (None: none stored, or no such photo)."""
        record = self._view.record(photo_id)
        return None if record is None else record["caption"]

    def captions(self, photo_ids: Sequence[str]) -> dict[str, str]:
        """The stored captions of ``photo_ids`` (a photo without one is left out): a query per 500 ids,
        not one per photo (a page of results asks for all of its captions at once)."""
        return self._view.read(reader.captions_of, photo_ids)

    def uncaptioned(self) -> list[str]:
        """The ids of photos without a stored caption (new or changed since their caption), sorted."""
        return self._view.read(reader.uncaptioned)

    def set_captions(self, captions: dict[str, str | None]) -> int:
        """Store captions by photo id (photos the index does not hold are skipped); returns how many
        were stored. A caption is dropped when its photo changes."""
        with writer_lock(self.path):
            store = open_for_writing(self.path)
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
            if self._model is None:
                settings = self._view.settings
                photos = settings.get("photos") or None
                self._model = load_recorded_model(self.path, settings["model"], photos)
            return self._model

    def text_side(self) -> TextTower | VSEModel:
        """What turns sentences into query vectors (``.embed_texts(texts)``): the ONNX graph of the model's
        text side cached on this machine (:mod:`vsekit.retrieval.text_engine`: no torch, a cold search in
        about a second, and a third of PyTorch's time a sentence when warm), else the model (loaded now if
        it is not, and its graph exported, so that the next search finds it)."""
        with self._lock:
            if self._tower is None:
                recorded = self._view.settings["model"]
                check_recorded_model(self.path, recorded, self._view.settings.get("photos") or None)
                self._tower = TextTower.open(recorded["sha256"]) or False
            if isinstance(self._tower, TextTower):
                return self._tower
            if self._model is not None:  # no graph here, and none made when the model loaded for text
                return self._model
        model = self.model
        self.prepare_text_graph()
        return model

    def prepare_text_graph(self) -> bool:
        """Export the model's text side for searches without torch (once per machine and model file; a
        few seconds), if it can be (a MiniLM text encoder, frozen or with tuned top layers); True when the
        graph is there."""
        sha256 = self._view.settings["model"]["sha256"]
        try:  # a graph already here: no model to load (a distributed build's driver has none loaded)
            ready = TextTower.cached(sha256) or prepare_tower(self.model, sha256) is not None
        except (VsekitError, OSError) as exc:  # the searches go on with PyTorch
            logger.warning("no ONNX graph of the text side (%s); searches load PyTorch", exc)
            return False
        with self._lock:
            if ready and self._tower is False:  # looked for before it was made: the next search opens it
                self._tower = None
        return ready


def _write(
    out: Path,
    photos: Path,
    identity: dict[str, Any],
    load: Callable[[], VSEModel],
    runner: ChunkRunner | None = None,
    rebuild: bool = False,
    **options: Any,
) -> BuildReport:
    """One build or update of the store in ``out`` under the writers' lock (:class:`Builder`): ``identity``
    the model's, ``load`` gives the model when a photo is to be embedded; ``options`` the builder's."""
    with writer_lock(out):
        store = open_for_writing(out)
        try:
            builder = Builder(
                store=store,
                photos_dir=photos,
                load=load,
                identity=identity,
                runner=runner,
                text_queries=lambda: calibration_sentences(load()),
                rebuild=rebuild,
                **options,
            )
            return builder.run()
        except sqlite3.Error as exc:
            raise VsekitError(f"{out / DB}: cannot write ({exc}); the previous generation is kept") from None
        finally:
            store.close()


def _concepts_line(settings: dict[str, Any], index: Path) -> str:
    """What ``index info`` says of the concept route's classes."""
    found = settings.get("concepts")
    if found:
        return f"top {found['top']} ImageNet classes of every photo ({found['backbone']})"
    return f"none yet: {command('index', 'update', index)} adds them"


def _depths(folder: str) -> range:
    return range(1, len(PurePosixPath(folder).parts) + 1)


def _nearest(name: str, folders: list[str], root: Path) -> str:
    """Why ``name`` is no folder of the index, and its nearest folders (those with the same last part,
    then the closest spellings of the whole and of the last part), or a few of them when none is near."""
    if not folders:
        return f"this index has no folders (its photos are all at the top of {root})"
    leaves: dict[str, list[str]] = {}
    for folder in folders:
        leaves.setdefault(PurePosixPath(folder).name, []).append(folder)
    leaf = PurePosixPath(name).name
    near = list(leaves.get(leaf, []))
    near += _close(name, folders)
    for close in _close(leaf, list(leaves)):
        near += leaves[close]
    near = list(dict.fromkeys(near))
    if near:
        return f"no such folder in this index; nearest: {', '.join(printable(f) for f in near[:5])}"
    more = f" and {len(folders) - 5} more" if len(folders) > 5 else ""
    return f"no such folder in this index; its folders: {', '.join(printable(f) for f in folders[:5])}{more}"


def _close(word: str, candidates: list[str], cutoff: float = 0.6) -> list[str]:
    """The ``candidates`` spelled like ``word`` (difflib's ratio at least ``cutoff``), closest first, then
    in alphabetical order (one order on every run)."""
    scored = []
    for candidate in candidates:
        matcher = difflib.SequenceMatcher(None, word, candidate)
        if matcher.real_quick_ratio() >= cutoff and matcher.quick_ratio() >= cutoff:
            ratio = matcher.ratio()
            if ratio >= cutoff:
                scored.append((-ratio, candidate))
    return [candidate for _, candidate in sorted(scored)[:5]]


def _model_sha(view: Snapshot) -> str | None:
    return (view.settings or {}).get("model", {}).get("sha256")


def _segment_file(view: Snapshot, segment: Segment) -> str:
    if not view.generation:
        return (read_manifest(view.out) or {}).get("embeddings", "")
    return f"{SEGMENTS}/{segment.n}.npy"


def _kept_release(model: dict[str, Any], out: Path, photos: str) -> dict[str, str]:
    """``{"model_release": ...}`` for an index of a shipped model's earlier release that vsekit keeps
    (:func:`vsekit.resources.previous_model`): which release, and the command that moves the index."""
    kept = previous_model(str(model["name"]), str(model["sha256"]))
    if kept is None:
        return {}
    rebuild = build_command(out, photos, str(model["name"]), "--rebuild")
    return {"model_release": f"{model['name']} of vsekit {kept['release']} (kept; {rebuild} moves it)"}
