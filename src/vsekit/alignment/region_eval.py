"""A proxy evaluation of region captions (there is no region-annotated Flickr set; the paper's sec. 4.3
used 9,000 MSCOCO region snippets collected for it).

The references are the aligner's own MRF segments of held-out (dev) captions: each (image, region) that
received a segment is an item, its segments are the references, and a generated snippet is scored with
BLEU-1..4, ROUGE-L and CIDEr-D. The baseline is the paper's: the full-frame captioner fed the pixels of
each region's box (the crop of the original photo), which describes the crop as if it were a photo.
Both readers are scored on the same items against the same references. The proxy rewards agreeing with
the aligner, which is not the same as being right: it compares the two captioners, nothing more.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from PIL import Image

from vsekit.alignment.region_captions import RegionCaptioner
from vsekit.alignment.snippets import Snippet
from vsekit.captioning.generator import CaptionGenerator
from vsekit.data.corpus import Corpus
from vsekit.metrics.captions import score_captions
from vsekit.vision.features import _decode
from vsekit.vision.regions import Regions

__all__ = ["crop_predictions", "region_predictions", "score_region_captions", "snippet_references"]

Item = tuple[str, int]


def snippet_references(
    snippets: Sequence[Snippet], image_ids: Sequence[str] | None = None
) -> dict[Item, list[str]]:
    """The references: snippet texts by (image id, region), limited to ``image_ids`` when given."""
    keep = set(image_ids) if image_ids is not None else None
    refs: dict[Item, list[str]] = {}
    for s in snippets:
        if keep is None or s.image_id in keep:
            refs.setdefault((s.image_id, s.region), []).append(s.text)
    return refs


def region_predictions(
    captioner: RegionCaptioner,
    regions: Regions,
    image_ids: Sequence[str],
    items: Sequence[Item],
    beam_size: int = 3,
) -> dict[Item, str]:
    """The region captioner's snippet for each item (regions of ``image_ids``, in that order)."""
    row_of = {i: k for k, i in enumerate(image_ids)}
    by_image: dict[str, list[int]] = {}
    for image_id, region in items:
        by_image.setdefault(image_id, []).append(region)
    out: dict[Item, str] = {}
    for image_id, wanted in by_image.items():
        texts = captioner.describe(regions.features[row_of[image_id]], wanted, beam_size=beam_size)
        out.update({(image_id, r): t for r, t in zip(wanted, texts, strict=True)})
    return out


def crop_predictions(
    generator: CaptionGenerator,
    corpus: Corpus,
    regions: Regions,
    image_ids: Sequence[str],
    items: Sequence[Item],
    batch: int = 64,
) -> dict[Item, str]:
    """The baseline: ``generator`` (a full-frame captioner) describes the crop of each item's box."""
    row_of = {i: k for k, i in enumerate(image_ids)}
    out: dict[Item, str] = {}
    items = list(items)
    for start in range(0, len(items), batch):
        chunk = items[start : start + batch]
        crops: list[Image.Image] = []
        for image_id, region in chunk:
            img = _decode(corpus.images[image_id])
            x0, y0, x1, y1 = regions.boxes[row_of[image_id], region]
            w, h = img.size
            crops.append(img.crop((round(x0 * w), round(y0 * h), round(x1 * w), round(y1 * h))))
        texts = generator.describe(crops)
        out.update({item: caps[0] for item, caps in zip(chunk, texts, strict=True)})
    return out


def score_region_captions(predictions: dict[Item, str], references: dict[Item, list[str]]) -> dict[str, Any]:
    """BLEU-1..4, ROUGE-L, CIDEr-D (x100) of ``predictions`` against ``references``, and the mean length."""
    keys = [k for k in references if k in predictions]
    name = {k: f"{k[0]}#{k[1]}" for k in keys}
    scores = score_captions(
        {name[k]: predictions[k] for k in keys}, {name[k]: references[k] for k in keys}, meteor=False
    )
    words = [len(predictions[k].split()) for k in keys]
    return {
        **{k: (round(v, 2) if isinstance(v, float) else v) for k, v in scores.items()},
        "n_items": len(keys),
        "mean_words": round(sum(words) / max(len(words), 1), 2),
    }
