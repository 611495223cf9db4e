"""The file ledger (the ``files`` table) and the build's finished chunks (``chunks``). Every file the
store creates is listed before it exists (``pending``), becomes ``live`` when a commit names it and
``dead`` when no generation needs it; only a file listed as dead is ever deleted. A chunk is a build's
finished piece of work: the segment file it wrote and the photos in it, kept so a killed build resumes.
Each function runs inside the caller's transaction where it writes."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from pathlib import Path

from vsekit.retrieval.store.layout import SEGMENTS, segment_name
from vsekit.retrieval.store.rows import row_crc

__all__ = [
    "DamagedChunk",
    "chunk_record",
    "chunk_rows",
    "chunk_segments",
    "dead_names",
    "forget_chunks",
    "forget_dead",
    "forget_pending",
    "is_listed",
    "list_dead",
    "make_dead",
    "make_live",
    "pending_names",
    "put_chunk",
    "record_sha",
    "replace_checksums",
    "reserve",
    "salvage_names",
    "sweep",
    "unfinished",
]


# ----------------------------------------------------------------------------- files
def is_listed(c: sqlite3.Connection, name: str) -> bool:
    return c.execute("SELECT 1 FROM files WHERE name = ?", (name,)).fetchone() is not None


def reserve(c: sqlite3.Connection, names: Iterable[str]) -> None:
    """List ``names`` as pending: the store's, before they are created."""
    c.executemany("INSERT INTO files VALUES (?, 'pending', NULL, NULL)", [(n,) for n in names])


def forget_pending(c: sqlite3.Connection, name: str) -> None:
    """Unlist a pending file that was never made (someone else's file took its name)."""
    c.execute("DELETE FROM files WHERE name = ? AND state = 'pending'", (name,))


def record_sha(c: sqlite3.Connection, name: str, sha256: str, size: int | None = None) -> None:
    """The sha256 (and size) of a written file, checked when a reader first maps it."""
    if size is None:
        c.execute("UPDATE files SET sha256 = ? WHERE name = ?", (sha256, name))
    else:
        c.execute("UPDATE files SET sha256 = ?, size = ? WHERE name = ?", (sha256, size, name))


def replace_checksums(c: sqlite3.Connection, checksums: dict[str, str]) -> None:
    """Record new checksums of files (``{name: checksum}``), in ``files`` and, for a segment, ``segments``
    (a format upgrade: the same bytes, checked the new way)."""
    c.executemany("UPDATE files SET sha256 = ? WHERE name = ?", [(v, k) for k, v in checksums.items()])
    c.executemany("UPDATE segments SET sha256 = ? WHERE file = ?", [(v, k) for k, v in checksums.items()])


def make_live(c: sqlite3.Connection, name: str, sha256: str | None = None, size: int | None = None) -> None:
    """A file a commit names (with its sha256 and size, when the commit is what records them)."""
    if sha256 is None:
        c.execute("UPDATE files SET state = 'live' WHERE name = ?", (name,))
    else:
        c.execute(
            "UPDATE files SET state = 'live', sha256 = ?, size = ? WHERE name = ?", (sha256, size, name)
        )


def make_dead(c: sqlite3.Connection, names: Iterable[str]) -> None:
    """Listed files no generation needs any more (deleted by the next :meth:`Store.collect`)."""
    c.executemany("UPDATE files SET state = 'dead' WHERE name = ?", [(n,) for n in names])


def list_dead(c: sqlite3.Connection, names: Iterable[str]) -> None:
    """List ``names`` as dead whether or not they were listed (the files a format conversion or a
    damaged database's replacement takes over, to delete)."""
    c.executemany("INSERT OR REPLACE INTO files VALUES (?, 'dead', NULL, NULL)", [(n,) for n in names])


def dead_names(conn: sqlite3.Connection) -> list[str]:
    return [r[0] for r in conn.execute("SELECT name FROM files WHERE state = 'dead'")]


def forget_dead(c: sqlite3.Connection, names: Iterable[str]) -> None:
    """Unlist dead files once deleted."""
    c.executemany("DELETE FROM files WHERE name = ? AND state = 'dead'", [(n,) for n in names])


def pending_names(c: sqlite3.Connection) -> list[str]:
    return [r[0] for r in c.execute("SELECT name FROM files WHERE state = 'pending'")]


def unfinished(conn: sqlite3.Connection) -> bool:
    """Whether a writer left anything behind: a file not live, or a chunk (the usual answer: no)."""
    if conn.execute("SELECT count(*) FROM files WHERE state != 'live'").fetchone()[0]:
        return True
    return bool(conn.execute("SELECT count(*) FROM chunks").fetchone()[0])


def sweep(c: sqlite3.Connection) -> None:
    """Forget the ANN records of segments the store no longer has, and make dead every live file no
    segment or ANN record names: a replaced ANN file, or the file of a record that was damaged (its
    own file name or segment number may have been the flipped part, so neither can be trusted)."""
    c.execute("DELETE FROM ann WHERE segment NOT IN (SELECT n FROM segments)")
    c.execute(
        "UPDATE files SET state = 'dead' WHERE state = 'live' AND name NOT IN (SELECT file FROM segments)"
        " AND name NOT IN (SELECT file FROM ann)"
    )


def salvage_names(path: Path) -> list[str]:
    """The segment files a damaged store database still lists (best effort, read-only; none when it
    cannot say)."""
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            names = [str(n) for (n,) in conn.execute("SELECT name FROM files")]
        finally:
            conn.close()
    except sqlite3.Error:
        return []
    return [n for n in names if n.startswith(f"{SEGMENTS}/") and ".." not in Path(n).parts]


# ----------------------------------------------------------------------------- chunks of a build
class DamagedChunk(ValueError):
    """A finished chunk's record fails its CRC."""


def chunk_record(conn: sqlite3.Connection, key: str) -> tuple[int, list, dict] | None:
    """A finished chunk's ``(segment, photos, unreadable files)`` (None: not finished); DamagedChunk
    when its record fails its CRC."""
    row = conn.execute(
        "SELECT segment, entries, failed, crc FROM chunks WHERE key = ? AND entries IS NOT NULL", (key,)
    ).fetchone()
    if row is None:
        return None
    if row[3] != row_crc(key, *row[:3]):
        raise DamagedChunk(key)
    return row[0], json.loads(row[1]), json.loads(row[2])


def put_chunk(c: sqlite3.Connection, key: str, n: int, sha256: str, entries: list, failed: dict) -> None:
    """Record a finished chunk (its segment file's sha256, its photos), with a CRC."""
    values = (key, n, json.dumps(entries), json.dumps(failed, sort_keys=True))
    record_sha(c, segment_name(n), sha256)
    c.execute("INSERT OR REPLACE INTO chunks VALUES (?, ?, ?, ?, ?)", (*values, row_crc(*values)))


def chunk_segments(conn: sqlite3.Connection) -> list[int]:
    return [r[0] for r in conn.execute("SELECT segment FROM chunks").fetchall()]


def forget_chunks(c: sqlite3.Connection, keys: Iterable[str] | None = None) -> None:
    """Forget the chunks ``keys`` (None: every chunk)."""
    if keys is None:
        c.execute("DELETE FROM chunks")
    else:
        c.executemany("DELETE FROM chunks WHERE key = ?", [(k,) for k in keys])


def chunk_rows(c: sqlite3.Connection) -> list[tuple[str, int, str | None]]:
    """``(key, segment, entries)`` of every chunk (entries None: the chunk never finished)."""
    return c.execute("SELECT key, segment, entries FROM chunks").fetchall()
