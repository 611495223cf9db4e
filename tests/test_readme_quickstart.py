"""The README's "Your own photos" commands run as written, on a folder made of sample photos."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from vsekit.resources import pretrained_path, sample_data_path
from vsekit.retrieval.index import Index

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(
    not pretrained_path("vse").is_file() or not pretrained_path("captioner").is_file(),
    reason="the shipped models are not in this checkout",
)


def quickstart_commands() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Your own photos") :]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return [line.split("  #")[0].strip() for line in block.splitlines() if line.strip()]


def test_the_readme_quick_start_runs_on_a_photo_folder(tmp_path):
    photos = tmp_path / "photos"
    photos.mkdir()
    for k, src in enumerate(sorted((sample_data_path() / "Images").glob("*.jpg"))[:6]):
        shutil.copy(src, photos / ("a.jpg" if k == 0 else src.name))
    commands = quickstart_commands()
    assert [c.split()[:2] for c in commands] == [
        ["vsekit", "caption"],
        ["vsekit", "index"],
        ["vsekit", "search"],
        ["vsekit", "search"],
        ["vsekit", "serve"],
    ]
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "VSEKIT_CACHE": str(tmp_path / "cache")}
    outputs = []
    for command in commands[:-1]:  # `serve` runs until stopped: the page has its own tests
        args = [sys.executable, "-m", "vsekit", *shlex.split(command)[1:]]
        done = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
        outputs.append(done.stdout)
    assert "a.jpg" in outputs[0]  # every photo described
    assert (tmp_path / "photos.index" / "store.sqlite").is_file()
    assert "left out: a.jpg" in outputs[3]  # more like a photo: the others, itself left out
    assert len(Index.open(tmp_path / "photos.index")) == 6
