"""`vsekit models`: the shipped models' cards (what each is, its data, how it was chosen, its numbers, size
and licences), read from the cards shipped with the package (vsekit.resources.model_cards)."""

from __future__ import annotations

import json
from typing import Any

import typer
from rich.table import Table
from rich.text import Text

from vsekit.cli._common import console, plain, user_errors
from vsekit.errors import command
from vsekit.resources import model_card, model_cards


def _size(facts: dict[str, Any]) -> str:
    return f"{facts['mib']:.1f} MiB" if facts["bytes"] >= 2**20 // 10 else f"{facts['bytes'] / 1024:.1f} KiB"


# every column, and the few that stay readable in a narrow terminal (the rest: `vsekit models NAME`)
_COLUMNS = ("model", "what it is", "data", "chosen on", "val1000", "dev", "size", "licences")
_NARROW = ("model", "what it is", "chosen on", "dev", "size")
_WIDE_ENOUGH = 150  # characters: below this, eight folded columns are unreadable


def _rows(card: dict[str, Any]) -> list[dict[str, Text | str]]:
    """The card's overview row and one per attachment, by column name."""
    rows: list[dict[str, Text | str]] = [
        {
            "model": plain(card["name"], "bold"),
            "what it is": plain(card["summary"]),
            "data": plain(card["data"]),
            "chosen on": plain(card["selected_on"]),
            "val1000": plain(card["validation"]["headline"]),
            "dev": plain(card["dev"]["headline"]),
            "size": _size(card["file"]),
            "licences": plain(card["licence"]["summary"]),
        }
    ]
    for extra in card["attachments"]:
        row: dict[str, Text | str] = dict.fromkeys(_COLUMNS, "")
        row.update(
            {
                "model": plain(f"+ {extra['name']}"),
                "what it is": plain(extra["short"]),
                "dev": plain(extra.get("headline", "")),
                "size": _size(extra),
            }
        )
        rows.append(row)
    return rows


def _overview(cards: list[dict[str, Any]], width: int) -> Table:
    columns = _COLUMNS if width >= _WIDE_ENOUGH else _NARROW
    table = Table(
        title="Shipped models (dev: Flickr8K dev, 1,000 photos x 5,000 captions)",
        caption=None if columns == _COLUMNS else f"data, val1000 and licences: {command('models', 'NAME')}",
        show_lines=True,
    )
    for column in columns:
        table.add_column(column, overflow="fold", no_wrap=column == "size")
    for card in cards:
        for row in _rows(card):
            table.add_row(*(row[c] for c in columns))
    return table


def _recalls(dev: dict[str, Any]) -> str:
    if "i2t" not in dev:
        return dev["headline"]
    parts = [
        f"{side} R@1/5/10 {dev[side]['r1']:.1f} / {dev[side]['r5']:.1f} / {dev[side]['r10']:.1f}"
        for side in ("i2t", "t2i")
    ]
    return f"{'; '.join(parts)}; rsum {dev['rsum']:.1f}"


def _detail(card: dict[str, Any]) -> Table:
    facts = card["file"]
    training = card["training"]
    peak = "not recorded" if training["peak_rss_mb"] is None else f"{training['peak_rss_mb']:,} MB"
    rows = [
        ("file", f"{facts['name']}, {facts['bytes']:,} bytes, sha256 {facts['sha256']}"),
        ("content sha256", facts["content_sha256"]),
        ("what it is", f"{card['kind']}: {card['what']}"),
        ("method", card["method"]),
        ("backbone", card["backbone"]),
        ("text side", card["text_encoder"]),
        ("recipe", card["recipe"]),
        ("data", card["data"]),
        ("selection", card["selection"]),
        ("val1000", card["validation"]["headline"]),
        ("dev", _recalls(card["dev"])),
        ("speed", card["speed"]),
        ("training (2 cores)", f"{training['wall']}; peak memory {peak}. {training['note']}".strip()),
        ("licence", f"file: {card['licence']['file']}; data: {card['licence']['data']}"),
        ("needs", "; ".join(card["licence"]["needs"])),
        *(
            (f"+ {a['name']}", f"{a['what']} ({_size(a)}). {a.get('headline', '')}".strip())
            for a in card["attachments"]
        ),
        ("sources", "; ".join(card["sources"])),
    ]
    table = Table(title=f"{card['name']}: {card['summary']}", show_header=False, show_lines=False)
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    for key, value in rows:
        table.add_row(key, plain(value))
    return table


def models(
    name: str | None = typer.Argument(
        None, help="A shipped model (vse, captioner, ...): show its full card."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the card(s) as JSON instead of a table."),
) -> None:
    """List the shipped models: what each is, its data, how it was chosen, its numbers, size and licences."""
    with user_errors():
        found: Any = model_cards() if name is None else model_card(name)
    if as_json:
        typer.echo(json.dumps(found, indent=1, ensure_ascii=False))
    elif name is None:
        console.print(_overview(found, console.width))
    else:
        console.print(_detail(found))
