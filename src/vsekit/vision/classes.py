"""What the shipped CNNs already recognise: their ImageNet-1k classifier, its class names and probabilities.

Both backbones end in a linear 1,000-way ImageNet classifier over the pooled features that the joint
models read (``one-layer`` features *are* the classifier's input), so a photo's class probabilities cost one
small matrix product on features the index computes anyway. The class names are the WordNet 3.0 lemmas and
glosses of the 1,000 synsets (``imagenet_classes.tsv``, written by ``scripts/imagenet_classes.py`` from the
data files of the PyPI package timm; licences in docs/concepts.md). A photo keeps only its top ``T`` classes
(sparse): what the concept route (:mod:`vsekit.retrieval.concepts`) needs, Norouzi et al. 2014 (ConSE).
"""

from __future__ import annotations

import csv
import functools
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING

import numpy as np

from vsekit.errors import VsekitError

if TYPE_CHECKING:  # torch loads with a classifier: the class table and top classes need none
    import torch

__all__ = ["TOP_CLASSES", "ClassTable", "Classifier", "class_table", "load_classifier", "top_classes"]

#: How many classes a photo keeps (ConSE's T): the softmax of a 1,000-way ImageNet classifier puts almost
#: all its mass on a handful of classes; ten keep the runners-up of an unusual photo.
TOP_CLASSES = 10


@dataclass(frozen=True)
class ClassTable:
    """The 1,000 ImageNet-1k classes in the classifier's output order."""

    synsets: tuple[str, ...]
    lemmas: tuple[tuple[str, ...], ...]  # WordNet's lemmas of each synset, most common first
    glosses: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.synsets)

    def name(self, index: int) -> str:
        """A class's everyday name (its first lemma): "tabby" for n02123045."""
        return self.lemmas[index][0]


@functools.cache
def class_table() -> ClassTable:
    """The shipped table of ImageNet-1k class names (read once per process)."""
    text = resources.files("vsekit.vision").joinpath("imagenet_classes.tsv").read_text(encoding="utf-8")
    rows = list(csv.DictReader(text.splitlines(), delimiter="\t", quoting=csv.QUOTE_NONE))
    if [int(r["index"]) for r in rows] != list(range(1000)):
        raise VsekitError("imagenet_classes.tsv: expected the 1,000 classes in order 0..999")
    return ClassTable(
        synsets=tuple(r["synset"] for r in rows),
        lemmas=tuple(tuple(x.strip() for x in r["lemmas"].split(",") if x.strip()) for r in rows),
        glosses=tuple(r["gloss"] for r in rows),
    )


class Classifier:
    """A backbone's ImageNet classifier head (the Linear layer after pooling), as NumPy arrays.

    With ``head`` (the CNN's 1 x 1 head conv as ``(A [D, C], b [D])``, BatchNorm folded in) it reads
    ``pre-head`` rows, the last block's cells ``[n, cells * C]``, and pools them through that head first
    (ReLU6, then the mean over the cells): the same probabilities as from the ``one-layer`` vector."""

    def __init__(
        self,
        backbone: str,
        weight: np.ndarray,
        bias: np.ndarray,
        head: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> None:
        self.backbone = backbone
        self.weight = np.ascontiguousarray(weight, dtype=np.float32)  # [1000, D]
        self.bias = np.asarray(bias, dtype=np.float32)  # [1000]
        # the CNN's head (A [D, C], b [D]) when the classifier reads pre-head rows
        self.head = (np.asarray(head[0], np.float32), np.asarray(head[1], np.float32)) if head else None

    @property
    def dim(self) -> int:
        """The width of the pooled vector the Linear layer reads (D)."""
        return int(self.weight.shape[1])

    def _pooled(self, features: np.ndarray) -> np.ndarray:
        x = np.asarray(features, dtype=np.float32)
        width = self.dim if self.head is None else self.head[0].shape[1]
        if x.ndim != 2 or x.shape[1] % width or (self.head is None and x.shape[1] != width):
            what = f"[n, {width}] features" if self.head is None else f"[n, cells * {width}] pre-head rows"
            raise VsekitError(f"{self.backbone} classifier reads {what}, got {x.shape}")
        if self.head is None:
            return x
        weight, bias = self.head
        cells = x.reshape(len(x), -1, width)
        return np.clip(cells @ weight.T + bias, 0.0, 6.0).mean(axis=1)

    def probabilities(self, features: np.ndarray) -> np.ndarray:
        """Softmax class probabilities ``[n, 1000]`` of pooled features ``[n, D]`` (or of pre-head rows,
        with ``head``)."""
        pooled = self._pooled(features)
        logits = pooled @ self.weight.T + self.bias
        logits -= logits.max(axis=1, keepdims=True)
        e = np.exp(logits)
        return e / e.sum(axis=1, keepdims=True)


@functools.cache
def load_classifier(backbone: str, pre_head: bool = False) -> Classifier:
    """The ImageNet classifier of ``backbone`` (its installed weights), cached per process; with
    ``pre_head`` it reads the last block's cells through the CNN's own head (see :class:`Classifier`)."""
    from vsekit.vision.backbones import head_affine, load_backbone

    model = load_backbone(backbone)
    linear = _last_linear(model)
    weight, bias = head_affine(model)
    head = (weight.numpy(), bias.numpy()) if pre_head else None
    return Classifier(backbone, linear.weight.detach().numpy(), linear.bias.detach().numpy(), head)


def _last_linear(model: torch.nn.Module) -> torch.nn.Linear:
    """The classifier Linear of a backbone (``_fc`` of EfficientNet-Lite, ``classifier.1`` of MobileNetV2)."""
    import torch

    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    if not linears or linears[-1].out_features != 1000:
        raise VsekitError(f"{type(model).__name__} has no 1000-way ImageNet classifier")
    return linears[-1]


def top_classes(probabilities: np.ndarray, top: int = TOP_CLASSES) -> tuple[np.ndarray, np.ndarray]:
    """The ``top`` most probable classes of each row, best first: ``(ids [n, top] uint16, probs float32)``."""
    p = np.asarray(probabilities, dtype=np.float32)
    top = min(top, p.shape[1])
    part = np.argpartition(-p, top - 1, axis=1)[:, :top]
    order = np.argsort(-np.take_along_axis(p, part, axis=1), axis=1, kind="stable")
    ids = np.take_along_axis(part, order, axis=1)
    return ids.astype(np.uint16), np.take_along_axis(p, ids, axis=1)
