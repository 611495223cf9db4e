"""One image and one sentence: each word's best region, the MRF segments (Eq. 10-12), and a picture (Fig. 5).

:func:`align_sentence` gives a JSON-able dict; :func:`draw_alignment` draws the regions that received a
segment, each in its own colour and labelled with its words.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw

from vsekit.alignment.model import Aligner
from vsekit.alignment.mrf import mrf_align, segments
from vsekit.vision.features import _decode

__all__ = ["DEFAULT_BETA", "align_sentence", "draw_alignment"]

#: The MRF's bonus for neighbouring words on the same region; the paper tunes it (its range is not given).
DEFAULT_BETA = 1.0
_COLOURS = ["#e6194b", "#3cb44b", "#4363d8", "#f58231", "#911eb4", "#42d4f4", "#f032e6", "#bfef45"]


def align_sentence(
    aligner: Aligner, image: str | os.PathLike[str] | Image.Image, sentence: str, beta: float = DEFAULT_BETA
) -> dict[str, Any]:
    """``{"image", "sentence", "beta", "boxes", "words": [{word, region, score}], "segments": [{text,
    region, start, end, score}]}``; boxes in pixels ``[x0, y0, x1, y1]``, region 0 is the whole image."""
    img = _decode(image)
    regions = aligner.regions([img], cache=False, progress=False)
    words, dots = aligner.word_region_scores(regions.features[0], sentence)  # [n_words, R]
    path, _ = mrf_align(dots, beta)
    w, h = img.size
    boxes = [
        [round(float(x0 * w)), round(float(y0 * h)), round(float(x1 * w)), round(float(y1 * h))]
        for x0, y0, x1, y1 in regions.boxes[0]
    ]
    best = dots.argmax(axis=1)
    return {
        "image": str(image) if not isinstance(image, Image.Image) else None,
        "sentence": sentence,
        "beta": beta,
        "boxes": boxes,
        "words": [
            {"word": word, "region": int(r), "score": float(dots[t, r])}
            for t, (word, r) in enumerate(zip(words, best, strict=True))
        ],
        "segments": [
            {
                "text": " ".join(words[a:b]),
                "region": r,
                "start": a,
                "end": b,
                "score": float(dots[a:b, r].sum()),
            }
            for a, b, r in segments(path)
        ],
    }


def draw_alignment(
    image: str | os.PathLike[str] | Image.Image,
    result: dict[str, Any],
    out: str | os.PathLike[str],
    max_side: int = 640,
) -> Path:
    """The image (shrunk to ``max_side``) with each segment's region boxed in a colour and labelled."""
    img = _decode(image)
    scale = min(1.0, max_side / max(img.size))
    img = img.resize((round(img.width * scale), round(img.height * scale)))
    draw = ImageDraw.Draw(img)
    by_region: dict[int, list[str]] = {}
    for seg in result["segments"]:
        by_region.setdefault(seg["region"], []).append(seg["text"])
    for k, (region, texts) in enumerate(sorted(by_region.items())):
        colour = _COLOURS[k % len(_COLOURS)]
        x0, y0, x1, y1 = (v * scale for v in result["boxes"][region])
        inset = 2 * k  # regions may coincide (the whole image); keep every frame visible
        draw.rectangle([x0 + inset, y0 + inset, x1 - 1 - inset, y1 - 1 - inset], outline=colour, width=3)
        label = " | ".join(texts)
        tx, ty = x0 + inset + 3, y0 + inset + 3 + 12 * (k if region == 0 else 0)
        bbox = draw.textbbox((tx, ty), label)
        draw.rectangle([bbox[0] - 2, bbox[1] - 1, bbox[2] + 2, bbox[3] + 1], fill=colour)
        draw.text((tx, ty), label, fill="white")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    img.save(out)
    return out
