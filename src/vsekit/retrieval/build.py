"""Building and updating a photo index store: embed what changed, write one segment, commit one generation.

A build or update (:class:`Builder`, under the writers' lock) compares a scan of the photo folder with
the store's records (:func:`~vsekit.retrieval.photos.plan_update`), embeds the new and changed photos
in chunks, and commits them as one new segment in one transaction; unchanged photos are not touched
(an update costs what changed). **Resumable**: each chunk is written as a segment file and recorded in
the ``chunks`` table under a key hashing its content (model, dtype, file ids, sizes, mtimes), so a
re-run after a kill embeds only the chunks that are missing. Several chunks are merged into one segment
before the commit. Unreadable photos are recorded in ``failed``, never zero-filled, and retried when
the file changes. A segment whose file is damaged is dropped and its photos re-embedded.

Compaction (:func:`compact`) merges segments (:func:`~vsekit.retrieval.store.plan_compaction`) into a
new one and commits; the merged files are deleted after the commit. ANN structures (HNSW / IVF /
IVF-PQ) are built per segment when a segment is written, for the segments the engine rule of
:func:`needs_ann` names.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from tokenize import TokenError
from typing import TYPE_CHECKING, Any

import numpy as np
from PIL import Image

from vsekit.errors import ConfigMismatchError, VsekitError, command
from vsekit.retrieval.concepts import concepts_setting, packed_classes, photo_classifier
from vsekit.retrieval.legacy import migrate, read_manifest
from vsekit.retrieval.photos import (
    PhotoEntry,
    PhotoFile,
    UpdatePlan,
    plan_update,
    read_photo,
    read_photo_dated,
    scan_folder,
)
from vsekit.retrieval.search import (
    ANN_ENGINES,
    ANN_MIN_VECTORS,
    build_ann,
    calibrate,
    resolve_engine,
    serialize_ann,
)
from vsekit.retrieval.segments import verify_file
from vsekit.retrieval.store import (
    DB,
    SEGMENTS,
    STORE_FORMAT,
    STORE_VERSION,
    NewSegment,
    PhotoRecord,
    Store,
    StoreChange,
    build_command,
    committed_mark,
    damaged,
    is_damage,
    map_npy,
    plan_compaction,
    writer_lock,
)
from vsekit.vision.preprocess import exif_date

if TYPE_CHECKING:  # the model (and torch) is imported where it loads: an update with nothing new needs none
    from vsekit.embedding.pipeline import VSEModel

__all__ = [
    "BuildReport",
    "Builder",
    "ChunkResult",
    "ChunkRunner",
    "add_vectors",
    "compact",
    "compact_store",
    "embed_chunk",
    "needs_ann",
    "new_store",
]

logger = logging.getLogger(__name__)

#: Photos decoded and run through the CNN together (bounded memory for large photos).
_EMBED_GROUP = 8
_BLOCK = 65_536


@dataclass
class BuildReport:
    """What a build or update did."""

    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    unchanged: int = 0
    failed: dict[str, str] = field(default_factory=dict)  # every unreadable photo: id -> error
    #: the unreadable photos an earlier run found already, unchanged since (not read again)
    failed_before: list[str] = field(default_factory=list)
    #: a rebuild with another model (``rebuild=True``): the photos embedded again, and the model replaced
    reembedded: list[str] = field(default_factory=list)
    replaced_model: dict[str, Any] | None = None

    def new_failures(self) -> dict[str, str]:
        """The unreadable photos this run found (new files, or changed since an earlier run): id -> error."""
        before = set(self.failed_before)
        return {i: error for i, error in self.failed.items() if i not in before}


#: A chunk's embeddings: its readable photos' entries, its unreadable ones (id -> {size, mtime_ns, error}),
#: the vectors float32 [len(entries), K], row i = entry i, and the packed top classes of the photos it ran
#: through the CNN ({sha256: bytes}; the concept route).
ChunkResult = tuple[list[PhotoEntry], dict[str, dict], np.ndarray, dict[str, bytes]]
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
    ``previous`` records for it (touched, same bytes) keeps its old vector. The photos run through the
    CNN also get their top ImageNet classes (the concept route), from the same features. Each file is
    opened and read once: its bytes give the sha256, the pixels and the EXIF date taken of its entry."""
    entries: list[PhotoEntry] = []
    failed: dict[str, dict] = {}
    rows: list[np.ndarray] = []
    group: list[tuple[str, Image.Image]] = []
    classifier = photo_classifier(model.image_spec)
    classes: dict[str, bytes] = {}

    def flush() -> None:
        if group:
            features = model.file_features([image for _, image in group])
            rows.extend(model.embed_features(features))
            if classifier is not None:
                classes.update(
                    zip([sha for sha, _ in group], packed_classes(classifier, features), strict=True)
                )
            group.clear()

    for photo in chunk:
        sha, image, error, taken = read_photo_dated(photo)
        if error is not None:  # reported once, in the build's report (BuildReport.failed)
            logger.debug("unreadable: %s", error)
            failed[photo.id] = {"size": photo.size, "mtime_ns": photo.mtime_ns, "error": error}
            continue
        assert image is not None  # read_photo_dated gives an image or an error
        entries.append(PhotoEntry(photo.id, photo.size, photo.mtime_ns, sha, taken))
        old_sha, old_vector = previous.get(photo.id, ("", None))
        if old_vector is not None and old_sha == sha:
            flush()
            rows.append(np.asarray(old_vector, dtype=np.float32))
            continue
        group.append((sha, image))
        if len(group) == _EMBED_GROUP:
            flush()
    flush()
    vectors = np.asarray(rows, dtype=np.float32).reshape(len(entries), model.embed_dim)
    return entries, failed, vectors, classes


def date_taken(path: Path) -> str | None:
    """EXIF DateTimeOriginal (else DateTime) of the file at ``path`` as ISO text ``YYYY-MM-DDTHH:MM:SS``,
    or None (:func:`~vsekit.vision.preprocess.exif_date`). A build takes it from the bytes it reads
    anyway (:func:`~vsekit.retrieval.photos.read_photo_dated`); this opens the file again, for the
    entries of a finished chunk an older vsekit recorded without it."""
    try:
        with Image.open(path) as img:
            return exif_date(img.getexif())
    except Exception:  # noqa: BLE001 - a photo without readable EXIF simply has no date
        return None


def _bar(total: int, desc: str, disable: bool) -> Any:
    """A progress bar of photos (tqdm, imported here: a search imports this module and draws none)."""
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="img", disable=disable)


def _digest(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def needs_ann(engine: str, total: int, rows: int, dim: int) -> str | None:
    """The ANN engine a segment of ``rows`` rows gets in an index of ``total`` photos of ``dim``
    dimensions, or None: an explicit ANN engine gives every written segment one; ``auto`` gives one
    (HNSW, or IVF-PQ for a large index: :func:`~vsekit.retrieval.search.resolve_engine`) to segments of at
    least :data:`ANN_MIN_VECTORS` rows once the index holds that many (smaller ones are searched exactly)."""
    chosen = resolve_engine(engine, total, dim)
    if chosen not in ANN_ENGINES or rows == 0:
        return None
    return chosen if engine != "auto" or rows >= ANN_MIN_VECTORS else None


def write_ann(
    store: Store, n: int, engine: str, text_queries: Callable[[], np.ndarray | None]
) -> tuple[str, str, dict[str, int]]:
    """Build, calibrate and write the ``engine`` structure of segment ``n``."""
    vectors = map_npy(store.segment_path(n))
    name, partial = _free_ann_names(store, engine, n)
    index = build_ann(vectors, engine, checkpoint=store.out / partial)
    params = calibrate(index, vectors, text_queries())
    store.write_file(name, serialize_ann(index))
    store.discard(partial)
    store.collect()
    return engine, name, params


def _free_ann_names(store: Store, engine: str, n: int) -> tuple[str, str]:
    """Names for segment ``n``'s ANN file and its IVF-PQ progress file (``partial``), recorded as the
    store's: ``ann-<engine>-<n>.faiss``, or ``ann-<engine>-<n>-<i>.faiss`` when a file is there (one
    someone put there, or the damaged one being replaced)."""
    for i in range(1, 10_000):
        stem = f"ann-{engine}-{n}" + (f"-{i}" if i > 1 else "")
        name, partial = f"{SEGMENTS}/{stem}.faiss", f"{SEGMENTS}/.{stem}.faiss.partial"
        if store.reserve_free(name, partial):
            return name, partial
    raise VsekitError(f"{store.out / SEGMENTS}: no free name for an ANN file of segment {n}")


def compact(
    store: Store, everything: bool = False, text_queries: Callable[[], np.ndarray | None] = lambda: None
) -> bool:
    """Merge the segments :func:`plan_compaction` picks into one new segment and commit; False when
    there is nothing to merge."""
    from vsekit.retrieval.store import id_text

    chosen = plan_compaction(store.segments(), everything)
    if not chosen:
        return False
    settings = _written_settings(store)
    dim, dtype = int(settings["model"]["embed_dim"]), settings["dtype"]
    rows = store.records_in(chosen)
    maps = {n: _verified(store, n) for n in chosen}

    def blocks() -> Iterator[np.ndarray]:
        for start in range(0, len(rows), _BLOCK):
            part = rows[start : start + _BLOCK]
            yield np.stack([maps[r[6]][r[7]] for r in part]) if part else np.zeros((0, dim), dtype)

    n, sha = store.write_segment(blocks(), len(rows), dim, dtype)
    photos = [PhotoRecord(id_text(r[0]), r[1], r[2], r[3], r[4], r[5]) for r in rows]
    total = store.count()
    segment = NewSegment(n, photos, sha)
    engine = needs_ann(settings["engine"], total, len(rows), dim)
    if engine is not None:
        segment.ann = write_ann(store, n, engine, text_queries)
    store.commit(StoreChange(segments=[segment], drop_segments=chosen))
    store.drop_orphan_concepts()  # classes of photos no generation from now on can hold
    logger.info("compacted segments %s into segment %d (%d rows)", chosen, n, len(rows))
    return True


def _verified(store: Store, n: int) -> np.ndarray:
    path = store.segment_path(n)
    verify_file(path, store.segment_sha(n), store.out)
    return map_npy(path)


def _check_same(
    out: Path,
    old: dict[str, Any],
    photos: Path,
    identity: dict[str, Any],
    dtype: str | None,
    engine: str | None,
    rebuild: bool = False,
) -> None:
    """Refuse to extend an index with another model (unless ``rebuild``), another folder or other storage
    settings."""
    recorded = old["model"]
    if recorded["sha256"] != identity["sha256"] and not rebuild:
        raise ConfigMismatchError(
            f"{out}: this index was built with model {recorded['name']} (sha256 {recorded['sha256'][:12]}); "
            f"refusing to mix in vectors of {identity['name']} (sha256 {identity['sha256'][:12]}). "
            f"{build_command(out, photos, identity['name'], '--rebuild')} embeds every photo again with it"
        )
    if Path(old["photos"]) != photos:
        raise VsekitError(
            f"{out}: this index is of {old['photos']}, not {photos}; use another --out for an index of "
            f"{photos}, or, if the index's photos moved there, {command('index', 'relocate', out, photos)} "
            "points this index at them"
        )
    if dtype is not None and dtype != old["dtype"]:
        raise VsekitError(f"{out}: this index stores {old['dtype']}, not {dtype}; use another --out")
    if engine is not None and engine != old["engine"]:
        raise VsekitError(f"{out}: this index uses engine {old['engine']}, not {engine}; use another --out")


@dataclass
class Builder:
    """One build or update of the store in ``store.out`` (module docstring)."""

    store: Store
    photos_dir: Path
    #: Gives the model (``identity``'s) when a photo is to be embedded or classified: an update that
    #: finds nothing to do loads none
    load: Callable[[], VSEModel]
    identity: dict[str, Any]
    dtype: str | None
    engine: str | None
    chunk_size: int
    progress: bool
    runner: ChunkRunner | None = None
    text_queries: Callable[[], np.ndarray | None] = lambda: None
    #: Which new or changed files to read now (None: all). A file left out is neither added nor removed:
    #: its old record, if any, stays until a later update (``index update --watch``: still being written).
    ready: Callable[[PhotoFile], bool] | None = None
    #: An index built with another model is embedded again with this one (``vsekit index build --rebuild``)
    rebuild: bool = False
    #: The folder's photos when the caller has just scanned it (``index update`` checks the folder first):
    #: not scanned again
    scanned: list[PhotoFile] | None = None

    @functools.cached_property
    def model(self) -> VSEModel:
        return self.load()

    def run(self) -> BuildReport:
        lost = self._lost_generations()
        settings = self._settings()
        self.dtype, self.engine = settings["dtype"], settings["engine"]
        self.dim = int(settings["model"]["embed_dim"])
        if settings["model"]["sha256"] != self.identity["sha256"]:
            return self._rebuild(settings["model"])
        records, damaged = self._records()
        old_entries = {i: PhotoEntry(i, r[0], r[1], r[2]) for i, r in records.items()}
        plan = plan_update(self._scan(), old_entries, self.store.failed())
        if self.ready is not None:
            plan.todo = [p for p in plan.todo if self.ready(p)]
        chunks, keys = self._chunks(plan.todo)
        classes = self._classes_setting(settings)
        if plan.changes_nothing and not damaged and not lost and not classes:
            self._finish()
            return _report(plan, old_entries, [], {})
        self._records_of = records
        done = self._embed_chunks(chunks, keys)
        new_entries = [e for chunk in done for e in chunk[1]]
        failed = dict(plan.still_failed) | {i: f for chunk in done for i, f in chunk[2].items()}
        if classes and not self._classify_kept([e for e in plan.kept if e.id in records]):
            classes = None  # a kept photo could not be classified now: the route waits for the next update
        self._commit(plan, done, failed, damaged, classes)
        self._finish()
        return _report(plan, old_entries, new_entries, failed)

    def _lost_generations(self) -> bool:
        """A database that lost committed generations (its WAL lost or damaged) is brought up to date
        from the photo folder like any other: the scan re-embeds what the lost generations added."""
        self.store.repairs = True
        witnessed, generation = committed_mark(self.store.out), self.store.generation()
        if witnessed is not None and generation < witnessed:
            logger.warning(
                "%s: holds generation %d of %d committed (its write-ahead log was lost or damaged); "
                "indexing the photo folder again",
                self.store.out / DB,
                generation,
                witnessed,
            )
            return True
        return False

    def _scan(self) -> list[PhotoFile]:
        """The folder's photos: the caller's scan when it has just made one (the folder is walked once
        per build or update), else a scan now."""
        return self.scanned if self.scanned is not None else scan_folder(self.photos_dir)

    # -- settings and records ------------------------------------------------------------------
    def _settings(self) -> dict[str, Any]:
        settings = self.store.settings()
        manifest = read_manifest(self.store.out) if not self.store.generation() else None
        if "model" not in settings or manifest is not None:  # new, or a conversion not committed yet
            if manifest is not None:
                _check_same(
                    self.store.out,
                    manifest,
                    self.photos_dir,
                    self.identity,
                    self.dtype,
                    self.engine,
                    self.rebuild,
                )
                migrate(self.store, manifest)
                logger.info("%s: converted to the index store (no photo re-embedded)", self.store.out)
            else:
                self.store.set_settings(
                    {
                        "format": STORE_FORMAT,
                        "format_version": STORE_VERSION,
                        "photos": str(self.photos_dir),
                        "model": self.identity,
                        "dtype": self.dtype or "float32",
                        "engine": self.engine or "auto",
                    }
                )
            settings = self.store.settings()
        _check_same(
            self.store.out, settings, self.photos_dir, self.identity, self.dtype, self.engine, self.rebuild
        )
        return settings

    def _rebuild(self, previous: dict[str, Any]) -> BuildReport:
        """Every photo embedded again with the new model (no old vector reused: they are another model's);
        the old segments, their ANN files and the model setting are replaced in one commit, so a reader
        sees the old index or the new one, never a mix. Stored captions of unchanged photos are kept.
        Killed, it resumes from its committed chunks when run again with ``rebuild``."""
        old = self.store.photos()
        captions = self.store.captions()
        self.dim = int(self.identity["embed_dim"])
        scan = self._scan()
        plan = plan_update(scan, {}, self.store.failed())
        chunks, keys = self._chunks(plan.todo)
        self._records_of = {}
        done = self._embed_chunks(chunks, keys)
        failed = dict(plan.still_failed) | {i: f for chunk in done for i, f in chunk[2].items()}
        on_disk = {p.id for p in scan}
        plan.removed = sorted(i for i in old if i not in on_disk)
        segments = [n for n, *_ in self.store.segments()]
        settings = {"model": self.identity} | (self._classes_setting({}) or {})
        self._commit(plan, done, failed, segments, settings, captions)
        self._finish()
        logger.info("%s: rebuilt with %s (was %s)", self.store.out, self.identity["name"], previous["name"])
        report = _report(plan, {}, [e for chunk in done for e in chunk[1]], failed)
        report.reembedded = sorted(i for i in report.added if i in old)
        report.added = [i for i in report.added if i not in old]
        report.replaced_model = {k: previous[k] for k in ("name", "sha256")}
        return report

    def _records(self) -> tuple[dict[str, tuple], list[int]]:
        """Every photo record, less those in damaged or unlisted segments (dropped and re-embedded)."""
        damaged, self._maps = [], {}
        for n, rows, _, sha in self.store.segment_files():
            path = self.store.segment_path(n)
            try:
                verify_file(path, sha, self.store.out)
                vectors = map_npy(path)
                if vectors.shape != (rows, self.dim):
                    raise VsekitError(f"{path}: shape {vectors.shape}")
                self._maps[n] = vectors
            except (
                VsekitError,
                OSError,
                ValueError,
                SyntaxError,
                TokenError,
            ) as exc:  # np.load of a bad header
                logger.warning("%s; its photos are embedded again", str(exc).split(";")[0])
                damaged.append(n)
        # only photos in a segment checked here: one recorded in a segment the store no longer lists (a
        # flipped bit in a segment's number) is embedded again like those of a damaged segment
        records = {i: r for i, r in self.store.photos().items() if r[3] in self._maps}
        return records, damaged

    # -- the concept route's classes ------------------------------------------------------------
    def _classes_setting(self, settings: dict[str, Any]) -> dict[str, Any] | None:
        """``{"concepts": ...}`` when this build must (also) record that every photo has its classes: a
        new index, or one built before the concept route (None: nothing to add, or a model whose
        features are not the classifier's input). Told from the recorded identity's image spec: an index
        whose classes are all stored needs neither the model nor the classifier here."""
        spec = self._image_spec()
        if spec.get("kind") not in ("one-layer", "pre-head") or "backbone" not in spec:
            return None
        wanted = concepts_setting(spec["backbone"])
        if settings.get("concepts") == wanted or photo_classifier(spec) is None:
            return None
        return {"concepts": wanted}

    def _image_spec(self) -> dict[str, Any]:
        """The model's image spec as its identity records it (the model file's own: its sha256 is checked)."""
        return self.identity.get("config", {}).get("image") or {}

    def _classify_kept(self, kept: list[PhotoEntry]) -> bool:
        """Store the classes of kept photos that have none (an index built before the concept route: its
        photos are read and run through the CNN once, their vectors untouched). False when one could not
        be read or changed meanwhile."""
        missing = self.store.without_concepts()
        todo = [e for e in kept if e.id in missing]
        if not todo:
            return True
        classifier, complete = photo_classifier(self._image_spec()), True
        assert classifier is not None  # (run only with a classifier: _classes_setting)
        bar = _bar(len(todo), "add concepts", not self.progress)
        for start in range(0, len(todo), _EMBED_GROUP):
            group = []
            for entry in todo[start : start + _EMBED_GROUP]:
                sha, image, error = read_photo(
                    PhotoFile(entry.id, self.photos_dir / entry.id, entry.size, entry.mtime_ns)
                )
                if image is None or sha != missing[entry.id]:
                    logger.warning("no concepts for %s yet: %s", entry.id, error or "it changed meanwhile")
                    complete = False
                    continue
                group.append((sha, image))
            if group:
                features = self.model.file_features([image for _, image in group])
                packed = packed_classes(classifier, features)
                self.store.put_concepts(dict(zip([sha for sha, _ in group], packed, strict=True)))
            bar.update(len(todo[start : start + _EMBED_GROUP]))
        bar.close()
        return complete

    # -- chunks ---------------------------------------------------------------------------------
    def _chunks(self, todo: list[PhotoFile]) -> tuple[list[list[PhotoFile]], list[str]]:
        """``todo`` in chunks of ``chunk_size`` with their keys; a killed run's other chunks are dropped
        (the store keeps those whose key is here: they are this run's work, committed already)."""
        chunks = [todo[i : i + self.chunk_size] for i in range(0, len(todo), self.chunk_size)]
        keys = [self._chunk_key(chunk) for chunk in chunks]
        self.store.recover(keep_chunks=set(keys))
        return chunks, keys

    def _chunk_key(self, chunk: list[PhotoFile]) -> str:
        files = [[p.id, p.size, p.mtime_ns] for p in chunk]
        return _digest(self.identity["sha256"], self.dtype, files)

    def _previous(self, chunk: list[PhotoFile]) -> dict[str, tuple[str, np.ndarray]]:
        """``{id: (sha256, vector)}`` of the chunk's photos the old index holds (their bytes may match)."""
        out = {}
        for p in chunk:
            record = self._records_of.get(p.id)
            if record is not None:
                out[p.id] = (record[2], np.asarray(self._maps[record[3]][record[4]], dtype=np.float32))
        return out

    def _reuse(self, key: str) -> tuple[int, list[PhotoEntry], dict[str, dict]] | None:
        found = self.store.chunk(key)
        if found is None:
            return None
        n, entries, failed = found
        sha = self.store.file_sha(f"{SEGMENTS}/{n}.npy")
        try:
            verify_file(self.store.segment_path(n), sha or "", self.store.out)
        except VsekitError:
            return None
        return n, [self._entry(row) for row in entries], failed

    def _entry(self, row: list) -> PhotoEntry:
        """A finished chunk's photo: ``[id, size, mtime_ns, sha256, taken]`` (an older vsekit's chunk
        recorded no ``taken``: the date is read from the file then)."""
        photo_id, size, mtime_ns, sha256, *rest = row
        taken = rest[0] if rest else date_taken(self.photos_dir / photo_id)
        return PhotoEntry(photo_id, size, mtime_ns, sha256, taken)

    def _embed_chunks(self, chunks: list[list[PhotoFile]], keys: list[str]) -> list[tuple]:
        total = sum(len(c) for c in chunks)
        bar = _bar(total, "index photos", not self.progress or total == 0)
        done: dict[str, tuple] = {}
        try:
            missing = []
            for chunk, key in zip(chunks, keys, strict=True):
                reused = self._reuse(key)
                if reused is not None:
                    done[key] = reused
                    bar.update(len(chunk))
                elif self.runner is None:
                    done[key] = self._write_chunk(key, embed_chunk(self.model, chunk, self._previous(chunk)))
                    bar.update(len(chunk))
                else:
                    missing.append((key, chunk, self._previous(chunk)))
            if missing:
                assert self.runner is not None  # (chunks are missing only with a runner)
                sizes = {key: len(chunk) for key, chunk, _ in missing}
                for key, result in self.runner(self.identity, missing):
                    done[key] = self._write_chunk(key, result)
                    bar.update(sizes[key])
        finally:
            bar.close()
        return [done[key] for key in keys]

    def _write_chunk(self, key: str, result: ChunkResult) -> tuple[int, list[PhotoEntry], dict[str, dict]]:
        """Commit one chunk: its segment file, then its record (which a re-run takes as the commit)."""
        entries, failed, vectors, classes = result
        assert self.dtype is not None  # run() set it from the settings
        self.store.put_concepts(classes)  # content-keyed: kept by a killed build for its next run
        if vectors.shape != (len(entries), self.dim):
            raise VsekitError(f"chunk {key}: {vectors.shape} vectors for {len(entries)} photos")
        n, sha = self.store.write_segment(vectors.astype(self.dtype), len(entries), self.dim, self.dtype)
        rows = [[e.id, e.size, e.mtime_ns, e.sha256, e.taken] for e in entries]
        self.store.save_chunk(key, n, sha, rows, failed)
        return n, entries, failed

    # -- the commit -----------------------------------------------------------------------------
    def _commit(
        self,
        plan: UpdatePlan,
        done: list[tuple],
        failed: dict[str, dict],
        damaged: list[int],
        settings: dict[str, Any] | None = None,
        captions: dict[str, tuple[str, str]] | None = None,
    ) -> None:
        """One generation: the new chunks' segment, removals, unreadable files, dropped segments; a
        rebuild also replaces ``settings`` and carries ``captions`` (``{id: (sha256, caption)}``) over to
        the photos whose bytes did not change."""
        assert self.dtype is not None and self.engine is not None  # run() set them from the settings
        entries = [e for _, chunk_entries, _ in done for e in chunk_entries]
        segments = [n for n, chunk_entries, _ in done if chunk_entries]
        if len(segments) == 1:
            n, sha = segments[0], self.store.file_sha(f"{SEGMENTS}/{segments[0]}.npy") or ""
        elif segments:
            n, sha = self.store.write_segment(self._chunk_blocks(done), len(entries), self.dim, self.dtype)
        change = StoreChange(
            removed=list(plan.removed),
            failed={i: failed[i] for i in sorted(failed)},
            drop_segments=damaged,
            chunks_done=True,
            settings=settings,
        )
        captions = captions or {}

        def kept(entry: PhotoEntry) -> str | None:
            sha, caption = captions.get(entry.id, ("", None))
            return caption if sha == entry.sha256 else None

        if segments:
            photos = [PhotoRecord(e.id, e.size, e.mtime_ns, e.sha256, e.taken, kept(e)) for e in entries]
            segment = NewSegment(n, photos, sha)
            total = len(plan.kept) + len(entries)
            engine = needs_ann(self.engine, total, len(entries), self.dim)
            if engine is not None:
                segment.ann = write_ann(self.store, n, engine, self.text_queries)
            change.segments.append(segment)
        self.store.commit(change)

    def _chunk_blocks(self, done: list[tuple]) -> Iterator[np.ndarray]:
        for n, entries, _ in done:
            if entries:
                yield map_npy(self.store.segment_path(n))

    def _finish(self) -> None:
        """Automatic compaction (when segments pass the documented shares) and missing ANN structures."""
        compact(self.store, text_queries=self.text_queries)
        ensure_ann(self.store, self.text_queries)


def ensure_ann(store: Store, text_queries: Callable[[], np.ndarray | None]) -> None:
    """Build the ANN structures the engine rule asks for and no segment has in good order: none yet
    (a converted index), a record that fails its checksum, or a file that is missing or differs from
    its sha256 (built again in a new file; the old one is collected after the commit). This is the
    repair a reader's damaged-ANN error advises (``vsekit index build``)."""
    settings = store.settings()
    total = store.count()
    try:
        records = store.ann_records(settings)
    except ValueError as exc:  # unreadable JSON where the CRC was read as it was (format version 1)
        raise damaged(store.out / DB, f"an ANN record: {exc}", store.out) from None
    broken = sorted(n for n, record in records.items() if not _sound_ann(store, n, record))
    anns = []
    for n, rows, _ in store.segments():
        engine = needs_ann(settings["engine"], total, rows, int(settings["model"]["embed_dim"]))
        if engine is not None and (n not in records or n in broken):
            anns.append((n, *write_ann(store, n, engine, text_queries)))
    if anns or broken:
        store.commit(StoreChange(anns=anns, drop_anns=broken))


def _sound_ann(store: Store, n: int, record: tuple[str, str, dict] | None) -> bool:
    """Whether segment ``n``'s ANN record passed its checksum and its file its recorded sha256."""
    if record is None:
        logger.warning(
            "%s: the ANN settings of segment %d do not match their checksum; building it again",
            store.out / DB,
            n,
        )
        return False
    try:
        verify_file(store.out / record[1], store.file_sha(record[1]) or "", store.out)
    except VsekitError as exc:
        logger.warning("%s; building it again", str(exc).split(";")[0])
        return False
    return True


def _report(
    plan: UpdatePlan, old: dict[str, PhotoEntry], new: list[PhotoEntry], failed: dict[str, dict]
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
    report.failed_before = sorted(plan.still_failed)
    return report


# ----------------------------------------------------------------------------- vectors given directly
def new_store(
    out: Path,
    embed_dim: int,
    *,
    dtype: str = "float32",
    engine: str = "auto",
    photos_dir: str = "",
    model: dict[str, Any] | None = None,
) -> None:
    """Create an empty store for vectors given directly (no CNN: benchmarks, tests, other embedders);
    ``model`` is the identity recorded (default: a synthetic one of ``embed_dim``)."""
    identity = model or {"name": "synthetic", "sha256": "0" * 64, "config": {}, "embed_dim": int(embed_dim)}
    with writer_lock(out):
        store = Store.open(out, create=True)
        try:
            if store.generation():
                raise VsekitError(f"{out}: already an index")
            settings = {"format": STORE_FORMAT, "format_version": STORE_VERSION, "photos": photos_dir}
            store.set_settings(settings | {"model": identity, "dtype": dtype, "engine": engine})
            store.commit(StoreChange())
        finally:
            store.close()


def add_vectors(
    out: Path,
    photos: Sequence[PhotoRecord] = (),
    vectors: np.ndarray | None = None,
    removed: Sequence[str] = (),
    *,
    auto_compact: bool = True,
) -> int:
    """One generation: ``photos`` (row i has ``vectors[i]``) added or replacing the photo of the same id,
    ``removed`` ids deleted; a photo whose record (size, mtime, sha256) is already stored is skipped,
    so running the same call again changes nothing. Returns the committed generation."""
    with writer_lock(out), _damage_is_one_line(out):
        store = Store.open(out)
        try:
            store.recover()
            settings = _written_settings(store)
            stored = store.records_of([p.id for p in photos] + list(removed))
            keep = [i for i, p in enumerate(photos) if stored.get(p.id) != (p.size, p.mtime_ns, p.sha256)]
            gone = [i for i in removed if i in stored]
            change = StoreChange(removed=gone)
            if keep:
                dim, dtype = int(settings["model"]["embed_dim"]), settings["dtype"]
                rows = np.asarray(vectors)[keep].astype(dtype)
                n, sha = store.write_segment(rows, len(keep), dim, dtype)
                segment = NewSegment(n, [photos[i] for i in keep], sha)
                engine = needs_ann(
                    settings["engine"],
                    store.count() + len(keep),
                    len(keep),
                    int(settings["model"]["embed_dim"]),
                )
                if engine is not None:
                    segment.ann = write_ann(store, n, engine, lambda: None)
                change.segments.append(segment)
            if not keep and not gone:
                return store.generation()
            generation = store.commit(change)
            if auto_compact and compact(store):
                generation = store.generation()
            return generation
        finally:
            store.close()


def compact_store(out: Path, everything: bool = True) -> bool:
    """:func:`compact` under the writers' lock (``everything``: merge all segments into one)."""
    with writer_lock(out), _damage_is_one_line(out):
        store = Store.open(out)
        try:
            store.recover()
            return compact(store, everything)
        finally:
            store.close()


def _written_settings(store: Store) -> dict[str, Any]:
    """The settings of a store that has had its first commit (a database without them is damaged)."""
    settings = store.settings()
    if "model" not in settings:
        raise damaged(store.out / DB, "no settings", store.out)
    return settings


@contextlib.contextmanager
def _damage_is_one_line(out: Path) -> Iterator[None]:
    """A damaged database met by a writer of given vectors is the damaged-index line (a build from the
    photo folder moves such a database aside instead: ``index._open_store_for_writing``)."""
    try:
        yield
    except sqlite3.Error as exc:
        if not is_damage(exc):
            raise
        raise damaged(Path(out) / DB, str(exc), Path(out)) from None
