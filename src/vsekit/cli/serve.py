"""`vsekit serve`: the web page and JSON API over a photo index."""

from __future__ import annotations

from pathlib import Path

import typer

from vsekit.cli._common import console, user_errors


def serve(
    index: Path = typer.Argument(..., help="Index directory (vsekit index build)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind (default: this machine only)."),
    port: int = typer.Option(8000, "--port", min=1, max=65535, help="TCP port."),
) -> None:
    """Serve a search page for INDEX at http://HOST:PORT (JSON API under /api/, OpenAPI at /docs)."""
    from vsekit.serve import run

    with user_errors(interrupted="server stopped"):
        console.print(f"serving {index} on http://{host}:{port} (Ctrl-C stops)")
        run(index, host=host, port=port)
