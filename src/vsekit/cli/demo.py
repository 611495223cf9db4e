"""`vsekit demo`: the shipped models on the bundled sample, as a first look."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table
from rich.text import Text

from vsekit.cli._common import DEVICE_HELP, MODEL_HELP, console, metrics_table, user_errors
from vsekit.errors import command

DEMO_SENTENCES = (
    "a dog runs through the snow",
    "a man rides a bicycle on a dirt path",
    "children play in the water at the beach",
)


def demo(
    data: Path | None = typer.Option(
        None, "--data", help="Corpus to show (default: the bundled Flickr8K sample)."
    ),
    model: str | None = typer.Option(None, help=MODEL_HELP),
    n_images: int = typer.Option(3, min=1, help="How many sample photos to describe."),
    top: int = typer.Option(3, min=1, help="Results per query."),
    device: str = typer.Option("auto", help=DEVICE_HELP),
) -> None:
    """Quick start: the shipped model ranks captions for sample photos and photos for sentences.

    Uses the bundled sample (100 Flickr8K dev photos, never seen in training, 5 human captions each).
    """
    from vsekit.data import load_corpus
    from vsekit.embedding.pipeline import VSEModel
    from vsekit.resources import sample_data_path
    from vsekit.retrieval import embed_split

    with user_errors():
        vse = VSEModel.load(model, device=device)
        corpus = load_corpus(data or sample_data_path())
        split_name = next(iter(corpus.splits))
        space = embed_split(vse, corpus, split_name)
    by_image = corpus.split(split_name).captions_by_image()
    ids, n_captions = space.image_ids, len(space.captions)
    console.print(
        f"\n[bold]vsekit demo[/]: model {vse.describe()} on {len(ids)} photos / {n_captions} captions of "
        f"{corpus.name} {split_name}\n"
    )
    step = max(1, len(ids) // max(1, n_images))
    shown = list(range(0, min(len(ids), step * n_images), step))
    annotations = space.captions_for_images(top)
    for q in shown:
        table = _table(
            f"photo {ids[q]}: best captions among all {n_captions}", ("caption", None), ("correct?", 9)
        )
        for k, hit in enumerate(annotations[q], start=1):
            mark = "[green]correct[/]" if space.caption_image_ids[hit.index] == ids[q] else ""
            table.add_row(str(k), f"{hit.score:.2f}", hit.key, mark)
        table.caption = f"a human caption of this photo: {by_image[ids[q]][0]}"
        table.caption_justify = "left"
        console.print(table)
        console.print()
    searches = space.images_for(vse.embed_texts(list(DEMO_SENTENCES)), top)
    for sentence, hits in zip(DEMO_SENTENCES, searches, strict=True):
        table = _table(f"search: {sentence!r}", ("photo", 26), ("its first human caption", None))
        for k, hit in enumerate(hits, start=1):
            table.add_row(str(k), f"{hit.score:.2f}", hit.key, by_image[hit.key][0])
        console.print(table)
    folder = corpus.images[ids[0]].parent
    console.print(f"the photos are in {folder}", soft_wrap=True, highlight=False)
    title = f"ranking the whole sample ({len(ids)} photos x {n_captions} captions)"
    console.print(metrics_table(title, space.evaluate("flickr")))
    _show_photo_search(folder, vse, top)
    _show_generated(corpus, ids, by_image, model, device, n_images * 2)


def _show_photo_search(folder: Path, vse, top: int) -> None:  # noqa: ANN001
    """Index the sample's photo folder (no captions used), as `vsekit index build` does, and search it."""
    import tempfile
    import time

    from vsekit.retrieval.index import Index

    sentence = DEMO_SENTENCES[0]
    with tempfile.TemporaryDirectory() as tmp, user_errors():
        start = time.perf_counter()
        index = Index.build(folder, Path(tmp) / "sample.index", vse, progress=False)
        seconds = time.perf_counter() - start
        hits = index.search(sentence, k=top)
    table = _table(f"photo search: {sentence!r}", ("photo", None))
    for k, hit in enumerate(hits, start=1):
        table.add_row(str(k), f"{hit.score:.2f}", hit.path)
    table.caption = Text(
        f"indexed the {len(index)} photos of the folder in {seconds:.1f} s; the same with your photos: "
        + your_photos(sentence)
    )
    table.caption_justify = "left"
    console.print(table)


def your_photos(sentence: str) -> str:
    """The demo's photo search as commands on a person's own folder PHOTOS (an index in PHOTOS.index)."""
    build = command("index", "build", "PHOTOS", "--out", "PHOTOS.index")
    return f"{build} then {command('search', 'PHOTOS.index', sentence)}"


def _table(title: str, *columns: tuple[str, int | None]) -> Table:
    table = Table(title=title, expand=True, header_style="bold", title_justify="left")
    table.add_column("rank", width=5)
    table.add_column("score", width=6)
    for name, width in columns:
        table.add_column(name, width=width)
    return table


def _show_generated(  # noqa: ANN001
    corpus, ids: list[str], by_image: dict, model: str | None, device: str, count: int
) -> None:
    """The shipped captioner describing sample photos, beside a human caption of each; reranked by the
    demo's ``--model`` when one is given, else by the joint model its rerank weights were tuned with."""
    from vsekit.captioning.generator import CaptionGenerator
    from vsekit.resources import pretrained_path

    if not pretrained_path("captioner").is_file():
        console.print("[dim]no captioner is shipped with this vsekit; skipping generated captions[/]")
        return
    shown = ids[:: max(1, len(ids) // max(1, count))][:count]
    with user_errors():
        generator = CaptionGenerator("mrnn", joint_model=model, device=device)
        generated = generator.describe_corpus(corpus, shown)
    table = Table(
        title="captions by the shipped captioner (m-RNN LSTM, beam search + joint-embedding rerank)",
        expand=True,
        header_style="bold",
        title_justify="left",
    )
    table.add_column("photo", width=26)
    table.add_column("generated")
    table.add_column("a human caption")
    for image_id, texts in zip(shown, generated, strict=True):
        table.add_row(image_id, texts[0], by_image[image_id][0])
    console.print(table)
