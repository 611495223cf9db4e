"""A folder of photos as the index sees it: which files, their identity, what changed since last time.

A photo's identity is its size and modification time (cheap, from ``stat``) and the sha256 of its bytes
(read once, while it is decoded for embedding: the same bytes give its EXIF orientation and date taken,
:func:`read_photo_dated`). :func:`plan_update` compares a scan of the folder with the
entries an index already holds: an entry whose size and mtime are unchanged is kept without reading the
file; anything else is (re)read, and keeps its old embedding if its bytes turn out to be the same.

**Which files are photos** (:func:`scan_photos`): regular files whose suffix is one of
:func:`~vsekit.data.images.photo_extensions`, found recursively; names starting with "." are left out.
A symbolic link to a photo is followed wherever its target lives (inside or outside the folder), but only
when the target is a regular file; links to folders are not followed (no loops, no photo twice), and a
dangling link, a link loop, a FIFO, a device or a socket is never opened: each is reported with its
reason, as is every file of another type (counted per suffix). :func:`read_photo` checks again, on the
open file, that it is a regular file no larger than :func:`max_photo_bytes` before reading it.

**Names that are not UTF-8**: a photo's id is its path relative to the folder as Python decodes file
names (:func:`os.fsdecode`: undecodable bytes become lone surrogates, so the id maps back to the file).
Anything written for people or other programs (terminal, JSON, HTTP) shows the id through
:func:`printable`, which writes each undecodable byte as ``\\xNN``: always valid UTF-8.
"""

from __future__ import annotations

import errno
import hashlib
import io
import logging
import os
import re
import stat
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from PIL import Image, UnidentifiedImageError

from vsekit.data.images import OPTIONAL_PHOTO_EXTENSIONS, photo_extensions
from vsekit.errors import CorpusError, ImageError, printable
from vsekit.vision.preprocess import decode_photo

__all__ = [
    "DEFAULT_MAX_PHOTO_MB",
    "PhotoEntry",
    "PhotoFile",
    "PhotoScan",
    "UpdatePlan",
    "max_photo_bytes",
    "plan_update",
    "printable",
    "read_photo",
    "read_photo_dated",
    "scan_folder",
    "scan_photos",
]

logger = logging.getLogger(__name__)

#: The largest photo file read (a 100-megapixel TIFF is ~300 MB uncompressed; phone photos are < 20 MB).
#: ``$VSEKIT_MAX_PHOTO_MB`` overrides it.
DEFAULT_MAX_PHOTO_MB = 200


@dataclass(frozen=True)
class PhotoFile:
    """A photo on disk now: its id (path relative to the folder, POSIX form), path, size and mtime."""

    id: str
    path: Path
    size: int
    mtime_ns: int


@dataclass(frozen=True)
class PhotoEntry:
    """A photo as an index recorded it (``sha256`` of the bytes that were embedded); ``taken``: its EXIF
    date taken as ISO text when it was read from those bytes (None: no date, or an entry not read here)."""

    id: str
    size: int
    mtime_ns: int
    sha256: str
    taken: str | None = None

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


@dataclass
class PhotoScan:
    """One scan of a folder: the ``photos`` (sorted by id) and everything left out, never silently.

    ``skipped``: id -> reason in words, for entries that are not readable photos although they could
    look like one (FIFOs, devices, sockets, dangling links, link loops, links to folders, folders that
    cannot be listed); ``not_photos``: files of other types, counted per lower-case suffix ("" for none);
    ``hidden``: names starting with "." left out (files and folders)."""

    folder: Path
    photos: list[PhotoFile] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    not_photos: Counter[str] = field(default_factory=Counter)
    hidden: int = 0

    def not_photos_summary(self) -> str | None:
        """``"skipped 12 files not photos: 10 .heic, 2 .txt"`` (most common first), or None."""
        if not self.not_photos:
            return None
        total = sum(self.not_photos.values())
        return f"skipped {total} file{'s' if total != 1 else ''} not photos: {_counts(self.not_photos)}"

    def nothing_to_index(self) -> str:
        """The one line for a folder without a single photo: what it holds and what vsekit reads."""
        found = [_counts(self.not_photos)] if self.not_photos else []
        if self.skipped:
            found.append(f"{len(self.skipped)} other entr{'ies' if len(self.skipped) > 1 else 'y'} skipped")
        if self.hidden:
            found.append(f"{self.hidden} hidden")
        what = f"found {', '.join(found)}" if found else "the folder is empty"
        readable = photo_extensions()
        reads = " ".join(sorted(readable)) + _plugin_hint(self, readable)
        return f"no photos in {printable(str(self.folder))}: {what}; vsekit reads {reads}"


def _plugin_hint(scan: PhotoScan, readable: frozenset[str]) -> str:
    """Where photos of a format this Pillow cannot open were found, how to get it."""
    missing = sorted(e for e in OPTIONAL_PHOTO_EXTENSIONS if e in scan.not_photos and e not in readable)
    if not missing:
        return ""
    if any(OPTIONAL_PHOTO_EXTENSIONS[e] == "HEIF" for e in missing):
        return f"; {' '.join(missing)} files need the pillow-heif plugin (pip install pillow-heif)"
    return f"; {' '.join(missing)} files need a Pillow built with that format"


def _counts(counter: Counter[str]) -> str:
    ranked = sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))
    return ", ".join(f"{n} {printable(ext) or '(no suffix)'}" for ext, n in ranked)


def _kind(mode: int) -> str:
    """A file type in words, for "not a regular file" reasons."""
    for test, words in (
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a folder"),
    ):
        if test(mode):
            return words
    return "not a regular file"


_LINK_TO_FOLDER = "link to a folder (links to folders are not followed)"


def _follow(path: str) -> tuple[os.stat_result | None, str | None]:
    """The stat of a symlink's final target, or why it cannot be followed to a regular file."""
    try:
        target = os.stat(path)
    except FileNotFoundError:
        return None, "dangling link (its target does not exist)"
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return None, "link loop (the link leads back to itself)"
        return None, f"cannot follow link ({exc.strerror or exc})"
    if stat.S_ISDIR(target.st_mode):
        return None, _LINK_TO_FOLDER
    if not stat.S_ISREG(target.st_mode):
        return None, f"link to {_kind(target.st_mode)}, not to a regular file"
    return target, None


def scan_photos(folder: str | os.PathLike[str]) -> PhotoScan:
    """Every photo under ``folder`` and every file left out, with its reason (see the module docstring).

    Raises:
        CorpusError: ``folder`` does not exist, is not a folder, or cannot be listed.
    """
    root = Path(folder).expanduser()
    if not root.exists():
        raise CorpusError(f"{printable(str(root))}: photo folder does not exist")
    if not root.is_dir():
        raise CorpusError(f"{printable(str(root))}: not a folder (give the folder that holds the photos)")
    scan = PhotoScan(folder=root)
    extensions = photo_extensions()
    pending = [(str(root), "")]  # folders to list: (path, id prefix)
    while pending:
        path, prefix = pending.pop()
        try:
            with os.scandir(path) as listing:
                entries = sorted(listing, key=lambda e: e.name)
        except OSError as exc:
            if not prefix:
                raise CorpusError(
                    f"{printable(path)}: cannot list the folder ({exc.strerror or exc})"
                ) from None
            scan.skipped[prefix.rstrip("/")] = f"folder cannot be listed ({exc.strerror or exc})"
            continue
        folders = []
        for entry in entries:
            if entry.name.startswith("."):
                scan.hidden += 1
            elif entry.is_dir(follow_symlinks=False):
                folders.append((entry.path, f"{prefix}{entry.name}/"))
            else:
                _scan_entry(scan, entry, prefix + entry.name, extensions)
        pending.extend(reversed(folders))
    scan.photos.sort(key=lambda p: p.id)
    return scan


def _scan_entry(scan: PhotoScan, entry: os.DirEntry, image_id: str, extensions: frozenset[str]) -> None:
    suffix = os.path.splitext(entry.name)[1].lower()
    if suffix not in extensions:
        if entry.is_symlink() and os.path.isdir(entry.path):
            scan.skipped[image_id] = _LINK_TO_FOLDER
        else:
            scan.not_photos[suffix] += 1
        return
    try:
        st = entry.stat(follow_symlinks=False)
    except OSError as exc:  # vanished between the listing and the stat
        scan.skipped[image_id] = f"cannot stat ({exc.strerror or exc})"
        return
    reason = None
    if stat.S_ISLNK(st.st_mode):
        target, reason = _follow(entry.path)
        if target is not None:  # (else a reason)
            st = target
    elif not stat.S_ISREG(st.st_mode):
        reason = f"{_kind(st.st_mode)}, not a regular file"
    if reason is not None:
        scan.skipped[image_id] = reason
        return
    scan.photos.append(PhotoFile(image_id, Path(entry.path), st.st_size, st.st_mtime_ns))


def scan_folder(folder: str | Path) -> list[PhotoFile]:
    """Every photo under ``folder``, sorted by id (:func:`scan_photos` without the report of what was
    left out, which is logged)."""
    scan = scan_photos(folder)
    for image_id, reason in scan.skipped.items():
        logger.info("%s: skipped: %s", printable(image_id), reason)
    if scan.not_photos:
        logger.info("%s", scan.not_photos_summary())
    return scan.photos


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


def max_photo_bytes() -> int:
    """The largest photo file :func:`read_photo` reads: ``$VSEKIT_MAX_PHOTO_MB`` (MiB), else 200 MiB."""
    value = os.environ.get("VSEKIT_MAX_PHOTO_MB", "").strip()
    try:
        megabytes = float(value) if value else DEFAULT_MAX_PHOTO_MB
    except ValueError:
        raise CorpusError(f"VSEKIT_MAX_PHOTO_MB={value!r}: not a number of megabytes") from None
    if megabytes <= 0:
        raise CorpusError(f"VSEKIT_MAX_PHOTO_MB={value!r}: must be positive")
    return int(megabytes * 2**20)


def _read_regular(path: Path, limit: int) -> bytes:
    """The bytes of ``path`` if, opened, it is a regular file of at most ``limit`` bytes.

    Opened without blocking (a FIFO put in place after the scan must not hang the build) and checked on
    the open descriptor, so a file swapped for a link to /dev/zero between the scan and the read is
    refused too; at most ``limit + 1`` bytes are ever read.

    Raises:
        ImageError: the reason in words (the caller names the file).
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise ImageError(f"cannot open the file ({exc.strerror or exc})") from None
    with open(fd, "rb", buffering=0, closefd=True) as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ImageError(f"{_kind(st.st_mode)}, not a regular file")
        if st.st_size > limit:
            raise ImageError(
                f"file too large ({_mib(st.st_size)}, over the {_mib(limit)} limit: {_LIMIT_HINT})"
            )
        try:
            data = f.read(limit + 1)
        except OSError as exc:
            raise ImageError(f"cannot read the file ({exc.strerror or exc})") from None
    if len(data) > limit:  # it grew after the fstat
        raise ImageError(f"file too large (over the {_mib(limit)} limit: {_LIMIT_HINT})")
    return data


_LIMIT_HINT = "raise it with VSEKIT_MAX_PHOTO_MB"


def _mib(n: int) -> str:
    return f"{n / 2**20:.0f} MB" if n >= 2**20 else f"{n} bytes"


# An object's repr carries its memory address (``<_io.BytesIO object at 0x7f...>``): it differs between
# runs, so a reason that held one would make a resumed and a clean build write different files.
_OBJECT_REPR = re.compile(r"<[^<>]* at 0x[0-9a-fA-F]+>")


def _decode_reason(exc: ImageError) -> str:
    """Why a decode failed, in words that are the same on every run."""
    cause = exc.__cause__
    if isinstance(cause, UnidentifiedImageError):
        return "not an image format vsekit can decode"
    text = _OBJECT_REPR.sub("the file", str(cause if cause is not None else exc)).strip()
    return text or type(cause or exc).__name__


def read_photo(photo: PhotoFile, max_bytes: int | None = None) -> tuple[str, Image.Image | None, str | None]:
    """``(sha256, RGB image, None)`` or ``(sha256 or "", None, error)``.

    The error names the photo by its printable id and says why in words (the same text on every run: no
    object addresses, no absolute path). The file must be a regular file of at most ``max_bytes``
    (default :func:`max_photo_bytes`). The bytes are read once: hashed, then decoded exactly as the
    feature path decodes a file (complete decode, upright by EXIF, first frame of a GIF, RGB).
    """
    return read_photo_dated(photo, max_bytes)[:3]


def read_photo_dated(
    photo: PhotoFile, max_bytes: int | None = None
) -> tuple[str, Image.Image | None, str | None, str | None]:
    """:func:`read_photo` and the photo's EXIF date taken (ISO text, or None), from the same bytes: the
    file is opened and read once for its sha256, its pixels, its orientation and its date."""
    name = printable(photo.id)
    try:
        data = _read_regular(photo.path, max_photo_bytes() if max_bytes is None else max_bytes)
    except ImageError as exc:
        return "", None, f"{name}: {exc}", None
    sha = hashlib.sha256(data).hexdigest()
    try:
        image, taken = decode_photo(io.BytesIO(data))
    except ImageError as exc:
        return sha, None, f"{name}: cannot read image ({_decode_reason(exc)})", None
    return sha, image, None, taken
