"""Reranking a generator's n-best captions with the joint image-sentence embedding.

The m-RNN's beam returns its ``n`` most probable captions; the joint embedding knows how well each one
*matches the image*. We pick the candidate maximising

    log p(caption | image) / (words + 1) ** length_penalty  +  weight * cos(image, caption)

which is the translation-score idea of Kiros et al. 2014 (section 5.2: rerank generated candidates by
their cosine with the image in the joint space) applied to m-RNN hypotheses. ``weight`` and
``length_penalty`` are chosen on the dev split by :func:`tune_rerank` and stored with the captioner.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

from vsekit.captioning.decode import Caption
from vsekit.errors import VsekitError
from vsekit.fileio import content_fingerprint as file_fingerprint  # the joint model a reranker was tuned with

__all__ = ["RerankSettings", "choose", "rerank_order", "embedding_cosines", "file_fingerprint", "tune_rerank"]


@dataclass(frozen=True)
class RerankSettings:
    """How to rerank: beam width (= candidates per image), cosine weight, length penalty, joint model."""

    beam_size: int = 5
    weight: float = 0.0
    length_penalty: float = 0.0
    joint_model_sha256: str = ""  # the joint model the weights were tuned with

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RerankSettings:
        return cls(**{k: data[k] for k in ("beam_size", "weight", "length_penalty", "joint_model_sha256")})


def embedding_cosines(
    joint_model: Any, image_features: np.ndarray, texts: Sequence[Sequence[str]]
) -> list[list[float]]:
    """cos(image i, candidate j of image i) in the joint space, for every image's candidate list."""
    if len(texts) != len(image_features):
        raise VsekitError(f"{len(texts)} candidate lists for {len(image_features)} images")
    images = joint_model.embed_images(torch.as_tensor(np.asarray(image_features)))
    flat = [t for group in texts for t in group]
    sentences = joint_model.embed_texts(flat) if flat else torch.empty(0, images.shape[1])
    out, k = [], 0
    for i, group in enumerate(texts):
        out.append((sentences[k : k + len(group)] @ images[i]).tolist())
        k += len(group)
    return out


def rerank_order(
    captions: Sequence[Caption], cosines: Sequence[float], weight: float, length_penalty: float
) -> list[int]:
    """Indices of one image's candidates, best first, under the combined score (stable for ties)."""
    if not captions:
        raise VsekitError("an image has no candidate captions to rerank")
    scores = [c.normalized(length_penalty) + weight * x for c, x in zip(captions, cosines, strict=True)]
    return sorted(range(len(scores)), key=lambda j: -scores[j])


def choose(
    candidates: Sequence[Sequence[Caption]],
    cosines: Sequence[Sequence[float]],
    weight: float,
    length_penalty: float,
) -> list[int]:
    """Index of the best candidate per image under the combined score (the first wins ties)."""
    return [
        rerank_order(caps, cos, weight, length_penalty)[0]
        for caps, cos in zip(candidates, cosines, strict=True)
    ]


def tune_rerank(
    candidates: Sequence[Sequence[Caption]],
    texts: Sequence[Sequence[str]],
    cosines: Sequence[Sequence[float]],
    image_ids: Sequence[str],
    references: Mapping[str, Sequence[str]],
    score_fn: Callable[[dict[str, str], Mapping[str, Sequence[str]]], Mapping[str, float | None]],
    weights: Sequence[float] = (0, 1, 2, 5, 10, 20, 50),
    length_penalties: Sequence[float] = (0.0, 0.5, 1.0),
) -> tuple[float, float, list[dict[str, float]]]:
    """Grid search on dev: the (weight, length_penalty) with the best CIDEr-D, ties to BLEU-4.

    Returns ``(weight, length_penalty, grid)`` where ``grid`` lists every point's scores.
    """
    grid = []
    for penalty in length_penalties:
        for weight in weights:
            picks = choose(candidates, cosines, weight, penalty)
            predictions = {i: texts[k][p] for k, (i, p) in enumerate(zip(image_ids, picks, strict=True))}
            scores = score_fn(predictions, references)
            cider, bleu4 = scores["cider"], scores["bleu4"]
            assert cider is not None and bleu4 is not None  # only METEOR may be missing (no Java)
            grid.append({"weight": weight, "length_penalty": penalty, "cider": cider, "bleu4": bleu4})
    best = max(grid, key=lambda g: (round(g["cider"], 6), g["bleu4"]))
    return float(best["weight"]), float(best["length_penalty"]), grid
