"""The web page and its JSON API for a photo index (FastAPI; served by ``vsekit serve``)."""

from vsekit.serve.app import ServeSettings, create_app, run

__all__ = ["ServeSettings", "create_app", "run"]
