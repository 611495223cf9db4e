"""A trainable copy of the image CNN's head (issue 35, item 3: fine-tuning the top of the image CNN).

Both backbones end their convolutions with a head: a 1 x 1 conv from the last block's map (320 channels
for MobileNetV2 and EfficientNet-Lite0) to 1280, BatchNorm and ReLU6; the global average of its output is
the ``one-layer`` vector every joint model reads. A joint model over ``pre-head`` features (the last
block's cells, extracted and cached once per photo like any feature) holds the head as one affine map per
cell with the BatchNorm folded in, starts it from the ImageNet weights, so that its output *is* the
one-layer vector, and trains it with W_I:

    cells c_1..c_M [320]  --A c_m + b-->  --ReLU6-->  --mean over m-->  q [1280]  --W_I-->  x

VSE++ (Faghri et al. 2018) fine-tunes the whole CNN (its "FT" models); training the last layer only
keeps every other activation a cache, which is what makes it affordable on a CPU (about 20 million
multiply-adds a photo, forward and backward). The concept route's ImageNet classifier keeps reading the
original head (:func:`vsekit.retrieval.concepts.photo_classifier`), so a tuned head changes no class
probability.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["CNNHead"]


class CNNHead(nn.Module):
    """``relu6(A c_m + b)`` averaged over the ``cells`` cells of a ``pre-head`` row ``[n, cells * in_dim]``
    (cells row-major, channels last): ``[n, out_dim]``, the CNN's pooled vector when A, b are its head's."""

    def __init__(self, cells: int, in_dim: int, out_dim: int) -> None:
        super().__init__()
        self.cells, self.in_dim, self.out_dim = int(cells), int(in_dim), int(out_dim)
        self.proj = nn.Linear(self.in_dim, self.out_dim)

    @torch.no_grad()
    def load_affine(self, weight: torch.Tensor, bias: torch.Tensor) -> CNNHead:
        """Set A, b (e.g. the ImageNet head of :func:`vsekit.vision.backbones.head_affine`); returns self."""
        if tuple(weight.shape) != (self.out_dim, self.in_dim) or tuple(bias.shape) != (self.out_dim,):
            raise ValueError(
                f"a head of {self.in_dim} -> {self.out_dim} channels cannot take weights of shape "
                f"{tuple(weight.shape)} and bias {tuple(bias.shape)}"
            )
        self.proj.weight.copy_(weight)
        self.proj.bias.copy_(bias)
        return self

    def forward(self, rows: torch.Tensor) -> torch.Tensor:
        cells = rows.to(self.proj.weight.dtype).reshape(rows.shape[0], self.cells, self.in_dim)
        return torch.clamp(self.proj(cells), 0.0, 6.0).mean(dim=1)
