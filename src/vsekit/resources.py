"""Files shipped inside the vsekit package: pretrained models by name, recipes, the bundled sample.

One place answers "where is the shipped X?" for the library, the CLI, the tests and the benchmarks. A
shipped model is addressed by name (``vse``, ``captioner``) or by the path of any model file, so
``--model vse`` and ``--model runs/best/model.safetensors`` both work.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from vsekit.errors import VsekitError, command

__all__ = [
    "ALIGNMENT_RECIPES_DIR",
    "CAPTION_RECIPES_DIR",
    "PACKAGE_DIR",
    "PRETRAINED",
    "RECIPES_DIR",
    "REGION_CAPTION_RECIPES_DIR",
    "default_cache_root",
    "SCNLM_RECIPES_DIR",
    "SPLITS_DIR",
    "MODEL_CARDS",
    "is_shipped_joint_model",
    "model_card",
    "model_cards",
    "pretrained_path",
    "previous_model",
    "previous_models",
    "PREVIOUS_DIR",
    "recipe_names",
    "resolve_model_path",
    "sample_data_path",
    "shipped_content_sha256",
]

PACKAGE_DIR = Path(__file__).resolve().parent
RECIPES_DIR = PACKAGE_DIR / "recipes"
CAPTION_RECIPES_DIR = RECIPES_DIR / "captioning"
SCNLM_RECIPES_DIR = RECIPES_DIR / "scnlm"
ALIGNMENT_RECIPES_DIR = RECIPES_DIR / "alignment"
REGION_CAPTION_RECIPES_DIR = RECIPES_DIR / "region_captioning"
#: validation slices carved from training splits (the selection protocol: vsekit.data.splits)
SPLITS_DIR = RECIPES_DIR / "splits"


def default_cache_root() -> Path:
    """Where computed things are cached (image features, parses, sentence vectors): ``$VSEKIT_CACHE`` if
    set, else ``$XDG_CACHE_HOME/vsekit`` or ``~/.cache/vsekit``."""
    if os.environ.get("VSEKIT_CACHE"):
        return Path(os.environ["VSEKIT_CACHE"])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "vsekit"


#: Shipped models: name -> (file under ``pretrained/``, what it is, the command that makes one: its words
#: after ``vsekit``, CORPUS and DIR standing for a corpus and a new run directory).
PRETRAINED: dict[str, tuple[str, str, str]] = {
    "vse": (
        "vse.safetensors",
        "joint-embedding model",
        "train --data CORPUS --recipe vse-best-effnet --out DIR",
    ),
    # the linear bag-of-words encoder of Kiros et al. 2014 (sec. 3.2): the better space for Eq. 15
    # arithmetic (`vsekit index build PHOTOS --model bow`); `vsekit train --recipe bow` re-makes it
    "bow": ("bow.safetensors", "joint-embedding model", "train --data CORPUS --recipe bow --out DIR"),
    # the dependency Tree-LSTM of the T-LSTM seed (appendix A, p = 1): below `vse` and `bow` on dev, shipped
    # so it can be compared and used by name; `vsekit train --recipe tree-lstm-p1` re-makes it
    "tree-lstm": (
        "tree-lstm.safetensors",
        "joint-embedding model",
        "train --data CORPUS --recipe tree-lstm-p1 --out DIR",
    ),
    "captioner": (
        "captioner.safetensors",
        "captioner",
        "train-captioner --data CORPUS --recipe mrnn-lstm-effnet-retrain --out DIR",
    ),
    "aligner": (
        "aligner.safetensors",
        "region-word aligner",
        "train-aligner --data CORPUS --recipe minilm-grid --out DIR",
    ),
    "region-captioner": (
        "region_captioner.safetensors",
        "region captioner",
        "train-region-captioner --data CORPUS --out DIR",
    ),
}
#: The file each training command writes into its run directory (--out DIR).
TRAINED_FILE = {
    "train": "model.safetensors",
    "train-captioner": "captioner.safetensors",
    "train-aligner": "aligner.safetensors",
    "train-region-captioner": "captioner.safetensors",
}


#: One card per shipped model (what it is, its data, how it was selected, dev numbers, size, licences),
#: written by ``ship/model_cards.py`` from the model files and bench/results; read by ``vsekit models``.
MODEL_CARDS = PACKAGE_DIR / "pretrained" / "cards.json"


def model_cards() -> list[dict[str, Any]]:
    """The cards of the shipped models, in the order ``vsekit models`` lists them."""
    try:
        data = json.loads(MODEL_CARDS.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise VsekitError(f"{MODEL_CARDS}: cannot read the model cards ({exc})") from exc
    return list(data["cards"])


def model_card(name: str) -> dict[str, Any]:
    """The card of shipped model ``name``; an unknown name is an error listing the shipped ones."""
    cards = {card["name"]: card for card in model_cards()}
    if name not in cards:
        raise VsekitError(f"unknown shipped model {name!r}; shipped: {', '.join(cards)}")
    return cards[name]


def is_shipped_joint_model(name: str | os.PathLike[str] | None) -> bool:
    """Whether ``name`` names a shipped joint-embedding model (``vse``, ``bow``), not a path."""
    return name is not None and PRETRAINED.get(str(name), ("", ""))[1] == "joint-embedding model"


def recipe_names(directory: Path) -> list[str]:
    """The names of the JSON recipes shipped in ``directory`` (for help texts and errors)."""
    return sorted(p.stem for p in directory.glob("*.json"))


def shipped_content_sha256() -> dict[str, str | None]:
    """Each shipped model's content sha256 as its safetensors header records it (the ``content_sha256``
    field, :data:`vsekit.fileio.CONTENT_SHA256`, checked whenever the file is loaded), by name; None for
    a file missing from this install or one without the field. Reads the headers only (no torch)."""
    found: dict[str, str | None] = {}
    for name in PRETRAINED:
        try:
            with open(pretrained_path(name), "rb") as f:
                size = int.from_bytes(f.read(8), "little")
                header = json.loads(f.read(size)) if 0 < size <= 1 << 24 else {}
            found[name] = str((header.get("__metadata__") or {})["content_sha256"])
        except (OSError, ValueError, KeyError, AttributeError):
            found[name] = None
    return found


def sample_data_path() -> Path:
    """The bundled Flickr8K sample (100 dev photos with 5 captions each)."""
    return PACKAGE_DIR / "sample" / "flickr8k"


def pretrained_path(name: str) -> Path:
    """Where the shipped model ``name`` lives (the file may be absent in a trimmed install)."""
    if name not in PRETRAINED:
        raise VsekitError(f"unknown shipped model {name!r}; shipped: {', '.join(PRETRAINED)}")
    return PACKAGE_DIR / "pretrained" / PRETRAINED[name][0]


#: Shipped model files that a later release replaced, kept so that an index built with one keeps working
#: until ``index build --rebuild`` moves it (``previous.json`` lists them by name and file sha256).
PREVIOUS_DIR = PACKAGE_DIR / "pretrained" / "previous"


def previous_models() -> list[dict[str, Any]]:
    """The kept files of earlier releases (``previous.json`` entries: ``name``, ``release``, ``sha256``,
    with ``path``) that this install holds."""
    try:
        listed = json.loads((PREVIOUS_DIR / "previous.json").read_text(encoding="utf-8"))["models"]
        entries = [{**entry, "path": PREVIOUS_DIR / str(entry["file"])} for entry in listed]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    return [entry for entry in entries if entry["path"].is_file()]


def previous_model(name: str, sha256: str) -> dict[str, Any] | None:
    """The earlier release of shipped model ``name`` whose file has ``sha256``, or None when this install
    keeps no such file."""
    found = [e for e in previous_models() if e.get("name") == name and e.get("sha256") == sha256]
    return found[0] if found else None


def pinned_sidecar(model: str, model_sha256: str, kind: str, file_format: str) -> dict[str, Any] | None:
    """The shipped ``<model>-<kind>.json`` beside model ``model`` (a shipped name), if it is in format
    ``file_format`` and was made for exactly the file with ``model_sha256``; else None (not a shipped name,
    no such file, not JSON, or made for another file: a setting chosen for another model is noise). For
    the file of an earlier release (:func:`previous_model`), the sidecar kept beside it."""
    try:
        path = pretrained_path(model).with_name(f"{model}-{kind}.json")
    except VsekitError:
        return None
    data = _read_sidecar(path, file_format)
    if data is not None and data.get("model_sha256") == model_sha256:
        return data
    previous = previous_model(model, model_sha256)
    if previous is None:
        return None
    data = _read_sidecar(previous["path"].with_name(f"{previous['path'].stem}-{kind}.json"), file_format)
    return data if data is not None and data.get("model_sha256") == model_sha256 else None


def _read_sidecar(path: Path, file_format: str) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("format") == file_format else None


def resolve_model_path(name_or_path: str | os.PathLike[str] | None, default: str) -> Path:
    """A model file from a shipped name (``"vse"``), a path, or None (the shipped ``default``).

    A name that is not shipped and is not an existing file is an error listing the shipped names; a
    shipped model missing from this install is an error saying how to make one.
    """
    if name_or_path is not None and str(name_or_path) not in PRETRAINED:
        path = Path(name_or_path)
        if not path.exists() and os.sep not in str(name_or_path) and path.suffix == "":
            raise VsekitError(
                f"unknown model {str(name_or_path)!r}: not a shipped model ({', '.join(PRETRAINED)}) "
                "and no such file"
            )
        return path
    name = default if name_or_path is None else str(name_or_path)
    path = pretrained_path(name)
    if not path.is_file():
        _, what, words = PRETRAINED[name]
        made = words.split()
        raise VsekitError(
            f"no {what} named {name!r} is shipped with this vsekit ({path} does not exist); pass the path "
            f"of one ({command(*made)} writes DIR/{TRAINED_FILE[made[0]]})"
        )
    return path
