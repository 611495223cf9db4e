"""The joint model a photo index is built with: loading it by name, its identity, and the sentences that
calibrate the index's ANN settings.

An index records its model's name and the sha256 of the model file when it is built; opening the index
later loads the model by that name and refuses a file whose bytes changed since (vectors from two
models do not share one space, so a query embedded by the new one would rank nonsense).
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from vsekit.data import load_corpus
from vsekit.errors import ConfigMismatchError, VsekitError
from vsekit.resources import (
    PRETRAINED,
    is_shipped_joint_model,
    pretrained_path,
    resolve_model_path,
    sample_data_path,
)
from vsekit.retrieval.store import build_command

if TYPE_CHECKING:
    from vsekit.embedding.pipeline import VSEModel

__all__ = [
    "calibration_sentences",
    "check_recorded_model",
    "load_model",
    "load_recorded_model",
    "model_identity",
]

logger = logging.getLogger(__name__)


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def model_identity(model: VSEModel, name: str) -> dict[str, Any]:
    """What an index records of its model: ``name``, the file's ``sha256``, its config and dimension."""
    if model.path is None:
        raise VsekitError("an index needs a model loaded from a file (its sha256 identifies the index)")
    return {
        "name": name,
        "sha256": _file_sha256(Path(model.path)),
        "config": model.config,
        "embed_dim": model.embed_dim,
    }


def load_model(model: str | os.PathLike[str] | VSEModel | None, device: str) -> tuple[VSEModel, str]:
    """The model and the name the manifest records: a shipped name, also for a loaded model or a path
    whose file is a shipped model's (the shipped confidence calibration is found by that name; an
    update over a damaged database passes the loaded model, and recorded its path), else the file's
    absolute path."""
    from vsekit.embedding.pipeline import VSEModel

    if isinstance(model, VSEModel):
        if model.path is None:
            return model, ""
        return model, _shipped_name(Path(model.path)) or str(Path(model.path).resolve())
    loaded = VSEModel.load(model, device=device)
    if model is None or is_shipped_joint_model(model):
        return loaded, "vse" if model is None else str(model)
    assert loaded.path is not None  # VSEModel.load keeps the file's path
    return loaded, _shipped_name(Path(loaded.path)) or str(Path(loaded.path).resolve())


def _shipped_name(path: Path) -> str | None:
    """The shipped joint model whose file ``path`` is, or None."""
    for name in PRETRAINED:
        if is_shipped_joint_model(name) and pretrained_path(name).resolve() == path.resolve():
            return name
    return None


def load_recorded_model(index_dir: Path, recorded: dict[str, Any], photos: str | None = None) -> VSEModel:
    """The model an index in ``index_dir`` recorded (``recorded``: its :func:`model_identity`); a model
    file whose sha256 changed since the build (a newer shipped ``vse``, say) is refused, with the command
    that re-embeds the index's ``photos`` with it (the same model name, its new file)."""
    model, name = load_model(recorded["name"], "auto")
    _same_file(index_dir, recorded, model_identity(model, name)["sha256"], photos)
    return model


def check_recorded_model(index_dir: Path, recorded: dict[str, Any], photos: str | None = None) -> None:
    """Refuse, as :func:`load_recorded_model` would, a model file whose sha256 changed since the build,
    from the file's bytes alone (no model loads, no torch): what an update checks before it knows whether
    a photo needs the model. A missing file is refused as loading it would be."""
    path = resolve_model_path(recorded["name"], "vse")
    if not path.is_file():
        raise VsekitError(f"{path}: model file not found (the model of the index {index_dir})")
    _same_file(index_dir, recorded, _file_sha256(path), photos)


def _same_file(index_dir: Path, recorded: dict[str, Any], found: str, photos: str | None) -> None:
    if found != recorded["sha256"]:
        rebuild = build_command(index_dir, photos, recorded["name"], "--rebuild")
        raise ConfigMismatchError(
            f"{index_dir}: built with model {recorded['name']} (sha256 {recorded['sha256'][:12]}), but that "
            f"file now has sha256 {found[:12]}; {rebuild} embeds every photo again with it"
        )


def calibration_sentences(model: VSEModel) -> np.ndarray | None:
    """The bundled sample's captions embedded by ``model``: the real sentences that calibrate the ANN
    search settings (:func:`vsekit.retrieval.search.calibrate`); None when the sample is not installed."""
    try:
        texts = [c.text for c in load_corpus(sample_data_path()).captions]
    except (OSError, VsekitError) as exc:
        logger.warning("no bundled sample to calibrate with sentences (%s); photo-like queries only", exc)
        return None
    return model.embed_texts(texts)
