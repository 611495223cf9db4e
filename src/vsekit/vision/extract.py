"""Filling a feature store from a collection through the CNN, and the CNN step itself.

Every image goes through the same CNN step, cached or not: uint8 crops decoded by threads ahead of the
network, then the engine (:mod:`vsekit.vision.engine`: ONNX Runtime running the graph exported from our
network, or the BN-folded, channels-last PyTorch network of
:func:`~vsekit.vision.backbones.prepare_for_inference`), the same batching, and float16 rounding of the
activations (the store's type), so a photo gets identical numbers whichever route it takes with one
engine, and numbers equal up to one float16 step across engines. :func:`extract_features` fills the
store (:mod:`vsekit.vision.store`) for every image of a collection, committing every few seconds, so an
interrupted run resumes; :func:`_uncached_raw` runs the same CNN step without touching the disk.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import warnings
from collections import deque
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from tqdm.auto import tqdm

from vsekit.data.corpus import Corpus
from vsekit.data.images import ImageCollection
from vsekit.device import resolve_device
from vsekit.errors import ImageError, VsekitError
from vsekit.fileio import preallocate
from vsekit.vision.backbones import feature_rows, load_backbone, prepare_for_inference
from vsekit.vision.engine import INT8, OnnxCNN, OnnxMismatchError, default_engine, resolve_engine
from vsekit.vision.fne import DEFAULT_THRESHOLDS
from vsekit.vision.preprocess import Preprocessing, load_image, upright_rgb
from vsekit.vision.spec import FeatureSpec
from vsekit.vision.store import (
    FeatureConfig,
    FeatureStore,
    _prepare_store,
    _reconcile,
    _requested,
    _spec_for_layers,
    _store_path,
    cache_config,
    cache_lock,
    feature_config,
)

__all__ = ["cnn_extractor", "extract_features", "extract_fne"]

_COMMIT_EVERY_S = 5.0

#: Threads decoding and resizing photos ahead of the CNN (measured in bench/bench_extract.py).
_DECODE_WORKERS = 2
# On CUDA, PyTorch's first batch of each new size costs about 2 s (cuDNN builds a plan for each of the
# CNN's convolutions; measured on an H100, bench/results/gpu_check.json) while a batch of 32 takes 40 ms:
# batches are padded to a multiple of this, so a process sees one or two sizes, not one per photo count.
_CUDA_BATCH_MULTIPLE = 32

log = logging.getLogger(__name__)


# -------------------------------------------------------------------- the CNN step
class _CNN:
    """The one CNN step of both routes, float16 activations out: the exported graph in ONNX Runtime, or
    the BN-folded channels-last PyTorch backbone (see :mod:`vsekit.vision.engine` for the choice)."""

    def __init__(self, spec: FeatureSpec, device: str | torch.device, engine: str | None = None) -> None:
        self.spec = spec
        self.device = resolve_device(device)
        self.full = spec.layers == "full"
        assert spec.preprocessing is not None  # FeatureSpec.__post_init__ fills it in
        self.preprocessing: Preprocessing = spec.preprocessing
        self.cells = spec.cell_rows  # grid / pre-head: a row is the cells of a map
        requested = engine if engine is not None else default_engine()
        if self.cells and requested == INT8:  # quantised for pooled rows only
            raise VsekitError(
                f"{spec.kind} features have no {INT8} engine; use --engine onnxruntime or torch"
            )
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
        if self.cells:  # every cell of the last conv map (or of the last block's), each a vector
            cell_dim = model.pre_head_dim if spec.kind == "pre-head" else model.pooled_dim
            self.dims["dim"] = spec.grid_cells * cell_dim
        if self.full:
            self.dims.update(tap_names=model.tap_names(), tap_dims=model.tap_dims())
        self.model = prepare_for_inference(model) if self.onnx is None else None
        self.pad_to = _CUDA_BATCH_MULTIPLE if self.device.type == "cuda" else 1

    @property
    def dim(self) -> int:
        return int(self.dims["dim"])

    def __call__(self, pixels: np.ndarray) -> np.ndarray:
        """Pooled activations (one-layer), all taps concatenated (full) or the cells of the last conv map
        (grid) or of the last block's map (pre-head), row-major cells, channels last, of uint8 crops
        [n, h, w, 3], float16 [n, dim]."""
        if self.onnx is not None:
            return self.onnx(pixels).astype(np.float16)
        assert self.model is not None  # built whenever there is no ONNX session
        short = -len(pixels) % self.pad_to
        if short:  # inference rows are independent (BatchNorm folded): the padding changes no row
            blank = np.zeros((short, *pixels.shape[1:]), pixels.dtype)
            return self._torch(np.concatenate([pixels, blank]))[: len(pixels)]
        return self._torch(pixels)

    def _torch(self, pixels: np.ndarray) -> np.ndarray:
        assert self.model is not None
        # NHWC floats seen as NCHW: already the channels-last layout the network runs in, no copy.
        x = torch.from_numpy(self.preprocessing.normalise(pixels)).permute(0, 3, 1, 2)
        with torch.inference_mode():
            out = feature_rows(
                self.model, x.to(self.device, memory_format=torch.channels_last), self.spec.layers
            )
            if out.shape[1] != self.dim:  # a map of another size than the crop's (grid / pre-head)
                raise VsekitError(f"the {self.spec.backbone} map has {out.shape[1]} values, not {self.dim}")
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
    ok_ids: list[str] = []
    failed: dict[str, str] = {}
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
        if fits and old is not None and old.done_mask()[[old._row[i] for i in ids]].all():
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
        store.commit(done, finished)

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
