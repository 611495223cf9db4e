"""Take the page's screenshots in docs/img (``make screenshots``): the search page, the lightbox, dark mode,
the browse view and a phone's view, from a real browser against a real server.

Needs what the browser tests need (Playwright and Chromium at /usr/bin/chromium or $VSEKIT_CHROMIUM; `make
browser-deps`). The photos are 48 of the bundled sample photos, 16 of them in a ``2024-summer`` folder
with an EXIF date taken (spread over the summer) and 8 more with dates in 2023, so the browse view shows
dated photos newest first and undated ones after them. Each picture is written as an 8-bit palette PNG
(the docs stay small) at 1100 x 760 (the phone: 390 x 844)."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from PIL import Image

import vsekit
from vsekit.resources import sample_data_path
from vsekit.serve import create_app
from vsekit.serve.app import uvicorn_config

logger = logging.getLogger("gen_screenshots")

QUERY = "a black dog jumps over hay bales"
DESKTOP = {"width": 1100, "height": 760}
PHONE = {"width": 390, "height": 844}
THUMBS_LOADED = (  # the thumbnails in view (those below it load lazily, when scrolled to)
    "() => [...document.querySelectorAll('#grid img')]"
    ".filter(i => i.getBoundingClientRect().top < innerHeight)"
    ".every(i => i.complete && i.naturalWidth > 0)"
)


def photo_folder(root: Path, n: int = 48) -> Path:
    """``n`` sample photos: 16 dated in ``2024-summer/``, 8 dated 2023 at the top, the rest undated."""
    samples = sorted((sample_data_path() / "Images").glob("*.jpg"))[:n]
    (root / "2024-summer").mkdir(parents=True)
    for k, src in enumerate(samples):
        if k < 16:
            taken = f"2024:{6 + k // 6:02d}:{1 + 2 * (k % 6) + k // 6:02d} {9 + k % 8:02d}:15:00"
            dated(src, root / "2024-summer" / src.name, taken)
        elif k < 24:
            dated(src, root / src.name, f"2023:{1 + (k - 16):02d}:14 12:00:00")
        else:
            shutil.copyfile(src, root / src.name)
    return root


def dated(src: Path, dst: Path, taken: str) -> None:
    exif = Image.Exif()
    exif.get_ifd(0x8769)[36867] = taken
    Image.open(src).convert("RGB").save(dst, quality=92, exif=exif.tobytes())


@contextlib.contextmanager
def serving(index: vsekit.Index) -> Iterator[str]:
    import uvicorn

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn_config(create_app(index), "127.0.0.1", port))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def save(page, path: Path, full_page: bool = False) -> None:
    """A screenshot of ``page`` as an 8-bit palette PNG (the search box not focused: no outline on it)."""
    page.evaluate("() => document.getElementById('q').blur()")
    raw = path.with_suffix(".raw.png")
    page.screenshot(path=str(raw), full_page=full_page)
    Image.open(raw).convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(
        path, optimize=True
    )
    raw.unlink()
    logger.info("wrote %s (%d KB)", path, path.stat().st_size // 1024)


def open_page(browser, url: str, viewport: dict, scheme: str = "light"):
    context = browser.new_context(viewport=viewport, color_scheme=scheme)
    page = context.new_page()
    page.set_default_timeout(90_000)
    page.goto(url)
    return page


def search_shots(browser, url: str, out: Path) -> None:
    address = f"{url}/?q={QUERY.replace(' ', '+')}"
    for scheme, name in (("light", "page.png"), ("dark", "dark.png")):
        page = open_page(browser, address, DESKTOP, scheme)
        page.wait_for_selector("#grid .hit")
        page.wait_for_function(THUMBS_LOADED)
        save(page, out / name)
        if scheme == "light":
            lightbox_shot(page, out)
        page.context.close()


def lightbox_shot(page, out: Path) -> None:
    page.locator("#grid .hit").first.click()
    page.wait_for_selector("#lb-boxes .box")
    page.wait_for_selector("#lb-captions li")
    page.wait_for_function("() => document.getElementById('lb-img').naturalWidth > 0")
    save(page, out / "lightbox.png")


def browse_shots(browser, url: str, out: Path) -> None:
    page = open_page(browser, url, DESKTOP)
    page.wait_for_selector("#grid .hit")
    page.wait_for_function(THUMBS_LOADED)
    save(page, out / "browse.png")
    page.context.close()
    phone = open_page(browser, f"{url}/?q={QUERY.replace(' ', '+')}", PHONE)
    phone.wait_for_selector("#grid .hit")
    phone.wait_for_function(THUMBS_LOADED)
    save(phone, out / "mobile.png")
    phone.context.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "img")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    from playwright.sync_api import sync_playwright

    chromium = os.environ.get("VSEKIT_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    with tempfile.TemporaryDirectory() as tmp:
        folder = photo_folder(Path(tmp) / "photos")
        index = vsekit.Index.build(folder, Path(tmp) / "index", progress=False)
        with serving(index) as url, sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            search_shots(browser, url, args.out)
            browse_shots(browser, url, args.out)
            browser.close()


if __name__ == "__main__":
    main()
