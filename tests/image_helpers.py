"""Images made for the decode tests: a phone photo stored sideways with its EXIF Orientation tag, and a PNG
whose header declares a huge image (a decompression bomb) in a few hundred bytes."""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path

from PIL import Image

ORIENTATION = 0x0112
# Orientation -> how the stored pixels relate to the upright photo (the inverse of what a viewer applies)
STORED = {6: Image.Transpose.ROTATE_90, 8: Image.Transpose.ROTATE_270, 3: Image.Transpose.ROTATE_180}


def sideways_jpeg(upright: Image.Image, orientation: int = 6) -> bytes:
    """JPEG bytes of ``upright`` stored turned, as a phone stores a photo, with the tag that turns it back."""
    exif = Image.Exif()
    exif[ORIENTATION] = orientation
    out = io.BytesIO()
    upright.convert("RGB").transpose(STORED[orientation]).save(
        out, format="JPEG", quality=95, exif=exif.tobytes()
    )
    return out.getvalue()


def huge_png(width: int, height: int) -> bytes:
    """A valid PNG header for a ``width`` x ``height`` grey image with one row of data: what a decoder
    sees first of a bomb, without making one (the decode must refuse it from the header alone)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    idat = zlib.compress(b"\0" * (width + 1))
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path
