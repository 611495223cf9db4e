"""Fusion of the joint embedding and the aligner (issue 10, item 8): global cosine and S_kl in one score.

The joint model's cosine sees the whole image and the whole sentence; S_kl (Eq. 8) sums, over the words,
each word's best region. They rank differently, and a weighted sum of the two ranks Flickr8K dev better
than either alone. Both are put on one scale with fixed statistics (the mean and standard deviation of each
score over the image x caption pairs they were measured on), so the fused score of a pair does not depend
on which other candidates are ranked with it:

    F(k, l) = (cos(k, l) - mu_cos) / sd_cos + w * (S_kl - mu_S) / sd_S

The weight and the statistics are data, in a small JSON file (format ``vsekit.fusion``) beside the models
it names: the shipped one is ``vse+aligner`` (``pretrained/fusion-vse-aligner.json``), written by
``python bench/bench_alignment.py --fuse --write-fusion``, which chooses ``w`` on one half of dev.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

import numpy as np
import torch

from vsekit.alignment.model import Aligner
from vsekit.alignment.trainer import evaluate_scores
from vsekit.data.corpus import Corpus
from vsekit.embedding.pipeline import ImageInput, VSEModel
from vsekit.errors import VsekitError
from vsekit.fileio import fingerprint_matches
from vsekit.metrics.ranking import positives_from_ids, ranking_metrics
from vsekit.resources import PACKAGE_DIR, PRETRAINED

__all__ = [
    "FUSION_FORMAT",
    "FUSION_NAME",
    "FusedModel",
    "FusionSpec",
    "evaluate_fused",
    "fusion_path",
    "is_fusion",
]

FUSION_FORMAT = "vsekit.fusion"
#: The shipped fusion's name (``--model vse+aligner``) and its file under ``pretrained/``.
FUSION_NAME = "vse+aligner"
FUSION_FILE = "fusion-vse-aligner.json"
_NUMBERS = ("weight", "cosine_mean", "cosine_std", "skl_mean", "skl_std")


@dataclass(frozen=True)
class FusionSpec:
    """The weight and the score statistics of a fusion, and the two models it combines.

    ``joint`` and ``aligner`` are shipped names (``vse``, ``aligner``) or paths relative to the spec file;
    ``*_sha256`` (optional) pin the files the statistics were measured with (their
    :func:`~vsekit.fileio.content_fingerprint`, or a file sha256 from before those); ``measured`` says how.
    """

    joint: str
    aligner: str
    weight: float
    cosine_mean: float
    cosine_std: float
    skl_mean: float
    skl_std: float
    joint_sha256: str | None = None
    aligner_sha256: str | None = None
    measured: dict[str, Any] = field(default_factory=dict)

    def fuse(self, cosine: np.ndarray, s_kl: np.ndarray) -> np.ndarray:
        """F = (cos - mu_cos) / sd_cos + w (S_kl - mu_S) / sd_S, element-wise (any shape, float64)."""
        cos = (np.asarray(cosine, dtype=np.float64) - self.cosine_mean) / self.cosine_std
        skl = (np.asarray(s_kl, dtype=np.float64) - self.skl_mean) / self.skl_std
        return cos + self.weight * skl

    def to_dict(self) -> dict[str, Any]:
        return {"format": FUSION_FORMAT, "format_version": 1, **asdict(self)}

    def save(self, path: str | os.PathLike[str]) -> Path:
        path = Path(path)
        path.write_text(json.dumps(self.to_dict(), indent=1) + "\n")
        return path

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> FusionSpec:
        """The spec in ``path``; a wrong format or a missing or bad field is a VsekitError naming both."""
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise VsekitError(f"{path}: not a readable fusion file ({exc})") from exc
        if not isinstance(data, dict) or data.get("format") != FUSION_FORMAT:
            raise VsekitError(f"{path}: field 'format' must be {FUSION_FORMAT!r}")
        for name in ("joint", "aligner", *_NUMBERS):
            if name not in data:
                raise VsekitError(f"{path}: field {name!r} is missing")
        for name in _NUMBERS:
            if not isinstance(data[name], int | float) or not np.isfinite(data[name]):
                raise VsekitError(f"{path}: field {name!r} must be a finite number (got {data[name]!r})")
        for name in ("cosine_std", "skl_std"):
            if data[name] <= 0:
                raise VsekitError(f"{path}: field {name!r} must be > 0 (got {data[name]!r})")
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})


def is_fusion(name_or_path: str | os.PathLike[str] | None) -> TypeGuard[str | os.PathLike[str]]:
    """Whether ``--model`` names a fusion: the shipped ``vse+aligner`` or a JSON file of format
    ``vsekit.fusion``."""
    if name_or_path is None:
        return False
    if str(name_or_path) == FUSION_NAME:
        return True
    path = Path(name_or_path)
    if path.suffix != ".json" or not path.is_file():
        return False
    try:
        return json.loads(path.read_text()).get("format") == FUSION_FORMAT
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        return False


def fusion_path(name_or_path: str | os.PathLike[str] = FUSION_NAME) -> Path:
    """The fusion file of a name (``vse+aligner``) or a path."""
    if str(name_or_path) == FUSION_NAME:
        path = PACKAGE_DIR / "pretrained" / FUSION_FILE
        if not path.is_file():
            raise VsekitError(
                f"no fusion named {FUSION_NAME!r} is shipped with this vsekit ({path} does not exist); "
                "`python bench/bench_alignment.py --fuse --write-fusion` writes it"
            )
        return path
    return Path(name_or_path)


def _member(name: str, spec_path: Path) -> str:
    return name if name in PRETRAINED else str((spec_path.parent / name).resolve())


class FusedModel:
    """The joint model and the aligner ranked together by :meth:`FusionSpec.fuse`."""

    def __init__(self, joint: VSEModel, aligner: Aligner, spec: FusionSpec, path: Path | None = None) -> None:
        self.joint, self.aligner, self.spec, self.path = joint, aligner, spec, path

    @classmethod
    def load(cls, name_or_path: str | os.PathLike[str] = FUSION_NAME, device: str = "auto") -> FusedModel:
        """The shipped ``vse+aligner`` or a fusion file; its two models are loaded by name or path. A
        model file other than the one the statistics were measured with is an error."""
        path = fusion_path(name_or_path)
        spec = FusionSpec.from_file(path)
        joint = VSEModel.load(_member(spec.joint, path), device=device)
        aligner = Aligner.load(_member(spec.aligner, path), device=device)
        for what, model_path, pinned in (
            ("joint", joint.path, spec.joint_sha256),
            ("aligner", aligner.path, spec.aligner_sha256),
        ):
            if pinned and model_path is not None and not fingerprint_matches(model_path, pinned):
                raise VsekitError(
                    f"{path}: field '{what}_sha256' does not match {model_path}: the fusion's statistics "
                    "were measured with another file (rerun bench/bench_alignment.py --fuse --write-fusion)"
                )
        return cls(joint, aligner, spec, path)

    def describe(self) -> str:
        return f"{FUSION_NAME if self.path is None else self.path.name} (w = {self.spec.weight:g})"

    def fuse(self, cosine: np.ndarray, s_kl: np.ndarray) -> np.ndarray:
        return self.spec.fuse(cosine, s_kl)

    def score_matrix(self, images: Sequence[ImageInput], texts: Sequence[str]) -> np.ndarray:
        """Fused scores ``[n_images, n_texts]`` of image files (or PIL images) against sentences."""
        images, texts = list(images), list(texts)
        cosine = self.joint.embed_images(images) @ self.joint.embed_texts(texts).T
        regions = self.aligner.regions(images, cache=False)
        return self.fuse(cosine, self.aligner.score_matrix(regions.features, texts))

    def corpus_scores(
        self, corpus: Corpus, image_ids: Sequence[str], texts: Sequence[str], **cache_kwargs: Any
    ) -> np.ndarray:
        """Fused scores ``[n_images, n_texts]`` of corpus images (both models' features through the
        cache; ``cache_kwargs``: ``cache_root``, ``progress``) against sentences."""
        ids, texts = list(image_ids), list(texts)
        images = self.joint.embed_features(self.joint.corpus_features(corpus, ids, **cache_kwargs))
        cosine = images @ self.joint.embed_texts(texts).T
        feats = self.aligner.regions(corpus, image_ids=ids, **cache_kwargs).features
        s_kl = evaluate_scores(self.aligner.model, torch.from_numpy(feats), texts)
        return self.fuse(cosine, s_kl)


def evaluate_fused(
    model: FusedModel, corpus: Corpus, split: str, protocol: str = "flickr", **cache_kwargs: Any
) -> dict[str, Any]:
    """R@1/5/10, median and mean rank of ranking ``split`` by the fused score; the keys of
    :func:`vsekit.embedding.evaluate.evaluate_model` (``features`` names both inputs)."""
    if protocol not in ("flickr", "coco5k"):
        raise VsekitError(f"protocol {protocol!r} is not available for a fusion (use flickr or coco5k)")
    by_image = corpus.split(split).captions_by_image()
    ids = [i for i, caps in by_image.items() if caps]
    if not ids:
        raise VsekitError(f"{corpus.root}: split '{split}' has no captioned images to evaluate")
    texts = [c for i in ids for c in by_image[i]]
    cap_ids = [i for i in ids for _ in by_image[i]]
    scores = model.corpus_scores(corpus, ids, texts, **cache_kwargs)
    result = ranking_metrics(scores, positives_from_ids(ids, cap_ids))
    spec = model.joint.image_spec
    result.update(protocol=protocol, n_images=len(ids), n_captions=len(texts), backbone=spec["backbone"])
    result["features"] = f"{spec['kind']} + {model.aligner.model.region_spec.layers}"
    result["fusion_weight"] = model.spec.weight
    return result
