"""Which files in an index directory the index wrote: the only files it may ever delete.

An index directory may be shared with a person's own files (``--out`` pointed at a folder that already
holds photos, or files dropped into the index folder later). Deleting by name pattern ("everything that
starts with ``embeddings-``") once removed a user's ``embeddings-2020.jpg`` and a ``pending/`` folder of
documents. So the index keeps a ledger, ``.vsekit-owned.json``: a file's name is added to it (and the
ledger written atomically) *before* the file is created, and the index deletes a file only if its name
is in the ledger (or is the atomic writer's temp name of such a file, ``.<name>.tmp``). A kill between
the two steps leaves a name whose file does not exist, which is harmless.

A directory that exists, is not empty and holds neither a ledger nor an index manifest is not an index:
:func:`check_out_dir` refuses it before anything is written there.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path

from vsekit.errors import VsekitError
from vsekit.fileio import atomic_write_json

__all__ = ["LEDGER", "Ownership", "check_out_dir"]

logger = logging.getLogger(__name__)

LEDGER = ".vsekit-owned.json"
_LEDGER_FORMAT = "vsekit.owned-files"
#: Files an index directory of an older vsekit may hold besides its manifest's files (its lock).
_HARMLESS = {".lock"}


def check_out_dir(out: Path, manifest_name: str) -> None:
    """Refuse an ``--out`` that is a file, or a non-empty folder that is not a vsekit index."""
    if not out.exists():
        return
    if not out.is_dir():
        raise VsekitError(f"{out}: --out must be a folder for the index, and this is a file")
    if (out / LEDGER).is_file() or (out / manifest_name).is_file():
        return
    others = sorted(p.name for p in out.iterdir() if p.name not in _HARMLESS)
    if others:
        shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
        raise VsekitError(
            f"{out}: this folder holds other files ({shown}) and no vsekit index; "
            "give --out a new or empty folder (vsekit never deletes files it did not write)"
        )


class Ownership:
    """The ledger of one index directory (use it under the index's writer lock)."""

    def __init__(self, out: Path, legacy: Iterable[str] = ()) -> None:
        self.out = out
        self.path = out / LEDGER
        self.names: set[str] = set()
        if self.path.is_file():
            self.names = self._read()
        elif legacy:  # an index written before the ledger: its manifest names what it owns
            self.own(*legacy)

    def _read(self) -> set[str]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            if data.get("format") != _LEDGER_FORMAT or not isinstance(data.get("files"), list):
                raise ValueError("not a vsekit ledger")
            return {str(name) for name in data["files"]}
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            # Unreadable ledger: own nothing (and so delete nothing) rather than guess.
            logger.warning("%s: unreadable list of the index's files (%s); deleting nothing", self.path, exc)
            return set()

    def _write(self) -> None:
        atomic_write_json(self.path, {"format": _LEDGER_FORMAT, "files": sorted(self.names)}, indent=0)

    def own(self, *names: str) -> None:
        """Record ``names`` (relative to the index directory) as the index's, before they are written."""
        new = {n for n in names if n} - self.names
        if new:
            self.names |= new
            self._write()

    def release(self, names: Iterable[str]) -> None:
        """Delete the named files (and their temp files) that the ledger lists; forget them."""
        gone = [n for n in names if n in self.names]
        for name in gone:
            path = self.out / name
            for candidate in (path, path.with_name(f".{path.name}.tmp")):
                if candidate.is_file() or candidate.is_symlink():
                    candidate.unlink(missing_ok=True)
        if gone:
            self.names -= set(gone)
            self._write()

    def drop_temp_files(self, names: Iterable[str]) -> None:
        """Remove leftover temp files (``.<name>.tmp``) of owned files that stay."""
        for name in names:
            if name in self.names:
                tmp = (self.out / name).with_name(f".{Path(name).name}.tmp")
                if tmp.is_file():
                    tmp.unlink(missing_ok=True)

    def remove_dir_if_empty(self, name: str) -> None:
        """Remove the sub-folder ``name`` if the index made it and nothing else is in it."""
        path = self.out / name
        if path.is_dir() and not any(path.iterdir()):
            try:
                os.rmdir(path)
            except OSError as exc:
                logger.debug("kept %s (%s)", path, exc)
