"""The joint model a photo index is built with: loading it by name, its identity, and the sentences that
calibrate the index's ANN settings.

An index records its model's name and the sha256 of the model file when it is built; opening the index
later loads the model by that name and refuses a file whose bytes changed since (vectors from two
models do not share one space, so a query embedded by the new one would rank nonsense).
"""

from __future__ import annotations

import functools
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
    default_cache_root,
    is_shipped_joint_model,
    pretrained_path,
    previous_model,
    previous_models,
    resolve_model_path,
    sample_data_path,
)
from vsekit.retrieval.file_versions import sha256_once
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
    for entry in previous_models():  # an earlier release's file, kept for the indexes built with it
        if entry["path"].resolve() == path.resolve():
            return str(entry["name"])
    return None


def load_recorded_model(index_dir: Path, recorded: dict[str, Any], photos: str | None = None) -> VSEModel:
    """The model an index in ``index_dir`` recorded (``recorded``: its :func:`model_identity`), loaded once
    from the file :func:`_recorded_file` says is the index's (refused as it refuses)."""
    return load_model(_recorded_file(index_dir, recorded, photos), "auto")[0]


def check_recorded_model(index_dir: Path, recorded: dict[str, Any], photos: str | None = None) -> None:
    """Refuse, as :func:`load_recorded_model` would, a model file whose sha256 changed since the build,
    from the file's bytes alone (no model loads, no torch): what an update checks before it knows whether
    a photo needs the model. A missing file is refused as loading it would be."""
    _recorded_file(index_dir, recorded, photos)


def _recorded_file(index_dir: Path, recorded: dict[str, Any], photos: str | None) -> Path:
    """The model file of the index: the file its name resolves to, when it still has the sha256 the index
    recorded; else the kept file of that model's earlier release that has it (:func:`_previous_release`).
    A missing file, or one whose sha256 changed and is not kept, is refused, with the command that
    re-embeds the index's ``photos`` with the new file."""
    path = resolve_model_path(recorded["name"], "vse")
    if not path.is_file():
        raise VsekitError(f"{path}: model file not found (the model of the index {index_dir})")
    found = sha256_once(path, _model_record(path))
    if found != recorded["sha256"] and (previous := _previous_release(index_dir, recorded, photos)):
        return previous
    _same_file(index_dir, recorded, found, photos)
    return path


def _model_record(path: Path) -> Path:
    """Where the sha256 of the model file at ``path`` is recorded with its stat (the cache, one record per
    file path): every cold search checks the file, and hashing 20 MB cost 0.03 s of each."""
    key = hashlib.sha256(str(path.resolve()).encode("utf-8")).hexdigest()[:32]
    return default_cache_root() / "verified" / f"model-{key}.json"


def _previous_release(index_dir: Path, recorded: dict[str, Any], photos: str | None) -> Path | None:
    """The kept file of an earlier release of the shipped model an index was built with, when the shipped
    file changed since (an upgrade that shipped a new ``vse``): the index's vectors live in the earlier
    model's space, so its searches and updates keep using that file, and the user is told how to move."""
    if not is_shipped_joint_model(recorded["name"]):
        return None
    previous = previous_model(str(recorded["name"]), str(recorded["sha256"]))
    if previous is None:
        return None
    _warn_previous_once(str(index_dir), str(recorded["name"]), str(previous["release"]), photos)
    return Path(previous["path"])


@functools.lru_cache(maxsize=64)  # once per index and process: a server asks on every search
def _warn_previous_once(index_dir: str, name: str, release: str, photos: str | None) -> None:
    rebuild = build_command(Path(index_dir), photos, name, "--rebuild")
    logger.warning(
        "%s: built with the %s model of vsekit %s, which this vsekit keeps so the index still works; "
        "the new %s searches better: %s embeds every photo again with it",
        index_dir,
        name,
        release,
        name,
        rebuild,
    )


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
