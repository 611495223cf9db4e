"""The `vsekit` command line: one module per command group, each command parses its options, calls one
library function and prints. Commands are registered here, explicitly; no library module imports this
package."""

from __future__ import annotations

import typer

from vsekit.cli import alignment, captioning, demo, embedding, features
from vsekit.cli._common import install_warning_format

__all__ = ["app", "main"]

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Visual-semantic embeddings: rank, describe and search images and sentences in one space.",
)
install_warning_format()

app.command("demo")(demo.demo)
app.command("extract")(features.extract)
app.command("train")(embedding.train)
app.command("eval")(embedding.evaluate)
app.command("rank")(embedding.rank)
app.command("train-captioner")(captioning.train_captioner)
app.command("caption")(captioning.caption)
app.command("train-scnlm")(captioning.train_scnlm)
app.command("train-aligner")(alignment.train_aligner)
app.command("align")(alignment.align)


def main() -> None:
    app()
