"""A reader's view of the photo index store: one committed generation, searched over its segments.

:func:`open_snapshot` begins a read transaction on its own SQLite connection (WAL: it keeps seeing the
generation it opened while writers commit newer ones) and memory-maps the generation's segments. Opening
checks what is cheap (each file's size against the database, the ``.npy`` header and the blocks that hold
it, the shape); the rest of a segment file is checked block by block against the CRC-32s the database
records when a search first reads that block (:mod:`vsekit.retrieval.store.blocks`): an exact search
reads, and checks, every block of the segments it scans, an IVF-PQ search only the blocks of its
candidate rows; :attr:`Segment.vectors` checks the whole file before handing out the map. What this
process has checked is remembered per file version (path, size, mtime, inode and ctime). A store written
before format version 3 records a sha256 per file: such a file is checked whole, once per process, the
first time it is mapped. The segments are immutable, so a newer snapshot reuses the maps (and checks) of
the segments it shares with an older one, and a deleted file stays readable through an open map.

Rows: the live rows of the segments in segment order, then row order, are the positions ``0..n-1`` a
search answers with (``SearchHit.id``). Exact search runs per segment (tombstoned rows and filtered-out
rows masked) and merges the per-segment top ``k`` by score, then position: the same list as an exact
search over the live vectors in one array.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from tokenize import TokenError
from typing import Any, Literal, TypeVar

import numpy as np

from vsekit.errors import VsekitError
from vsekit.fileio import file_sha256
from vsekit.retrieval.search import _best_first, ann_search, exact_search
from vsekit.retrieval.store import (
    DB,
    build_command,
    check_generation,
    check_row,
    committed_mark,
    concepts_crc,
    connect,
    damaged,
    id_text,
    map_npy,
    read_anns,
    read_settings,
    reader,
    unpack_concepts,
)
from vsekit.retrieval.store.blocks import BlockCheck, is_sha256, parse_checksum
from vsekit.retrieval.store.schema import quick_check

__all__ = [
    "LivePaths",
    "LiveVectors",
    "Segment",
    "Snapshot",
    "check_segment_file",
    "forget_checks",
    "open_snapshot",
    "verify_file",
]

_T = TypeVar("_T")
_Version = tuple[str, int, int, int, int]
_VERIFIED: dict[_Version, str] = {}  # files checked whole against a sha256 (stores before format 3)
_BLOCK_CHECKS: dict[tuple[_Version, str], BlockCheck] = {}  # the blocks checked of each file version
_VERIFIED_LOCK = threading.Lock()
#: Exclusions (tombstones, filters) up to this many rows are answered by a search for k + excluded
#: and a filter; more by searching the kept rows only.
_FEW_EXCLUDED = 1024
#: ``PRAGMA quick_check`` on open for databases up to this size (larger ones: SQLite's page checks).
_QUICK_CHECK_MAX = 64 << 20


def _version(path: Path, st: os.stat_result) -> tuple[str, int, int, int, int]:
    """What identifies a file version: path, size, mtime, inode and ctime. The ctime matters: a write
    in place keeps the size and inode, and ``os.utime`` can put the mtime back, but any write or
    ``utime`` sets the ctime to now (only the kernel sets it)."""
    return (str(path), st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)


def forget_checks() -> None:
    """Forget what this process has checked (a benchmark's "first open in a process")."""
    with _VERIFIED_LOCK:
        _VERIFIED.clear()
        _BLOCK_CHECKS.clear()
        _QUICK_CHECKED.clear()


def _stat(path: Path, out: Path) -> os.stat_result:
    try:
        return os.stat(path)
    except OSError as exc:
        raise damaged(path, exc.strerror or "missing", out) from None


def verify_file(path: Path, checksum: str, out: Path) -> None:
    """Check all of ``path`` against its recorded checksum (block CRCs, or a sha256 in a store before
    format version 3), once per file version in this process: a writer's check before it copies or
    keeps a file, ``vsekit index check``."""
    st = _stat(path, out)
    if is_sha256(checksum):
        _verify_sha256(path, st, checksum, out)
        return
    check = _block_check(path, st, checksum, out)
    if check.complete:
        return
    try:
        with open(path, "rb") as f, _mapping(f, st.st_size) as mapped:
            why = check.check(mapped)
    except OSError as exc:
        raise damaged(path, exc.strerror or str(exc), out) from None
    if why is not None:
        raise damaged(path, why, out)


def _verify_sha256(path: Path, st: os.stat_result, sha256: str, out: Path) -> None:
    key = _version(path, st)
    with _VERIFIED_LOCK:
        if _VERIFIED.get(key) == sha256:
            return
    try:
        found = file_sha256(path)
    except OSError as exc:
        raise damaged(path, exc.strerror or str(exc), out) from None
    if found != sha256:
        raise damaged(path, f"sha256 {found[:12]}, the index recorded {sha256[:12]}", out)
    with _VERIFIED_LOCK:
        _VERIFIED[key] = sha256


def _block_check(path: Path, st: os.stat_result, checksum: str, out: Path) -> BlockCheck:
    """This process's record of the checked blocks of ``path`` (this version of it), after the cheap
    checks: a readable checksum, and the file's size the one it records."""
    key = (_version(path, st), checksum)
    with _VERIFIED_LOCK:
        found = _BLOCK_CHECKS.get(key)
    if found is not None:
        return found
    try:
        sums = parse_checksum(checksum)
    except ValueError as exc:
        raise damaged(path, str(exc), out) from None
    if sums.size != st.st_size:
        raise damaged(path, f"{st.st_size} bytes, the index recorded {sums.size}", out)
    with _VERIFIED_LOCK:
        return _BLOCK_CHECKS.setdefault(key, BlockCheck(sums))


def _mapping(f: Any, size: int) -> Any:
    """A read-only map of the open file ``f`` (empty bytes for an empty file: mmap refuses those)."""
    return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else contextlib.nullcontext(b"")


class _CheckedFile:
    """A segment file's read-only map (its vectors are an array over it) and the blocks this process
    has checked of it: a block is checked here before the first read of a row in it."""

    def __init__(self, path: Path, out: Path, check: BlockCheck, mapped: mmap.mmap, offset: int, row: int):
        self.path, self.out, self.check = path, out, check
        self._mapped, self.offset, self.row_bytes = mapped, offset, row

    def _raise_if(self, why: str | None) -> None:
        if why is not None:
            raise damaged(self.path, why, self.out)

    def whole(self) -> None:
        if not self.check.complete:
            self._raise_if(self.check.check(self._mapped))

    def header(self) -> None:
        """Check the blocks of the header (block 0 at least: the magic and the header's length)."""
        self._raise_if(self.check.check(self._mapped, 0, max(1, self.offset)))

    def rows(self, rows: np.ndarray) -> None:
        """Check the blocks that hold ``rows`` (row numbers)."""
        if self.check.complete or not len(rows):
            return
        first = self.offset + np.unique(rows).astype(np.int64) * self.row_bytes
        block = self.check.sums.block
        starts, ends = first // block, (first + self.row_bytes - 1) // block
        if self.row_bytes <= block:  # a row spans one block or two
            wanted = np.unique(np.concatenate([starts, ends])).tolist()
        else:
            wanted = sorted({b for s, e in zip(starts, ends, strict=True) for b in range(s, e + 1)})
        self._raise_if(self.check.check_blocks(self._mapped, wanted))


@dataclass
class Segment:
    """One segment of a snapshot: its vectors (memory-mapped), its tombstoned rows (sorted), its ANN.
    ``mapped`` is the raw map: read it through :attr:`vectors` (the whole file checked first) or
    :meth:`take` (the blocks of those rows checked first)."""

    n: int
    mapped: np.ndarray
    dead: np.ndarray
    ann: tuple[str, str, dict[str, int]] | None = None  # (engine, file, params)
    ann_file: Any = None  # the ANN file, opened with the snapshot (a later compaction may delete it)
    checked: _CheckedFile | None = None  # None: checked whole on open (a sha256 store, the old format)

    @property
    def vectors(self) -> np.ndarray:
        """Every row, the whole file checked against its block CRCs first (once per process)."""
        if self.checked is not None:
            self.checked.whole()
        return self.mapped

    def take(self, rows: np.ndarray) -> np.ndarray:
        """The vectors of ``rows``, the blocks that hold them checked first."""
        rows = np.asarray(rows, dtype=np.int64)
        if self.checked is not None:
            self.checked.rows(rows.ravel())
        return self.mapped[rows]

    @property
    def rows(self) -> int:
        return len(self.mapped)

    @property
    def live(self) -> int:
        return self.rows - len(self.dead)

    def positions(self, rows: np.ndarray) -> np.ndarray:
        """Live positions within the segment of live ``rows`` (-1 stays -1)."""
        return np.where(rows >= 0, rows - np.searchsorted(self.dead, rows), -1)

    def row_of(self, position: np.ndarray | int) -> np.ndarray:
        shifted = self.dead - np.arange(len(self.dead))
        return position + np.searchsorted(shifted, position, side="right")


class _Gone(Exception):
    """A file of the generation being opened was deleted (a newer generation dropped it)."""


def _map_segment(
    out: Path, name: str, checksum: str, rows: int, dim: int, dtype: str
) -> tuple[np.ndarray, _CheckedFile | None]:
    """Map a segment file after the cheap checks (size, header and its blocks, shape); a file of a
    store before format version 3 is checked whole against its sha256 instead."""
    path = out / name
    try:
        if is_sha256(checksum) or not rows:
            verify_file(path, checksum, out)
            vectors, checked = (map_npy(path) if rows else np.zeros((0, dim), dtype=dtype)), None
        else:
            vectors, checked = _map_checked(path, checksum, out)
    except (VsekitError, OSError, ValueError, SyntaxError, TokenError) as exc:  # np.load of a bad header
        if not path.exists():  # collected by a writer between our snapshot and here: not damage
            raise _Gone(path) from None
        raise exc if isinstance(exc, VsekitError) else damaged(path, str(exc), out) from None
    if vectors.shape != (rows, dim) or vectors.dtype != np.dtype(dtype):
        raise damaged(path, f"{vectors.shape} {vectors.dtype}, the index says {(rows, dim)} {dtype}", out)
    return vectors, checked


def _map_checked(path: Path, checksum: str, out: Path) -> tuple[np.ndarray, _CheckedFile]:
    """The vectors, an array over the file's one read-only map (the bytes checked are the bytes
    searched), with the blocks that hold the header checked first."""
    with open(path, "rb") as f:
        st = os.fstat(f.fileno())
        check = _block_check(path, st, checksum, out)
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    checked = _CheckedFile(path, out, check, mapped, 0, 0)
    checked.header()  # (offset 0: block 0, the magic, the header's length and its start)
    header = map_npy(path)  # parses the header (the map it makes is let go)
    shape, dtype, offset = header.shape, header.dtype, int(getattr(header, "offset", 0))
    order: Literal["C", "F"] = "F" if header.flags.f_contiguous and not header.flags.c_contiguous else "C"
    del header
    checked.offset, checked.row_bytes = offset, dtype.itemsize * int(np.prod(shape[1:]))
    checked.header()
    if offset + dtype.itemsize * int(np.prod(shape)) != st.st_size:
        raise damaged(path, f"a header of {offset} bytes and {shape} {dtype} in {st.st_size} bytes", out)
    return np.ndarray(shape, dtype=dtype, buffer=mapped, offset=offset, order=order), checked


def check_segment_file(out: Path, name: str, checksum: str, rows: int, dim: int, dtype: str) -> None:
    """Check a segment file whole (its structure, then every block): ``vsekit index check``."""
    vectors, checked = _map_segment(out, name, checksum, rows, dim, dtype)
    if checked is not None:
        checked.whole()


_QUICK_CHECKED: set[tuple[str, int, int, int, int]] = set()


def _quick_check(conn: sqlite3.Connection, path: Path) -> None:
    st = path.stat()
    key = _version(path, st)
    if st.st_size > _QUICK_CHECK_MAX or key in _QUICK_CHECKED:
        return
    quick_check(conn)
    _QUICK_CHECKED.add(key)


class Snapshot:
    """One committed generation of a store, held for searching (see the module docstring)."""

    def __init__(
        self, out: Path, conn: sqlite3.Connection, generation: int, settings: dict, segments: list[Segment]
    ) -> None:
        self.out, self.conn, self.generation, self.settings = out, conn, generation, settings
        self.segments = segments
        self.offsets = np.concatenate([[0], np.cumsum([s.live for s in segments])]).astype(np.int64)
        self._lock = threading.Lock()
        self._concepts: tuple[np.ndarray, np.ndarray] | None = None

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def close(self) -> None:
        with self._lock, contextlib.suppress(sqlite3.Error):
            self.conn.close()

    # -- rows ------------------------------------------------------------------------------------
    def place(self, position: int) -> tuple[Segment, int]:
        if not 0 <= position < len(self):
            raise IndexError(position)
        i = int(np.searchsorted(self.offsets, position, side="right")) - 1
        segment = self.segments[i]
        return segment, int(segment.row_of(position - int(self.offsets[i])))

    def vector(self, position: int) -> np.ndarray:
        segment, row = self.place(position)
        return segment.take(np.asarray([row]))[0]

    def read(self, question: Callable[..., _T], *args: Any) -> _T:
        """``question(conn, *args)``, one of :mod:`vsekit.retrieval.store.reader`'s reads, asked of this
        snapshot's generation (a damaged database is one line)."""
        with self._lock:
            try:
                return question(self.conn, *args)
            except sqlite3.DatabaseError as exc:
                raise damaged(self.out / DB, str(exc), self.out) from None

    def path(self, position: int) -> str:
        segment, row = self.place(position)
        found = self.read(reader.photo_at, segment.n, row)
        if not found:
            raise damaged(self.out / DB, f"no photo at segment {segment.n} row {row}", self.out)
        values = check_row(found[0], self.out)
        if values[7:9] != (segment.n, row):
            raise damaged(
                self.out / DB, f"the photo at segment {segment.n} row {row} is recorded elsewhere", self.out
            )
        return id_text(values[0])

    def all_paths(self) -> list[str]:
        rows = self.read(reader.photos_in_order)
        return [id_text(check_row(r, self.out)[0]) for r in rows]

    def records(self) -> dict[str, dict[str, Any]]:
        """Every live photo's ``size``, ``sha256`` and ``taken``, by path (each record CRC-checked)."""
        out = {}
        for row in self.read(reader.photos_in_order):
            key, size, _, sha, _, taken, _, _, _ = check_row(row, self.out)
            out[id_text(key)] = {"size": size, "sha256": sha, "taken": taken}
        return out

    def by_date(self, offset: int, limit: int) -> list[dict[str, Any]]:
        """Photos ``offset`` to ``offset + limit``, newest date taken first, undated last by path
        (:func:`~vsekit.retrieval.store.reader.photos_by_date`): ``{"id": position, "path", "taken",
        "caption"}``, each record CRC-checked."""
        starts = {s.n: (s, int(self.offsets[i])) for i, s in enumerate(self.segments)}
        out = []
        for found in self.read(reader.photos_by_date, offset, limit):
            key, _, _, _, _, taken, caption, n, row = check_row(found, self.out)
            if n not in starts or not 0 <= row < starts[n][0].rows:
                raise damaged(self.out / DB, f"a photo recorded at segment {n} row {row}", self.out)
            segment, start = starts[n]
            position = start + int(segment.positions(np.asarray([row]))[0])
            out.append({"id": position, "path": id_text(key), "taken": taken, "caption": caption})
        return out

    def contains(self, photo_id: str) -> bool:
        return bool(self.read(reader.photo_record, photo_id))

    def record(self, photo_id: str) -> dict[str, Any] | None:
        rows = self.read(reader.photo_record, photo_id)
        if not rows:
            return None
        _, size, mtime_ns, sha, folder, taken, caption, _, _ = check_row(rows[0], self.out)
        return {
            "size": size,
            "mtime_ns": mtime_ns,
            "sha256": sha,
            "folder": id_text(folder),
            "taken": taken,
            "caption": caption,
        }

    # -- concepts --------------------------------------------------------------------------------
    def concepts(self, top: int) -> tuple[np.ndarray, np.ndarray]:
        """Every live photo's top ImageNet classes by position: ``(ids [n, top] uint16, probs [n, top])``,
        each row checked against its CRC (read once per snapshot). Only for a generation whose
        ``concepts`` setting promises a row for every photo; a missing or damaged one is damage."""
        with self._lock:
            cached = self._concepts
        if cached is not None:
            return cached
        ids = np.zeros((len(self), top), dtype=np.uint16)
        probs = np.zeros((len(self), top), dtype=np.float32)
        where = {s.n: (s, int(self.offsets[i])) for i, s in enumerate(self.segments)}
        found = self.read(reader.concept_rows)
        for n, row, sha, blob, crc in found:
            if blob is None or n not in where or concepts_crc(sha, blob) != crc:
                raise damaged(self.out / DB, f"the classes of the photo at segment {n} row {row}", self.out)
            segment, offset = where[n]
            position = offset + int(segment.positions(np.asarray([row]))[0])
            try:
                ids[position], probs[position] = unpack_concepts(blob, top)
            except ValueError as exc:
                raise damaged(self.out / DB, str(exc), self.out) from None
        with self._lock:
            self._concepts = (ids, probs)
        return ids, probs

    # -- filters ---------------------------------------------------------------------------------
    def keep_masks(self, folder: str | None, after: str | None, before: str | None) -> dict[int, np.ndarray]:
        """Per segment number, the rows of live photos in ``folder`` (or below it) taken in [``after``,
        ``before``) (:func:`vsekit.retrieval.store.reader.photos_matching`)."""
        masks = {s.n: np.zeros(s.rows, dtype=bool) for s in self.segments}
        for found in self.read(reader.photos_matching, folder, after, before):
            n, row = check_row(found, self.out)[7:9]
            if n not in masks or not 0 <= row < len(masks[n]):
                raise damaged(self.out / DB, f"a photo recorded at segment {n} row {row}", self.out)
            masks[n][row] = True
        return masks

    # -- search ----------------------------------------------------------------------------------
    def nearest(
        self,
        queries: np.ndarray,
        k: int,
        engine: str,
        keep: dict[int, np.ndarray] | None = None,
        ann_of: Callable[[Segment, str], tuple[Any, dict]] | None = None,
        any_ann: bool = False,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` best live positions per query (``keep``: per segment, the rows a filter allows); a
        segment's ANN structure is used when it is of ``engine`` (or, ``any_ann``, of any kind)."""
        queries = np.atleast_2d(np.asarray(queries, dtype=np.float32))
        parts_s, parts_r = [], []
        for segment, offset in zip(self.segments, self.offsets[:-1], strict=True):
            mask = keep.get(segment.n) if keep is not None else None
            if mask is None and len(segment.dead):
                mask = np.ones(segment.rows, dtype=bool)
                mask[segment.dead] = False
            if segment.live == 0 or (mask is not None and not mask.any()):
                continue
            ann = None
            if (
                engine != "exact"
                and ann_of is not None
                and segment.ann is not None
                and (segment.ann[0] == engine or any_ann)
            ):
                ann = ann_of(segment, segment.ann[0])
            scores, rows = _segment_top(segment, queries, k, mask, ann)
            parts_s.append(scores)
            parts_r.append(np.where(rows >= 0, segment.positions(rows) + offset, -1))
        if not parts_s:
            return (np.full((len(queries), k), -np.inf, np.float32), np.full((len(queries), k), -1, np.int64))
        return _best_first(np.concatenate(parts_s, axis=1), np.concatenate(parts_r, axis=1), k)


def _segment_top(
    segment: Segment, queries: np.ndarray, k: int, mask: np.ndarray | None, ann: tuple[Any, dict] | None
) -> tuple[np.ndarray, np.ndarray]:
    """One segment's best ``k`` rows among those ``mask`` keeps (exact, or through ``ann``). An exact
    search reads (and so checks) every block; an ANN search only the rows it re-ranks (IVF-PQ), if any."""
    rows = segment.rows
    excluded = 0 if mask is None else rows - int(mask.sum())

    def search(want: int) -> tuple[np.ndarray, np.ndarray]:
        want = max(1, min(want, rows))
        if ann is not None:
            return ann_search(ann[0], _CheckedRows(segment), queries, want, ann[1])
        return exact_search(segment.vectors, queries, want)

    if excluded == 0:
        return search(k)
    assert mask is not None  # (something is excluded)
    if excluded <= min(_FEW_EXCLUDED, max(k, rows // 16)):  # few left out: search a little deeper
        scores, found = search(k + excluded)
        ok = (found >= 0) & mask[np.maximum(found, 0)]
        return _best_first(np.where(ok, scores, -np.inf), np.where(ok, found, -1), min(k, rows))
    kept = np.flatnonzero(mask)
    scores, found = exact_search(segment.vectors[kept], queries, min(k, len(kept)))
    return scores, np.where(found >= 0, kept[np.maximum(found, 0)], -1)


class _CheckedRows:
    """A segment's vectors as :func:`~vsekit.retrieval.search.rerank_search` reads them: ``rows[i]``
    checks the blocks of those rows first."""

    def __init__(self, segment: Segment) -> None:
        self._segment = segment
        self.shape, self.dtype = segment.mapped.shape, segment.mapped.dtype

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, rows: Any) -> np.ndarray:
        return self._segment.take(np.asarray(rows))


def open_snapshot(out: Path, previous: Snapshot | None = None) -> Snapshot:
    """The newest committed generation of the store in ``out`` (segments shared with ``previous``
    are not mapped or checked again)."""
    tried = -1
    for _ in range(5):
        try:
            return _open_snapshot(out, previous)
        except _Gone as gone:  # a writer committed and collected meanwhile: open the newer generation
            newest = _newest(out / DB)
            if newest == tried:
                raise damaged(Path(str(gone)), "missing", out) from None
            tried = newest
    raise VsekitError(f"{out}: the index changes too fast to open; try again")


def _newest(path: Path) -> int:
    conn = connect(path)
    try:
        return reader.newest_generation(conn)
    finally:
        conn.close()


def _open_snapshot(out: Path, previous: Snapshot | None) -> Snapshot:
    path = out / DB
    witnessed = committed_mark(out)  # read before the snapshot begins: a commit after it is newer still
    conn = connect(path)
    try:
        _quick_check(conn, path)
        reader.begin_read(conn)
        generation = reader.newest_generation(conn)
        check_generation(out, generation, witnessed)
        if generation == 0:
            raise VsekitError(f"{out}: the index has no finished build yet; {build_command(out)} finishes it")
        settings = read_settings(conn, out)
        segments = _load_segments(out, conn, settings, previous)
        count = reader.photo_count(conn)
        if count != sum(s.live for s in segments):
            raise ValueError(f"{count} photo records for {sum(s.live for s in segments)} live rows")
    except (sqlite3.DatabaseError, json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        conn.close()
        raise damaged(path, str(exc) or type(exc).__name__, out) from None
    except BaseException:
        conn.close()
        raise
    return Snapshot(out, conn, generation, settings, segments)


def _load_segments(
    out: Path, conn: sqlite3.Connection, settings: dict, previous: Snapshot | None
) -> list[Segment]:
    dim, dtype = int(settings["model"]["embed_dim"]), settings["dtype"]
    dead = reader.tombstones(conn)
    anns = read_anns(conn, settings)  # checked: a flipped bit in efSearch answered without an error
    shared = {s.n: s for s in previous.segments} if previous is not None else {}
    segments = []
    for n, rows, name, sha in reader.segment_files(conn):
        old = shared.get(n)
        if old is not None:
            vectors, checked = old.mapped, old.checked
        else:
            vectors, checked = _map_segment(out, name, sha, rows, dim, dtype)
        ann, ann_file = anns.get(n), None
        if ann is not None:
            if old is not None and old.ann is not None and old.ann[1] == ann[1]:
                ann_file = old.ann_file
            else:
                try:
                    ann_file = open(out / ann[1], "rb")  # noqa: SIM115 - held by the snapshot
                except FileNotFoundError:
                    raise _Gone(out / ann[1]) from None
                except OSError as exc:
                    raise damaged(out / ann[1], exc.strerror or str(exc), out) from None
        dead_rows = np.asarray(dead.get(n, []), dtype=np.int64)
        segments.append(Segment(n, vectors, dead_rows, ann, ann_file, checked))
    return segments


class LiveVectors:
    """The live vectors of a snapshot as one read-only array-like (``vectors[i]`` is hit id ``i``'s
    vector; ``np.asarray(vectors)`` copies them into one array)."""

    def __init__(self, snapshot: Snapshot) -> None:
        self._snapshot = snapshot
        dims = (
            snapshot.segments[0].vectors.shape[1]
            if snapshot.segments
            else int(snapshot.settings["model"]["embed_dim"])
        )
        self.shape = (len(snapshot), dims)
        self.dtype = np.dtype(snapshot.settings["dtype"])
        self.ndim = 2

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, item: Any) -> np.ndarray:
        if isinstance(item, int | np.integer):
            i = int(item) + (len(self) if item < 0 else 0)
            return self._snapshot.vector(i)
        return np.asarray(self)[item]

    def __iter__(self) -> Iterator[np.ndarray]:
        for segment in self._snapshot.segments:
            keep = np.ones(segment.rows, dtype=bool)
            keep[segment.dead] = False
            yield from np.asarray(segment.vectors)[keep]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        blocks = []
        for segment in self._snapshot.segments:
            if len(segment.dead):
                keep = np.ones(segment.rows, dtype=bool)
                keep[segment.dead] = False
                blocks.append(np.asarray(segment.vectors)[keep])
            else:
                blocks.append(np.asarray(segment.vectors))
        whole = np.concatenate(blocks) if blocks else np.zeros(self.shape, dtype=self.dtype)
        return whole if dtype is None else whole.astype(dtype)

    def __matmul__(self, other: Any) -> np.ndarray:
        return np.asarray(self) @ other


class LivePaths(Sequence[str]):
    """The photo ids of a snapshot by position, read from its database when asked."""

    def __init__(self, snapshot: Snapshot) -> None:
        self._snapshot = snapshot

    def __len__(self) -> int:
        return len(self._snapshot)

    def __getitem__(self, item: Any) -> Any:
        if isinstance(item, slice):
            return self._snapshot.all_paths()[item]
        i = int(item) + (len(self) if item < 0 else 0)
        return self._snapshot.path(i)

    def __iter__(self) -> Iterator[str]:
        return iter(self._snapshot.all_paths())

    def __contains__(self, photo_id: object) -> bool:
        return isinstance(photo_id, str) and self._snapshot.contains(photo_id)

    def __eq__(self, other: object) -> bool:
        return list(self) == list(other) if isinstance(other, Sequence) else NotImplemented
