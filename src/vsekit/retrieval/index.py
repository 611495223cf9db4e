"""An index of a folder of photos: embed every photo once, then search it by text, photo or arithmetic.

``Index.build(photos, out)`` embeds every photo with a joint model (the shipped ``vse`` by default) and
writes, in ``out``::

    index.json                  the manifest: photo folder, model identity (file sha256 + config), dtype,
                                engine, the file list (id, size, mtime, sha256), unreadable files
    embeddings-<digest>.npy     unit-norm vectors [n, K] (float32 or float16), row i = entry i, memory-mapped
    ann-<engine>-<digest>.faiss an HNSW / IVF / IVF-PQ structure (large collections; see retrieval.search)
    pending/                    work in progress: one committed .npy + .json per chunk of photos
    .vsekit-owned.json          the files the index wrote: the only files it ever deletes
                                (:mod:`vsekit.retrieval.owned`); an --out holding other files and no index
                                is refused

**Incremental**: building again (or :meth:`Index.update`) embeds new files, re-embeds changed ones
(size or mtime changed and different bytes), drops deleted ones and copies every other row unchanged.
**Resumable**: the photos to embed are cut into chunks whose names hash their content (model, file
ids, sizes, mtimes), each written atomically (vectors first, then the chunk's JSON, which commits it);
the embeddings file is written under a temp name and renamed, and the manifest, which names it, is
written last. A kill at any moment leaves either the old manifest (and the finished chunks, which a
re-run reuses) or the new one, so a re-run ends with exactly the files an uninterrupted build writes.
Unreadable photos are reported and recorded under ``failed``, never zero-filled; they are retried
when the file changes. An index refuses photos embedded by another model.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from vsekit.data import load_corpus
from vsekit.embedding.pipeline import ImageInput, VSEModel
from vsekit.errors import ConfigMismatchError, VsekitError
from vsekit.fileio import atomic_npy_memmap, atomic_save_npy, atomic_write_bytes, atomic_write_json
from vsekit.resources import is_shipped_joint_model, sample_data_path
from vsekit.retrieval.arithmetic import arithmetic_query, resort_by_mean
from vsekit.retrieval.owned import LEDGER, Ownership, check_out_dir
from vsekit.retrieval.photos import PhotoEntry, PhotoFile, UpdatePlan, plan_update, read_photo, scan_folder
from vsekit.retrieval.search import (
    ANN_ENGINES,
    ann_search,
    build_ann,
    calibrate,
    deserialize_ann,
    exact_search,
    resolve_engine,
    serialize_ann,
    set_search_params,
)

__all__ = ["BuildReport", "ChunkResult", "ChunkRunner", "Index", "SearchHit", "embed_chunk"]

logger = logging.getLogger(__name__)

FORMAT, FORMAT_VERSION = "vsekit.photo-index", 1
MANIFEST = "index.json"
DTYPES = ("float32", "float16")
#: Photos decoded and run through the CNN together (bounded memory for large photos).
_EMBED_GROUP = 8
MAX_QUERY_CHARS = 1000


@dataclass(frozen=True)
class SearchHit:
    """One result: ``id`` (the row, stable until the next update), ``path`` relative to the photo folder,
    cosine ``score``."""

    id: int
    path: str
    score: float


@dataclass
class BuildReport:
    """What a build or update did."""

    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    unchanged: int = 0
    failed: dict[str, str] = field(default_factory=dict)  # every unreadable photo: id -> error


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


# ----------------------------------------------------------------------------- the manifest
def _read_manifest(out: Path) -> dict[str, Any] | None:
    path = out / MANIFEST
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise VsekitError(f"{path}: unreadable index manifest ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise VsekitError(f"{path}: not a vsekit photo index (no '{FORMAT}' format field)")
    if int(manifest.get("format_version", 0)) > FORMAT_VERSION:
        raise VsekitError(f"{path}: index format {manifest['format_version']} is newer than this vsekit")
    return manifest


def _read_manifest_or_rebuild(out: Path) -> dict[str, Any] | None:
    """The manifest; for an index this vsekit wrote (it has a ledger), a damaged manifest means a
    rebuild (every photo re-embedded) rather than an error: nothing in it can be trusted."""
    try:
        return _read_manifest(out)
    except VsekitError as exc:
        if not (out / LEDGER).is_file():
            raise
        logger.warning("%s; rebuilding the index", exc)
        return None


def _entries(manifest: dict[str, Any] | None) -> dict[str, PhotoEntry]:
    rows = manifest["entries"] if manifest else []
    return {row[0]: PhotoEntry(*row) for row in rows}


@contextlib.contextmanager
def _index_lock(out: Path) -> Iterator[None]:
    """One writer per index directory at a time (a second build waits)."""
    out.mkdir(parents=True, exist_ok=True)
    with open(out / ".lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _manifest_files(manifest: dict[str, Any] | None) -> list[str]:
    """The files an index manifest names (the index's own, whatever wrote them)."""
    if manifest is None:
        return []
    return [MANIFEST] + [str(manifest[key]) for key in ("embeddings", "ann") if manifest.get(key)]


def _digest(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


# ----------------------------------------------------------------------------- building
#: A chunk's embeddings: its readable photos' entries, its unreadable ones (id -> {size, mtime_ns, error})
#: and the vectors float32 [len(entries), K], row i = entry i.
ChunkResult = tuple[list[PhotoEntry], dict[str, dict], np.ndarray]
#: Embeds chunks elsewhere (:mod:`vsekit.distributed.index`): given the model identity and the missing
#: chunks ``(key, photos, {id: (sha256, old vector)} of those photos the old index holds)``, yields
#: ``(key, result of embed_chunk)`` in any order as chunks finish; the builder commits each one.
ChunkRunner = Callable[
    [dict[str, Any], list[tuple[str, list[PhotoFile], dict[str, tuple[str, np.ndarray]]]]],
    Iterator[tuple[str, ChunkResult]],
]


def embed_chunk(
    model: VSEModel, chunk: Sequence[PhotoFile], previous: dict[str, tuple[str, np.ndarray]]
) -> ChunkResult:
    """Embed one chunk of photos, ``_EMBED_GROUP`` at a time; a photo whose bytes have the sha256 that
    ``previous`` records for it (touched, same bytes) keeps its old vector."""
    entries, failed, rows, group = [], {}, [], []

    def flush() -> None:
        if group:
            rows.extend(model.embed_images([image for _, image in group]))
            group.clear()

    for photo in chunk:
        sha, image, error = read_photo(photo)
        if error is not None:
            logger.warning("skipped: %s", error)
            failed[photo.id] = {"size": photo.size, "mtime_ns": photo.mtime_ns, "error": error}
            continue
        entries.append(PhotoEntry(photo.id, photo.size, photo.mtime_ns, sha))
        old_sha, old_vector = previous.get(photo.id, ("", None))
        if old_vector is not None and old_sha == sha:
            flush()
            rows.append(np.asarray(old_vector, dtype=np.float32))
            continue
        group.append((photo.id, image))
        if len(group) == _EMBED_GROUP:
            flush()
    flush()
    return entries, failed, np.asarray(rows, dtype=np.float32).reshape(len(entries), model.embed_dim)


@dataclass
class _Builder:
    """One build or update of the index in ``out`` (see the module docstring for the write order)."""

    out: Path
    photos_dir: Path
    model: VSEModel
    identity: dict[str, Any]
    old: dict[str, Any] | None
    dtype: str
    engine: str
    chunk_size: int
    progress: bool
    owned: Ownership
    runner: ChunkRunner | None = None

    def run(self) -> BuildReport:
        old_entries = _entries(self.old)
        plan = plan_update(scan_folder(self.photos_dir), old_entries, (self.old or {}).get("failed", {}))
        chunks = [plan.todo[i : i + self.chunk_size] for i in range(0, len(plan.todo), self.chunk_size)]
        keys = [self._chunk_key(chunk) for chunk in chunks]
        self._drop_stale_chunks(set(keys))
        if self.old is not None and plan.changes_nothing:
            self._cleanup(self.old)
            return self._report(plan, old_entries, [], {})
        done = self._embed_chunks(chunks, keys)
        new_entries = [e for chunk in done for e in chunk[0]]
        failed = {i: f for chunk in done for i, f in chunk[1].items()}
        manifest = self._commit(plan, keys, done)
        self._cleanup(manifest)
        return self._report(plan, old_entries, new_entries, failed)

    # -- chunks of photos to embed ---------------------------------------------------------------
    @property
    def pending(self) -> Path:
        return self.out / "pending"

    def _chunk_key(self, chunk: list[PhotoFile]) -> str:
        files = [[p.id, p.size, p.mtime_ns] for p in chunk]
        return _digest(self.identity["sha256"], self.dtype, files)

    def _drop_stale_chunks(self, keep: set[str]) -> None:
        """Forget the finished chunks of another plan (only files the ledger lists are deleted)."""
        chunk_files = {n for n in self.owned.names if n.startswith("pending/")}
        self.owned.release(n for n in chunk_files if Path(n).name.split(".")[0] not in keep)

    def _embed_chunks(
        self, chunks: list[list[PhotoFile]], keys: list[str]
    ) -> list[tuple[list[PhotoEntry], dict[str, dict]]]:
        self.pending.mkdir(parents=True, exist_ok=True)
        total = sum(len(c) for c in chunks)
        bar = tqdm(total=total, desc="index photos", unit="img", disable=not self.progress or total == 0)
        done: dict[str, tuple[list[PhotoEntry], dict[str, dict]]] = {}
        try:
            missing = []
            for chunk, key in zip(chunks, keys, strict=True):
                committed = self._read_chunk(key)
                if committed is not None:
                    done[key] = committed
                    bar.update(len(chunk))
                elif self.runner is None:
                    done[key] = self._write_chunk(key, embed_chunk(self.model, chunk, self._previous(chunk)))
                    bar.update(len(chunk))
                else:
                    missing.append((key, chunk, self._previous(chunk)))
            if missing:
                sizes = {key: len(chunk) for key, chunk, _ in missing}
                for key, result in self.runner(self.identity, missing):
                    done[key] = self._write_chunk(key, result)
                    bar.update(sizes[key])
        finally:
            bar.close()
        return [done[key] for key in keys]

    def _read_chunk(self, key: str) -> tuple[list[PhotoEntry], dict[str, dict]] | None:
        meta_path = self.pending / f"{key}.json"
        if not meta_path.is_file() or not (self.pending / f"{key}.npy").is_file():
            return None
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        return [PhotoEntry(*row) for row in meta["entries"]], meta["failed"]

    def _previous(self, chunk: list[PhotoFile]) -> dict[str, tuple[str, np.ndarray]]:
        """``{id: (sha256, vector)}`` of the chunk's photos the old index holds (their bytes may match)."""
        return {
            p.id: (entry.sha256, np.asarray(self._old_vectors[self._old_row[p.id]], dtype=np.float32))
            for p in chunk
            if (entry := self._old_entries.get(p.id)) is not None
        }

    def _write_chunk(self, key: str, result: ChunkResult) -> tuple[list[PhotoEntry], dict[str, dict]]:
        """Commit one chunk: vectors first, then its JSON (which a re-run takes as the commit)."""
        entries, failed, vectors = result
        if vectors.shape != (len(entries), self.model.embed_dim):
            raise VsekitError(f"chunk {key}: {vectors.shape} vectors for {len(entries)} photos")
        self.owned.own(f"pending/{key}.npy", f"pending/{key}.json")
        atomic_save_npy(self.pending / f"{key}.npy", vectors)
        atomic_write_json(
            self.pending / f"{key}.json",
            {"entries": [[e.id, e.size, e.mtime_ns, e.sha256] for e in entries], "failed": failed},
        )
        return entries, failed

    def __post_init__(self) -> None:
        old = self.old or {"entries": []}
        self._old_row = {row[0]: i for i, row in enumerate(old["entries"])}
        self._old_entries = _entries(self.old)
        self._old_file = old.get("embeddings", "")
        self._old_vectors = np.load(self.out / self._old_file, mmap_mode="r") if self._old_file else None
        expected = (len(self._old_row), self.model.embed_dim)
        if self._old_vectors is not None and self._old_vectors.shape != expected:
            raise ValueError(f"shape {self._old_vectors.shape}, expected {expected}")

    # -- the commit: embeddings, ANN structure, manifest last ------------------------------------
    def _commit(self, plan: UpdatePlan, keys: list[str], done: list) -> dict[str, Any]:
        sources: dict[str, tuple[str, int]] = {}  # id -> (".npy" holding its vector, row)
        for entry in plan.kept:
            sources[entry.id] = (self._old_file, self._old_row[entry.id])
        for key, (entries, _) in zip(keys, done, strict=True):
            for row, entry in enumerate(entries):
                sources[entry.id] = (f"pending/{key}.npy", row)
        by_id = {e.id: e for e in plan.kept} | {e.id: e for chunk in done for e in chunk[0]}
        entries = [by_id[i] for i in sorted(by_id)]
        rows = [[e.id, e.size, e.mtime_ns, e.sha256] for e in entries]
        digest = _digest(self.identity["sha256"], self.dtype, rows)
        embeddings = f"embeddings-{digest}.npy"
        self.owned.own(embeddings)
        if not (self.out / embeddings).is_file():
            self._write_embeddings(self.out / embeddings, [sources[e.id] for e in entries])
        ann, ann_params = self._write_ann(embeddings, digest, len(entries))
        failed = dict(plan.still_failed) | {i: f for chunk in done for i, f in chunk[1].items()}
        manifest = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "photos": str(self.photos_dir),
            "model": self.identity,
            "dtype": self.dtype,
            "engine": self.engine,
            "embeddings": embeddings,
            "ann": ann,
            "ann_params": ann_params,
            "entries": rows,
            "failed": {i: failed[i] for i in sorted(failed)},
        }
        atomic_write_json(self.out / MANIFEST, manifest, indent=1)
        return manifest

    def _write_embeddings(self, path: Path, sources: list[tuple[str, int]]) -> None:
        opened: dict[str, np.ndarray] = {}
        shape = (len(sources), self.model.embed_dim)
        with atomic_npy_memmap(path, self.dtype, shape) as out:
            for start in range(0, len(sources), 4096):
                for i, (file, row) in enumerate(sources[start : start + 4096], start):
                    if file not in opened:
                        opened[file] = np.load(self.out / file, mmap_mode="r")
                    out[i] = opened[file][row]

    def _write_ann(self, embeddings: str, digest: str, n: int) -> tuple[str | None, dict[str, int]]:
        """The HNSW / IVF file (built and calibrated when the engine needs one) and its search settings."""
        engine = resolve_engine(self.engine, n)
        if engine not in ANN_ENGINES:
            return None, {}
        name = f"ann-{engine}-{digest}.faiss"
        partial = f".{name}.partial"  # ivfpq's resumable progress; _cleanup removes it
        self.owned.own(name, partial)
        vectors = np.load(self.out / embeddings, mmap_mode="r")
        if (self.out / name).is_file():
            index = deserialize_ann((self.out / name).read_bytes())
        else:
            index = build_ann(vectors, engine, checkpoint=self.out / partial)
            atomic_write_bytes(self.out / name, serialize_ann(index))
        return name, calibrate(index, vectors, calibration_sentences(self.model))

    def _cleanup(self, manifest: dict[str, Any]) -> None:
        """Remove the files the index wrote that the manifest no longer names: older generations,
        finished chunks, temp files. Files it did not write are never touched (see :mod:`.owned`)."""
        keep = {MANIFEST, manifest["embeddings"], manifest.get("ann")}
        self.owned.release(sorted(self.owned.names - keep))
        self.owned.drop_temp_files(keep - {None})
        self.owned.remove_dir_if_empty("pending")

    def _report(
        self, plan: UpdatePlan, old: dict[str, PhotoEntry], new: list[PhotoEntry], failed: dict[str, dict]
    ) -> BuildReport:
        report = BuildReport(removed=list(plan.removed), unchanged=len(plan.kept))
        for entry in new:
            previous = old.get(entry.id)
            if previous is None:
                report.added.append(entry.id)
            elif previous.sha256 != entry.sha256:
                report.changed.append(entry.id)
            else:
                report.unchanged += 1
        every = dict(plan.still_failed) | failed
        report.failed = {i: every[i]["error"] for i in sorted(every)}
        return report


# ----------------------------------------------------------------------------- the index
class Index:
    """A searchable index of a photo folder (see the module docstring).

    ``Index.build(photos, out)`` / ``Index.open(out)``; ``update()``; ``search(text=..., image=...,
    plus=..., minus=..., k=...)`` returns :class:`SearchHit` (path relative to the photo folder, cosine).
    The model is loaded on the first query that needs it; queries are safe from several threads.
    """

    def __init__(self, path: Path, manifest: dict[str, Any], model: VSEModel | None = None) -> None:
        self.path = Path(path)
        self.manifest = manifest
        self.report: BuildReport | None = None
        self._model = model
        self._lock = threading.Lock()
        self._faiss: dict[str, Any] = {}
        self.vectors = self._open_vectors()
        self.paths: list[str] = [row[0] for row in manifest["entries"]]

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
    ) -> Index:
        """Index every photo under ``photos_dir`` into ``out_dir`` (or bring an existing index up to date).

        ``model``: a shipped name (default ``vse``), a model file or a loaded :class:`VSEModel`; an
        existing index built with another model is refused. ``dtype``: ``float32`` (default) or
        ``float16`` storage; ``engine``: ``auto`` (default), ``exact``, ``flat``, ``hnsw``, ``ivf`` or
        ``ivfpq`` (:mod:`vsekit.retrieval.search`). ``chunk_size`` photos are committed at a time. The
        :class:`BuildReport` is in ``index.report``. ``runner`` embeds the chunks elsewhere (the Ray
        actor pool of :mod:`vsekit.distributed.index`); the files written are the same.
        """
        out, photos = Path(out_dir), Path(photos_dir).expanduser().resolve()
        if dtype is not None and dtype not in DTYPES:
            raise VsekitError(f"unknown index dtype {dtype!r}; known: {', '.join(DTYPES)}")
        resolve_engine(engine or "auto", 0)
        if chunk_size < 1:
            raise VsekitError(f"chunk_size must be >= 1, got {chunk_size}")
        if not photos.is_dir():
            raise VsekitError(f"{photos}: not a folder of photos")
        check_out_dir(out, MANIFEST)  # before the model loads and before anything is written
        loaded, name = _load_model(model, device)
        identity = _model_identity(loaded, name)
        with _index_lock(out):
            check_out_dir(out, MANIFEST)
            old = _read_manifest_or_rebuild(out)
            owned = Ownership(out, legacy=_manifest_files(old))
            owned.own(MANIFEST)
            if old is not None:
                _check_same(out, old, photos, identity, dtype, engine)
            settings = {
                "out": out,
                "photos_dir": photos,
                "model": loaded,
                "identity": identity,
                "dtype": dtype or (old or {}).get("dtype", "float32"),
                "engine": engine or (old or {}).get("engine", "auto"),
                "chunk_size": chunk_size,
                "progress": progress,
                "owned": owned,
                "runner": runner,
            }
            try:
                builder = _Builder(old=old, **settings)
            except (OSError, ValueError) as exc:  # damaged vectors are re-embedded, never merged
                logger.warning("%s: damaged index embeddings (%s); re-embedding every photo", out, exc)
                builder = _Builder(old=None, **settings)
            report = builder.run()
        index = cls.open(out, model=loaded)
        index.report = report
        return index

    def update(self, progress: bool = True, chunk_size: int = 32) -> BuildReport:
        """Bring the index up to date with its folder (new, changed, deleted files); see :meth:`build`."""
        fresh = Index.build(
            self.manifest["photos"], self.path, self.model, chunk_size=chunk_size, progress=progress
        )
        self.manifest, self.vectors, self.paths = fresh.manifest, fresh.vectors, fresh.paths
        self._faiss.clear()
        self.report = fresh.report
        return fresh.report

    @classmethod
    def open(cls, out_dir: str | os.PathLike[str], model: VSEModel | None = None) -> Index:
        """An index written by :meth:`build` (its model is loaded when a query first needs it)."""
        out = Path(out_dir)
        manifest = _read_manifest(out)
        if manifest is None:
            what = "does not exist" if not out.exists() else "has no index.json"
            raise VsekitError(f"{out}: not a vsekit photo index ({what}); run `vsekit index build` first")
        return cls(out, manifest, model)

    def _open_vectors(self) -> np.ndarray:
        path = self.path / self.manifest["embeddings"]
        try:
            vectors = np.load(path, mmap_mode="r")
        except (OSError, ValueError) as exc:
            raise VsekitError(f"{path}: cannot read the index's embeddings ({exc})") from None
        expected = (len(self.manifest["entries"]), int(self.manifest["model"]["embed_dim"]))
        if vectors.shape != expected:
            raise VsekitError(f"{path}: embeddings have shape {vectors.shape}, the manifest says {expected}")
        return vectors

    # -- what it is ------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.paths)

    @property
    def photos_dir(self) -> Path:
        return Path(self.manifest["photos"])

    def info(self) -> dict[str, Any]:
        """Photo folder, counts, unreadable files, model, storage and engine, bytes on disk."""
        m = self.manifest
        files = [self.path / name for name in (MANIFEST, m["embeddings"], m["ann"]) if name]
        return {
            "index": str(self.path),
            "photos": m["photos"],
            "count": len(self),
            "failed": {i: f["error"] for i, f in m["failed"].items()},
            "model": m["model"]["name"],
            "model_sha256": m["model"]["sha256"],
            "embed_dim": m["model"]["embed_dim"],
            "dtype": m["dtype"],
            "engine": resolve_engine(m["engine"], len(self)),
            "bytes": sum(f.stat().st_size for f in files if f.is_file()),
        }

    @property
    def model(self) -> VSEModel:
        """The index's joint model (loaded once; a file that changed since the build is refused)."""
        with self._lock:
            return self._model_unlocked()

    def _model_unlocked(self) -> VSEModel:
        """:attr:`model`, for a caller that holds ``self._lock``."""
        if self._model is None:
            recorded = self.manifest["model"]
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
    ) -> list[SearchHit]:
        """The ``k`` photos nearest a sentence, a photo (path or PIL image) or a vector, with optional
        ``minus`` / ``plus`` words (Kiros et al. 2014, Eq. 15) and the paper's re-sort of the top
        ``resort`` results by distance to their mean (0: off). Hits below ``min_score`` are dropped."""
        query = self.query_vector(text, image, vector=vector, plus=plus, minus=minus)
        return self.search_vectors(query[None], k, min_score=min_score, resort=resort, engine=engine)[0]

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
    ) -> list[list[SearchHit]]:
        """Hits for each unit query vector ``[q, K]`` (see :meth:`search`)."""
        if k < 1:
            raise VsekitError(f"k must be >= 1, got {k}")
        if len(self) == 0:
            return [[] for _ in np.atleast_2d(queries)]
        want = min(max(k, resort), len(self))
        scores, rows = self._nearest(queries, want, engine)
        return hits_from(scores, rows, self.paths, lambda r: self.vectors[r], k, min_score, resort)

    def _nearest(self, queries: np.ndarray, k: int, engine: str | None) -> tuple[np.ndarray, np.ndarray]:
        chosen = resolve_engine(engine or self.manifest["engine"], len(self))
        if chosen == "exact":
            return exact_search(self.vectors, queries, k)
        index, params = self._faiss_index(chosen)
        return ann_search(index, self.vectors, queries, k, params)

    def _faiss_index(self, engine: str) -> tuple[Any, dict[str, int]]:
        """The FAISS structure for ``engine`` and its search settings (read, or built in memory)."""
        with self._lock:
            if engine not in self._faiss:
                ann = self.manifest.get("ann")
                if ann and ann.startswith(f"ann-{engine}-"):
                    data = (self.path / ann).read_bytes()
                    params = dict(self.manifest.get("ann_params") or {})
                    self._faiss[engine] = (deserialize_ann(data, params), params)
                else:
                    logger.info("building a FAISS %s index in memory over %d vectors", engine, len(self))
                    index = build_ann(self.vectors, engine)
                    params = {}
                    if engine in ANN_ENGINES:
                        params = calibrate(index, self.vectors, calibration_sentences(self._model_unlocked()))
                    set_search_params(index, params)
                    self._faiss[engine] = (index, params)
            return self._faiss[engine]


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


def _check_same(
    out: Path,
    old: dict[str, Any],
    photos: Path,
    identity: dict[str, Any],
    dtype: str | None,
    engine: str | None,
) -> None:
    """Refuse to extend an index with another model, another folder or other storage settings."""
    recorded = old["model"]
    if recorded["sha256"] != identity["sha256"]:
        raise ConfigMismatchError(
            f"{out}: this index was built with model {recorded['name']} (sha256 {recorded['sha256'][:12]}); "
            f"refusing to mix in vectors of {identity['name']} (sha256 {identity['sha256'][:12]}). "
            "Use another --out or delete the index"
        )
    if Path(old["photos"]) != photos:
        raise VsekitError(f"{out}: this index is of {old['photos']}, not {photos}; use another --out")
    if dtype is not None and dtype != old["dtype"]:
        raise VsekitError(f"{out}: this index stores {old['dtype']}, not {dtype}; use another --out")
    if engine is not None and engine != old["engine"]:
        raise VsekitError(f"{out}: this index uses engine {old['engine']}, not {engine}; use another --out")
