"""`vsekit index duplicates`: groups of near-duplicate photos in an index (retrieval/duplicates.py)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from vsekit.cli._common import console, show_progress, user_errors, write_json
from vsekit.errors import printable

#: vsekit.retrieval.duplicates.DEFAULT_THRESHOLD, written out so that --help needs no torch (a test keeps
#: them equal)
DEFAULT_THRESHOLD = 0.74


def duplicates(
    index: Path = typer.Argument(..., help="Index directory (vsekit index build)."),
    threshold: float = typer.Option(
        DEFAULT_THRESHOLD,
        "--threshold",
        help="Cosine at or above which two photos are near-duplicates (lower finds more, looser groups).",
    ),
    json_out: Path | None = typer.Option(None, "--json", help='Write {"groups": [[path, ...], ...]} here.'),
) -> None:
    """Find groups of near-duplicate photos: re-saved, resized or slightly cropped copies of one shot.

    Paths are relative to the index's photo folder; groups are listed largest first."""
    from vsekit.retrieval.duplicates import duplicate_groups
    from vsekit.retrieval.index import Index

    with user_errors():
        opened = Index.open(index)
        groups = duplicate_groups(opened.vectors, opened.paths, threshold, progress=show_progress())
        if json_out is not None:
            write_json(json_out, {"groups": groups})
            console.print(f"wrote {len(groups)} group(s) to {json_out}")
            return
        if not groups:
            console.print(f"no near-duplicates among {len(opened)} photos (threshold {threshold})")
            return
        for number, group in enumerate(groups, 1):
            console.print(f"[bold]group {number}[/] ({len(group)} photos)")
            for path in group:
                console.print(f"  {escape(printable(path))}", highlight=False, soft_wrap=True)
