"""`vsekit serve`: the web page and JSON API over a photo index."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from vsekit.cli._common import console, user_errors


def serve(
    index: Path = typer.Argument(..., help="Index directory (vsekit index build)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind (default: this machine only)."),
    port: int = typer.Option(8000, "--port", min=0, max=65535, help="TCP port (0: any free port)."),
    allow_host: list[str] = typer.Option(
        [],
        "--allow-host",
        help=(
            "Another host name the page may be opened by (besides localhost, 127.0.0.1, [::1] and --host); "
            "repeatable. Requests naming any other Host are refused."
        ),
    ),
) -> None:
    """Serve a search page for INDEX at http://HOST:PORT (JSON API under /api/, OpenAPI at /docs)."""
    from vsekit.serve import run

    def warming() -> None:
        console.print(escape(f"loading the models for {index} (the first search then answers at once)"))

    def ready(url: str) -> None:
        console.print(escape(f"serving {index} on {url} (Ctrl-C stops)"))

    with user_errors(interrupted="server stopped"):
        run(index, host=host, port=port, allow_hosts=tuple(allow_host), ready=ready, warming=warming)
