"""Atomic file writes shared by every saver: a crash or Ctrl-C leaves the previous file, never half a file.

Each writer goes to a hidden temp file in the destination folder, then ``os.replace`` swaps it in.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

__all__ = [
    "atomic_save_safetensors",
    "atomic_torch_save",
    "atomic_write_text",
    "read_vsekit_safetensors",
]


def _tmp_for(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp")


def atomic_save_safetensors(
    tensors: Mapping[str, torch.Tensor], path: str | os.PathLike[str], metadata: Mapping[str, str]
) -> Path:
    """Write a safetensors file with header ``metadata``, atomically, readable by everyone (0644)."""
    from safetensors.torch import save_file

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_for(path)
    try:
        save_file(dict(tensors), str(tmp), metadata=dict(metadata))
        os.chmod(tmp, 0o644)  # safetensors creates 0600 files; a model is meant to be shared
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


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
    return header, tensors


def atomic_torch_save(obj: Any, path: Path) -> None:
    """``torch.save`` to a temp file, fsync, then rename (training checkpoints)."""
    tmp = _tmp_for(path)
    try:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    tmp = _tmp_for(path)
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


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
    if isinstance(data, dict):
        data.setdefault("name", path.stem)
    return data, path


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically, fsynced before the rename (feature-cache metadata)."""
    path = Path(path)
    tmp = _tmp_for(path)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_save_npy(path: str | os.PathLike[str], array: Any) -> None:
    """``numpy.save`` ``array`` to ``path`` atomically (through an open file, so no ``.npy`` is appended)."""
    import numpy as np

    path = Path(path)
    tmp = _tmp_for(path)
    try:
        with open(tmp, "wb") as f:
            np.save(f, array)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
