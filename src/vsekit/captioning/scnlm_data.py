"""The SC-NLM's training inputs: the tag vocabulary, one example per predicted position, and the
sentence embeddings that condition it, cached on disk per joint model.

The SC-NLM is trained on captions alone, each conditioned on its own sentence embedding from the joint
model's text encoder (Kiros et al. 2014, sec. 2.5); :func:`joint_fingerprint` names that joint space, so
a cache or a model file made with another joint model is never mixed in.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vsekit.captioning.scnlm_net import TAG_END, TAG_PAD
from vsekit.fileio import atomic_save_npy

__all__ = ["embed_cached", "joint_fingerprint", "log_progress", "position_examples", "tag_vocab"]

logger = logging.getLogger(__name__)


def tag_vocab(tag_lists: Sequence[Sequence[str]]) -> list[str]:
    return [TAG_PAD, TAG_END, *sorted({t for tags in tag_lists for t in tags} - {TAG_PAD, TAG_END})]


def position_examples(
    word_ids: Sequence[Sequence[int]],
    tag_ids: Sequence[Sequence[int]],
    context: int,
    forward: int,
    end_id: int = 3,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One row per predicted position (each word and the final <end>): ``(context [M, c], tags [M, k+1],
    target [M], sentence index [M])``, rows of a sentence contiguous and in order."""
    ctx_rows, tag_rows, targets, owners = [], [], [], []
    for s, (w, t) in enumerate(zip(word_ids, tag_ids, strict=True)):
        padded = [2] * context + list(w) + [end_id]
        tpad = list(t) + [1] + [0] * forward
        for p in range(len(w) + 1):
            ctx_rows.append(padded[p : p + context])
            tag_rows.append(tpad[p : p + forward])
            targets.append(padded[p + context])
            owners.append(s)
    return (
        np.asarray(ctx_rows, dtype=np.int64).reshape(-1, context),
        np.asarray(tag_rows, dtype=np.int64).reshape(-1, forward),
        np.asarray(targets, dtype=np.int64),
        np.asarray(owners, dtype=np.int64),
    )


def log_progress(progress: bool, message: str) -> None:
    """Progress notes: through logging (``vsekit -v`` shows them), only when ``progress`` is on."""
    if progress:
        logger.info(message)


def joint_fingerprint(joint_model: Any) -> str:
    """A short hash of the joint model's image projection: which embedding space an SC-NLM belongs to."""
    digest = hashlib.sha256()
    for name, value in sorted(joint_model.image_proj.state_dict().items()):
        digest.update(name.encode())
        digest.update(value.detach().cpu().to(torch.float16).numpy().tobytes())
    return digest.hexdigest()[:16]


def embed_cached(
    joint_model: Any, texts: list[str], cache_dir: Path | None, name: str, progress: bool
) -> np.ndarray:
    """Joint-space sentence embeddings of ``texts`` (float32), cached as .npy keyed by texts and model."""
    key = hashlib.sha256(("\n".join(texts) + joint_fingerprint(joint_model)).encode()).hexdigest()[:12]
    path = cache_dir / f"{name}-{key}.npy" if cache_dir is not None else None
    if path is not None and path.is_file():
        try:
            cached = np.load(path, allow_pickle=False)
            if cached.shape == (len(texts), joint_model.embed_dim) and cached.dtype == np.float32:
                return cached
        except Exception as exc:  # a damaged cache file (numpy's header parser raises many kinds)
            logger.warning("%s: unreadable embedding cache, recomputing (%s)", path, exc)
    t0 = time.perf_counter()
    emb = joint_model.embed_texts(texts).numpy().astype(np.float32)
    log_progress(progress, f"embedded {len(texts)} {name} in {time.perf_counter() - t0:.0f} s")
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_save_npy(path, emb)  # a kill mid-write must not leave half a file to load next time
    return emb
