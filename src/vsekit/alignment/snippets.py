"""Region snippets (Karpathy & Fei-Fei 2015, sec. 3.1.4 -> 3.2): (image region, text segment) pairs.

Every caption of a split is aligned to its own image's regions: the unary terms ``v_i . s_t`` (Eq. 11)
of the aligner, the chain MRF of Eq. 10-12 with bonus ``beta``, solved exactly (:func:`mrf_align`); each
run of words on one region is a segment. The segments of at least ``min_words`` words, with the region
they sit on, are the training data of the region captioner (sec. 3.2: "we treat these correspondences
as training data for a second, multimodal Recurrent Neural Network").

:func:`collect_snippets` runs over a corpus split with a progress bar and writes one JSON line per image
to a file; an interrupted run resumes from the images already written (the file's first line records
the aligner's fingerprint, beta, the split and ``min_words``, so a file made otherwise is not mixed in).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from vsekit.alignment.model import Aligner
from vsekit.alignment.mrf import mrf_align, segments
from vsekit.alignment.score import word_region_dots
from vsekit.data.corpus import Corpus
from vsekit.data.vocab import tokenize
from vsekit.errors import ConfigMismatchError, VsekitError
from vsekit.vision.regions import Regions

__all__ = ["DEFAULT_SNIPPET_BETA", "Snippet", "collect_snippets", "read_snippets", "snippets_from_scores"]

logger = logging.getLogger(__name__)

#: The paper gives no value for beta (Eq. 12), only its two ends (0: single words; large: the whole
#: sentence). With our aligners (minilm-grid, brnn-grid) beta 0.2 gives segments of 2.3-2.4 words on
#: average, the length of the paper's human region snippets (2.3 words, sec. 4.3), many of them lone
#: articles; 0.3 gives 3.1 words (4.2 among segments of >= 2 words) on 100 dev photos.
DEFAULT_SNIPPET_BETA = 0.3


@dataclass(frozen=True)
class Snippet:
    """One aligned segment: words ``start:end`` of caption ``caption`` of ``image_id`` on ``region``."""

    image_id: str
    caption: int
    region: int
    start: int
    end: int
    text: str
    score: float  # mean v_i . s_t of its words on its region

    @classmethod
    def from_dict(cls, data: dict[str, Any], image_id: str) -> Snippet:
        return cls(image_id=image_id, **data)


def snippets_from_scores(
    words: Sequence[str], dots: np.ndarray, beta: float, min_words: int = 1
) -> list[tuple[int, int, int, str, float]]:
    """``(start, end, region, text, mean score)`` of the MRF segments (Eq. 10-12) of one sentence whose
    word-region scores are ``dots [n_words, n_regions]``, keeping segments of at least ``min_words``."""
    dots = np.asarray(dots, dtype=np.float64)
    if dots.shape[0] != len(words):
        raise VsekitError(f"{len(words)} words but word-region scores for {dots.shape[0]}")
    path, _ = mrf_align(dots, beta)
    return [
        (a, b, r, " ".join(words[a:b]), float(dots[a:b, r].mean()))
        for a, b, r in segments(path)
        if b - a >= min_words
    ]


def _header(aligner: Aligner, split: str, beta: float, min_words: int) -> dict[str, Any]:
    if aligner.path is not None and Path(aligner.path).is_file():
        digest = hashlib.sha256(Path(aligner.path).read_bytes()).hexdigest()[:16]
    else:
        digest = "in-memory"
    return {"snippets": 1, "aligner": digest, "split": split, "beta": beta, "min_words": min_words}


def _read_file(path: Path, header: dict[str, Any]) -> dict[str, list[Snippet]]:
    """Images already done in ``path`` (a torn last line is dropped); another header is an error."""
    done: dict[str, list[Snippet]] = {}
    with path.open(encoding="utf-8") as f:
        lines = f.read().splitlines()
    if not lines:
        return done
    try:
        first = json.loads(lines[0])
    except json.JSONDecodeError:
        raise VsekitError(f"{path}: not a snippet file (its first line is not JSON)") from None
    if first != header:
        raise ConfigMismatchError(
            f"{path}: made with other settings ({first}); now {header}: use another file or delete it"
        )
    for line in lines[1:]:
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            break  # a write cut short: that image is done again
        done[row["image_id"]] = [Snippet.from_dict(s, row["image_id"]) for s in row["snippets"]]
    return done


def read_snippets(path: str | os.PathLike[str]) -> list[Snippet]:
    """All snippets of a file written by :func:`collect_snippets`, in image order."""
    path = Path(path)
    if not path.is_file():
        raise VsekitError(f"{path}: no such snippet file")
    with path.open(encoding="utf-8") as f:
        first = f.readline()
    try:
        header = json.loads(first)
    except json.JSONDecodeError:
        raise VsekitError(f"{path}: not a snippet file (its first line is not JSON)") from None
    return [s for group in _read_file(path, header).values() for s in group]


@torch.no_grad()
def _image_snippets(
    aligner: Aligner,
    features: np.ndarray,
    captions: list[str],
    image_id: str,
    beta: float,
    min_words: int,
) -> list[Snippet]:
    """The snippets of one image's captions (region features ``[R, D]``)."""
    kept = [(k, c) for k, c in enumerate(captions) if tokenize(c)]
    if not kept:
        return []
    regions = aligner.region_vectors(features[None])
    packed = aligner.word_vectors([c for _, c in kept])
    dots = word_region_dots(regions, packed.vectors)[0].T.cpu().numpy()  # [all words, R]
    out: list[Snippet] = []
    offset = 0
    for (k, caption), n in zip(kept, packed.lengths.tolist(), strict=True):
        words = tokenize(caption)
        for a, b, r, text, score in snippets_from_scores(words, dots[offset : offset + n], beta, min_words):
            out.append(Snippet(image_id, k, r, a, b, text, round(score, 4)))
        offset += n
    return out


def collect_snippets(
    aligner: Aligner,
    corpus: Corpus,
    split: str,
    out: str | os.PathLike[str],
    beta: float = DEFAULT_SNIPPET_BETA,
    min_words: int = 2,
    regions: Regions | None = None,
    progress: bool = True,
    **region_kwargs: Any,
) -> list[Snippet]:
    """Align every caption of ``split`` to its image's regions and write the snippets to ``out`` (JSON
    lines, resumable). ``regions`` (the split's captioned images, in order) skips the region extraction;
    otherwise the aligner's own regions come through the shared feature cache."""
    if min_words < 1:
        raise VsekitError(f"min_words must be >= 1, got {min_words}")
    by_image = {i: caps for i, caps in corpus.split(split).captions_by_image().items() if caps}
    ids = list(by_image)
    if not ids:
        raise VsekitError(f"{corpus.root}: split '{split}' has no captioned images")
    out = Path(out)
    header = _header(aligner, split, beta, min_words)
    done = _read_file(out, header) if out.is_file() else {}
    if regions is None:
        regions = aligner.regions(corpus, image_ids=ids, progress=progress, **region_kwargs)
    if len(regions.features) != len(ids):
        raise VsekitError(f"{len(regions.features)} region rows for {len(ids)} images of split '{split}'")
    _rewrite(out, header, done)
    todo = [(row, i) for row, i in enumerate(ids) if i not in done]
    if done:
        logger.info("%s: %d of %d images already aligned; resuming", out, len(done), len(ids))
    with out.open("a", encoding="utf-8") as f:
        for row, image_id in tqdm(todo, desc=f"snippets ({split})", disable=not progress, unit="img"):
            found = _image_snippets(
                aligner, regions.features[row], by_image[image_id], image_id, beta, min_words
            )
            f.write(json.dumps({"image_id": image_id, "snippets": [_row(s) for s in found]}) + "\n")
            f.flush()
            done[image_id] = found
    return [s for i in ids for s in done[i]]


def _row(snippet: Snippet) -> dict[str, Any]:
    data = asdict(snippet)
    data.pop("image_id")
    return data


def _rewrite(path: Path, header: dict[str, Any], done: dict[str, list[Snippet]]) -> None:
    """The file with its header and only whole lines (drops a torn last line before appending)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        f.write(json.dumps(header) + "\n")
        for image_id, found in done.items():
            f.write(json.dumps({"image_id": image_id, "snippets": [_row(s) for s in found]}) + "\n")
    os.replace(tmp, path)
