"""MobileNetV2 (Sandler et al. 2018, "MobileNetV2: Inverted Residuals and Linear Bottlenecks").

A small, readable re-implementation whose module tree -- and therefore whose ``state_dict()`` keys -- is
identical to torchvision's ``mobilenet_v2``, so torchvision's official ImageNet weights
(``mobilenet_v2-b0353104.pth``) load with strict key checking and no renaming:

    features.0            stem: 3x3 conv, stride 2, BN, ReLU6            (keys features.0.0 / features.0.1)
    features.1 .. 17      inverted residual blocks                        (keys features.i.conv.*)
    features.18           head: 1x1 conv to 1280, BN, ReLU6
    classifier            Dropout(0.2), Linear(1280, 1000)                (keys classifier.1.*)

Besides ``forward`` (logits) it exposes ``forward_features(x, taps=True)`` for the Full-Network
Embedding: one spatially average-pooled vector per convolution (after its BatchNorm and, where present,
its ReLU6) plus the logits. The pooling happens as the forward pass goes, so full feature maps are
never retained.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["MobileNetV2"]

# Inverted-residual settings from Table 2 of Sandler et al. 2018 (width multiplier 1.0):
# t = expansion factor, c = output channels, n = repeats, s = stride of the first repeat.
INVERTED_RESIDUAL_SETTING: list[tuple[int, int, int, int]] = [
    # t, c, n, s
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
]
STEM_CHANNELS = 32
LAST_CHANNELS = 1280  # the 1x1 "head" conv before global pooling
NUM_CLASSES = 1000


def _tap(taps: list[torch.Tensor] | None, h: torch.Tensor) -> None:
    """Record the spatial average of activation ``h`` ([B, C, H, W] -> [B, C]) when taps are wanted."""
    if taps is not None:
        taps.append(h.mean(dim=(2, 3)))


class ConvBNReLU6(nn.Sequential):
    """Conv -> BatchNorm -> ReLU6; indices 0/1/2 match torchvision's ``Conv2dNormActivation`` keys."""

    def __init__(self, cin: int, cout: int, kernel_size: int = 3, stride: int = 1, groups: int = 1) -> None:
        super().__init__(
            nn.Conv2d(cin, cout, kernel_size, stride, (kernel_size - 1) // 2, groups=groups, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU6(inplace=True),
        )
        self.out_channels = cout


class InvertedResidual(nn.Module):
    """Inverted residual with linear bottleneck (Sandler et al. 2018, Fig. 3b / Table 1).

    1x1 expansion (ReLU6) -> 3x3 depthwise (ReLU6) -> 1x1 linear projection (BN, no activation: the
    paper argues a non-linearity in the narrow bottleneck destroys information), plus an identity
    shortcut when the shape is preserved. ``self.conv`` holds exactly torchvision's layer sequence.
    """

    def __init__(self, cin: int, cout: int, stride: int, expand_ratio: int) -> None:
        super().__init__()
        hidden = cin * expand_ratio
        self.use_res_connect = stride == 1 and cin == cout
        layers: list[nn.Module] = []
        if expand_ratio != 1:
            layers.append(ConvBNReLU6(cin, hidden, kernel_size=1))
        layers += [
            ConvBNReLU6(hidden, hidden, kernel_size=3, stride=stride, groups=hidden),  # depthwise
            nn.Conv2d(hidden, cout, 1, bias=False),  # linear projection
            nn.BatchNorm2d(cout),
        ]
        self.conv = nn.Sequential(*layers)
        self.out_channels = cout

    def tap_layout(self, prefix: str) -> list[tuple[str, int]]:
        """(name, channels) of this block's taps; the name is the conv's module path."""
        units = [
            (f"{prefix}.conv.{i}.0", u.out_channels)
            for i, u in enumerate(list(self.conv)[:-2])
            if isinstance(u, ConvBNReLU6)  # all of them: the expansion (if any) and the depthwise unit
        ]
        return units + [(f"{prefix}.conv.{len(self.conv) - 2}", self.out_channels)]

    def forward(self, x: torch.Tensor, taps: list[torch.Tensor] | None = None) -> torch.Tensor:
        h = x
        for unit in list(self.conv)[:-2]:  # the Conv-BN-ReLU6 units (expansion if any, then depthwise)
            h = unit(h)
            _tap(taps, h)
        h = self.conv[-1](self.conv[-2](h))  # projection conv + BN (linear bottleneck)
        _tap(taps, h)  # tapped after BN, before the residual addition
        return x + h if self.use_res_connect else h


class MobileNetV2(nn.Module):
    """MobileNetV2 1.0 for 1000-class ImageNet with torchvision-compatible parameter names."""

    name = "mobilenet_v2"
    pooled_dim = LAST_CHANNELS

    def __init__(self, num_classes: int = NUM_CLASSES, dropout: float = 0.2) -> None:
        super().__init__()
        layers: list[nn.Module] = [ConvBNReLU6(3, STEM_CHANNELS, kernel_size=3, stride=2)]
        cin = STEM_CHANNELS
        for t, c, n, s in INVERTED_RESIDUAL_SETTING:
            for i in range(n):
                layers.append(InvertedResidual(cin, c, stride=s if i == 0 else 1, expand_ratio=t))
                cin = c
        layers.append(ConvBNReLU6(cin, LAST_CHANNELS, kernel_size=1))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(p=dropout), nn.Linear(LAST_CHANNELS, num_classes))

        self._taps: list[tuple[str, int]] = []
        for i, m in enumerate(self.features):
            if isinstance(m, InvertedResidual):
                self._taps += m.tap_layout(f"features.{i}")
            else:
                assert isinstance(m, ConvBNReLU6)  # the stem and the head
                self._taps.append((f"features.{i}.0", m.out_channels))
        self._taps.append(("classifier.1", num_classes))
        self._init_weights()

    def _init_weights(self) -> None:
        # torchvision's initialisation; only matters if the model is used without pretrained weights.
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def conv_bn_pairs(self) -> list[tuple[str, str]]:
        """(conv, BatchNorm) module paths of every conv, for folding BN into the conv at inference."""
        pairs = []
        for conv_name, _ in self._taps[:-1]:  # every tap but the classifier is a conv followed by its BN
            parent, _, index = conv_name.rpartition(".")
            pairs.append((conv_name, f"{parent}.{int(index) + 1}"))
        return pairs

    def tap_names(self) -> list[str]:
        """Module paths of the tapped layers: every conv (in order), then the classifier Linear."""
        return [n for n, _ in self._taps]

    def tap_dims(self) -> list[int]:
        """Channel count of each tap, aligned with :meth:`tap_names`."""
        return [d for _, d in self._taps]

    def forward_features(
        self, x: torch.Tensor, taps: bool = False
    ) -> tuple[torch.Tensor, list[torch.Tensor] | None]:
        """Return ``(pooled [B, 1280], taps)``; ``taps`` is one ``[B, C_l]`` per tap when requested."""
        tap_list: list[torch.Tensor] | None = [] if taps else None
        h = x
        for m in self.features:
            if isinstance(m, InvertedResidual):
                h = m(h, tap_list)
            else:
                h = m(h)
                _tap(tap_list, h)
        pooled = h.mean(dim=(2, 3))  # global average pooling: the classifier input
        if tap_list is not None:
            tap_list.append(self.classifier(pooled))
        return pooled, tap_list

    def forward_map(self, x: torch.Tensor) -> torch.Tensor:
        """The last conv feature map ``[B, 1280, H/32, W/32]`` (its spatial mean is the pooled vector)."""
        return self.features(x)

    def forward_pre_head(self, x: torch.Tensor) -> torch.Tensor:
        """The last block's map ``[B, 320, H/32, W/32]``: the input of the head (1 x 1 conv, BN, ReLU6),
        which ``pre-head`` features keep so that a joint model can train the head."""
        return self.features[:-1](x)

    @property
    def pre_head_dim(self) -> int:
        """Channels of the last block's map (320)."""
        return int(self.head_layers()[0].in_channels)

    def head_layers(self) -> tuple[nn.Conv2d, nn.Module]:
        """The head's 1 x 1 conv and its BatchNorm (an Identity once folded); ReLU6 follows them."""
        head = self.features[-1]
        assert isinstance(head, ConvBNReLU6)
        conv, bn = head[0], head[1]
        assert isinstance(conv, nn.Conv2d)
        return conv, bn

    def classify(self, pooled: torch.Tensor) -> torch.Tensor:
        """ImageNet logits of pooled features ``[B, 1280]``."""
        return self.classifier(pooled)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """ImageNet logits ``[B, 1000]`` for a normalised ``[B, 3, H, W]`` batch."""
        pooled, _ = self.forward_features(x)
        return self.classifier(pooled)
