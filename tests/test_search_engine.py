"""Nearest-neighbour engines against brute force, and Eq. 15 arithmetic against hand-computed vectors."""

import gc
import hashlib
import mmap

import numpy as np
import pytest

from vsekit.errors import VsekitError
from vsekit.resources import pretrained_path
from vsekit.retrieval.arithmetic import (
    PAPER_RULE,
    ArithmeticRule,
    arithmetic_query,
    load_arithmetic_rule,
    resort_by_mean,
)
from vsekit.retrieval.search import (
    build_ann,
    calibrate,
    deserialize_ann,
    exact_search,
    faiss_search,
    resolve_engine,
    serialize_ann,
    set_search_params,
)


def unit_vectors(n, dim, seed):
    x = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def brute_force(vectors, queries, k):
    scores = queries @ vectors.T
    rows = np.array([np.lexsort((np.arange(len(row)), -row))[:k] for row in scores])
    return np.take_along_axis(scores, rows, axis=1), rows


@pytest.mark.parametrize("chunk_rows", [7, 64, 10_000])
def test_exact_search_equals_brute_force_across_chunks(chunk_rows):
    vectors, queries = unit_vectors(300, 16, 0), unit_vectors(5, 16, 1)
    scores, rows = exact_search(vectors, queries, 10, chunk_rows=chunk_rows)
    ref_s, ref_r = brute_force(vectors, queries, 10)
    np.testing.assert_array_equal(rows, ref_r)
    np.testing.assert_allclose(scores, ref_s, rtol=1e-6)


def test_exact_search_on_float16_memmap_and_k_beyond_n(tmp_path):
    vectors = unit_vectors(5, 8, 2)
    np.save(tmp_path / "v.npy", vectors.astype(np.float16))
    mapped = np.load(tmp_path / "v.npy", mmap_mode="r")
    scores, rows = exact_search(mapped, vectors[:1], 8, chunk_rows=2)
    assert rows[0, 0] == 0 and list(rows[0, 5:]) == [-1, -1, -1] and np.isinf(scores[0, 5:]).all()
    assert sorted(rows[0, :5]) == [0, 1, 2, 3, 4]


def test_exact_search_ties_keep_row_order():
    vectors = np.array([[1, 0], [0, 1], [1, 0], [1, 0]], dtype=np.float32)
    _, rows = exact_search(vectors, np.array([[1, 0]], np.float32), 3, chunk_rows=1)
    assert rows.tolist() == [[0, 2, 3]]


def test_faiss_flat_equals_exact_and_ann_recall():
    vectors, queries = unit_vectors(3000, 32, 3), unit_vectors(40, 32, 4)
    ex_s, ex_r = exact_search(vectors, queries, 10)
    fl_s, fl_r = faiss_search(build_ann(vectors, "flat"), queries, 10)
    np.testing.assert_array_equal(fl_r, ex_r)
    np.testing.assert_allclose(fl_s, ex_s, atol=1e-5)
    for engine in ("hnsw", "ivf"):  # calibrated on the collection, measured on other queries
        index = build_ann(vectors, engine)
        set_search_params(index, calibrate(index, vectors))
        _, rows = faiss_search(index, queries, 10)
        recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(rows, ex_r, strict=True)])
        assert recall >= 0.95, (engine, recall)


def test_engine_rules():
    assert resolve_engine("auto", 10) == "exact"
    assert resolve_engine("auto", 1_000_000) == "hnsw"
    assert resolve_engine("flat", 10) == "flat"
    with pytest.raises(VsekitError, match="annoy"):
        resolve_engine("annoy", 10)


def test_eq15_by_hand():
    q = np.array([3.0, 0.0, 0.0])  # normalised to (1, 0, 0) first
    minus = np.array([[0.0, 2.0, 0.0]])  # (0, 1, 0)
    plus = np.array([[0.0, 0.0, 1.0], [0.0, 0.0, 5.0]])  # two terms, each (0, 0, 1)
    # (1, 0, 0) - (0, 1, 0) + 2 (0, 0, 1) = (1, -1, 2), norm sqrt(6)
    expected = np.array([1.0, -1.0, 2.0]) / np.sqrt(6.0)
    np.testing.assert_allclose(arithmetic_query(q, plus, minus), expected, rtol=1e-6)
    np.testing.assert_allclose(arithmetic_query(q), [1.0, 0.0, 0.0])
    with pytest.raises(VsekitError, match="cancels"):
        arithmetic_query(np.array([1.0, 0.0]), None, np.array([[1.0, 0.0]]))


def test_the_words_weight_by_hand():
    # q = (2, 0) -> (1, 0); plus (0, 1); weight 2: (1, 0) + 2 (0, 1) = (1, 2), norm sqrt(5)
    q = np.array([2.0, 0.0])
    np.testing.assert_allclose(
        arithmetic_query(q, np.array([[0.0, 1.0]]), weight=2.0), np.array([1.0, 2.0]) / np.sqrt(5), rtol=1e-6
    )
    # minus (0, -3) -> (0, -1), plus (0, 4) -> (0, 1); weight 1.5: (1, 0) + 1.5 ((0, 1) - (0, -1)) = (1, 3)
    got = arithmetic_query(q, np.array([[0.0, 4.0]]), np.array([[0.0, -3.0]]), weight=1.5)
    np.testing.assert_allclose(got, np.array([1.0, 3.0]) / np.sqrt(10), rtol=1e-6)
    # weight 1 is Eq. 15 as it was: (1, 0) - (0, -1) + (0, 1) = (1, 2)
    np.testing.assert_allclose(
        arithmetic_query(q, np.array([[0.0, 4.0]]), np.array([[0.0, -3.0]])),
        np.array([1.0, 2.0]) / np.sqrt(5),
    )
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(VsekitError, match="weight must be a number above 0"):
            arithmetic_query(q, np.array([[0.0, 1.0]]), weight=bad)


def test_a_weight_above_one_brings_the_plus_word_photo_to_the_top():
    # a tiny index: the source photo's own scene ("the cat again") and a photo of the plus word ("a dog"),
    # the query photo at (1, 0, 0), minus "cat" (0, 1, 0), plus "dog" (0, 0, 1)
    cat_again = np.array([0.8, 0.0, 0.6])
    dog = np.array([0.3, 0.0, np.sqrt(1 - 0.09)])
    photos = np.stack([cat_again, dog]).astype(np.float32)
    q, minus, plus = np.array([1.0, 0.0, 0.0]), np.array([[0.0, 1.0, 0.0]]), np.array([[0.0, 0.0, 1.0]])
    # weight 1: (1, -1, 1) / sqrt(3): cat 1.4 / sqrt(3) = 0.81 > dog 1.25 / sqrt(3) = 0.72
    _, rows = exact_search(photos, arithmetic_query(q, plus, minus)[None], 1)
    assert rows[0].tolist() == [0]
    # weight 2: (1, -2, 2) / 3: cat 2.0 / 3 = 0.67 < dog 2.21 / 3 = 0.74
    _, rows = exact_search(photos, arithmetic_query(q, plus, minus, weight=2.0)[None], 1)
    assert rows[0].tolist() == [1]


def test_the_shipped_vse_has_its_rule_and_other_models_the_papers():
    sha256 = hashlib.sha256(pretrained_path("vse").read_bytes()).hexdigest()
    rule = load_arithmetic_rule("vse", sha256)
    assert rule == ArithmeticRule(1.25, "a photo of {}")  # chosen on flickr8k-val1000 (arithmetic.json)
    assert rule.texts(["dog", "red car"]) == ["a photo of dog", "a photo of red car"]
    assert rule.with_weight(3.0) == ArithmeticRule(3.0, "a photo of {}") and rule.with_weight(None) is rule
    assert load_arithmetic_rule("vse", "0" * 64) == PAPER_RULE  # another vse file: not its rule
    assert load_arithmetic_rule("bow", sha256) == PAPER_RULE  # bow ships none: weight 1, bare words
    assert load_arithmetic_rule("/some/model.safetensors", sha256) == PAPER_RULE
    assert PAPER_RULE.texts(["dog"]) == ["dog"] and PAPER_RULE.weight == 1.0
    with pytest.raises(VsekitError, match="one '{}'"):
        ArithmeticRule(1.0, "a photo")


def test_resort_by_mean_by_hand():
    # three images near (1, 0) and one odd one out at (0, 1); the mean is (0.75, 0.25) roughly
    vectors = np.array([[0, 1], [1, 0], [0.9, 0.1], [0.95, 0.05]], dtype=np.float32)
    # mean of all four = (0.7125, 0.2875): distances: row0 1.01, row1 0.41, row2 0.27, row3 0.33
    assert resort_by_mean(vectors, np.array([0, 1, 2, 3])).tolist() == [2, 3, 1, 0]


def test_exact_search_float16_storage_is_exact_on_near_ties():
    # float16 storage is scored in float16 first: rows whose scores differ by less than float16's
    # resolution (about 1e-3 near 1) must still come out in the order of their stored values' exact
    # scores (float64 here; float32 sums in another order may swap rows 1e-7 apart, so scores are compared)
    base = unit_vectors(1, 64, 5)[0]
    rng = np.random.default_rng(6)
    vectors = base + 1e-3 * rng.standard_normal((400, 64)).astype(np.float32)
    vectors = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float16)
    queries = np.vstack([base, unit_vectors(3, 64, 7)])
    scores, rows = exact_search(vectors, queries, 10, chunk_rows=128)
    exact = queries.astype(np.float64) @ vectors.astype(np.float64).T
    ref_s = -np.sort(-exact, axis=1)[:, :10]
    np.testing.assert_allclose(scores, ref_s, atol=1e-6)
    np.testing.assert_allclose(np.take_along_axis(exact, rows, axis=1), ref_s, atol=1e-6)
    assert (np.diff(exact[0][rows[0]]) < 1e-3).all() and np.ptp(ref_s[0]) < 1e-4  # near ties indeed


def test_calibration_takes_the_smallest_setting_meeting_the_sentence_target():
    """Sentence-like queries (off the photos' distribution, as text is across the modality gap) get
    recall@10 >= 0.99 at the chosen setting, and half of it falls short (the smallest doubling)."""
    vectors = unit_vectors(3000, 32, 8)
    shift = unit_vectors(1, 32, 9)
    texts = vectors[:300] + 0.8 * shift + 0.6 * unit_vectors(300, 32, 10)
    texts /= np.linalg.norm(texts, axis=1, keepdims=True)
    _, truth = exact_search(vectors, texts, 10)

    def recall(index):
        _, rows = faiss_search(index, texts, 10)
        return np.mean([len(set(a) & set(b)) / 10 for a, b in zip(rows, truth, strict=True)])

    for engine, name, smallest in (("hnsw", "efSearch", 16), ("ivf", "nprobe", 1)):
        index = build_ann(vectors, engine)
        photo_only = calibrate(index, vectors)[name]
        chosen = calibrate(index, vectors, texts)[name]
        assert chosen >= photo_only
        set_search_params(index, {name: chosen})
        assert recall(index) >= 0.99, (engine, chosen)
        if chosen > smallest:
            set_search_params(index, {name: chosen // 2})
            assert recall(index) < 0.99 or calibrate(index, vectors)[name] == chosen, (engine, chosen)


def test_exact_search_float16_many_queries_in_groups():
    # more than 256 queries: the float32 rescoring goes in groups; each query's answer is unchanged
    vectors = unit_vectors(500, 16, 11).astype(np.float16)
    queries = unit_vectors(600, 16, 12)
    scores, rows = exact_search(vectors, queries, 5, chunk_rows=128)
    one_s, one_r = exact_search(vectors, queries[-3:], 5, chunk_rows=128)
    np.testing.assert_array_equal(rows[-3:], one_r)
    exact = queries.astype(np.float64) @ vectors.astype(np.float64).T
    np.testing.assert_allclose(scores, -np.sort(-exact, axis=1)[:, :5], atol=1e-6)


def test_float16_search_without_torch_answers_as_with_it(monkeypatch):
    # a process that has not imported torch scores a small float16 index in NumPy (no 2 s torch import
    # for a cold `vsekit search`); the candidates are rescored exactly either way, so the answers,
    # near ties included, are the same bits
    import vsekit.retrieval.search as search

    base = unit_vectors(1, 64, 5)[0]
    near = base + 1e-3 * np.random.default_rng(6).standard_normal((300, 64)).astype(np.float32)
    vectors = np.vstack([near / np.linalg.norm(near, axis=1, keepdims=True), unit_vectors(300, 64, 13)])
    vectors = vectors.astype(np.float16)
    queries = np.vstack([base, unit_vectors(5, 64, 14)])
    with_torch = exact_search(vectors, queries, 10, chunk_rows=128)
    calls = []
    real = search._f16_scores_numpy
    monkeypatch.setattr(search, "_f16_scores_numpy", lambda q, b: calls.append(len(b)) or real(q, b))
    monkeypatch.setattr(search, "_torch_loaded", lambda: False)
    without = exact_search(vectors, queries, 10, chunk_rows=128)
    assert calls == [128, 128, 128, 128, 88]  # every block went through NumPy
    np.testing.assert_array_equal(without[0], with_torch[0])
    np.testing.assert_array_equal(without[1], with_torch[1])
    monkeypatch.setattr(search, "F16_NUMPY_MAX", 600 * 64 - 1)  # a larger index imports torch
    calls.clear()
    exact_search(vectors, queries, 10, chunk_rows=128)
    assert calls == []


def test_auto_picks_ivfpq_where_hnsw_would_not_fit():
    # HNSW keeps a float32 copy of every vector in RAM (and is read whole by each search process):
    # `auto` builds it while that copy is at most HNSW_MAX_BYTES (2 GiB), IVF-PQ past it
    assert resolve_engine("auto", 49_999, 2048) == "exact"
    assert resolve_engine("auto", 1_000_000, 512) == "hnsw"  # 2.048e9 bytes <= 2 GiB
    assert resolve_engine("auto", 262_144, 2048) == "hnsw"  # exactly 2 GiB
    assert resolve_engine("auto", 262_145, 2048) == "ivfpq"
    assert resolve_engine("auto", 1_000_000, 2048) == "ivfpq"  # 1M photos of the shipped vse
    assert resolve_engine("hnsw", 1_000_000, 2048) == "hnsw"  # asked for by name: as asked


@pytest.mark.parametrize("engine", ["flat", "hnsw", "ivf", "ivfpq"])
def test_a_structure_read_in_place_from_a_map_answers_as_a_copy_of_it(tmp_path, engine):
    """deserialize_ann reads the structure in place (its lists and vectors stay views of the file's map,
    no copy): it answers as FAISS's own copying read does, after every other reference to the map is
    gone (the structure keeps it alive)."""
    import faiss

    vectors, queries = unit_vectors(2000, 16, 7), unit_vectors(20, 16, 8)
    (tmp_path / "ann.faiss").write_bytes(serialize_ann(build_ann(vectors, engine)))
    copied = faiss.read_index(str(tmp_path / "ann.faiss"))
    set_search_params(copied)
    with open(tmp_path / "ann.faiss", "rb") as f:
        in_place = deserialize_ann(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
    gc.collect()
    for got, want in zip(faiss_search(in_place, queries, 10), faiss_search(copied, queries, 10), strict=True):
        np.testing.assert_array_equal(got, want)
