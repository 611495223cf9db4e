"""Device selection shared by every command: `--device auto` picks CUDA when present, else CPU."""

from __future__ import annotations

import torch

from vsekit.errors import VsekitError


def resolve_device(spec: str | torch.device = "auto") -> torch.device:
    """Turn "auto" / "cpu" / "cuda" / "cuda:1" / "mps" into a torch.device that exists on this machine."""
    if isinstance(spec, torch.device):
        return spec
    spec = spec.strip().lower()
    if spec == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        return torch.device("cpu")
    try:
        device = torch.device(spec)
    except RuntimeError as exc:
        raise VsekitError(f"--device {spec!r}: not a device name (use auto, cpu, cuda or cuda:N)") from exc
    if device.type == "cuda" and not torch.cuda.is_available():
        raise VsekitError(f"--device {spec!r}: CUDA is not available on this machine (use auto or cpu)")
    return device
