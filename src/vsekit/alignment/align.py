"""One image and one sentence: each word's best region, the MRF segments (Eq. 10-12), and a picture (Fig. 5).

:func:`align_sentence` gives a JSON-able dict; :func:`draw_alignment` draws the regions that received a
segment, each in its own colour and labelled with its words, on the full-size photo.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from PIL import Image

from vsekit.alignment.describe import CONCEPT_COLOUR, draw_boxes, scale_boxes
from vsekit.alignment.model import Aligner
from vsekit.alignment.mrf import mrf_align, segments
from vsekit.vision.features import _decode

__all__ = ["DEFAULT_BETA", "align_sentence", "draw_alignment"]

#: The MRF's bonus for neighbouring words on the same region; the paper tunes it (its range is not given).
DEFAULT_BETA = 1.0


def align_sentence(
    aligner: Aligner, image: str | os.PathLike[str] | Image.Image, sentence: str, beta: float = DEFAULT_BETA
) -> dict[str, Any]:
    """``{"image", "sentence", "beta", "boxes", "words": [{word, region, score}], "segments": [{text,
    region, start, end, score}]}``; boxes in pixels ``[x0, y0, x1, y1]``, region 0 is the whole image."""
    img = _decode(image)
    regions = aligner.regions([img], cache=False, progress=False)
    words, dots = aligner.word_region_scores(regions.features[0], sentence)  # [n_words, R]
    path, _ = mrf_align(dots, beta)
    boxes = scale_boxes(regions.boxes[0], img.size)  # fractions of the squashed input = of the photo
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
) -> Path:
    """The full-size photo with each segment's region boxed in a colour and labelled with its words; with
    ``result["concept"]`` (``{"label", "box"}``, :meth:`vsekit.Index.explain`), that box too, in
    :data:`CONCEPT_COLOUR`, labelled "<class> · concept"."""
    by_region: dict[int, list[str]] = {}
    for seg in result["segments"]:
        by_region.setdefault(seg["region"], []).append(seg["text"])
    labelled = [(result["boxes"][region], " | ".join(texts)) for region, texts in sorted(by_region.items())]
    colours: list[str | None] = [None] * len(labelled)
    if result.get("concept"):
        labelled.append((result["concept"]["box"], f"{result['concept']['label']} \u00b7 concept"))
        colours.append(CONCEPT_COLOUR)
    return draw_boxes(image, labelled, out, colours)
