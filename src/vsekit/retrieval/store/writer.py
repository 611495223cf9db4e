"""The writer's handle on an index directory's database (:class:`Store`, used under
:func:`~vsekit.retrieval.store.layout.writer_lock`): new files made exclusively and listed first, the
build's chunks, and the commit of a generation in one transaction (see the package docstring)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vsekit.errors import VsekitError
from vsekit.fileio import _tmp_for, atomic_npy_memmap, atomic_write_bytes
from vsekit.retrieval.store import ledger, reader, schema
from vsekit.retrieval.store.blocks import file_checksum, is_sha256, upgrade_checksum
from vsekit.retrieval.store.damage import check_generation, check_row, damaged
from vsekit.retrieval.store.layout import DB, SEGMENTS, committed_mark, segment_name, write_generation_mark
from vsekit.retrieval.store.rows import (
    NewSegment,
    PhotoRecord,
    StoreChange,
    ann_crc,
    concepts_crc,
    id_bytes,
    photo_values,
    row_crc,
)
from vsekit.retrieval.store.settings import (
    STORE_VERSION,
    legacy_settings,
    next_segment,
    set_next_segment,
    write_settings,
)

__all__ = ["Store", "legacy_database"]

logger = logging.getLogger(__name__)


def _put_photo(c: sqlite3.Connection, values: tuple, verb: str = "INSERT OR REPLACE") -> None:
    """Write a photo record (values in :data:`~vsekit.retrieval.store.rows.PHOTO_COLUMNS` order) with
    its CRC."""
    c.execute(f"{verb} INTO photos VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", (*values, row_crc(*values)))


def _put_ann(c: sqlite3.Connection, n: int, engine: str, file: str, params: dict[str, int]) -> None:
    """Record segment ``n``'s ANN file and search settings, with their CRC (the file becomes live)."""
    text = json.dumps(params, sort_keys=True)
    c.execute(
        "INSERT OR REPLACE INTO ann VALUES (?, ?, ?, ?, ?)",
        (n, engine, file, text, ann_crc(n, engine, file, text)),
    )
    ledger.make_live(c, file)


def legacy_database(settings: dict[str, Any], photos: Sequence[PhotoRecord]) -> sqlite3.Connection:
    """An in-memory store holding ``photos`` as segment 0 (the read-only view of an index in the format
    before the store), its read transaction begun."""
    conn = schema.memory_database()
    legacy_settings(conn, settings)
    for row, photo in enumerate(photos):
        _put_photo(conn, photo_values(photo, 0, row, photo.caption), "INSERT")
    reader.begin_read(conn)
    return conn


class Store:
    """A writer's handle on an index directory's database (call under :func:`writer_lock`)."""

    def __init__(self, out: Path, conn: sqlite3.Connection) -> None:
        self.out, self.conn = Path(out), conn
        #: A writer that rebuilds from the photo folder (the Builder) may commit over a database that
        #: lost generations; any other writer is refused (its commit would make the loss look whole).
        self.repairs = False

    @classmethod
    def open(cls, out: Path, *, create: bool = False) -> Store:
        conn = schema.connect(Path(out) / DB, create=create)
        schema.create_tables(conn, Path(out))
        (Path(out) / SEGMENTS).mkdir(exist_ok=True)
        store = cls(Path(out), conn)
        try:
            store._upgrade()
        except BaseException:
            conn.close()
            raise
        return store

    def _upgrade(self) -> None:
        """Climb the version ladder (:mod:`~vsekit.retrieval.store.schema`), a transaction a step."""
        try:
            missing = schema.crc_columns_missing(self.conn)
            settings = self.settings()
            if schema.needs_upgrade(settings, missing):
                with self.transaction() as c:
                    schema.upgrade_to_2(c, missing, settings)
                logger.info("%s: upgraded to index store format 2 (checksummed ANN records)", self.out)
                settings = self.settings()
            if settings and int(settings.get("format_version", STORE_VERSION)) < 3:
                self._upgrade_checksums()
        except (sqlite3.DatabaseError, ValueError) as exc:
            raise damaged(self.out / DB, str(exc), self.out) from None

    def _upgrade_checksums(self) -> None:
        """Format version 2 to 3: every live file's sha256 replaced by its block CRCs, computed in the
        same read that checks the sha256 (a file that fails it keeps its sha256: the build that repairs
        it reads it as damaged); one read of the whole index, once."""
        started, upgraded = time.perf_counter(), {}
        for name, sha in reader.live_checksums(self.conn):
            if sha is not None and is_sha256(sha):
                found = upgrade_checksum(self.out / name, sha)
                if found is not None:
                    upgraded[name] = found
        with self.transaction() as c:
            ledger.replace_checksums(c, upgraded)
            write_settings(c, {"format_version": STORE_VERSION})
        logger.info(
            "%s: upgraded to index store format %d (block checksums: %d files in %.1f s)",
            self.out,
            STORE_VERSION,
            len(upgraded),
            time.perf_counter() - started,
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

    def quick_check(self) -> None:
        """SQLite's check of every page (:func:`~vsekit.retrieval.store.schema.quick_check`)."""
        schema.quick_check(self.conn)

    # -- settings --------------------------------------------------------------------------------
    def settings(self) -> dict[str, Any]:
        return reader.read_settings(self.conn, self.out)

    def set_settings(self, values: dict[str, Any]) -> None:
        with self.transaction() as c:
            write_settings(c, values)

    def generation(self) -> int:
        return reader.newest_generation(self.conn)

    def ann_records(self, settings: dict[str, Any]) -> dict[int, tuple[str, str, dict] | None]:
        return reader.ann_records(self.conn, settings)

    # -- records ---------------------------------------------------------------------------------
    def check_records(self) -> None:
        """Check every photo record and tombstone against its CRC (a writer that keeps the records of
        unchanged photos must not keep a damaged one: readers would refuse it after every rebuild)."""
        for row in reader.photos_in_order(self.conn):
            check_row(row, self.out)
        try:
            reader.tombstones(self.conn)
        except ValueError as exc:
            raise damaged(self.out / DB, str(exc), self.out) from None

    def photos(self) -> dict[str, tuple[int, int, str, int, int]]:
        """``{id: (size, mtime_ns, sha256, segment, row)}`` of every live photo."""
        return reader.photo_places(self.conn)

    def count(self) -> int:
        return reader.photo_count(self.conn)

    def records_of(self, ids: Iterable[str]) -> dict[str, tuple[int, int, str]]:
        """``{id: (size, mtime_ns, sha256)}`` of those of ``ids`` the store holds."""
        return reader.records_of(self.conn, ids)

    def records_in(self, segments: Sequence[int]) -> list[tuple]:
        """The records of the photos in ``segments`` (:func:`~vsekit.retrieval.store.reader.records_in`)."""
        return reader.records_in(self.conn, segments)

    def captions(self) -> dict[str, tuple[str, str]]:
        """``{id: (sha256, caption)}`` of every live photo with a stored caption."""
        return reader.captions(self.conn)

    def failed(self) -> dict[str, dict]:
        return reader.failed_files(self.conn)

    def segments(self) -> list[tuple[int, int, int]]:
        """``(n, rows, tombstoned rows)`` of every live segment, in order."""
        return reader.segments_and_tombstones(self.conn)

    def segment_files(self) -> list[tuple[int, int, str, str]]:
        """``(n, rows, file, sha256)`` of every live segment, in order."""
        return reader.segment_files(self.conn)

    def segment_sha(self, n: int) -> str:
        return reader.segment_sha(self.conn, n)

    def segment_path(self, n: int) -> Path:
        return self.out / segment_name(n)

    # -- files -----------------------------------------------------------------------------------
    def _taken(self, c: sqlite3.Connection, name: str) -> bool:
        """Whether a new file may not be made at ``name``: the database lists it, or a file (or the temp
        file of one) is there. A killed writer's own leftovers are listed and collected before a writer
        makes anything, so a file found here is someone else's: never written over (docs/index-store.md,
        "Files it owns")."""
        path = self.out / name
        return ledger.is_listed(c, name) or os.path.lexists(path) or os.path.lexists(_tmp_for(path))

    def reserve_free(self, *names: str) -> bool:
        """Record ``names`` (relative to the index) as this store's before they are created, if every
        one is free (:meth:`_taken`); False, recording nothing, when one is not."""
        with self.transaction() as c:
            if any(self._taken(c, name) for name in names):
                return False
            ledger.reserve(c, names)
        return True

    def new_segment_number(self) -> int:
        """The next segment number whose file name is free (a file someone put at ``segments/<n>.npy``
        is passed over, not replaced), recorded as this store's."""
        with self.transaction() as c:
            n = next_segment(c)
            while self._taken(c, segment_name(n)):
                n += 1
            set_next_segment(c, n + 1)
            ledger.reserve(c, [segment_name(n)])
        return n

    @contextlib.contextmanager
    def _creating(self, name: str) -> Iterator[None]:
        """Create the reserved file ``name`` exclusively: a file that appeared there since it was found
        free (another program writing into the index folder) is left as it is, and so is the name."""
        try:
            yield
        except FileExistsError:
            with self.transaction() as c:
                ledger.forget_pending(c, name)
            raise VsekitError(
                f"{self.out / name}: a file the index did not make appeared there while it was being "
                "written; it is left as it is: run the command again"
            ) from None

    def write_segment(
        self, vectors: np.ndarray | Iterable[np.ndarray], rows: int, dim: int, dtype: str
    ) -> tuple[int, str]:
        """Write a new segment (``rows`` vectors, an array or blocks of rows) atomically; returns its
        number and checksum (block CRCs, :mod:`~vsekit.retrieval.store.blocks`; recorded in ``files``;
        the segment is live once a commit names it)."""
        rows, dim = int(rows), int(dim)  # a NumPy integer would write an unreadable .npy header
        n = self.new_segment_number()
        path = self.segment_path(n)
        with (
            self._creating(segment_name(n)),
            atomic_npy_memmap(path, dtype, (rows, dim), exclusive=True) as out,
        ):
            start = 0
            for block in [vectors] if isinstance(vectors, np.ndarray) else vectors:
                out[start : start + len(block)] = block
                start += len(block)
            if start != rows:
                raise VsekitError(f"{path}: {start} vectors written for {rows} rows")
        return n, file_checksum(path)  # recorded with the commit (or the chunk) that names the segment

    def write_file(self, name: str, data: bytes) -> str:
        """Write an owned file (an ANN structure) that :meth:`reserve_free` recorded, atomically and
        exclusively; returns its checksum (read back from the file)."""
        with self._creating(name):
            atomic_write_bytes(self.out / name, data, exclusive=True)
        sha = file_checksum(self.out / name)
        with self.transaction() as c:
            ledger.record_sha(c, name, sha, len(data))
        return sha

    def file_sha(self, name: str) -> str | None:
        return reader.file_sha(self.conn, name)

    def discard(self, *names: str) -> None:
        """Make listed files dead now (a finished build's progress file), outside a commit."""
        with self.transaction() as c:
            ledger.make_dead(c, names)

    def take_over(self, names: Sequence[str]) -> None:
        """List ``names`` as dead files of this store, listed before or not (what a damaged database
        listed, and the damaged files moved aside), to be deleted by :meth:`collect`."""
        with self.transaction() as c:
            ledger.list_dead(c, names)

    def collect(self) -> None:
        """Delete the files the database lists as dead (and temp files of pending ones no work needs)."""
        dead = ledger.dead_names(self.conn)
        for name in dead:
            (self.out / name).unlink(missing_ok=True)
            _tmp_for(self.out / name).unlink(missing_ok=True)
        if dead:
            with self.transaction() as c:
                ledger.forget_dead(c, dead)

    def recover(self, keep_chunks: set[str] | None = None) -> None:
        """After a killed writer: pending files no finished chunk names are dead; so are the chunks of
        another plan (``keep_chunks``: the keys the current build wants; None keeps every chunk)."""
        if not ledger.unfinished(self.conn):
            return  # nothing left behind (the usual case: no write needed)
        with self.transaction() as c:
            chunks = ledger.chunk_rows(c)
            stale = [
                key
                for key, _, entries in chunks
                if entries is None or (keep_chunks is not None and key not in keep_chunks)
            ]
            ledger.forget_chunks(c, stale)
            kept = {segment_name(seg) for key, seg, _ in chunks if key not in stale}
            ledger.make_dead(c, [n for n in ledger.pending_names(c) if n not in kept])
        self.collect()

    # -- chunks of a build (resumable work) ----------------------------------------------------
    def chunk(self, key: str) -> tuple[int, list, dict] | None:
        """A finished chunk's segment, photos and unreadable files (None: not finished, or its record
        fails its CRC: a resumed build would commit its photos at the wrong rows or with the wrong ids,
        so it is embedded again)."""
        try:
            return ledger.chunk_record(self.conn, key)
        except ledger.DamagedChunk:
            logger.warning(
                "%s: a finished chunk's record does not match its checksum; embedding it again", self.out / DB
            )
            return None

    def save_chunk(self, key: str, n: int, sha256: str, entries: list, failed: dict) -> None:
        """Record a finished chunk of a build (its segment file and sha256, its photos), with a CRC."""
        with self.transaction() as c:
            ledger.put_chunk(c, key, n, sha256, entries, failed)

    def chunk_segments(self) -> list[int]:
        return ledger.chunk_segments(self.conn)

    # -- the commit ------------------------------------------------------------------------------
    def commit(self, change: StoreChange) -> int:
        """One transaction: the new generation (see the package docstring); returns its number."""
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
                self._replace_failed(c, change.failed)
            if change.chunks_done:
                live = {segment_name(s.n) for s in change.segments}
                ledger.make_dead(c, {segment_name(n) for n in ledger.chunk_segments(c)} - live)
                ledger.forget_chunks(c)
            self._replace_anns(c, change)
            ledger.list_dead(c, change.dead_files)
            if change.settings:
                write_settings(c, change.settings)
            c.execute(
                "INSERT INTO generations VALUES (?, ?, ?)",
                (g, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), count),
            )
        return g

    @staticmethod
    def _replace_failed(c: sqlite3.Connection, failed: dict[str, dict]) -> None:
        c.execute("DELETE FROM failed")
        c.executemany(
            "INSERT INTO failed VALUES (?, ?, ?, ?)",
            [(id_bytes(i), f["size"], f["mtime_ns"], f["error"]) for i, f in failed.items()],
        )

    def _drop(self, c: sqlite3.Connection, segments: Sequence[int]) -> int:
        """Forget ``segments`` (their files become dead); returns how many photo records went."""
        gone = 0
        for n in segments:
            gone += c.execute("SELECT count(*) FROM photos WHERE segment = ?", (n,)).fetchone()[0]
            c.execute("DELETE FROM tombstones WHERE segment = ?", (n,))
            c.execute("DELETE FROM photos WHERE segment = ?", (n,))
            c.execute("DELETE FROM segments WHERE n = ?", (n,))
            ledger.make_dead(c, [segment_name(n)])
            ann = c.execute("SELECT file FROM ann WHERE segment = ?", (n,)).fetchone()
            if ann:
                ledger.make_dead(c, [ann[0]])
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
        name, new = segment_name(segment.n), 0
        c.execute(
            "INSERT INTO segments VALUES (?, ?, ?, ?, ?)",
            (segment.n, len(segment.photos), name, segment.sha256, g),
        )
        ledger.make_live(c, name, segment.sha256, (self.out / name).stat().st_size)
        for row, p in enumerate(segment.photos):
            old = self._tombstone(c, g, id_bytes(p.id))
            new += old is None
            caption = p.caption
            if caption is None and old is not None and old[2] == p.sha256:  # same photo: keep its caption
                caption = old[3]
            _put_photo(c, photo_values(p, segment.n, row, caption))
        if segment.ann is not None:
            _put_ann(c, segment.n, *segment.ann)
        return new

    def _replace_anns(self, c: sqlite3.Connection, change: StoreChange) -> None:
        """Drop the ANN records ``change.drop_anns`` names, record ``change.anns``; then, when records
        went (these, or dropped segments), :func:`~vsekit.retrieval.store.ledger.sweep`."""
        c.executemany("DELETE FROM ann WHERE segment = ?", [(n,) for n in change.drop_anns])
        for n, engine, file, params in change.anns:
            _put_ann(c, n, engine, file, params)
        if change.drop_anns or change.anns or change.drop_segments:
            ledger.sweep(c)

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
        return reader.without_concepts(self.conn)

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
                found = reader.photo_record(c, photo_id)
                if not found:
                    continue
                values = list(check_row(found[0], self.out))
                values[6] = caption
                c.execute(
                    "UPDATE photos SET caption = ?, crc = ? WHERE id = ?",
                    (caption, row_crc(*values), values[0]),
                )
                done += 1
        return done
