"""`vsekit extract`: image features for a corpus, cached and resumable."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import typer

from vsekit.cli._common import (
    CACHE_ROOT_HELP,
    CNN_ENGINE_HELP,
    DEVICE_HELP,
    console,
    err_console,
    plain,
    set_cnn_engine,
    show_progress,
    user_errors,
)
from vsekit.cli._distributed import (
    DISTRIBUTED,
    RAY_ADDRESS,
    RAY_RETRIES,
    RAY_THREADS,
    RAY_WORKERS,
    ray_options,
)


def extract(
    data: Path = typer.Option(
        ..., "--data", help="Corpus directory or file (Flickr8K layout, CSV, Karpathy or COCO JSON)."
    ),
    backbone: str = typer.Option(
        "mobilenet_v2", help="CNN: mobilenet_v2, efficientnet_lite0 or efficientnet_lite2."
    ),
    fne: bool = typer.Option(
        False, "--fne", help="Full-Network Embedding: all layers, standardised and ternarised."
    ),
    features: str = typer.Option(
        "one-layer",
        "--features",
        help="Feature kind: one-layer (the pooled vector most models read), pre-head (the last block's "
        "cells, read by a joint model that tunes the CNN's head) or grid (the last map's cells, read by "
        "the aligner and the attention captioner). --fne is the fourth kind.",
    ),
    fit_split: str = typer.Option("train", help="Split whose images fit the FNE statistics (with --fne)."),
    cache_dir: Path | None = typer.Option(
        None, help="Exact cache directory (default: one per corpus and configuration under --cache-root)."
    ),
    cache_root: Path | None = typer.Option(None, help=CACHE_ROOT_HELP),
    weights: Path | None = typer.Option(
        None, help="Backbone weights file (default: the installed weight package)."
    ),
    device: str = typer.Option("auto", help=DEVICE_HELP),
    engine: str | None = typer.Option(None, "--engine", help=CNN_ENGINE_HELP),
    batch_size: int = typer.Option(32, min=1, help="Images per CNN batch."),
    skip_bad_images: bool = typer.Option(
        False, "--skip-bad-images", help="Report unreadable images and go on instead of stopping."
    ),
    distributed: str | None = DISTRIBUTED,
    ray_address: str | None = RAY_ADDRESS,
    ray_workers: int | None = RAY_WORKERS,
    ray_threads: int = RAY_THREADS,
    ray_retries: int = RAY_RETRIES,
    shard_size: int = typer.Option(
        256, "--shard-size", min=1, help="Images per Ray shard (whole batches; with --distributed)."
    ),
) -> None:
    """Compute image features for every image of a corpus, cached and resumable.

    Interrupt it at any time: re-running the same command continues where it stopped. With
    --distributed ray the images are cut into shards that a Ray actor pool computes; the cache is the same.
    """
    from vsekit.data import load_corpus
    from vsekit.vision.features import extract_features, extract_fne

    with user_errors("finished images are saved; run the same command again to resume"):
        set_cnn_engine(engine)
        layers = _layers(features, fne)
        options = ray_options(
            distributed, ray_address, ray_workers, ray_threads, ray_retries, shard_size=shard_size
        )
        corpus = load_corpus(data)
        console.print(f"{corpus!r}")
        start = time.perf_counter()
        common: dict[str, Any] = dict(
            cache_dir=cache_dir,
            cache_root=cache_root,
            weights=weights,
            device=device,
            batch_size=batch_size,
            skip_bad_images=skip_bad_images,
        )
        local = dict(common, progress=show_progress())  # -q: no bars (the Ray path has its own)
        if options is not None:
            from vsekit.distributed.extract import ray_extract

            store = ray_extract(
                corpus, backbone, fne=fne, layers=layers, fit_split=fit_split, options=options, **common
            )
        elif fne:
            store = extract_fne(corpus, backbone, fit_split=fit_split, **local)
        else:
            store = extract_features(corpus, backbone, layers, **local)
        elapsed = time.perf_counter() - start
    n_done = int(store.done_mask().sum())
    engines = ", filled by " + "+".join(store.meta["engines"]) if store.meta.get("engines") else ""
    console.print(
        f"{n_done}/{len(store.image_ids)} images, {'FNE' if fne else layers} dim {store.dim}, "
        f"{store.config.backbone}{engines}, {elapsed:.1f} s -> {store.path}"
    )
    if store.failed:
        err_console.print(f"[yellow]{len(store.failed)} image(s) could not be read:[/]")
        for message in list(store.failed.values())[:10]:
            err_console.print(plain(f"  {message}"), highlight=False, soft_wrap=True)


def _layers(features: str, fne: bool) -> str:
    """The store's layer set for ``--features`` (``--fne``: all layers, for the FNE codes)."""
    from vsekit.errors import VsekitError

    kinds = ("one-layer", "pre-head", "grid")
    if features not in kinds:
        raise VsekitError(f"--features {features!r}: unknown feature kind; known: {', '.join(kinds)}")
    if fne and features != "one-layer":
        raise VsekitError(f"--fne and --features {features}: choose one feature kind")
    return "full" if fne else features
