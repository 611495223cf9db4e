"""The m-RNN captioner's training data: the vocabulary, the (image row, word ids) pairs, the image
features of the training and dev images, the dev references, and for self-critical training the reward's
references; and the length-bucketed batches an epoch draws.

The vocabulary is built from the training split only (or taken from the captioner a run starts from, so
its word ids keep their meaning); the features' FNE statistics are fitted on the training images only.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from vsekit.captioning.captioner import MRNNCaptioner
from vsekit.captioning.mrnn_recipe import CaptionTrainConfig
from vsekit.data.corpus import Corpus
from vsekit.data.vocab import Vocabulary, tokenize
from vsekit.errors import CorpusError

__all__ = [
    "CaptionData",
    "FeatureFn",
    "add_reward_references",
    "build_caption_vocabulary",
    "length_bucketed_batches",
    "load_caption_data",
    "target_counts",
]

# what :func:`vsekit.vision.features.image_features` is: (corpus, ids, backbone, kind, ...) -> features, FNE
FeatureFn = Callable[..., tuple[np.ndarray, Any]]


def build_caption_vocabulary(train: Corpus, min_count: int) -> Vocabulary:
    """Words seen at least ``min_count`` times in the training captions; the rest map to <unk>."""
    return Vocabulary.build([tokenize(c.text) for c in train.captions], min_count=min_count)


def target_counts(token_ids: list[list[int]], vocab: Vocabulary) -> torch.Tensor:
    """How often each id is a training target (each word once, END once per caption)."""
    counts = Counter(i for ids in token_ids for i in ids)
    out = torch.zeros(len(vocab), dtype=torch.float64)
    for i, c in counts.items():
        out[i] = c
    out[vocab.end_id] = len(token_ids)
    return out


def length_bucketed_batches(
    lengths: list[int], batch_size: int, generator: torch.Generator, pool: int = 50
) -> list[list[int]]:
    """A random epoch order cut into batches of similar-length captions, batches in random order.

    The shuffled order is cut into pools of ``pool`` batches, each pool sorted by length and split into
    batches: padding (wasted work) drops from about half of each batch to almost nothing, while every
    batch is still a random draw of captions.
    """
    order = torch.randperm(len(lengths), generator=generator).tolist()
    batches: list[list[int]] = []
    span = batch_size * pool
    for start in range(0, len(order), span):
        group = sorted(order[start : start + span], key=lambda i: lengths[i])
        batches.extend(group[i : i + batch_size] for i in range(0, len(group), batch_size))
    shuffle = torch.randperm(len(batches), generator=generator).tolist()
    return [batches[i] for i in shuffle]


@dataclass
class CaptionData:
    """Training pairs (image row, word ids), image features and the dev references; for SCST also the
    reward's references (every training image's captions as word ids)."""

    vocab: Vocabulary
    pairs: list[tuple[int, list[int]]]
    train_x: torch.Tensor
    dev_x: torch.Tensor
    dev_ids: list[str]
    dev_refs: dict[str, list[str]]
    fne: Any
    image: dict[str, Any]  # backbone, kind, image_dim: what the captioner file records
    reward_rows: list[int] | None = None  # SCST: the train_x rows of the images it samples for
    reward_refs: list[list[list[int]]] | None = None  # SCST: their captions; ids past the vocab: rare words
    reward_max_id: int = 0


def load_caption_data(
    corpus: Corpus,
    config: CaptionTrainConfig,
    feature_fn: FeatureFn,
    init: MRNNCaptioner | None = None,
    progress: bool = True,
) -> CaptionData:
    train_split, dev_split = corpus.split(config.train_split), corpus.split(config.dev_split)
    if not train_split.captions:
        raise CorpusError(f"{corpus.root}: split '{config.train_split}' has no captions to train on")
    dev_refs = {i: caps for i, caps in dev_split.captions_by_image().items() if caps}
    if not dev_refs:
        raise CorpusError(f"{corpus.root}: split '{config.dev_split}' has no captions to select a model on")
    dev_ids = list(dev_refs)[: config.eval_images]  # the split's first images: a fixed subset
    dev_refs = {i: dev_refs[i] for i in dev_ids}
    vocab = init.vocab if init is not None else build_caption_vocabulary(train_split, config.min_word_count)
    train_ids = train_split.image_ids()
    row_of = {image_id: row for row, image_id in enumerate(train_ids)}
    pairs = [
        (row_of[c.image_id], vocab.encode(tokenize(c.text))[: config.max_caption_words])
        for c in train_split.captions
    ]
    pairs = [(row, ids) for row, ids in pairs if ids]
    fne_kw: dict[str, Any] = {"fne": init.fne} if init is not None and init.fne is not None else {}
    fne_kw["progress"] = progress  # --no-progress hides the extraction bars too
    train_feats, fne = feature_fn(corpus, train_ids, config.backbone, config.image_features, **fne_kw)
    fne = init.fne if init is not None and init.fne is not None else fne
    dev_feats, _ = feature_fn(
        corpus, dev_ids, config.backbone, config.image_features, fne=fne, progress=progress
    )
    train_x = torch.as_tensor(np.asarray(train_feats))
    dev_x = torch.as_tensor(np.asarray(dev_feats))
    image = {"backbone": config.backbone, "kind": config.image_features, "image_dim": int(train_x.shape[1])}
    data = CaptionData(vocab, pairs, train_x, dev_x, dev_ids, dev_refs, fne, image)
    if config.objective == "scst":
        add_reward_references(data, train_split, row_of)
    return data


def add_reward_references(data: CaptionData, train_split: Corpus, row_of: dict[str, int]) -> None:
    """Every training image's captions as word ids for the CIDEr-D reward: vocabulary words keep their
    ids (so sampled captions need no mapping), rarer words get ids after them (they still count in the
    references' n-grams and document frequencies, as in CIDEr-D on text)."""
    index = {w: i for i, w in enumerate(data.vocab.words)}
    rows, refs = [], []
    for image_id, captions in train_split.captions_by_image().items():
        encoded = [[index.setdefault(w, len(index)) for w in tokenize(c)] for c in captions]
        encoded = [ids for ids in encoded if ids]
        if encoded:
            rows.append(row_of[image_id])
            refs.append(encoded)
    data.reward_rows, data.reward_refs, data.reward_max_id = rows, refs, len(index) - 1
