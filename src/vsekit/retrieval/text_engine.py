"""Sentences into query vectors without torch: the joint model's text side as a cached ONNX graph.

A cold ``vsekit search`` waited about six seconds, five of them importing torch and transformers and
building the BERT model, for a 10 ms sentence pass (bench/results/cold_start.json). The text side of a
joint model whose sentence encoder is the frozen MiniLM (the shipped ``vse``) is exported once per machine
and model file (:mod:`vsekit.embedding.text_tower`: word pieces in, the MiniLM sentence vector and the
joint vector out) and run here with ONNX Runtime and the model's own ``tokenizers`` file: no torch, no
transformers.

The file is ``<cache root>/onnx/text-<key>.onnx``, the key hashing the model file's sha256, the MiniLM
package and its settings and this graph's version; ``<same>.json`` records the file's sha256 and the
check made when it was exported (the graph against PyTorch on a few sentences, within
:data:`TOLERANCE`). A file whose sha256 differs from its record, or a check that failed, is never run:
the index then uses the PyTorch model, as it does when the graph is not there yet
(:meth:`vsekit.retrieval.index.Index.text_side`).

The 105 MB file is hashed once per version of it, not by every cold search (0.07 s, and ONNX Runtime
reading it from bytes in memory cost 0.1 s more than from the file): when its bytes match the record,
``<same>.verified.json`` records the file's device, inode, size, modification and change times (ns);
while the file's stat is that, ONNX Runtime loads it from the file unhashed, and any write to it, a
rename over it or a reset modification time (the change time moves with each) has it hashed again. What
this gives up is a change that leaves every one of those alone (a disk's bit rot under the file system):
the cache is the user's own, and whoever can write the graph can write its records too.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Sequence
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from vsekit.errors import VsekitError
from vsekit.fileio import atomic_write_json, exclusive_lock, read_json_record
from vsekit.resources import default_cache_root
from vsekit.retrieval.file_versions import remember, settled, stat_key
from vsekit.text.lru import LRUCache
from vsekit.text.minilm_files import MINILM_PACKAGE, minilm_max_length, minilm_model_dir

if TYPE_CHECKING:  # exporting needs the loaded model (torch); running the graph does not
    from vsekit.embedding.pipeline import VSEModel

__all__ = ["GRAPH_VERSION", "TOLERANCE", "TextTower", "prepare_tower", "tower_path"]

logger = logging.getLogger(__name__)

#: Bumped when the exported graph changes (its inputs, outputs or what they mean).
GRAPH_VERSION = 1
#: Largest difference from PyTorch accepted in any coordinate of the check's vectors: float32 rounding
#: of a 6-layer transformer stays near 1e-6; a graph off by more computes something else.
TOLERANCE = 1e-4
#: Sentences a tower keeps (a server asked the same query again answers from here).
CACHE_SIZE = 1024
_BATCH = 64  # sentences per ONNX Runtime call, sorted by length (less padding)


def _graph_config(model_sha256: str) -> dict[str, Any]:
    folder = minilm_model_dir()
    return {
        "model_sha256": model_sha256,
        "minilm": MINILM_PACKAGE,
        "minilm_version": version(MINILM_PACKAGE),
        "minilm_bytes": (folder / "model.safetensors").stat().st_size,
        "max_length": minilm_max_length(folder),
        "graph_version": GRAPH_VERSION,
    }


def tower_path(model_sha256: str, cache_root: str | Path | None = None) -> Path:
    """Where the text graph of the model file with ``model_sha256`` is cached on this machine."""
    config = json.dumps(_graph_config(model_sha256), sort_keys=True).encode()
    root = Path(cache_root) if cache_root is not None else default_cache_root()
    return root / "onnx" / f"text-{hashlib.sha256(config).hexdigest()[:16]}.onnx"


class _Tokenizer:
    """MiniLM's word pieces from its ``tokenizer.json`` (the Rust ``tokenizers`` library transformers'
    fast tokenizer wraps), cut at the model's length and padded per batch."""

    def __init__(self) -> None:
        from tokenizers import Tokenizer

        folder = minilm_model_dir()
        self._tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self._tokenizer.enable_truncation(minilm_max_length(folder))
        self._tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")

    def __call__(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        encoded = self._tokenizer.encode_batch(list(texts))
        ids = np.array([e.ids for e in encoded], dtype=np.int64)
        return ids, np.array([e.attention_mask for e in encoded], dtype=np.int64)


def _session(source: bytes | str, path: Path) -> Any:
    """An ONNX Runtime session of the graph at ``path`` from its bytes, or from the file (``str(path)``)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    # ORT's workers spin for a while after each run: on two cores that takes one from the search that
    # follows the sentence (a warm search's p50 went from 4.5 to 7-8 ms with them spinning)
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    try:
        return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own exception types
        raise VsekitError(f"{path}: ONNX Runtime cannot load it ({exc}); delete it") from exc


class _Graph:
    """A loaded text graph: ``graph(ids, mask)`` -> ``(sentence [n, 384], joint [n, D])``."""

    def __init__(self, source: bytes | str, path: Path) -> None:
        self._session = _session(source, path)

    def __call__(self, ids: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        sentence, joint = self._session.run(None, {"input_ids": ids, "attention_mask": mask})
        return sentence, joint


class TextTower:
    """The cached text graph of one model file, run by ONNX Runtime (module docstring); open it with
    :meth:`open`, make it with :func:`prepare_tower`."""

    def __init__(self, graph: _Graph, tokenizer: _Tokenizer, record: dict[str, Any]) -> None:
        self._graph, self._tokenizer = graph, tokenizer
        self.record = record
        self._cache: LRUCache[str, tuple[np.ndarray, np.ndarray]] = LRUCache(CACHE_SIZE)

    @classmethod
    def open(cls, model_sha256: str, cache_root: str | Path | None = None) -> TextTower | None:
        """The graph cached for the model file with ``model_sha256``, or None: not exported on this
        machine yet, made for other settings, damaged (its sha256 is not its record's) or failed its check."""
        path = tower_path(model_sha256, cache_root)
        record = read_json_record(path.with_suffix(".json"))
        if not record or record.get("config") != _graph_config(model_sha256) or not path.is_file():
            return None
        if not _passed(record.get("check", {})):
            return None
        graph = _load_graph(path, str(record.get("sha256")))
        return None if graph is None else cls(graph, _Tokenizer(), record)

    @staticmethod
    def cached(model_sha256: str, cache_root: str | Path | None = None) -> bool:
        """Whether this machine holds a graph for the model file with ``model_sha256`` that passed its
        check (its bytes are checked by :meth:`open`, when it is run)."""
        path = tower_path(model_sha256, cache_root)
        record = read_json_record(path.with_suffix(".json"))
        config_ok = record.get("config") == _graph_config(model_sha256)
        return config_ok and _passed(record.get("check", {})) and path.is_file()

    @property
    def sentence_identity(self) -> dict[str, Any]:
        """The identity of the PyTorch sentence encoder this graph was checked against: its sentence
        vectors are cached under it (:mod:`vsekit.text.sentence_cache`)."""
        return dict(self.record["check"]["sentence_identity"])

    def embed_texts(self, texts: Sequence[str]) -> np.ndarray:
        """Unit joint-space vectors ``[n, D]`` (float32) of ``texts``: what ``VSEModel.embed_texts`` gives."""
        return self._encode(texts, 1)

    def sentences(self, texts: Sequence[str]) -> np.ndarray:
        """MiniLM's mean-pooled sentence vectors ``[n, 384]`` (not normalised), as
        ``MiniLMEncoder.prepare(texts)["sentence"]``."""
        return self._encode(texts, 0)

    def _encode(self, texts: Sequence[str], which: int) -> np.ndarray:
        items = self._cache.lookup(list(texts), self._run)
        return np.stack([item[which] for item in items]).astype(np.float32, copy=False)

    def _run(self, texts: list[str]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for start in range(0, len(order), _BATCH):
            batch = [texts[i] for i in order[start : start + _BATCH]]
            sentence, joint = self._graph(*self._tokenizer(batch))
            out.update((t, (s, j)) for t, s, j in zip(batch, sentence, joint, strict=True))
        return out


def _verified_path(path: Path) -> Path:
    return path.with_suffix(".verified.json")


def _load_graph(path: Path, sha256: str) -> _Graph | None:
    """The graph at ``path`` if its bytes have ``sha256`` (module docstring): loaded from the file when its
    stat is the one recorded when they last matched (and still is after the load), else read, hashed and
    loaded from the bytes hashed; None when they do not match."""
    known = read_json_record(_verified_path(path))
    if known.get("sha256") == sha256 and known.get("stat") == stat_key(path.stat()):
        graph = _Graph(str(path), path)
        if known["stat"] == stat_key(path.stat()):  # not replaced while ONNX Runtime read it
            return graph
    with open(path, "rb") as f:
        before = os.fstat(f.fileno())
        data = f.read()
        after = os.fstat(f.fileno())
    if hashlib.sha256(data).hexdigest() != sha256:
        logger.warning("%s: does not match its recorded sha256; the PyTorch model is used", path)
        return None
    if stat_key(before) == stat_key(after) and settled(after):
        remember(_verified_path(path), {"sha256": sha256, "stat": stat_key(after)})
    return _Graph(data, path)


def _passed(check: dict[str, Any]) -> bool:
    return (
        max(check.get("sentence_max_abs_diff", np.inf), check.get("joint_max_abs_diff", np.inf)) <= TOLERANCE
    )


def prepare_tower(
    model: VSEModel, model_sha256: str, cache_root: str | Path | None = None
) -> TextTower | None:
    """The text graph of ``model`` (its file has ``model_sha256``): the cached one, or exported and checked
    now (a few seconds, once per machine and model file). None when the model's text side cannot be
    exported (not a frozen MiniLM) or the export failed its check (logged; PyTorch stays in use)."""
    from vsekit.embedding.text_tower import export_text_tower, exportable

    if not exportable(model.network):
        return None
    path = tower_path(model_sha256, cache_root)
    with exclusive_lock(path):  # one exporter; a second process finds the file written
        record = read_json_record(path.with_suffix(".json"))
        if record.get("config") == _graph_config(model_sha256) and not _passed(record.get("check", {})):
            return None  # failed its check once: not exported again on every search
        found = TextTower.open(model_sha256, cache_root)
        if found is not None:
            return found
        tokenizer = _Tokenizer()
        data, check = export_text_tower(model.network, path, tokenizer, lambda data: _Graph(data, path))
        record = {"sha256": hashlib.sha256(data).hexdigest(), "config": _graph_config(model_sha256)}
        atomic_write_json(path.with_suffix(".json"), record | {"check": check}, indent=1)
    if not _passed(check):
        logger.warning("%s: differs from PyTorch by more than %g; searches use PyTorch", path, TOLERANCE)
        return None
    return TextTower.open(model_sha256, cache_root)
