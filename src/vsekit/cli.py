"""The `vsekit` command line: thin wrappers over the library, one command per job."""

from __future__ import annotations

import time
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from vsekit.errors import VsekitError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Visual-semantic embeddings: rank, describe and search images and sentences in one space.",
)
console = Console()
err_console = Console(stderr=True)


def sample_data_path() -> Path:
    """The bundled Flickr8K sample (100 dev photos with 5 captions each)."""
    return Path(__file__).resolve().parent / "sample" / "flickr8k"


def _fail(exc: Exception) -> None:
    err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
    raise typer.Exit(code=2)


@app.command()
def extract(
    data: Path = typer.Option(
        ..., "--data", help="Corpus directory or file (Flickr8K layout, CSV, Karpathy or COCO JSON)."
    ),
    backbone: str = typer.Option("mobilenet_v2", help="CNN: mobilenet_v2 or efficientnet_lite0."),
    fne: bool = typer.Option(
        False, "--fne", help="Full-Network Embedding: all layers, standardised and ternarised."
    ),
    fit_split: str = typer.Option("train", help="Split whose images fit the FNE statistics (with --fne)."),
    cache_dir: Path | None = typer.Option(
        None, help="Exact cache directory (default: one per corpus and configuration under --cache-root)."
    ),
    cache_root: Path | None = typer.Option(
        None, help="Root of the feature cache (default $VSEKIT_CACHE or ~/.cache/vsekit)."
    ),
    weights: Path | None = typer.Option(
        None, help="Backbone weights file (default: the installed weight package)."
    ),
    device: str = typer.Option("auto", help="auto, cpu, cuda or cuda:N."),
    batch_size: int = typer.Option(32, min=1, help="Images per CNN batch."),
    skip_bad_images: bool = typer.Option(
        False, help="Report unreadable images and go on instead of stopping."
    ),
) -> None:
    """Compute image features for every image of a corpus, cached and resumable.

    Interrupt it at any time: re-running the same command continues where it stopped.
    """
    from vsekit.data import load_corpus
    from vsekit.vision.features import extract_features, extract_fne

    try:
        corpus = load_corpus(data)
        console.print(f"{corpus!r}")
        start = time.perf_counter()
        common = dict(
            cache_dir=cache_dir,
            cache_root=cache_root,
            weights=weights,
            device=device,
            batch_size=batch_size,
            skip_bad_images=skip_bad_images,
        )
        if fne:
            store = extract_fne(corpus, backbone, fit_split=fit_split, **common)
        else:
            store = extract_features(corpus, backbone, "one-layer", **common)
        elapsed = time.perf_counter() - start
    except VsekitError as exc:
        _fail(exc)
    except KeyboardInterrupt:
        err_console.print("interrupted: finished images are saved; run the same command again to resume")
        raise typer.Exit(code=130) from None
    n_done = int(store.done_mask().sum())
    console.print(
        f"{n_done}/{len(store.image_ids)} images, {'FNE' if fne else 'one-layer'} dim {store.dim}, "
        f"{store.config.backbone}, {elapsed:.1f} s -> {store.path}"
    )
    if store.failed:
        err_console.print(f"[yellow]{len(store.failed)} image(s) could not be read:[/]")
        for message in list(store.failed.values())[:10]:
            err_console.print(f"  {message}", highlight=False)


@app.command()
def demo(
    data: Path | None = typer.Option(
        None, "--data", help="Corpus to show (default: the bundled Flickr8K sample)."
    ),
    n_queries: int = typer.Option(4, help="How many query images to show."),
    top: int = typer.Option(3, help="Neighbours per query."),
    device: str = typer.Option("auto", help="auto, cpu, cuda or cuda:N."),
) -> None:
    """Quick start: features for the bundled sample photos and each query's most similar photos."""
    import numpy as np

    from vsekit.data import load_corpus
    from vsekit.vision.features import extract_features

    try:
        corpus = load_corpus(data or sample_data_path())
        store = extract_features(corpus, "mobilenet_v2", "one-layer", device=device)
    except VsekitError as exc:
        _fail(exc)
    ids = store.image_ids
    feats = store.raw(ids)
    feats /= np.linalg.norm(feats, axis=1, keepdims=True) + 1e-12
    sims = feats @ feats.T
    np.fill_diagonal(sims, -np.inf)
    captions = corpus.captions_by_image()
    console.print(
        f"\n[bold]Nearest photos by MobileNetV2 features[/] ({len(ids)} photos of {corpus.name}; "
        "each photo is shown by its first human caption)\n"
    )
    step = max(1, len(ids) // n_queries)
    for q in range(0, step * n_queries, step):
        table = Table(show_header=True, header_style="bold", expand=True)
        table.add_column("", width=10)
        table.add_column("image", width=26)
        table.add_column("human caption")
        table.add_row("query", ids[q], captions[ids[q]][0])
        for rank, j in enumerate(np.argsort(-sims[q])[:top], start=1):
            table.add_row(f"#{rank} {sims[q, j]:.2f}", ids[j], captions[ids[j]][0])
        console.print(table)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
