"""The inputs of one joint-embedding training run, and their identity.

:func:`load_data` reads a run's inputs: the (image, caption) pairs of the training split, the dev split,
the image features of both (FNE statistics fitted on the training split only) and the vocabulary
(training split only). It also records what they are (the features' backbone, kind, dimension and FNE
statistics; a hash of the captions), which the checkpoint stores, so :func:`check_same_run` can refuse
to resume a run on other data with one line naming the field that differs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vsekit.data.corpus import Corpus
from vsekit.data.vocab import Vocabulary, build_vocabulary
from vsekit.embedding.recipe import TRAIN_VIEW_SETS, TrainConfig
from vsekit.errors import ConfigMismatchError, CorpusError, VsekitError
from vsekit.vision.fne import FullNetworkEmbedding

__all__ = ["FeatureFn", "RunData", "check_same_run", "load_data"]

# what :func:`vsekit.vision.features.image_features` is: (corpus, ids, backbone, kind, ...) -> features, FNE
FeatureFn = Callable[..., tuple[np.ndarray, "FullNetworkEmbedding | None"]]


def _feature_identity(backbone: str, kind: str, image_dim: int, fne: FullNetworkEmbedding | None) -> dict:
    ident: dict[str, Any] = {"backbone": backbone, "kind": kind, "image_dim": int(image_dim), "fne": None}
    if fne is not None:
        state = fne.state_dict()
        ident["fne"] = {
            "mean": torch.from_numpy(np.asarray(state["mean"], dtype=np.float64)),
            "m2": torch.from_numpy(np.asarray(state["m2"], dtype=np.float64)),
            "meta": dict(fne.metadata()),
        }
    return ident


def check_same_run(ckpt: dict, path: Path, config: TrainConfig, ident: dict, data: dict, vocab) -> None:
    """ConfigMismatchError naming the first field where the checkpoint's run differs from this one."""
    config.check_resumable(ckpt["config"], path)
    old = ckpt["features"]
    for key in ("backbone", "kind", "image_dim"):
        if old[key] != ident[key]:
            raise ConfigMismatchError(
                f"{path}: cannot resume: image features differ in field 'features.{key}' "
                f"(checkpoint {old[key]!r}, now {ident[key]!r})"
            )
    if (old["fne"] is None) != (ident["fne"] is None) or (
        old["fne"] is not None
        and not (
            torch.equal(old["fne"]["mean"], ident["fne"]["mean"])
            and torch.equal(old["fne"]["m2"], ident["fne"]["m2"])
            and old["fne"]["meta"] == ident["fne"]["meta"]
        )
    ):
        raise ConfigMismatchError(
            f"{path}: cannot resume: image features differ in field 'features.fne' (the Full-Network "
            "Embedding statistics are not those the checkpoint was trained with)"
        )
    if ckpt["data"] != data:
        raise ConfigMismatchError(
            f"{path}: cannot resume: field 'data' differs: the training/dev captions are not those the "
            "checkpoint was trained on (another corpus?)"
        )
    old_vocab = Vocabulary.from_dict(ckpt["vocab"], source=f"{path} (vocab)") if ckpt["vocab"] else None
    if old_vocab != vocab:
        raise ConfigMismatchError(f"{path}: cannot resume: field 'vocab' differs from the checkpoint's")


def _split_pairs(split: Corpus) -> tuple[list[str], list[str], list[int]]:
    """(image ids with >= 1 caption, caption texts, row of each caption's image)."""
    by_image = split.captions_by_image()
    ids = [i for i, caps in by_image.items() if caps]
    row = {image_id: k for k, image_id in enumerate(ids)}
    texts = [c.text for c in split.captions if c.image_id in row]
    rows = [row[c.image_id] for c in split.captions if c.image_id in row]
    return ids, texts, rows


def _data_identity(train_split: Corpus, dev_split: Corpus) -> dict[str, Any]:
    h = hashlib.sha256()
    for name, split in (("train", train_split), ("dev", dev_split)):
        h.update(f"[{name}]".encode())
        for caption in split.captions:
            h.update(f"{caption.image_id}\t{caption.text}\n".encode())
    return {
        "n_train_captions": len(train_split.captions),
        "n_dev_captions": len(dev_split.captions),
        "sha256": h.hexdigest()[:16],
    }


def _as_tensor(features: np.ndarray, n: int, what: str) -> torch.Tensor:
    arr = np.asarray(features)
    if arr.ndim != 2 or arr.shape[0] != n:
        raise ConfigMismatchError(f"{what} image features have shape {arr.shape}; expected [{n}, dim]")
    return torch.from_numpy(np.ascontiguousarray(arr))


@dataclass
class RunData:
    """A run's inputs: training pairs, dev split, image features, vocabulary and their identities."""

    train_feats: torch.Tensor  # [n_images, dim], the centre view
    train_texts: list[str]
    train_rows: list[int]  # the image row (and id) of each training caption
    dev_feats: torch.Tensor
    dev_texts: list[str]
    dev_ids: list[str]
    dev_cap_ids: list[str]
    vocab: Vocabulary | None
    fne: FullNetworkEmbedding | None
    features: dict[str, Any]  # what the image features are (checked on resume)
    identity: dict[str, Any]  # which captions they are (checked on resume)
    train_views: torch.Tensor | None = None  # [n_views, n_images, dim] (view 0 the centre), if several


def load_data(
    corpus: Corpus, config: TrainConfig, feature_fn: FeatureFn, feature_kwargs: dict[str, Any]
) -> RunData:
    """Vocabulary from the training split only; image features with FNE statistics fitted on it."""
    train_split, dev_split = corpus.split(config.train_split), corpus.split(config.dev_split)
    train_ids, train_texts, train_rows = _split_pairs(train_split)
    dev_ids, dev_texts, dev_rows = _split_pairs(dev_split)
    if not train_texts:
        raise CorpusError(f"{corpus.root}: split '{config.train_split}' has no captions to train on")
    if not dev_texts:
        raise CorpusError(f"{corpus.root}: split '{config.dev_split}' has no captions to evaluate on")
    vocab = (
        build_vocabulary(corpus, config.train_split, config.vocab_min_count, config.vocab_max_size)
        if config.text_encoder != "minilm"
        else None
    )
    backbone, kind = config.backbone, config.image_features
    train_np, fne = feature_fn(
        corpus, train_ids, backbone, kind, fit_split=config.train_split, **feature_kwargs
    )
    dev_np, _ = feature_fn(corpus, dev_ids, backbone, kind, fne=fne, **feature_kwargs)
    train_feats = _as_tensor(train_np, len(train_ids), "training")
    dev_feats = _as_tensor(dev_np, len(dev_ids), "dev")
    if kind == "fne" and fne is None:
        raise VsekitError("FNE features came without their fitted Full-Network Embedding")
    image_dim = int(train_feats.shape[1])
    if dev_feats.shape[1] != image_dim:
        raise ConfigMismatchError(
            f"dev features have dim {dev_feats.shape[1]}, training features {image_dim}"
        )
    views = _train_views(corpus, config, train_ids, train_feats, feature_fn, feature_kwargs)
    return RunData(
        train_feats,
        train_texts,
        train_rows,
        dev_feats,
        dev_texts,
        dev_ids,
        [dev_ids[r] for r in dev_rows],
        vocab,
        fne,
        _feature_identity(backbone, kind, image_dim, fne),
        _data_identity(train_split, dev_split),
        views,
    )


def _train_views(
    corpus: Corpus,
    config: TrainConfig,
    train_ids: list[str],
    centre: torch.Tensor,
    feature_fn: FeatureFn,
    feature_kwargs: dict[str, Any],
) -> torch.Tensor | None:
    """``[n_views, n_images, dim]`` training features of ``config.train_views`` (None for the centre
    crop alone); each view comes from its own cache, keyed by the view."""
    names = TRAIN_VIEW_SETS[config.train_views]
    if len(names) == 1:
        return None
    rows = [centre]
    for view in names[1:]:
        feats, _ = feature_fn(
            corpus, train_ids, config.backbone, config.image_features, view=view, **feature_kwargs
        )
        rows.append(_as_tensor(feats, len(train_ids), f"training ({view} view)"))
        if rows[-1].shape != centre.shape:
            raise ConfigMismatchError(f"{view} view features have shape {tuple(rows[-1].shape)}")
    return torch.stack(rows)
