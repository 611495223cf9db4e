"""Where the CNN sees a class: class activation maps (Zhou et al. 2016, "Learning Deep Features for
Discriminative Localization", CAM) and the box they give.

Both backbones end in global average pooling and one linear ImageNet classifier, so the logit of class ``c``
is ``S_c = sum_k w_ck * F_k`` with ``F_k`` the mean over the grid of the last conv map ``f_k(x, y)``;
exchanging the sums gives the class activation map (Zhou et al. 2016, sec. 2)::

    M_c(x, y) = sum_k w_ck * f_k(x, y),        S_c = mean_{x,y} M_c(x, y) + b_c

The bias ``b_c`` is the same at every place and is left out. The box (sec. 3.1's localisation, with our
fraction): ``M_c`` is upsampled bilinearly to the network input, the places at or above
:data:`CAM_FRACTION` of its maximum are kept, and the box is the tight box around their largest 8-connected
component. (The paper's released code scales the map between its minimum and maximum first; for the class
a photo is matched by, the minimum is within a few percent of zero next to the maximum on the everyday
photos, so the two give nearly the same box; we follow the paper's text.)

Why half (the paper takes 20% for ImageNet localisation, whose boxes are scored by IoU >= 0.5 against large
boxes): under bilinear upsampling the value halfway between two grid cells' centres is the mean of the two,
so a cell that is hot against a cold (zero) neighbour stays at or above half its value exactly up to the
border between the cells. Half the maximum therefore gives a block of hot cells exactly its own pixels, with
no cell's worth of margin (32 input pixels, a seventh of the photo at 224); 20% adds most of a cell on every
side, which on the everyday photos makes most boxes cover most of the photo. Half boxes the most telling
part of a thing (a kitten's face and chest, a hammer's head) rather than all of it.

What the map sees: the whole upright photo, not the centre crop the index classified. The network is
convolutional, so the photo is resized to the classifier's shorter side (224) with its aspect ratio kept and
each side rounded to the network's stride (32, so the grid's cells tile the input exactly; the aspect
ratio moves by at most 16 pixels, and is capped at :data:`MAX_ASPECT`, beyond which the photo is squashed).
A concept at the edge that the centre crop cut off is found where it is; the box is returned as fractions of
the photo, which the caller scales to the photo's pixels exactly as the aligner's boxes are scaled.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from vsekit.device import resolve_device
from vsekit.vision.backbones import BACKBONES, load_backbone
from vsekit.vision.classes import load_classifier

__all__ = [
    "CAM_FRACTION",
    "MAX_ASPECT",
    "STRIDE",
    "ClassMaps",
    "FeatureMap",
    "cam_box",
    "cam_input_size",
    "class_activation_map",
]

logger = logging.getLogger(__name__)

#: The share of the map's maximum a place must reach to be in the box (module docstring).
CAM_FRACTION = 0.5
#: The output stride of both backbones' last conv map (five stride-2 stages).
STRIDE = 32
#: The longest side the map's input may have, in shorter sides (a panorama is squashed beyond it).
MAX_ASPECT = 4


def cam_input_size(size: tuple[int, int], short: int) -> tuple[int, int]:
    """``(width, height)`` the photo of ``size`` is resized to: the shorter side ``short``, the longer one
    keeping the aspect ratio (at most :data:`MAX_ASPECT` times ``short``), both rounded to :data:`STRIDE`."""
    width, height = size
    side = max(STRIDE, round(short / STRIDE) * STRIDE)
    longer = max(width, height) / max(1, min(width, height)) * side
    longer = min(max(STRIDE, round(longer / STRIDE) * STRIDE), MAX_ASPECT * side)
    return (longer, side) if width >= height else (side, longer)


def class_activation_map(values: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """``M_c(x, y) = sum_k w_ck f_k(x, y)`` (Zhou et al. 2016, sec. 2): ``[h, w]`` from the last conv map
    ``values [K, h, w]`` and the class's classifier row ``weight [K]``."""
    return np.tensordot(np.asarray(weight, dtype=np.float32), values, axes=(0, 0))


def cam_box(cam: np.ndarray, size: tuple[int, int], fraction: float = CAM_FRACTION) -> tuple[float, ...]:
    """The box of map ``cam [h, w]`` on an input of ``size`` (width, height; whole multiples of the grid):
    ``(x0, y0, x1, y1)`` as fractions of the input, around the largest 8-connected region at or above
    ``fraction`` of the map's maximum after bilinear upsampling (module docstring). A map with no
    positive place (no evidence for the class anywhere) gives the whole input."""
    import cv2  # opencv is a dependency; imported here, as most commands never need it

    width, height = size
    up = F.interpolate(
        torch.as_tensor(cam, dtype=torch.float32)[None, None], size=(height, width), mode="bilinear"
    )[0, 0].numpy()
    high = float(up.max())
    if not high > 0:
        return (0.0, 0.0, 1.0, 1.0)
    mask = (up >= fraction * high).astype(np.uint8)
    count, _, stats, _ = cv2.connectedComponentsWithStats(mask, connectivity=8)
    largest = 1 + int(np.argmax(stats[1:count, cv2.CC_STAT_AREA]))  # label 0 is the background
    x, y = int(stats[largest, cv2.CC_STAT_LEFT]), int(stats[largest, cv2.CC_STAT_TOP])
    w, h = int(stats[largest, cv2.CC_STAT_WIDTH]), int(stats[largest, cv2.CC_STAT_HEIGHT])
    return (x / width, y / height, (x + w) / width, (y + h) / height)


@dataclass(frozen=True)
class FeatureMap:
    """A photo's last conv map ``values [K, h, w]`` and the input ``size`` (width, height) it was run on."""

    values: np.ndarray
    size: tuple[int, int]


class ClassMaps:
    """Class activation maps of one backbone's ImageNet classes (module docstring): :meth:`feature_map` runs
    the CNN on a photo once; :meth:`box` locates any class on it."""

    def __init__(self, backbone: str, device: str | torch.device = "auto") -> None:
        self.backbone = backbone
        self.device = resolve_device(device)
        self.preprocessing = BACKBONES[backbone].preprocessing
        self.weight = load_classifier(backbone).weight  # [1000, K]
        self._model: torch.nn.Module | None = None
        self._lock = threading.Lock()

    def feature_map(self, image: Image.Image) -> FeatureMap:
        """The last conv map of the upright RGB ``image``, resized as the module docstring says."""
        size = cam_input_size(image.size, self.preprocessing.resize)
        pixels = np.asarray(image.convert("RGB").resize(size, Image.Resampling.BILINEAR), dtype=np.uint8)
        x = torch.from_numpy(np.ascontiguousarray(self.preprocessing.normalise(pixels).transpose(2, 0, 1)))
        with self._lock, torch.no_grad():  # one forward pass at a time
            if self._model is None:
                self._model = load_backbone(self.backbone, device=self.device)
            forward_map = self._model.forward_map  # both backbones have it (not part of nn.Module's type)
            values = forward_map(x[None].to(self.device))[0]  # type: ignore[operator]
        return FeatureMap(values.float().cpu().numpy(), size)

    def box(self, features: FeatureMap, class_id: int, fraction: float = CAM_FRACTION) -> tuple[float, ...]:
        """Where class ``class_id`` is on the photo of ``features``: :func:`cam_box` of its map, fractions."""
        found = cam_box(class_activation_map(features.values, self.weight[class_id]), features.size, fraction)
        logger.debug("CAM of class %d on a %s input: box %s", class_id, features.size, found)
        return found
