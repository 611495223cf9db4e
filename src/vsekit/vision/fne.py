"""Full-Network Embedding (Garcia-Gasulla et al. 2017; Vilalta et al. 2017, section 3.1).

The pipeline, after the CNN itself:
  1. activations of every convolutional and fully connected layer, conv maps spatially average-pooled
     (done by the backbone's ``forward_features(..., taps=True)``);
  2. per-feature standardisation to z-values with statistics of the *training* images only;
  3. discretisation of z to {-1, 0, 1} with the fixed thresholds (-0.25, 0.15) that the FNE paper found
     to work across domains: -1 = atypically low, 0 = typical, 1 = atypically high.

This class is steps 2 and 3, shaped like a scikit-learn transformer (fit / partial_fit / transform /
save / load; ``to_tensors`` / ``from_tensors`` put the statistics inside another file, such as a model),
so the statistics fitted on a training split travel with a model and are applied unchanged to any later
image (a dev split, a user's photo collection).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import load_file

from vsekit.errors import ConfigMismatchError, VsekitError

__all__ = ["DEFAULT_THRESHOLDS", "FullNetworkEmbedding"]

DEFAULT_THRESHOLDS = (-0.25, 0.15)
FNE_KIND = "vsekit.FullNetworkEmbedding"  # the ``kind`` field of the settings (metadata)


class FullNetworkEmbedding:
    """Standardise pooled activations with train-set statistics and discretise them to {-1, 0, 1}.

    ``eps`` floors the standard deviation, so a feature that is constant on the training images (a dead
    ReLU channel, or a fit on a single image) does not divide by zero: its train images map to 0 and an
    image that does activate it maps to +1, which is what "atypically high" means.
    """

    def __init__(
        self,
        thresholds: tuple[float, float] = DEFAULT_THRESHOLDS,
        eps: float = 1e-6,
        layer_names: list[str] | None = None,
        layer_dims: list[int] | None = None,
    ) -> None:
        low, high = thresholds
        if not low < high:
            raise ValueError(f"thresholds must satisfy low < high, got {thresholds}")
        self.thresholds = (float(low), float(high))
        self.eps = float(eps)
        self.layer_names = list(layer_names) if layer_names is not None else None
        self.layer_dims = list(layer_dims) if layer_dims is not None else None
        self.n_samples_ = 0
        self.mean_: np.ndarray | None = None
        self._m2: np.ndarray | None = None  # running sum of squared deviations (Chan et al. merge)

    # ----------------------------------------------------------------- fitting
    def partial_fit(self, activations: np.ndarray) -> FullNetworkEmbedding:
        """Add a batch of pooled activations [n, D] to the running mean/variance (any n >= 1).

        Uses the pairwise merge of Chan, Golub & LeVeque, in float64, so streaming a 6,000-image split
        batch by batch gives the same statistics as one pass, without catastrophic cancellation.
        """
        x = np.asarray(activations, dtype=np.float64)
        if x.ndim != 2 or x.shape[0] == 0:
            raise ValueError(f"expected a non-empty [n, D] array, got shape {x.shape}")
        n_b = x.shape[0]
        mean_b = x.mean(axis=0)
        m2_b = ((x - mean_b) ** 2).sum(axis=0)
        if self.mean_ is None:
            self.mean_, self._m2, self.n_samples_ = mean_b, m2_b, n_b
            return self
        if x.shape[1] != self.mean_.shape[0]:
            raise ValueError(
                f"batch has {x.shape[1]} features, the embedding was fitted on {self.mean_.shape[0]}"
            )
        n_a = self.n_samples_
        n = n_a + n_b
        delta = mean_b - self.mean_
        self.mean_ = self.mean_ + delta * (n_b / n)
        self._m2 = self._m2 + m2_b + delta**2 * (n_a * n_b / n)
        self.n_samples_ = n
        return self

    def fit(self, activations: np.ndarray) -> FullNetworkEmbedding:
        """Fit the per-feature statistics on training-split activations [n, D]."""
        self.mean_, self._m2, self.n_samples_ = None, None, 0
        return self.partial_fit(activations)

    @property
    def std_(self) -> np.ndarray:
        self._check_fitted()
        assert self._m2 is not None  # set together with mean_
        return np.sqrt(self._m2 / self.n_samples_)  # population std, as the z-values of the paper

    @property
    def dim(self) -> int:
        self._check_fitted()
        assert self.mean_ is not None
        return int(self.mean_.shape[0])

    # ---------------------------------------------------------------- transform
    def standardize(self, activations: np.ndarray) -> np.ndarray:
        """z-values (x - mean) / max(std, eps), float32 [n, D]."""
        self._check_fitted()
        x = np.asarray(activations, dtype=np.float32)
        if x.ndim == 1:
            x = x[None, :]
        if x.shape[-1] != self.dim:
            raise ConfigMismatchError(
                f"activations have {x.shape[-1]} features but this Full-Network Embedding was fitted on "
                f"{self.dim} (another backbone or layer set?)"
            )
        assert self.mean_ is not None  # _check_fitted
        mean = self.mean_.astype(np.float32)
        scale = np.maximum(self.std_, self.eps).astype(np.float32)
        return (x - mean) / scale

    def transform(self, activations: np.ndarray) -> np.ndarray:
        """Ternary codes in {-1, 0, 1} as int8 [n, D]: z < low -> -1, z > high -> 1, else 0."""
        z = self.standardize(activations)
        low, high = self.thresholds
        codes = np.zeros(z.shape, dtype=np.int8)
        codes[z > high] = 1
        codes[z < low] = -1
        return codes

    def fit_transform(self, activations: np.ndarray) -> np.ndarray:
        return self.fit(activations).transform(activations)

    # ---------------------------------------------------------------- save/load
    def state_dict(self) -> dict[str, np.ndarray]:
        self._check_fitted()
        assert self.mean_ is not None and self._m2 is not None
        return {"mean": self.mean_.copy(), "m2": self._m2.copy()}

    def metadata(self) -> dict[str, str]:
        return {
            "kind": FNE_KIND,
            "thresholds": json.dumps(self.thresholds),
            "eps": repr(self.eps),
            "n_samples": str(self.n_samples_),
            "layer_names": json.dumps(self.layer_names),
            "layer_dims": json.dumps(self.layer_dims),
        }

    def to_tensors(self, prefix: str = "") -> tuple[dict[str, np.ndarray], dict[str, str]]:
        """``(tensors, metadata)``: the fitted statistics (float64 ``{prefix}mean``, ``{prefix}m2``) and the
        settings as strings, ready for a safetensors file or for another file's tensors and header."""
        state = self.state_dict()
        tensors = {f"{prefix}{k}": np.ascontiguousarray(v, dtype=np.float64) for k, v in state.items()}
        return tensors, self.metadata()

    @classmethod
    def from_tensors(
        cls, tensors: Mapping[str, Any], metadata: Mapping[str, str], prefix: str = ""
    ) -> FullNetworkEmbedding:
        """Rebuild a fitted embedding from :meth:`to_tensors` output (numpy arrays or CPU torch tensors).

        Raises:
            VsekitError: a statistic or a setting is missing or unreadable.
        """
        try:
            mean = np.asarray(tensors[f"{prefix}mean"], dtype=np.float64)
            m2 = np.asarray(tensors[f"{prefix}m2"], dtype=np.float64)
            fne = cls(
                thresholds=tuple(json.loads(metadata["thresholds"])),
                eps=float(metadata["eps"]),
                layer_names=json.loads(metadata["layer_names"]),
                layer_dims=json.loads(metadata["layer_dims"]),
            )
            n_samples = int(metadata["n_samples"])
        except (KeyError, TypeError, ValueError) as exc:
            raise VsekitError(
                f"damaged Full-Network Embedding statistics ({type(exc).__name__}: {exc})"
            ) from exc
        if mean.ndim != 1 or mean.shape != m2.shape:
            raise VsekitError(f"damaged Full-Network Embedding statistics (mean {mean.shape}, m2 {m2.shape})")
        fne.mean_, fne._m2, fne.n_samples_ = mean, m2, n_samples
        return fne

    def save(self, path: str | Path) -> None:
        """Write the fitted statistics and settings to one safetensors file (atomically)."""
        import torch

        from vsekit.fileio import atomic_save_safetensors

        tensors, metadata = self.to_tensors()
        atomic_save_safetensors({k: torch.from_numpy(v) for k, v in tensors.items()}, path, metadata)

    @classmethod
    def load(cls, path: str | Path) -> FullNetworkEmbedding:
        path = Path(path)
        if not path.is_file():
            raise VsekitError(f"{path}: Full-Network Embedding file not found")
        try:
            from safetensors import safe_open

            with safe_open(str(path), framework="numpy") as f:
                meta = f.metadata() or {}
            tensors = load_file(str(path))
        except Exception as exc:  # any parse failure is the same user-facing problem
            raise VsekitError(f"{path}: not a readable safetensors file ({exc})") from exc
        if meta.get("kind") != FNE_KIND or not {"mean", "m2"} <= tensors.keys():
            raise ConfigMismatchError(f"{path}: not a vsekit Full-Network Embedding file")
        try:
            return cls.from_tensors(tensors, meta)
        except VsekitError as exc:
            raise VsekitError(f"{path}: {exc}") from exc

    def _check_fitted(self) -> None:
        if self.mean_ is None:
            raise VsekitError("this Full-Network Embedding is not fitted: call fit() on training activations")

    def __repr__(self) -> str:
        state = f"dim={self.dim}, n_samples={self.n_samples_}" if self.mean_ is not None else "unfitted"
        return f"FullNetworkEmbedding({state}, thresholds={self.thresholds})"
