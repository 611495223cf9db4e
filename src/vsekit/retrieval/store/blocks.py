"""File checksums: a CRC-32 per fixed block of a file's bytes, so a reader checks only the blocks it
reads, when it first reads them, instead of hashing every file on open (docs/index-store.md,
"Checksums").

A checksum as the store records it (the ``sha256`` columns of ``segments`` and ``files``) is text in one
of two forms, each saying how it is checked, so no file is ever checked the wrong way:

* ``crc32:<block bytes>:<file size>:<8 hex digits per block>`` (format version 3 on): block ``i`` is the
  bytes ``[i * block, (i + 1) * block)`` of the file (the last one shorter); CRC-32 is zlib's (stdlib,
  about 3 GB/s here against sha256's 1.5 GB/s; it finds every burst of up to 32 flipped bits in a block,
  and damage is all a store checks for: the database that holds the sums is no harder to forge);
* 64 hex digits: the sha256 of the whole file (stores before format version 3, until their next writer
  converts them: :func:`upgrade_checksum`).

:class:`BlockCheck` remembers which blocks of one file version this process has checked.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import re
import threading
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = [
    "BLOCK_BYTES",
    "BlockCheck",
    "BlockSums",
    "bytes_checksum",
    "file_checksum",
    "is_sha256",
    "mismatch",
    "parse_checksum",
    "upgrade_checksum",
]

#: Block size of new checksums: 64 KiB (32 rows of 1,024-d float16), 32,768 sums (256 KB of text) for a
#: 2 GB segment; a search that reads a few hundred rows checks a few hundred blocks at most.
BLOCK_BYTES = 1 << 16
_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class BlockSums:
    """A parsed block checksum: block size, file size, one CRC-32 per block."""

    block: int
    size: int
    sums: np.ndarray = field(compare=False)

    @property
    def blocks(self) -> int:
        return len(self.sums)

    def span(self, start: int, stop: int) -> range:
        """The blocks that hold the bytes ``[start, stop)`` (clipped to the file)."""
        stop = min(stop, self.size)
        if stop <= start:
            return range(0)
        return range(start // self.block, (stop - 1) // self.block + 1)


def _sums_text(block: int, size: int, sums: list[int]) -> str:
    return f"crc32:{block}:{size}:" + "".join(f"{s:08x}" for s in sums)


def bytes_checksum(data: bytes | memoryview, block: int | None = None) -> str:
    """The block checksum of ``data`` (a file's bytes), in blocks of ``block`` bytes (default
    :data:`BLOCK_BYTES`)."""
    block = block or BLOCK_BYTES
    view = memoryview(data).cast("B")
    return _sums_text(block, len(view), [zlib.crc32(view[i : i + block]) for i in range(0, len(view), block)])


def file_checksum(path: str | os.PathLike[str], block: int | None = None) -> str:
    """The block checksum of the file at ``path`` (read once, a block at a time)."""
    block, sums, size = block or BLOCK_BYTES, [], 0
    with open(path, "rb", buffering=0) as f:
        while chunk := f.read(block):
            sums.append(zlib.crc32(chunk))
            size += len(chunk)
    return _sums_text(block, size, sums)


def is_sha256(text: str | None) -> bool:
    """A whole-file sha256 (a store before format version 3)."""
    return text is not None and _SHA256.fullmatch(text) is not None


def parse_checksum(text: str | None) -> BlockSums:
    """A ``crc32:`` checksum parsed; ValueError for anything else (a sha256 included: ask
    :func:`is_sha256` first), or one whose sums do not fit its sizes."""
    parts = (text or "").split(":")
    if len(parts) != 4 or parts[0] != "crc32" or not parts[1].isdigit() or not parts[2].isdigit():
        raise ValueError("no checksum recorded" if not text else "an unreadable checksum record")
    block, size, digits = int(parts[1]), int(parts[2]), parts[3]
    if block < 1 or len(digits) != 8 * (-(-size // block)) or not re.fullmatch(r"[0-9a-f]*", digits):
        raise ValueError("an unreadable checksum record")
    sums = np.frombuffer(bytes.fromhex(digits), dtype=">u4").astype(np.uint32)
    return BlockSums(block, size, sums)


def mismatch(data: bytes | memoryview, text: str | None) -> str | None:
    """Why ``data`` (a whole file's bytes) does not match the checksum ``text`` (either form); None when
    it matches."""
    if is_sha256(text):
        found = hashlib.sha256(data).hexdigest()
        return None if found == text else f"sha256 {found[:12]}, the index recorded {str(text)[:12]}"
    try:
        sums = parse_checksum(text)
    except ValueError as exc:
        return str(exc)
    view = memoryview(data).cast("B")
    if len(view) != sums.size:
        return f"{len(view)} bytes, the index recorded {sums.size}"
    for i in range(sums.blocks):
        if zlib.crc32(view[i * sums.block : (i + 1) * sums.block]) != int(sums.sums[i]):
            return f"block {i} of {sums.blocks} does not match its CRC-32"
    return None


def upgrade_checksum(path: Path, sha256: str) -> str | None:
    """The block checksum of ``path`` when its bytes still have ``sha256`` (one read computes both);
    None when they do not or it cannot be read (left for the build that repairs it)."""
    digest, sums, size, block = hashlib.sha256(), [], 0, BLOCK_BYTES
    try:
        with open(path, "rb", buffering=0) as f:
            while chunk := f.read(block):
                digest.update(chunk)
                sums.append(zlib.crc32(chunk))
                size += len(chunk)
    except OSError:
        return None
    return _sums_text(block, size, sums) if digest.hexdigest() == sha256 else None


class BlockCheck:
    """Which blocks of one file version this process has checked against ``sums`` (shared by every
    snapshot that maps that version; thread-safe). :meth:`check` reads through a mapping of the file."""

    def __init__(self, sums: BlockSums) -> None:
        self.sums = sums
        self._done = np.zeros(sums.blocks, dtype=bool)
        self._lock = threading.Lock()

    @property
    def complete(self) -> bool:
        return bool(self._done.all())

    def check(self, mapped: mmap.mmap | bytes, start: int = 0, stop: int | None = None) -> str | None:
        """Check the unchecked blocks that hold bytes ``[start, stop)`` (default: the whole file) of
        ``mapped``; the first block that fails, in words, or None when all match."""
        return self.check_blocks(mapped, self.sums.span(start, self.sums.size if stop is None else stop))

    def check_blocks(self, mapped: mmap.mmap | bytes, blocks: Iterable[int]) -> str | None:
        """:meth:`check` of the blocks numbered ``blocks``."""
        block, sums = self.sums.block, self.sums.sums
        with self._lock:
            todo = [i for i in blocks if not self._done[i]]
            if not todo:
                return None
            with memoryview(mapped) as view:
                if len(view) != self.sums.size:
                    return f"{len(view)} bytes, the index recorded {self.sums.size}"
                for i in todo:
                    if zlib.crc32(view[i * block : (i + 1) * block]) != int(sums[i]):
                        return f"block {i} of {self.sums.blocks} does not match its CRC-32"
                    self._done[i] = True
        return None
