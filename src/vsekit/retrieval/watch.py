"""Keep an index current with its photo folder while files come and go (``vsekit index update --watch``).

Every ``every`` seconds the watcher walks the photo folder (one ``stat`` per file, no file is read) and
compares the walk with the one of its last round that found nothing to do: when nothing changed, that
is all a round costs. Otherwise it scans the folder as an update does and compares the scan with the
index's records (size and mtime; the records are read again only after a commit). When files were
added, changed or removed, the round is an ordinary
:meth:`Index.update <vsekit.retrieval.index.Index.update>`: new and changed files are read and embedded
(a file touched but with the same bytes keeps its vector), removed ones dropped, all in one committed
generation, which a running ``vsekit serve`` picks up a second later.

**Debounce.** A new or changed file is read only once its size and mtime have stayed the same for
``settle`` seconds, as seen by the watcher (a file being copied or saved keeps changing both). Until
then the update leaves it out: it is neither added nor, if an older version was indexed, dropped, so a
half-copied photo is never embedded, nor recorded as unreadable. While files wait, the watcher looks
again after ``settle`` seconds rather than ``every``.

**Resumable.** Each round commits a generation; a watcher stopped or killed inside a round leaves the
generation before it (plus the round's finished chunks, which the next update reuses), and a restarted
watcher continues from there.

A photo folder that is missing, or holds no photo while the index holds some (a drive not mounted), is
a warning, and the index is left as it is.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from vsekit.errors import ConfigMismatchError, VsekitError
from vsekit.retrieval.index import Index
from vsekit.retrieval.photos import PhotoEntry, PhotoFile, UpdatePlan, plan_update, scan_photos
from vsekit.retrieval.store import DB, id_text
from vsekit.retrieval.store.reader import records_since
from vsekit.retrieval.store.schema import open_probe

__all__ = ["DEFAULT_EVERY_S", "DEFAULT_SETTLE_S", "WatchRound", "Watcher", "watch"]

logger = logging.getLogger(__name__)

#: Seconds between two looks at the folder.
DEFAULT_EVERY_S = 5.0
#: Seconds a new or changed file's size and mtime must stay the same before it is read.
DEFAULT_SETTLE_S = 2.0
#: A round reading at least this many files shows a progress bar (when progress is asked for).
_PROGRESS_FROM = 64


@dataclass
class WatchRound:
    """What one round that updated the index did: photo ids ``added``, ``changed`` (other bytes) and
    ``removed``; ``unreadable``: the files read in this round that could not be decoded (id -> reason);
    ``count`` and ``generation`` of the index after it; ``waiting``: files left for a later round (still
    being written); ``seconds`` the round took."""

    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    unreadable: dict[str, str] = field(default_factory=dict)
    count: int = 0
    generation: int = 0
    waiting: int = 0
    seconds: float = 0.0

    @property
    def changed_anything(self) -> bool:
        """False for a round that only saw touched files (same bytes): nothing a search would notice."""
        return bool(self.added or self.changed or self.removed or self.unreadable)


class _Settling:
    """When each pending file was first seen with its current size and mtime (pending files only)."""

    def __init__(self, settle_s: float, clock: Callable[[], float]) -> None:
        self.settle_s, self.clock = settle_s, clock
        self.seen: dict[str, tuple[int, int, float]] = {}

    def look(self, pending: list[PhotoFile]) -> None:
        now, seen = self.clock(), {}
        for p in pending:
            old = self.seen.get(p.id)
            since = old[2] if old is not None and old[:2] == (p.size, p.mtime_ns) else now
            seen[p.id] = (p.size, p.mtime_ns, since)
        self.seen = seen

    def ready(self, photo: PhotoFile) -> bool:
        """Seen with this very size and mtime at least ``settle_s`` ago (what the update reads now)."""
        old = self.seen.get(photo.id)
        return (
            old is not None
            and old[:2] == (photo.size, photo.mtime_ns)
            and self.clock() - old[2] >= self.settle_s
        )


class _Records:
    """The index's newest committed records, read over the watcher's own connection, again only when a
    generation was committed since (a round that finds none costs one small query). No read transaction
    is held between rounds, so the watcher never keeps SQLite from folding its log back."""

    def __init__(self, index: Index) -> None:
        self.path = index.path / DB
        self.conn: sqlite3.Connection | None = None
        self.generation = -1
        self.known: tuple[dict[str, PhotoEntry], dict[str, dict]] = ({}, {})

    def read(self) -> tuple[dict[str, PhotoEntry], dict[str, dict]] | None:
        """``({id: entry}, {id: unreadable file})``, or None where there is no store to read (an index in
        the old format, which the next update converts) or it cannot be read (the update says why)."""
        if not self.path.is_file():
            return None
        try:
            if self.conn is None:
                self.conn = open_probe(self.path)
            newer = records_since(self.conn, self.generation)
            if newer is not None:
                self.generation, photos, failed = newer
                self.known = _entries(photos), failed
        except sqlite3.Error as exc:
            logger.debug("%s: records not read (%s)", self.path, exc)
            self.close()
            return None
        return self.known

    def close(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self.conn.close()
            self.conn, self.generation = None, -1


def _entries(rows: list[tuple]) -> dict[str, PhotoEntry]:
    entries = {}
    for raw, size, mtime_ns, sha in rows:
        photo_id = id_text(raw)
        entries[photo_id] = PhotoEntry(photo_id, size, mtime_ns, sha)
    return entries


class Watcher:
    """One index and its folder, looked at round by round (:func:`watch` runs the rounds)."""

    def __init__(
        self,
        index: Index,
        settle: float = DEFAULT_SETTLE_S,
        *,
        progress: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if settle < 0:
            raise VsekitError(f"settle must be >= 0 seconds, got {settle:g}")
        self.index, self.progress = index, progress
        self.settling = _Settling(settle, clock)
        self.records = _Records(index)
        self.waiting = 0
        self._said: str | None = None  # the last warning (see warn_once)
        self._quiet: tuple[list[tuple], int] | None = None  # the quick look of the last idle round

    def round(self) -> WatchRound | None:
        """Look once; update the index if a file was added, changed (and has settled) or removed.
        Returns what the update did, or None when there was nothing to do yet."""
        started = time.monotonic()
        self.index.maybe_refresh(every_s=0.0)  # another writer's update: hold its generation
        quick = self._quick_look()
        if quick is not None and quick == self._quiet:
            return None  # nothing changed since a look that found nothing to do
        self._quiet = None
        plan = self._look()
        if plan is None:
            self.waiting = 0
            return None
        ready = [p for p in plan.todo if self.settling.ready(p)]
        self.waiting = len(plan.todo) - len(ready)
        if self.waiting:
            logger.debug("%d file(s) still changing; read in a later round", self.waiting)
        if not ready and not plan.removed:
            self._quiet = quick if not plan.todo else None
            return None
        progress = self.progress and len(ready) >= _PROGRESS_FROM
        report = self.index.update(progress=progress, ready=self.settling.ready)
        read = {p.id for p in ready}
        done = WatchRound(
            added=report.added,
            changed=report.changed,
            removed=report.removed,
            unreadable={i: e for i, e in report.failed.items() if i in read},
            count=len(self.index),
            generation=self.index.generation(),
            waiting=self.waiting,
            seconds=time.monotonic() - started,
        )
        logger.info(
            "%s: %d added, %d changed, %d removed, %d unreadable in %.1f s (generation %d, %d photos)",
            self.index.path, len(done.added), len(done.changed), len(done.removed), len(done.unreadable),
            done.seconds, done.generation, done.count,
        )  # fmt: skip
        self._said = None
        return done

    def _quick_look(self) -> tuple[list[tuple], int] | None:
        """The folder's walk and the index's generation (None: the folder cannot be walked)."""
        try:
            walk = _walk(self.index.photos_dir)
        except OSError:
            return None
        return walk, self.index.generation()

    def _look(self) -> UpdatePlan | None:
        """The update the folder asks for now (None: nothing to compare, or the folder is unavailable)."""
        scan = scan_photos(self.index.photos_dir)
        known = self.records.read()
        if known is None:  # no store to compare with: let an update convert or repair it
            return UpdatePlan(kept=[], todo=list(scan.photos), removed=[], still_failed={})
        entries, failed = known
        if not scan.photos and entries:
            self.warn_once(
                f"{scan.folder}: no photos in the folder (a drive not mounted?); the index keeps its "
                f"{len(entries)} photos until photos are back"
            )
            return None
        plan = plan_update(scan.photos, entries, failed)
        self.settling.look(plan.todo)
        return plan

    def warn_once(self, message: str) -> None:
        """Log ``message`` unless it was the last warning (a missing folder is said once, not per round)."""
        if message != self._said:
            logger.warning("%s", message)
            self._said = message

    def close(self) -> None:
        self.records.close()


def _walk(folder: Path) -> list[tuple]:
    """Every entry under ``folder`` (names starting with "." left out, folders not followed through links,
    as :func:`~vsekit.retrieval.photos.scan_photos` walks) with its mode, size and mtime as ``stat``
    sees it through links. Six times cheaper than the scan (no path objects, no rules; 0.07 against
    0.44 s for 30,000 files): a round compares it with the walk of the last round that found nothing
    to do, and any difference (even of order) means a full look. It covers everything the scan looks
    at, so an unchanged walk means an unchanged scan."""
    found: list[tuple] = []
    root = os.fspath(folder)
    pending = [root]
    while pending:
        path = pending.pop()
        try:
            with os.scandir(path) as listing:
                for entry in listing:
                    if entry.name.startswith("."):
                        continue
                    if entry.is_dir(follow_symlinks=False):
                        pending.append(entry.path)
                        continue
                    try:
                        st = entry.stat()
                    except OSError as exc:
                        found.append((entry.path, exc.errno))
                        continue
                    found.append((entry.path, st.st_mode, st.st_size, st.st_mtime_ns))
        except OSError as exc:
            if path == root:
                raise
            found.append((path, exc.errno))
    return found


def watch(
    index: Index,
    every: float = DEFAULT_EVERY_S,
    settle: float = DEFAULT_SETTLE_S,
    *,
    stop: threading.Event | None = None,
    on_round: Callable[[WatchRound], None] | None = None,
    progress: bool = False,
) -> None:
    """Keep ``index`` current with its photo folder until ``stop`` is set (see the module docstring).

    Every ``every`` seconds the folder is looked at; a new or changed file is read once it has stayed the
    same for ``settle`` seconds. ``on_round`` is called with each round that updated the index. Setting
    ``stop`` ends the loop at once between rounds, or after the round in progress (a KeyboardInterrupt,
    Ctrl-C, interrupts a round: the store keeps its last generation). A round that fails (a folder not
    mounted, a full disk) is logged once and tried again a round later; an index whose model changed is
    an error.
    """
    if not every > 0:
        raise VsekitError(f"every must be > 0 seconds, got {every:g}")
    stop = stop or threading.Event()
    watcher = Watcher(index, settle, progress=progress)
    logger.info("watching %s every %g s (files settle for %g s)", index.photos_dir, every, settle)
    try:
        while not stop.is_set():
            try:
                done = watcher.round()
            except ConfigMismatchError:
                raise
            except (VsekitError, OSError, sqlite3.Error) as exc:
                watcher.warn_once(f"{index.path}: not updated ({exc}); trying again")
                done = None
            if done is not None and on_round is not None:
                on_round(done)
            waiting = watcher.waiting and settle > 0
            stop.wait(min(every, settle) if waiting else every)
    finally:
        watcher.close()
