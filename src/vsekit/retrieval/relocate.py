"""Re-pointing an index at its photos' new folder (``vsekit index relocate INDEX NEWDIR``): a photo folder
moved, renamed or mounted elsewhere keeps its index, with no photo embedded again.

The index records its photo folder as the ``photos`` setting of its store. Relocating first checks that
``NEWDIR`` holds the index's photos: every indexed photo must be there with the size the index recorded,
and a sample of them (:data:`SAMPLE`, spread evenly over the sorted paths; every one with ``check_all``)
must have the recorded sha256. Any photo missing, of another size or with other bytes refuses the move,
naming them; the index then still points at its old folder. Then one commit changes the setting: a new
generation with the same segments and records, which a running ``vsekit serve`` follows like any other.

A photo whose modification time changed on the way (a copy that does not keep times) is read again by the
next update, which finds the same bytes and keeps its vector. An index in the format before the store is
converted (its vectors copied into the store, not embedded again) in the same step.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from vsekit.errors import VsekitError, command, printable
from vsekit.fileio import file_sha256
from vsekit.retrieval.legacy import migrate, read_manifest
from vsekit.retrieval.opening import open_for_reading
from vsekit.retrieval.store import Store, StoreChange, writer_lock

__all__ = ["SAMPLE", "Relocation", "moved_hint", "relocate"]

#: Photos whose sha256 is compared when ``check_all`` is off (every photo's size always is).
SAMPLE = 32


@dataclass(frozen=True)
class Relocation:
    """What a relocation did: the old and new photo folders, how many indexed photos were found there with
    their recorded size (``checked``) and how many of those were read and compared by sha256
    (``hashed``); ``moved`` is False when the index already pointed at that folder."""

    old: str
    new: str
    checked: int
    hashed: int
    moved: bool


def moved_hint(index: Path | str) -> str:
    """The words that name the command for a photo folder that moved (the end of an error's line)."""
    return f"if the photos moved, {command('index', 'relocate', index, 'NEWDIR')} points the index at them"


def relocate(out: Path | str, photos_dir: Path | str, *, check_all: bool = False) -> Relocation:
    """Point the index in ``out`` at ``photos_dir`` after checking that it holds the index's photos (module
    docstring); a refusal is one line naming the photos that differ."""
    out, new = Path(out), Path(photos_dir).expanduser().resolve()
    open_for_reading(out).close()  # not an index, or a damaged one: its own line, before the lock
    if not new.is_dir():
        raise VsekitError(f"{printable(str(new))}: not a folder (give the folder that holds {out}'s photos)")
    with writer_lock(out):
        store = Store.open(out, create=True)  # there already, or beside an index in the old format
        try:
            return _relocate(store, new, check_all)
        finally:
            store.close()


def _relocate(store: Store, new: Path, check_all: bool) -> Relocation:
    manifest = read_manifest(store.out) if not store.generation() else None
    if manifest is not None:
        old = str(manifest["photos"])
        records = {str(i): (int(s), str(h)) for i, s, _, h in manifest["entries"]}
    else:
        old = str(store.settings()["photos"])
        records = {i: (r[0], r[2]) for i, r in store.photos().items()}
    if Path(old) == new:
        return Relocation(old, str(new), 0, 0, moved=False)
    checked, hashed = check_same_photos(records, new, check_all, f"{store.out} still points at {old}")
    if manifest is not None:
        migrate(store, manifest)
    store.commit(StoreChange(settings={"photos": str(new)}))
    return Relocation(old, str(new), checked, hashed, moved=True)


def check_same_photos(
    records: dict[str, tuple[int, str]], folder: Path, check_all: bool, still: str
) -> tuple[int, int]:
    """``(photos found with their size, photos compared by sha256)`` when ``folder`` holds the photos of
    ``records`` (``{id: (size, sha256)}``), else the one-line refusal (``still``: what stays as it was)."""
    ids = sorted(records)
    missing, resized = [], []
    for photo_id in ids:
        try:
            size = os.stat(folder / photo_id).st_size
        except OSError:
            missing.append(photo_id)
            continue
        if size != records[photo_id][0]:
            resized.append(photo_id)
    differ = set(missing) | set(resized)
    same_size = [i for i in ids if i not in differ]
    sample = same_size if check_all else _spread(same_size, SAMPLE)
    other = [i for i in sample if file_sha256(folder / i) != records[i][1]]
    if missing or resized or other:
        problems = [
            _some(missing, len(ids), "not there"),
            _some(resized, len(ids), "of another size"),
            _some(other, len(sample), "with other bytes", "compared"),
        ]
        found = "; ".join(p for p in problems if p)
        raise VsekitError(f"{printable(str(folder))}: not the photos of this index ({found}); {still}")
    return len(same_size), len(sample)


def _spread(ids: list[str], n: int) -> list[str]:
    """``n`` of ``ids`` spread evenly over them (all of them when there are no more than ``n``)."""
    if len(ids) <= n:
        return list(ids)
    return [ids[(k * len(ids)) // n] for k in range(n)]


def _some(ids: list[str], of: int, what: str, among: str = "indexed") -> str:
    if not ids:
        return ""
    shown = ", ".join(printable(i) for i in ids[:3]) + (", ..." if len(ids) > 3 else "")
    return f"{len(ids)} of {of} {among} photos {what}: {shown}"
