"""The one training-checkpoint format: written atomically, read with ``torch.load(weights_only=True)``.

A checkpoint is a dict of tensors and plain containers: the engine's state (model, optimiser, scheduler,
epoch, best score, every RNG state) plus whatever the trainer adds (config, vocabulary, feature
identity). ``kind`` says which trainer wrote it, so resuming a captioner run with the embedding trainer
is a clear error instead of a confusing key error.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from vsekit.errors import VsekitError
from vsekit.fileio import atomic_torch_save

__all__ = ["CHECKPOINT_FORMAT", "CHECKPOINT_VERSION", "read_checkpoint", "save_checkpoint"]

CHECKPOINT_FORMAT = "vsekit.checkpoint"
#: 1: joint-embedding checkpoints before the engine (no ``kind``, ``best_rsum``); 2: the engine's.
CHECKPOINT_VERSION = 2
_LEGACY_CAPTIONER_FORMAT = "vsekit.captioner-checkpoint"


def save_checkpoint(state: dict[str, Any], path: str | os.PathLike[str], kind: str) -> None:
    """Write ``state`` as a ``kind`` checkpoint (temp file + fsync + rename: never half a file)."""
    header = {"format": CHECKPOINT_FORMAT, "version": CHECKPOINT_VERSION, "kind": kind}
    atomic_torch_save({**header, **state, "torch_version": str(torch.__version__)}, Path(path))


def read_checkpoint(path: str | os.PathLike[str], kind: str | None = None) -> dict[str, Any]:
    """Read a checkpoint without running code; every error is a VsekitError naming ``path``.

    ``kind`` (when given) must match the writer's. Checkpoints of earlier vsekit versions are upgraded
    to the current layout, so a run started before the engine still resumes.
    """
    path = Path(path)
    try:
        _check_crcs(path)
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise VsekitError(f"{path}: checkpoint not found") from None
    except VsekitError:
        raise
    except Exception as exc:  # truncated zip, foreign pickle, disallowed global, ...
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()] or [type(exc).__name__]
        why = next((ln for ln in lines if ln.startswith("WeightsUnpickler error")), lines[0])
        raise VsekitError(f"{path}: unreadable checkpoint ({why})") from exc
    ckpt = _upgrade(ckpt) if isinstance(ckpt, dict) else None
    if ckpt is None:
        raise VsekitError(f"{path}: not a vsekit training checkpoint")
    if ckpt["version"] > CHECKPOINT_VERSION:
        raise VsekitError(f"{path}: checkpoint version {ckpt['version']} is newer than this vsekit reads")
    if kind is not None and ckpt["kind"] != kind:
        raise VsekitError(f"{path}: this is a {ckpt['kind']} checkpoint, not a {kind} one")
    return ckpt


def _check_crcs(path: Path) -> None:
    """Check every record of a (zip) checkpoint against its CRC-32: ``torch.load`` does not, and would
    load a tensor with flipped bytes as data. A damaged record is a VsekitError naming ``path``."""
    import zipfile

    if not zipfile.is_zipfile(path):  # truncated, or not a zip at all: torch.load says which
        return
    with zipfile.ZipFile(path) as archive:
        bad = archive.testzip()
    if bad is not None:
        raise VsekitError(f"{path}: damaged checkpoint (record {bad!r} fails its CRC check: changed on disk)")


def _upgrade(ckpt: dict[str, Any]) -> dict[str, Any] | None:
    """The current layout of a checkpoint of any vsekit version; None if it is not one of ours."""
    if ckpt.get("format") == _LEGACY_CAPTIONER_FORMAT:  # the captioner trainer's own format
        ckpt = dict(ckpt)
        ckpt.update(
            format=CHECKPOINT_FORMAT,
            version=1,
            kind="captioner",
            best_score=ckpt.pop("best"),
            bad_evals=ckpt["epoch"] - ckpt["best_epoch"],
            stopped_early=False,
            batch_generator=ckpt.pop("generator"),
        )
        history = ckpt.pop("history", [])
        ckpt["best_dev"] = next((h["dev"] for h in history if h["epoch"] == ckpt["best_epoch"]), None)
    if ckpt.get("format") != CHECKPOINT_FORMAT:
        return None
    if ckpt.get("version", 0) <= 1 and "kind" not in ckpt:  # the joint-embedding trainer's version 1
        ckpt = {**ckpt, "kind": "joint-embedding", "best_score": ckpt.get("best_rsum")}
    ckpt.setdefault("version", 0)
    return ckpt
