"""`vsekit index duplicates`: exact copies and near-duplicate photos in an index (retrieval/duplicates.py)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.markup import escape

from vsekit.cli._common import console, show_progress, user_errors, write_json
from vsekit.errors import VsekitError, printable

if TYPE_CHECKING:
    from vsekit.retrieval.duplicates import DuplicateGroup, GroupPhoto

#: vsekit.retrieval.duplicates.DEFAULT_THRESHOLD, written out so that --help needs no torch (a test keeps
#: them equal)
DEFAULT_THRESHOLD = 0.74
KINDS = ("all", "exact", "near")


def duplicates(
    index: Path = typer.Argument(..., help="Index directory (vsekit index build)."),
    threshold: float = typer.Option(
        DEFAULT_THRESHOLD,
        "--threshold",
        help="Cosine at or above which two photos are near-duplicates (lower finds more, looser groups).",
    ),
    kind: str = typer.Option(
        "all", "--kind", help="Which groups: all, exact (same bytes or pixels) or near (near-duplicates)."
    ),
    json_out: Path | None = typer.Option(
        None,
        "--json",
        help='Write {"folder", "exact": [group, ...], "near": [...]} here; a group is {"kind", "score", '
        '"keeper", "photos": [{"path", "bytes", "width", "height", "taken", "copies"}, ...]}.',
    ),
) -> None:
    """Find duplicate photos: exact copies (the same bytes or the same pixels) and near-duplicates (re-saved,
    resized or slightly cropped copies, burst shots of one scene).

    Each group names a suggested keeper (the most pixels, then bytes, then the earliest date taken) and
    lists the photos' size, resolution and date; paths are relative to the index's photo folder. Nothing
    is deleted or moved: --json lists each group's others for your own script."""
    from vsekit.retrieval.duplicates import find_duplicates
    from vsekit.retrieval.index import Index

    with user_errors():
        if kind not in KINDS:
            raise VsekitError(f"unknown --kind {kind!r}; choose all, exact or near")
        opened = Index.open(index)
        exact, near = find_duplicates(
            opened.vectors, opened.paths, opened.records(), opened.photos_dir, threshold, show_progress()
        )
        exact, near = (exact if kind != "near" else []), (near if kind != "exact" else [])
        if json_out is not None:
            folder = str(opened.photos_dir)
            write_json(
                json_out,
                {
                    "folder": folder,
                    **{k: [g.to_dict() for g in v] for k, v in (("exact", exact), ("near", near))},
                },
            )
            console.print(f"wrote {len(exact)} exact and {len(near)} near-duplicate group(s) to {json_out}")
            return
        _print_groups(exact, near, len(opened), threshold)


def _print_groups(
    exact: list[DuplicateGroup], near: list[DuplicateGroup], total: int, threshold: float
) -> None:
    if not exact and not near:
        console.print(f"no duplicates among {total} photos (near-duplicates: cosine >= {threshold})")
        return
    number = 0
    for title, groups in (("exact copies", exact), ("near-duplicates", near)):
        if groups:
            console.print(f"[bold]{title}[/]: {len(groups)} group{'s' if len(groups) != 1 else ''}")
        for group in groups:
            number += 1
            how = "identical" if group.kind == "exact" else f"cosine >= {group.score:.2f}"
            console.print(f"group {number} ({len(group.photos)} photos, {how})")
            for n, photo in enumerate(group.photos):
                _print_photo(photo, keeper=n == 0)
    console.print("suggested keeper first (most pixels, bytes, earliest date); nothing was deleted")


def _print_photo(photo: GroupPhoto, keeper: bool) -> None:
    size = "?" if photo.width is None else f"{photo.width}x{photo.height}"
    facts = f"{_bytes(photo.bytes)}, {size}" + (f", {photo.taken}" if photo.taken else "")
    mark = "keep" if keeper else "    "
    console.print(f"  {mark} {escape(printable(photo.path))} ({facts})", highlight=False, soft_wrap=True)
    for copy in photo.copies:
        console.print(f"       + exact copy {escape(printable(copy))}", highlight=False, soft_wrap=True)


def _bytes(n: int) -> str:
    for unit, scale in (("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"
