"""Damage: the one line a damaged index file gets (with the build that repairs it), which SQLite errors
are damage, and the checks of a record's CRC and of the database's generation against its mark."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vsekit.errors import VsekitError, command
from vsekit.retrieval.store.layout import DB, GENERATION_MARK
from vsekit.retrieval.store.rows import row_crc
from vsekit.retrieval.store.settings import recorded_source

__all__ = ["build_command", "check_generation", "check_row", "damaged", "is_damage"]


def damaged(path: Path, why: str, out: Path) -> VsekitError:
    """The one line a damaged index file gets, with the build that repairs it (:func:`build_command`)."""
    why = " ".join(str(why).split())[:200]
    return VsekitError(f"{path}: damaged index file ({why}); {build_command(out)} will rebuild it")


def build_command(
    out: Path | str, photos: str | os.PathLike[str] | None = None, model: str | None = None, *extra: str
) -> str:
    """The ``vsekit index build`` command that builds the index ``out`` from ``photos`` with the model named
    ``model`` (a shipped name or a model file; the default ``vse`` needs no ``--model``), as a hint prints
    it. Without ``photos``, the photo folder and model are those the index records, when it can still say
    (:func:`recorded_source`); else the hint says PHOTOS."""
    if photos is None:
        photos, recorded = recorded_source(Path(out))
        model = recorded if model is None else model
    words = ["index", "build", photos or "PHOTOS", "--out", out]
    words += ["--model", model] if model not in (None, "vse") else []
    return command(*words, *extra)


def is_damage(exc: sqlite3.Error) -> bool:
    """An SQLite error that says the database file is damaged (not locked, not a full disk)."""
    name = getattr(exc, "sqlite_errorname", "") or ""
    return name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")) or type(exc) is sqlite3.DatabaseError


def check_row(row: Sequence[Any], out: Path) -> tuple:
    """``row`` = values + crc as read; the values, or the damaged-index error."""
    *values, crc = row
    if row_crc(*values) != crc:
        raise damaged(out / DB, "a photo record does not match its checksum", out)
    return tuple(values)


def check_generation(out: Path, generation: int, witnessed: int | None) -> None:
    """A database older than the generation its mark witnessed lost committed work: damaged."""
    if witnessed is not None and generation < witnessed:
        raise damaged(
            out / DB,
            f"it holds generation {generation}, but generation {witnessed} was committed "
            f"({GENERATION_MARK}): its write-ahead log {DB}-wal was lost or damaged",
            out,
        )
