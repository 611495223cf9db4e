"""Nearest-neighbour caption transfer: the baseline of Karpathy & Fei-Fei 2015, Table 2.

A query image gets a caption of the training image whose CNN features are most similar (cosine). Of
that image's captions we return its *consensus* caption, the one with the highest mean unigram F1
against the image's other captions, rather than an arbitrary first one (Devlin et al. 2015 pick
consensus captions the same way, with BLEU/CIDEr over k neighbours): it is the caption the other
annotators agree with most, which is what the metrics reward.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

import numpy as np
import torch

from vsekit.data.vocab import tokenize
from vsekit.errors import VsekitError

__all__ = ["NearestNeighbourCaptioner", "consensus_caption"]


def _unigram_f1(a: Sequence[str], b: Sequence[str]) -> float:
    overlap = sum((Counter(a) & Counter(b)).values())
    return 0.0 if overlap == 0 else 2 * overlap / (len(a) + len(b))


def consensus_caption(captions: Sequence[str]) -> str:
    """The caption with the highest mean unigram F1 against the others (the first wins ties)."""
    if not captions:
        raise VsekitError("an image without captions has no consensus caption")
    tokens = [tokenize(c) for c in captions]
    if len(captions) == 1:
        return captions[0]
    scores = [
        np.mean([_unigram_f1(tokens[i], tokens[j]) for j in range(len(tokens)) if j != i])
        for i in range(len(tokens))
    ]
    return captions[int(np.argmax(scores))]


class NearestNeighbourCaptioner:
    """fit(features of the training images, their captions) -> caption(query features)."""

    method = "nn"

    def fit(
        self, features: np.ndarray, image_ids: Sequence[str], captions_by_image: Mapping[str, Sequence[str]]
    ) -> NearestNeighbourCaptioner:
        feats = torch.as_tensor(np.asarray(features, dtype=np.float32))
        if feats.ndim != 2 or feats.shape[0] != len(image_ids):
            raise VsekitError(
                f"nearest-neighbour captioner: {tuple(feats.shape)} features for {len(image_ids)} images"
            )
        missing = [i for i in image_ids if not captions_by_image.get(i)]
        if missing:
            raise VsekitError(f"training images without captions: {', '.join(missing[:3])}")
        self.image_ids_ = list(image_ids)
        self.features_ = torch.nn.functional.normalize(feats, dim=1)
        self.captions_ = [consensus_caption(list(captions_by_image[i])) for i in self.image_ids_]
        return self

    def neighbours(self, features: np.ndarray | torch.Tensor, batch_size: int = 1024) -> list[int]:
        """Index of the most similar training image for each query (cosine of the CNN features)."""
        if not hasattr(self, "features_"):
            raise VsekitError("the nearest-neighbour captioner is not fitted")
        q = torch.nn.functional.normalize(torch.as_tensor(np.asarray(features, dtype=np.float32)), dim=1)
        if q.ndim != 2 or q.shape[1] != self.features_.shape[1]:
            raise VsekitError(f"query features {tuple(q.shape)}; fitted on {self.features_.shape[1]}-d ones")
        out: list[int] = []
        for start in range(0, q.shape[0], batch_size):
            out.extend((q[start : start + batch_size] @ self.features_.T).argmax(dim=1).tolist())
        return out

    def caption(self, features: np.ndarray | torch.Tensor) -> list[str]:
        return [self.captions_[i] for i in self.neighbours(features)]
