"""The store database's schema: its tables, the connection every reader and writer opens, the check of
its pages, and the version ladder that upgrades a store an older vsekit wrote (run by its next writer,
:meth:`vsekit.retrieval.store.writer.Store.open`)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from vsekit.retrieval.store.damage import damaged
from vsekit.retrieval.store.layout import DB
from vsekit.retrieval.store.rows import ANN_COLUMNS, ann_crc
from vsekit.retrieval.store.settings import STORE_VERSION, write_settings

__all__ = [
    "SCHEMA",
    "connect",
    "create_tables",
    "memory_database",
    "crc_columns_missing",
    "needs_upgrade",
    "open_probe",
    "quick_check",
    "upgrade_to_2",
]

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


def open_probe(path: Path) -> sqlite3.Connection:
    """A light connection that only asks what is newest (a server's or a watcher's check for a new
    generation): no journal mode set, no damage check; the caller handles :class:`sqlite3.Error`."""
    return sqlite3.connect(path, isolation_level=None, check_same_thread=False)


def create_tables(conn: sqlite3.Connection, out: Path) -> None:
    """Create the tables a store lacks (all of them in a new database)."""
    try:
        conn.executescript(SCHEMA)
    except sqlite3.DatabaseError as exc:
        raise damaged(out / DB, str(exc), out) from None


def memory_database() -> sqlite3.Connection:
    """An empty store database in memory (the read-only view of an index in the format before it)."""
    conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    conn.executescript(SCHEMA)
    return conn


def quick_check(conn: sqlite3.Connection) -> None:
    """SQLite's check of every page (``PRAGMA quick_check``); :class:`sqlite3.DatabaseError` when one
    fails it."""
    result = conn.execute("PRAGMA quick_check").fetchone()[0]
    if result != "ok":
        raise sqlite3.DatabaseError(result)


# ----------------------------------------------------------------------------- the version ladder
def crc_columns_missing(conn: sqlite3.Connection) -> list[str]:
    """The tables (of ``ann``, ``chunks``) without their version 2 ``crc`` column."""
    return [
        t for t in ("ann", "chunks") if "crc" not in {r[1] for r in conn.execute(f"PRAGMA table_info({t})")}
    ]


def needs_upgrade(settings: dict[str, Any], missing: list[str]) -> bool:
    """Whether a store with ``settings`` and without the ``crc`` columns ``missing`` is of format version 1
    (a store with no settings yet is judged by its columns); DatabaseError for a version 2 store without
    them (it always had them)."""
    if int(settings.get("format_version", 1 if missing else STORE_VERSION)) >= 2:
        if missing:
            raise sqlite3.DatabaseError(f"no crc column in {', '.join(missing)}")
        return False
    return True


def upgrade_to_2(c: sqlite3.Connection, missing: list[str], settings: dict[str, Any]) -> None:
    """Version 1 to 2, inside the caller's transaction: the ``crc`` columns, and CRCs for the ANN records,
    trusted as they are (nothing checked them before); a chunk without one is embedded again rather than
    trusted (:meth:`~vsekit.retrieval.store.writer.Store.chunk`)."""
    for table in missing:
        c.execute(f"ALTER TABLE {table} ADD COLUMN crc INTEGER")
    for n, engine, file, params in c.execute(f"SELECT {ANN_COLUMNS} FROM ann").fetchall():
        c.execute("UPDATE ann SET crc = ? WHERE segment = ?", (ann_crc(n, engine, file, params), n))
    if settings:  # (a store with none yet gets them from its first writer)
        write_settings(c, {"format_version": 2})
