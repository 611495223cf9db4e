"""The one image-feature path: images -> CNN -> features, computed once and cached on disk, or not.

:func:`compute_features` turns images (an :class:`~vsekit.data.images.ImageCollection`, a corpus, an
id -> path mapping, or a list of files or PIL images) into the features a :class:`FeatureSpec` describes.
Cached or not, every image goes through the same CNN step (:mod:`vsekit.vision.extract`), so a photo gets
identical numbers whichever route it takes with one engine, and numbers equal up to one float16 step
across engines. :func:`features_for_model` does the same from a saved model's ``config["image"]`` and
checks the width; :func:`image_features` is the trainers' feature function.

Two kinds of features come out of one CNN pass:

* ``one-layer``: the global-average-pooled penultimate activations (the classifier's input), the image
  representation of Kiros et al. 2014 and of the CNN-MME baseline of Vilalta et al. 2017;
* ``full``: the spatially averaged activations of every conv layer plus the FC layer, the raw input of the
  Full-Network Embedding (Vilalta et al. 2017, section 3.1). Its fitted, ternary form lives next to it.

A third kind, ``grid``, keeps the last conv map unpooled (7 x 7 cells of 1280 at 224 pixels, the same crop,
so the mean of its cells is the ``one-layer`` vector up to float16 rounding): the set of vectors a learned
pooling (GPO, :mod:`vsekit.embedding.gpo`) reads. One row per image of ``cells * C`` floats, cell-major.
A fourth, ``pre-head``, keeps the same cells one layer earlier (the last block's 320 channels, the input of
the CNN's 1 x 1 head conv), for a joint model that trains its own copy of the head
(:mod:`vsekit.embedding.cnn_head`).

Where the rows live: :mod:`vsekit.vision.store` (the on-disk store, its layout and its lock). How a store
is filled: :mod:`vsekit.vision.extract`. This module keeps the routes callers use, and hands on the
names it always exported.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from vsekit.data.corpus import Corpus
from vsekit.data.images import ImageCollection
from vsekit.errors import ConfigMismatchError, VsekitError
from vsekit.resources import default_cache_root
from vsekit.vision.extract import (
    _as_collection,
    _cached_store,
    _uncached_raw,
    cnn_extractor,
    extract_features,
    extract_fne,
)
from vsekit.vision.extract import (
    _decode as _decode,  # the alignment package reads photos through it, from here
)
from vsekit.vision.fne import FullNetworkEmbedding
from vsekit.vision.spec import FEATURE_KINDS, FeatureSpec
from vsekit.vision.store import (
    LAYER_SETS,
    DamagedMatrixError,
    FeatureConfig,
    FeatureStore,
    _store_path,
    cache_config,
    cache_dir_for,
    cache_lock,
    feature_config,
)

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
        assert not isinstance(images, (ImageCollection, Corpus))  # _as_collection took those
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
        assert collection is not None
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
    corpus. ``view`` (keyword, one-layer and pre-head only): another view of each photo than the evaluation
    crop (one of :data:`~vsekit.vision.preprocess.VIEWS`), cached apart. Returns ``(features, fne_used)``.
    (The signature of the trainers' feature function; a thin adapter over :func:`compute_features`.)
    """
    if kind not in FEATURE_KINDS:
        raise VsekitError(f"unknown feature kind {kind!r}; known: {', '.join(FEATURE_KINDS)}")
    ids = list(image_ids)
    kwargs = dict(extract_kwargs)
    spec = FeatureSpec(backbone, kind, weights=kwargs.pop("weights", None))
    view = kwargs.pop("view", "centre")
    if view != "centre":  # a training-time view (see vision.preprocess.VIEWS), cached apart by its key
        if kind not in ("one-layer", "pre-head"):
            raise VsekitError(
                f"view {view!r}: views of a photo exist for one-layer and pre-head features only"
            )
        assert spec.preprocessing is not None  # FeatureSpec.__post_init__ fills it in
        spec = dataclasses.replace(spec, preprocessing=spec.preprocessing.with_view(view))
    if kind in ("one-layer", "grid", "pre-head"):
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
