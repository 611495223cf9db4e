"""Fuzzing image decoding (issue 15 item 4): any image file, whole or damaged, decodes to an upright RGB
picture that preprocesses to finite pixels, or is an ImageError naming the file: never another exception.

Examples (fixed, derandomized profile in ``fuzz_helpers``): 150 generated images (JPEG, PNG, GIF, WebP,
BMP, TIFF; modes RGB, L, 1, P, RGBA, LA, CMYK, I;16, I, F; 1x1 to 40x40; animated; EXIF orientations
1-8), each written whole or truncated / bit-flipped / overwritten.
"""

from __future__ import annotations

import io

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from PIL import Image

from fuzz_helpers import mutated  # noqa: F401  (loads the profile)
from vsekit.errors import ImageError
from vsekit.vision.preprocess import IMAGENET_MEAN, IMAGENET_STD, Preprocessing, load_image

PREP = Preprocessing(resize=16, crop=16, mean=IMAGENET_MEAN, std=IMAGENET_STD)
MODES = ["RGB", "L", "1", "P", "RGBA", "LA", "CMYK", "I;16", "I", "F"]
FORMATS = ["JPEG", "PNG", "GIF", "WEBP", "BMP", "TIFF"]


@st.composite
def image_files(draw: st.DrawFn) -> tuple[bytes, tuple[int, int] | None]:
    """``(file bytes, expected upright size or None when damaged)``."""
    mode, fmt = draw(st.sampled_from(MODES)), draw(st.sampled_from(FORMATS))
    w, h = draw(st.integers(1, 40)), draw(st.integers(1, 40))
    seed = draw(st.integers(0, 2**16))
    g = torch.Generator().manual_seed(seed)
    pixels = (torch.rand(h, w, 3, generator=g) * 255).to(torch.uint8).numpy()
    frames = [Image.fromarray(pixels).convert(mode) for _ in range(draw(st.integers(1, 3)))]
    orientation = draw(st.integers(1, 8))
    exif = Image.Exif()
    exif[0x0112] = orientation
    buf = io.BytesIO()
    try:
        kwargs = {"save_all": True, "append_images": frames[1:]} if len(frames) > 1 else {}
        frames[0].save(buf, format=fmt, exif=exif.tobytes(), **kwargs)
    except (OSError, ValueError, KeyError, TypeError):
        assume(False)  # PIL cannot write this mode in this format: not an input anyone can hand us
    data = buf.getvalue()
    expected = (h, w) if orientation in (5, 6, 7, 8) else (w, h)
    with Image.open(io.BytesIO(data)) as probe:  # formats that drop EXIF on save keep the stored size
        if probe.getexif().get(0x0112, 1) != orientation:
            expected = (w, h)
    damage = draw(st.sampled_from(["none", "none", "truncate", "flip", "overwrite"]))
    if damage == "none":
        return data, expected
    out = bytearray(data)
    at = draw(st.integers(0, len(out) - 1))
    if damage == "truncate":
        del out[at:]
    elif damage == "flip":
        out[at] ^= 1 << draw(st.integers(0, 7))
    else:
        out[at : at + 16] = draw(st.binary(min_size=16, max_size=16))
    return bytes(out), None


@settings(max_examples=150)
@given(image=image_files())
def test_any_image_file_decodes_upright_rgb_or_is_an_image_error_naming_it(tmp_path, image):
    data, expected = image
    path = tmp_path / "photo.img"
    path.write_bytes(data)
    try:
        img = load_image(path)
    except ImageError as exc:
        assert str(path) in str(exc) and "\n" not in str(exc), str(exc)
        assert expected is None, f"an undamaged file was refused: {exc}"
        return
    assert img.mode == "RGB" and img.size[0] >= 1 and img.size[1] >= 1
    if expected is not None:
        assert img.size == expected
    pixels = PREP(img)
    assert pixels.shape == (3, 16, 16) and torch.isfinite(pixels).all()


@pytest.mark.parametrize("mode", ["CMYK", "I;16", "1"])
def test_cmyk_16_bit_and_1_bit_images_decode_to_rgb(tmp_path, mode):
    path = tmp_path / ("x.tif" if mode == "CMYK" else "x.png")
    Image.new(mode, (3, 2), 1 if mode == "1" else 0).save(path)
    img = load_image(path)
    assert img.mode == "RGB" and img.size == (3, 2)


def test_exif_rotated_jpeg_is_turned_upright(tmp_path):
    path = tmp_path / "portrait.jpg"
    exif = Image.Exif()
    exif[0x0112] = 6  # stored sideways: rotate 90 degrees clockwise to view
    Image.new("RGB", (8, 4), (200, 10, 10)).save(path, exif=exif.tobytes())
    assert load_image(path).size == (4, 8)
