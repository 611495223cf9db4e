"""A trained joint embedding ready to use: images or sentences in, unit-norm vectors out.

:class:`VSEModel` bundles what :func:`~vsekit.embedding.model.load_model` returns (the network, the FNE
statistics, the file's metadata) with the image features the network reads, so a caller hands it photos
(paths or PIL images) or sentences and never thinks about backbones, feature kinds or caches. It is what
``vsekit.load_model()`` returns, and what ranking, the demo, search and the future server use.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vsekit.data.corpus import Corpus
from vsekit.device import resolve_device
from vsekit.embedding.evaluate import model_features
from vsekit.embedding.model import EnsembleEmbedding, JointEmbedding, load_model
from vsekit.resources import resolve_model_path
from vsekit.vision.features import features_for_model, readable_image_ids
from vsekit.vision.fne import FullNetworkEmbedding
from vsekit.vision.spec import FeatureSpec

__all__ = ["ImageInput", "VSEModel"]

logger = logging.getLogger(__name__)

#: What :meth:`VSEModel.embed_images` accepts per image: a file path or a decoded PIL image.
ImageInput = Any  # str | os.PathLike[str] | PIL.Image.Image


class VSEModel:
    """A joint image-sentence embedding with its feature pipeline (see the module docstring).

    Attributes:
        network: the :class:`JointEmbedding` or :class:`EnsembleEmbedding` (eval mode).
        fne: the Full-Network Embedding statistics for FNE models, else None.
        meta: the file's metadata (recipe, dev scores, config, dtype).
        path: the file it was loaded from (None when built in memory).
    """

    def __init__(
        self,
        network: JointEmbedding | EnsembleEmbedding,
        fne: FullNetworkEmbedding | None = None,
        meta: dict[str, Any] | None = None,
        path: Path | None = None,
    ) -> None:
        self.network = network.eval()
        self.fne = fne
        self.meta = dict(meta or {})
        self.path = path

    @classmethod
    def load(cls, name_or_path: str | os.PathLike[str] | None = None, device: str = "auto") -> VSEModel:
        """A shipped model by name (``"vse"``, the default) or any file ``vsekit train`` wrote."""
        path = resolve_model_path(name_or_path, "vse")
        network, fne, meta = load_model(path, device=resolve_device(device))
        logger.info("loaded joint model %s", path)
        return cls(network, fne, meta, path)

    # -- what the model is ---------------------------------------------------------------------------

    @property
    def config(self) -> dict[str, Any]:
        return self.network.config

    @property
    def image_spec(self) -> dict[str, Any]:
        """``{"backbone", "kind", "image_dim", ...}``: the image features the network reads."""
        return self.network.config["image"]

    @property
    def embed_dim(self) -> int:
        return int(self.network.embed_dim)

    @property
    def device(self) -> torch.device:
        return self.network.device

    def describe(self) -> str:
        spec = self.image_spec
        name = self.path.name if self.path is not None else "in-memory model"
        return (
            f"{name} ({spec['backbone']} {spec['kind']} features, {self.config['text_encoder']} text encoder)"
        )

    # -- features ------------------------------------------------------------------------------------

    def file_features(self, images: Sequence[ImageInput], progress: bool = False) -> np.ndarray:
        """The network's input features for image files or PIL images (no cache): the numbers the
        feature cache would hold for the same photos, so they match what the network was trained on."""
        return features_for_model(
            self.image_spec, list(images), self.fne, cache=False, device=str(self.device), progress=progress
        )

    def corpus_features(self, corpus: Corpus, image_ids: Sequence[str], **feature_kwargs: Any) -> np.ndarray:
        """The network's input features for images of a corpus, through the feature cache.

        ``feature_kwargs``: ``cache_root``, ``progress``, ``feature_fn`` (tests) and the like.
        """
        feature_kwargs.setdefault("device", str(self.device))
        return model_features(self.network, self.fne, corpus, list(image_ids), **feature_kwargs)

    def readable_ids(
        self, corpus: Corpus, image_ids: Sequence[str], **cache_kwargs: Any
    ) -> tuple[list[str], dict[str, str]]:
        """``(ids of images with features, {id: why} for unreadable ones)``: the cache is filled leaving
        bad images out, so a command asked to skip them loses only those (each reported once)."""
        spec = FeatureSpec.from_config(self.image_spec)
        cache_kwargs.setdefault("device", str(self.device))
        kept, failed = readable_image_ids(corpus, spec, list(image_ids), **cache_kwargs)
        return kept, failed

    # -- embeddings ----------------------------------------------------------------------------------

    def embed_features(self, features: np.ndarray | torch.Tensor) -> np.ndarray:
        """Unit-norm float32 embeddings ``[n, K]`` of precomputed image features."""
        return self.network.embed_images(torch.as_tensor(np.asarray(features))).numpy()

    def embed_images(self, images: Sequence[ImageInput]) -> np.ndarray:
        """Unit-norm float32 embeddings ``[n, K]`` of image files or PIL images (features computed here)."""
        images = list(images)
        if not images:
            return np.zeros((0, self.embed_dim), dtype=np.float32)
        return self.embed_features(self.file_features(images))

    def embed_texts(self, texts: Sequence[str], batch_size: int = 256, progress: bool = False) -> np.ndarray:
        """Unit-norm float32 embeddings ``[n, K]`` of sentences (batched, no gradient)."""
        if isinstance(texts, str):
            raise TypeError("embed_texts takes a list of sentences, not one string")
        # a long-lived model (``vsekit serve``) stays bounded: each text encoder's per-sentence cache is a
        # bounded LRU of its own (see vsekit.text.lru)
        return self.network.embed_texts(list(texts), batch_size=batch_size, progress=progress).numpy()
