"""The `vsekit` command line: thin wrappers over the library, one command per job."""

from __future__ import annotations

import time
import warnings
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from vsekit.errors import VsekitError
from vsekit.resources import pretrained_path, resolve_model_path, sample_data_path

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Visual-semantic embeddings: rank, describe and search images and sentences in one space.",
)
console = Console()
err_console = Console(stderr=True)


def _one_line_warning(message, category, filename, lineno, line=None) -> str:  # noqa: ANN001 - stdlib hook
    return f"warning: {message}\n"


warnings.formatwarning = _one_line_warning  # the CLI prints warnings as one line, not a source excerpt


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


DEMO_SENTENCES = (
    "a dog runs through the snow",
    "a man rides a bicycle on a dirt path",
    "children play in the water at the beach",
)


@app.command()
def demo(
    data: Path | None = typer.Option(
        None, "--data", help="Corpus to show (default: the bundled Flickr8K sample)."
    ),
    model: Path | None = typer.Option(None, help="Model file (default: the model shipped with vsekit)."),
    n_images: int = typer.Option(3, help="How many sample photos to describe."),
    top: int = typer.Option(3, help="Results per query."),
    device: str = typer.Option("auto", help="auto, cpu, cuda or cuda:N."),
) -> None:
    """Quick start: the shipped model ranks captions for sample photos and photos for sentences.

    Uses the bundled sample (100 Flickr8K dev photos, never seen in training, 5 human captions each).
    """
    import torch

    from vsekit.data import load_corpus
    from vsekit.embedding.evaluate import model_features
    from vsekit.embedding.model import load_model
    from vsekit.metrics.ranking import evaluate_protocol

    try:
        model_path = _resolve_model_path(model)
        joint, fne, meta = load_model(model_path)
        corpus = load_corpus(data or sample_data_path())
        split = corpus.split(next(iter(corpus.splits)))
        ids = split.image_ids()
        feats = model_features(joint, fne, split, ids, device=device)
    except VsekitError as exc:
        _fail(exc)
    spec = joint.config["image"]
    captions = [c.text for c in split.captions]
    with torch.inference_mode():
        img = joint.embed_images(torch.as_tensor(feats, dtype=torch.float32))
        cap = joint.embed_texts(captions)
    scores = img @ cap.T
    by_image = split.captions_by_image()
    console.print(
        f"\n[bold]vsekit demo[/]: model {model_path.name} ({spec['backbone']} {spec['kind']} features, "
        f"{joint.config['text_encoder']} text encoder) on {len(ids)} photos / {len(captions)} captions of "
        f"{corpus.name} {next(iter(split.splits))}\n"
    )
    step = max(1, len(ids) // max(1, n_images))
    for q in range(0, min(len(ids), step * n_images), step):
        table = Table(
            title=f"photo {ids[q]}: best captions among all {len(captions)}",
            expand=True,
            header_style="bold",
            title_justify="left",
        )
        table.add_column("rank", width=5)
        table.add_column("score", width=6)
        table.add_column("caption")
        table.add_column("", width=10)
        for rank, j in enumerate(torch.argsort(scores[q], descending=True)[:top].tolist(), start=1):
            mark = "[green]correct[/]" if split.captions[j].image_id == ids[q] else ""
            table.add_row(str(rank), f"{scores[q, j]:.2f}", captions[j], mark)
        table.add_row("", "", f"[dim]a human caption: {by_image[ids[q]][0]}[/]", "")
        console.print(table)
    with torch.inference_mode():
        queries = joint.embed_texts(list(DEMO_SENTENCES))
    for sentence, qvec in zip(DEMO_SENTENCES, queries, strict=True):
        sims = img @ qvec
        table = Table(title=f"search: {sentence!r}", expand=True, header_style="bold", title_justify="left")
        table.add_column("rank", width=5)
        table.add_column("score", width=6)
        table.add_column("photo", width=26)
        table.add_column("its first human caption")
        for rank, j in enumerate(torch.argsort(sims, descending=True)[:top].tolist(), start=1):
            table.add_row(str(rank), f"{sims[j]:.2f}", ids[j], by_image[ids[j]][0])
        console.print(table)
    result = evaluate_protocol(img.numpy(), cap.numpy(), ids, split.caption_image_ids(), "flickr")
    console.print(
        _metrics_table(f"ranking the whole sample ({len(ids)} photos x {len(captions)} captions)", result)
    )
    _demo_generated(split, ids, model_path, device, n_images * 2)


def _demo_generated(split, ids: list[str], joint_path: Path, device: str, count: int) -> None:
    """The shipped captioner describing sample photos, beside a human caption of each."""
    from vsekit.cli_captioning import demo_captions

    shown = ids[:: max(1, len(ids) // max(1, count))][:count]
    try:
        generated = demo_captions(split, shown, joint_path, device)
    except VsekitError as exc:
        _fail(exc)
    if generated is None:
        console.print("[dim]no captioner is shipped with this vsekit; skipping generated captions[/]")
        return
    by_image = split.captions_by_image()
    table = Table(
        title="captions by the shipped captioner (m-RNN LSTM, beam search + joint-embedding rerank)",
        expand=True,
        header_style="bold",
        title_justify="left",
    )
    table.add_column("photo", width=26)
    table.add_column("generated")
    table.add_column("a human caption")
    for image_id, text in zip(shown, generated, strict=True):
        table.add_row(image_id, text, by_image[image_id][0])
    console.print(table)


# -- joint embedding: train / eval / rank ------------------------------------------------------------


def packaged_model_path() -> Path:
    """Where the model shipped with vsekit lives (used when --model is not given)."""
    return pretrained_path("vse")


def _resolve_model_path(model: Path | None) -> Path:
    return resolve_model_path(model, "vse")


def _metrics_table(title: str, result: dict) -> Table:
    table = Table(title=title, header_style="bold")
    table.add_column("direction")
    for name in ("R@1", "R@5", "R@10", "Med r", "Mean r"):
        table.add_column(name, justify="right")
    for key, label in (("i2t", "image annotation (i2t)"), ("t2i", "image search (t2i)")):
        m = result[key]
        table.add_row(
            label,
            f"{m['r1']:.1f}",
            f"{m['r5']:.1f}",
            f"{m['r10']:.1f}",
            f"{m['medr']:g}",
            f"{m['meanr']:.1f}",
        )
    table.caption = f"rsum {result['rsum']:.1f}"
    return table


def _write_json(path: Path, payload: object) -> None:
    import json

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise VsekitError(f"{path}: cannot write JSON ({exc.strerror or exc})") from None


@app.command()
def train(
    data: Path = typer.Option(..., "--data", help="Corpus with train and dev splits."),
    recipe: str = typer.Option(
        ..., "--recipe", help="Recipe name (kiros-gru, fne-gru, vse-best) or path of a recipe JSON file."
    ),
    out: Path = typer.Option(..., "--out", help="Run directory: model, checkpoint, log and config go here."),
    resume: bool = typer.Option(
        False, "--resume", help="Continue the run in --out from its last checkpoint."
    ),
    epochs: int | None = typer.Option(None, "--epochs", min=1, help="Override the recipe's epoch count."),
    seed: int | None = typer.Option(
        None, "--seed", help="Override the recipe's seed (an ensemble recipe then trains one model)."
    ),
    num_threads: int | None = typer.Option(
        None, "--num-threads", min=1, help="CPU threads for torch (1 is often fastest on a shared CPU)."
    ),
    device: str = typer.Option("auto", "--device", help="auto, cpu, cuda or cuda:N."),
    cache_root: Path | None = typer.Option(
        None, "--cache-root", help="Root of the feature cache (default $VSEKIT_CACHE or ~/.cache/vsekit)."
    ),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show progress bars."),
) -> None:
    """Train a joint image-sentence embedding; the best model by dev rsum goes to OUT/model.safetensors.

    Interrupt it at any time: `--resume` with the same arguments continues from the last finished epoch
    and gives exactly the weights an uninterrupted run would have.
    """
    import dataclasses

    from vsekit.data import load_corpus
    from vsekit.embedding.trainer import load_recipe
    from vsekit.embedding.trainer import train as run_training

    try:
        config = load_recipe(recipe)
        overrides = {
            k: v
            for k, v in (("epochs", epochs), ("seed", seed), ("num_threads", num_threads))
            if v is not None
        }
        if seed is not None:
            overrides["ensemble_seeds"] = None
        config = dataclasses.replace(config, **overrides).validate(f"recipe {recipe!r}")
        corpus = load_corpus(data)
        console.print(
            f"{corpus!r}\nrecipe {config.name}: {config.text_encoder} + {config.image_features} "
            f"{config.backbone} features, K={config.embed_dim}, loss {config.loss}"
            + (f", ensemble of seeds {config.ensemble_seeds}" if config.ensemble_seeds else "")
        )
        summary = run_training(
            corpus, config, out, resume=resume, progress=progress, device=device, cache_root=cache_root
        )
    except VsekitError as exc:
        _fail(exc)
    except KeyboardInterrupt:
        err_console.print(
            "interrupted: finished epochs are saved in the checkpoint; run the same command with --resume"
        )
        raise typer.Exit(code=130) from None
    best = summary["best_dev"]
    if "members" in summary:
        for m in summary["members"]:
            title = f"member seed {m['seed']}: best dev epoch {m['best_epoch']} of {m['epochs_completed']}"
            console.print(_metrics_table(title, m["best_dev"]))
        console.print(_metrics_table(f"ensemble of {len(summary['members'])} members on dev", best))
        console.print(f"model: {summary['model_path']}")
        return
    if best is None:
        console.print(f"no dev evaluation yet; checkpoint in {out}")
        return
    console.print(
        _metrics_table(f"best dev epoch {summary['best_epoch']} of {summary['epochs_completed']}", best)
    )
    console.print(f"model: {summary['model_path']}")


@app.command("eval")
def eval_command(
    data: Path = typer.Option(..., "--data", help="Corpus directory or file."),
    split: str = typer.Option("test", "--split", help="Split to rank (every image against every caption)."),
    model: Path | None = typer.Option(None, "--model", help="Model file (default: the packaged model)."),
    protocol: str = typer.Option("flickr", "--protocol", help="flickr, coco1k or coco5k."),
    json_out: Path | None = typer.Option(None, "--json", help="Write the metrics to this JSON file."),
    device: str = typer.Option("auto", "--device", help="auto, cpu, cuda or cuda:N."),
    cache_root: Path | None = typer.Option(None, "--cache-root", help="Root of the feature cache."),
) -> None:
    """Recall@K, median and mean rank of a trained model on a corpus split, both directions."""
    from vsekit.data import load_corpus
    from vsekit.device import resolve_device
    from vsekit.embedding.evaluate import evaluate_model
    from vsekit.embedding.model import load_model

    try:
        torch_device = resolve_device(device)
        path = _resolve_model_path(model)
        vse, fne, _ = load_model(path, device=torch_device)
        corpus = load_corpus(data)
        result = evaluate_model(
            vse, fne, corpus, split, protocol, cache_root=cache_root, device=str(torch_device)
        )
        if json_out is not None:
            _write_json(json_out, result)
    except VsekitError as exc:
        _fail(exc)
    title = (
        f"{corpus.name} {split}: {result['n_images']} images x {result['n_captions']} captions, "
        f"{protocol} protocol, {result['backbone']} {result['features']} features"
    )
    console.print(_metrics_table(title, result))
    if json_out is not None:
        console.print(f"metrics written to {json_out}")


@app.command()
def rank(
    image: Path | None = typer.Option(None, "--image", help="Query image: rank captions for it."),
    sentence: str | None = typer.Option(None, "--sentence", help="Query sentence: rank the split's images."),
    model: Path | None = typer.Option(None, "--model", help="Model file (default: the packaged model)."),
    captions: Path | None = typer.Option(None, "--captions", help="Candidate captions, one per line."),
    data: Path | None = typer.Option(None, "--data", help="Corpus whose split provides the candidates."),
    split: str = typer.Option("test", "--split", help="Split of --data to search."),
    top: int = typer.Option(5, "--top", min=1, help="How many results to show."),
    json_out: Path | None = typer.Option(None, "--json", help="Also write the results to this JSON file."),
    device: str = typer.Option("auto", "--device", help="auto, cpu, cuda or cuda:N."),
    cache_root: Path | None = typer.Option(None, "--cache-root", help="Root of the feature cache."),
) -> None:
    """Rank captions for an image (--image) or images for a sentence (--sentence) in the joint space."""
    from vsekit.data import load_corpus
    from vsekit.device import resolve_device
    from vsekit.embedding.evaluate import features_for_files, model_features, rank_captions, rank_images
    from vsekit.embedding.model import load_model

    try:
        if (image is None) == (sentence is None):
            raise VsekitError("give exactly one query: --image IMG or --sentence TEXT")
        if image is not None and (captions is None) == (data is None):
            raise VsekitError("--image needs candidates: --captions FILE or --data DIR (with --split)")
        if sentence is not None and data is None:
            raise VsekitError("--sentence needs images to search: --data DIR (with --split)")
        torch_device = resolve_device(device)
        vse, fne, _ = load_model(_resolve_model_path(model), device=torch_device)
        corpus = load_corpus(data) if data is not None else None
        if image is not None:
            if captions is not None:
                candidates = _read_caption_lines(captions)
            else:
                candidates = [c.text for c in corpus.split(split).captions]
            feats = features_for_files([image], vse, fne, device=torch_device)
            hits = rank_captions(vse, feats[0], candidates, top=top)
            rows = [{"rank": k, "score": s, "caption": c} for k, (c, s) in enumerate(hits, 1)]
        else:
            part = corpus.split(split)
            ids = part.image_ids()
            feats = model_features(vse, fne, corpus, ids, cache_root=cache_root, device=str(torch_device))
            hits = rank_images(vse, sentence, feats, ids, top=top)
            first = {i: caps[0] if caps else "" for i, caps in part.captions_by_image().items()}
            rows = [
                {"rank": k, "score": s, "image": i, "path": str(corpus.images[i]), "caption": first[i]}
                for k, (i, s) in enumerate(hits, 1)
            ]
        if json_out is not None:
            _write_json(json_out, {"query": str(image) if image is not None else sentence, "results": rows})
    except VsekitError as exc:
        _fail(exc)
    table = Table(title=f"query: {image if image is not None else sentence!r}", header_style="bold")
    table.add_column("#", justify="right")
    table.add_column("score", justify="right")
    if image is not None:
        table.add_column("caption")
        for r in rows:
            table.add_row(str(r["rank"]), f"{r['score']:.3f}", r["caption"])
    else:
        table.add_column("image")
        table.add_column("first human caption")
        for r in rows:
            table.add_row(str(r["rank"]), f"{r['score']:.3f}", r["image"], r["caption"])
    console.print(table)


def _read_caption_lines(path: Path) -> list[str]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise VsekitError(f"{path}: captions file does not exist") from None
    except UnicodeDecodeError as exc:
        raise VsekitError(f"{path}: not UTF-8 text ({exc.reason})") from None
    texts = [line.strip() for line in lines if line.strip()]
    if not texts:
        raise VsekitError(f"{path}: no captions (expected one caption per line)")
    return texts


# the captioning commands live in their own module and register themselves on `app` when imported
from vsekit import cli_captioning  # noqa: E402, F401


def main() -> None:
    app()


if __name__ == "__main__":
    main()
