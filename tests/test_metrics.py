"""Retrieval metrics against a brute-force reference, hand-computed examples and the protocols."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vsekit.metrics.ranking import (
    embedding_ranks,
    evaluate_embeddings,
    evaluate_protocol,
    positives_from_ids,
    ranking_metrics,
    ranks_from_scores,
    summarize_ranks,
)

# ---------------------------------------------------------------------------------------------------
# Brute-force reference: sort every candidate list explicitly, negatives first among equal scores.


def brute_ranks(scores: np.ndarray, positives: np.ndarray) -> tuple[list[int], list[int]]:
    def first_positive(row_scores, row_pos) -> int:
        # key: descending score; at equal score a negative (False) sorts before a positive (True).
        order = sorted(range(len(row_scores)), key=lambda j: (-row_scores[j], bool(row_pos[j])))
        for r, j in enumerate(order, start=1):
            if row_pos[j]:
                return r
        raise AssertionError("no positive")

    n_img, n_cap = scores.shape
    i2t = [first_positive(list(scores[i]), list(positives[i])) for i in range(n_img)]
    t2i = [first_positive(list(scores[:, j]), list(positives[:, j])) for j in range(n_cap)]
    return i2t, t2i


def brute_summary(ranks: list[int]) -> dict[str, float]:
    n = len(ranks)
    s = sorted(ranks)
    med = s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2
    return {
        "r1": 100.0 * sum(r <= 1 for r in ranks) / n,
        "r5": 100.0 * sum(r <= 5 for r in ranks) / n,
        "r10": 100.0 * sum(r <= 10 for r in ranks) / n,
        "medr": float(med),
        "meanr": sum(ranks) / n,
    }


def random_split(rng: np.random.Generator, n_images: int, max_caps: int = 5):
    """Image ids, and a shuffled caption list with 1..max_caps captions per image."""
    image_ids = [f"img{i:04d}" for i in rng.permutation(n_images)]
    caption_ids = [iid for iid in image_ids for _ in range(rng.integers(1, max_caps + 1))]
    caption_ids = [caption_ids[k] for k in rng.permutation(len(caption_ids))]
    return image_ids, caption_ids


def grid_embeddings(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    """Values in {-1, -0.5, 0, 0.5, 1}: every dot product is exact in float32 (so results cannot depend on
    summation order) and many scores tie."""
    return (rng.integers(-2, 3, size=(n, dim)) / 2).astype(np.float32)


def unit(x: np.ndarray) -> np.ndarray:
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


# ---------------------------------------------------------------------------------------------------
# ranks_from_scores / ranking_metrics


@pytest.mark.parametrize("seed", range(40))
def test_ranks_match_brute_force(seed: int) -> None:
    rng = np.random.default_rng(seed)
    image_ids, caption_ids = random_split(rng, int(rng.integers(1, 9)), max_caps=4)
    positives = positives_from_ids(image_ids, caption_ids)
    scores = rng.normal(size=positives.shape)
    if seed % 2 == 0:
        scores = np.round(scores, 1)  # coarse values: plenty of ties, also between a positive and negatives
    scores_before, positives_before = scores.copy(), positives.copy()

    i2t, t2i = ranks_from_scores(torch.from_numpy(scores) if seed % 3 == 0 else scores, positives)
    ref_i2t, ref_t2i = brute_ranks(scores, positives)
    assert i2t.tolist() == ref_i2t
    assert t2i.tolist() == ref_t2i

    metrics = ranking_metrics(scores, positives)
    ref_i, ref_t = brute_summary(ref_i2t), brute_summary(ref_t2i)
    assert metrics["i2t"] == pytest.approx(ref_i)
    assert metrics["t2i"] == pytest.approx(ref_t)
    assert metrics["rsum"] == pytest.approx(sum(ref_i[k] + ref_t[k] for k in ("r1", "r5", "r10")))
    # pure: the inputs are untouched
    np.testing.assert_array_equal(scores, scores_before)
    np.testing.assert_array_equal(positives, positives_before)


def test_hand_computed_2x4() -> None:
    # captions 1, 2 describe image "a"; captions 0, 3 describe image "b"
    positives = positives_from_ids(["a", "b"], ["b", "a", "a", "b"])
    scores = np.array([[0.1, 0.9, 0.3, 0.9], [0.5, 0.2, 0.5, 0.4]])
    i2t, t2i = ranks_from_scores(scores, positives)
    # a: best positive 0.9 ties with negative caption 3 -> rank 2; b: best 0.5 ties with caption 2 -> 2
    assert i2t.tolist() == [2, 2]
    # caption 2 (a, 0.3) is beaten by image b (0.5); caption 3 (b, 0.4) by image a (0.9)
    assert t2i.tolist() == [1, 1, 2, 2]
    m = ranking_metrics(scores, positives)
    assert m["i2t"] == {"r1": 0.0, "r5": 100.0, "r10": 100.0, "medr": 2.0, "meanr": 2.0}
    assert m["t2i"] == {"r1": 50.0, "r5": 100.0, "r10": 100.0, "medr": 1.5, "meanr": 1.5}
    assert m["rsum"] == 450.0


def test_hand_computed_3x6() -> None:
    positives = positives_from_ids(["a", "b", "c"], ["c", "a", "b", "a", "c", "b"])
    scores = np.array(
        [
            [0.8, 0.1, 0.7, 0.6, 0.9, 0.2],  # a: best positive 0.6 (cap 3) below 0.8, 0.7, 0.9 -> 4
            [0.3, 0.3, 0.3, 0.3, 0.3, 0.3],  # b: all tied -> behind all 4 negatives -> 5
            [0.95, 0.0, 0.5, 0.4, 0.1, 0.6],  # c: best positive 0.95 on top -> 1
        ]
    )
    i2t, t2i = ranks_from_scores(scores, positives)
    assert i2t.tolist() == [4, 5, 1]
    assert t2i.tolist() == [1, 2, 3, 1, 3, 2]
    m = ranking_metrics(scores, positives)
    assert m["i2t"] == pytest.approx({"r1": 100 / 3, "r5": 100.0, "r10": 100.0, "medr": 4.0, "meanr": 10 / 3})
    assert m["t2i"] == pytest.approx({"r1": 100 / 3, "r5": 100.0, "r10": 100.0, "medr": 2.0, "meanr": 2.0})


def test_perfect_scores() -> None:
    rng = np.random.default_rng(0)
    image_ids, caption_ids = random_split(rng, 20)
    positives = positives_from_ids(image_ids, caption_ids)
    m = ranking_metrics(positives.astype(np.float32), positives)
    for direction in ("i2t", "t2i"):
        assert m[direction] == {"r1": 100.0, "r5": 100.0, "r10": 100.0, "medr": 1.0, "meanr": 1.0}
    assert m["rsum"] == 600.0


def test_constant_scores_are_ranked_last() -> None:
    """Pessimistic ties: a collapsed model (all scores equal) gets the worst ranks, not R@1 = 100."""
    positives = positives_from_ids(["a", "b", "c"], ["a", "b", "c", "a", "b", "c"])
    i2t, t2i = ranks_from_scores(np.zeros(positives.shape), positives)
    assert i2t.tolist() == [5, 5, 5]
    assert t2i.tolist() == [3] * 6


def test_integer_scores() -> None:
    positives = positives_from_ids(["a", "b"], ["a", "b"])
    i2t, t2i = ranks_from_scores(np.array([[3, 3], [1, 2]]), positives)
    assert i2t.tolist() == [2, 1]
    assert t2i.tolist() == [1, 2]


def test_missing_positive_raises() -> None:
    scores = np.zeros((2, 3))
    no_caption = np.array([[True, True, True], [False, False, False]])
    with pytest.raises(ValueError, match="image 1 has no positive caption"):
        ranks_from_scores(scores, no_caption)
    no_image = np.array([[True, False, False], [False, True, False]])
    with pytest.raises(ValueError, match="caption 2 has no positive image"):
        ranks_from_scores(scores, no_image)
    with pytest.raises(ValueError, match="shape"):
        ranks_from_scores(scores, np.ones((3, 2), dtype=bool))
    with pytest.raises(ValueError, match="non-finite"):
        ranks_from_scores(np.array([[np.nan]]), np.ones((1, 1), dtype=bool))


def test_summarize_ranks() -> None:
    s = summarize_ranks(np.array([1, 2, 6, 11, 30]))
    assert s == {"r1": 20.0, "r5": 40.0, "r10": 60.0, "medr": 6.0, "meanr": 10.0}
    with pytest.raises(ValueError, match="1-based"):
        summarize_ranks([0, 1])


def test_positives_from_ids_uses_ids_not_positions() -> None:
    positives = positives_from_ids(["x", "y"], ["y", "y", "x", "y", "x"])
    np.testing.assert_array_equal(
        positives, [[False, False, True, False, True], [True, True, False, True, False]]
    )
    assert positives.dtype == np.bool_
    np.testing.assert_array_equal(positives_from_ids([10, 20], [20, 30]), [[False, False], [True, False]])


# ---------------------------------------------------------------------------------------------------
# evaluate_embeddings: chunked, from embeddings


@pytest.mark.parametrize("chunk_size", [1, 7, 16, 1024])
def test_chunked_matches_full_matrix(chunk_size: int) -> None:
    rng = np.random.default_rng(chunk_size)
    image_ids, caption_ids = random_split(rng, 37)  # 37 images, ~110 captions: chunks do not divide them
    img = grid_embeddings(rng, len(image_ids), 6)
    cap = grid_embeddings(rng, len(caption_ids), 6)
    positives = positives_from_ids(image_ids, caption_ids)
    full = ranking_metrics(img @ cap.T, positives)
    assert evaluate_embeddings(img, cap, image_ids, caption_ids, chunk_size=chunk_size) == full
    i2t, t2i = embedding_ranks(
        torch.from_numpy(img), torch.from_numpy(cap), image_ids, caption_ids, chunk_size
    )
    ref_i2t, ref_t2i = brute_ranks(img.astype(np.float64) @ cap.T.astype(np.float64), positives)
    assert i2t.tolist() == ref_i2t
    assert t2i.tolist() == ref_t2i


def test_chunked_matches_full_matrix_continuous() -> None:
    rng = np.random.default_rng(1)
    image_ids, caption_ids = random_split(rng, 300)
    img = torch.from_numpy(unit(rng.normal(size=(300, 64))))
    cap = torch.from_numpy(unit(rng.normal(size=(len(caption_ids), 64))))
    full = ranking_metrics(img @ cap.T, positives_from_ids(image_ids, caption_ids))
    for chunk_size in (13, 128, 1024):
        assert evaluate_embeddings(img, cap, image_ids, caption_ids, chunk_size=chunk_size) == full


def test_evaluate_embeddings_errors_name_the_culprit() -> None:
    img = np.eye(2, dtype=np.float32)
    with pytest.raises(ValueError, match=r"caption 2 has image id 'zzz'"):
        evaluate_embeddings(img, np.ones((3, 2), dtype=np.float32), ["a", "b"], ["a", "b", "zzz"])
    with pytest.raises(ValueError, match=r"image 1 \(id 'b'\) has no caption"):
        evaluate_embeddings(img, img[:1], ["a", "b"], ["a"])
    with pytest.raises(ValueError, match="dim"):
        evaluate_embeddings(img, np.ones((2, 3), dtype=np.float32), ["a", "b"], ["a", "b"])
    with pytest.raises(ValueError, match="image ids"):
        evaluate_embeddings(img, img, ["a"], ["a", "a"])


# ---------------------------------------------------------------------------------------------------
# protocols


def test_coco1k_is_the_mean_of_five_folds() -> None:
    rng = np.random.default_rng(5)
    image_ids = [f"{i}" for i in range(5000)]
    caption_ids = [iid for iid in image_ids for _ in range(rng.integers(1, 4))]
    caption_ids = [caption_ids[k] for k in rng.permutation(len(caption_ids))]  # folds mixed in the list
    img = unit(rng.normal(size=(5000, 8)))
    cap = unit(rng.normal(size=(len(caption_ids), 8)))
    cap_ids = np.array(caption_ids)

    folds = []
    for f in range(5):
        fold_ids = image_ids[f * 1000 : (f + 1) * 1000]
        cols = np.flatnonzero(np.isin(cap_ids, fold_ids))
        scores = torch.from_numpy(img[f * 1000 : (f + 1) * 1000]) @ torch.from_numpy(cap[cols]).T
        folds.append(ranking_metrics(scores, positives_from_ids(fold_ids, cap_ids[cols].tolist())))

    result = evaluate_protocol(img, cap, image_ids, caption_ids, protocol="coco1k", chunk_size=300)
    assert result["protocol"] == "coco1k"
    assert (result["n_images"], result["n_captions"], result["n_folds"]) == (5000, len(caption_ids), 5)
    assert result["folds"] == folds
    for direction in ("i2t", "t2i"):
        for key in ("r1", "r5", "r10", "medr", "meanr"):
            assert result[direction][key] == pytest.approx(np.mean([f[direction][key] for f in folds]))
    six = sum(result[d][k] for d in ("i2t", "t2i") for k in ("r1", "r5", "r10"))
    assert result["rsum"] == pytest.approx(six)
    assert result["rsum"] == pytest.approx(np.mean([f["rsum"] for f in folds]))  # not 6x (VSE++ bug)
    assert result["rsum"] <= 600


def test_flickr_and_coco5k_protocols() -> None:
    rng = np.random.default_rng(2)
    image_ids, caption_ids = random_split(rng, 50)
    img = unit(rng.normal(size=(50, 16)))
    cap = unit(rng.normal(size=(len(caption_ids), 16)))
    plain = evaluate_embeddings(img, cap, image_ids, caption_ids)
    flickr = evaluate_protocol(img, cap, image_ids, caption_ids)
    assert flickr == {**plain, "protocol": "flickr", "n_images": 50, "n_captions": len(caption_ids)}
    with pytest.warns(UserWarning, match="5,000"):
        coco5k = evaluate_protocol(img, cap, image_ids, caption_ids, protocol="coco5k")
    assert {k: coco5k[k] for k in ("i2t", "t2i", "rsum")} == plain
    with pytest.raises(ValueError, match="multiple of 1000"):
        evaluate_protocol(img, cap, image_ids, caption_ids, protocol="coco1k")
    with pytest.raises(ValueError, match="flickr, coco5k, coco1k"):
        evaluate_protocol(img, cap, image_ids, caption_ids, protocol="coco")
