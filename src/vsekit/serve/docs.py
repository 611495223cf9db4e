"""``GET /docs``: the API's Swagger UI, served from this server so that it works with no network.

FastAPI's own ``/docs`` page loads Swagger UI from a CDN (blank offline, against the page's promise). The
assets come from the ``swagger-ui-bundle`` package instead, each at a fixed route (no path from the
request reaches the file system); without that package ``/docs`` is a short page linking the schema.
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, Response
from starlette.exceptions import HTTPException

__all__ = ["add_docs_routes"]

ASSETS = {
    "swagger-ui-bundle.js": "application/javascript",
    "swagger-ui.css": "text/css",
    "favicon.png": "image/png",
}


@functools.lru_cache(maxsize=1)
def _swagger_dir() -> Path | None:
    """The folder of Swagger UI's files in ``fastapi-offline`` (found without importing it)."""
    spec = importlib.util.find_spec("fastapi_offline")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "static"
    return folder if all((folder / name).is_file() for name in ASSETS) else None


@functools.lru_cache(maxsize=len(ASSETS))
def _asset(name: str) -> bytes:
    folder = _swagger_dir()
    if folder is None:
        raise HTTPException(404, "Swagger UI is not installed here (pip install fastapi-offline)")
    return (folder / name).read_bytes()


def _offline_page(title: str) -> str:
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}: API</title></head>
<body><h1>{title}: API</h1>
<p>The interactive API page needs the <code>fastapi-offline</code> package, which is not installed
here. The API's OpenAPI schema is at <a href="/openapi.json">/openapi.json</a>.</p></body></html>"""


def add_docs_routes(app: FastAPI) -> None:
    """``/docs`` and its assets under ``/docs/``, all from this server."""

    @app.get("/docs", response_class=HTMLResponse, include_in_schema=False)
    def docs() -> HTMLResponse:
        if _swagger_dir() is None:
            return HTMLResponse(_offline_page(app.title))
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=f"{app.title}: API",
            swagger_js_url="/docs/swagger-ui-bundle.js",
            swagger_css_url="/docs/swagger-ui.css",
            swagger_favicon_url="/docs/favicon.png",
            swagger_ui_parameters={"validatorUrl": None},  # the default validator is a web service
        )

    @app.get("/docs/{asset}", include_in_schema=False)
    def docs_asset(asset: str) -> Response:
        if asset not in ASSETS:
            raise HTTPException(404, f"no docs asset {asset[:60]!r}")
        return Response(_asset(asset), media_type=ASSETS[asset], headers={"cache-control": "max-age=86400"})
