"""Every read of the store's records, each a function of a connection: a reader's snapshot (inside the
read transaction :func:`begin_read` starts) and a writer (inside or outside its transactions) ask the same
questions the same way. What a record's CRC protects is checked here or by the caller
(:func:`~vsekit.retrieval.store.damage.check_row`); a reader maps and searches the segments themselves
(:mod:`vsekit.retrieval.segments`)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from vsekit.retrieval.store.damage import damaged
from vsekit.retrieval.store.layout import DB
from vsekit.retrieval.store.rows import (
    ANN_COLUMNS,
    PHOTO_COLUMNS,
    ann_crc,
    id_bytes,
    id_text,
    row_crc,
    settings_check,
)
from vsekit.retrieval.store.settings import STORE_VERSION, stored_settings

__all__ = [
    "ann_records",
    "begin_read",
    "captions",
    "captions_of",
    "concept_rows",
    "copies",
    "end_read",
    "failed_files",
    "failed_reasons",
    "file_sha",
    "folders",
    "live_checksums",
    "live_files",
    "newest_generation",
    "photo_at",
    "photo_count",
    "photo_places",
    "photo_record",
    "photo_stats",
    "photos_by_date",
    "photos_in_order",
    "photos_matching",
    "places_of",
    "read_anns",
    "read_settings",
    "records_in",
    "records_of",
    "records_since",
    "segment_files",
    "segment_sha",
    "segments_and_tombstones",
    "tombstones",
    "uncaptioned",
    "without_concepts",
]

#: A query names at most this many photo ids (SQLite's limit on parameters is 999 in old builds).
_IDS_PER_QUERY = 500


# ----------------------------------------------------------------------------- the generation
def begin_read(conn: sqlite3.Connection) -> None:
    """Start a read transaction: every read until its end sees one generation (WAL)."""
    conn.execute("BEGIN")


def end_read(conn: sqlite3.Connection) -> None:
    conn.execute("COMMIT")


def newest_generation(conn: sqlite3.Connection) -> int:
    """The newest committed generation (0: none yet)."""
    return int(conn.execute("SELECT coalesce(max(n), 0) FROM generations").fetchone()[0])


def read_settings(conn: sqlite3.Connection, out: Path) -> dict[str, Any]:
    """The settings, checked against their checksum (``{}`` for a store with none yet)."""
    stored = stored_settings(conn)
    check, counter = stored.pop("check", None), stored.pop("next_segment", None)
    if stored and check != settings_check(stored):
        raise damaged(out / DB, "the settings do not match their checksum", out)
    values = {k: json.loads(v) for k, v in stored.items()}
    if counter is not None:
        values["next_segment"] = json.loads(counter)
    return values


def segment_files(conn: sqlite3.Connection) -> list[tuple[int, int, str, str]]:
    """``(n, rows, file, sha256)`` of every live segment, in order."""
    return conn.execute("SELECT n, rows, file, sha256 FROM segments ORDER BY n").fetchall()


def segments_and_tombstones(conn: sqlite3.Connection) -> list[tuple[int, int, int]]:
    """``(n, rows, tombstoned rows)`` of every live segment, in order (what compaction plans from)."""
    return [
        tuple(r)
        for r in conn.execute(
            "SELECT s.n, s.rows, (SELECT count(*) FROM tombstones t WHERE t.segment = s.n) "
            "FROM segments s ORDER BY s.n"
        )
    ]


def segment_sha(conn: sqlite3.Connection, n: int) -> str:
    """The sha256 recorded for segment ``n``'s file."""
    return conn.execute("SELECT sha256 FROM segments WHERE n = ?", (n,)).fetchone()[0]


def tombstones(conn: sqlite3.Connection) -> dict[int, list[int]]:
    """``{segment: [tombstoned rows, sorted]}``; ValueError when a tombstone fails its CRC."""
    dead: dict[int, list[int]] = {}
    for n, row, generation, crc in conn.execute("SELECT * FROM tombstones ORDER BY segment, row"):
        if row_crc(n, row, generation) != crc:
            raise ValueError("a tombstone does not match its checksum")
        dead.setdefault(n, []).append(row)
    return dead


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


# ----------------------------------------------------------------------------- photo records
def photo_count(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT count(*) FROM photos").fetchone()[0])


def photo_at(conn: sqlite3.Connection, segment: int, row: int) -> list[tuple]:
    """The record (values + crc) at (``segment``, ``row``): one, or none."""
    sql = f"SELECT {PHOTO_COLUMNS}, crc FROM photos WHERE segment = ? AND row = ?"
    return conn.execute(sql, (segment, row)).fetchall()


def photos_in_order(conn: sqlite3.Connection) -> list[tuple]:
    """Every record (values + crc), in segment and row order."""
    return conn.execute(f"SELECT {PHOTO_COLUMNS}, crc FROM photos ORDER BY segment, row").fetchall()


def photos_by_date(conn: sqlite3.Connection, offset: int, limit: int) -> list[tuple]:
    """Records (values + crc) ``offset`` to ``offset + limit`` of every photo, newest date taken first
    (ties by id), then the photos with no date by id: at most two indexed queries (``photos_taken``)."""
    dated = int(conn.execute("SELECT count(taken) FROM photos").fetchone()[0])
    found: list[tuple] = []
    if offset < dated:
        sql = f"SELECT {PHOTO_COLUMNS}, crc FROM photos WHERE taken IS NOT NULL "
        sql += "ORDER BY taken DESC, id LIMIT ? OFFSET ?"
        found = conn.execute(sql, (limit, offset)).fetchall()
    if len(found) < limit:
        sql = f"SELECT {PHOTO_COLUMNS}, crc FROM photos WHERE taken IS NULL ORDER BY id LIMIT ? OFFSET ?"
        found += conn.execute(sql, (limit - len(found), max(0, offset - dated))).fetchall()
    return found


def photo_record(conn: sqlite3.Connection, photo_id: str) -> list[tuple]:
    """The record (values + crc) of ``photo_id``: one, or none."""
    return conn.execute(
        f"SELECT {PHOTO_COLUMNS}, crc FROM photos WHERE id = ?", (id_bytes(photo_id),)
    ).fetchall()


def photos_matching(
    conn: sqlite3.Connection, folder: str | None, after: str | None, before: str | None
) -> list[tuple]:
    """The records (values + crc) of the photos in ``folder`` or below it, taken at or after ``after``
    and before ``before`` (ISO text; None: no such condition). One indexed query."""
    clauses: list[str] = []
    params: list[bytes | str] = []
    if folder is not None:
        clauses.append("(folder = ? OR (folder >= ? AND folder < ?))")
        params += [id_bytes(folder), id_bytes(folder + "/"), id_bytes(folder + "0")]  # '0' follows '/'
    if after is not None:
        clauses.append("taken >= ?")
        params.append(after)
    if before is not None:
        clauses.append("taken < ?")
        params.append(before)
    where = " AND ".join(clauses) or "1"
    return conn.execute(f"SELECT {PHOTO_COLUMNS}, crc FROM photos WHERE {where}", params).fetchall()


def photo_places(conn: sqlite3.Connection) -> dict[str, tuple[int, int, str, int, int]]:
    """``{id: (size, mtime_ns, sha256, segment, row)}`` of every live photo."""
    rows = conn.execute("SELECT id, size, mtime_ns, sha256, segment, row FROM photos")
    return {id_text(r[0]): tuple(r[1:]) for r in rows}


def records_of(conn: sqlite3.Connection, ids: Iterable[str]) -> dict[str, tuple[int, int, str]]:
    """``{id: (size, mtime_ns, sha256)}`` of those of ``ids`` the store holds."""
    found = {}
    for photo_id in ids:
        row = conn.execute(
            "SELECT size, mtime_ns, sha256 FROM photos WHERE id = ?", (id_bytes(photo_id),)
        ).fetchone()
        if row is not None:
            found[photo_id] = tuple(row)
    return found


def records_in(conn: sqlite3.Connection, segments: Sequence[int]) -> list[tuple]:
    """``(id, size, mtime_ns, sha256, taken, caption, segment, row)`` of the photos in ``segments``, by
    id (what a compaction merges)."""
    marks = ",".join("?" * len(segments))
    return conn.execute(
        f"SELECT id, size, mtime_ns, sha256, taken, caption, segment, row FROM photos "
        f"WHERE segment IN ({marks}) ORDER BY id",
        list(segments),
    ).fetchall()


def photo_stats(conn: sqlite3.Connection) -> list[tuple[bytes, int, int, str]]:
    """``(id, size, mtime_ns, sha256)`` of every live photo (what an update compares with a scan)."""
    return conn.execute("SELECT id, size, mtime_ns, sha256 FROM photos").fetchall()


def copies(conn: sqlite3.Connection, sha256: str) -> list[str]:
    """The ids of the photos whose bytes have ``sha256``, sorted."""
    rows = conn.execute("SELECT id FROM photos WHERE sha256 = ? ORDER BY id", (sha256,))
    return [id_text(i) for (i,) in rows]


def places_of(conn: sqlite3.Connection, sha256: str) -> list[tuple[int, int]]:
    """``(segment, row)`` of the photos whose bytes have ``sha256``."""
    return conn.execute("SELECT segment, row FROM photos WHERE sha256 = ?", (sha256,)).fetchall()


def folders(conn: sqlite3.Connection, limit: int | None = None) -> list[str]:
    """The folders that directly hold photos, sorted (the top of the photo folder left out)."""
    sql = "SELECT DISTINCT folder FROM photos WHERE folder != ? ORDER BY folder"
    rows = conn.execute(sql + (f" LIMIT {int(limit)}" if limit is not None else ""), (b"",))
    return [id_text(f) for (f,) in rows]


def without_concepts(conn: sqlite3.Connection) -> dict[str, str]:
    """``{photo id: sha256}`` of the live photos whose classes are not stored."""
    rows = conn.execute(
        "SELECT p.id, p.sha256 FROM photos p LEFT JOIN concepts c ON c.sha256 = p.sha256 "
        "WHERE c.sha256 IS NULL"
    )
    return {id_text(i): sha for i, sha in rows}


def concept_rows(conn: sqlite3.Connection) -> list[tuple]:
    """``(segment, row, sha256, classes, crc)`` of every live photo (classes and crc None: no row)."""
    return conn.execute(
        "SELECT p.segment, p.row, p.sha256, c.classes, c.crc FROM photos p "
        "LEFT JOIN concepts c ON c.sha256 = p.sha256"
    ).fetchall()


# ----------------------------------------------------------------------------- captions
def captions_of(conn: sqlite3.Connection, photo_ids: Iterable[str]) -> dict[str, str]:
    """The stored captions of ``photo_ids`` (one without is left out): a query per 500 ids."""
    found: dict[str, str] = {}
    ids = list(photo_ids)
    for start in range(0, len(ids), _IDS_PER_QUERY):
        chunk = [id_bytes(i) for i in ids[start : start + _IDS_PER_QUERY]]
        marks = ",".join("?" * len(chunk))
        sql = f"SELECT id, caption FROM photos WHERE caption IS NOT NULL AND id IN ({marks})"
        found.update({id_text(i): c for i, c in conn.execute(sql, chunk)})
    return found


def captions(conn: sqlite3.Connection) -> dict[str, tuple[str, str]]:
    """``{id: (sha256, caption)}`` of every live photo with a stored caption."""
    rows = conn.execute("SELECT id, sha256, caption FROM photos WHERE caption IS NOT NULL")
    return {id_text(i): (sha, caption) for i, sha, caption in rows}


def uncaptioned(conn: sqlite3.Connection) -> list[str]:
    """The ids of the photos without a stored caption, sorted."""
    return [id_text(i) for (i,) in conn.execute("SELECT id FROM photos WHERE caption IS NULL ORDER BY id")]


# ----------------------------------------------------------------------------- unreadable files, files
def failed_files(conn: sqlite3.Connection) -> dict[str, dict]:
    """``{id: {"size", "mtime_ns", "error"}}`` of the unreadable files."""
    rows = conn.execute("SELECT id, size, mtime_ns, reason FROM failed ORDER BY id")
    return {id_text(i): {"size": s, "mtime_ns": m, "error": e} for i, s, m, e in rows}


def failed_reasons(conn: sqlite3.Connection) -> dict[str, str]:
    """``{id: why}`` of the unreadable files, by id."""
    return {id_text(i): e for i, e in conn.execute("SELECT id, reason FROM failed ORDER BY id")}


def live_files(conn: sqlite3.Connection) -> list[str]:
    """The names (relative to the index) of the files the current generation uses."""
    return [n for (n,) in conn.execute("SELECT name FROM files WHERE state = 'live'")]


def live_checksums(conn: sqlite3.Connection) -> list[tuple[str, str | None]]:
    """``(name, checksum)`` of every live file (what a format upgrade converts)."""
    return conn.execute("SELECT name, sha256 FROM files WHERE state = 'live' ORDER BY name").fetchall()


def file_sha(conn: sqlite3.Connection, name: str) -> str | None:
    """The checksum the ledger records for the file ``name`` (block CRCs, or a sha256 in a store before
    format version 3; None: not listed, or not written yet)."""
    row = conn.execute("SELECT sha256 FROM files WHERE name = ?", (name,)).fetchone()
    return row[0] if row else None


def records_since(
    conn: sqlite3.Connection, generation: int
) -> tuple[int, list[tuple], dict[str, dict]] | None:
    """``(generation, photo_stats, failed_files)`` read in one read transaction, or None when the newest
    generation is still ``generation`` (a round that finds none costs one small query)."""
    begin_read(conn)  # the generation and both tables from one snapshot
    try:
        newest = newest_generation(conn)
        if newest == generation:
            return None
        return newest, photo_stats(conn), failed_files(conn)
    finally:
        end_read(conn)
