"""Image regions for alignment (Karpathy & Fei-Fei 2015, sec. 3.1.1, Eq. 1): boxes and their CNN features.

Every image becomes ``R`` regions: the whole image first, then boxes. Each region's representation is the
backbone's pooled penultimate activations of the pixels inside it (Eq. 1 up to the projection W_m, which
belongs to the aligner). Two modes:

* ``grid`` (free): the whole image is squashed to ``size x size`` and run through the CNN once; the cells
  of its last conv feature map are average-pooled into an ``l x l`` grid for every level ``l`` of
  ``grid`` (a spatial pyramid: with levels (2, 3), 1 + 4 + 9 = 14 regions). No extra CNN pass.
* ``proposals``: the offline stand-in for the paper's RCNN detections (no detector weights can be
  installed here). Class-agnostic boxes from selective search (OpenCV, fast mode, on the image shrunk to
  ``ss_side`` pixels), at most ``candidates`` of them, each cropped from the full-resolution image and run
  through the ImageNet backbone; a box's score is its maximum ImageNet class probability (how much it
  looks like one object); greedy non-maximum suppression at IoU ``nms_iou``; the top ``proposals`` (19)
  boxes plus the whole image. An image with fewer proposals is filled up with the grid cells of the whole
  image (levels 2, 3, 4), so every image has exactly ``1 + proposals`` regions.

Boxes are ``(x0, y0, x1, y1)`` fractions of the image width and height. Region rows go through the shared
feature cache (:mod:`vsekit.vision.features`): one row per image holds the ``R x D`` features and the
``R x 4`` boxes (float16), keyed by backbone, weights, mode and every parameter here, resumable and locked
like every other feature cache.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from vsekit.data.corpus import Corpus
from vsekit.data.images import ImageCollection
from vsekit.device import resolve_device
from vsekit.errors import ImageError, VsekitError
from vsekit.vision.backbones import (
    BACKBONES,
    load_backbone,
    prepare_for_inference,
    resolve_weights,
    weights_fingerprint,
)
from vsekit.vision.extract import _as_collection, _batches, _cached_store, _decode
from vsekit.vision.features import Images
from vsekit.vision.store import FeatureConfig, _store_path, cache_lock

__all__ = ["REGION_MODES", "RegionSpec", "Regions", "propose_boxes", "region_features"]

REGION_MODES = ("grid", "proposals")
#: Grid levels that fill up an image with too few proposals (4 + 9 + 16 = 29 cells >= 19).
FALLBACK_GRID = (2, 3, 4)


@dataclass(frozen=True)
class RegionSpec:
    """Which regions and which features: everything that changes a region row (and so its cache key)."""

    backbone: str = "mobilenet_v2"
    mode: str = "grid"
    grid: tuple[int, ...] = (2, 3)
    size: int = 224
    proposals: int = 19
    candidates: int = 30
    ss_side: int = 200
    nms_iou: float = 0.5
    weights: str | None = None

    def __post_init__(self) -> None:
        if self.backbone not in BACKBONES:
            raise VsekitError(f"unknown backbone {self.backbone!r}; known: {', '.join(sorted(BACKBONES))}")
        if self.mode not in REGION_MODES:
            raise VsekitError(f"unknown region mode {self.mode!r}; known: {', '.join(REGION_MODES)}")
        object.__setattr__(self, "grid", tuple(int(g) for g in self.grid))
        if any(g < 1 for g in self.grid) or (self.mode == "grid" and not self.grid):
            raise VsekitError(f"region grid levels must be >= 1 (got {list(self.grid)})")
        if self.size < 32 or self.proposals < 1 or self.candidates < 1 or self.ss_side < 16:
            raise VsekitError("region size >= 32, proposals >= 1, candidates >= 1 and ss_side >= 16 needed")
        if not 0 < self.nms_iou <= 1:
            raise VsekitError(f"nms_iou must be in (0, 1], got {self.nms_iou}")
        if self.weights is not None:
            object.__setattr__(self, "weights", os.fspath(Path(self.weights).expanduser()))

    @property
    def n_regions(self) -> int:
        """R: the whole image plus the grid cells or the proposals."""
        return 1 + (sum(g * g for g in self.grid) if self.mode == "grid" else self.proposals)

    @property
    def layers(self) -> str:
        """The cache's layer name (it names the cache directory)."""
        return f"regions-{self.mode}"

    @property
    def preprocessing(self) -> Any:
        return BACKBONES[self.backbone].preprocessing

    def to_config(self) -> dict[str, Any]:
        """JSON-able fields (without the weights path), what a model file records."""
        out = asdict(self)
        out.pop("weights")
        out["grid"] = list(self.grid)
        return out

    @classmethod
    def from_config(cls, config: dict[str, Any], weights: str | os.PathLike[str] | None = None) -> RegionSpec:
        try:
            return cls(**{**config, "grid": tuple(config.get("grid", ())), "weights": weights})
        except TypeError as exc:
            raise VsekitError(f"region config {config!r} is not valid ({exc})") from exc

    def key(self) -> str:
        """Everything that changes the numbers, for the cache key."""
        fields = {k: v for k, v in self.to_config().items() if k != "backbone"}
        mode_fields = ("grid",) if self.mode == "grid" else ("proposals", "candidates", "ss_side", "nms_iou")
        kept = {k: fields[k] for k in ("mode", "size", *mode_fields)}
        return f"{kept};{self.preprocessing.key()};squash"

    def cache_config(self) -> FeatureConfig:
        return FeatureConfig(
            backbone=self.backbone,
            weights_sha=weights_fingerprint(resolve_weights(self.backbone, self.weights)),
            layers=self.layers,
            preprocessing=self.key(),
        )


@dataclass
class Regions:
    """Region features ``[n, R, D]`` float32 and boxes ``[n, R, 4]`` (x0, y0, x1, y1 as fractions)."""

    features: np.ndarray
    boxes: np.ndarray


# -------------------------------------------------------------------- geometry
def _squash(img: Image.Image, size: int, mean: Sequence[float], std: Sequence[float]) -> torch.Tensor:
    """The whole ``img`` resized to ``size x size`` (aspect ratio not kept, so the map covers all of it)."""
    arr: np.ndarray = np.asarray(
        img.convert("RGB").resize((size, size), Image.Resampling.BILINEAR), dtype=np.float32
    )
    arr = (arr / 255.0 - np.asarray(mean, dtype=np.float32)) / np.asarray(std, dtype=np.float32)
    return torch.from_numpy(np.ascontiguousarray(arr.transpose(2, 0, 1)))


def _grid_boxes(levels: Sequence[int], m: int) -> np.ndarray:
    """Boxes of adaptive-average-pool bins on an ``m x m`` map, level by level, row-major: ``[n, 4]``."""
    boxes = []
    for g in levels:
        edges = [(math.floor(k * m / g) / m, math.ceil((k + 1) * m / g) / m) for k in range(g)]
        boxes += [(x0, y0, x1, y1) for (y0, y1) in edges for (x0, x1) in edges]
    return np.asarray(boxes, dtype=np.float32).reshape(-1, 4)


def _grid_cells(fmap: torch.Tensor, levels: Sequence[int]) -> torch.Tensor:
    """``[B, n_cells, C]``: the feature map average-pooled into each level's grid (same order as boxes)."""
    cells = [F.adaptive_avg_pool2d(fmap, g).flatten(2).transpose(1, 2) for g in levels]
    return torch.cat(cells, dim=1)


def _iou(box: np.ndarray, others: np.ndarray) -> np.ndarray:
    x0 = np.maximum(box[0], others[:, 0])
    y0 = np.maximum(box[1], others[:, 1])
    x1 = np.minimum(box[2], others[:, 2])
    y1 = np.minimum(box[3], others[:, 3])
    inter = np.clip(x1 - x0, 0, None) * np.clip(y1 - y0, 0, None)
    area = lambda b: (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1])  # noqa: E731
    return inter / np.maximum(area(box) + area(others) - inter, 1e-12)


def nms(boxes: np.ndarray, scores: np.ndarray, iou: float) -> list[int]:
    """Greedy non-maximum suppression: indices of kept boxes, best score first."""
    kept: list[int] = []
    for k in np.argsort(-scores, kind="stable"):
        if not kept or (_iou(boxes[k], boxes[kept]) <= iou).all():
            kept.append(int(k))
    return kept


def propose_boxes(img: Image.Image, side: int = 200, limit: int = 30) -> np.ndarray:
    """Up to ``limit`` class-agnostic boxes ``[k, 4]`` (fractions) from selective search (fast mode) on
    ``img`` shrunk to ``side`` pixels.

    Boxes under 10% of a side, over 90% of the image area or thinner than 1:4 are dropped. OpenCV ranks
    its boxes with random numbers, but the set of boxes is deterministic, so the ranking is ours: near
    duplicates (IoU > 0.7 with a larger box) go, and ``limit`` boxes are taken evenly over the remaining
    ones sorted by area, so large and small objects are both among the candidates.
    """
    try:
        import cv2
    except ImportError:
        raise VsekitError(
            "proposal regions need OpenCV's selective search: pip install opencv-contrib-python-headless"
        ) from None
    small = img.convert("RGB")
    small.thumbnail((side, side))
    w, h = small.size
    ss = cv2.ximgproc.segmentation.createSelectiveSearchSegmentation()
    ss.setBaseImage(np.ascontiguousarray(np.asarray(small)[:, :, ::-1]))
    ss.switchToSelectiveSearchFast()
    rects = np.asarray(ss.process(), dtype=np.float64).reshape(-1, 4)
    x, y, bw, bh = rects.T
    ok = (bw >= 0.1 * w) & (bh >= 0.1 * h) & (bw * bh <= 0.9 * w * h) & (np.maximum(bw / bh, bh / bw) <= 4)
    boxes = np.unique(np.stack([x, y, x + bw, y + bh], axis=1)[ok] / [w, h, w, h], axis=0)
    if len(boxes) == 0:
        return np.zeros((0, 4), dtype=np.float32)
    area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    kept = boxes[nms(boxes, area, 0.7)]  # largest first
    picks = np.unique(np.linspace(0, len(kept) - 1, min(limit, len(kept))).round().astype(int))
    return kept[picks].astype(np.float32)


# -------------------------------------------------------------------- the extractor
class _RegionExtractor:
    """Images -> packed region rows (``R*D`` features then ``R*4`` boxes, float16), for the cache."""

    def __init__(self, spec: RegionSpec, device: str | torch.device) -> None:
        self.spec = spec
        self.device = resolve_device(device)
        self.model = prepare_for_inference(load_backbone(spec.backbone, spec.weights, device=self.device))
        self.feature_dim = int(self.model.pooled_dim)
        self.dims = {"dim": spec.n_regions * (self.feature_dim + 4)}
        pre = spec.preprocessing
        self.pixels: Callable[[Image.Image], torch.Tensor] = lambda im: _squash(
            im, spec.size, pre.mean, pre.std
        )

    def _map(self, pixels: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode():
            x = pixels.to(self.device, memory_format=torch.channels_last)
            return self.model.forward_map(x).float()

    def _pack(self, feats: torch.Tensor, boxes: np.ndarray) -> np.ndarray:
        """``[B, R, D]`` features and ``[B, R, 4]`` boxes -> float16 rows ``[B, R*(D+4)]``."""
        rows = feats.cpu().numpy().reshape(len(feats), -1)
        return np.concatenate([rows, boxes.reshape(len(boxes), -1)], axis=1).astype(np.float16)

    def grid_rows(self, pixels: torch.Tensor) -> np.ndarray:
        fmap = self._map(pixels)
        feats = torch.cat([fmap.mean(dim=(2, 3))[:, None], _grid_cells(fmap, self.spec.grid)], dim=1)
        boxes = np.concatenate([[[0, 0, 1, 1]], _grid_boxes(self.spec.grid, fmap.shape[-1])])
        return self._pack(feats, np.broadcast_to(boxes, (len(feats), *boxes.shape)))

    def proposal_row(self, img: Image.Image, candidates: np.ndarray) -> np.ndarray:
        """Whole image + the top proposals by max class probability after NMS, filled up with grid cells."""
        w, h = img.size
        crops = [img.crop((x0 * w, y0 * h, x1 * w, y1 * h)) for x0, y0, x1, y1 in candidates]
        fmap = self._map(torch.stack([self.pixels(im) for im in [img, *crops]]))
        pooled = fmap.mean(dim=(2, 3))
        with torch.inference_mode():
            score = self.model.classify(pooled[1:]).softmax(dim=-1).amax(dim=-1).cpu().numpy()
        keep = nms(candidates, score, self.spec.nms_iou)[: self.spec.proposals] if len(crops) else []
        fill = self.spec.proposals - len(keep)
        feats = [pooled[:1], pooled[1:][keep], _grid_cells(fmap[:1], FALLBACK_GRID)[0, :fill]]
        boxes = [np.asarray([[0, 0, 1, 1]], np.float32), candidates[keep].reshape(-1, 4)]
        boxes.append(_grid_boxes(FALLBACK_GRID, fmap.shape[-1])[:fill])
        return self._pack(torch.cat(feats)[None], np.concatenate(boxes)[None])

    def batches(
        self, items: list[tuple[str, Any]], batch_size: int
    ) -> Iterator[tuple[list, list[str], np.ndarray | None, dict[str, str]]]:
        """``(batch, ok ids, rows, {id: error})``; a worker thread decodes (and proposes) ahead."""
        if self.spec.mode == "grid":
            return self._prefetch(list(_batches(items, batch_size)), self._load_grid, self._run_grid)
        return self._prefetch([[item] for item in items], self._load_proposals, self._run_proposals)

    @staticmethod
    def _prefetch(batches: list, load: Callable, run: Callable) -> Iterator:
        if not batches:
            return
        with ThreadPoolExecutor(max_workers=1) as pool:
            pending = pool.submit(load, batches[0])
            for k, batch in enumerate(batches):
                loaded = pending.result()
                if k + 1 < len(batches):
                    pending = pool.submit(load, batches[k + 1])
                yield (batch, *run(loaded))

    def _load_grid(self, batch: list[tuple[str, Any]]) -> tuple[list[str], list[torch.Tensor], dict]:
        ok, pixels, bad = [], [], {}
        for image_id, source in batch:
            try:
                pixels.append(self.pixels(_decode(source)))
                ok.append(image_id)
            except ImageError as exc:
                bad[image_id] = str(exc)
        return ok, pixels, bad

    def _run_grid(self, loaded: tuple) -> tuple[list[str], np.ndarray | None, dict]:
        ok, pixels, bad = loaded
        return ok, (self.grid_rows(torch.stack(pixels)) if pixels else None), bad

    def _load_proposals(self, batch: list[tuple[str, Any]]) -> tuple[str, Any, Any]:
        image_id, source = batch[0]
        try:
            img = _decode(source)
        except ImageError as exc:
            return image_id, None, str(exc)
        return image_id, img, propose_boxes(img, self.spec.ss_side, self.spec.candidates)

    def _run_proposals(self, loaded: tuple) -> tuple[list[str], np.ndarray | None, dict]:
        image_id, img, boxes = loaded
        if img is None:
            return [], None, {image_id: boxes}
        return [image_id], self.proposal_row(img, boxes), {}


# -------------------------------------------------------------------- images -> regions
def _unpack(rows: np.ndarray, spec: RegionSpec) -> Regions:
    r = spec.n_regions
    dim = rows.shape[1] // r - 4
    feats = rows[:, : r * dim].reshape(len(rows), r, dim).astype(np.float32)
    boxes = rows[:, r * dim :].reshape(len(rows), r, 4).astype(np.float32)
    return Regions(feats, boxes)


def region_features(
    images: Images,
    spec: RegionSpec,
    *,
    image_ids: Sequence[str] | None = None,
    cache: bool | None = None,
    cache_dir: str | Path | None = None,
    cache_root: str | Path | None = None,
    device: str | torch.device = "auto",
    batch_size: int = 32,
    skip_bad_images: bool = False,
    progress: bool = True,
) -> Regions:
    """Regions of ``images`` (a collection, corpus, id -> path mapping, or files / PIL images), in order.

    As :func:`~vsekit.vision.features.compute_features`: collections, corpora and mappings are cached by
    default (resumable; ``cache=False`` never touches the disk), loose files and PIL images are not
    unless ``cache=True``; cached or not, the numbers are identical (float16 rows).
    """
    if isinstance(images, (str, os.PathLike, Image.Image)):
        images = [images]
    collection = _as_collection(images)
    items: list[Any] = []
    if collection is None:
        if image_ids is not None:
            raise VsekitError("image_ids selects from a collection or a mapping, not from a list of images")
        assert not isinstance(images, (ImageCollection, Corpus))  # _as_collection took those
        items = list(images)
        if cache:
            collection = ImageCollection.from_paths(items)
            image_ids = [collection.id_of(item) for item in items]
    if collection is not None:
        ids = list(image_ids) if image_ids is not None else collection.image_ids()
        unknown = [i for i in ids if i not in collection.images]
        if unknown:
            raise VsekitError(f"{collection.root}: no image {unknown[0]!r} in collection {collection.name!r}")
    if collection is not None and cache is not False:
        config = spec.cache_config()
        path = _store_path(collection, config, cache_dir, cache_root)
        with cache_lock(path):
            store = _cached_store(
                collection.subset(ids),
                spec,  # type: ignore[arg-type]
                cache_dir=cache_dir,
                cache_root=cache_root,
                device=device,
                batch_size=batch_size,
                skip_bad_images=skip_bad_images,
                progress=progress,
                config=config,
                make_extractor=lambda dev: _RegionExtractor(spec, dev),
            )
            return _unpack(store.raw(ids), spec)
    sources = [collection.images[i] for i in ids] if collection is not None else items
    return _unpack(_uncached_rows(sources, spec, device, batch_size), spec)


def _uncached_rows(sources: list[Any], spec: RegionSpec, device: Any, batch_size: int) -> np.ndarray:
    extractor = _RegionExtractor(spec, device)
    out = np.empty((len(sources), extractor.dims["dim"]), dtype=np.float16)
    for _, ok, rows, bad in extractor.batches([(str(k), s) for k, s in enumerate(sources)], batch_size):
        if bad:
            raise ImageError(next(iter(bad.values())))
        out[[int(i) for i in ok]] = rows
    return out
