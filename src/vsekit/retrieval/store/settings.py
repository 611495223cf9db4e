"""The ``settings`` table: its rows as stored (JSON texts), their writing with the ``check`` setting that
covers them, and the photo folder and model a hint names (the checked read is
:func:`vsekit.retrieval.store.reader.read_settings`)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from vsekit.retrieval.store.layout import DB, LEGACY_MANIFEST
from vsekit.retrieval.store.rows import settings_check

__all__ = [
    "STORE_FORMAT",
    "STORE_VERSION",
    "legacy_settings",
    "next_segment",
    "recorded_source",
    "set_next_segment",
    "stored_settings",
    "write_settings",
]

#: The ``format`` and ``format_version`` settings. Version 2: the ``ann`` and ``chunks`` records carry a
#: CRC like the photo records. Version 3: files are checksummed by block (CRC-32s,
#: :mod:`vsekit.retrieval.store.blocks`), not by a sha256 of the whole file. Older stores are read as
#: they are and upgraded by their next writer (:meth:`vsekit.retrieval.store.writer.Store.open`).
STORE_FORMAT, STORE_VERSION = "vsekit.photo-store", 3


def stored_settings(conn: sqlite3.Connection) -> dict[str, str]:
    """Every setting as stored (JSON text), ``check`` and ``next_segment`` included."""
    return dict(conn.execute("SELECT key, value FROM settings"))


def write_settings(c: sqlite3.Connection, values: dict[str, Any]) -> None:
    """Store ``values`` (JSON) and the checksum over every setting, inside the caller's transaction."""
    c.executemany(
        "INSERT OR REPLACE INTO settings VALUES (?, ?)",
        [(k, json.dumps(v, sort_keys=True)) for k, v in values.items()],
    )
    stored = dict(c.execute("SELECT key, value FROM settings WHERE key NOT IN ('check', 'next_segment')"))
    c.execute("INSERT OR REPLACE INTO settings VALUES ('check', ?)", (settings_check(stored),))


def legacy_settings(c: sqlite3.Connection, values: dict[str, Any]) -> None:
    """The settings of an index in the format before the store, as its read-only view holds them (no
    ``check``: nothing writes them, and nothing reads them back from a file)."""
    c.executemany("INSERT INTO settings VALUES (?, ?)", [(k, json.dumps(v)) for k, v in values.items()])


def next_segment(c: sqlite3.Connection) -> int:
    """The segment counter (1 in a store that has none), inside the caller's transaction."""
    row = c.execute("SELECT value FROM settings WHERE key = 'next_segment'").fetchone()
    return json.loads(row[0]) if row else 1


def set_next_segment(c: sqlite3.Connection, n: int) -> None:
    c.execute("INSERT OR REPLACE INTO settings VALUES ('next_segment', ?)", (json.dumps(n),))


def recorded_source(out: Path) -> tuple[str | None, str | None]:
    """``(photo folder, model name)`` as the settings of the index in ``out`` record them, best effort (a
    hint's words): ``(None, None)`` when it cannot say (no database, unreadable or damaged settings)."""
    try:
        if not (out / DB).is_file():
            manifest = json.loads((out / LEGACY_MANIFEST).read_text(encoding="utf-8"))
            return str(manifest["photos"]) or None, str(manifest["model"]["name"])
        conn = sqlite3.connect(out / DB, timeout=1)
        try:
            stored = stored_settings(conn)
        finally:
            conn.close()
        check = stored.pop("check", None)
        stored.pop("next_segment", None)
        if check != settings_check(stored):  # damaged settings: their words are no advice
            return None, None
        return str(json.loads(stored["photos"])) or None, str(json.loads(stored["model"])["name"])
    except (OSError, sqlite3.Error, ValueError, KeyError, TypeError):
        return None, None
