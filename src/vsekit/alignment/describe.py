"""Regions of a new image with their generated snippets (Fig. 7), and regions for a snippet (Fig. 9).

:func:`describe_regions` runs the aligner's regions of one image through the region captioner, scores
each region against its own snippet with the aligner (the mean of ``v_i . s_t`` over the snippet's
words: how well the aligner thinks the words fit that box), drops boxes overlapping a better one, and
keeps the top ``top``. :func:`draw_regions` draws them on the full-size photo. :func:`regions_for_snippet`
ranks the regions of a set of images by their score with a text snippet (every word on that region: the
per-region term of Eq. 8), best region per image.

Boxes are computed as fractions of the network's input (the photo squashed to ``size x size``), which
are the same fractions of the original photo: :func:`scale_boxes` turns them into original pixels.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image, ImageDraw, ImageFont

from vsekit.alignment.model import Aligner
from vsekit.alignment.region_captions import RegionCaptioner
from vsekit.alignment.score import word_region_dots
from vsekit.data.vocab import tokenize
from vsekit.errors import VsekitError
from vsekit.vision.features import _decode
from vsekit.vision.regions import nms

__all__ = [
    "COLOURS",
    "CONCEPT_COLOUR",
    "describe_regions",
    "draw_boxes",
    "draw_regions",
    "draw_snippet_gallery",
    "regions_for_snippet",
    "scale_boxes",
]

COLOURS = ["#e6194b", "#3cb44b", "#4363d8", "#f58231", "#911eb4", "#42d4f4", "#f032e6", "#bfef45"]
#: The concept box's colour (white, framed in black like every box): none of :data:`COLOURS`.
CONCEPT_COLOUR = "#ffffff"


def scale_boxes(
    boxes: np.ndarray | Sequence[Sequence[float]],
    size: tuple[int, int],
    from_size: tuple[int, int] | None = None,
) -> list[list[int]]:
    """Boxes ``(x0, y0, x1, y1)`` in pixels of an image of ``size`` (width, height), rounded and clipped.

    ``boxes`` are fractions of the image (``from_size=None``) or pixels of an image of ``from_size``
    (e.g. the 224 x 224 network input, which is the whole photo squashed)."""
    arr = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    if from_size is not None:
        arr = arr / np.asarray([from_size[0], from_size[1], from_size[0], from_size[1]], dtype=np.float64)
    w, h = size
    px = np.rint(arr * [w, h, w, h])
    px = np.clip(px, 0, [w, h, w, h])
    return px.astype(int).tolist()


@torch.no_grad()
def _snippet_fit(
    aligner: Aligner, features: np.ndarray, regions: Sequence[int], texts: Sequence[str]
) -> list[float]:
    """Mean ``v_i . s_t`` of each text's words on its region ``i`` (one image's features ``[R, D]``)."""
    vectors = aligner.region_vectors(features[None])  # [1, R, h]
    packed = aligner.word_vectors(list(texts))
    dots = word_region_dots(vectors, packed.vectors)[0]  # [R, all words]
    out, offset = [], 0
    for region, n in zip(regions, packed.lengths.tolist(), strict=True):
        out.append(float(dots[region, offset : offset + n].mean()))
        offset += n
    return out


def describe_regions(
    aligner: Aligner,
    captioner: RegionCaptioner,
    image: str | os.PathLike[str] | Image.Image,
    top: int = 5,
    nms_iou: float = 0.5,
    beam_size: int = 3,
) -> dict[str, Any]:
    """``{"image", "size": [w, h], "regions": [{region, box, snippet, score}]}`` for the ``top`` regions
    by the aligner's score with their own snippet; boxes in the photo's pixels, best first."""
    if top < 1:
        raise VsekitError(f"--top must be >= 1, got {top}")
    img = _decode(image)
    regions = aligner.regions([img], cache=False, progress=False)
    if captioner.spec.to_config() != aligner.model.region_spec.to_config():
        raise VsekitError(
            f"the region captioner reads {captioner.spec.layers} regions {captioner.spec.to_config()}, the "
            f"aligner {aligner.model.region_spec.to_config()}: use a pair trained together"
        )
    feats, boxes = regions.features[0], regions.boxes[0]
    snippets = captioner.describe(feats, list(range(len(feats))), beam_size=beam_size)
    kept = [r for r, s in enumerate(snippets) if tokenize(s)]
    scores = _snippet_fit(aligner, feats, kept, [snippets[r] for r in kept]) if kept else []
    order = [kept[k] for k in nms(boxes[kept], np.asarray(scores), nms_iou)] if kept else []
    score_of = dict(zip(kept, scores, strict=True))
    pixels = scale_boxes(boxes, img.size)
    return {
        "image": None if isinstance(image, Image.Image) else str(image),
        "size": list(img.size),
        "regions": [
            {"region": r, "box": pixels[r], "snippet": snippets[r], "score": round(score_of[r], 4)}
            for r in order[:top]
        ],
    }


def _font(height: int) -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    try:
        return ImageFont.load_default(size=max(11, height))
    except TypeError:  # Pillow < 10.1: one bitmap size
        return ImageFont.load_default()


def draw_boxes(
    image: str | os.PathLike[str] | Image.Image,
    labelled: Sequence[tuple[Sequence[int], str]],
    out: str | os.PathLike[str],
    colours: Sequence[str | None] | None = None,
) -> Path:
    """The full-size photo with each pixel box framed in a colour (``colours[k]``, else the k-th of
    :data:`COLOURS`) and its label on a band of that colour, placed where it covers no earlier label; line
    width and text grow with the photo."""
    img = _decode(image)
    draw = ImageDraw.Draw(img)
    side = max(img.size)
    width, font = max(2, round(side / 200)), _font(round(side / 32))
    placed: list[tuple[float, ...]] = []
    for k, (box, label) in enumerate(labelled):
        colour = (colours[k] if colours is not None else None) or COLOURS[k % len(COLOURS)]
        inset = k % 3 * width  # boxes may coincide (the whole image): keep every frame visible
        x0, y0, x1, y1 = box
        frame = [x0 + inset, y0 + inset, x1 - 1 - inset, y1 - 1 - inset]
        draw.rectangle(
            [frame[0] - 1, frame[1] - 1, frame[2] + 1, frame[3] + 1], outline="black", width=width + 2
        )
        draw.rectangle(frame, outline=colour, width=width)
        tx, ty = _label_place(draw, img.size, font, label, frame, width, placed)
        bbox = draw.textbbox((tx, ty), label, font=font)
        placed.append((bbox[0] - 2, bbox[1] - 1, bbox[2] + 2, bbox[3] + 1))
        draw.rectangle(placed[-1], fill=colour)
        draw.text((tx, ty), label, fill=_ink(colour), font=font)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    img.save(out)
    return out


def _label_place(
    draw: ImageDraw.ImageDraw,
    size: tuple[int, int],
    font: Any,
    label: str,
    frame: Sequence[float],
    width: int,
    placed: Sequence[tuple[float, ...]],
) -> tuple[float, float]:
    """Where a box's label goes: inside its top-left corner, else inside its bottom-left corner, else
    the first place below the top-left corner, a line at a time, that covers no ``placed`` band (the
    top-left corner when none is free); always on the photo."""
    left, top, right, bottom = draw.textbbox((0, 0), label, font=font)
    w, h = right - left, bottom - top
    tx = max(0, min(frame[0] + width + 1, size[0] - w - 3))
    first = frame[1] + width + 1
    tries = [first, frame[3] - width - 1 - bottom]
    tries += [first + (h + 4) * n for n in range(1, max(1, int(size[1] // (h + 4))))]
    for ty in tries:
        ty = max(0, min(ty, size[1] - bottom - 2))
        band = (tx - 2, ty + top - 1, tx + w + 2, ty + bottom + 1)
        if not any(_overlap(band, other) for other in placed):
            return tx, ty
    return tx, max(0, min(first, size[1] - bottom - 2))


def _overlap(a: Sequence[float], b: Sequence[float]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _ink(colour: str) -> str:
    """Black or white text, whichever reads on a band of ``colour`` (``#rrggbb``; sRGB luma, Rec. 601)."""
    r, g, b = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
    return "black" if 0.299 * r + 0.587 * g + 0.114 * b > 150 else "white"


def draw_regions(
    image: str | os.PathLike[str] | Image.Image, result: dict[str, Any], out: str | os.PathLike[str]
) -> Path:
    """Fig. 7: the top regions of :func:`describe_regions` with their snippets, on the full-size photo."""
    return draw_boxes(image, [(r["box"], r["snippet"]) for r in result["regions"]], out)


@torch.no_grad()
def regions_for_snippet(
    aligner: Aligner,
    snippet: str,
    features: np.ndarray,
    boxes: np.ndarray,
    image_ids: Sequence[str],
    top: int = 5,
    whole_image: bool = False,
    chunk: int = 500,
) -> list[dict[str, Any]]:
    """Fig. 9: the ``top`` images whose best region scores highest with ``snippet``, as ``{image_id,
    region, box (fractions), score}``; the score of region i is ``sum_t v_i . s_t`` over the snippet's
    words. ``features [n, R, D]`` and ``boxes [n, R, 4]`` are the aligner's regions of ``image_ids``;
    region 0 (the whole image) is left out unless ``whole_image``."""
    if len(features) != len(image_ids):
        raise VsekitError(f"{len(features)} region rows for {len(image_ids)} image ids")
    words = aligner.word_vectors([snippet])
    scores = []
    for k in range(0, len(features), chunk):
        vectors = aligner.region_vectors(features[k : k + chunk])
        scores.append(word_region_dots(vectors, words.vectors).sum(dim=-1).cpu().numpy())  # [n, R]
    table = np.concatenate(scores)
    first = 0 if whole_image else 1
    best = table[:, first:].argmax(axis=1) + first
    values = table[np.arange(len(table)), best]
    order = np.argsort(-values, kind="stable")[:top]
    return [
        {
            "image_id": image_ids[k],
            "region": int(best[k]),
            "box": [round(float(v), 4) for v in boxes[k, best[k]]],
            "score": round(float(values[k]), 4),
        }
        for k in order
    ]


def draw_snippet_gallery(
    query: str,
    hits: Sequence[dict[str, Any]],
    images: dict[str, Any],
    out: str | os.PathLike[str],
    tile: int = 140,
) -> Path:
    """The crops of ``hits`` (from :func:`regions_for_snippet`; ``images`` maps their ids to files) in a
    row of ``tile``-pixel-high tiles under the query text."""
    crops = []
    for hit in hits:
        img = _decode(images[hit["image_id"]])
        x0, y0, x1, y1 = scale_boxes([hit["box"]], img.size)[0]
        crop = img.crop((x0, y0, x1, y1))
        crops.append(crop.resize((max(1, round(crop.width * tile / max(crop.height, 1))), tile)))
    band = 24
    sheet = Image.new("RGB", (sum(c.width for c in crops) + 4 * (len(crops) + 1), tile + band + 4), "white")
    x = 4
    for crop in crops:
        sheet.paste(crop, (x, band))
        x += crop.width + 4
    ImageDraw.Draw(sheet).text((4, 4), f'"{query}"', fill="black", font=_font(16))
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    sheet.save(out, quality=85) if out.suffix.lower() in (".jpg", ".jpeg") else sheet.save(out)
    return out
