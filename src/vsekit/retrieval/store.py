"""The photo index store: per-photo records in SQLite, vectors in immutable segment files.

An index directory ``INDEX`` holds::

    store.sqlite (+ -wal, -shm)   settings, photos, failed, segments, tombstones, generations, files, ann,
                                  chunks (SQLite in WAL mode; every commit is one transaction)
    segments/<n>.npy              immutable unit vectors [rows, K] (float32 or float16), never rewritten
    segments/ann-<engine>-<n>.faiss  an HNSW / IVF / IVF-PQ structure over segment n (when the engine
                                  needs one), never rewritten
    .lock                         the writers' lock (holds the pid of the writer)

A **generation** is the set of live segments and tombstones after one committed transaction. A writer
writes new segment files first (temp file, fsync, rename), then commits one transaction that names
them, tombstones the rows they replace and records a generation; a kill at any moment leaves the old
generation or the new one. Every file the store creates is first recorded in ``files`` (state
``pending``), so a killed writer's leftovers are known and removed by the next writer; a file is
deleted only when ``files`` lists it as ``dead`` (never by name pattern). Each file's sha256 is in
``files`` and is checked when a reader first maps it (:mod:`vsekit.retrieval.segments`).

Deletion or change of a photo is a tombstone on its old (segment, row) plus, for a change, a row in a
new segment. :func:`plan_compaction` decides when segments are merged (see ``docs/index-store.md``).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import sqlite3
import threading
import time
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

from vsekit.errors import VsekitError, command
from vsekit.fileio import _tmp_for, atomic_npy_memmap, atomic_write_bytes, file_sha256

__all__ = [
    "DB",
    "ann_records",
    "map_npy",
    "GENERATION_MARK",
    "LEGACY_LEDGER",
    "LEGACY_MANIFEST",
    "LOCK",
    "MAX_SEGMENTS",
    "TOMBSTONE_SHARE",
    "NewSegment",
    "PhotoRecord",
    "Store",
    "StoreChange",
    "PHOTO_COLUMNS",
    "check_generation",
    "concepts_crc",
    "pack_concepts",
    "unpack_concepts",
    "check_out_dir",
    "committed_mark",
    "check_row",
    "read_anns",
    "read_settings",
    "row_crc",
    "connect",
    "damaged",
    "folder_of",
    "id_bytes",
    "id_text",
    "is_damage",
    "is_remnant",
    "plan_compaction",
    "writer_lock",
]

logger = logging.getLogger(__name__)

DB, LOCK, LEGACY_MANIFEST, SEGMENTS = "store.sqlite", ".lock", "index.json", "segments"
#: The list of owned files of the JSON-manifest format's last version (converted like its manifest).
LEGACY_LEDGER = ".vsekit-owned.json"
#: Version 2: the ``ann`` and ``chunks`` records carry a CRC like the photo records (version 1 stores are
#: upgraded by their next writer: :meth:`Store.open`).
STORE_FORMAT, STORE_VERSION = "vsekit.photo-store", 2
#: Automatic compaction: more live segments than this, or a segment whose tombstoned rows pass this
#: share of its rows (docs/index-store.md, "Compaction").
MAX_SEGMENTS, TOMBSTONE_SHARE = 10, 0.25
#: The newest committed generation, written after each commit, outside the database: a database
#: whose write-ahead log was lost or damaged opens at an older generation without any SQLite error
#: (a WAL frame that fails its checksum ends the log there), so readers compare the two.
GENERATION_MARK = f"{SEGMENTS}/generation"

SCHEMA = """
CREATE TABLE IF NOT EXISTS settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS photos (
    id BLOB PRIMARY KEY, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL, sha256 TEXT NOT NULL,
    folder BLOB NOT NULL, taken TEXT, caption TEXT, segment INTEGER NOT NULL, row INTEGER NOT NULL,
    crc INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS photos_folder ON photos(folder);
CREATE INDEX IF NOT EXISTS photos_taken ON photos(taken);
CREATE UNIQUE INDEX IF NOT EXISTS photos_place ON photos(segment, row);
CREATE TABLE IF NOT EXISTS failed (
    id BLOB PRIMARY KEY, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL, reason TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS segments (
    n INTEGER PRIMARY KEY, rows INTEGER NOT NULL, file TEXT NOT NULL, sha256 TEXT NOT NULL,
    generation INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS tombstones (
    segment INTEGER NOT NULL, row INTEGER NOT NULL, generation INTEGER NOT NULL, crc INTEGER NOT NULL,
    PRIMARY KEY (segment, row));
CREATE TABLE IF NOT EXISTS generations (n INTEGER PRIMARY KEY, committed TEXT NOT NULL,
    photos INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS files (
    name TEXT PRIMARY KEY, state TEXT NOT NULL, sha256 TEXT, size INTEGER);
CREATE TABLE IF NOT EXISTS ann (
    segment INTEGER PRIMARY KEY, engine TEXT NOT NULL, file TEXT NOT NULL, params TEXT NOT NULL,
    crc INTEGER);
CREATE TABLE IF NOT EXISTS chunks (
    key TEXT PRIMARY KEY, segment INTEGER NOT NULL, entries TEXT, failed TEXT, crc INTEGER);
CREATE TABLE IF NOT EXISTS concepts (sha256 TEXT PRIMARY KEY, classes BLOB NOT NULL, crc INTEGER NOT NULL);
"""


_NPY_HEADER_LOCK = threading.Lock()


def map_npy(path: Path) -> np.ndarray:
    """``np.load(path, mmap_mode="r")``, one header at a time in a process: numpy parses a .npy header
    with ``ast.literal_eval``, and CPython 3.11 can fail AST constructions that run at once in two
    threads ("SystemError: AST constructor recursion depth mismatch"; a server's reader and a writer
    thread did). The mapping itself is not serialised."""
    with _NPY_HEADER_LOCK:
        return np.load(path, mmap_mode="r")


# ----------------------------------------------------------------------------- ids and folders
def id_bytes(photo_id: str) -> bytes:
    """A photo id as stored (UTF-8; a file name that is not valid UTF-8 keeps its bytes)."""
    return photo_id.encode("utf-8", "surrogateescape")


def id_text(stored: bytes) -> str:
    return bytes(stored).decode("utf-8", "surrogateescape")


def folder_of(photo_id: str) -> str:
    """The folder part of an id (``""`` for a photo at the top of the photo folder)."""
    parent = str(PurePosixPath(photo_id).parent)
    return "" if parent == "." else parent


#: The columns of a photo record that its ``crc`` covers, in order.
PHOTO_COLUMNS = "id, size, mtime_ns, sha256, folder, taken, caption, segment, row"


def row_crc(*values: Any) -> int:
    """CRC-32 of a record's values: SQLite keeps no checksum of its pages, so a flipped bit in a
    record would otherwise go unnoticed; readers check the records they use (:func:`check_row`)."""
    return zlib.crc32(
        repr(tuple(bytes(v) if isinstance(v, bytes | memoryview) else v for v in values)).encode()
    )


def check_row(row: Sequence[Any], out: Path) -> tuple:
    """``row`` = values + crc as read; the values, or the damaged-index error."""
    *values, crc = row
    if row_crc(*values) != crc:
        raise damaged(out / DB, "a photo record does not match its checksum", out)
    return tuple(values)


#: The columns of an ``ann`` record that its ``crc`` covers: its search settings (efSearch, nprobe,
#: candidates) change the answers, and one flipped bit in them was served without an error.
ANN_COLUMNS = "segment, engine, file, params"


def ann_crc(segment: int, engine: str, file: str, params: str) -> int:
    """The CRC of an ``ann`` record (``params`` as stored: JSON text)."""
    return row_crc(segment, engine, file, params)


def ann_records(
    conn: sqlite3.Connection, settings: dict[str, Any]
) -> dict[int, tuple[str, str, dict] | None]:
    """``{segment: (engine, file, params)}`` of every ANN record; None for one that fails its CRC (a
    store of format version 1 has none: its records are read as they are)."""
    checked = int(settings.get("format_version", STORE_VERSION)) >= 2
    anns: dict[int, tuple[str, str, dict] | None] = {}
    for n, engine, file, params, crc in conn.execute(
        f"SELECT {ANN_COLUMNS}, {'crc' if checked else 'NULL'} FROM ann"
    ):
        good = not checked or crc == ann_crc(n, engine, file, params)
        anns[n] = (engine, file, json.loads(params)) if good else None
    return anns


def read_anns(conn: sqlite3.Connection, settings: dict[str, Any]) -> dict[int, tuple[str, str, dict]]:
    """:func:`ann_records`, all of them good (ValueError names a segment whose record is not)."""
    good = {}
    for n, record in ann_records(conn, settings).items():
        if record is None:
            raise ValueError(f"the ANN settings of segment {n} do not match their checksum")
        good[n] = record
    return good


def _put_ann(c: sqlite3.Connection, n: int, engine: str, file: str, params: dict[str, int]) -> None:
    """Record segment ``n``'s ANN file and search settings, with their CRC (the file becomes live)."""
    text = json.dumps(params, sort_keys=True)
    c.execute(
        "INSERT OR REPLACE INTO ann VALUES (?, ?, ?, ?, ?)",
        (n, engine, file, text, ann_crc(n, engine, file, text)),
    )
    c.execute("UPDATE files SET state = 'live' WHERE name = ?", (file,))


def settings_check(values: dict[str, str]) -> str:
    """The checksum of the settings (their JSON texts), kept as the ``check`` setting."""
    return json.dumps(zlib.crc32(json.dumps(sorted(values.items())).encode()))


def _write_settings(c: sqlite3.Connection, values: dict[str, Any]) -> None:
    """Store ``values`` (JSON) and the checksum over every setting, inside the caller's transaction."""
    c.executemany(
        "INSERT OR REPLACE INTO settings VALUES (?, ?)",
        [(k, json.dumps(v, sort_keys=True)) for k, v in values.items()],
    )
    stored = dict(c.execute("SELECT key, value FROM settings WHERE key NOT IN ('check', 'next_segment')"))
    c.execute("INSERT OR REPLACE INTO settings VALUES ('check', ?)", (settings_check(stored),))


def damaged(path: Path, why: str, out: Path) -> VsekitError:
    """The one line a damaged index file gets, with the build that repairs it (:func:`build_command`)."""
    why = " ".join(str(why).split())[:200]
    return VsekitError(f"{path}: damaged index file ({why}); {build_command(out)} will rebuild it")


def build_command(
    out: Path | str, photos: str | os.PathLike[str] | None = None, model: str | None = None, *extra: str
) -> str:
    """The ``vsekit index build`` command that builds the index ``out`` from ``photos`` with the model named
    ``model`` (a shipped name or a model file; the default ``vse`` needs no ``--model``), as a hint prints
    it. Without ``photos``, the photo folder and model are those the index records, when it can still say
    (:func:`recorded_source`); else the hint says PHOTOS."""
    if photos is None:
        photos, recorded = recorded_source(Path(out))
        model = recorded if model is None else model
    words = ["index", "build", photos or "PHOTOS", "--out", out]
    words += ["--model", model] if model not in (None, "vse") else []
    return command(*words, *extra)


def recorded_source(out: Path) -> tuple[str | None, str | None]:
    """``(photo folder, model name)`` as the settings of the index in ``out`` record them, best effort (a
    hint's words): ``(None, None)`` when it cannot say (no database, unreadable or damaged settings)."""
    try:
        if not (out / DB).is_file():
            manifest = json.loads((out / LEGACY_MANIFEST).read_text(encoding="utf-8"))
            return str(manifest["photos"]) or None, str(manifest["model"]["name"])
        conn = sqlite3.connect(out / DB, timeout=1)
        try:
            stored = dict(conn.execute("SELECT key, value FROM settings"))
        finally:
            conn.close()
        check = stored.pop("check", None)
        stored.pop("next_segment", None)
        if check != settings_check(stored):  # damaged settings: their words are no advice
            return None, None
        return str(json.loads(stored["photos"])) or None, str(json.loads(stored["model"])["name"])
    except (OSError, sqlite3.Error, ValueError, KeyError, TypeError):
        return None, None


# ----------------------------------------------------------------------------- concepts
def pack_concepts(ids: np.ndarray, probs: np.ndarray) -> bytes:
    """A photo's top ImageNet classes as stored: ``T`` little-endian uint16 ids, then ``T`` float32
    probabilities (the concept route, :mod:`vsekit.retrieval.concepts`)."""
    return np.asarray(ids, dtype="<u2").tobytes() + np.asarray(probs, dtype="<f4").tobytes()


def unpack_concepts(blob: bytes, top: int) -> tuple[np.ndarray, np.ndarray]:
    """``(ids [top], probs [top])`` of a stored row; ValueError when it has another length."""
    if len(blob) != 6 * top:
        raise ValueError(f"a concepts row of {len(blob)} bytes (expected {6 * top})")
    return np.frombuffer(blob, "<u2", top, 0), np.frombuffer(blob, "<f4", top, 2 * top)


def concepts_crc(sha256: str, blob: bytes) -> int:
    return zlib.crc32(sha256.encode() + bytes(blob))


# ----------------------------------------------------------------------------- the generation mark
def write_generation_mark(out: Path, generation: int) -> None:
    """Record ``generation`` as committed (after its commit was synced). Written in place (32 bytes, one
    sector) with a CRC, not synced: a lost or torn mark is older or unreadable, never ahead."""
    text = f"{int(generation):020d}"
    data = f"{text} {zlib.crc32(text.encode()):010d}\n".encode()
    fd = os.open(out / GENERATION_MARK, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, data, 0)
    finally:
        os.close(fd)


def committed_mark(out: Path) -> int | None:
    """The generation the mark says was committed (None: no mark, or one that fails its CRC)."""
    try:
        parts = (out / GENERATION_MARK).read_bytes()[:64].split()
    except OSError:
        return None
    if len(parts) != 2 or not parts[0].isdigit() or not parts[1].isdigit():
        return None
    return int(parts[0]) if zlib.crc32(parts[0]) == int(parts[1]) else None


def check_generation(out: Path, generation: int, witnessed: int | None) -> None:
    """A database older than the generation its mark witnessed lost committed work: damaged."""
    if witnessed is not None and generation < witnessed:
        raise damaged(
            out / DB,
            f"it holds generation {generation}, but generation {witnessed} was committed "
            f"({GENERATION_MARK}): its write-ahead log {DB}-wal was lost or damaged",
            out,
        )


# ----------------------------------------------------------------------------- the directory
def check_out_dir(out: Path) -> None:
    """Refuse an ``out`` that is a file, or holds other files and no index (before anything is
    created there: not even the lock)."""
    if not out.exists():
        return
    if not out.is_dir():
        raise VsekitError(f"{out}: --out must be a folder for the index, and this is a file")
    names = {p.name for p in out.iterdir()}
    if names & {DB, LEGACY_MANIFEST, LEGACY_LEDGER} or is_remnant(out, names):
        return
    others = sorted(names - {LOCK})
    if others:
        shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
        raise VsekitError(
            f"{out}: this folder holds other files ({shown}) and no vsekit index; refusing to write an "
            "index there: give --out a new or empty folder (vsekit never deletes files it did not write)"
        )


def is_remnant(out: Path, names: set[str]) -> bool:
    """An index whose database was deleted: nothing but ``segments/`` holding the generation mark,
    the database's WAL files and the lock. A build may write there (it starts a new database and never
    reuses, overwrites or deletes a file it finds: it cannot prove they are its own)."""
    return (
        SEGMENTS in names
        and names <= {SEGMENTS, LOCK, f"{DB}-wal", f"{DB}-shm"}
        and (out / GENERATION_MARK).is_file()
    )


def is_damage(exc: sqlite3.Error) -> bool:
    """An SQLite error that says the database file is damaged (not locked, not a full disk)."""
    name = getattr(exc, "sqlite_errorname", "") or ""
    return name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")) or type(exc) is sqlite3.DatabaseError


@contextlib.contextmanager
def writer_lock(out: Path) -> Iterator[None]:
    """One writer per index directory at a time; a second one says whom it waits for, then waits."""
    check_out_dir(out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / LOCK, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            pid = handle.read().strip() or "?"
            logger.warning("waiting for another build of this index (pid %s)", pid)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            handle.seek(0)
            handle.truncate()
            handle.write(str(os.getpid()))
            handle.flush()
            yield
        finally:
            with contextlib.suppress(OSError):
                handle.truncate(0)
            fcntl.flock(handle, fcntl.LOCK_UN)


def connect(path: Path, *, create: bool = False) -> sqlite3.Connection:
    """A connection in autocommit mode (transactions are explicit); WAL, full sync on commit."""
    if not create and not path.is_file():
        raise damaged(path, "missing", path.parent)
    try:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=60)
        conn.execute("PRAGMA journal_mode=WAL")
        # bookkeeping (files reserved, chunks) is not synced on commit: lost in a power cut, it only
        # leaves a file to collect; a generation's commit is synced (Store.commit)
        conn.execute("PRAGMA synchronous=NORMAL")
    except sqlite3.DatabaseError as exc:
        raise damaged(path, str(exc), path.parent) from None
    return conn


def read_settings(conn: sqlite3.Connection, out: Path) -> dict[str, Any]:
    """The settings, checked against their checksum (``{}`` for a store with none yet)."""
    stored = dict(conn.execute("SELECT key, value FROM settings"))
    check, counter = stored.pop("check", None), stored.pop("next_segment", None)
    if stored and check != settings_check(stored):
        raise damaged(out / DB, "the settings do not match their checksum", out)
    values = {k: json.loads(v) for k, v in stored.items()}
    if counter is not None:
        values["next_segment"] = json.loads(counter)
    return values


# ----------------------------------------------------------------------------- what a commit changes
@dataclass(frozen=True)
class PhotoRecord:
    """One photo as the store records it (``taken``: EXIF DateTimeOriginal as ISO text, or None)."""

    id: str
    size: int
    mtime_ns: int
    sha256: str
    taken: str | None = None
    caption: str | None = None


@dataclass
class NewSegment:
    """A written segment file: number, its photos in row order, its sha256 (and an ANN over it)."""

    n: int
    photos: list[PhotoRecord]
    sha256: str
    ann: tuple[str, str, dict[str, int]] | None = None  # (engine, file, params)


@dataclass
class StoreChange:
    """Everything one generation changes (committed in one transaction by :meth:`Store.commit`)."""

    segments: list[NewSegment] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)  # photo ids no longer in the index
    failed: dict[str, dict] | None = None  # the whole table of unreadable files (None: unchanged)
    drop_segments: list[int] = field(default_factory=list)  # merged away or damaged
    chunks_done: bool = False  # the build's chunks are used up: forget them
    anns: list[tuple[int, str, str, dict[str, int]]] = field(
        default_factory=list
    )  # (segment, engine, file, params)
    dead_files: list[str] = field(default_factory=list)  # owned files this generation no longer needs
    drop_anns: list[int] = field(default_factory=list)  # segments whose ANN record is forgotten (damaged)
    settings: dict[str, Any] | None = None  # settings this generation changes (a rebuild: the model)


def plan_compaction(segments: Sequence[tuple[int, int, int]], everything: bool = False) -> list[int]:
    """Which segments to merge, from ``(n, rows, tombstoned rows)`` each: every segment whose
    tombstones pass :data:`TOMBSTONE_SHARE` of its rows, and, while more than :data:`MAX_SEGMENTS`
    would remain, the smallest ones (by live rows); ``everything``: all of them (``index compact``)."""
    if everything:
        return [n for n, rows, dead in segments] if len(segments) > 1 or any(d for *_, d in segments) else []
    chosen = {n for n, rows, dead in segments if rows and dead / rows > TOMBSTONE_SHARE}
    rest = sorted((rows - dead, n) for n, rows, dead in segments if n not in chosen)
    remaining = len(rest) + (1 if chosen else 0)
    i = 0
    while remaining > MAX_SEGMENTS and i < len(rest):
        chosen.add(rest[i][1])
        i += 1
        remaining = len(rest) - i + 1
    if len(chosen) == 1:  # one clean small segment merges with nothing: leave it
        (n,) = chosen
        if not any(m == n and dead for m, _, dead in segments):
            return []
    return sorted(chosen)


# ----------------------------------------------------------------------------- the store (writer side)
class Store:
    """A writer's handle on an index directory's database (call under :func:`writer_lock`)."""

    def __init__(self, out: Path, conn: sqlite3.Connection) -> None:
        self.out, self.conn = Path(out), conn
        #: A writer that rebuilds from the photo folder (the Builder) may commit over a database that
        #: lost generations; any other writer is refused (its commit would make the loss look whole).
        self.repairs = False

    @classmethod
    def open(cls, out: Path, *, create: bool = False) -> Store:
        path = Path(out) / DB
        conn = connect(path, create=create)
        try:
            conn.executescript(SCHEMA)
        except sqlite3.DatabaseError as exc:
            raise damaged(path, str(exc), Path(out)) from None
        (Path(out) / SEGMENTS).mkdir(exist_ok=True)
        store = cls(Path(out), conn)
        try:
            store._upgrade()
        except BaseException:
            conn.close()
            raise
        return store

    def _upgrade(self) -> None:
        """A store of format version 1 (its ``ann`` and ``chunks`` records without a CRC) gets the
        column and CRCs for its ANN records, trusted as they are (nothing checked them before); a chunk
        without one is embedded again rather than trusted (:meth:`chunk`). One transaction."""
        try:
            missing = [
                t
                for t in ("ann", "chunks")
                if "crc" not in {r[1] for r in self.conn.execute(f"PRAGMA table_info({t})")}
            ]
            settings = self.settings()
            if int(settings.get("format_version", 1 if missing else STORE_VERSION)) >= 2:
                if missing:  # a version 2 store always had them
                    raise sqlite3.DatabaseError(f"no crc column in {', '.join(missing)}")
                return
            with self.transaction() as c:
                for table in missing:
                    c.execute(f"ALTER TABLE {table} ADD COLUMN crc INTEGER")
                for n, engine, file, params in c.execute(f"SELECT {ANN_COLUMNS} FROM ann").fetchall():
                    c.execute(
                        "UPDATE ann SET crc = ? WHERE segment = ?", (ann_crc(n, engine, file, params), n)
                    )
                if settings:  # (a store with none yet gets them from its first writer)
                    _write_settings(c, {"format_version": STORE_VERSION})
        except (sqlite3.DatabaseError, ValueError) as exc:
            raise damaged(self.out / DB, str(exc), self.out) from None
        logger.info(
            "%s: upgraded to index store format %d (checksummed ANN records)", self.out, STORE_VERSION
        )

    def close(self) -> None:
        self.conn.close()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self.conn
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    # -- settings --------------------------------------------------------------------------------
    def settings(self) -> dict[str, Any]:
        return read_settings(self.conn, self.out)

    def set_settings(self, values: dict[str, Any]) -> None:
        with self.transaction() as c:
            _write_settings(c, values)

    def generation(self) -> int:
        return int(self.conn.execute("SELECT coalesce(max(n), 0) FROM generations").fetchone()[0])

    # -- records ---------------------------------------------------------------------------------
    def check_records(self) -> None:
        """Check every photo record and tombstone against its CRC (a writer that keeps the records of
        unchanged photos must not keep a damaged one: readers would refuse it after every rebuild)."""
        for row in self.conn.execute(f"SELECT {PHOTO_COLUMNS}, crc FROM photos"):
            check_row(row, self.out)
        for n, row, generation, crc in self.conn.execute("SELECT * FROM tombstones"):
            if row_crc(n, row, generation) != crc:
                raise damaged(self.out / DB, "a tombstone does not match its checksum", self.out)

    def photos(self) -> dict[str, tuple[int, int, str, int, int]]:
        """``{id: (size, mtime_ns, sha256, segment, row)}`` of every live photo."""
        rows = self.conn.execute("SELECT id, size, mtime_ns, sha256, segment, row FROM photos")
        return {id_text(r[0]): tuple(r[1:]) for r in rows}

    def count(self) -> int:
        return int(self.conn.execute("SELECT count(*) FROM photos").fetchone()[0])

    def records_of(self, ids: Iterable[str]) -> dict[str, tuple[int, int, str]]:
        """``{id: (size, mtime_ns, sha256)}`` of those of ``ids`` the store holds."""
        found = {}
        for photo_id in ids:
            row = self.conn.execute(
                "SELECT size, mtime_ns, sha256 FROM photos WHERE id = ?", (id_bytes(photo_id),)
            ).fetchone()
            if row is not None:
                found[photo_id] = tuple(row)
        return found

    def captions(self) -> dict[str, tuple[str, str]]:
        """``{id: (sha256, caption)}`` of every live photo with a stored caption."""
        rows = self.conn.execute("SELECT id, sha256, caption FROM photos WHERE caption IS NOT NULL")
        return {id_text(i): (sha, caption) for i, sha, caption in rows}

    def failed(self) -> dict[str, dict]:
        rows = self.conn.execute("SELECT id, size, mtime_ns, reason FROM failed ORDER BY id")
        return {id_text(i): {"size": s, "mtime_ns": m, "error": e} for i, s, m, e in rows}

    def segments(self) -> list[tuple[int, int, int]]:
        """``(n, rows, tombstoned rows)`` of every live segment, in order."""
        return [
            tuple(r)
            for r in self.conn.execute(
                "SELECT s.n, s.rows, (SELECT count(*) FROM tombstones t WHERE t.segment = s.n) "
                "FROM segments s ORDER BY s.n"
            )
        ]

    def segment_path(self, n: int) -> Path:
        return self.out / SEGMENTS / f"{n}.npy"

    # -- files -----------------------------------------------------------------------------------
    def _taken(self, c: sqlite3.Connection, name: str) -> bool:
        """Whether a new file may not be made at ``name``: the database lists it, or a file (or the temp
        file of one) is there. A killed writer's own leftovers are listed and collected before a writer
        makes anything, so a file found here is someone else's: never written over (docs/index-store.md,
        "Files it owns")."""
        path = self.out / name
        listed = c.execute("SELECT 1 FROM files WHERE name = ?", (name,)).fetchone() is not None
        return listed or os.path.lexists(path) or os.path.lexists(_tmp_for(path))

    def reserve_free(self, *names: str) -> bool:
        """Record ``names`` (relative to the index) as this store's before they are created, if every
        one is free (:meth:`_taken`); False, recording nothing, when one is not."""
        with self.transaction() as c:
            if any(self._taken(c, name) for name in names):
                return False
            c.executemany("INSERT INTO files VALUES (?, 'pending', NULL, NULL)", [(n,) for n in names])
        return True

    def new_segment_number(self) -> int:
        """The next segment number whose file name is free (a file someone put at ``segments/<n>.npy``
        is passed over, not replaced), recorded as this store's."""
        with self.transaction() as c:
            row = c.execute("SELECT value FROM settings WHERE key = 'next_segment'").fetchone()
            n = json.loads(row[0]) if row else 1
            while self._taken(c, f"{SEGMENTS}/{n}.npy"):
                n += 1
            c.execute("INSERT OR REPLACE INTO settings VALUES ('next_segment', ?)", (json.dumps(n + 1),))
            c.execute("INSERT INTO files VALUES (?, 'pending', NULL, NULL)", (f"{SEGMENTS}/{n}.npy",))
        return n

    @contextlib.contextmanager
    def _creating(self, name: str) -> Iterator[None]:
        """Create the reserved file ``name`` exclusively: a file that appeared there since it was found
        free (another program writing into the index folder) is left as it is, and so is the name."""
        try:
            yield
        except FileExistsError:
            with self.transaction() as c:
                c.execute("DELETE FROM files WHERE name = ? AND state = 'pending'", (name,))
            raise VsekitError(
                f"{self.out / name}: a file the index did not make appeared there while it was being "
                "written; it is left as it is: run the command again"
            ) from None

    def write_segment(
        self, vectors: np.ndarray | Iterable[np.ndarray], rows: int, dim: int, dtype: str
    ) -> tuple[int, str]:
        """Write a new segment (``rows`` vectors, an array or blocks of rows) atomically; returns its
        number and sha256 (recorded in ``files``; the segment is live once a commit names it)."""
        rows, dim = int(rows), int(dim)  # a NumPy integer would write an unreadable .npy header
        n = self.new_segment_number()
        path = self.segment_path(n)
        with (
            self._creating(f"{SEGMENTS}/{n}.npy"),
            atomic_npy_memmap(path, dtype, (rows, dim), exclusive=True) as out,
        ):
            start = 0
            for block in [vectors] if isinstance(vectors, np.ndarray) else vectors:
                out[start : start + len(block)] = block
                start += len(block)
            if start != rows:
                raise VsekitError(f"{path}: {start} vectors written for {rows} rows")
        return n, file_sha256(path)  # recorded with the commit (or the chunk) that names the segment

    def write_file(self, name: str, data: bytes) -> str:
        """Write an owned file (an ANN structure) that :meth:`reserve_free` recorded, atomically and
        exclusively; returns its sha256."""
        with self._creating(name):
            atomic_write_bytes(self.out / name, data, exclusive=True)
        sha = file_sha256(self.out / name)
        with self.transaction() as c:
            c.execute("UPDATE files SET sha256 = ?, size = ? WHERE name = ?", (sha, len(data), name))
        return sha

    def file_sha(self, name: str) -> str | None:
        row = self.conn.execute("SELECT sha256 FROM files WHERE name = ?", (name,)).fetchone()
        return row[0] if row else None

    def collect(self) -> None:
        """Delete the files the database lists as dead (and temp files of pending ones no work needs)."""
        dead = [r[0] for r in self.conn.execute("SELECT name FROM files WHERE state = 'dead'")]
        for name in dead:
            (self.out / name).unlink(missing_ok=True)
            _tmp_for(self.out / name).unlink(missing_ok=True)
        if dead:
            with self.transaction() as c:
                c.executemany("DELETE FROM files WHERE name = ? AND state = 'dead'", [(n,) for n in dead])

    def recover(self, keep_chunks: set[str] | None = None) -> None:
        """After a killed writer: pending files no finished chunk names are dead; so are the chunks of
        another plan (``keep_chunks``: the keys the current build wants; None keeps every chunk)."""
        pending = self.conn.execute("SELECT count(*) FROM files WHERE state != 'live'").fetchone()[0]
        if not pending and not self.conn.execute("SELECT count(*) FROM chunks").fetchone()[0]:
            return  # nothing left behind (the usual case: no write needed)
        with self.transaction() as c:
            chunks = c.execute("SELECT key, segment, entries FROM chunks").fetchall()
            stale = [
                key
                for key, _, entries in chunks
                if entries is None or (keep_chunks is not None and key not in keep_chunks)
            ]
            c.executemany("DELETE FROM chunks WHERE key = ?", [(k,) for k in stale])
            kept = {f"{SEGMENTS}/{seg}.npy" for key, seg, _ in chunks if key not in stale}
            pending = [r[0] for r in c.execute("SELECT name FROM files WHERE state = 'pending'")]
            c.executemany(
                "UPDATE files SET state = 'dead' WHERE name = ?", [(n,) for n in pending if n not in kept]
            )
        self.collect()

    # -- chunks of a build (resumable work) ----------------------------------------------------
    def chunk(self, key: str) -> tuple[int, list, dict] | None:
        """A finished chunk's segment, photos and unreadable files (None: not finished, or its record
        fails its CRC: a resumed build would commit its photos at the wrong rows or with the wrong ids,
        so it is embedded again)."""
        row = self.conn.execute(
            "SELECT segment, entries, failed, crc FROM chunks WHERE key = ? AND entries IS NOT NULL", (key,)
        ).fetchone()
        if row is None:
            return None
        if row[3] != row_crc(key, *row[:3]):
            logger.warning(
                "%s: a finished chunk's record does not match its checksum; embedding it again", self.out / DB
            )
            return None
        return row[0], json.loads(row[1]), json.loads(row[2])

    def save_chunk(self, key: str, n: int, sha256: str, entries: list, failed: dict) -> None:
        """Record a finished chunk of a build (its segment file and sha256, its photos), with a CRC."""
        values = (key, n, json.dumps(entries), json.dumps(failed, sort_keys=True))
        with self.transaction() as c:
            c.execute("UPDATE files SET sha256 = ? WHERE name = ?", (sha256, f"{SEGMENTS}/{n}.npy"))
            c.execute("INSERT OR REPLACE INTO chunks VALUES (?, ?, ?, ?, ?)", (*values, row_crc(*values)))

    def chunk_segments(self) -> list[int]:
        return [r[0] for r in self.conn.execute("SELECT segment FROM chunks")]

    # -- the commit ------------------------------------------------------------------------------
    def commit(self, change: StoreChange) -> int:
        """One transaction: the new generation (see the module docstring); returns its number."""
        if not self.repairs:
            check_generation(self.out, self.generation(), committed_mark(self.out))
        self.conn.execute("PRAGMA synchronous=FULL")
        try:
            g = self._commit(change)
        finally:
            self.conn.execute("PRAGMA synchronous=NORMAL")
        write_generation_mark(self.out, g)
        self.collect()
        return g

    def _commit(self, change: StoreChange) -> int:
        with self.transaction() as c:
            last = c.execute("SELECT n, photos FROM generations ORDER BY n DESC LIMIT 1").fetchone() or (0, 0)
            g, count = last[0] + 1, last[1]
            count -= self._drop(c, change.drop_segments)
            for segment in change.segments:
                count += self._add_segment(c, g, segment)
            for photo_id in change.removed:
                if self._tombstone(c, g, id_bytes(photo_id)) is not None:
                    count -= 1
                c.execute("DELETE FROM photos WHERE id = ?", (id_bytes(photo_id),))
            if change.failed is not None:
                c.execute("DELETE FROM failed")
                c.executemany(
                    "INSERT INTO failed VALUES (?, ?, ?, ?)",
                    [(id_bytes(i), f["size"], f["mtime_ns"], f["error"]) for i, f in change.failed.items()],
                )
            if change.chunks_done:
                live = {f"{SEGMENTS}/{s.n}.npy" for s in change.segments}
                for (n,) in c.execute("SELECT segment FROM chunks").fetchall():
                    if f"{SEGMENTS}/{n}.npy" not in live:
                        c.execute("UPDATE files SET state = 'dead' WHERE name = ?", (f"{SEGMENTS}/{n}.npy",))
                c.execute("DELETE FROM chunks")
            self._replace_anns(c, change)
            c.executemany(
                "INSERT OR REPLACE INTO files VALUES (?, 'dead', NULL, NULL)",
                [(f,) for f in change.dead_files],
            )
            if change.settings:
                _write_settings(c, change.settings)
            c.execute(
                "INSERT INTO generations VALUES (?, ?, ?)",
                (g, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), count),
            )
        return g

    def _drop(self, c: sqlite3.Connection, segments: Sequence[int]) -> int:
        """Forget ``segments`` (their files become dead); returns how many photo records went."""
        gone = 0
        for n in segments:
            gone += c.execute("SELECT count(*) FROM photos WHERE segment = ?", (n,)).fetchone()[0]
            c.execute("DELETE FROM tombstones WHERE segment = ?", (n,))
            c.execute("DELETE FROM photos WHERE segment = ?", (n,))
            c.execute("DELETE FROM segments WHERE n = ?", (n,))
            c.execute("UPDATE files SET state = 'dead' WHERE name = ?", (f"{SEGMENTS}/{n}.npy",))
            ann = c.execute("SELECT file FROM ann WHERE segment = ?", (n,)).fetchone()
            if ann:
                c.execute("UPDATE files SET state = 'dead' WHERE name = ?", (ann[0],))
                c.execute("DELETE FROM ann WHERE segment = ?", (n,))
        return gone

    def _tombstone(self, c: sqlite3.Connection, g: int, key: bytes) -> tuple | None:
        place = c.execute("SELECT segment, row, sha256, caption FROM photos WHERE id = ?", (key,)).fetchone()
        if place is not None:
            s, r = place[0], place[1]
            c.execute("INSERT OR REPLACE INTO tombstones VALUES (?, ?, ?, ?)", (s, r, g, row_crc(s, r, g)))
        return place

    def _add_segment(self, c: sqlite3.Connection, g: int, segment: NewSegment) -> int:
        """Record a new segment and its photos; returns how many of them are new to the store."""
        name, new = f"{SEGMENTS}/{segment.n}.npy", 0
        c.execute(
            "INSERT INTO segments VALUES (?, ?, ?, ?, ?)",
            (segment.n, len(segment.photos), name, segment.sha256, g),
        )
        size = (self.out / name).stat().st_size
        c.execute(
            "UPDATE files SET state = 'live', sha256 = ?, size = ? WHERE name = ?",
            (segment.sha256, size, name),
        )
        for row, p in enumerate(segment.photos):
            key = id_bytes(p.id)
            old = self._tombstone(c, g, key)
            new += old is None
            caption = p.caption
            if caption is None and old is not None and old[2] == p.sha256:  # same photo: keep its caption
                caption = old[3]
            values = (
                key,
                p.size,
                p.mtime_ns,
                p.sha256,
                id_bytes(folder_of(p.id)),
                p.taken,
                caption,
                segment.n,
                row,
            )
            c.execute(
                "INSERT OR REPLACE INTO photos VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (*values, row_crc(*values)),
            )
        if segment.ann is not None:
            _put_ann(c, segment.n, *segment.ann)
        return new

    def _replace_anns(self, c: sqlite3.Connection, change: StoreChange) -> None:
        """Drop the ANN records ``change.drop_anns`` names, record ``change.anns``; then, when records
        went (these, or dropped segments), :meth:`_sweep`."""
        c.executemany("DELETE FROM ann WHERE segment = ?", [(n,) for n in change.drop_anns])
        for n, engine, file, params in change.anns:
            _put_ann(c, n, engine, file, params)
        if change.drop_anns or change.anns or change.drop_segments:
            self._sweep(c)

    @staticmethod
    def _sweep(c: sqlite3.Connection) -> None:
        """Forget the ANN records of segments the store no longer has, and make dead every live file no
        segment or ANN record names: a replaced ANN file, or the file of a record that was damaged (its
        own file name or segment number may have been the flipped part, so neither can be trusted)."""
        c.execute("DELETE FROM ann WHERE segment NOT IN (SELECT n FROM segments)")
        c.execute(
            "UPDATE files SET state = 'dead' WHERE state = 'live' AND name NOT IN (SELECT file FROM segments)"
            " AND name NOT IN (SELECT file FROM ann)"
        )

    # -- concepts (keyed by photo content: a photo's classes depend on its bytes only) -------------
    def put_concepts(self, rows: dict[str, bytes]) -> None:
        """Store ``{photo sha256: packed classes}`` (no new generation: the ``concepts`` setting that a
        commit writes says when every live photo has its row)."""
        if rows:
            with self.transaction() as c:
                c.executemany(
                    "INSERT OR REPLACE INTO concepts VALUES (?, ?, ?)",
                    [(sha, blob, concepts_crc(sha, blob)) for sha, blob in rows.items()],
                )

    def without_concepts(self) -> dict[str, str]:
        """``{photo id: sha256}`` of the live photos whose classes are not stored."""
        rows = self.conn.execute(
            "SELECT p.id, p.sha256 FROM photos p LEFT JOIN concepts c ON c.sha256 = p.sha256 "
            "WHERE c.sha256 IS NULL"
        )
        return {id_text(i): sha for i, sha in rows}

    def drop_orphan_concepts(self) -> None:
        """Forget the classes of photos no longer in the index (at compaction)."""
        with self.transaction() as c:
            c.execute("DELETE FROM concepts WHERE sha256 NOT IN (SELECT sha256 FROM photos)")

    # -- captions --------------------------------------------------------------------------------
    def set_captions(self, captions: dict[str, str | None]) -> int:
        """Store captions by photo id (no new generation: captions are not part of the search)."""
        done = 0
        with self.transaction() as c:
            for photo_id, caption in captions.items():
                row = c.execute(
                    f"SELECT {PHOTO_COLUMNS}, crc FROM photos WHERE id = ?", (id_bytes(photo_id),)
                ).fetchone()
                if row is None:
                    continue
                values = list(check_row(row, self.out))
                values[6] = caption
                c.execute(
                    "UPDATE photos SET caption = ?, crc = ? WHERE id = ?",
                    (caption, row_crc(*values), values[0]),
                )
                done += 1
        return done
