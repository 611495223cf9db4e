"""The one decode of a user's image (vision.preprocess.decode_image): upright by EXIF, first frame, RGB,
limits in bytes and pixels checked before decoding, type sniffed by content, errors as one line in words."""

from __future__ import annotations

import io
import os
import time

import numpy as np
import pytest
from PIL import Image

from image_helpers import huge_png, sideways_jpeg, write
from search_helpers import SAMPLE_IMAGES
from vsekit.errors import ImageError
from vsekit.vision.preprocess import decode_image, load_image, upright_rgb


def marked(width: int = 60, height: int = 40) -> Image.Image:
    """A landscape picture whose top rows are red, so which way is up can be read from the pixels."""
    pixels = np.zeros((height, width, 3), np.uint8)
    pixels[: height // 4, :, 0] = 255
    return Image.fromarray(pixels)


@pytest.mark.parametrize("orientation", [6, 8, 3])
def test_a_sideways_phone_photo_is_read_upright_from_bytes_files_and_open_images(tmp_path, orientation):
    data = sideways_jpeg(marked(), orientation)
    assert Image.open(io.BytesIO(data)).size == ((40, 60) if orientation in (6, 8) else (60, 40))
    path = write(tmp_path / "IMG_0001.JPG", data)
    for img in (decode_image(data), decode_image(path), load_image(path), upright_rgb(Image.open(path))):
        red = np.asarray(img)[..., 0].astype(float)
        assert img.size == (60, 40) and img.mode == "RGB"
        assert red[:8].mean() > 200 and red[12:].mean() < 30  # red on top: upright
    assert upright_rgb(decode_image(path)).tobytes() == decode_image(path).tobytes()  # twice is once


def test_the_same_photo_decodes_to_the_same_pixels_by_path_and_by_bytes():
    path = SAMPLE_IMAGES[0]
    assert decode_image(path).tobytes() == decode_image(path.read_bytes()).tobytes()


@pytest.mark.parametrize("fmt", ["TIFF", "PNG", "WEBP", "BMP", "GIF", "AVIF", "HEIF"])
def test_formats_are_sniffed_by_content_whatever_the_name(tmp_path, fmt):
    if fmt == "HEIF":
        pytest.importorskip("pillow_heif", reason="pip install pillow-heif")
    if fmt == "AVIF" and "AVIF" not in Image.registered_extensions().values():
        pytest.skip("this Pillow is built without AVIF")
    out = io.BytesIO()
    marked().save(out, format=fmt)
    img = decode_image(write(tmp_path / "photo.jpg", out.getvalue()))  # the extension lies
    assert img.size == (60, 40) and img.mode == "RGB"
    assert np.asarray(img)[:8, :, 0].mean() > 180  # lossy formats: roughly the red band


def test_an_animation_gives_its_first_frame():
    frames = [Image.new("RGB", (16, 16), c) for c in ((255, 0, 0), (0, 0, 255))]
    out = io.BytesIO()
    frames[0].save(out, format="GIF", save_all=True, append_images=frames[1:])
    assert np.asarray(decode_image(out.getvalue()))[..., 0].mean() > 200


def test_sixteen_bit_grey_tiff_is_scaled_not_clipped():
    grey = Image.fromarray(np.full((8, 8), 32768, np.uint16))  # half of full scale
    out = io.BytesIO()
    grey.save(out, format="TIFF")
    assert np.asarray(decode_image(out.getvalue())).max() == 128


def test_a_bomb_is_refused_from_its_header_quickly():
    data = huge_png(30_000, 30_000)  # 900 megapixels declared in a few hundred bytes
    start = time.monotonic()
    with pytest.raises(ImageError) as info:
        decode_image(data, name="bomb.png")
    assert time.monotonic() - start < 1.0 and info.value.kind == "too_large"
    assert str(info.value) == "bomb.png: cannot read image (900000000 pixels; the limit is 178956970 pixels)"
    with pytest.raises(ImageError, match=r"3000 x 2000 pixels; the limit is 1000000 pixels"):
        decode_image(huge_png(3000, 2000), max_pixels=1_000_000)


def test_the_byte_limit_is_checked_before_reading(tmp_path):
    path = write(tmp_path / "a.png", huge_png(10, 10))
    with pytest.raises(ImageError, match=r"a.png: cannot read image \(\d+ bytes; the limit is 50\)") as info:
        decode_image(path, max_bytes=50)
    assert info.value.kind == "too_large"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_odd_files_are_refused_without_reading_them(tmp_path):
    os.mkfifo(tmp_path / "fifo.jpg")  # reading it would block forever
    (tmp_path / "zero.jpg").symlink_to("/dev/zero")  # reading it would never end
    for name in ("fifo.jpg", "zero.jpg"):
        with pytest.raises(ImageError, match="not a regular file"):
            decode_image(tmp_path / name)
    with pytest.raises(ImageError, match=r"missing.jpg: cannot read image \(file not found\)"):
        decode_image(tmp_path / "missing.jpg")


@pytest.mark.parametrize(
    "data, reason",
    [
        (b"definitely not an image", "not an image in a format vsekit reads"),
        (b"", "empty file"),
        (b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\n", "not an image in a format vsekit reads"),
    ],
)
def test_errors_are_one_line_in_words_never_an_object_repr(data, reason):
    for source in (data, io.BytesIO(data)):
        with pytest.raises(ImageError) as info:
            decode_image(source)
        message = str(info.value)
        assert message.startswith("image: cannot read image (") and reason in message
        assert "\n" not in message and "0x" not in message and "BytesIO" not in message
        assert str(info.value.__cause__) == info.value.reason  # what callers print of the cause: words


def test_a_truncated_jpeg_names_the_file(tmp_path):
    data = SAMPLE_IMAGES[0].read_bytes()
    path = write(tmp_path / "cut.jpg", data[: len(data) // 2])
    with pytest.raises(ImageError, match=r"cut.jpg: cannot read image \(.*truncated") as info:
        decode_image(path)
    assert info.value.kind == "damaged"


def test_draft_decodes_a_jpeg_smaller_but_never_below_the_asked_size(tmp_path):
    big = Image.open(SAMPLE_IMAGES[0]).convert("RGB").resize((2000, 1500))
    path = tmp_path / "big.jpg"
    big.save(path, quality=90)
    small = decode_image(path, draft=(256, 256))
    assert 256 <= min(small.size) and max(small.size) < 2000
