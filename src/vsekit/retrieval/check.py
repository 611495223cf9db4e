"""``vsekit index check``: every file of an index read whole and checked, where opening an index checks
only what is cheap and a search only the blocks it reads (docs/index-store.md, "Checksums"): the
database (SQLite's page check and every record's CRC), every live segment (structure, then every block's
CRC-32) and every ANN file. One line per damaged file, each the one a reader would give."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vsekit.errors import VsekitError
from vsekit.retrieval.opening import open_for_reading
from vsekit.retrieval.segments import check_segment_file
from vsekit.retrieval.store import (
    DB,
    GENERATION_MARK,
    check_generation,
    check_row,
    committed_mark,
    concepts_crc,
    connect,
    damaged,
    read_anns,
    read_settings,
    reader,
)
from vsekit.retrieval.store.blocks import mismatch
from vsekit.retrieval.store.schema import quick_check

__all__ = ["IndexCheck", "check_index"]


@dataclass
class IndexCheck:
    """What :func:`check_index` read: photos, files and bytes, and one line per damaged file."""

    index: Path
    photos: int = 0
    files: int = 0
    bytes: int = 0
    damaged: list[str] = field(default_factory=list)
    note: str | None = None  # why less was checked (an index in the old format)

    @property
    def ok(self) -> bool:
        return not self.damaged


def check_index(out: Path) -> IndexCheck:
    """Check every file of the index in ``out`` whole (see the module docstring). An index in the format
    before the store is opened (its own checks) and said to be old; not an index: VsekitError."""
    out = Path(out)
    report = IndexCheck(out)
    if not (out / DB).is_file():
        if (out / GENERATION_MARK).is_file():  # a store whose database was deleted
            report.files = 1
            report.damaged.append(str(damaged(out / DB, "missing", out)))
            return report
        open_for_reading(out).close()  # not an index, or the old format: its own line
        report.note = "an index in the old format (no checksums to check until its next update converts it)"
        return report
    try:
        conn = connect(out / DB)
    except VsekitError as exc:
        report.damaged.append(str(exc))
        return report
    try:
        settings = _check_database(conn, out, report)
        if settings is not None:
            _check_files(conn, out, settings, report)
    finally:
        conn.close()
    return report


def _check_database(conn: sqlite3.Connection, out: Path, report: IndexCheck) -> dict[str, Any] | None:
    """Every page and record of the database; its settings, or None (with its line) when damaged."""
    path = out / DB
    report.files += 1
    report.bytes += path.stat().st_size
    try:
        quick_check(conn)
        reader.begin_read(conn)
        check_generation(out, reader.newest_generation(conn), committed_mark(out))
        settings = read_settings(conn, out)
        _check_records(conn, out, settings)
        report.photos = reader.photo_count(conn)
        return settings
    except VsekitError as exc:
        report.damaged.append(str(exc))
    except (sqlite3.DatabaseError, ValueError, KeyError, TypeError) as exc:
        report.damaged.append(str(damaged(path, str(exc) or type(exc).__name__, out)))
    return None


def _check_records(conn: sqlite3.Connection, out: Path, settings: dict[str, Any]) -> None:
    """Every photo record, tombstone, ANN record and stored class list against its CRC, and the record
    count against the live rows."""
    for row in reader.photos_in_order(conn):
        check_row(row, out)
    dead = reader.tombstones(conn)
    read_anns(conn, settings)
    for n, row, sha, blob, crc in reader.concept_rows(conn):
        if blob is not None and concepts_crc(sha, blob) != crc:
            raise ValueError(f"the classes of the photo at segment {n} row {row} do not match their CRC")
    live = sum(rows - len(dead.get(n, [])) for n, rows, _, _ in reader.segment_files(conn))
    if reader.photo_count(conn) != live:
        raise ValueError(f"{reader.photo_count(conn)} photo records for {live} live rows")


def _check_files(conn: sqlite3.Connection, out: Path, settings: dict[str, Any], report: IndexCheck) -> None:
    """Every live segment and ANN file, whole."""
    dim, dtype = int(settings["model"]["embed_dim"]), str(settings["dtype"])
    for _, rows, name, checksum in reader.segment_files(conn):
        _one_file(report, out / name, check_segment_file, out, name, checksum, rows, dim, dtype)
    for _, file, _ in read_anns(conn, settings).values():
        _one_file(report, out / file, _check_whole, out / file, reader.file_sha(conn, file), out)
    reader.end_read(conn)


def _one_file(report: IndexCheck, path: Path, check: Callable[..., None], *args: Any) -> None:
    """``check(*args)`` of the file ``path``: its line in ``report`` when it is damaged."""
    report.files += 1
    try:
        report.bytes += path.stat().st_size
        check(*args)
    except VsekitError as exc:
        report.damaged.append(str(exc))
    except OSError as exc:
        report.damaged.append(str(damaged(path, exc.strerror or str(exc), report.index)))


def _check_whole(path: Path, checksum: str | None, out: Path) -> None:
    why = mismatch(path.read_bytes(), checksum)
    if why is not None:
        raise damaged(path, why, out)
