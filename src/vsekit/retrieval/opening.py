"""Opening a photo index folder's store: for a reader, the newest committed generation (or an index in
the format before the store, read-only); for a writer, the store, with a damaged database moved aside.

A writer never repairs a damaged database in place: it moves it aside and starts a new store beside the
old segment files (numbering past them, so no old file is reused or overwritten), and the build that
follows embeds every photo again. The files the damaged database still lists become the new store's
dead files, deleted by its next collection; files it cannot list stay (nothing unlisted is deleted).
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
from pathlib import Path

from vsekit.errors import VsekitError, command
from vsekit.fileio import rename_no_replace
from vsekit.retrieval.legacy import legacy_snapshot, read_manifest
from vsekit.retrieval.segments import Snapshot, open_snapshot
from vsekit.retrieval.store import DB, GENERATION_MARK, LEGACY_MANIFEST, SEGMENTS, Store, damaged
from vsekit.retrieval.store.ledger import salvage_names
from vsekit.retrieval.store.reader import newest_generation
from vsekit.retrieval.store.schema import open_probe

__all__ = ["open_for_reading", "open_for_writing"]

logger = logging.getLogger(__name__)


def open_for_reading(out: Path) -> Snapshot:
    """The newest generation of the store in ``out``, or a read-only view of an old-format index."""
    if (out / DB).is_file():
        try:
            return open_snapshot(out)
        except VsekitError:
            if (out / LEGACY_MANIFEST).is_file() and _store_is_empty(out):
                manifest = read_manifest(out)
                if manifest is not None:  # (None only if it vanished since)
                    return legacy_snapshot(out, manifest)
            raise
    manifest = read_manifest(out)
    if manifest is None:
        if (out / GENERATION_MARK).is_file():  # an index whose database was deleted (a build may rebuild it)
            raise damaged(out / DB, "missing", out)
        what = "does not exist" if not out.exists() else "has no store.sqlite"
        make = command("index", "build", "PHOTOS", "--out", out)
        raise VsekitError(f"{out}: not a vsekit photo index ({what}); {make} makes one of the folder PHOTOS")
    return legacy_snapshot(out, manifest)


def _store_is_empty(out: Path) -> bool:
    """A store that never committed (a conversion killed before its commit)."""
    try:
        conn = open_probe(out / DB)
        try:
            return not newest_generation(conn)
        finally:
            conn.close()
    except sqlite3.Error:
        return False


def open_for_writing(out: Path) -> Store:
    """The store of ``out`` for a writer (who holds the writers' lock). A damaged database is moved
    aside and a new store started (whose build embeds every photo again); the files the damaged one
    listed, when it can still list them, and the damaged database itself are then deleted as the new
    store's dead files."""
    if not (out / DB).exists() and (out / GENERATION_MARK).is_file():
        return _new_store_beside_old_segments(out, "the index database is missing")
    try:
        store = Store.open(out, create=True)
        store.settings()
        if (out / DB).stat().st_size <= 64 << 20:  # a full check of a large database costs seconds
            store.quick_check()
            store.check_records()
        return store
    except (VsekitError, sqlite3.DatabaseError, ValueError) as exc:
        logger.warning(
            "%s: damaged index database (%s); rebuilding the index", out / DB, str(exc).split(";")[0]
        )
        with contextlib.suppress(NameError, sqlite3.Error):
            store.close()
    return _replace_damaged_store(out)


def _replace_damaged_store(out: Path) -> Store:
    """Move the damaged database of ``out`` aside and start a new store that owns (as dead files) what
    the damaged one listed and the moved-aside files."""
    owned = salvage_names(out / DB)
    moved = []
    for name in (DB, f"{DB}-wal", f"{DB}-shm", GENERATION_MARK):
        with contextlib.suppress(FileNotFoundError):
            moved.append(_move_aside(out, name))
    store = _new_store_beside_old_segments(out, "" if owned else "the damaged database lists no files")
    store.take_over(owned + moved)
    store.collect()
    return store


def _move_aside(out: Path, name: str) -> str:
    """Rename the file ``name`` of ``out`` to a free ``<name>.damaged`` name (``.damaged-2``, ... when
    one is there: a file the store did not make is never replaced); returns the new name."""
    for i in range(1, 1000):
        aside = f"{name}.damaged" + (f"-{i}" if i > 1 else "")
        try:
            rename_no_replace(out / name, out / aside)
        except FileExistsError:
            continue
        return aside
    raise VsekitError(f"{out / name}: damaged, and no free name to move it aside to")


def _new_store_beside_old_segments(out: Path, why: str) -> Store:
    """A new database in ``out``, numbering its segments past every file in ``segments/`` (an old
    file is never reused, overwritten or deleted unless a database lists it); ``why`` the old ones stay."""
    store = Store.open(out, create=True)
    numbers = [int(p.stem) for p in (out / SEGMENTS).glob("*.npy") if p.stem.isdigit()]
    store.set_settings({"next_segment": max(numbers, default=0) + 1})
    if why and numbers:
        logger.warning("%s: %s; its old segments stay in %s", out, why, out / SEGMENTS)
    return store
