"""The one image-feature path: images -> CNN -> features, computed once and cached on disk, or not.

:func:`compute_features` turns images (an :class:`~vsekit.data.images.ImageCollection`, a corpus, an
id -> path mapping, or a list of files or PIL images) into the features a :class:`FeatureSpec` describes.
Cached or not, every image goes through the same CNN step: uint8 crops decoded by threads ahead of the
network, then the engine (:mod:`vsekit.vision.engine`: ONNX Runtime running the graph exported from our
network, or the BN-folded, channels-last PyTorch network of
:func:`~vsekit.vision.backbones.prepare_for_inference`), the same batching, and float16 rounding of the
activations (the cache's storage type), so a photo gets identical numbers whichever route it takes with one
engine, and numbers equal up to one float16 step across engines.
:func:`features_for_model` does the same from a saved model's ``config["image"]`` and checks the width.

Two kinds of features come out of one CNN pass:

* ``one-layer``: the global-average-pooled penultimate activations (the classifier's input), the image
  representation of Kiros et al. 2014 and of the CNN-MME baseline of Vilalta et al. 2017;
* ``full``: the spatially averaged activations of every conv layer plus the FC layer, the raw input of the
  Full-Network Embedding (Vilalta et al. 2017, section 3.1). Its fitted, ternary form lives next to it.

A cache directory holds one feature matrix for one image collection under one configuration: backbone,
weights file (by content hash), layer set and preprocessing. Rows are keyed by image file (relative id,
size and modification time), so an edited or added photo is recomputed and nothing else is. Rows are
written into a float16 memory map and a ``done`` mask is committed atomically every few seconds, which is
what makes an interrupted extraction resumable without recomputing finished images. A directory made
with another configuration is refused. Processes sharing a cache take turns: each holds ``<dir>.lock``
(an exclusive ``flock``) while it fills the directory and copies its rows out, so two trainings started
side by side cannot corrupt it. A collection whose requested rows are all cached is read without loading
the CNN.

Layout of a cache directory::

    meta.json         configuration, image ids and file identities, dims, failed images, generation
    raw.f16           float16 memmap [n_images, dim] (one-layer: pooled_dim; full: sum of tap dims)
    done.npy          bool [n_images]: rows that hold finished features
                      (generation g > 0, after the image set changed: raw.g.f16 and done.g.npy; the new
                      generation's files are written beside the old ones and meta.json swaps them in)
    fne.safetensors   fitted FullNetworkEmbedding statistics (full only, after ``fit_fne``)
    fne_codes.npy     int8 {-1,0,1} [n_images, dim] (full only): the FNE, one byte per value
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import threading
import time
import warnings
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from tqdm.auto import tqdm

from vsekit.data.corpus import Corpus
from vsekit.data.images import ImageCollection
from vsekit.device import resolve_device
from vsekit.errors import ConfigMismatchError, ImageError, VsekitError
from vsekit.fileio import atomic_save_npy, atomic_write_bytes, new_memmap, preallocate
from vsekit.resources import default_cache_root
from vsekit.vision.backbones import (
    BACKBONES,
    load_backbone,
    prepare_for_inference,
    resolve_weights,
    weights_fingerprint,
)
from vsekit.vision.engine import (
    INT8,
    OnnxCNN,
    OnnxMismatchError,
    default_engine,
    precision_of,
    resolve_engine,
)
from vsekit.vision.fne import DEFAULT_THRESHOLDS, FullNetworkEmbedding
from vsekit.vision.preprocess import Preprocessing, load_image, upright_rgb
from vsekit.vision.spec import FEATURE_KINDS, FeatureSpec

__all__ = [
    "FEATURE_KINDS",
    "DamagedMatrixError",
    "LAYER_SETS",
    "FeatureConfig",
    "FeatureSpec",
    "FeatureStore",
    "cache_dir_for",
    "cache_lock",
    "check_model_features",
    "cnn_extractor",
    "compute_features",
    "default_cache_root",
    "extract_features",
    "extract_fne",
    "feature_config",
    "features_for_model",
    "image_features",
    "readable_image_ids",
    "require_fne",
]

#: What :func:`compute_features` accepts as images: a collection or corpus (cached by default), an
#: id -> path mapping, or a sequence of image files or PIL images (uncached by default).
Images = ImageCollection | Corpus | Mapping[str, Any] | Sequence[Any]

LAYER_SETS = ("one-layer", "full")
FORMAT_VERSION = 1
_COMMIT_EVERY_S = 5.0
#: Threads decoding and resizing photos ahead of the CNN (measured in bench/bench_extract.py).
_DECODE_WORKERS = 2
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FeatureConfig:
    """Everything that changes the numbers in a feature matrix; its hash names the cache directory."""

    backbone: str
    weights_sha: str
    layers: str
    preprocessing: str
    format_version: int = FORMAT_VERSION
    #: "int8" for rows of the int8 engine (another cache); float rows keep the key they always had.
    precision: str = "fp32"

    def key(self) -> str:
        fields = asdict(self)
        if fields["precision"] == "fp32":
            del fields["precision"]
        blob = json.dumps(fields, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:12]

    def describe(self) -> str:
        return (
            f"backbone={self.backbone}, weights={self.weights_sha}, layers={self.layers}, "
            f"preprocessing={self.preprocessing}"
            + (f", precision={self.precision}" if self.precision != "fp32" else "")
        )


def feature_config(
    backbone: str, layers: str = "one-layer", weights: str | Path | None = None, engine: str | None = None
) -> FeatureConfig:
    """The cache key of ``backbone``'s ``layers`` activations with ``weights`` (None: the installed ones)
    as ``engine`` computes them (see :func:`cache_config`)."""
    return cache_config(_spec_for_layers(backbone, layers, weights), engine)


def _spec_for_layers(backbone: str, layers: str, weights: str | Path | None) -> FeatureSpec:
    if backbone not in BACKBONES:
        raise VsekitError(f"unknown backbone {backbone!r}; known: {', '.join(sorted(BACKBONES))}")
    if layers not in LAYER_SETS:
        raise VsekitError(f"unknown layer set {layers!r}; known: {', '.join(LAYER_SETS)}")
    return FeatureSpec(backbone, "one-layer" if layers == "one-layer" else "fne", weights=weights)


def cache_config(spec: FeatureSpec, engine: str | None = None) -> FeatureConfig:
    """The cache key of ``spec``'s activations (``layers="full"`` for FNE: the codes are derived data) as
    ``engine`` (None: the default engine) computes them: the int8 engine's rows are cached apart."""
    path = resolve_weights(spec.backbone, spec.weights)
    return FeatureConfig(
        backbone=spec.backbone,
        weights_sha=weights_fingerprint(path),
        layers=spec.layers,
        preprocessing=spec.preprocessing.key(),
        precision=precision_of(engine),
    )


_held_locks = threading.local()


@contextlib.contextmanager
def cache_lock(path: str | Path) -> Iterator[None]:
    """Hold the exclusive lock of the cache directory ``path`` (a ``<dir>.lock`` file beside it).

    Two processes filling one cache (say two trainings started side by side) would otherwise both
    rewrite ``raw.f16`` and ``meta.json`` and read each other's half-written files. The lock is
    re-entrant within a thread, so ``image_features`` can hold it across the ``extract_features`` and
    ``fit_fne`` it calls; a waiting process simply blocks until the other one has finished.
    """
    key = str(Path(path).resolve())
    held = getattr(_held_locks, "paths", None)
    if held is None:
        held = _held_locks.paths = {}
    if key in held:
        held[key] += 1
        try:
            yield
        finally:
            held[key] -= 1
        return
    lock_path = Path(key + ".lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        held[key] = 1
        try:
            yield
        finally:
            del held[key]
            fcntl.flock(handle, fcntl.LOCK_UN)


def _file_identity(path: Path) -> list[int]:
    st = path.stat()
    return [st.st_size, st.st_mtime_ns]


class DamagedMatrixError(VsekitError):
    """A feature matrix whose bytes no longer match the checksum its extraction recorded."""


#: Matrices verified in this process: (file, size, mtime_ns, checksum); each is hashed at most once.
_VERIFIED: set[tuple[str, int, int, str]] = set()


def _matrix_digest(raw_path: Path, done: np.ndarray) -> str:
    """sha256 of the raw matrix file's bytes, then of the done mask."""
    digest = hashlib.sha256()
    with open(raw_path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    digest.update(np.ascontiguousarray(done, dtype=np.bool_).tobytes())
    return digest.hexdigest()


class FeatureStore:
    """One cache directory: a feature matrix for a set of image files under one configuration.

    A finished extraction records a sha256 of the matrix (and done mask) of its generation in
    ``meta.json``; :meth:`open` checks it once per process per file version, so bits flipped on disk
    under an intact header are a :class:`DamagedMatrixError` naming the file, never features.
    """

    def __init__(self, path: Path, meta: dict) -> None:
        self.path = Path(path)
        self.meta = meta
        self.config = FeatureConfig(**meta["config"])
        self.image_ids: list[str] = list(meta["image_ids"])
        self.dim: int = int(meta["dim"])
        self._row = {image_id: i for i, image_id in enumerate(self.image_ids)}

    # ----------------------------------------------------------------- opening
    @classmethod
    def open(cls, path: str | Path, expect: FeatureConfig | None = None, verify: bool = True) -> FeatureStore:
        """Open an existing cache; refuse it if it was made with a configuration other than ``expect``,
        or (``verify``) if its matrix fails its checksum (:meth:`verify`)."""
        path = Path(path)
        meta_path = path / "meta.json"
        if not meta_path.is_file():
            raise VsekitError(
                f"{path}: not a vsekit feature cache (no meta.json); run `vsekit extract` first"
            )
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
            store = cls(path, meta)
            if not all(isinstance(i, str) for i in store.image_ids) or store.dim <= 0:
                raise ValueError("bad 'image_ids' or 'dim'")
        except (ValueError, KeyError, TypeError, RecursionError) as exc:  # JSON and Unicode errors too
            raise VsekitError(
                f"{meta_path}: unreadable feature-cache metadata ({type(exc).__name__}: {exc}); "
                f"delete {path} and extract again"
            ) from exc
        store._check_files()
        if verify:
            store.verify()
        if expect is not None and store.config != expect:
            raise ConfigMismatchError(
                f"{path}: this feature cache was made with {store.config.describe()}; "
                f"this run needs {expect.describe()}. Use another --cache-dir or delete that directory."
            )
        return store

    @property
    def layers(self) -> str:
        return self.config.layers

    @property
    def tap_names(self) -> list[str] | None:
        return self.meta.get("tap_names")

    @property
    def tap_dims(self) -> list[int] | None:
        return self.meta.get("tap_dims")

    @property
    def failed(self) -> dict[str, str]:
        return dict(self.meta.get("failed", {}))

    @property
    def generation(self) -> int:
        """Which ``raw``/``done`` files ``meta.json`` names: a new generation each time the rows change."""
        return int(self.meta.get("generation", 0))

    def _raw_path(self) -> Path:
        g = self.generation
        return self.path / ("raw.f16" if g == 0 else f"raw.{g}.f16")

    def _done_path(self) -> Path:
        g = self.generation
        return self.path / ("done.npy" if g == 0 else f"done.{g}.npy")

    def _check_files(self) -> None:
        """The done mask and raw matrix fit ``meta.json``; a truncated or garbage file is a VsekitError.

        Without a done mask nothing counts as finished and the raw matrix is never read, so it is not
        checked then.
        """
        done_path = self._done_path()
        if not done_path.is_file():
            return
        fix = f"delete {self.path} and extract again"
        try:
            done = np.load(done_path, allow_pickle=False)
        except Exception as exc:  # numpy parses the header with ast: SyntaxError, TokenError, ValueError...
            why = (str(exc).splitlines() or [type(exc).__name__])[0]
            raise VsekitError(f"{done_path}: damaged feature-cache file ({why}); {fix}") from None
        if done.dtype != np.bool_ or done.shape != (len(self.image_ids),):
            raise VsekitError(
                f"{done_path}: damaged feature-cache file ({done.dtype} {done.shape}, expected bool "
                f"({len(self.image_ids)},) as meta.json says); {fix}"
            )
        if done.any() and not self._raw_fits():
            raw_path = self._raw_path()
            size = raw_path.stat().st_size if raw_path.is_file() else "no"
            raise VsekitError(
                f"{raw_path}: damaged feature-cache file ({size} bytes, expected "
                f"{len(self.image_ids) * self.dim * 2} for {len(self.image_ids)} x {self.dim} float16); {fix}"
            )

    def verify(self) -> None:
        """Check the matrix against the checksum of the generation's last finished extraction (if any),
        at most once per process per file version; a mismatch is a :class:`DamagedMatrixError`."""
        recorded = self.meta.get("checksum")
        if not isinstance(recorded, dict) or recorded.get("generation") != self.generation:
            return  # an extraction still running, or a cache from before checksums
        raw_path = self._raw_path()
        st = raw_path.stat()
        key = (str(raw_path.resolve()), st.st_size, st.st_mtime_ns, str(recorded.get("sha256")))
        if key in _VERIFIED:
            return
        if _matrix_digest(raw_path, self.done_mask()) != recorded.get("sha256"):
            raise DamagedMatrixError(
                f"{raw_path}: damaged feature matrix (its bytes no longer match the checksum in meta.json); "
                "`vsekit extract` with the same arguments extracts it again"
            )
        _VERIFIED.add(key)

    def forget_rows(self) -> None:
        """Mark every row unfinished (a damaged matrix): the next extraction recomputes them all."""
        self.meta.pop("checksum", None)
        atomic_save_npy(self._done_path(), np.zeros(len(self.image_ids), dtype=bool))
        self._write_meta()

    def _raw_fits(self) -> bool:
        raw_path = self._raw_path()
        return raw_path.is_file() and raw_path.stat().st_size == len(self.image_ids) * self.dim * 2

    def done_mask(self) -> np.ndarray:
        done_path = self._done_path()
        if not done_path.is_file():
            return np.zeros(len(self.image_ids), dtype=bool)
        return np.load(done_path)

    def _raw(self, mode: str = "r") -> np.memmap:
        return np.memmap(self._raw_path(), dtype=np.float16, mode=mode, shape=(len(self.image_ids), self.dim))

    def rows(self, image_ids: Sequence[str]) -> np.ndarray:
        missing = [i for i in image_ids if i not in self._row]
        if missing:
            raise VsekitError(
                f"{self.path}: {len(missing)} image(s) have no features in this cache, e.g. {missing[0]!r}; "
                "run `vsekit extract` on the corpus"
            )
        rows = np.fromiter((self._row[i] for i in image_ids), dtype=np.int64, count=len(image_ids))
        done = self.done_mask()
        if not done[rows].all():
            bad = [image_ids[k] for k in np.flatnonzero(~done[rows])]
            why = self.failed.get(bad[0], "extraction did not finish")
            raise VsekitError(
                f"{self.path}: {len(bad)} image(s) have no finished features, e.g. {bad[0]!r} ({why}); "
                "re-run `vsekit extract` (it resumes) or leave those images out"
            )
        return rows

    def raw(self, image_ids: Sequence[str] | None = None) -> np.ndarray:
        """Raw pooled activations as float32 [n, dim], in the order of ``image_ids`` (default: all)."""
        ids = self.image_ids if image_ids is None else list(image_ids)
        rows = self.rows(ids)
        return np.asarray(self._raw()[rows], dtype=np.float32)

    # --------------------------------------------------------------------- FNE
    def fne(self) -> FullNetworkEmbedding:
        path = self.path / "fne.safetensors"
        if not path.is_file():
            raise VsekitError(
                f"{self.path}: no fitted Full-Network Embedding here; run `vsekit extract --fne`"
            )
        return FullNetworkEmbedding.load(path)

    def fne_codes(self, image_ids: Sequence[str] | None = None) -> np.ndarray:
        """FNE ternary codes int8 [n, dim] in the order of ``image_ids`` (default: all)."""
        ids = self.image_ids if image_ids is None else list(image_ids)
        rows = self.rows(ids)
        codes = np.load(self.path / "fne_codes.npy", mmap_mode="r")
        return np.asarray(codes[rows])

    def fit_fne(
        self,
        train_ids: Sequence[str],
        thresholds: tuple[float, float] = DEFAULT_THRESHOLDS,
        chunk: int = 512,
    ) -> FullNetworkEmbedding:
        """Fit the FNE statistics on the training images only, then write codes for every finished image."""
        if self.layers != "full":
            raise VsekitError(f"{self.path}: the Full-Network Embedding needs layers='full' features")
        if len(train_ids) == 0:
            raise VsekitError("cannot fit the Full-Network Embedding on an empty training split")
        fne = FullNetworkEmbedding(
            thresholds=thresholds, layer_names=self.tap_names, layer_dims=self.tap_dims
        )
        rows = self.rows(list(train_ids))
        raw = self._raw()
        for start in range(0, len(rows), chunk):
            fne.partial_fit(np.asarray(raw[np.sort(rows[start : start + chunk])], dtype=np.float32))
        done = self.done_mask()
        codes = np.zeros((len(self.image_ids), self.dim), dtype=np.int8)
        for start in range(0, len(self.image_ids), chunk):
            block = slice(start, start + chunk)
            codes[block] = fne.transform(np.asarray(raw[block], dtype=np.float32))
        codes[~done] = 0
        atomic_save_npy(self.path / "fne_codes.npy", codes)
        fne.save(self.path / "fne.safetensors")
        self.meta["fne_fit_images"] = int(len(rows))
        self._write_meta()
        return fne

    def _write_meta(self) -> None:
        atomic_write_bytes(self.path / "meta.json", json.dumps(self.meta, indent=1).encode())


# -------------------------------------------------------------------- the CNN step
class _CNN:
    """The one CNN step of both routes, float16 activations out: the exported graph in ONNX Runtime, or
    the BN-folded channels-last PyTorch backbone (see :mod:`vsekit.vision.engine` for the choice)."""

    def __init__(self, spec: FeatureSpec, device: str | torch.device, engine: str | None = None) -> None:
        self.spec = spec
        self.device = resolve_device(device)
        self.full = spec.layers == "full"
        self.preprocessing: Preprocessing = spec.preprocessing
        requested = engine if engine is not None else default_engine()
        self.engine = resolve_engine(requested, self.device)
        self.onnx: OnnxCNN | None = None
        if self.engine == INT8:  # asked for by name: no silent fallback to other numbers
            self.onnx = OnnxCNN(spec, self.device, int8=True)
        elif self.engine == "onnxruntime":
            try:
                self.onnx = OnnxCNN(spec, self.device)
            except OnnxMismatchError as exc:
                if requested == "onnxruntime":
                    raise
                log.warning("%s; extracting with PyTorch instead", exc)
                self.engine = "torch"
        model = load_backbone(spec.backbone, spec.weights, device=self.device)
        self.dims: dict[str, Any] = {"dim": sum(model.tap_dims()) if self.full else model.pooled_dim}
        if self.full:
            self.dims.update(tap_names=model.tap_names(), tap_dims=model.tap_dims())
        self.model = prepare_for_inference(model) if self.onnx is None else None

    @property
    def dim(self) -> int:
        return int(self.dims["dim"])

    def __call__(self, pixels: np.ndarray) -> np.ndarray:
        """Pooled activations (one-layer) or all taps concatenated (full) of uint8 crops [n, h, w, 3],
        float16 [n, dim]."""
        if self.onnx is not None:
            return self.onnx(pixels).astype(np.float16)
        # NHWC floats seen as NCHW: already the channels-last layout the network runs in, no copy.
        x = torch.from_numpy(self.preprocessing.normalise(pixels)).permute(0, 3, 1, 2)
        with torch.inference_mode():
            pooled, taps = self.model.forward_features(
                x.to(self.device, memory_format=torch.channels_last), taps=self.full
            )
            out = torch.cat(taps, dim=1) if self.full else pooled
            return out.float().cpu().numpy().astype(np.float16)

    def batches(
        self, items: list[tuple[str, Any]], batch_size: int
    ) -> Iterator[tuple[list, list[str], np.ndarray | None, dict[str, str]]]:
        """What the cache fills itself from (any extractor with ``spec``, ``dims`` and this method)."""
        return _run_cnn(items, self, batch_size)


def cnn_extractor(spec: FeatureSpec, device: str | torch.device = "auto", engine: str | None = None) -> _CNN:
    """The CNN step of the cache as an extractor: ``spec``, ``dims`` and ``batches(items, batch_size)``
    yielding ``(batch, ok ids, float16 rows, {id: error})``. A process that fills shards of a cache
    elsewhere (:mod:`vsekit.distributed`) builds this once and computes exactly the rows the cache would
    with the same ``engine`` (as in :func:`extract_features`)."""
    return _CNN(spec, device, engine)


def _decode(source: Any) -> Image.Image:
    """An RGB image from a file path or an (already opened) PIL image."""
    if isinstance(source, Image.Image):
        try:
            return upright_rgb(source)  # a photo a user opened is seen upright, as its file would be
        except (OSError, ValueError, SyntaxError) as exc:
            raise ImageError(f"image: cannot read image ({exc or type(exc).__name__})") from exc
    return load_image(source)


def _load_batch(
    paths: list[tuple[str, Any]], preprocessing: Preprocessing
) -> tuple[list[str], np.ndarray | None, dict[str, str]]:
    """Decode, resize and crop ``(id, file or PIL image)`` pairs: ``(ok ids, uint8 crops [n, h, w, 3],
    {id: error})``. Normalisation happens per batch in the engine."""
    crop = preprocessing.crop
    pixels = np.empty((len(paths), crop, crop, 3), dtype=np.uint8)
    ok_ids, failed = [], {}
    for image_id, source in paths:
        try:
            pixels[len(ok_ids)] = preprocessing.crop_uint8(_decode(source))
            ok_ids.append(image_id)
        except ImageError as exc:
            failed[image_id] = str(exc)
    return ok_ids, (pixels[: len(ok_ids)] if ok_ids else None), failed


def _batches(items: list, size: int) -> Iterator[list]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _run_cnn(
    items: list[tuple[str, Any]], cnn: _CNN, batch_size: int
) -> Iterator[tuple[list, list[str], np.ndarray | None, dict[str, str]]]:
    """``(batch, ok ids, float16 rows of the ok ids, {id: error})`` per batch of ``items``.

    ``_DECODE_WORKERS`` threads decode the next batches while the CNN runs on this one (Pillow releases
    the GIL while it decodes and resizes); at most ``_DECODE_WORKERS + 1`` batches are in memory.
    """
    batches = list(_batches(items, batch_size))
    if not batches:
        return
    with ThreadPoolExecutor(max_workers=_DECODE_WORKERS) as pool:
        pending = deque(pool.submit(_load_batch, b, cnn.preprocessing) for b in batches[:_DECODE_WORKERS])
        for k, batch in enumerate(batches):
            ok_ids, pixels, bad = pending.popleft().result()
            if k + _DECODE_WORKERS < len(batches):
                pending.append(pool.submit(_load_batch, batches[k + _DECODE_WORKERS], cnn.preprocessing))
            yield batch, ok_ids, (cnn(pixels) if pixels is not None else None), bad


# -------------------------------------------------------------------- the cache
def cache_dir_for(
    images: ImageCollection | Corpus, config: FeatureConfig, cache_root: str | Path | None = None
) -> Path:
    """``<root>/features/{name}-{sha256(resolved root)[:8]}-{backbone}-{layers}-{config.key()}``."""
    root = Path(cache_root) if cache_root is not None else default_cache_root()
    tag = hashlib.sha256(str(Path(images.root).resolve()).encode()).hexdigest()[:8]
    return root / "features" / f"{images.name}-{tag}-{config.backbone}-{config.layers}-{config.key()}"


def _store_path(
    images: ImageCollection | Corpus,
    config: FeatureConfig,
    cache_dir: str | Path | None,
    cache_root: str | Path | None,
) -> Path:
    return Path(cache_dir) if cache_dir is not None else cache_dir_for(images, config, cache_root)


def _as_collection(images: Any) -> ImageCollection | None:
    if isinstance(images, ImageCollection):
        return images
    if isinstance(images, Corpus):
        return images.image_collection()
    if isinstance(images, Mapping):
        files = [Path(p) for p in images.values()]
        root = Path(os.path.commonpath([str(p.absolute().parent) for p in files])) if files else Path.cwd()
        return ImageCollection(name="images", root=root, images=dict(images))
    return None


def _requested(collection: ImageCollection, ids: list[str]) -> dict[str, tuple[str, list[int]]]:
    return {i: (str(Path(collection.images[i]).resolve()), _file_identity(collection.images[i])) for i in ids}


def _reconcile(
    path: Path, config: FeatureConfig, requested: dict[str, tuple[str, list[int]]]
) -> tuple[FeatureStore | None, dict[str, tuple[str, list[int]]], bool]:
    """``(existing store or None, its rows whose file is unchanged, whether it already fits the request)``."""
    if not (path / "meta.json").is_file():
        return None, {}, False
    old = FeatureStore.open(path, expect=config, verify=False)
    try:
        old.verify()
    except DamagedMatrixError as exc:  # one line, then this generation's rows are extracted again
        warnings.warn(f"{exc}: extracting its {len(old.image_ids)} rows again", stacklevel=4)
        old.forget_rows()
    kept: dict[str, tuple[str, list[int]]] = {}
    for image_id, file_path in old.meta.get("paths", {}).items():
        if Path(file_path).is_file() and _file_identity(Path(file_path)) == old.meta["identities"][image_id]:
            kept[image_id] = (file_path, old.meta["identities"][image_id])
    fits = all(kept.get(i) == requested[i] for i in requested) and len(kept) == len(old.image_ids)
    return old, kept, fits


def _prepare_store(
    path: Path,
    config: FeatureConfig,
    requested: dict[str, tuple[str, list[int]]],
    dims: dict,
    reconciled: tuple[FeatureStore | None, dict[str, tuple[str, list[int]]], bool],
) -> FeatureStore:
    """Create the cache, or reconcile an existing one with the requested image files.

    The store keeps the union of what it had and what is asked for: a row survives while its file is
    unchanged (same size and modification time), so extracting one split and then the whole corpus
    recomputes nothing twice. A row whose file changed or vanished is dropped.
    """
    dim = dims["dim"]
    old, kept, fits = reconciled
    if old is not None:
        if old.dim != dim:
            raise ConfigMismatchError(f"{path}: cached features have dimension {old.dim}, expected {dim}")
        if fits and old._raw_fits():
            return old
    entries = {**kept, **requested}
    all_ids = sorted(entries)
    path.mkdir(parents=True, exist_ok=True)
    for stale in ("fne.safetensors", "fne_codes.npy"):  # rows are about to move: old codes no longer align
        (path / stale).unlink(missing_ok=True)
    meta = {
        "config": asdict(config),
        "image_ids": all_ids,
        "paths": {i: entries[i][0] for i in all_ids},
        "identities": {i: entries[i][1] for i in all_ids},
        "dim": dim,
        "tap_names": dims.get("tap_names"),
        "tap_dims": dims.get("tap_dims"),
        "failed": {},
        "generation": old.generation + 1 if old is not None else 0,
        "engines": list(old.meta.get("engines", [])) if old is not None else [],  # rows carried over
    }
    store = FeatureStore(path, meta)
    done = np.zeros(len(all_ids), dtype=bool)
    tmp_raw = store._raw_path().with_name(store._raw_path().name + ".new")
    new_raw = new_memmap(tmp_raw, np.float16, (len(all_ids), dim), name=store._raw_path())
    old_done = old.done_mask() if old is not None else np.zeros(0, dtype=bool)
    if old_done.any():  # carry over finished rows whose file is unchanged
        old_raw = old._raw()
        for new_row, image_id in enumerate(all_ids):
            old_row = old._row.get(image_id)
            if old_row is not None and old_done[old_row] and kept.get(image_id) == entries[image_id]:
                new_raw[new_row] = old_raw[old_row]
                done[new_row] = True
        del old_raw
    new_raw.flush()
    del new_raw
    # The new generation's files go beside the old ones; meta.json, written last and atomically, is the
    # commit. A kill or a full disk before it leaves the old cache whole; after it, the old files are
    # only removed.
    tmp_raw.replace(store._raw_path())
    atomic_save_npy(store._done_path(), done)
    store._write_meta()
    _remove_other_generations(path, keep={store._raw_path().name, store._done_path().name})
    return store


def _remove_other_generations(path: Path, keep: set[str]) -> None:
    for stale in [*path.glob("raw*.f16"), *path.glob("done*.npy"), *path.glob("raw*.f16.new")]:
        if stale.name not in keep:
            stale.unlink(missing_ok=True)


def _cached_store(
    collection: ImageCollection,
    spec: FeatureSpec,
    *,
    cache_dir: str | Path | None = None,
    cache_root: str | Path | None = None,
    device: str | torch.device = "auto",
    batch_size: int = 32,
    skip_bad_images: bool = False,
    progress: bool = True,
    config: FeatureConfig | None = None,
    make_extractor: Any = None,
    engine: str | None = None,
) -> FeatureStore:
    """The cache of ``collection`` under ``spec``, filled for every image of it (the CNN runs only when
    some image has no finished row).

    ``config`` and ``make_extractor`` (a ``device -> extractor`` factory) replace the one-layer / full CNN
    step for other per-image rows of the same cache machinery (the regions of :mod:`vsekit.vision.regions`).
    """
    config = config if config is not None else cache_config(spec, engine)
    path = _store_path(collection, config, cache_dir, cache_root)
    ids = sorted(collection.images)
    if not ids:
        raise VsekitError(f"{collection.root}: the collection has no images")
    for image_id in ids:
        if not collection.images[image_id].is_file():
            raise ImageError(f"{collection.images[image_id]}: image file not found")
    with cache_lock(path):  # one writer per cache directory at a time
        requested = _requested(collection, ids)
        reconciled = _reconcile(path, config, requested)
        old, _, fits = reconciled
        if fits and old.done_mask()[[old._row[i] for i in ids]].all():
            return old  # everything cached: no CNN
        cnn = make_extractor(device) if make_extractor is not None else _CNN(spec, device, engine)
        store = _prepare_store(path, config, requested, cnn.dims, reconciled)
        _fill_store(store, collection, ids, cnn, batch_size, skip_bad_images, progress)
        return FeatureStore.open(store.path, expect=config)


def _fill_store(
    store: FeatureStore,
    collection: ImageCollection,
    ids: list[str],
    cnn: Any,
    batch_size: int,
    skip_bad_images: bool,
    progress: bool,
) -> None:
    """Run the CNN over the store's unfinished rows, committing every few seconds and on the way out.

    ``cnn`` is the one-layer / full-network :class:`_CNN` or any extractor with the same ``spec``
    (``backbone``, ``layers``) and ``batches`` (the region extractor of :mod:`vsekit.vision.regions`).
    """
    done = store.done_mask()
    todo = [(image_id, collection.images[image_id]) for image_id in ids if not done[store._row[image_id]]]
    failed = store.meta.setdefault("failed", {})
    if todo:  # which engines filled rows (they agree within the stored float16; see vision/engine.py)
        engines = set(store.meta.get("engines", [])) | {getattr(cnn, "engine", "torch")}
        store.meta["engines"] = sorted(engines)
    for image_id, _ in todo:
        failed.pop(image_id, None)
    if todo:  # codes fitted before these rows existed would be stale, and so would the checksum
        for stale in ("fne.safetensors", "fne_codes.npy"):
            (store.path / stale).unlink(missing_ok=True)
        if store.meta.pop("checksum", None) is not None:
            store._write_meta()  # before any row changes
    preallocate(store._raw_path(), name=store._raw_path())  # a cache from before reserving may be sparse
    raw = store._raw(mode="r+")
    last_commit = time.monotonic()

    def commit(finished: bool = False) -> None:
        raw.flush()
        atomic_save_npy(store._done_path(), done)
        if finished:  # the matrix as this extraction leaves it: checked when the cache is opened
            digest = _matrix_digest(store._raw_path(), done)
            store.meta["checksum"] = {"generation": store.generation, "sha256": digest}
            st = store._raw_path().stat()  # just hashed: its open() need not hash it again
            _VERIFIED.add((str(store._raw_path().resolve()), st.st_size, st.st_mtime_ns, digest))
        store._write_meta()

    bar = tqdm(
        total=len(ids),
        initial=len(ids) - len(todo),
        desc=f"extract {cnn.spec.backbone} {cnn.spec.layers}",
        unit="img",
        disable=not progress,
    )
    finished = False
    try:
        for batch, ok_ids, rows, bad in cnn.batches(todo, batch_size):
            if rows is not None:
                idx = [store._row[i] for i in ok_ids]
                raw[idx] = rows
                done[idx] = True
            if bad:
                failed.update(bad)
                if not skip_bad_images:
                    first = next(iter(bad.values()))
                    raise ImageError(f"{first} (use --skip-bad-images to leave it out and go on)")
                for message in bad.values():
                    warnings.warn(f"skipped: {message}", stacklevel=3)
            bar.update(len(batch))
            if getattr(cnn, "commit_every_batch", False) or time.monotonic() - last_commit > _COMMIT_EVERY_S:
                commit()
                last_commit = time.monotonic()
        finished = True
    finally:
        commit(finished)
        bar.close()


def extract_features(
    corpus: Corpus | ImageCollection,
    backbone: str = "mobilenet_v2",
    layers: str = "one-layer",
    *,
    cache_dir: str | Path | None = None,
    cache_root: str | Path | None = None,
    weights: str | Path | None = None,
    device: str = "auto",
    batch_size: int = 32,
    skip_bad_images: bool = False,
    progress: bool = True,
    engine: str | None = None,
    make_extractor: Any = None,
) -> FeatureStore:
    """Compute (or resume computing) features for every image of ``corpus`` and return the store.

    ``corpus`` may be a captioned corpus or any image collection (a plain folder of photos). A corrupt or
    unreadable image stops the run with its name (finished rows are committed first, so a re-run resumes)
    unless ``skip_bad_images``, which records it under ``failed`` and goes on: its row stays unfinished,
    never zero-filled, and asking for its features later is an error naming it. ``engine``: ``auto``,
    ``onnxruntime`` or ``torch`` (None: :func:`~vsekit.vision.engine.default_engine`); the cache is
    shared by the engines, which agree within the float16 it stores (:mod:`vsekit.vision.engine`).

    ``make_extractor``: a ``device -> extractor`` factory replacing the in-process CNN (default
    :func:`cnn_extractor`), e.g. the Ray actor pool of :mod:`vsekit.distributed.extract`, which computes
    shards elsewhere; the rows land in the same cache. An extractor with ``commit_every_batch = True``
    has each of its batches committed as it arrives (a shard is finished or absent, never half there).
    """
    spec = _spec_for_layers(backbone, layers, weights)
    collection = _as_collection(corpus)
    if collection is None:
        raise VsekitError(
            f"extract_features needs a corpus or an image collection, got {type(corpus).__name__}"
        )
    return _cached_store(
        collection,
        spec,
        cache_dir=cache_dir,
        cache_root=cache_root,
        device=device,
        batch_size=batch_size,
        skip_bad_images=skip_bad_images,
        progress=progress,
        engine=engine,
        make_extractor=make_extractor,
    )


def extract_fne(
    corpus: Corpus,
    backbone: str = "mobilenet_v2",
    fit_split: str = "train",
    thresholds: tuple[float, float] = DEFAULT_THRESHOLDS,
    **kwargs,
) -> FeatureStore:
    """Full-network activations for every image, then the FNE fitted on ``fit_split`` and applied to all."""
    config = feature_config(backbone, "full", kwargs.get("weights"), kwargs.get("engine"))
    with cache_lock(_store_path(corpus, config, kwargs.get("cache_dir"), kwargs.get("cache_root"))):
        store = extract_features(corpus, backbone, "full", **kwargs)
        store.fit_fne(corpus.split(fit_split).image_ids(), thresholds=thresholds)
    return store


# -------------------------------------------------------------------- images -> features
def _fne_codes(
    fne: FullNetworkEmbedding, n: int, dim: int, raw_rows, backbone: str, chunk: int = 512
) -> np.ndarray:
    """FNE codes of ``n`` images, ``raw_rows(start, stop)`` giving their activations a chunk at a time."""
    if fne.dim != dim:
        raise ConfigMismatchError(
            f"the model's Full-Network Embedding has {fne.dim} features but {backbone} gives {dim}"
        )
    codes = np.empty((n, dim), dtype=np.int8)
    for start in range(0, n, chunk):
        codes[start : start + chunk] = fne.transform(raw_rows(start, min(n, start + chunk)))
    return codes


def compute_features(
    images: Images,
    spec: FeatureSpec,
    fne: FullNetworkEmbedding | None = None,
    *,
    image_ids: Sequence[str] | None = None,
    cache: bool | None = None,
    cache_dir: str | Path | None = None,
    cache_root: str | Path | None = None,
    device: str | torch.device = "auto",
    batch_size: int = 32,
    skip_bad_images: bool = False,
    progress: bool = True,
    engine: str | None = None,
) -> np.ndarray:
    """Features of ``images`` as ``spec`` describes them, one row per image, in order.

    ``images``: an :class:`~vsekit.data.images.ImageCollection` or a corpus (rows in the order of
    ``image_ids``, default every image in the collection's order), an id -> path mapping (the same), or
    a sequence of image files or PIL images (rows in that order). ``spec.kind == "one-layer"`` gives
    float32 pooled activations; ``"fne"`` gives int8 {-1, 0, 1} codes under ``fne``, the fitted
    statistics (required; ignored for one-layer; to fit them on a corpus split see :func:`image_features`).

    ``cache``: None caches collections, corpora, mappings and anything given a ``cache_dir``, and
    computes loose files and PIL images without touching the disk; True caches loose files too (as a
    collection rooted at their common folder); False never reads or writes the cache. Either way the
    numbers are identical. ``skip_bad_images`` applies to the cache (an unreadable image is recorded and
    left unfinished, so asking for its row is an error naming it); uncached, an unreadable image is an
    :class:`~vsekit.errors.ImageError` naming it. ``engine`` as in :func:`extract_features`.
    """
    if spec.needs_fne and fne is None:
        raise VsekitError(
            f"{spec.describe()} features need the fitted FNE statistics (fne=...), e.g. the ones saved "
            "with the model"
        )
    fne = fne if spec.needs_fne else None  # one-layer features have no statistics to apply
    if isinstance(images, (str, os.PathLike, Image.Image)):
        images = [images]
    collection = _as_collection(images)
    if collection is not None:
        ids = list(image_ids) if image_ids is not None else collection.image_ids()
        unknown = [i for i in ids if i not in collection.images]
        if unknown:
            raise VsekitError(f"{collection.root}: no image {unknown[0]!r} in collection {collection.name!r}")
    else:
        if image_ids is not None:
            raise VsekitError("image_ids selects from a collection or a mapping, not from a list of images")
        items = list(images)
        if cache or (cache is None and cache_dir is not None):
            if any(isinstance(item, Image.Image) for item in items):
                raise VsekitError(
                    "PIL images cannot be cached (they have no file); pass cache=False or paths"
                )
            collection = ImageCollection.from_paths(items)
            ids = [collection.id_of(item) for item in items]
    use_cache = cache is not False and collection is not None
    if use_cache:
        config = cache_config(spec, engine)
        path = _store_path(collection, config, cache_dir, cache_root)
        # Held from extraction to the copy out, so another process cannot swap the files in between.
        with cache_lock(path):
            store = _cached_store(
                collection.subset(ids),
                spec,
                cache_dir=cache_dir,
                cache_root=cache_root,
                device=device,
                batch_size=batch_size,
                skip_bad_images=skip_bad_images,
                progress=progress,
                engine=engine,
            )
            if fne is None:
                return store.raw(ids)
            return _fne_codes(fne, len(ids), store.dim, lambda a, b: store.raw(ids[a:b]), spec.backbone)
    sources = (
        [(str(k), collection.images[i]) for k, i in enumerate(ids)]
        if collection is not None
        else [(str(k), item) for k, item in enumerate(items)]
    )
    raw = _uncached_raw(sources, spec, device, batch_size, progress, engine)
    if fne is None:
        return raw.astype(np.float32)
    return _fne_codes(fne, len(raw), raw.shape[1], lambda a, b: raw[a:b].astype(np.float32), spec.backbone)


_SHARED_CNNS: dict[tuple, _CNN] = {}
_SHARED_CNNS_LOCK = threading.Lock()
_SHARED_CNNS_MAX = 2


def _shared_cnn(spec: FeatureSpec, device: str | torch.device, engine: str | None = None) -> _CNN:
    """The uncached route's CNN for ``spec`` on ``device``, built once and reused.

    Building it (read the weights, fold BatchNorm) costs far more than a few photos' forward pass, and
    its callers (a photo index embedding a few photos at a time, the web server's uploads, the
    captioner) ask for a handful of photos per call. A weights file is keyed by its size and mtime too,
    so a replaced file is read again. At most ``_SHARED_CNNS_MAX`` networks are kept.
    """
    device = resolve_device(device)
    stamp = None
    if spec.weights is not None and os.path.isfile(spec.weights):
        stat = os.stat(spec.weights)
        stamp = (stat.st_size, stat.st_mtime_ns)
    engine = engine if engine is not None else default_engine()
    key = (spec, str(device), stamp, engine)
    with _SHARED_CNNS_LOCK:
        cnn = _SHARED_CNNS.pop(key, None)
        if cnn is None:
            cnn = _CNN(spec, device, engine)
        _SHARED_CNNS[key] = cnn  # most recently used last
        while len(_SHARED_CNNS) > _SHARED_CNNS_MAX:
            del _SHARED_CNNS[next(iter(_SHARED_CNNS))]
        return cnn


def _uncached_raw(
    sources: list[tuple[str, Any]],
    spec: FeatureSpec,
    device: str | torch.device,
    batch_size: int,
    progress: bool,
    engine: str | None = None,
) -> np.ndarray:
    """float16 activations [n, dim] of ``(position, file or PIL image)`` pairs, nothing read or written."""
    cnn = _shared_cnn(spec, device, engine)
    out = np.empty((len(sources), cnn.dim), dtype=np.float16)
    bar = tqdm(
        total=len(sources),
        desc=f"features {spec.backbone} {spec.layers}",
        unit="img",
        disable=not progress,
    )
    try:
        for batch, ok_ids, rows, bad in _run_cnn(sources, cnn, batch_size):
            if bad:
                raise ImageError(next(iter(bad.values())))
            out[[int(i) for i in ok_ids]] = rows
            bar.update(len(batch))
    finally:
        bar.close()
    return out


def check_model_features(image_config: Mapping[str, Any], features: np.ndarray) -> np.ndarray:
    """``features`` unchanged if they are ``[n, image_config["image_dim"]]``, else a VsekitError."""
    if features.ndim != 2 or features.shape[1] != image_config["image_dim"]:
        raise VsekitError(
            f"{image_config['backbone']} {image_config['kind']} features have shape {tuple(features.shape)}; "
            f"the model was trained on {image_config['image_dim']}-d features"
        )
    return features


def require_fne(image_config: Mapping[str, Any], fne: FullNetworkEmbedding | None) -> None:
    """A VsekitError if a model reading FNE features comes without its statistics."""
    if image_config["kind"] == "fne" and fne is None:
        raise VsekitError("this model reads Full-Network Embedding features but no FNE statistics were given")


def readable_image_ids(
    images: ImageCollection | Corpus,
    spec: FeatureSpec,
    image_ids: Sequence[str] | None = None,
    **cache_kwargs: Any,
) -> tuple[list[str], dict[str, str]]:
    """Fill the cache for ``image_ids`` leaving unreadable images out, and say which are usable.

    Returns ``(ids whose features exist, in order; {id: why} for missing or unreadable files})``, each
    of those reported once as a warning. Commands asked to skip bad images call this first, then work on
    the usable ids only, so one bad photo costs only itself. ``cache_kwargs``: ``cache_dir``,
    ``cache_root``, ``device``, ``batch_size``, ``progress``, ``engine``.
    """
    collection = _as_collection(images)
    if collection is None:
        raise VsekitError("readable_image_ids takes an image collection or a corpus")
    ids = list(image_ids) if image_ids is not None else collection.image_ids()
    failed = {
        i: f"{collection.images[i]}: image file not found" for i in ids if not collection.images[i].is_file()
    }
    for why in failed.values():  # unreadable files are reported by the extraction itself, as they fail
        warnings.warn(f"skipped: {why}", stacklevel=2)
    present = [i for i in ids if i not in failed]
    if present:
        store = _cached_store(collection.subset(present), spec, skip_bad_images=True, **cache_kwargs)
        done = store.done_mask()
        for i in present:
            if not done[store._row[i]]:
                failed[i] = store.failed.get(i, f"{collection.images[i]}: no features")
    kept = [i for i in ids if i not in failed]
    return kept, failed


def features_for_model(
    image_config: Mapping[str, Any],
    images: Images,
    fne: FullNetworkEmbedding | None = None,
    *,
    weights: str | os.PathLike[str] | None = None,
    **kwargs: Any,
) -> np.ndarray:
    """The features a model (or captioner) reads, for any images: its backbone and kind, its FNE.

    ``image_config`` is the model's ``config["image"]`` (``{"backbone", "kind", "image_dim", ...}``);
    ``fne`` the statistics saved with it (FNE models). ``images`` and ``kwargs`` as in
    :func:`compute_features` (``cache``, ``image_ids``, ``device``, ``progress``, ...). The result is
    checked against the model's ``image_dim``.
    """
    require_fne(image_config, fne)
    spec = FeatureSpec.from_config(image_config, weights=weights)
    return check_model_features(image_config, compute_features(images, spec, fne, **kwargs))


def image_features(
    corpus: Corpus,
    image_ids: Sequence[str],
    backbone: str = "mobilenet_v2",
    kind: str = "one-layer",
    fne: FullNetworkEmbedding | None = None,
    fit_split: str = "train",
    **extract_kwargs,
) -> tuple[np.ndarray, FullNetworkEmbedding | None]:
    """Image features for ``image_ids`` of ``corpus`` in that order, computing whatever is not cached.

    ``kind="one-layer"``: float32 pooled activations. ``kind="fne"``: int8 {-1,0,1} Full-Network Embedding
    codes. For FNE, pass the ``fne`` a model was trained with (its statistics travel with the model and
    are applied unchanged to new images); without one, the statistics are fitted on ``fit_split`` of this
    corpus. Returns ``(features, fne_used)``. (The signature of the trainers' feature function; a thin
    adapter over :func:`compute_features`.)
    """
    if kind not in FEATURE_KINDS:
        raise VsekitError(f"unknown feature kind {kind!r}; known: {', '.join(FEATURE_KINDS)}")
    ids = list(image_ids)
    kwargs = dict(extract_kwargs)
    spec = FeatureSpec(backbone, kind, weights=kwargs.pop("weights", None))
    if kind == "one-layer":
        return compute_features(corpus, spec, image_ids=ids, cache=True, **kwargs), None
    if fne is not None:
        return compute_features(corpus, spec, fne, image_ids=ids, cache=True, **kwargs), fne
    if not isinstance(corpus, Corpus):
        raise VsekitError("fitting the Full-Network Embedding needs a corpus with a training split")
    config = cache_config(spec, kwargs.get("engine"))
    path = _store_path(corpus, config, kwargs.get("cache_dir"), kwargs.get("cache_root"))
    with cache_lock(path):
        fit_ids = corpus.split(fit_split).image_ids()
        collection = corpus.image_collection().subset([*fit_ids, *ids])
        store = _cached_store(collection, spec, **kwargs)
        cached = store.path / "fne.safetensors"
        reuse = cached.is_file() and store.meta.get("fne_fit_ids") == _ids_digest(fit_ids)
        fne = store.fne() if reuse else store.fit_fne(fit_ids)
        if not reuse:
            store.meta["fne_fit_ids"] = _ids_digest(fit_ids)
            store._write_meta()
        return store.fne_codes(ids), fne


def _ids_digest(ids: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(sorted(ids)).encode()).hexdigest()[:16]
