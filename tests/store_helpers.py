"""What a photo index store holds, for comparing two stores (a killed-and-resumed build with an
uninterrupted one) and for checking that an update wrote nothing."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
from pathlib import Path

import numpy as np

OWN = {".lock", "store.sqlite", "store.sqlite-wal", "store.sqlite-shm"}


def index_content(out: Path) -> dict:
    """Everything an index holds, independent of how it got there: its records (every photo with its
    size, mtime, sha256, folder, date, caption and the bytes of its vector), unreadable files, settings,
    live segment and ANN files by content, the count of segments and tombstones, and every other file
    in the directory (a leftover temp file or an unlisted file shows up here). The database file's own
    bytes are not compared: they carry commit times and SQLite's page layout."""
    conn = sqlite3.connect(f"file:{out / 'store.sqlite'}?mode=ro", uri=True)
    try:
        settings = dict(conn.execute("SELECT key, value FROM settings WHERE key != 'next_segment'"))
        maps = {
            n: np.load(out / name, mmap_mode="r") for n, name in conn.execute("SELECT n, file FROM segments")
        }
        photos = [
            (*row[:7], maps[row[7]][row[8]].tobytes())
            for row in conn.execute(
                "SELECT id, size, mtime_ns, sha256, folder, taken, caption, segment, row "
                "FROM photos ORDER BY id"
            )
        ]
        failed = conn.execute("SELECT * FROM failed ORDER BY id").fetchall()
        listed = {name for (name,) in conn.execute("SELECT name FROM files WHERE state = 'live'")}
        counts = conn.execute(
            "SELECT (SELECT count(*) FROM segments), (SELECT count(*) FROM tombstones)"
        ).fetchone()
        states = sorted(conn.execute("SELECT state, count(*) FROM files GROUP BY state").fetchall())
    finally:
        conn.close()
    files = {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file() and p.name not in OWN}
    return {
        "settings": settings,
        "photos": photos,
        "failed": failed,
        "segments, tombstones": counts,
        "file states": states,
        "live files": sorted(hashlib.sha256((out / n).read_bytes()).hexdigest() for n in listed),
        "unlisted files": sorted(files - listed),
    }


def copy_index(photos: Path, index: Path, to: Path, name: str = "photos") -> tuple[Path, Path]:
    """A copy of a photo folder and its index under ``to`` (``name/``, ``index/``), the copy's settings
    naming the copied folder (set through the store, as no command does): ``(photos, index)``."""
    from vsekit.retrieval.store import Store

    mine, out = to / name, to / "index"
    shutil.copytree(photos, mine)
    shutil.copytree(index, out)
    store = Store.open(out)
    try:
        store.set_settings({"photos": str(mine)})
    finally:
        store.close()
    return mine, out
