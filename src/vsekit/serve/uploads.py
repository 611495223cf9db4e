"""Photos sent to the server: bounded in bytes and pixels, decoded by content, never trusted by name.

The bytes are sniffed by PIL (the filename and content type are ignored); the declared width x height is
checked against a pixel budget before any pixel is decoded, so a small file that expands to a huge image
(a decompression bomb) is refused cheaply.
"""

from __future__ import annotations

import io
import warnings

from PIL import Image

from vsekit.errors import VsekitError

__all__ = ["UploadError", "decode_upload"]


class UploadError(VsekitError):
    """A bad upload; ``status`` is the HTTP status to answer with (400 or 413)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def decode_upload(data: bytes, max_bytes: int, max_pixels: int) -> Image.Image:
    """An RGB image from uploaded bytes (first frame of an animation), or an :class:`UploadError`."""
    if len(data) > max_bytes:
        raise UploadError(f"upload of {len(data)} bytes; the limit is {max_bytes}", status=413)
    if not data:
        raise UploadError("empty upload: send a photo in the multipart field 'file'")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as img:
                width, height = img.size
                if width * height > max_pixels:
                    raise UploadError(
                        f"image of {width} x {height} pixels; the limit is {max_pixels} pixels", status=413
                    )
                img.load()
                return img.convert("RGB")
    except UploadError:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise UploadError(f"image refused: {exc}", status=413) from None
    except Image.UnidentifiedImageError:  # its message is the repr of our in-memory buffer
        raise UploadError(
            f"not a readable image (the {len(data)} bytes in field 'file' are in no image format PIL reads)"
        ) from None
    except (OSError, ValueError, SyntaxError) as exc:
        raise UploadError(f"not a readable image ({exc or type(exc).__name__})") from None
