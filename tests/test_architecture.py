"""The package's layers hold (import-linter contracts in pyproject.toml), and the contracts have teeth."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytest.importorskip("importlinter", reason="pip install import-linter (the dev extra)")


def lint_imports(src: Path, config: Path) -> subprocess.CompletedProcess:
    """Run lint-imports on the vsekit package found under ``src`` with the contracts in ``config``."""
    code = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    return subprocess.run(
        [sys.executable, "-c", code, "--config", str(config), "--no-cache"],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"},
        cwd=src.parent,
        timeout=300,
    )


def test_the_layers_hold():
    result = lint_imports(ROOT / "src", ROOT / "pyproject.toml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "forbidden_import", "contract"),
    [
        ("data/corpus.py", "import vsekit.cli", "vsekit layers"),  # the library importing the CLI
        ("vision/fne.py", "import vsekit.text", "vsekit layers"),  # the image side knowing a text encoder
        ("metrics/ranking.py", "import vsekit.embedding.model", "vsekit layers"),  # metrics knowing a model
        ("data/vocab.py", "import torch", "corpus readers know no models"),
    ],
)
def test_a_forbidden_import_breaks_a_contract(tmp_path, module, forbidden_import, contract):
    src = tmp_path / "src"
    shutil.copytree(
        ROOT / "src" / "vsekit", src / "vsekit", ignore=shutil.ignore_patterns("pretrained", "sample")
    )
    target = src / "vsekit" / module
    target.write_text(target.read_text() + f"\n{forbidden_import}  # noqa\n")
    result = lint_imports(src, ROOT / "pyproject.toml")
    assert result.returncode != 0
    assert f"{contract}" in result.stdout and "BROKEN" in result.stdout
