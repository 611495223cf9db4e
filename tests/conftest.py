"""Shared fixtures. `flickr8k_full` finds the real Flickr8K (train + dev) or skips the test that needs it;
`photo_index` builds a small photo index for the tests that serve one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from corpus_helpers import torch_threads  # tests/ is on sys.path under pytest

# The shared data lives next to the repository: <repo>/../shared/data/flickr8k.
DEFAULT_SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def find_flickr8k_full() -> tuple[Path | None, str]:
    """(path, "") when the real Flickr8K is present, else (None, reason). VSEKIT_SHARED_DATA overrides.

    VSEKIT_SHARED_DATA may name the shared data folder (holding `flickr8k/`) or the Flickr8K folder itself.
    """
    env = os.environ.get("VSEKIT_SHARED_DATA")
    base = Path(env).expanduser() if env else DEFAULT_SHARED_DATA
    candidates = [base / "flickr8k", base] if env else [base / "flickr8k"]
    for candidate in candidates:
        if (candidate / "Images").is_dir() and (candidate / "Flickr8k_text").is_dir():
            return candidate, ""
    source = "VSEKIT_SHARED_DATA" if env else "the default location"
    return None, f"real Flickr8K not found at {candidates[0]} ({source}); set VSEKIT_SHARED_DATA to run this"


@pytest.fixture(scope="session")
def flickr8k_full() -> Path:
    """Path of the real Flickr8K folder (Images/, Flickr8k_text/); skips with the reason when absent."""
    path, reason = find_flickr8k_full()
    if path is None:
        pytest.skip(reason)
    return path


@pytest.fixture(scope="session")
def photo_index(tmp_path_factory):
    """``photo_index(name, n)``: a ``vsekit.Index`` over ``n`` bundled sample photos, built in a fresh
    folder ``<name>N/`` (``photos/`` and ``index/``); callable from fixtures of any scope."""

    def build(name: str, n: int):
        import vsekit
        from search_helpers import make_photo_folder

        photos = make_photo_folder(tmp_path_factory.mktemp(name) / "photos", n=n)
        return vsekit.Index.build(photos, photos.parent / "index", progress=False)

    return build


@pytest.fixture
def one_torch_thread():
    """The test runs on one torch thread (see ``corpus_helpers.torch_threads``)."""
    with torch_threads(1):
        yield
