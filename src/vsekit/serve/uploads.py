"""Photos sent to the server: bounded in bytes and pixels, decoded by content, never trusted by name.

The decode is the library's one decode of a user's image (:func:`vsekit.vision.preprocess.decode_image`):
sniffed by content (the filename and content type are ignored), the width x height its header declares
checked against a pixel budget before any pixel is decoded (a decompression bomb is refused cheaply),
then upright by EXIF orientation, first frame, RGB, exactly as the command line reads a file.
"""

from __future__ import annotations

from PIL import Image

from vsekit.errors import ImageError, VsekitError
from vsekit.vision.preprocess import decode_image

__all__ = ["UploadError", "decode_upload"]


class UploadError(VsekitError):
    """A bad upload; ``status`` is the HTTP status to answer with (400 or 413)."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def decode_upload(data: bytes, max_bytes: int, max_pixels: int) -> Image.Image:
    """An upright RGB image from uploaded bytes (first frame of an animation), or an :class:`UploadError`."""
    if len(data) > max_bytes:
        raise UploadError(f"upload of {len(data)} bytes; the limit is {max_bytes}", status=413)
    if not data:
        raise UploadError("empty upload: send a photo in the multipart field 'file'")
    try:
        return decode_image(data, name="upload", max_pixels=max_pixels, max_bytes=max_bytes)
    except ImageError as exc:
        if exc.kind == "too_large":
            raise UploadError(f"image of {exc.reason}", status=413) from None
        if exc.kind == "format":
            raise UploadError(
                f"not a readable image (the {len(data)} bytes in field 'file' are {exc.reason})"
            ) from None
        raise UploadError(f"not a readable image ({exc.reason})") from None
