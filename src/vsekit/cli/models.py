"""`vsekit models`: the shipped models' cards (what each is, its data, how it was chosen, its numbers, size
and licences), read from the cards shipped with the package (vsekit.resources.model_cards)."""

from __future__ import annotations

import json
from typing import Any

import typer
from rich.table import Table

from vsekit.cli._common import console, plain, user_errors
from vsekit.resources import model_card, model_cards


def _size(facts: dict[str, Any]) -> str:
    return f"{facts['mib']:.1f} MiB" if facts["bytes"] >= 2**20 // 10 else f"{facts['bytes'] / 1024:.1f} KiB"


def _overview(cards: list[dict[str, Any]]) -> Table:
    table = Table(title="Shipped models (dev: Flickr8K dev, 1,000 photos x 5,000 captions)", show_lines=True)
    for column in ("model", "what it is", "data", "chosen on", "val1000", "dev", "size", "licences"):
        table.add_column(column, overflow="fold")
    for card in cards:
        table.add_row(
            plain(card["name"], "bold"),
            plain(card["summary"]),
            plain(card["data"]),
            plain(card["selected_on"]),
            plain(card["validation"]["headline"]),
            plain(card["dev"]["headline"]),
            _size(card["file"]),
            plain(card["licence"]["summary"]),
        )
        for extra in card["attachments"]:
            headline = extra.get("headline", "")
            table.add_row(
                plain(f"+ {extra['name']}"),
                plain(extra["short"]),
                "",
                "",
                "",
                plain(headline),
                _size(extra),
                "",
            )
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
        console.print(_overview(found))
    else:
        console.print(_detail(found))
