"""The store's named rows: photo ids as stored, the records a commit writes, and the checksums each kind of
record carries (SQLite keeps no checksum of its pages, so a flipped bit in a record would otherwise go
unnoticed; readers check the records they use)."""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

import numpy as np

__all__ = [
    "ANN_COLUMNS",
    "PHOTO_COLUMNS",
    "NewSegment",
    "PhotoRecord",
    "StoreChange",
    "ann_crc",
    "concepts_crc",
    "folder_of",
    "id_bytes",
    "id_text",
    "pack_concepts",
    "photo_values",
    "row_crc",
    "settings_check",
    "unpack_concepts",
]


# ----------------------------------------------------------------------------- ids and folders
def id_bytes(photo_id: str) -> bytes:
    """A photo id as stored (UTF-8; a file name that is not valid UTF-8 keeps its bytes)."""
    return photo_id.encode("utf-8", "surrogateescape")


def id_text(stored: bytes) -> str:
    return bytes(stored).decode("utf-8", "surrogateescape")


def folder_of(photo_id: str) -> str:
    """The folder part of an id (``""`` for a photo at the top of the photo folder)."""
    parent = str(PurePosixPath(photo_id).parent)
    return "" if parent == "." else parent


# ----------------------------------------------------------------------------- checksums
#: The columns of a photo record that its ``crc`` covers, in order.
PHOTO_COLUMNS = "id, size, mtime_ns, sha256, folder, taken, caption, segment, row"
#: The columns of an ``ann`` record that its ``crc`` covers: its search settings (efSearch, nprobe,
#: candidates) change the answers, and one flipped bit in them was served without an error.
ANN_COLUMNS = "segment, engine, file, params"


def row_crc(*values: Any) -> int:
    """CRC-32 of a record's values (photo records, tombstones, chunks; see the module docstring)."""
    return zlib.crc32(
        repr(tuple(bytes(v) if isinstance(v, bytes | memoryview) else v for v in values)).encode()
    )


def ann_crc(segment: int, engine: str, file: str, params: str) -> int:
    """The CRC of an ``ann`` record (``params`` as stored: JSON text)."""
    return row_crc(segment, engine, file, params)


def settings_check(values: dict[str, str]) -> str:
    """The checksum of the settings (their JSON texts), kept as the ``check`` setting."""
    return json.dumps(zlib.crc32(json.dumps(sorted(values.items())).encode()))


# ----------------------------------------------------------------------------- concepts
def pack_concepts(ids: np.ndarray, probs: np.ndarray) -> bytes:
    """A photo's top ImageNet classes as stored: ``T`` little-endian uint16 ids, then ``T`` float32
    probabilities (the concept route, :mod:`vsekit.retrieval.concepts`)."""
    return np.asarray(ids, dtype="<u2").tobytes() + np.asarray(probs, dtype="<f4").tobytes()


def unpack_concepts(blob: bytes, top: int) -> tuple[np.ndarray, np.ndarray]:
    """``(ids [top], probs [top])`` of a stored row; ValueError when it has another length."""
    if len(blob) != 6 * top:
        raise ValueError(f"a concepts row of {len(blob)} bytes (expected {6 * top})")
    return np.frombuffer(blob, "<u2", top, 0), np.frombuffer(blob, "<f4", top, 2 * top)


def concepts_crc(sha256: str, blob: bytes) -> int:
    return zlib.crc32(sha256.encode() + bytes(blob))


# ----------------------------------------------------------------------------- what a commit changes
@dataclass(frozen=True)
class PhotoRecord:
    """One photo as the store records it (``taken``: EXIF DateTimeOriginal as ISO text, or None)."""

    id: str
    size: int
    mtime_ns: int
    sha256: str
    taken: str | None = None
    caption: str | None = None


def photo_values(photo: PhotoRecord, segment: int, row: int, caption: str | None) -> tuple:
    """The values of ``photo``'s record at (``segment``, ``row``), in :data:`PHOTO_COLUMNS` order."""
    key = id_bytes(photo.id)
    folder = id_bytes(folder_of(photo.id))
    return (key, photo.size, photo.mtime_ns, photo.sha256, folder, photo.taken, caption, segment, row)


@dataclass
class NewSegment:
    """A written segment file: number, its photos in row order, its checksum (block CRCs in the field
    named ``sha256``, like the column; :mod:`.blocks`) and an ANN over it."""

    n: int
    photos: list[PhotoRecord]
    sha256: str
    ann: tuple[str, str, dict[str, int]] | None = None  # (engine, file, params)


@dataclass
class StoreChange:
    """Everything one generation changes (committed in one transaction by :meth:`Store.commit`)."""

    segments: list[NewSegment] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)  # photo ids no longer in the index
    failed: dict[str, dict] | None = None  # the whole table of unreadable files (None: unchanged)
    drop_segments: list[int] = field(default_factory=list)  # merged away or damaged
    chunks_done: bool = False  # the build's chunks are used up: forget them
    anns: list[tuple[int, str, str, dict[str, int]]] = field(
        default_factory=list
    )  # (segment, engine, file, params)
    dead_files: list[str] = field(default_factory=list)  # owned files this generation no longer needs
    drop_anns: list[int] = field(default_factory=list)  # segments whose ANN record is forgotten (damaged)
    settings: dict[str, Any] | None = None  # settings this generation changes (a rebuild: the model)
