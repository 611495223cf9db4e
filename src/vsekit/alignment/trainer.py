"""Training the region-word aligner on the shared engine (Karpathy & Fei-Fei 2015, sec. 3.1.3, Eq. 9).

One epoch = every training caption once with its image, in an order drawn from a seeded generator. A
batch of B (image, caption) pairs gives the B x B matrix S_kl (Eq. 8, or Eq. 7) and the structured
max-margin loss of Eq. 9 (margin 1, sum of hinges over both directions) through
:func:`~vsekit.embedding.losses.hinge_ranking_loss`, masked by image id, so two captions of one image are
never each other's negatives; divided by B (a per-pair mean, so the learning rate does not depend on the
batch size). Adam (the paper: SGD with momentum; ``optimizer="sgd"`` gives that), element-wise gradient
clipping at 5 as in the paper. After every epoch the dev split is ranked by S_kl (all images x all
captions), the best epoch by dev rsum is written to ``aligner.safetensors``, and the engine writes the
log and the checkpoint (exact resume).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import torch

from vsekit.alignment.model import WORD_ENCODERS, RegionAligner, save_aligner
from vsekit.alignment.score import SCORES, alignment_scores
from vsekit.data.corpus import Corpus
from vsekit.data.vocab import Vocabulary, build_vocabulary
from vsekit.embedding.losses import hinge_ranking_loss
from vsekit.errors import ConfigMismatchError, CorpusError
from vsekit.metrics.ranking import positives_from_ids, ranking_metrics
from vsekit.resources import ALIGNMENT_RECIPES_DIR
from vsekit.rng import seed_all
from vsekit.text.minilm_tokens import WORD_HEADS
from vsekit.training import (
    Recipe,
    RunOptions,
    TrainingRun,
    TrainState,
    epoch_bar,
    field_error,
    list_recipe_names,
    load_recipe_file,
    selection_corpus,
    step_lr,
)
from vsekit.vision.regions import REGION_MODES, Regions, RegionSpec, region_features

__all__ = ["MODEL_NAME", "AlignerConfig", "list_aligner_recipes", "load_aligner_recipe", "train_aligner"]

MODEL_NAME = "aligner.safetensors"
KIND = "aligner"

if TYPE_CHECKING:
    from torch.optim.lr_scheduler import StepLR
    from typing_extensions import Unpack

RegionFn = Callable[..., Regions]


@dataclass
class AlignerConfig(Recipe):
    """An aligner training run; the recipes in ``src/vsekit/recipes/alignment/*.json`` are these as JSON.

    ``regions``: ``grid`` (levels ``grid``) or ``proposals`` (``proposals`` boxes + the whole image).
    ``glove``: initialise the word table from GloVe 6B 50-d (then ``word_dim`` must be 50);
    ``freeze_words`` keeps it fixed. ``words``: ``brnn`` (Eq. 2-6) or ``minilm`` (frozen MiniLM token
    states pooled per word, then a trained ``word_head``, ``mlp`` or ``linear``; ``word_dim``, ``glove``
    and ``freeze_words`` are then unused); ``finetune_last`` trains MiniLM's top N layers too, at
    ``finetune_lr_scale`` times ``lr``. ``score``: ``max`` (Eq. 8) or ``sum_pos`` (Eq. 7).
    ``validation_slice``: a slice (shipped name or file, :mod:`vsekit.data.splits`) to select on; the
    recipe then trains on ``train-minus-<slice>`` and names the slice as its ``dev_split``.
    ``eval_every``: rank ``dev_split`` every N epochs and after the last; ``eval_every = epochs`` is a
    fixed-epoch retrain with settings chosen elsewhere: dev is read once, after the last epoch.
    """

    RESUMABLE: ClassVar[frozenset[str]] = Recipe.RESUMABLE | {"eval_every"}

    name: str = "custom"
    description: str = ""
    backbone: str = "mobilenet_v2"
    regions: str = "grid"
    grid: list[int] = field(default_factory=lambda: [2, 3])
    proposals: int = 19
    embed_dim: int = 512
    words: str = "brnn"
    word_head: str = "mlp"
    finetune_last: int = 0
    finetune_lr_scale: float = 1.0
    word_dim: int = 50
    glove: bool = True
    freeze_words: bool = False
    dropout: float = 0.0
    score: str = "max"
    margin: float = 1.0
    batch_size: int = 100
    epochs: int = 15
    optimizer: str = "adam"
    lr: float = 2e-4
    momentum: float = 0.9
    weight_decay: float = 0.0
    lr_decay_epochs: int | None = None
    lr_decay_gamma: float = 0.1
    clip_value: float | None = 5.0
    vocab_min_count: int = 5
    vocab_max_size: int | None = None
    train_split: str = "train"
    dev_split: str = "dev"
    validation_slice: str | None = None
    patience: int | None = 5
    seed: int = 0
    num_threads: int | None = None
    eval_every: int = 1

    def validate(self, source: str = "config") -> AlignerConfig:
        def bad(name: str, why: str) -> Exception:
            return field_error(source, name, getattr(self, name), why)

        choices = {
            "regions": REGION_MODES,
            "score": SCORES,
            "optimizer": ("adam", "sgd"),
            "words": WORD_ENCODERS,
            "word_head": WORD_HEADS,
        }
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise bad(name, f"must be one of {', '.join(allowed)}")
        for name in (
            "embed_dim",
            "word_dim",
            "batch_size",
            "epochs",
            "vocab_min_count",
            "proposals",
            "eval_every",
        ):
            if getattr(self, name) < 1:
                raise bad(name, "must be >= 1")
        if not 0 <= self.finetune_last <= 6 or (self.finetune_last and self.words != "minilm"):
            raise bad("finetune_last", "must be 0-6, and 0 unless words is minilm")
        if not self.finetune_lr_scale > 0:
            raise bad("finetune_lr_scale", "must be > 0")
        if self.words == "brnn" and self.glove and self.word_dim != 50:
            raise bad("word_dim", "must be 50 with glove=true (GloVe 6B 50-d)")
        if not self.grid or any(g < 1 for g in self.grid):
            raise bad("grid", "must be a non-empty list of levels >= 1")
        if not 0 <= self.dropout < 1 or self.margin < 0 or not self.lr > 0:
            name = "dropout" if not 0 <= self.dropout < 1 else "margin" if self.margin < 0 else "lr"
            raise bad(name, "is out of range")
        for name in ("lr_decay_epochs", "patience", "num_threads", "vocab_max_size", "clip_value"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise bad(name, "must be > 0 or null")
        return self

    def region_spec(self) -> RegionSpec:
        return RegionSpec(self.backbone, self.regions, tuple(self.grid), proposals=self.proposals)


def list_aligner_recipes() -> list[str]:
    return list_recipe_names(ALIGNMENT_RECIPES_DIR)


def load_aligner_recipe(name_or_path: str | os.PathLike[str]) -> AlignerConfig:
    """A shipped alignment recipe by name (``"brnn-grid"``) or a JSON file of its fields by path."""
    return load_recipe_file(AlignerConfig, name_or_path, ALIGNMENT_RECIPES_DIR, "alignment recipe")


# -- data ---------------------------------------------------------------------------------------------


@dataclass
class _Data:
    train_feats: torch.Tensor  # [n_train_images, R, D] float16
    train_texts: list[str]
    train_rows: torch.Tensor  # image row of each training caption
    dev_feats: torch.Tensor
    dev_texts: list[str]
    dev_ids: list[str]
    dev_cap_ids: list[str]
    vocab: Vocabulary
    identity: dict[str, Any]


def _pairs(split: Corpus) -> tuple[list[str], list[str], list[int]]:
    by_image = {i: caps for i, caps in split.captions_by_image().items() if caps}
    ids = list(by_image)
    texts = [c for i in ids for c in by_image[i]]
    rows = [k for k, i in enumerate(ids) for _ in by_image[i]]
    return ids, texts, rows


def _load_data(corpus: Corpus, config: AlignerConfig, region_fn: RegionFn, kwargs: dict) -> _Data:
    """Vocabulary from the training captions only; the region features of the train and dev images."""
    train_ids, train_texts, train_rows = _pairs(corpus.split(config.train_split))
    dev_ids, dev_texts, dev_rows = _pairs(corpus.split(config.dev_split))
    for split, texts in ((config.train_split, train_texts), (config.dev_split, dev_texts)):
        if not texts:
            raise CorpusError(f"{corpus.root}: split '{split}' has no captions")
    vocab = build_vocabulary(corpus, config.train_split, config.vocab_min_count, config.vocab_max_size)
    # Training texts whose words are all unknown still have <unk> words: the BRNN sees them as such.
    spec = config.region_spec()
    train = region_fn(corpus, train_ids, spec, **kwargs)
    dev = region_fn(corpus, dev_ids, spec, **kwargs)
    identity = {
        "n_train_captions": len(train_texts),
        "n_dev_captions": len(dev_texts),
        "train_ids_head": train_ids[:5],
        "regions": spec.to_config(),
        "image_dim": int(train.features.shape[-1]),
    }
    return _Data(
        torch.from_numpy(train.features).half(),
        train_texts,
        torch.tensor(train_rows),
        torch.from_numpy(dev.features).half(),
        dev_texts,
        dev_ids,
        [dev_ids[r] for r in dev_rows],
        vocab,
        identity,
    )


def _default_regions(corpus: Corpus, image_ids: list[str], spec: RegionSpec, **kwargs: Any) -> Regions:
    return region_features(corpus, spec, image_ids=image_ids, cache=True, **kwargs)


# -- the loop -----------------------------------------------------------------------------------------


@torch.no_grad()
def evaluate_scores(
    model: RegionAligner, feats: torch.Tensor, texts: list[str], chunk: int = 500
) -> np.ndarray:
    """S_kl of every image (region features ``[n, R, D]``) against every text, ``[n, len(texts)]``."""
    model.eval()
    device = model.project.weight.device
    regions = torch.cat(
        [model.embed_regions(feats[k : k + chunk].to(device).float()) for k in range(0, len(feats), chunk)]
    )
    cols = []
    for k in range(0, len(texts), chunk):
        words = model.embed_words(texts[k : k + chunk])
        cols.append(
            alignment_scores(regions, words.vectors, words.sentence, len(words.lengths), model.score_kind)
        )
    return torch.cat(cols, dim=1).cpu().numpy()


def evaluate_dev(model: RegionAligner, data: _Data) -> dict[str, Any]:
    scores = evaluate_scores(model, data.dev_feats, data.dev_texts)
    return ranking_metrics(scores, positives_from_ids(data.dev_ids, data.dev_cap_ids))


def _epoch_trainer(
    state: TrainState[RegionAligner], config: AlignerConfig, data: _Data, device: torch.device, progress: bool
) -> Callable[[int], dict[str, Any]]:
    model, optimizer = state.model, state.optimizer
    params = [p for p in model.parameters() if p.requires_grad]
    n = len(data.train_texts)

    def train_epoch(epoch: int) -> dict[str, Any]:
        model.train()
        perm = torch.randperm(n, generator=state.generator)
        total = 0.0
        bar = epoch_bar(range(0, n, config.batch_size), epoch, config.epochs, progress)
        for start in bar:
            idx = perm[start : start + config.batch_size]
            rows = data.train_rows[idx]
            scores = model(
                data.train_feats[rows].to(device).float(), [data.train_texts[i] for i in idx.tolist()]
            )
            # Eq. 9: hinge over both directions, margin 1, negatives masked by image id; mean over the batch
            loss = hinge_ranking_loss(scores, rows.to(device), config.margin) / len(idx)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if config.clip_value is not None:
                torch.nn.utils.clip_grad_value_(params, config.clip_value)  # element-wise, as the paper
            optimizer.step()
            total += loss.item() * len(idx)
        bar.close()
        return {"loss": total / n, "lr": optimizer.param_groups[0]["lr"]}

    return train_epoch


def _describe(entry: dict, epochs: int) -> str:
    line = f"epoch {entry['epoch']:>3}/{epochs} loss {entry['loss']:.4f}"
    if entry.get("dev") is not None:
        i2t, t2i = entry["dev"]["i2t"], entry["dev"]["t2i"]
        line += (
            f" | i2t R@1 {i2t['r1']:5.1f} R@5 {i2t['r5']:5.1f} R@10 {i2t['r10']:5.1f} medr {i2t['medr']:.1f}"
            f" | t2i R@1 {t2i['r1']:5.1f} R@5 {t2i['r5']:5.1f} R@10 {t2i['r10']:5.1f} medr {t2i['medr']:.1f}"
            f" | rsum {entry['dev']['rsum']:6.1f}{' *' if entry.get('best') else ''}"
        )
    return line + f" | {entry['time_s']:.1f}s"


def _param_groups(model: RegionAligner, config: AlignerConfig) -> list[dict[str, Any]]:
    """The trained parameters; MiniLM's tuned top layers (if any) in their own group at a scaled rate."""
    tuned = getattr(model.words, "layers", None)
    tuned_ids = {id(p) for p in tuned.parameters()} if tuned is not None else set()
    rest = [p for p in model.parameters() if p.requires_grad and id(p) not in tuned_ids]
    groups: list[dict[str, Any]] = [{"params": rest}]
    if tuned is not None:
        groups.append({"params": list(tuned.parameters()), "lr": config.lr * config.finetune_lr_scale})
    return groups


class _AlignerRun(TrainingRun[AlignerConfig, _Data, RegionAligner]):
    """The aligner's part of the run template: region features, Eq. 9 epochs, dev ranking by S_kl."""

    kind, model_name, metric, score_key = KIND, MODEL_NAME, "rsum", "best_rsum"
    single_process = (
        "the region aligner",
        "its S_kl scores need every region and word of a batch on one process",
    )

    def __init__(
        self,
        corpus: Corpus,
        config: AlignerConfig,
        out_dir: str | os.PathLike[str],
        cache_root: str | os.PathLike[str] | None,
        region_fn: RegionFn | None,
        **options: Unpack[RunOptions],
    ) -> None:
        super().__init__(config, out_dir, **options)
        self.corpus = selection_corpus(corpus, self.config)
        self.cache_root, self.region_fn = cache_root, region_fn or _default_regions

    def load_data(self, resumed: bool) -> _Data:
        kwargs = {"cache_root": self.cache_root, "device": str(self.device), "progress": self.progress}
        return _load_data(self.corpus, self.config, self.region_fn, kwargs)

    def check_data(self, ckpt: dict[str, Any], data: _Data) -> None:
        path = self.dir.checkpoint_path
        if ckpt["data"] != data.identity:
            raise ConfigMismatchError(
                f"{path}: cannot resume: field 'data' differs (another corpus or regions?)"
            )
        if Vocabulary.from_dict(ckpt["vocab"], source=f"{path} (vocab)") != data.vocab:
            raise ConfigMismatchError(f"{path}: cannot resume: field 'vocab' differs from the checkpoint's")

    def build(self, data: _Data) -> tuple[RegionAligner, torch.optim.Optimizer, StepLR | None]:
        config = self.config
        seed_all(config.seed)  # every RNG a checkpoint saves starts from the seed (exact resume)
        model = RegionAligner(
            data.vocab,
            config.region_spec().to_config(),
            data.identity["image_dim"],
            config.embed_dim,
            config.word_dim,
            config.glove,
            config.freeze_words,
            config.dropout,
            config.score,
            words=config.words,
            word_head=config.word_head,
            finetune_last=config.finetune_last,
        ).to(self.device)
        # seen every epoch: the cache keeps them all
        model.words.precompute(data.train_texts + data.dev_texts, progress=self.progress)
        params = _param_groups(model, config)
        opt: torch.optim.Optimizer
        if config.optimizer == "sgd":
            opt = torch.optim.SGD(
                params, config.lr, momentum=config.momentum, weight_decay=config.weight_decay
            )
        else:
            opt = torch.optim.Adam(params, config.lr, weight_decay=config.weight_decay)
        return model, opt, step_lr(opt, config.lr_decay_epochs, config.lr_decay_gamma)

    def epoch_trainer(self, state: TrainState[RegionAligner], data: _Data) -> Callable[[int], dict[str, Any]]:
        return _epoch_trainer(state, self.config, data, self.device, self.progress)

    def evaluate(self, state: TrainState[RegionAligner], data: _Data) -> tuple[float, dict[str, Any]]:
        metrics = evaluate_dev(state.model, data)
        return metrics["rsum"], metrics

    def save_best(
        self, state: TrainState[RegionAligner], data: _Data, epoch: int, dev: dict[str, Any]
    ) -> None:
        extra = {"epoch": epoch, "dev": dev, "recipe": self.config.name, "train": self.config.to_dict()}
        save_aligner(state.model, self.model_path, extra=extra)

    def describe(self, entry: dict[str, Any]) -> str:
        return _describe(entry, self.config.epochs)

    def checkpoint_extra(self, data: _Data) -> dict[str, Any]:
        return {"vocab": data.vocab.to_dict(), "data": data.identity}


def train_aligner(
    corpus: Corpus,
    config: AlignerConfig,
    out_dir: str | os.PathLike[str],
    *,
    cache_root: str | os.PathLike[str] | None = None,
    region_fn: RegionFn | None = None,
    **options: Unpack[RunOptions],
) -> dict[str, Any]:
    """Train an aligner on ``corpus``; ``out_dir`` gets ``aligner.safetensors`` (best dev rsum),
    ``checkpoint.pt``, ``log.jsonl`` and ``config.json``. ``options``: ``resume`` (continue exactly where
    the checkpoint stopped), ``progress``, ``device``, ``log`` (:class:`~vsekit.training.RunOptions`).
    ``region_fn(corpus, ids, spec, **kw) -> Regions`` replaces the cached region extraction (tests).
    Returns a summary (``model_path``, ``best_epoch``, ``best_rsum``, ``best_dev``, ``history``, ...).
    """
    return _AlignerRun(corpus, config, out_dir, cache_root, region_fn, **options).run()
