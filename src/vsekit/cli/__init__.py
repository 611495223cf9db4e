"""The `vsekit` command line: one module per command group, each command parses its options, calls one
library function and prints. Commands are registered here, explicitly; no library module imports this
package."""

from __future__ import annotations

import gc
import sys

import typer

from vsekit.cli import alignment, captioning, demo, duplicates, embedding, features, models, search, serve
from vsekit.cli._common import configure_logging, console, hide_flag_metavars, install_warning_format
from vsekit.cli._help import help_for
from vsekit.version import __version__

__all__ = ["app", "main"]

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode="markdown",
    help="Visual-semantic embeddings: rank, describe and search images and sentences in one space.",
)
install_warning_format()
hide_flag_metavars()


def _show_version(value: bool) -> None:
    """``--version``: the version, and each shipped model's content sha256 (what ``vsekit models NAME``
    shows as "content sha256": two installs with the same lines hold the same models)."""
    if value:
        from vsekit.resources import shipped_content_sha256

        console.print(f"vsekit {__version__}", highlight=False)
        console.print("shipped models (content sha256):", highlight=False)
        for name, sha256 in shipped_content_sha256().items():
            console.print(f"  {name:<16} {sha256 or 'not in this install'}", highlight=False, soft_wrap=True)
        raise typer.Exit()


@app.callback()
def _options(
    version: bool = typer.Option(
        False,
        "--version",
        callback=_show_version,
        is_eager=True,
        help="Print the version and the shipped models' content sha256, and exit.",
    ),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Also print the library's progress notes."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print only results and errors."),
) -> None:
    """Visual-semantic embeddings: rank, describe and search images and sentences in one space."""
    configure_logging(verbose, quiet)


# in the order `vsekit --help` shows the groups (cli/_help.py): start, photos, models, training
app.command("demo", **help_for("demo"))(demo.demo)
search.index_app.command("duplicates")(duplicates.duplicates)
app.add_typer(search.index_app, name="index", **help_for("index"))
app.command("search", **help_for("search"))(search.search)
app.command("serve", **help_for("serve"))(serve.serve)
app.command("caption", **help_for("caption"))(captioning.caption)
app.command("models", **help_for("models"))(models.models)
app.command("eval", **help_for("eval"))(embedding.evaluate)
app.command("rank", **help_for("rank"))(embedding.rank)
app.command("align", **help_for("align"))(alignment.align)
app.command("regions", **help_for("regions"))(alignment.regions)
app.command("extract", **help_for("extract"))(features.extract)
app.command("train", **help_for("train"))(embedding.train)
app.command("train-captioner", **help_for("train-captioner"))(captioning.train_captioner)
app.command("train-scnlm", **help_for("train-scnlm"))(captioning.train_scnlm)
app.command("train-aligner", **help_for("train-aligner"))(alignment.train_aligner)
app.command("train-region-captioner", **help_for("train-region-captioner"))(alignment.train_region_captioner)


def main() -> None:
    # A file name that is not UTF-8 is printed as \xNN by every command (vsekit.errors.printable); should
    # one slip through (a library message), a strict UTF-8 locale escapes it instead of a traceback.
    for stream in (sys.stdout, sys.stderr):
        if getattr(stream, "errors", None) == "strict" and hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    # What the imports made so far (typer, rich, the commands) lives as long as the process: kept out of
    # every full collection the command runs (0.03 s of a cold `vsekit search`).
    gc.freeze()
    try:
        app()
    finally:
        # The process ends here: what it made is kept out of the collection the interpreter runs on exit,
        # which would only traverse it all once more (0.05 s of a cold `vsekit search`: pydantic, ONNX
        # Runtime and FAISS objects; bench/results/cold_search_1m.json). Exit still runs the atexit
        # handlers and flushes the standard streams, and what reference counts free is freed.
        gc.freeze()
