"""Caption a corpus split and score it against the human captions (BLEU-1..4, METEOR, ROUGE-L, CIDEr-D).

The counterpart of :mod:`vsekit.embedding.evaluate` for generation: every captioned image of the split
is described, the best caption of each is scored over the whole split at once (CIDEr's idf depends on
the reference set), and the share of captions copied verbatim from the training set is reported.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tqdm.auto import tqdm

from vsekit.captioning.generator import CaptionGenerator
from vsekit.data.corpus import Corpus
from vsekit.data.vocab import tokenize
from vsekit.errors import VsekitError
from vsekit.metrics.captions import require_caption_metrics, score_captions

__all__ = ["SplitCaptions", "caption_split"]


@dataclass
class SplitCaptions:
    """The captions of one split and their scores (``result`` is what ``--json`` writes)."""

    image_ids: list[str]
    generated: list[list[str]]  # n-best per image, best first
    references: dict[str, list[str]]
    result: dict[str, Any]

    @property
    def best(self) -> dict[str, str]:
        return {i: caps[0] for i, caps in zip(self.image_ids, self.generated, strict=True)}


def caption_split(
    generator: CaptionGenerator,
    corpus: Corpus,
    split: str,
    n: int = 1,
    skip_bad_images: bool = False,
    **feature_kwargs: Any,
) -> SplitCaptions:
    """Describe every captioned image of ``split`` with ``generator`` and score the best captions.

    ``skip_bad_images`` leaves unreadable photos out (each reported once) instead of stopping."""
    require_caption_metrics()  # before minutes of captioning, not after them
    references = {i: caps for i, caps in corpus.split(split).captions_by_image().items() if caps}
    ids = list(references)
    if skip_bad_images and ids:
        ids = generator.readable_ids(corpus, ids, **feature_kwargs)
        references = {i: references[i] for i in ids}
    if not ids:
        raise VsekitError(f"{corpus.root}: split '{split}' has no captioned images")
    progress = bool(feature_kwargs.get("progress", True))
    t0 = time.perf_counter()
    generated = generator.describe_corpus(corpus, ids, n, **feature_kwargs)
    seconds = time.perf_counter() - t0
    best = {i: caps[0] for i, caps in zip(ids, generated, strict=True)}
    decode = generator.decode
    with _step(f"score {len(ids)} captions (BLEU, METEOR, ROUGE-L, CIDEr-D)", progress):
        scores = score_captions(best, references)
    result = {
        **scores,
        "n_images": len(ids),
        "method": generator.method,
        "backbone": generator.image["backbone"],
        "features": generator.image["kind"],
        "split": split,
        "decoding": decode.decoding if generator.method == "mrnn" else generator.method,
        "beam": decode.beam_size if generator.method == "mrnn" and decode.decoding == "beam" else None,
        "rerank": generator.rerank.to_dict() if generator.rerank is not None else None,
        "in_training_set": _share_in_training_set(corpus, best.values()),
        "captions_per_s": round(len(ids) / max(seconds, 1e-9), 1),
    }
    return SplitCaptions(ids, generated, references, result)


def _share_in_training_set(corpus: Corpus, captions: Any) -> float | None:
    """Percent of ``captions`` that occur verbatim (after tokenising) among the training captions."""
    if "train" not in corpus.splits:
        return None
    seen = {" ".join(tokenize(c.text)) for c in corpus.split("train").captions}
    captions = list(captions)
    copied = sum(" ".join(tokenize(p)) in seen for p in captions)
    return round(100 * copied / len(captions), 1)


@contextlib.contextmanager
def _step(description: str, progress: bool) -> Iterator[None]:
    """A one-step bar around a long call that reports nothing itself (decoding a split, the Java
    metrics): the user sees what runs and for how long, and it ends marked done."""
    bar = tqdm(total=1, desc=description, disable=not progress, bar_format="{desc}: {elapsed}{postfix}")
    try:
        yield
        bar.set_postfix_str("done")
        bar.update(1)
    finally:
        bar.close()
