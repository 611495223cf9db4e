"""Atomic file writes shared by every saver: a crash or Ctrl-C leaves the previous file, never half a file.

Every writer goes through :func:`_atomic_file`: a hidden temp file in the destination folder, fsynced,
then ``os.replace`` swaps it in. Also the readers of vsekit's own file formats (safetensors with a
``format`` header, named JSON recipes).
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

if TYPE_CHECKING:  # torch is imported where a tensor is saved: readers of an index need none
    import torch

__all__ = [
    "atomic_npy_memmap",
    "atomic_save_npy",
    "atomic_save_safetensors",
    "atomic_torch_save",
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_write_text",
    "content_fingerprint",
    "exclusive_lock",
    "file_sha256",
    "fingerprint_matches",
    "new_memmap",
    "preallocate",
    "read_json_record",
    "read_named_json",
    "read_vsekit_safetensors",
    "rename_no_replace",
    "stamp_safetensors",
]


def _tmp_for(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp")


@contextlib.contextmanager
def _atomic_file(path: str | os.PathLike[str], exclusive: bool = False) -> Iterator[BinaryIO]:
    """The one atomic writer: yields a temp file beside ``path``; on success fsyncs it and renames it over
    ``path``; on any error (or Ctrl-C) removes it, leaving the previous ``path`` untouched.

    ``exclusive``: a new file that must not replace anything (a file the caller did not create may
    sit at either name): the temp file is created with ``O_EXCL`` and linked to ``path`` without
    replacing (:func:`_publish`); a file at either name is a ``FileExistsError`` (not wrapped), and the
    file there is left as it was."""
    path = Path(path)
    tmp = _tmp_for(path)
    created = False
    try:
        with open(tmp, "xb" if exclusive else "wb") as f:
            created = True
            yield f
            f.flush()
            os.fsync(f.fileno())
        _publish(tmp, path, exclusive)
    except BaseException as exc:
        if created or not exclusive:  # an existing temp file of another's is not ours to remove
            with contextlib.suppress(OSError):  # on a read-only folder there is nothing to remove
                tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError) and not (exclusive and isinstance(exc, FileExistsError)):
            raise _write_error(path, exc) from exc
        raise


def _publish(tmp: Path, path: Path, exclusive: bool) -> None:
    """Rename the finished ``tmp`` to ``path``; ``exclusive``: only where nothing is (a hard link fails
    with ``FileExistsError`` over any file, where ``os.replace`` would silently replace it)."""
    if not exclusive:
        os.replace(tmp, path)
        return
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise
    except OSError:  # a file system without hard links: look, then rename (a window of microseconds)
        if os.path.lexists(path):
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(path)) from None
        os.replace(tmp, path)
        return
    os.unlink(tmp)


def _write_error(path: Path, exc: OSError) -> Exception:
    """A full disk or a read-only folder as one line naming the file that was not written."""
    from vsekit.errors import VsekitError

    kept = "the previous file is kept" if path.exists() else "nothing was written"
    return VsekitError(f"{path}: cannot write ({exc.strerror or exc}); {kept}")


def rename_no_replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
    """Rename ``src`` to ``dst`` unless something is at ``dst`` (``FileExistsError``; both are left as
    they were): ``os.replace`` would silently replace a file there."""
    _publish(Path(src), Path(dst), exclusive=True)


#: Header field holding the sha256 of the rest of the header and of the tensor bytes (see
#: :func:`_canonical_safetensors`); a reader recomputes it, so bytes changed on disk are never loaded.
CONTENT_SHA256 = "content_sha256"


def atomic_save_safetensors(
    tensors: Mapping[str, torch.Tensor], path: str | os.PathLike[str], metadata: Mapping[str, str]
) -> Path:
    """Write a safetensors file with header ``metadata``, atomically, readable by everyone (0644).

    The bytes depend on the tensors and metadata only (the same model saved twice, in two processes, is
    the same file: its sha256 fingerprints it), and the header carries a checksum of the content.
    """
    from safetensors.torch import save

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = _canonical_safetensors(save(dict(tensors), metadata=dict(metadata)))
    with _atomic_file(path) as f:
        f.write(data)
        os.chmod(f.name, 0o644)  # a model is meant to be shared, whatever the umask of a temp file
    return path


def _content_digest(header: Mapping[str, Any], body_digest: Any) -> str:
    """sha256 of ``header`` (sorted compact JSON, without its own checksum field), then the tensor bytes."""
    import hashlib
    import json

    meta = {k: v for k, v in header.get("__metadata__", {}).items() if k != CONTENT_SHA256}
    canonical = json.dumps({**header, "__metadata__": meta}, sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(canonical.encode("utf-8"))
    digest.update(body_digest.digest())
    return digest.hexdigest()


def _canonical_safetensors(data: bytes) -> bytes:
    """``data`` (a safetensors file) with its header rewritten deterministically, plus a checksum.

    The safetensors library writes the ``__metadata__`` map in hash-map order, which changes from one
    process to the next; here it is sorted by key and given :data:`CONTENT_SHA256`. The tensor entries
    (already in a fixed order) and the tensor bytes are kept as they are; the header is padded with
    spaces to a multiple of 8 bytes, as the format asks.
    """
    import hashlib
    import json

    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + n])
    body = data[8 + n :]
    meta = dict(header.get("__metadata__") or {})
    meta[CONTENT_SHA256] = _content_digest(header, hashlib.sha256(body))
    tensors = {k: v for k, v in header.items() if k != "__metadata__"}
    raw = json.dumps({"__metadata__": dict(sorted(meta.items())), **tensors}, separators=(",", ":"))
    raw_bytes = raw.encode("utf-8")
    raw_bytes += b" " * (-len(raw_bytes) % 8)
    return len(raw_bytes).to_bytes(8, "little") + raw_bytes + body


def _check_content(path: Path, what: str) -> None:
    """Recompute a vsekit safetensors file's :data:`CONTENT_SHA256`; a mismatch is a VsekitError naming it.

    Files written before the checksum existed (no such field) pass unchecked.
    """
    import hashlib
    import json

    from vsekit.errors import VsekitError

    try:
        with open(path, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(n)) if 0 < n <= path.stat().st_size - 8 else None
            if not isinstance(header, dict):
                return  # not safetensors: safe_open names the problem
            expected = (header.get("__metadata__") or {}).get(CONTENT_SHA256)
            if expected is None:
                return
            body = hashlib.sha256()
            for block in iter(lambda: f.read(1 << 20), b""):
                body.update(block)
    except (OSError, ValueError, UnicodeDecodeError, AttributeError):
        return  # unreadable or not JSON: safe_open names the problem
    if _content_digest(header, body) != expected:
        raise VsekitError(
            f"{path}: damaged {what} file (its content checksum does not match: the file was changed "
            "or corrupted on disk; save or download it again)"
        )


def _read_header_and_body_digest(path: Path) -> tuple[dict[str, Any], Any] | None:
    """A safetensors file's JSON header and the sha256 object of its tensor bytes, or None if the file
    is not safetensors (no plausible header)."""
    import hashlib
    import json

    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        if not 0 < n <= path.stat().st_size - 8:
            return None
        try:
            header = json.loads(f.read(n))
        except (ValueError, UnicodeDecodeError):
            return None
        if not isinstance(header, dict) or not isinstance(header.get("__metadata__", {}), dict):
            return None
        body = hashlib.sha256()
        for block in iter(lambda: f.read(1 << 20), b""):
            body.update(block)
    return header, body


def content_fingerprint(path: str | os.PathLike[str]) -> str:
    """What a model file holds, as a sha256: for a safetensors file its :data:`CONTENT_SHA256` (the header
    without that field, canonical, then the tensor bytes), computed whether or not the file carries it, so
    stamping a file (:func:`stamp_safetensors`) or rewriting its header in another key order does not
    change it; for any other file, :func:`file_sha256`. Pins between files (a captioner's joint model, a
    fusion's models) record this."""
    path = Path(path)
    found = _read_header_and_body_digest(path)
    return file_sha256(path) if found is None else _content_digest(*found)


def fingerprint_matches(path: str | os.PathLike[str], pinned: str) -> bool:
    """Whether ``pinned`` is ``path``'s :func:`content_fingerprint` or (pins made before those existed)
    its :func:`file_sha256`."""
    return pinned in (content_fingerprint(path), file_sha256(path))


def stamp_safetensors(path: str | os.PathLike[str], metadata: Mapping[str, str] | None = None) -> bool:
    """Give a safetensors file written before content checksums its canonical header with
    :data:`CONTENT_SHA256` (atomically; the tensor bytes are kept as they are), after replacing the
    header fields in ``metadata``. Idempotent: returns False, writing nothing, when the file already is
    in that form."""
    import json

    path = Path(path)
    data = original = path.read_bytes()
    if metadata:
        n = int.from_bytes(data[:8], "little")
        header = json.loads(data[8 : 8 + n])
        header["__metadata__"] = {**header.get("__metadata__", {}), **metadata}
        raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
        data = len(raw).to_bytes(8, "little") + raw + data[8 + n :]
    stamped = _canonical_safetensors(data)
    if stamped == original:
        return False
    with _atomic_file(path) as f:
        f.write(stamped)
        os.chmod(f.name, 0o644)
    return True


#: What each vsekit file format is called in error messages, so a user handed the wrong file learns what
#: it is ("not a vsekit captioner file (it is a joint-embedding model)").
_FORMAT_NAMES = {
    "vsekit.JointEmbedding": "joint-embedding model",
    "vsekit.captioner": "captioner",
    "vsekit.SCNLM": "SC-NLM captioner",
}


def read_vsekit_safetensors(
    path: str | os.PathLike[str], file_format: str, what: str, max_version: int
) -> tuple[dict[str, str], dict[str, torch.Tensor]]:
    """The header and tensors of a vsekit safetensors file whose ``format`` header is ``file_format``.

    ``what`` names the kind of file in errors ("model", "captioner"). A missing file, a file that is not
    safetensors, another format, or a ``format_version`` newer than ``max_version`` is a VsekitError that
    names ``path``; parsing the header's fields is left to the caller.
    """
    from safetensors import SafetensorError, safe_open

    from vsekit.errors import VsekitError

    path = Path(path)
    if not path.is_file():
        raise VsekitError(f"{path}: {what} file not found")
    try:
        with safe_open(str(path), framework="pt") as f:
            header = f.metadata() or {}
            found = header.get("format")
            if found != file_format:
                hint = f"; it is a vsekit {_FORMAT_NAMES[found]}" if found in _FORMAT_NAMES else ""
                raise VsekitError(f"{path}: not a vsekit {what} file (no '{file_format}' header{hint})")
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except VsekitError:
        raise
    except (SafetensorError, OSError, ValueError) as exc:
        raise VsekitError(f"{path}: not a vsekit {what} file ({exc})") from exc
    try:
        version = int(header.get("format_version", "0"))
    except ValueError:
        raise VsekitError(
            f"{path}: damaged {what} header (format_version {header['format_version']!r})"
        ) from None
    if version > max_version:
        raise VsekitError(
            f"{path}: {what} format version {version} is newer than this vsekit reads ({max_version}); "
            "upgrade vsekit"
        )
    _check_content(path, what)  # after the version: a newer format may checksum another way
    return header, tensors


def atomic_torch_save(obj: Any, path: str | os.PathLike[str]) -> Path:
    """``torch.save`` atomically (training checkpoints)."""
    import torch

    with _atomic_file(path) as f:
        torch.save(obj, f)
    return Path(path)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write UTF-8 ``text`` atomically."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def read_named_json(
    name_or_path: str | os.PathLike[str], directory: Path, kind: str
) -> tuple[dict | Any, Path]:
    """Read a shipped JSON file by name (``directory/NAME.json``) or any JSON file by path.

    Used for recipes: ``kind`` names them in errors ("unknown recipe 'x'; available recipes: ..."). A
    mapping gets ``name`` defaulted to the file's stem. Returns ``(data, path)``; errors name the file
    and, for bad JSON, the line.
    """
    import json

    from vsekit.errors import VsekitError

    text = str(name_or_path)
    path = Path(text)
    if not (path.suffix == ".json" or os.sep in text or path.is_file()):
        path = directory / f"{text}.json"
        if not path.is_file():
            available = ", ".join(sorted(p.stem for p in directory.glob("*.json")))
            raise VsekitError(
                f"unknown {kind} {text!r}; available {kind}s: {available} (or pass the path of a JSON file)"
            )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise VsekitError(f"{path}: recipe file not found") from None
    except json.JSONDecodeError as exc:
        raise VsekitError(f"{path}:{exc.lineno}: invalid JSON: {exc.msg}") from None
    except UnicodeDecodeError as exc:
        raise VsekitError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except RecursionError:
        raise VsekitError(f"{path}: invalid JSON: nested too deeply") from None
    except OSError as exc:  # a folder, no permission
        raise VsekitError(f"{path}: cannot read {kind} file ({exc.strerror})") from None
    if isinstance(data, dict):
        data.setdefault("name", path.stem)
    return data, path


def atomic_write_json(path: str | os.PathLike[str], obj: Any, **dumps_kwargs: Any) -> Path:
    """Write ``obj`` as JSON (plus a newline) atomically, creating the folder."""
    import json

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write_bytes(path, (json.dumps(obj, **dumps_kwargs) + "\n").encode("utf-8"))


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, *, exclusive: bool = False) -> Path:
    """Write ``data`` to ``path`` atomically, fsynced before the rename (feature-cache metadata);
    ``exclusive``: never over an existing file (see :func:`_atomic_file`)."""
    with _atomic_file(path, exclusive) as f:
        f.write(data)
    return Path(path)


def atomic_save_npy(path: str | os.PathLike[str], array: Any, *, exclusive: bool = False) -> Path:
    """``numpy.save`` ``array`` to ``path`` atomically (through an open file, so no ``.npy`` is appended);
    ``exclusive``: never over an existing file (see :func:`_atomic_file`)."""
    import numpy as np

    with _atomic_file(path, exclusive) as f:
        np.save(f, array)
    return Path(path)


@contextlib.contextmanager
def exclusive_lock(path: str | os.PathLike[str]) -> Iterator[None]:
    """Hold an exclusive lock on ``<path>.lock`` (one writer of a cached file at a time; a second process
    waits, then finds the file written), creating the folder."""
    import fcntl

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def read_json_record(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A cached file's JSON record (its sha256, how it was made), or ``{}`` when absent or unreadable."""
    import json

    try:
        record = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def file_sha256(path: str | os.PathLike[str]) -> str:
    """sha256 of a file's bytes, read in blocks (identifies a model file)."""
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@contextlib.contextmanager
def atomic_npy_memmap(
    path: str | os.PathLike[str], dtype: Any, shape: tuple[int, ...], *, exclusive: bool = False
) -> Iterator[Any]:
    """A ``.npy`` file filled in place through a memory map (arrays larger than RAM), swapped in atomically.

    Yields a writable ``numpy.memmap`` of a temp file beside ``path``; on success flushes and fsyncs it
    and renames it over ``path``; on any error removes it, leaving the previous ``path`` untouched.
    ``exclusive``: never over an existing file, at either name (see :func:`_atomic_file`).
    """
    import numpy as np

    path = Path(path)
    if 0 in shape:  # an empty file cannot be memory-mapped
        array = np.zeros(shape, dtype=dtype)
        yield array
        atomic_save_npy(path, array, exclusive=exclusive)
        return
    tmp = _tmp_for(path)
    created = False
    try:
        if exclusive:  # claim the temp name first: open_memmap would truncate another's file there
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        created = True
        array = np.lib.format.open_memmap(tmp, mode="w+", dtype=dtype, shape=shape)
        preallocate(tmp)
        yield array
        array.flush()
        del array
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        _publish(tmp, path, exclusive)
    except BaseException as exc:
        if created:  # an existing temp file of another's is not ours to remove
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError) and not (exclusive and isinstance(exc, FileExistsError)):
            raise _write_error(path, exc) from exc
        raise


def preallocate(path: str | os.PathLike[str], name: Path | None = None) -> None:
    """Reserve the disk blocks of ``path`` up to its size (``posix_fallocate``).

    A file made for a memory map is sparse: its blocks are allocated when the map is written, and on a
    full disk that is a SIGBUS that kills the process, not an exception. Reserved first, a full disk is an
    OSError (ENOSPC) here, or with ``name`` one VsekitError naming that file. Filesystems that cannot
    reserve (EOPNOTSUPP) are left as they are.
    """
    try:
        fd = os.open(path, os.O_RDWR)
        try:
            os.posix_fallocate(fd, 0, os.fstat(fd).st_size)
        finally:
            os.close(fd)
    except OSError as exc:
        if exc.errno in (errno.EOPNOTSUPP, errno.EINVAL):
            return
        if name is None:
            raise
        raise _write_error(Path(name), exc) from exc


def new_memmap(path: str | os.PathLike[str], dtype: Any, shape: tuple[int, ...], name: Path) -> Any:
    """A new raw file at ``path`` memory-mapped for writing, its blocks reserved (:func:`preallocate`).

    A full disk or a read-only folder is one VsekitError naming ``name`` (the file ``path`` is to become)
    and ``path`` is removed.
    """
    import numpy as np

    path = Path(path)
    try:
        array = np.memmap(path, dtype=dtype, mode="w+", shape=shape)
        preallocate(path)
        return array
    except OSError as exc:
        with contextlib.suppress(OSError):
            path.unlink(missing_ok=True)
        raise _write_error(Path(name), exc) from exc
