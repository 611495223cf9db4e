"""Image loading and the fixed ImageNet-style preprocessing that feeds the CNN backbones.

Implemented with PIL + numpy only (torchvision is not a dependency), following the usual ImageNet
evaluation recipe: resize the shorter side, centre-crop, scale to [0, 1], normalise per channel. The
``Preprocessing`` object is frozen and has a stable :meth:`Preprocessing.key` so that feature caches can
record exactly which preprocessing produced them.
"""

from __future__ import annotations

import dataclasses
import io
import logging
import os
import re
import stat
import threading
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, NoReturn

import numpy as np
from PIL import Image, ImageOps

from vsekit.errors import ImageError

if TYPE_CHECKING:  # a tensor is made where a photo is prepared for a CNN: reading a photo needs no torch
    import torch

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_PIXELS",
    "IMAGE_FORMATS",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "Preprocessing",
    "VIEWS",
    "decode_image",
    "decode_photo",
    "exif_date",
    "load_image",
    "readable_formats",
    "upright_rgb",
]

logger = logging.getLogger(__name__)

# The per-channel statistics of the ImageNet training set used by torchvision's models.
IMAGENET_MEAN: tuple[float, float, float] = (0.485, 0.456, 0.406)
IMAGENET_STD: tuple[float, float, float] = (0.229, 0.224, 0.225)

#: Pixels an image may declare before it is refused unread: Pillow's own hard limit (2 x its
#: ``MAX_IMAGE_PIXELS``, ~179 megapixels), so a file the CLI read before still reads; the server asks less.
DEFAULT_MAX_PIXELS = 2 * 89_478_485
#: Bytes an image file may have (a 179-megapixel uncompressed 16-bit TIFF is ~1 GB).
DEFAULT_MAX_BYTES = 1 << 30

#: The formats :func:`decode_image` opens, sniffed from the bytes (the file name plays no part). Others
#: that Pillow knows are refused on purpose: EPS, for one, would run Ghostscript on a user's file. HEIF
#: (HEIC, every iPhone) needs the ``pillow-heif`` plugin; AVIF is read by Pillow itself when built with it.
IMAGE_FORMATS = ("JPEG", "MPO", "PNG", "GIF", "WEBP", "BMP", "TIFF", "HEIF", "AVIF")

EXIF_ORIENTATION = 0x0112
#: The EXIF sub-IFD, its DateTimeOriginal (when the photo was taken) and IFD0's DateTime (last change).
EXIF_IFD = 0x8769
EXIF_DATE_TAKEN = 36867
EXIF_DATE_TIME = 306

#: The views of a photo the CNN can see (training-time augmentation, cached per view). ``centre`` is the
#: evaluation crop, the only one models ever see at test time; ``centre-flip`` its mirror image; the
#: corners (top-left, top-right, bottom-left, bottom-right) are ``crop``-sided crops of the photo resized a
#: little larger (shorter side ``resize * 8 / 7``: 256 for 224, the ImageNet 0.875 crop ratio), so each
#: keeps most of the scene but moves it by up to an eighth of the frame; ``-flip`` mirrors any of them.
VIEWS = (
    "centre",
    "centre-flip",
    "tl",
    "tr",
    "bl",
    "br",
    "tl-flip",
    "tr-flip",
    "bl-flip",
    "br-flip",
)
_formats: tuple[str, ...] | None = None
_formats_lock = threading.Lock()


def readable_formats() -> tuple[str, ...]:
    """:data:`IMAGE_FORMATS` that this Pillow can open, registering the HEIF plugin on first use (lazily:
    most commands never decode a photo, and importing it costs start-up time)."""
    global _formats
    with _formats_lock:
        if _formats is None:
            try:
                from pillow_heif import register_heif_opener

                register_heif_opener()
            except ImportError:  # optional: without it a HEIC file is "not an image vsekit reads"
                logger.debug("pillow-heif is not installed: HEIC/HEIF photos cannot be read")
            Image.init()
            _formats = tuple(f for f in IMAGE_FORMATS if f in Image.OPEN)
        return _formats


def _fail(name: str, reason: str, kind: str) -> NoReturn:
    # The cause carries the reason alone, so a caller that prints ``exc.__cause__`` prints words, never
    # the repr of an in-memory buffer (``<_io.BytesIO object at 0x...>``).
    raise ImageError(f"{name}: cannot read image ({reason})", reason=reason, kind=kind) from ValueError(
        reason
    )


def _name_of(source: object, name: str | None) -> str:
    if name is not None:
        return name
    if isinstance(source, (str, os.PathLike)):
        return str(source)
    return "image"


def _open_source(
    source: str | os.PathLike[str] | bytes | IO[bytes], name: str, max_bytes: int
) -> IO[bytes] | str | os.PathLike[str]:
    """What :func:`Image.open` reads, after the byte limit and, for a path, the regular-file check (a
    FIFO would block forever, ``/dev/zero`` would never end)."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        size = len(source)
        source = io.BytesIO(source)
    elif isinstance(source, (str, os.PathLike)):
        try:
            st = os.stat(source)
        except FileNotFoundError:
            _fail(name, "file not found", "missing")
        except OSError as exc:
            _fail(name, exc.strerror or type(exc).__name__, "missing")
        if not stat.S_ISREG(st.st_mode):
            _fail(name, "not a regular file", "missing")
        size = st.st_size
    elif source.seekable():  # an open file: its size from where it stands to its end
        start = source.tell()
        size = source.seek(0, os.SEEK_END) - start
        source.seek(start)
    else:
        size = None  # a stream: Pillow reads only what the header and the pixels need
    if size == 0:
        _fail(name, "empty file", "format")
    if size is not None and size > max_bytes:
        _fail(name, f"{size} bytes; the limit is {max_bytes}", "too_large")
    return source


def _to_rgb(img: Image.Image) -> Image.Image:
    """RGB pixels; 16- and 32-bit grey (scanned TIFFs) is scaled to 8 bits rather than clipped to white."""
    if img.mode in ("I;16", "I;16L", "I;16B", "I;16N"):
        grey = (np.asarray(img, dtype=np.uint16) >> 8).astype(np.uint8)
        img = Image.fromarray(grey)
    elif img.mode in ("I", "F"):
        arr = np.asarray(img, dtype=np.float64)
        top = float(arr.max()) if arr.size else 0.0
        scale = 255.0 / top if top > 255.0 else 1.0
        img = Image.fromarray(np.clip(arr * scale, 0, 255).astype(np.uint8))
    return img if img.mode == "RGB" else img.convert("RGB")  # RGB already: no copy of a large photo


def upright_rgb(img: Image.Image) -> Image.Image:
    """An already opened image upright (EXIF orientation applied) and RGB.

    A phone stores a portrait photo sideways plus an EXIF Orientation tag; every viewer turns it upright,
    so the network must see it upright too. The result carries no orientation tag, so applying this twice
    is applying it once.
    """
    if img.getexif().get(EXIF_ORIENTATION, 1) != 1:  # most photos: no copy for nothing
        img = ImageOps.exif_transpose(img)
    return _to_rgb(img)


def decode_image(
    source: str | os.PathLike[str] | bytes | IO[bytes],
    *,
    name: str | None = None,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    max_bytes: int = DEFAULT_MAX_BYTES,
    draft: tuple[int, int] | None = None,
) -> Image.Image:
    """The one decode of every image a user hands in (a path, bytes or an open binary file): the first
    frame, upright by EXIF orientation, RGB, fully decoded.

    The type is sniffed from the content (the name and extension play no part), the file must be a
    regular file of at most ``max_bytes``, and the width x height its header declares must be at most
    ``max_pixels`` before a pixel is decoded (a small file that expands to a huge image is refused
    cheaply). ``draft``: a size the caller will shrink to anyway (a thumbnail); JPEG then decodes at
    1/2 to 1/8 scale, never below it. ``name`` is how errors call the image (default: the path).

    Raises:
        ImageError: one line ``NAME: cannot read image (REASON)``; ``reason`` and ``kind`` say why.
    """
    return _decode(source, _name_of(source, name), max_pixels, max_bytes, draft, dated=False)[0]


def decode_photo(
    source: str | os.PathLike[str] | bytes | IO[bytes],
    *,
    name: str | None = None,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> tuple[Image.Image, str | None]:
    """:func:`decode_image` and the photo's date taken (:func:`exif_date`), both from the one opening of
    ``source``: the EXIF that turns the photo upright also gives its date (an index build reads each
    photo's bytes once).

    Raises:
        ImageError: as :func:`decode_image`.
    """
    return _decode(source, _name_of(source, name), max_pixels, max_bytes, None, dated=True)


def exif_date(exif: Image.Exif) -> str | None:
    """EXIF DateTimeOriginal (else DateTime) as ISO text ``YYYY-MM-DDTHH:MM:SS``, or None (no date, or
    EXIF that cannot be read: a photo without a readable date simply has none)."""
    try:
        value = exif.get_ifd(EXIF_IFD).get(EXIF_DATE_TAKEN) or exif.get(EXIF_DATE_TIME)
    except Exception:  # noqa: BLE001 - damaged EXIF: no date, the photo itself decoded
        return None
    if not isinstance(value, str) or len(value) < 19:
        return None
    text = value.strip()[:19].replace(":", "-", 2).replace(" ", "T", 1)
    return text if text[:4].isdigit() and text[4] == "-" else None


def _decode(
    source: str | os.PathLike[str] | bytes | IO[bytes],
    name: str,
    max_pixels: int,
    max_bytes: int,
    draft: tuple[int, int] | None,
    dated: bool,
) -> tuple[Image.Image, str | None]:
    """:func:`decode_image`, and with ``dated`` the date its EXIF records (read from the image as opened,
    not from the upright copy, while its source is still open: a TIFF's EXIF is read from the file)."""
    opened = _open_source(source, name, max_bytes)
    try:
        with Image.open(opened, formats=readable_formats()) as img:
            width, height = img.size
            if width * height > max_pixels:
                _fail(name, f"{width} x {height} pixels; the limit is {max_pixels} pixels", "too_large")
            if draft is not None and img.format in ("JPEG", "MPO"):
                img.draft("RGB", draft)
            # PIL decodes lazily: load() here makes a truncated file fail now, naming it, not deep
            # inside a batch loop later. An animation's first frame is the frame Image.open is on.
            img.load()
            upright = upright_rgb(img)
            return upright, exif_date(img.getexif()) if dated else None
    except ImageError:
        raise
    except Image.DecompressionBombError as exc:  # over Pillow's own limit, refused while opening
        declared = re.search(r"\((\d+) pixels\)", str(exc))
        pixels = f"{declared.group(1)} pixels" if declared else "too many pixels"
        limit = min(max_pixels, 2 * (Image.MAX_IMAGE_PIXELS or DEFAULT_MAX_PIXELS // 2))
        _fail(name, f"{pixels}; the limit is {limit} pixels", "too_large")
    except FileNotFoundError:
        _fail(name, "file not found", "missing")
    except Image.UnidentifiedImageError:  # its message is the repr of the buffer it was given
        _fail(name, f"not an image in a format vsekit reads ({', '.join(readable_formats())})", "format")
    except (OSError, ValueError, SyntaxError, EOFError, MemoryError) as exc:
        # "image file is truncated" is an OSError; some broken headers surface as ValueError/SyntaxError
        # from the PIL plugins.
        reason = str(exc) or type(exc).__name__
        if "BytesIO" in reason or " at 0x" in reason:  # never an object's repr in a message
            reason = type(exc).__name__
        _fail(name, reason, "damaged")


def load_image(path: str | os.PathLike[str] | bytes | IO[bytes]) -> Image.Image:
    """Open ``path`` and decode it completely into an upright RGB image (:func:`decode_image` with the
    default limits; errors name the path).

    Raises:
        ImageError: the file is missing, is not an image, or cannot be fully decoded.
    """
    return decode_image(path)


@dataclass(frozen=True)
class Preprocessing:
    """Resize-shorter-side, centre-crop and normalise, giving a ``[3, crop, crop]`` float32 tensor.

    Attributes:
        resize: target length of the shorter image side (bilinear, antialiased when shrinking).
        crop: side of the square centre crop taken after resizing; must not exceed ``resize``.
        mean: per-channel mean subtracted after scaling pixels to [0, 1].
        std: per-channel standard deviation divided by after subtracting the mean.
        view: which crop of the photo (one of :data:`VIEWS`); ``"centre"``, the default, is the
            evaluation crop above, and the only view whose :meth:`key` is the one it always was.
    """

    resize: int
    crop: int
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    view: str = "centre"

    def __post_init__(self) -> None:
        if self.resize <= 0 or self.crop <= 0:
            raise ValueError(f"resize and crop must be positive, got resize={self.resize}, crop={self.crop}")
        if self.crop > self.resize:
            raise ValueError(f"crop ({self.crop}) must not exceed resize ({self.resize})")
        if len(self.mean) != 3 or len(self.std) != 3:
            raise ValueError("mean and std must have three (R, G, B) entries")
        if any(s <= 0 for s in self.std):
            raise ValueError(f"std entries must be positive, got {self.std}")
        if self.view not in VIEWS:
            raise ValueError(f"unknown view {self.view!r}; known: {', '.join(VIEWS)}")
        # Normalise to plain float tuples so equal configurations compare and hash equal.
        object.__setattr__(self, "mean", tuple(float(m) for m in self.mean))
        object.__setattr__(self, "std", tuple(float(s) for s in self.std))

    def key(self) -> str:
        """A stable, human-readable description for cache keys (changes whenever the output would)."""
        mean = "/".join(repr(m) for m in self.mean)
        std = "/".join(repr(s) for s in self.std)
        key = (
            f"resize={self.resize};crop={self.crop};mean={mean};std={std};interp=bilinear-aa;rgb;exif-upright"
        )
        # a view's rows are other numbers: another key, so the feature cache never mixes them with plain rows
        return key if self.view == "centre" else f"{key};view={self.view}"

    def crop_uint8(self, img: Image.Image) -> np.ndarray:
        """The resized, cropped RGB pixels of ``img`` (the centre crop unless ``view`` says otherwise),
        uint8 ``[crop, crop, 3]`` (no normalisation)."""
        if img.mode != "RGB":
            img = img.convert("RGB")
        w, h = img.size
        corner = self.view.split("-")[0]
        # the corner views crop a slightly larger resize (see VIEWS), the centre views the plain one
        size = self.resize if corner == "centre" else (self.resize * 8 + 6) // 7
        # Shorter side -> size, keeping the aspect ratio (torchvision's Resize(int) rounding rule).
        if w <= h:
            new_w, new_h = size, int(size * h / w)
        else:
            new_w, new_h = int(size * w / h), size
        if (new_w, new_h) != (w, h):
            # PIL's BILINEAR filter widens its support when downsampling, i.e. it is antialiased.
            img = img.resize((new_w, new_h), Image.Resampling.BILINEAR)
        if corner == "centre":
            left = int(round((new_w - self.crop) / 2.0))
            top = int(round((new_h - self.crop) / 2.0))
        else:
            left = 0 if corner[1] == "l" else new_w - self.crop
            top = 0 if corner[0] == "t" else new_h - self.crop
        if (left, top, self.crop, self.crop) != (0, 0, new_w, new_h):
            img = img.crop((left, top, left + self.crop, top + self.crop))
        if self.view.endswith("-flip"):
            img = img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        return np.asarray(img, dtype=np.uint8)

    def with_view(self, view: str) -> Preprocessing:
        """This preprocessing seen through another of :data:`VIEWS`."""
        return dataclasses.replace(self, view=view)

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
        import torch

        arr = self.normalise(self.crop_uint8(img))
        return torch.from_numpy(np.ascontiguousarray(arr.transpose(2, 0, 1)))
