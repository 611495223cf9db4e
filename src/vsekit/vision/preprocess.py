"""Image loading and the fixed ImageNet-style preprocessing that feeds the CNN backbones.

Implemented with PIL + numpy only (torchvision is not a dependency), following the usual ImageNet
evaluation recipe: resize the shorter side, centre-crop, scale to [0, 1], normalise per channel. The
``Preprocessing`` object is frozen and has a stable :meth:`Preprocessing.key` so that feature caches can
record exactly which preprocessing produced them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageOps

from vsekit.errors import ImageError

__all__ = ["IMAGENET_MEAN", "IMAGENET_STD", "Preprocessing", "load_image"]

# The per-channel statistics of the ImageNet training set used by torchvision's models.
IMAGENET_MEAN: tuple[float, float, float] = (0.485, 0.456, 0.406)
IMAGENET_STD: tuple[float, float, float] = (0.229, 0.224, 0.225)


def load_image(path: str | Path) -> Image.Image:
    """Open ``path`` and decode it completely into an upright (EXIF orientation applied) RGB image.

    PIL decodes lazily, so a truncated or corrupt file would otherwise only fail later, deep inside a
    batch loop; forcing ``load()`` here makes the error surface immediately and name the file.

    Raises:
        ImageError: the file is missing, is not an image, or cannot be fully decoded.
    """
    try:
        with Image.open(path) as img:
            img.load()
            # A phone stores a portrait photo sideways plus an EXIF Orientation tag; every viewer turns it
            # upright, so the network must see it upright too.
            return ImageOps.exif_transpose(img).convert("RGB")
    except FileNotFoundError:
        raise ImageError(f"{path}: cannot read image (file not found)") from None
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        # UnidentifiedImageError and "image file is truncated" are both OSErrors; some broken headers
        # surface as ValueError/SyntaxError from the PIL plugins.
        reason = str(exc) or type(exc).__name__
        raise ImageError(f"{path}: cannot read image ({reason})") from exc


@dataclass(frozen=True)
class Preprocessing:
    """Resize-shorter-side, centre-crop and normalise, giving a ``[3, crop, crop]`` float32 tensor.

    Attributes:
        resize: target length of the shorter image side (bilinear, antialiased when shrinking).
        crop: side of the square centre crop taken after resizing; must not exceed ``resize``.
        mean: per-channel mean subtracted after scaling pixels to [0, 1].
        std: per-channel standard deviation divided by after subtracting the mean.
    """

    resize: int
    crop: int
    mean: tuple[float, float, float]
    std: tuple[float, float, float]

    def __post_init__(self) -> None:
        if self.resize <= 0 or self.crop <= 0:
            raise ValueError(f"resize and crop must be positive, got resize={self.resize}, crop={self.crop}")
        if self.crop > self.resize:
            raise ValueError(f"crop ({self.crop}) must not exceed resize ({self.resize})")
        if len(self.mean) != 3 or len(self.std) != 3:
            raise ValueError("mean and std must have three (R, G, B) entries")
        if any(s <= 0 for s in self.std):
            raise ValueError(f"std entries must be positive, got {self.std}")
        # Normalise to plain float tuples so equal configurations compare and hash equal.
        object.__setattr__(self, "mean", tuple(float(m) for m in self.mean))
        object.__setattr__(self, "std", tuple(float(s) for s in self.std))

    def key(self) -> str:
        """A stable, human-readable description for cache keys (changes whenever the output would)."""
        mean = "/".join(repr(m) for m in self.mean)
        std = "/".join(repr(s) for s in self.std)
        return (
            f"resize={self.resize};crop={self.crop};mean={mean};std={std};interp=bilinear-aa;rgb;exif-upright"
        )

    def crop_uint8(self, img: Image.Image) -> np.ndarray:
        """The resized, centre-cropped RGB pixels of ``img``, uint8 ``[crop, crop, 3]`` (no normalisation)."""
        if img.mode != "RGB":
            img = img.convert("RGB")
        w, h = img.size
        # Shorter side -> resize, keeping the aspect ratio (torchvision's Resize(int) rounding rule).
        if w <= h:
            new_w, new_h = self.resize, int(self.resize * h / w)
        else:
            new_w, new_h = int(self.resize * w / h), self.resize
        if (new_w, new_h) != (w, h):
            # PIL's BILINEAR filter widens its support when downsampling, i.e. it is antialiased.
            img = img.resize((new_w, new_h), Image.Resampling.BILINEAR)
        left = int(round((new_w - self.crop) / 2.0))
        top = int(round((new_h - self.crop) / 2.0))
        if (left, top, self.crop, self.crop) != (0, 0, new_w, new_h):
            img = img.crop((left, top, left + self.crop, top + self.crop))
        return np.asarray(img, dtype=np.uint8)

    def normalise(self, pixels: np.ndarray) -> np.ndarray:
        """uint8 ``[..., 3]`` pixels -> float32 ``(x / 255 - mean) / std``, channels last.

        One image or a batch: the same element-wise float32 arithmetic either way, so a batch gives
        bit-identical numbers to its images one at a time.
        """
        arr = pixels.astype(np.float32) / 255.0  # [..., 3] in [0, 1]
        mean = np.asarray(self.mean, dtype=np.float32)
        std = np.asarray(self.std, dtype=np.float32)
        return (arr - mean) / std

    def __call__(self, img: Image.Image) -> torch.Tensor:
        """Preprocess one PIL image into a normalised ``[3, crop, crop]`` float32 tensor."""
        arr = self.normalise(self.crop_uint8(img))
        return torch.from_numpy(np.ascontiguousarray(arr.transpose(2, 0, 1)))
