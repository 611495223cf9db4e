"""Image features for a corpus, computed once and cached on disk.

Two kinds of features come out of one CNN pass:

* ``one-layer``: the global-average-pooled penultimate activations (the classifier's input), the image
  representation of Kiros et al. 2014 and of the CNN-MME baseline of Vilalta et al. 2017;
* ``full``: the spatially averaged activations of every conv layer plus the FC layer, the raw input of the
  Full-Network Embedding (Vilalta et al. 2017, section 3.1). Its fitted, ternary form lives next to it.

A cache directory holds one feature matrix for one configuration: backbone, weights file (by content hash),
layer set and preprocessing. Rows are keyed by image file (relative id, size and modification time), so an
edited or added photo is recomputed and nothing else is. Rows are written into a float16 memory map and a
``done`` mask is committed atomically every few seconds, which is what makes an interrupted extraction
resumable without recomputing finished images. A directory made with another configuration is refused.
Processes sharing a cache take turns: each holds ``<dir>.lock`` (an exclusive ``flock``) while it fills
the directory and copies its rows out, so two trainings started side by side cannot corrupt it.

Layout of a cache directory::

    meta.json         configuration, image ids and file identities, dims, failed images
    raw.f16           float16 memmap [n_images, dim] (one-layer: pooled_dim; full: sum of tap dims)
    done.npy          bool [n_images]: rows that hold finished features
    fne.safetensors   fitted FullNetworkEmbedding statistics (full only, after ``fit_fne``)
    fne_codes.npy     int8 {-1,0,1} [n_images, dim] (full only): the FNE, one byte per value
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import threading
import time
import warnings
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from vsekit.data.corpus import Corpus
from vsekit.device import resolve_device
from vsekit.errors import ConfigMismatchError, ImageError, VsekitError
from vsekit.vision.backbones import (
    BACKBONES,
    load_backbone,
    prepare_for_inference,
    resolve_weights,
    weights_fingerprint,
)
from vsekit.vision.fne import DEFAULT_THRESHOLDS, FullNetworkEmbedding
from vsekit.vision.preprocess import Preprocessing, load_image

LAYER_SETS = ("one-layer", "full")
FORMAT_VERSION = 1
_COMMIT_EVERY_S = 5.0


@dataclass(frozen=True)
class FeatureConfig:
    """Everything that changes the numbers in a feature matrix; its hash names the cache directory."""

    backbone: str
    weights_sha: str
    layers: str
    preprocessing: str
    format_version: int = FORMAT_VERSION

    def key(self) -> str:
        blob = json.dumps(asdict(self), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:12]

    def describe(self) -> str:
        return (
            f"backbone={self.backbone}, weights={self.weights_sha}, layers={self.layers}, "
            f"preprocessing={self.preprocessing}"
        )


def default_cache_root() -> Path:
    """``$VSEKIT_CACHE`` if set, else ``$XDG_CACHE_HOME/vsekit`` or ``~/.cache/vsekit``."""
    if os.environ.get("VSEKIT_CACHE"):
        return Path(os.environ["VSEKIT_CACHE"])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "vsekit"


def feature_config(
    backbone: str, layers: str = "one-layer", weights: str | Path | None = None
) -> FeatureConfig:
    if backbone not in BACKBONES:
        raise VsekitError(f"unknown backbone {backbone!r}; known: {', '.join(sorted(BACKBONES))}")
    if layers not in LAYER_SETS:
        raise VsekitError(f"unknown layer set {layers!r}; known: {', '.join(LAYER_SETS)}")
    path = resolve_weights(backbone, weights)
    return FeatureConfig(
        backbone=backbone,
        weights_sha=weights_fingerprint(path),
        layers=layers,
        preprocessing=BACKBONES[backbone].preprocessing.key(),
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


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)


def _atomic_save_npy(path: Path, array: np.ndarray) -> None:
    tmp = path.with_name(path.name + ".tmp.npy")
    np.save(tmp, array)
    tmp.replace(path)


class FeatureStore:
    """One cache directory: a feature matrix for a set of image files under one configuration."""

    def __init__(self, path: Path, meta: dict) -> None:
        self.path = Path(path)
        self.meta = meta
        self.config = FeatureConfig(**meta["config"])
        self.image_ids: list[str] = list(meta["image_ids"])
        self.dim: int = int(meta["dim"])
        self._row = {image_id: i for i, image_id in enumerate(self.image_ids)}

    # ----------------------------------------------------------------- opening
    @classmethod
    def open(cls, path: str | Path, expect: FeatureConfig | None = None) -> FeatureStore:
        """Open an existing cache; refuse it if it was made with a configuration other than ``expect``."""
        path = Path(path)
        meta_path = path / "meta.json"
        if not meta_path.is_file():
            raise VsekitError(
                f"{path}: not a vsekit feature cache (no meta.json); run `vsekit extract` first"
            )
        try:
            meta = json.loads(meta_path.read_text())
            FeatureConfig(**meta["config"])
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise VsekitError(f"{meta_path}: unreadable feature-cache metadata ({exc})") from exc
        store = cls(path, meta)
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

    def done_mask(self) -> np.ndarray:
        done_path = self.path / "done.npy"
        if not done_path.is_file():
            return np.zeros(len(self.image_ids), dtype=bool)
        return np.load(done_path)

    def _raw(self, mode: str = "r") -> np.memmap:
        return np.memmap(
            self.path / "raw.f16", dtype=np.float16, mode=mode, shape=(len(self.image_ids), self.dim)
        )

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
        _atomic_save_npy(self.path / "fne_codes.npy", codes)
        fne.save(self.path / "fne.safetensors")
        self.meta["fne_fit_images"] = int(len(rows))
        self._write_meta()
        return fne

    def _write_meta(self) -> None:
        _atomic_write_bytes(self.path / "meta.json", json.dumps(self.meta, indent=1).encode())


# -------------------------------------------------------------------- extraction
def cache_dir_for(corpus: Corpus, config: FeatureConfig, cache_root: str | Path | None = None) -> Path:
    root = Path(cache_root) if cache_root is not None else default_cache_root()
    corpus_tag = hashlib.sha256(str(Path(corpus.root).resolve()).encode()).hexdigest()[:8]
    return root / "features" / f"{corpus.name}-{corpus_tag}-{config.backbone}-{config.layers}-{config.key()}"


def _store_path(
    corpus: Corpus, config: FeatureConfig, cache_dir: str | Path | None, cache_root: str | Path | None
) -> Path:
    return Path(cache_dir) if cache_dir is not None else cache_dir_for(corpus, config, cache_root)


def _prepare_store(
    path: Path, config: FeatureConfig, corpus: Corpus, ids: list[str], dims: dict
) -> FeatureStore:
    """Create the cache, or reconcile an existing one with the requested image files.

    The store keeps the union of what it had and what is asked for: a row survives while its file is
    unchanged (same size and modification time), so extracting one split and then the whole corpus
    recomputes nothing twice. A row whose file changed or vanished is dropped.
    """
    requested = {i: (str(Path(corpus.images[i]).resolve()), _file_identity(corpus.images[i])) for i in ids}
    dim = dims["dim"]
    old: FeatureStore | None = None
    kept: dict[str, tuple[str, list[int]]] = {}
    if (path / "meta.json").is_file():
        old = FeatureStore.open(path, expect=config)
        if old.dim != dim:
            raise ConfigMismatchError(f"{path}: cached features have dimension {old.dim}, expected {dim}")
        for image_id, file_path in old.meta.get("paths", {}).items():
            if (
                Path(file_path).is_file()
                and _file_identity(Path(file_path)) == old.meta["identities"][image_id]
            ):
                kept[image_id] = (file_path, old.meta["identities"][image_id])
        if all(kept.get(i) == requested[i] for i in ids) and len(kept) == len(old.image_ids):
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
    }
    done = np.zeros(len(all_ids), dtype=bool)
    new_raw = np.memmap(path / "raw.f16.new", dtype=np.float16, mode="w+", shape=(len(all_ids), dim))
    if old is not None:  # carry over finished rows whose file is unchanged
        old_done = old.done_mask()
        old_raw = old._raw()
        for new_row, image_id in enumerate(all_ids):
            old_row = old._row.get(image_id)
            if old_row is not None and old_done[old_row] and kept.get(image_id) == entries[image_id]:
                new_raw[new_row] = old_raw[old_row]
                done[new_row] = True
        del old_raw
    new_raw.flush()
    del new_raw
    (path / "raw.f16.new").replace(path / "raw.f16")
    _atomic_save_npy(path / "done.npy", done)
    store = FeatureStore(path, meta)
    store._write_meta()
    return store


def _load_batch(
    paths: list[tuple[str, Path]], preprocessing: Preprocessing
) -> tuple[list[str], torch.Tensor | None, dict[str, str]]:
    ok_ids, tensors, failed = [], [], {}
    for image_id, image_path in paths:
        try:
            tensors.append(preprocessing(load_image(image_path)))
            ok_ids.append(image_id)
        except ImageError as exc:
            failed[image_id] = str(exc)
    return ok_ids, (torch.stack(tensors) if tensors else None), failed


def _batches(items: list, size: int) -> Iterator[list]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def extract_features(
    corpus: Corpus,
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
) -> FeatureStore:
    """Compute (or resume computing) features for every image of ``corpus`` and return the store.

    A corrupt or unreadable image stops the run with its name (finished rows are committed first, so a
    re-run resumes) unless ``skip_bad_images``, which records it under ``failed`` and goes on: its row
    stays unfinished, never zero-filled, and asking for its features later is an error naming it.
    """
    config = feature_config(backbone, layers, weights)
    path = _store_path(corpus, config, cache_dir, cache_root)
    ids = sorted(corpus.images)
    if not ids:
        raise VsekitError(f"{corpus.root}: the corpus has no images")
    for image_id in ids:
        if not corpus.images[image_id].is_file():
            raise ImageError(f"{corpus.images[image_id]}: image file not found")

    torch_device = resolve_device(device)
    model = prepare_for_inference(load_backbone(backbone, weights, device=torch_device))
    full = layers == "full"
    dims = {"dim": sum(model.tap_dims()) if full else model.pooled_dim}
    if full:
        dims.update(tap_names=model.tap_names(), tap_dims=model.tap_dims())
    with cache_lock(path):  # one writer per cache directory at a time
        store = _prepare_store(path, config, corpus, ids, dims)
        _fill_store(
            store, corpus, ids, model, backbone, full, torch_device, batch_size, skip_bad_images, progress
        )
        return FeatureStore.open(store.path, expect=config)


def _fill_store(
    store: FeatureStore,
    corpus: Corpus,
    ids: list[str],
    model: torch.nn.Module,
    backbone: str,
    full: bool,
    torch_device: torch.device,
    batch_size: int,
    skip_bad_images: bool,
    progress: bool,
) -> None:
    """Run the CNN over the store's unfinished rows, committing every few seconds and on the way out."""
    done = store.done_mask()
    todo = [(image_id, corpus.images[image_id]) for image_id in ids if not done[store._row[image_id]]]
    failed = store.meta.setdefault("failed", {})
    for image_id, _ in todo:
        failed.pop(image_id, None)
    if todo:  # codes fitted before these rows existed would be stale
        for stale in ("fne.safetensors", "fne_codes.npy"):
            (store.path / stale).unlink(missing_ok=True)
    preprocessing = BACKBONES[backbone].preprocessing
    raw = store._raw(mode="r+")
    last_commit = time.monotonic()

    def commit() -> None:
        raw.flush()
        _atomic_save_npy(store.path / "done.npy", done)
        store._write_meta()

    bar = tqdm(
        total=len(ids),
        initial=len(ids) - len(todo),
        desc=f"extract {backbone} {'full' if full else 'one-layer'}",
        unit="img",
        disable=not progress,
    )
    try:
        with ThreadPoolExecutor(max_workers=1) as pool, torch.inference_mode():
            batches = list(_batches(todo, batch_size))
            pending = pool.submit(_load_batch, batches[0], preprocessing) if batches else None
            for k in range(len(batches)):
                ok_ids, pixels, bad = pending.result()
                # decode the next batch while the CNN runs on this one
                pending = (
                    pool.submit(_load_batch, batches[k + 1], preprocessing) if k + 1 < len(batches) else None
                )
                if bad:
                    failed.update(bad)
                    if not skip_bad_images:
                        first = next(iter(bad.values()))
                        raise ImageError(f"{first} (use --skip-bad-images to leave it out and go on)")
                    for message in bad.values():
                        warnings.warn(f"skipped: {message}", stacklevel=2)
                if pixels is not None:
                    pooled, taps = model.forward_features(
                        pixels.to(torch_device, memory_format=torch.channels_last), taps=full
                    )
                    out = torch.cat(taps, dim=1) if full else pooled
                    idx = [store._row[i] for i in ok_ids]
                    raw[idx] = out.float().cpu().numpy().astype(np.float16)
                    done[idx] = True
                bar.update(len(batches[k]))
                if time.monotonic() - last_commit > _COMMIT_EVERY_S:
                    commit()
                    last_commit = time.monotonic()
    finally:
        commit()
        bar.close()


def extract_fne(
    corpus: Corpus,
    backbone: str = "mobilenet_v2",
    fit_split: str = "train",
    thresholds: tuple[float, float] = DEFAULT_THRESHOLDS,
    **kwargs,
) -> FeatureStore:
    """Full-network activations for every image, then the FNE fitted on ``fit_split`` and applied to all."""
    config = feature_config(backbone, "full", kwargs.get("weights"))
    with cache_lock(_store_path(corpus, config, kwargs.get("cache_dir"), kwargs.get("cache_root"))):
        store = extract_features(corpus, backbone, "full", **kwargs)
        store.fit_fne(corpus.split(fit_split).image_ids(), thresholds=thresholds)
    return store


FEATURE_KINDS = ("one-layer", "fne")


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
    corpus. Returns ``(features, fne_used)``.
    """
    if kind not in FEATURE_KINDS:
        raise VsekitError(f"unknown feature kind {kind!r}; known: {', '.join(FEATURE_KINDS)}")
    ids = list(image_ids)
    layers = "one-layer" if kind == "one-layer" else "full"
    config = feature_config(backbone, layers, extract_kwargs.get("weights"))
    path = _store_path(corpus, config, extract_kwargs.get("cache_dir"), extract_kwargs.get("cache_root"))
    # Held from extraction to the copy out, so another process cannot swap the files in between.
    with cache_lock(path):
        if kind == "one-layer":
            store = extract_features(corpus.subset(ids), backbone, "one-layer", **extract_kwargs)
            return store.raw(ids), None
        if fne is None:
            fit_ids = corpus.split(fit_split).image_ids()
            store = extract_features(
                corpus.subset(list(dict.fromkeys([*fit_ids, *ids]))), backbone, "full", **extract_kwargs
            )
            cached = store.path / "fne.safetensors"
            reuse = cached.is_file() and store.meta.get("fne_fit_ids") == _ids_digest(fit_ids)
            fne = store.fne() if reuse else store.fit_fne(fit_ids)
            if not reuse:
                store.meta["fne_fit_ids"] = _ids_digest(fit_ids)
                store._write_meta()
            return store.fne_codes(ids), fne
        store = extract_features(corpus.subset(ids), backbone, "full", **extract_kwargs)
        if fne.dim != store.dim:
            raise ConfigMismatchError(
                f"the model's Full-Network Embedding has {fne.dim} features but {backbone} gives {store.dim}"
            )
        codes = np.empty((len(ids), store.dim), dtype=np.int8)
        for start in range(0, len(ids), 512):
            codes[start : start + 512] = fne.transform(store.raw(ids[start : start + 512]))
        return codes, fne


def _ids_digest(ids: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(sorted(ids)).encode()).hexdigest()[:16]
