"""The region captioner (Karpathy & Fei-Fei 2015, sec. 3.2 and 4.3): the m-RNN trained on region snippets.

The training pairs are the aligner's MRF segments (:mod:`vsekit.alignment.snippets`): each snippet of a
training caption with the CNN features of the region it was aligned to. The network, the loop, the
checkpoint and resume are the captioner's (:class:`vsekit.captioning.trainer.CaptionerRun`): the image
bias of Eq. 13 reads the region's vector instead of the whole image's. With ``context`` the region
vector is concatenated with the whole image's (region 0), the variant of the paper's appendix ("concatenate
the fullframe feature CNN vector to the vector of the region of interest"). Dev selection: greedy
snippets of the dev regions that received a snippet, scored against those snippets (CIDEr-D).

The file is a captioner file whose ``image`` header says ``kind: regions-<mode>`` and carries the region
spec, so a loaded :class:`RegionCaptioner` computes its own region features from an image.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from vsekit.alignment.model import Aligner
from vsekit.alignment.snippets import DEFAULT_SNIPPET_BETA, Snippet, collect_snippets
from vsekit.captioning.captioner import MRNNCaptioner, load_captioner
from vsekit.captioning.trainer import CaptionData, CaptionerRun, CaptionTrainConfig, ScoreFn
from vsekit.data.corpus import Corpus
from vsekit.data.vocab import Vocabulary, tokenize
from vsekit.errors import CorpusError, VsekitError
from vsekit.resources import REGION_CAPTION_RECIPES_DIR, resolve_model_path
from vsekit.training import RunOptions, field_error, list_recipe_names, load_recipe_file, selection_corpus
from vsekit.vision.regions import Regions, RegionSpec

__all__ = [
    "RegionCaptionConfig",
    "RegionCaptioner",
    "list_region_caption_recipes",
    "load_region_caption_recipe",
    "region_caption_data",
    "region_inputs",
    "train_region_captioner",
]

if TYPE_CHECKING:
    from typing_extensions import Unpack

RegionFn = Callable[[Corpus, list[str]], Regions]


@dataclass
class RegionCaptionConfig(CaptionTrainConfig):
    """A region-captioner run: the captioner's fields (``backbone`` and ``image_features`` are unused:
    the regions are the aligner's) plus the snippet extraction (``beta`` of Eq. 12, segments of at least
    ``min_snippet_words`` words) and ``context`` (append the whole image's vector to each region's)."""

    beta: float = DEFAULT_SNIPPET_BETA
    min_snippet_words: int = 2
    context: bool = False

    def validate(self, source: str = "config") -> RegionCaptionConfig:
        super().validate(source)
        if self.beta < 0:
            raise field_error(source, "beta", self.beta, "must be >= 0")
        if self.min_snippet_words < 1:
            raise field_error(source, "min_snippet_words", self.min_snippet_words, "must be >= 1")
        if self.rerank_beam is not None:
            raise field_error(
                source, "rerank_beam", self.rerank_beam, "must be null (no reranking of snippets)"
            )
        return self


def list_region_caption_recipes() -> list[str]:
    return list_recipe_names(REGION_CAPTION_RECIPES_DIR)


def load_region_caption_recipe(name_or_path: str | os.PathLike[str]) -> RegionCaptionConfig:
    """A shipped region-captioning recipe by name (``"region-lstm"``) or a JSON file by path."""
    return load_recipe_file(RegionCaptionConfig, name_or_path, REGION_CAPTION_RECIPES_DIR, "region recipe")


def region_inputs(features: np.ndarray, regions: Sequence[int], context: bool) -> np.ndarray:
    """The captioner's input rows for ``regions`` of one image's ``features [R, D]``: ``[n, D]``, or
    ``[n, 2D]`` with the whole image's vector (region 0) appended when ``context``."""
    rows = features[np.asarray(regions, dtype=np.int64)]
    if context:
        rows = np.concatenate([rows, np.broadcast_to(features[0], rows.shape)], axis=1)
    return rows


def _items(snippets: Sequence[Snippet]) -> dict[tuple[str, int], list[str]]:
    """Snippet texts by (image id, region), in order of first appearance."""
    out: dict[tuple[str, int], list[str]] = {}
    for s in snippets:
        out.setdefault((s.image_id, s.region), []).append(s.text)
    return out


def _stack(
    items: Sequence[tuple[str, int]], regions: Regions, ids: Sequence[str], context: bool
) -> torch.Tensor:
    row_of = {image_id: k for k, image_id in enumerate(ids)}
    rows = [region_inputs(regions.features[row_of[i]], [r], context)[0] for i, r in items]
    return torch.from_numpy(np.stack(rows).astype(np.float16))


def region_caption_data(
    train: Sequence[Snippet],
    dev: Sequence[Snippet],
    train_regions: tuple[Regions, Sequence[str]],
    dev_regions: tuple[Regions, Sequence[str]],
    config: RegionCaptionConfig,
    spec: RegionSpec,
) -> CaptionData:
    """The captioner's training data: one input row per (image, region) with a snippet, its snippets as
    captions; dev items are named ``"<image id>#<region>"`` with their snippets as references."""
    if not train:
        raise CorpusError("no training snippets: the aligner gave no segment of the minimum length")
    if not dev:
        raise CorpusError("no dev snippets to select the region captioner on")
    vocab = Vocabulary.build([tokenize(s.text) for s in train], min_count=config.min_word_count)
    train_items = _items(train)
    keys = list(train_items)
    pairs = [
        (row, ids)
        for row, key in enumerate(keys)
        for text in train_items[key]
        if (ids := vocab.encode(tokenize(text))[: config.max_caption_words])
    ]
    dev_items = _items(dev)
    train_x = _stack(keys, *train_regions, config.context)
    dev_x = _stack(list(dev_items), *dev_regions, config.context)
    dev_ids = [f"{i}#{r}" for i, r in dev_items]
    dev_refs = dict(zip(dev_ids, dev_items.values(), strict=True))
    image = {
        "backbone": spec.backbone,
        "kind": spec.layers,
        "image_dim": int(train_x.shape[1]),
        "regions": spec.to_config(),
        "context": config.context,
    }
    return CaptionData(vocab, pairs, train_x, dev_x, dev_ids, dev_refs, None, image)


class _RegionRun(CaptionerRun):
    """A captioner run on an aligner's region snippets (cached in the run directory, so resumable)."""

    def __init__(
        self,
        aligner: Aligner,
        corpus: Corpus,
        config: RegionCaptionConfig,
        out_dir: str | os.PathLike[str],
        region_fn: RegionFn | None,
        score_fn: ScoreFn | None,
        cache_root: str | os.PathLike[str] | None,
        **options: Unpack[RunOptions],
    ) -> None:
        super().__init__(config, out_dir, score_fn, **options)
        self.region_config = config  # the template's config, with the snippet fields typed
        self.aligner, self.corpus = aligner, selection_corpus(corpus, config)  # a slice: select on it
        self.region_fn, self.cache_root = region_fn, cache_root
        self.counts: dict[str, int] = {}

    def load_data(self, resumed: bool) -> CaptionData:
        config = self.region_config
        train, train_regions = self._snippets(config.train_split)
        dev, dev_regions = self._snippets(config.dev_split)
        spec = self.aligner.model.region_spec
        data = region_caption_data(train, dev, train_regions, dev_regions, config, spec)
        self.counts = {"n_train_snippets": len(train), "n_dev_snippets": len(dev), "n_pairs": len(data.pairs)}
        return data

    def _snippets(self, split: str) -> tuple[list[Snippet], tuple[Regions, list[str]]]:
        """The snippets of ``split``'s captions, with the regions of its images (and their ids)."""
        config, corpus = self.region_config, self.corpus
        ids = [i for i, caps in corpus.split(split).captions_by_image().items() if caps]
        if self.region_fn is not None:
            regions = self.region_fn(corpus, ids)
        else:
            regions = self.aligner.regions(
                corpus, image_ids=ids, progress=self.progress, cache_root=self.cache_root
            )
        path = self.out / f"snippets-{split}.jsonl"
        beta, min_words = config.beta, config.min_snippet_words
        snippets = collect_snippets(
            self.aligner, corpus, split, path, beta, min_words, regions, self.progress
        )
        self.say(f"{split}: {len(snippets)} snippets of >= {min_words} words (beta {beta})")
        return snippets, (regions, ids)

    def summary_extra(self, data: CaptionData) -> dict[str, Any]:
        return {**super().summary_extra(data), **self.counts}


def train_region_captioner(
    aligner: Aligner,
    corpus: Corpus,
    config: RegionCaptionConfig,
    out_dir: str | os.PathLike[str],
    *,
    region_fn: RegionFn | None = None,
    score_fn: ScoreFn | None = None,
    cache_root: str | os.PathLike[str] | None = None,
    **options: Unpack[RunOptions],
) -> dict[str, Any]:
    """Snippets of the train and dev captions (cached in ``out_dir/snippets-<split>.jsonl``, resumable),
    then the m-RNN on them; ``out_dir/captioner.safetensors`` is the best epoch by dev CIDEr-D.
    ``options``: ``resume``, ``progress``, ``device``, ``log`` (:class:`~vsekit.training.RunOptions`).
    ``region_fn(corpus, ids) -> Regions`` replaces the aligner's cached region extraction (under
    ``cache_root``) and ``score_fn`` the dev metrics (tests)."""
    return _RegionRun(aligner, corpus, config, out_dir, region_fn, score_fn, cache_root, **options).run()


class RegionCaptioner:
    """A loaded region captioner: a snippet for any region of an image (its own region features)."""

    def __init__(self, captioner: MRNNCaptioner, path: Path | None = None) -> None:
        image = captioner.image
        if not str(image.get("kind", "")).startswith("regions-") or "regions" not in image:
            raise VsekitError(
                f"{path}: a whole-image captioner ({image.get('kind')} features), not a region captioner"
            )
        self.captioner = captioner
        self.path = path
        self.spec = RegionSpec.from_config(image["regions"])
        self.context = bool(image.get("context", False))

    @classmethod
    def load(cls, name_or_path: str | os.PathLike[str] | None = None, device: str = "cpu") -> RegionCaptioner:
        path = resolve_model_path(name_or_path, "region-captioner")
        return cls(load_captioner(path, device=device), path)

    def describe(
        self, features: np.ndarray, regions: Sequence[int], beam_size: int = 3, max_len: int = 12
    ) -> list[str]:
        """One snippet for each of ``regions`` of one image's region features ``[R, D]``."""
        if not len(regions):
            return []
        rows = region_inputs(np.asarray(features, dtype=np.float32), regions, self.context)
        return self.captioner.caption(rows, decoding="beam", beam_size=beam_size, max_len=max_len)
