"""The options that send `vsekit extract` and `vsekit index build` to a Ray cluster (`--distributed ray`)."""

from __future__ import annotations

from typing import Any

import typer

from vsekit.errors import VsekitError

DISTRIBUTED = typer.Option(
    None,
    "--distributed",
    help="Shard the work over a Ray actor pool: 'ray' (needs pip install 'vsekit[distributed]').",
)
RAY_ADDRESS = typer.Option(
    None,
    "--ray-address",
    help="Existing Ray cluster (auto or HOST:6379, run on a node of it); default: $RAY_ADDRESS, else local.",
)
RAY_WORKERS = typer.Option(None, "--ray-workers", min=1, help="Ray actors (default: cluster CPUs / threads).")
RAY_THREADS = typer.Option(1, "--ray-threads", min=1, help="CPUs and torch threads per Ray actor.")
RAY_RETRIES = typer.Option(2, "--ray-retries", min=0, help="Extra attempts for a failed shard.")


def ray_options(
    distributed: str | None,
    address: str | None,
    workers: int | None,
    threads: int,
    retries: int,
    **extra: Any,
) -> Any:
    """The :class:`~vsekit.distributed.RayOptions` asked for, or None for the single-process path."""
    if distributed is None:
        if address is not None or workers is not None:
            raise VsekitError("--ray-address and --ray-workers need --distributed ray")
        return None
    if distributed != "ray":
        raise VsekitError(f"unknown --distributed {distributed!r}; known: ray")
    from vsekit.distributed import RayOptions, require_ray

    require_ray()
    return RayOptions(address=address, workers=workers, threads=threads, max_retries=retries, **extra)
