"""The `vsekit` command line: one module per command group, each command parses its options, calls one
library function and prints. Commands are registered here, explicitly; no library module imports this
package."""

from __future__ import annotations

import typer

from vsekit.cli import alignment, captioning, demo, duplicates, embedding, features, search, serve
from vsekit.cli._common import configure_logging, console, hide_flag_metavars, install_warning_format
from vsekit.version import __version__

__all__ = ["app", "main"]

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Visual-semantic embeddings: rank, describe and search images and sentences in one space.",
)
install_warning_format()
hide_flag_metavars()


def _show_version(value: bool) -> None:
    if value:
        console.print(f"vsekit {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: bool = typer.Option(
        False, "--version", callback=_show_version, is_eager=True, help="Print the version and exit."
    ),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Also print the library's progress notes."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print only results and errors."),
) -> None:
    """Visual-semantic embeddings: rank, describe and search images and sentences in one space."""
    configure_logging(verbose, quiet)


app.command("demo")(demo.demo)
app.command("extract")(features.extract)
app.command("train")(embedding.train)
app.command("eval")(embedding.evaluate)
app.command("rank")(embedding.rank)
app.command("train-captioner")(captioning.train_captioner)
app.command("caption")(captioning.caption)
app.command("train-scnlm")(captioning.train_scnlm)
search.index_app.command("duplicates")(duplicates.duplicates)
app.add_typer(search.index_app, name="index")
app.command("search")(search.search)
app.command("serve")(serve.serve)
app.command("train-aligner")(alignment.train_aligner)
app.command("align")(alignment.align)
app.command("train-region-captioner")(alignment.train_region_captioner)
app.command("regions")(alignment.regions)


def main() -> None:
    app()
