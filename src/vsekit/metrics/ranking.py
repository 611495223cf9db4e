"""Bidirectional image-sentence ranking metrics: Recall@K, median and mean rank, rsum.

Conventions (shared by every function here, and by the brute-force reference in the tests):

* ``scores[i, j]`` is the score of image ``i`` against caption ``j``; higher means a better match.
* Which captions describe which image is given by a boolean mask ``positives[i, j]``, built from image
  ids (:func:`positives_from_ids`), never from the position of a row ("caption ``5 * i + k`` belongs to
  image ``i``"): a shuffled or filtered caption file then still scores correctly.
* Image annotation (``i2t``): the rank of an image is the 1-based rank of its *best-ranked* positive
  caption among all captions of the split. Image search (``t2i``): the rank of a caption is the 1-based
  rank of its best positive image among all images.
* Ties count against the query (pessimistic): ``rank = 1 + #{negatives with score >= best positive}``.
  A model that gives every candidate the same score therefore gets the worst rank, not the best; an
  optimistic or index-order tie break would reward degenerate (e.g. collapsed, all-zero) embeddings.
  Other positives tied with the best positive do not push it down: they are correct answers too.
* ``medr`` is the statistical median of the 1-based ranks (``np.median``: the mean of the two middle
  ranks for an even number of queries). The Kiros et al. and VSE++ evaluation scripts report
  ``floor(median(rank0)) + 1`` on 0-based ranks, which is up to 0.5 lower on an even number of queries.
"""

from __future__ import annotations

import warnings
from collections.abc import Hashable, Sequence

import numpy as np
import torch

__all__ = [
    "PROTOCOLS",
    "embedding_ranks",
    "evaluate_embeddings",
    "evaluate_protocol",
    "positives_from_ids",
    "ranking_metrics",
    "ranks_from_scores",
    "summarize_ranks",
]

#: Evaluation protocols understood by :func:`evaluate_protocol`.
PROTOCOLS: tuple[str, ...] = ("flickr", "coco5k", "coco1k")

_RECALL_KS = (1, 5, 10)
_COCO_FOLD = 1000
_COCO_TEST_IMAGES = 5000


def _as_numpy_scores(scores: np.ndarray | torch.Tensor) -> np.ndarray:
    if isinstance(scores, torch.Tensor):
        scores = scores.detach().cpu().numpy()
    arr = np.asarray(scores)
    if arr.ndim != 2:
        raise ValueError(f"scores must be a 2-D [n_images, n_captions] matrix, got shape {arr.shape}")
    if not np.issubdtype(arr.dtype, np.number) or np.issubdtype(arr.dtype, np.complexfloating):
        raise ValueError(f"scores must be real numbers, got dtype {arr.dtype}")
    if np.issubdtype(arr.dtype, np.floating) and not np.isfinite(arr).all():
        i, j = np.argwhere(~np.isfinite(arr))[0]
        raise ValueError(f"scores contain a non-finite value at image {i}, caption {j}: {arr[i, j]}")
    return arr


def _check_coverage(positives: np.ndarray) -> None:
    """Every image needs a caption and every caption an image, or its rank is undefined."""
    no_caption = np.flatnonzero(~positives.any(axis=1))
    if no_caption.size:
        raise ValueError(
            f"image {no_caption[0]} has no positive caption ({no_caption.size} image(s) without one); "
            "its i2t rank is undefined"
        )
    no_image = np.flatnonzero(~positives.any(axis=0))
    if no_image.size:
        raise ValueError(
            f"caption {no_image[0]} has no positive image ({no_image.size} caption(s) without one); "
            "its t2i rank is undefined"
        )


def ranks_from_scores(
    scores: np.ndarray | torch.Tensor, positives: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """1-based ranks of the best positive, for every image (i2t) and every caption (t2i).

    Args:
        scores: ``[n_images, n_captions]`` scores, higher = better match (numpy or torch).
        positives: boolean mask of the same shape; ``positives[i, j]`` is True when caption ``j``
            describes image ``i``.

    Returns:
        ``(i2t_ranks [n_images], t2i_ranks [n_captions])`` as int64 arrays. Ties with negatives count
        against the query (see the module docstring).

    Raises:
        ValueError: on a shape mismatch, a non-finite score, or an image (row) / caption (column)
            without any positive; the message names the first offending index.
    """
    s = _as_numpy_scores(scores)
    pos = np.asarray(positives)
    if pos.dtype != np.bool_:
        raise ValueError(f"positives must be a boolean mask, got dtype {pos.dtype}")
    if pos.shape != s.shape:
        raise ValueError(f"positives has shape {pos.shape} but scores has shape {s.shape}")
    _check_coverage(pos)
    if s.dtype.kind != "f":  # integer scores: float64 holds them exactly and has -inf for masking
        s = s.astype(np.float64)
    neg = ~pos
    # Best positive score per row / column; negatives are masked to -inf so they never win the max.
    masked = np.where(pos, s, -np.inf)
    best_i2t = masked.max(axis=1)
    best_t2i = masked.max(axis=0)
    i2t = 1 + np.count_nonzero((s >= best_i2t[:, None]) & neg, axis=1)
    t2i = 1 + np.count_nonzero((s >= best_t2i[None, :]) & neg, axis=0)
    return i2t.astype(np.int64), t2i.astype(np.int64)


def summarize_ranks(ranks: np.ndarray | Sequence[int]) -> dict[str, float]:
    """Recall@1/5/10 (percent), median and mean rank of a set of 1-based ranks.

    ``r{k}`` is the percentage of queries whose rank is <= k; ``medr`` is ``np.median`` of the ranks
    (see the module docstring for how that differs from the papers' scripts); ``meanr`` the mean.
    """
    r = np.asarray(ranks)
    if r.ndim != 1 or r.size == 0:
        raise ValueError(f"ranks must be a non-empty 1-D array, got shape {r.shape}")
    if (r < 1).any():
        raise ValueError(f"ranks are 1-based; got a rank of {r.min()}")
    out = {f"r{k}": float(100.0 * np.mean(r <= k)) for k in _RECALL_KS}
    out["medr"] = float(np.median(r))
    out["meanr"] = float(np.mean(r))
    return out


def _metrics_from_ranks(i2t: np.ndarray, t2i: np.ndarray) -> dict:
    m_i2t = summarize_ranks(i2t)
    m_t2i = summarize_ranks(t2i)
    rsum = sum(m_i2t[f"r{k}"] for k in _RECALL_KS) + sum(m_t2i[f"r{k}"] for k in _RECALL_KS)
    return {"i2t": m_i2t, "t2i": m_t2i, "rsum": float(rsum)}


def ranking_metrics(scores: np.ndarray | torch.Tensor, positives: np.ndarray) -> dict:
    """Both retrieval directions from a full score matrix.

    Returns ``{"i2t": {r1, r5, r10, medr, meanr}, "t2i": {...}, "rsum": r1+r5+r10 of both}``. The
    inputs are not modified (everything is computed on masked copies).
    """
    i2t, t2i = ranks_from_scores(scores, positives)
    return _metrics_from_ranks(i2t, t2i)


def _encode_ids(
    image_ids: Sequence[Hashable], caption_image_ids: Sequence[Hashable]
) -> tuple[np.ndarray, np.ndarray]:
    """Integer codes for the ids, so that "same image" is one vectorised integer comparison.

    A repeated image id gets one code (both rows are then positives of its captions). A caption id
    with no image gets -1, which matches no image, so :func:`ranks_from_scores` or the coverage check
    reports it.
    """
    image_ids = list(image_ids)
    caption_image_ids = list(caption_image_ids)
    code_of: dict[Hashable, int] = {}
    img_codes = np.empty(len(image_ids), dtype=np.int64)
    for i, key in enumerate(image_ids):
        img_codes[i] = code_of.setdefault(key, len(code_of))
    cap_codes = np.fromiter((code_of.get(k, -1) for k in caption_image_ids), np.int64, len(caption_image_ids))
    return img_codes, cap_codes


def positives_from_ids(image_ids: Sequence[str], caption_image_ids: Sequence[str]) -> np.ndarray:
    """Boolean mask ``[n_images, n_captions]``: True where caption ``j``'s image id equals image ``i``'s.

    Built from ids rather than positions, so no ordering of the caption list is assumed. Ids may be any
    hashable values (file names, COCO integer ids). Rows or columns left without a positive are not an
    error here; the ranking functions reject them, naming the index.
    """
    img_codes, cap_codes = _encode_ids(image_ids, caption_image_ids)
    return img_codes[:, None] == cap_codes[None, :]


def _as_float_tensor(x: np.ndarray | torch.Tensor, name: str) -> torch.Tensor:
    t = x.detach() if isinstance(x, torch.Tensor) else torch.from_numpy(np.asarray(x))
    if t.ndim != 2:
        raise ValueError(f"{name} must be a 2-D [n, dim] array, got shape {tuple(t.shape)}")
    t = t.to(torch.float32)
    if not torch.isfinite(t).all():
        raise ValueError(f"{name} contains NaN or infinite values")
    return t


def _check_id_coverage(
    img_codes: np.ndarray,
    cap_codes: np.ndarray,
    image_ids: Sequence[Hashable],
    caption_image_ids: Sequence[Hashable],
) -> None:
    missing_cap = np.flatnonzero(cap_codes < 0)
    if missing_cap.size:
        j = missing_cap[0]
        raise ValueError(
            f"caption {j} has image id {caption_image_ids[j]!r}, which is not among the images "
            f"({missing_cap.size} caption(s) affected)"
        )
    has_caption = np.zeros(int(img_codes.max(initial=-1)) + 1, dtype=bool)
    has_caption[cap_codes] = True
    lonely = np.flatnonzero(~has_caption[img_codes])
    if lonely.size:
        i = lonely[0]
        raise ValueError(
            f"image {i} (id {image_ids[i]!r}) has no caption ({lonely.size} image(s) without one); "
            "its i2t rank is undefined"
        )


def embedding_ranks(
    image_emb: np.ndarray | torch.Tensor,
    caption_emb: np.ndarray | torch.Tensor,
    image_ids: Sequence[str],
    caption_image_ids: Sequence[str],
    chunk_size: int = 1024,
) -> tuple[np.ndarray, np.ndarray]:
    """``ranks_from_scores(image_emb @ caption_emb.T, positives_from_ids(...))`` without the full matrix.

    The score is the dot product, i.e. the cosine similarity because the embeddings are assumed to be
    unit-normalised already (the models normalise them; normalising here again would hide a model that
    forgot to). Math is float32 on the device of ``image_emb`` (CPU for numpy input).

    Memory: one block of ``chunk_size`` images x all captions at a time. Both directions are read off
    the same image-major blocks (two passes; the second recomputes the block): the first pass gives the
    i2t ranks and each caption's best positive score, the second counts, per caption, the negative
    images scoring at least that much. Using one layout for both directions means i2t and t2i see
    bit-identical scores, so the result does not depend on ``chunk_size``.
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    img = _as_float_tensor(image_emb, "image_emb")
    cap = _as_float_tensor(caption_emb, "caption_emb").to(img.device)
    if img.shape[1] != cap.shape[1]:
        raise ValueError(f"image_emb has dim {img.shape[1]} but caption_emb has dim {cap.shape[1]}")
    if len(image_ids) != img.shape[0]:
        raise ValueError(f"{len(image_ids)} image ids for {img.shape[0]} image embeddings")
    if len(caption_image_ids) != cap.shape[0]:
        raise ValueError(f"{len(caption_image_ids)} caption image ids for {cap.shape[0]} caption embeddings")
    if img.shape[0] == 0 or cap.shape[0] == 0:
        raise ValueError("need at least one image and one caption")
    img_codes_np, cap_codes_np = _encode_ids(image_ids, caption_image_ids)
    _check_id_coverage(img_codes_np, cap_codes_np, image_ids, caption_image_ids)
    img_codes = torch.from_numpy(img_codes_np).to(img.device)
    cap_codes = torch.from_numpy(cap_codes_np).to(img.device)

    n_img, n_cap = img.shape[0], cap.shape[0]
    i2t = torch.empty(n_img, dtype=torch.int64, device=img.device)
    best_t2i = torch.full((n_cap,), -torch.inf, dtype=torch.float32, device=img.device)
    t2i = torch.ones(n_cap, dtype=torch.int64, device=img.device)
    with torch.inference_mode():
        for start in range(0, n_img, chunk_size):
            stop = min(start + chunk_size, n_img)
            s = img[start:stop] @ cap.T  # [c, n_cap]
            pos = img_codes[start:stop, None] == cap_codes[None, :]
            masked = s.masked_fill(~pos, -torch.inf)
            best_row = masked.amax(dim=1)
            i2t[start:stop] = 1 + ((s >= best_row[:, None]) & ~pos).sum(dim=1)
            best_t2i = torch.maximum(best_t2i, masked.amax(dim=0))
        for start in range(0, n_img, chunk_size):
            stop = min(start + chunk_size, n_img)
            s = img[start:stop] @ cap.T
            pos = img_codes[start:stop, None] == cap_codes[None, :]
            t2i += ((s >= best_t2i[None, :]) & ~pos).sum(dim=0)
    return i2t.cpu().numpy(), t2i.cpu().numpy()


def evaluate_embeddings(
    image_emb: np.ndarray | torch.Tensor,
    caption_emb: np.ndarray | torch.Tensor,
    image_ids: Sequence[str],
    caption_image_ids: Sequence[str],
    chunk_size: int = 1024,
) -> dict:
    """Ranking metrics of unit-normalised embeddings, computed block by block.

    Same result as ``ranking_metrics(image_emb @ caption_emb.T, positives_from_ids(image_ids,
    caption_image_ids))`` (cosine scores; the embeddings must already have unit norm), but peak memory is
    one ``chunk_size x n_captions`` block, so 5,000 images x 25,000 captions fits easily. Raises
    ValueError naming the index and id of a caption whose image is missing or an image with no caption.
    """
    i2t, t2i = embedding_ranks(image_emb, caption_emb, image_ids, caption_image_ids, chunk_size)
    return _metrics_from_ranks(i2t, t2i)


def _mean_metrics(folds: list[dict]) -> dict:
    """Average fold metric dicts; rsum is the sum of the six *averaged* recalls (VSE++ printed 6x this)."""
    out: dict = {}
    for direction in ("i2t", "t2i"):
        out[direction] = {
            key: float(np.mean([f[direction][key] for f in folds])) for key in folds[0][direction]
        }
    out["rsum"] = float(sum(out[d][f"r{k}"] for d in ("i2t", "t2i") for k in _RECALL_KS))
    return out


def evaluate_protocol(
    image_emb: np.ndarray | torch.Tensor,
    caption_emb: np.ndarray | torch.Tensor,
    image_ids: Sequence[str],
    caption_image_ids: Sequence[str],
    protocol: str = "flickr",
    chunk_size: int = 1024,
) -> dict:
    """Evaluate a test split under a named protocol.

    * ``"flickr"``: all images x all captions of the split (Flickr8K / Flickr30K: 1,000 x 5,000).
    * ``"coco5k"``: the same computation on the MSCOCO 5K test split; warns if there are not 5,000
      images.
    * ``"coco1k"``: the mean of the metric dicts over consecutive 1,000-image folds (images 0-999,
      1000-1999, ...), each fold ranked against the captions of its own images only. ``rsum`` is the sum
      of the six fold-averaged recalls (= the mean of the fold rsums). The split must have a multiple of
      1,000 images (warns if it is not 5,000); the per-fold dicts are returned under ``"folds"``.

    The result adds ``"protocol"``, ``"n_images"`` and ``"n_captions"`` (of the whole split).
    """
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; known protocols: {', '.join(PROTOCOLS)}")
    image_ids = list(image_ids)
    caption_image_ids = list(caption_image_ids)
    n_img, n_cap = len(image_ids), len(caption_image_ids)

    if protocol in ("flickr", "coco5k"):
        if protocol == "coco5k" and n_img != _COCO_TEST_IMAGES:
            warnings.warn(
                f"coco5k expects the {_COCO_TEST_IMAGES:,}-image MSCOCO test split, got {n_img:,} images",
                stacklevel=2,
            )
        result = evaluate_embeddings(image_emb, caption_emb, image_ids, caption_image_ids, chunk_size)
    else:
        if n_img == 0 or n_img % _COCO_FOLD:
            raise ValueError(f"coco1k needs a positive multiple of {_COCO_FOLD} images, got {n_img}")
        if n_img != _COCO_TEST_IMAGES:
            warnings.warn(
                f"coco1k expects the {_COCO_TEST_IMAGES:,}-image MSCOCO test split, got {n_img:,} images "
                f"({n_img // _COCO_FOLD} folds)",
                stacklevel=2,
            )
        img = _as_float_tensor(image_emb, "image_emb")
        cap = _as_float_tensor(caption_emb, "caption_emb")
        if len(image_ids) != img.shape[0] or len(caption_image_ids) != cap.shape[0]:
            raise ValueError(
                f"{n_img} image ids / {n_cap} caption ids for {img.shape[0]} image / {cap.shape[0]} "
                "caption embeddings"
            )
        # Check the whole split first: a caption whose image is in no fold must not silently vanish.
        img_codes, cap_codes = _encode_ids(image_ids, caption_image_ids)
        _check_id_coverage(img_codes, cap_codes, image_ids, caption_image_ids)
        folds = []
        for start in range(0, n_img, _COCO_FOLD):
            fold_codes = img_codes[start : start + _COCO_FOLD]
            cap_idx = np.flatnonzero(np.isin(cap_codes, fold_codes))
            folds.append(
                evaluate_embeddings(
                    img[start : start + _COCO_FOLD],
                    cap[torch.from_numpy(cap_idx)],
                    image_ids[start : start + _COCO_FOLD],
                    [caption_image_ids[j] for j in cap_idx],
                    chunk_size,
                )
            )
        result = _mean_metrics(folds)
        result["n_folds"] = len(folds)
        result["folds"] = folds
    result.update(protocol=protocol, n_images=n_img, n_captions=n_cap)
    return result
