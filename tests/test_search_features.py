"""Photo search as a person uses it (issue 22 items 3-7, issue 27 item 6), through the CLI and the API:
the folder and date filters equal filtering the unfiltered results in Python; ``--captions`` stores the
shipped captioner's caption of each photo once (an unchanged photo is not captioned again, a changed one
is); results carry their captions; ``--rerank`` and ``rerank=`` equal the library's re-rank; ``weak`` is
the calibrated threshold applied to the cosines; ``--explain`` writes one picture per hit."""

from __future__ import annotations

import json
import shutil

import pytest
from fastapi.testclient import TestClient
from PIL import Image
from typer.testing import CliRunner

import vsekit
from search_helpers import SAMPLE_IMAGES
from vsekit.cli import app
from vsekit.retrieval.confidence import is_weak, load_confidence
from vsekit.serve.app import create_app

runner = CliRunner()
QUERY = "a dog runs on the grass"
DATES = {"a": "2019:06:01 10:00:00", "b": "2020:03:15 12:00:00", "c": "2021:12:24 18:30:00"}


def _dated(src, dst, when: str) -> None:
    """``src`` saved as ``dst`` with EXIF DateTimeOriginal ``when``."""
    exif = Image.Exif()
    exif.get_ifd(0x8769)[36867] = when
    Image.open(src).convert("RGB").save(dst, quality=92, exif=exif)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("features")
    photos = root / "photos"
    for folder in ("home", "trip", "trip/day2"):
        (photos / folder).mkdir(parents=True)
    _dated(SAMPLE_IMAGES[0], photos / "home" / "a.jpg", DATES["a"])
    _dated(SAMPLE_IMAGES[1], photos / "trip" / "b.jpg", DATES["b"])
    _dated(SAMPLE_IMAGES[2], photos / "trip" / "day2" / "c.jpg", DATES["c"])
    shutil.copyfile(SAMPLE_IMAGES[3], photos / "undated.jpg")
    result = runner.invoke(app, ["index", "build", str(photos), "--out", str(root / "index"), "--captions"])
    assert result.exit_code == 0, result.output
    return photos, root / "index", result


def _search(index, *args: str) -> dict:
    out = index.parent / "hits.jsonl"
    result = runner.invoke(app, ["search", str(index), *args, "--json", str(out)])
    assert result.exit_code == 0, result.output
    return json.loads(out.read_text(encoding="utf-8"))


def test_build_with_captions_stores_the_captioners_caption_of_each_photo(built):
    photos, index, result = built
    assert "4 photos captioned" in result.output
    opened = vsekit.Index.open(index)
    stored = {p: opened.caption(p) for p in opened.paths}
    expected = vsekit.load_captioner().describe([photos / p for p in stored], n=1)
    assert stored == {p: c[0] for p, c in zip(stored, expected, strict=True)}
    row = _search(index, QUERY, "--top", "4")
    assert {r["path"]: r["caption"] for r in row["results"]} == stored


def test_captions_are_made_once_and_again_for_a_changed_photo(built, tmp_path):
    photos, _, _ = built
    mine, index = tmp_path / "photos", tmp_path / "index"
    shutil.copytree(photos, mine)
    first = runner.invoke(app, ["index", "build", str(mine), "--out", str(index), "--captions"])
    assert first.exit_code == 0 and "4 photos captioned" in first.output, first.output
    again = runner.invoke(app, ["index", "build", str(mine), "--out", str(index), "--captions"])
    assert again.exit_code == 0 and "captioned" not in again.output  # nothing new to caption
    opened = vsekit.Index.open(index)
    before = {p: opened.caption(p) for p in opened.paths}
    shutil.copyfile(SAMPLE_IMAGES[5], mine / "undated.jpg")  # another picture under the same name
    result = runner.invoke(app, ["index", "update", str(index)])  # the index stores captions: kept up
    assert result.exit_code == 0 and "1 photos captioned" in result.output, result.output
    after = vsekit.Index.open(index)
    assert {p: after.caption(p) for p in after.paths if p != "undated.jpg"} == {
        p: c for p, c in before.items() if p != "undated.jpg"
    }
    assert after.caption("undated.jpg") == vsekit.load_captioner().describe([SAMPLE_IMAGES[5]], n=1)[0][0]
    assert after.caption("undated.jpg") != before["undated.jpg"]


def test_folder_and_date_filters_equal_filtering_in_python(built):
    _, index, _ = built
    everything = [r["path"] for r in _search(index, QUERY, "--top", "4")["results"]]
    assert sorted(everything) == ["home/a.jpg", "trip/b.jpg", "trip/day2/c.jpg", "undated.jpg"]
    cases = {
        ("--folder", "trip"): lambda p: p.startswith("trip/"),
        ("--folder", "trip/day2"): lambda p: p.startswith("trip/day2/"),
        ("--taken-after", "2020-01-01"): lambda p: p in ("trip/b.jpg", "trip/day2/c.jpg"),
        ("--taken-before", "2020-03-15"): lambda p: p == "home/a.jpg",
        ("--taken-after", "2020-01-01", "--taken-before", "2021-01-01"): lambda p: p == "trip/b.jpg",
    }
    client = TestClient(create_app(vsekit.Index.open(index)), base_url="http://127.0.0.1")
    for args, keep in cases.items():
        found = [r["path"] for r in _search(index, QUERY, "--top", "4", *args)["results"]]
        assert found == [p for p in everything if keep(p)], args
        params = {a.lstrip("-").replace("-", "_"): v for a, v in zip(args[::2], args[1::2], strict=True)}
        answer = client.get("/api/search", params={"q": QUERY, "k": 4, **params})
        assert [r["path"] for r in answer.json()["results"]] == found, args
    bad = client.get("/api/search", params={"q": QUERY, "taken_after": "last tuesday"})
    assert bad.status_code == 400 and "taken_after" in bad.json()["error"]


def test_api_search_says_weak_from_the_calibrated_threshold_and_carries_captions(built):
    _, index, _ = built
    opened = vsekit.Index.open(index)
    details = opened.info()
    calibration = load_confidence(details["model"], details["model_sha256"])
    assert calibration is not None  # the shipped vse has one
    client = TestClient(create_app(opened), base_url="http://127.0.0.1")
    for query in (QUERY, "zzzz qqqq"):
        body = client.get("/api/search", params={"q": query, "k": 4}).json()
        scores = [h.score for h in opened.search(query, k=4)]
        assert body["weak"] == is_weak(scores, calibration.weak_below)
        assert all(r["caption"] == opened.caption(r["path"]) for r in body["results"])
    assert "warning" in client.get("/api/search", params={"q": "犬が芝生を走る"}).json()


def test_rerank_through_the_api_and_the_cli_equals_the_library(built, tmp_path):
    _, index, _ = built
    opened = vsekit.Index.open(index)
    expected = [(h.path, round(h.score, 6)) for h in opened.search(QUERY, k=4, rerank=3)]
    client = TestClient(create_app(opened), base_url="http://127.0.0.1")
    assert client.get("/api/info").json()["rerank_max"] == 50
    body = client.get("/api/search", params={"q": QUERY, "k": 4, "rerank": 3}).json()
    assert [(r["path"], r["score"]) for r in body["results"]] == expected
    assert client.get("/api/search", params={"q": QUERY, "rerank": 51}).status_code == 422
    row = _search(index, QUERY, "--top", "4", "--rerank", "3")
    assert [(r["path"], r["score"]) for r in row["results"]] == expected
    plain = [h.score for h in opened.search(QUERY, k=4)]
    assert row["weak"] == is_weak(plain, load_confidence("vse", opened.info()["model_sha256"]).weak_below)


def test_explain_writes_one_picture_per_hit(built, tmp_path):
    _, index, _ = built
    out = tmp_path / "why"
    result = runner.invoke(app, ["search", str(index), QUERY, "--top", "2", "--explain", str(out)])
    assert result.exit_code == 0, result.output
    hits = [r["path"] for r in _search(index, QUERY, "--top", "2")["results"]]
    expected = [
        f"{n:02d}-{path.rsplit('/', 1)[-1].removesuffix('.jpg')}.png" for n, path in enumerate(hits, 1)
    ]
    assert sorted(p.name for p in out.iterdir()) == expected
    assert all(Image.open(p).verify() is None for p in out.iterdir())  # readable PNGs
    refused = runner.invoke(
        app, ["search", str(index), "--image", str(SAMPLE_IMAGES[0]), "--explain", str(out)]
    )
    assert refused.exit_code != 0 and "--explain apply to a sentence" in refused.output
