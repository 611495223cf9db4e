"""Region alignment commands (Karpathy & Fei-Fei 2015, sec. 3.1-3.2).

`train-aligner`, `align`, `train-region-captioner` and `regions`.
"""

from __future__ import annotations

from pathlib import Path

import typer

from vsekit.cli._common import (
    TRAIN_INTERRUPTED,
    CacheRootOption,
    DeviceOption,
    EpochsOption,
    KeepEpochsOption,
    NumThreadsOption,
    ProgressOption,
    ResumeOption,
    TrainDataOption,
    console,
    metrics_table,
    plain,
    run_options,
    user_errors,
    with_overrides,
    write_json,
)

ALIGNER_HELP = "Aligner: a shipped name (aligner) or an aligner file (default: aligner)."


def train_aligner(
    data: TrainDataOption,
    recipe: str = typer.Option(..., "--recipe", help="Recipe name (shipped: listed below) or a JSON file."),
    out: Path = typer.Option(
        ..., "--out", help="Run directory: aligner, checkpoint, log and config go here."
    ),
    resume: ResumeOption = False,
    epochs: EpochsOption = None,
    num_threads: NumThreadsOption = None,
    device: DeviceOption = "auto",
    cache_root: CacheRootOption = None,
    progress: ProgressOption = True,
    keep_epochs: KeepEpochsOption = False,
) -> None:
    """Train a region-word aligner; the best epoch on the selection split goes to OUT/aligner.safetensors."""
    from vsekit.alignment.trainer import load_aligner_recipe
    from vsekit.alignment.trainer import train_aligner as run_training
    from vsekit.data import load_corpus

    with user_errors(TRAIN_INTERRUPTED):
        config = with_overrides(load_aligner_recipe(recipe), recipe, epochs=epochs, num_threads=num_threads)
        corpus = load_corpus(data)
        console.print(
            f"{corpus!r}\nrecipe {config.name}: {config.regions} regions, {config.backbone}, "
            f"h={config.embed_dim}"
        )
        options = run_options(resume, progress, device, keep_epochs)
        summary = run_training(corpus, config, out, cache_root=cache_root, **options)
    if summary["best_dev"] is not None:
        title = f"best dev epoch {summary['best_epoch']} of {summary['epochs_completed']} (S_kl ranking)"
        console.print(metrics_table(title, summary["best_dev"]))
    console.print(plain(f"aligner: {summary['model_path']}"), soft_wrap=True)


def align(
    image: Path = typer.Option(..., "--image", help="The image."),
    sentence: str = typer.Option(..., "--sentence", help="The sentence to align to its regions."),
    out: Path = typer.Option(..., "--out", help="Picture to write (PNG or JPEG)."),
    json_out: Path | None = typer.Option(
        None, "--json", help="Also write boxes, words and segments as JSON."
    ),
    model: str | None = typer.Option(None, "--model", help=ALIGNER_HELP),
    beta: float = typer.Option(
        1.0, "--beta", help="MRF bonus for neighbouring words on one region (Eq. 12)."
    ),
    device: DeviceOption = "auto",
) -> None:
    """Align the words of a sentence to regions of an image: per-word best region and MRF segments."""
    from vsekit.alignment import Aligner
    from vsekit.alignment.align import align_sentence, draw_alignment

    with user_errors():
        aligner = Aligner.load(model, device=device)
        result = align_sentence(aligner, image, sentence, beta=beta)
        draw_alignment(image, result, out)
        if json_out is not None:
            write_json(json_out, result)
    for seg in result["segments"]:
        console.print(
            f"region {seg['region']:>2} {result['boxes'][seg['region']]}: {seg['text']!r} "
            f"({seg['score']:.2f})"
        )
    console.print(plain(f"picture: {out}" + (f"; JSON: {json_out}" if json_out else "")), soft_wrap=True)


def train_region_captioner(
    data: TrainDataOption,
    recipe: str = typer.Option(
        "region-lstm", "--recipe", help="Recipe name (shipped: listed below) or a JSON file."
    ),
    out: Path = typer.Option(
        ..., "--out", help="Run directory: snippets, captioner, checkpoint, log and config go here."
    ),
    aligner: str | None = typer.Option(None, "--aligner", help=ALIGNER_HELP),
    resume: ResumeOption = False,
    epochs: EpochsOption = None,
    num_threads: NumThreadsOption = None,
    device: DeviceOption = "auto",
    cache_root: CacheRootOption = None,
    progress: ProgressOption = True,
    keep_epochs: KeepEpochsOption = False,
) -> None:
    """Align the training captions to regions (MRF snippets) and train the m-RNN on the pairs."""
    from vsekit.alignment import Aligner
    from vsekit.alignment.region_captions import load_region_caption_recipe
    from vsekit.alignment.region_captions import train_region_captioner as run_training
    from vsekit.data import load_corpus

    with user_errors(TRAIN_INTERRUPTED):
        config = with_overrides(
            load_region_caption_recipe(recipe), recipe, epochs=epochs, num_threads=num_threads
        )
        corpus = load_corpus(data)
        model = Aligner.load(aligner, device=device)
        console.print(f"{corpus!r}\nrecipe {config.name}: aligner {model.path}, beta {config.beta}")
        options = run_options(resume, progress, device, keep_epochs)
        summary = run_training(model, corpus, config, out, cache_root=cache_root, **options)
    console.print(
        f"{summary['n_train_snippets']} training snippets; best dev epoch {summary['best_epoch']}: "
        f"{summary['best_dev']}"
    )
    console.print(plain(f"region captioner: {summary['model_path']}"), soft_wrap=True)


def regions(
    image: Path = typer.Option(..., "--image", help="The image (JPEG, PNG, greyscale or RGBA)."),
    out: Path = typer.Option(..., "--out", help="Picture to write (PNG or JPEG)."),
    json_out: Path | None = typer.Option(
        None, "--json", help="Also write the regions (boxes in pixels), snippets and scores as JSON."
    ),
    top: int = typer.Option(5, "--top", min=1, help="How many regions to show."),
    aligner: str | None = typer.Option(None, "--aligner", help=ALIGNER_HELP),
    captioner: str | None = typer.Option(
        None,
        "--captioner",
        help="Region captioner: the shipped name region-captioner or a file (vsekit train-region-captioner).",
    ),
    device: DeviceOption = "auto",
) -> None:
    """Draw an image's top regions with the snippets the region captioner generates for them (Fig. 7)."""
    from vsekit.alignment import Aligner
    from vsekit.alignment.describe import describe_regions, draw_regions
    from vsekit.alignment.region_captions import RegionCaptioner

    with user_errors():
        model = Aligner.load(aligner, device=device)
        reader = RegionCaptioner.load(captioner, device=str(model.device))
        result = describe_regions(model, reader, image, top=top)
        draw_regions(image, result, out)
        if json_out is not None:
            write_json(json_out, result)
    for r in result["regions"]:
        console.print(plain(f"region {r['region']:>2} {r['box']}: {r['snippet']!r} ({r['score']:.2f})"))
    console.print(plain(f"picture: {out}" + (f"; JSON: {json_out}" if json_out else "")), soft_wrap=True)
