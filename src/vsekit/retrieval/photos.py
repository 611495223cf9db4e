"""A folder of photos as the index sees it: which files, their identity, what changed since last time.

A photo's identity is its size and modification time (cheap, from ``stat``) and the sha256 of its bytes
(read once, while it is decoded for embedding). :func:`plan_update` compares a scan of the folder with the
entries an index already holds: an entry whose size and mtime are unchanged is kept without reading the
file; anything else is (re)read, and keeps its old embedding if its bytes turn out to be the same.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from PIL import Image

from vsekit.data.images import ImageCollection
from vsekit.errors import ImageError
from vsekit.vision.preprocess import load_image

__all__ = ["PhotoEntry", "PhotoFile", "UpdatePlan", "plan_update", "read_photo", "scan_folder"]


@dataclass(frozen=True)
class PhotoFile:
    """A photo on disk now: its id (path relative to the folder, POSIX form), path, size and mtime."""

    id: str
    path: Path
    size: int
    mtime_ns: int


@dataclass(frozen=True)
class PhotoEntry:
    """A photo as an index recorded it (``sha256`` of the bytes that were embedded)."""

    id: str
    size: int
    mtime_ns: int
    sha256: str

    def same_stat(self, photo: PhotoFile) -> bool:
        return (self.size, self.mtime_ns) == (photo.size, photo.mtime_ns)


@dataclass
class UpdatePlan:
    """What an update does: keep ``kept`` (unchanged stat), read ``todo`` (new or changed stat), drop
    ``removed`` (gone from disk); ``still_failed`` are unreadable files seen before and unchanged since."""

    kept: list[PhotoEntry]
    todo: list[PhotoFile]
    removed: list[str]
    still_failed: dict[str, dict]

    @property
    def changes_nothing(self) -> bool:
        return not self.todo and not self.removed


def scan_folder(folder: str | Path) -> list[PhotoFile]:
    """Every photo under ``folder`` (see :meth:`ImageCollection.from_folder`), sorted by id."""
    collection = ImageCollection.from_folder(folder)
    photos = []
    for image_id, path in collection.images.items():
        try:
            st = path.stat()
        except OSError:  # vanished between the listing and the stat
            continue
        photos.append(PhotoFile(image_id, path, st.st_size, st.st_mtime_ns))
    return photos


def plan_update(
    photos: list[PhotoFile], entries: Mapping[str, PhotoEntry], failed: Mapping[str, dict]
) -> UpdatePlan:
    """Compare a scan with an index's ``entries`` and ``failed`` files (``{id: {size, mtime_ns, ...}}``)."""
    on_disk = {p.id: p for p in photos}
    kept, todo, still_failed = [], [], {}
    for photo in photos:
        entry = entries.get(photo.id)
        bad = failed.get(photo.id)
        if entry is not None and entry.same_stat(photo):
            kept.append(entry)
        elif bad is not None and (bad["size"], bad["mtime_ns"]) == (photo.size, photo.mtime_ns):
            still_failed[photo.id] = dict(bad)
        else:
            todo.append(photo)
    removed = sorted(i for i in entries if i not in on_disk)
    return UpdatePlan(kept=kept, todo=todo, removed=removed, still_failed=still_failed)


def read_photo(photo: PhotoFile) -> tuple[str, Image.Image | None, str | None]:
    """``(sha256, RGB image, None)`` or ``(sha256 or "", None, error naming the file)``.

    The bytes are read once: hashed, then decoded exactly as the feature path decodes a file (complete
    decode, first frame of a GIF, RGB).
    """
    try:
        data = photo.path.read_bytes()
    except OSError as exc:
        return "", None, f"{photo.path}: cannot read ({exc.strerror or exc})"
    sha = hashlib.sha256(data).hexdigest()
    try:
        return sha, load_image(io.BytesIO(data)), None
    except ImageError as exc:
        reason = str(exc.__cause__ or exc) or type(exc.__cause__).__name__
        return sha, None, f"{photo.path}: cannot read image ({reason})"
