"""The index directory outside the database: its file names, the generation mark, the writers' lock, the
refusal to write into a folder that holds something else, and mapping a segment file."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from vsekit.errors import VsekitError

__all__ = [
    "DB",
    "GENERATION_MARK",
    "LEGACY_LEDGER",
    "LEGACY_MANIFEST",
    "LOCK",
    "SEGMENTS",
    "check_out_dir",
    "committed_mark",
    "is_remnant",
    "map_npy",
    "segment_name",
    "write_generation_mark",
    "writer_lock",
]

logger = logging.getLogger(__name__)

DB, LOCK, LEGACY_MANIFEST, SEGMENTS = "store.sqlite", ".lock", "index.json", "segments"
#: The list of owned files of the JSON-manifest format's last version (converted like its manifest).
LEGACY_LEDGER = ".vsekit-owned.json"
#: The newest committed generation, written after each commit, outside the database: a database
#: whose write-ahead log was lost or damaged opens at an older generation without any SQLite error
#: (a WAL frame that fails its checksum ends the log there), so readers compare the two.
GENERATION_MARK = f"{SEGMENTS}/generation"


def segment_name(n: int) -> str:
    """Segment ``n``'s file, relative to the index directory (as the ``files`` ledger names it)."""
    return f"{SEGMENTS}/{n}.npy"


_NPY_HEADER_LOCK = threading.Lock()


def map_npy(path: Path) -> np.ndarray:
    """``np.load(path, mmap_mode="r")``, one header at a time in a process: numpy parses a .npy header
    with ``ast.literal_eval``, and CPython 3.11 can fail AST constructions that run at once in two
    threads ("SystemError: AST constructor recursion depth mismatch"; a server's reader and a writer
    thread did). The mapping itself is not serialised."""
    with _NPY_HEADER_LOCK:
        return np.load(path, mmap_mode="r")


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
