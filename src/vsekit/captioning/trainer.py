"""Training of the multimodal RNN captioner (Karpathy & Fei-Fei 2015, section 3.2 and appendix).

One epoch = every training caption once, with its image's features, in an order drawn from a seeded
generator; the loss is the mean negative log-likelihood of the target words (softmax classifier, Eq. 15).
Optimiser: Adam or RMSprop (the paper's choice), gradients clipped element-wise (the paper clips at 5).
After each epoch the captioner decodes the dev images greedily, scores them (CIDEr-D, BLEU-4), and the
best epoch by dev CIDEr is written to ``captioner.safetensors``. The run directory, the checkpoint and
exact resume are the run template's (:class:`~vsekit.training.TrainingRun`), which
:class:`CaptionerRun` fills in, as every trainer does.

This module is the loop; the recipe is :mod:`vsekit.captioning.mrnn_recipe`, the data
:mod:`vsekit.captioning.mrnn_data`, and the rerank tuning after training
:mod:`vsekit.captioning.rerank_tuning`.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from vsekit.captioning.attention import SoftAttentionCaptioner, SoftAttentionConfig
from vsekit.captioning.captioner import CaptionNet, MRNNCaptioner, save_captioner
from vsekit.captioning.mrnn import MultimodalRNN, MultimodalRNNConfig, caption_batch, perplexity
from vsekit.captioning.mrnn_data import (
    CaptionData,
    FeatureFn,
    length_bucketed_batches,
    load_caption_data,
    target_counts,
)
from vsekit.captioning.mrnn_recipe import (
    CAPTION_RECIPES_DIR,
    CaptionTrainConfig,
    list_caption_recipes,
    load_caption_recipe,
)
from vsekit.captioning.rerank_tuning import ScoreFn, tune_captioner_rerank
from vsekit.captioning.scst import scst_loss
from vsekit.data.corpus import Corpus
from vsekit.errors import VsekitError
from vsekit.fileio import content_fingerprint
from vsekit.metrics.captions import require_caption_metrics
from vsekit.metrics.diversity import caption_diversity
from vsekit.resources import resolve_model_path
from vsekit.rng import seed_all
from vsekit.training import (
    CHECKPOINT_NAME,
    RunOptions,
    TrainingRun,
    TrainState,
    epoch_bar,
    selection_corpus,
    shard,
    step_lr,
)
from vsekit.version import __version__
from vsekit.vision.features import FeatureSpec, image_features

__all__ = [
    "CAPTIONER_NAME",
    "CAPTION_RECIPES_DIR",
    "CHECKPOINT_NAME",
    "CaptionData",
    "CaptionTrainConfig",
    "CaptionerRun",
    "fit_captioner",
    "list_caption_recipes",
    "load_caption_recipe",
    "selection_corpus",
    "train_captioner",
    "tune_captioner_rerank",
]

if TYPE_CHECKING:
    from torch.optim.lr_scheduler import StepLR
    from typing_extensions import Unpack

logger = logging.getLogger(__name__)

CAPTIONER_NAME = "captioner.safetensors"
INIT_NAME = "init_captioner.safetensors"  # the run's copy of the captioner it starts from (init_from)
KIND = "captioner"  # the checkpoint kind this trainer writes


def default_score_fn(
    predictions: dict[str, str], references: Mapping[str, Sequence[str]]
) -> dict[str, float | None]:
    """The scores dev selection and rerank tuning use: :func:`~vsekit.metrics.captions.score_captions`
    without METEOR."""
    from vsekit.metrics.captions import score_captions

    return score_captions(predictions, references, meteor=False)


# -- training -----------------------------------------------------------------------------------------


def _caption_epoch_trainer(
    run: CaptionerRun, state: TrainState[CaptionNet], data: CaptionData
) -> Callable[[int], dict[str, Any]]:
    """One epoch of teacher-forced word prediction over length-bucketed batches."""
    config, device, progress = run.config, run.device, run.progress
    model, optimizer = state.model, state.optimizer
    params = [p for p in model.parameters() if p.requires_grad]
    lengths = [len(ids) for _, ids in data.pairs]

    def train_epoch(epoch: int) -> dict[str, Any]:
        model.train()
        batches = shard(length_bucketed_batches(lengths, config.batch_size, state.generator))
        t0 = time.perf_counter()
        total, words = 0.0, 0
        bar = epoch_bar(batches, epoch, config.epochs, progress)
        for batch in bar:
            chunk = [data.pairs[i] for i in batch]
            inputs, targets = caption_batch([ids for _, ids in chunk], data.vocab)
            feats = data.train_x[torch.tensor([row for row, _ in chunk])]
            args = (feats.to(device), inputs.to(device), targets.to(device))
            if isinstance(model, SoftAttentionCaptioner):  # the loss adds the attention penalty (Eq. 14)
                loss, nll = model.loss_terms(*args)
            else:
                loss = nll = model.loss(*args)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_value_(params, config.grad_clip_value)
            optimizer.step()
            n_words = int((targets != -100).sum())
            total += nll.item() * n_words
            words += n_words
            bar.set_postfix(loss=f"{total / max(words, 1):.3f}")
        mean = total / max(words, 1)
        train_s = round(time.perf_counter() - t0, 1)
        return {"train_loss": round(mean, 4), "train_ppl": round(perplexity(mean), 2), "train_s": train_s}

    return train_epoch


def _scst_epoch_trainer(
    run: CaptionerRun, state: TrainState[CaptionNet], data: CaptionData
) -> Callable[[int], dict[str, Any]]:
    """One epoch of self-critical training: every training image once, in a seeded order, in batches of
    ``batch_size`` images with ``scst_samples`` sampled captions each (:func:`scst_loss`). Samples are drawn
    from ``state.generator``, which the checkpoint saves, so a resumed run draws the same captions."""
    from vsekit.metrics.cider_reward import CiderD

    config, device, progress = run.config, run.device, run.progress
    model, optimizer = state.model, state.optimizer
    assert isinstance(model, MultimodalRNN)  # the recipe refuses SCST for the attention decoder
    params = [p for p in model.parameters() if p.requires_grad]
    assert data.reward_refs is not None and data.reward_rows is not None
    reward = CiderD(data.reward_refs, max_id=data.reward_max_id)  # document frequencies: training captions
    rows = torch.tensor(data.reward_rows, dtype=torch.long)

    def train_epoch(epoch: int) -> dict[str, Any]:
        model.eval()  # no dropout: the policy that samples is the one differentiated (captioning.scst)
        order = torch.randperm(len(rows), generator=state.generator)
        batches = shard([order[i : i + config.batch_size] for i in range(0, len(order), config.batch_size)])
        t0 = time.perf_counter()
        sums = {"reward": 0.0, "baseline": 0.0, "greedy": 0.0, "words": 0.0}
        seen = 0
        bar = epoch_bar(batches, epoch, config.epochs, progress)
        for batch in bar:
            feats = data.train_x[rows[batch]].to(device)
            loss, stats = scst_loss(
                model, feats, batch, reward, config.scst_samples, config.scst_baseline,
                config.max_decode_words, state.generator,
            )  # fmt: skip
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_value_(params, config.grad_clip_value)
            optimizer.step()
            measured = (stats.reward, stats.baseline, stats.greedy_reward or 0.0, stats.sample_words)
            for key, value in zip(sums, measured, strict=True):
                sums[key] += value * len(batch)
            seen += len(batch)
            bar.set_postfix(reward=f"{100 * sums['reward'] / seen:.1f}")
        n = max(seen, 1)
        # CIDEr-D x100 (as the papers print it) on the training images, with the training df
        out = {
            "train_reward": round(100 * sums["reward"] / n, 2),
            "train_baseline": round(100 * sums["baseline"] / n, 2),
            "train_sample_words": round(sums["words"] / n, 2),
            "train_s": round(time.perf_counter() - t0, 1),
        }
        if config.scst_baseline == "greedy":
            out["train_greedy_reward"] = round(100 * sums["greedy"] / n, 2)
        return out

    return train_epoch


def _attention_network(config: CaptionTrainConfig, data: CaptionData) -> SoftAttentionCaptioner:
    """The soft-attention LSTM of a ``decoder: "attention"`` recipe over the grid rows of ``data``."""
    cells = FeatureSpec(config.backbone, "grid").grid_cells
    width = int(data.image["image_dim"])
    if width % cells:
        raise VsekitError(f"grid features of width {width} do not split into {cells} cells")
    model = SoftAttentionCaptioner(
        SoftAttentionConfig(
            cells=cells,
            cell_dim=width // cells,
            vocab_size=len(data.vocab),
            word_dim=config.word_dim,
            hidden_dim=config.hidden_dim,
            annotation_dim=config.annotation_dim,
            attention_dim=config.attention_dim,
            gate=config.attention_gate,
            dropout=config.dropout,
            image_dropout=config.image_dropout,
            attention_reg=config.attention_reg,
        )
    )
    model.init_output_bias(target_counts([ids for _, ids in data.pairs], data.vocab))
    return model


def _epoch_line(entry: dict[str, Any], epochs: int, split: str) -> str:
    """One log line per epoch; ``split`` names the selection split (dev, or the validation slice)."""
    if "train_loss" in entry:
        train = f"loss {entry['train_loss']:.3f}"
    else:
        train = f"reward {entry['train_reward']:.1f} (baseline {entry['train_baseline']:.1f})"
    line = f"epoch {entry['epoch']}/{epochs}  {train}  {entry['train_s']:.0f}s"
    d = entry.get("dev")
    if d is None:  # not a scoring epoch (eval_every)
        return line
    line += f"  {split} greedy B-4 {d['bleu4']:.1f}  CIDEr {d['cider']:.1f}"
    if "mean_words" in d:
        line += (
            f"  words {d['mean_words']:.1f}  distinct {d['distinct_pct']:.0f}%  vocab {d['vocab_used']:.0f}  "
            f"'a a' {d['repeat_end_pct']:.1f}%"
        )
    return line + ("  *best" if entry.get("best") else "")


class CaptionerRun(TrainingRun[CaptionTrainConfig, CaptionData, CaptionNet]):
    """The m-RNN's part of the run template: teacher-forced (or self-critical) epochs, the best epoch by
    dev CIDEr-D of greedy captions. A subclass says where the :class:`CaptionData` comes from
    (:meth:`load_data`) and may set :attr:`init`, the captioner the run starts from."""

    kind, model_name, metric = KIND, CAPTIONER_NAME, "CIDEr"
    single_process = (
        "the m-RNN captioner",
        "its per-word mean loss is not weighted across ranks yet, and its rerank tuning writes files",
    )

    def __init__(
        self,
        config: CaptionTrainConfig,
        out_dir: str | os.PathLike[str],
        score_fn: ScoreFn | None = None,
        **options: Unpack[RunOptions],
    ) -> None:
        super().__init__(config, out_dir, **options)
        if score_fn is None:
            require_caption_metrics()  # the default scores need the train extra: say so before any work
        self.score_fn = score_fn or default_score_fn
        self.init: MRNNCaptioner | None = None  # its weights start the run (its vocabulary is the data's)

    def build(self, data: CaptionData) -> tuple[CaptionNet, torch.optim.Optimizer, StepLR | None]:
        """The network (the m-RNN, output biases at the log word frequencies, or the weights of
        :attr:`init`; or the soft-attention LSTM of a ``decoder: "attention"`` recipe), its optimiser and
        schedule."""
        config = self.config
        seed_all(config.seed)  # also for the region captioner, whose data needs no seed before this
        model: CaptionNet
        if self.init is not None:
            assert isinstance(self.init.model, MultimodalRNN)  # _init_captioner refuses any other network
            model = MultimodalRNN(self.init.model.config)
            model.load_state_dict(self.init.model.state_dict())
        elif config.decoder == "attention":
            model = _attention_network(config, data)
        else:
            model = MultimodalRNN(
                MultimodalRNNConfig(
                    image_dim=data.image["image_dim"],
                    vocab_size=len(data.vocab),
                    cell=config.cell,
                    word_dim=config.word_dim,
                    hidden_dim=config.hidden_dim,
                    dropout=config.dropout,
                    image_dropout=config.image_dropout,
                    image_rank=config.image_rank or 0,  # the model file's own convention: 0 is unfactored
                )
            )
            model.init_output_bias(target_counts([ids for _, ids in data.pairs], data.vocab))
        model.to(self.device)
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer: torch.optim.Optimizer
        if config.optimizer == "adam":
            optimizer = torch.optim.Adam(params, lr=config.lr, weight_decay=config.weight_decay)
        else:
            optimizer = torch.optim.RMSprop(
                params, lr=config.lr, alpha=0.95, weight_decay=config.weight_decay
            )
        return model, optimizer, step_lr(optimizer, config.lr_decay_epochs, config.lr_decay_gamma)

    def epoch_trainer(
        self, state: TrainState[CaptionNet], data: CaptionData
    ) -> Callable[[int], dict[str, Any]]:
        epoch_trainer = _scst_epoch_trainer if self.config.objective == "scst" else _caption_epoch_trainer
        return epoch_trainer(self, state, data)

    def evaluate(self, state: TrainState[CaptionNet], data: CaptionData) -> tuple[float, dict[str, Any]]:
        """Greedy captions of the dev images, scored; the epoch's score is CIDEr-D."""
        captioner = MRNNCaptioner(model=state.model, vocab=data.vocab, image=data.image, fne=data.fne)
        t0 = time.perf_counter()
        texts = captioner.caption(data.dev_x, decoding="greedy", max_len=self.config.max_decode_words)
        decode_s = time.perf_counter() - t0
        scores = self.score_fn(dict(zip(data.dev_ids, texts, strict=True)), data.dev_refs)
        scores = {**scores, **caption_diversity(texts), "decode_s": round(decode_s, 2)}
        # plain floats: a NumPy scalar from a custom score_fn would make the checkpoint unreadable
        rounded = {k: (round(float(v), 2) if isinstance(v, float) else v) for k, v in scores.items()}
        return float(scores["cider"] or 0.0), rounded

    def save_best(
        self, state: TrainState[CaptionNet], data: CaptionData, epoch: int, dev: dict[str, Any]
    ) -> None:
        config = self.config
        meta = {
            "recipe": config.to_dict(),
            "epoch": epoch,
            # scores only: a timing (decode_s) would make the same model a different file (issue 15)
            "dev_greedy": {k: v for k, v in dev.items() if not k.endswith("_s")},
            "vsekit": __version__,
        }
        if self.init is not None:  # what it was fine-tuned from, pinned by content
            meta["init"] = {"from": config.init_from, "sha256": content_fingerprint(self.out / INIT_NAME)}
        captioner = MRNNCaptioner(
            model=state.model, vocab=data.vocab, image=data.image, fne=data.fne, meta=meta
        )
        save_captioner(captioner, self.model_path)

    def describe(self, entry: dict[str, Any]) -> str:
        return _epoch_line(entry, self.config.epochs, self.config.dev_split)

    def summary_extra(self, data: CaptionData) -> dict[str, Any]:
        return {"vocab_size": len(data.vocab)}


class _CorpusRun(CaptionerRun):
    """A captioner run on a corpus's images and captions (:func:`train_captioner`)."""

    def __init__(
        self,
        corpus: Corpus,
        config: CaptionTrainConfig,
        out_dir: str | os.PathLike[str],
        feature_fn: FeatureFn,
        score_fn: ScoreFn | None,
        **options: Unpack[RunOptions],
    ) -> None:
        super().__init__(config, out_dir, score_fn, **options)
        self.corpus, self.feature_fn = selection_corpus(corpus, self.config), feature_fn

    def load_data(self, resumed: bool) -> CaptionData:
        self.init = _init_captioner(self.config, self.out, resumed)
        seed_all(self.config.seed)  # every RNG a checkpoint saves starts from the seed
        return load_caption_data(self.corpus, self.config, self.feature_fn, self.init, self.progress)


class _PreparedRun(CaptionerRun):
    """A captioner run on data prepared by the caller (:func:`fit_captioner`)."""

    def __init__(
        self,
        data: CaptionData,
        init: MRNNCaptioner | None,
        config: CaptionTrainConfig,
        out_dir: str | os.PathLike[str],
        score_fn: ScoreFn | None,
        **options: Unpack[RunOptions],
    ) -> None:
        super().__init__(config, out_dir, score_fn, **options)
        self.data, self.init = data, init

    def load_data(self, resumed: bool) -> CaptionData:
        return self.data


def train_captioner(
    corpus: Corpus,
    config: CaptionTrainConfig,
    out_dir: str | os.PathLike[str],
    *,
    feature_fn: FeatureFn | None = None,
    score_fn: ScoreFn | None = None,
    **options: Unpack[RunOptions],
) -> dict[str, Any]:
    """Train an m-RNN captioner on ``corpus``; write the run into ``out_dir``.

    Files: ``captioner.safetensors`` (best epoch by dev CIDEr-D of greedy captions), ``checkpoint.pt``,
    ``log.jsonl``, ``config.json``. ``options``: ``resume`` (continue the run in ``out_dir`` exactly; the
    config may differ only in ``CaptionTrainConfig.RESUMABLE``), ``progress``, ``device``, ``log``
    (:class:`~vsekit.training.RunOptions`). ``feature_fn`` replaces :func:`image_features` (tests inject
    small features) and ``score_fn`` the metrics. Returns a summary with ``model_path``, ``best_epoch``,
    ``best_dev`` (the scores of the best epoch), ``epochs_completed``, ``history`` and ``rerank``.
    """
    feature_fn = feature_fn or image_features
    run = _CorpusRun(corpus, config, out_dir, feature_fn, score_fn, **options)
    summary = run.run()
    rerank = None
    if config.rerank_beam and summary["best_epoch"]:
        rerank = tune_captioner_rerank(
            run.model_path,
            run.corpus,
            config.dev_split,
            config.rerank_beam,
            run.score_fn,
            feature_fn,
            run.say,
        )
    return {**summary, "rerank": rerank}


def _init_captioner(config: CaptionTrainConfig, out: Path, resumed: bool) -> MRNNCaptioner | None:
    """The captioner a run starts from (``init_from``). A new run copies it into the run directory and a
    resumed one reads that copy, so replacing the shipped captioner meanwhile changes nothing for the run.
    Its architecture and image features must be the recipe's."""
    if config.init_from is None:
        return None
    from vsekit.captioning.captioner import load_captioner
    from vsekit.fileio import atomic_write_bytes

    local = out / INIT_NAME
    if not resumed:
        source = resolve_model_path(config.init_from, "captioner")
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(local, source.read_bytes())
    elif not local.is_file():
        raise VsekitError(f"{local}: missing; it is the captioner this run started from ({config.init_from})")
    init = load_captioner(local)
    if not isinstance(init.model, MultimodalRNN):
        raise VsekitError(f"{local}: init_from must name an m-RNN captioner, not an attention one")
    have = {
        "backbone": init.image["backbone"],
        "image_features": init.image["kind"],
        "cell": init.model.config.cell,
        "word_dim": init.model.config.word_dim,
        "hidden_dim": init.model.config.hidden_dim,
        "image_rank": init.model.config.image_rank or None,
    }
    for name, value in have.items():
        if getattr(config, name) != value:
            raise VsekitError(
                f"{local}: the captioner to start from has {name}={value!r}; the recipe says "
                f"{getattr(config, name)!r} (init_from {config.init_from})"
            )
    return init


def fit_captioner(
    data: CaptionData,
    config: CaptionTrainConfig,
    out_dir: str | os.PathLike[str],
    resume: bool = False,
    progress: bool = True,
    device: str | torch.device = "auto",
    score_fn: ScoreFn | None = None,
    say: Callable[[str], None] = logger.info,
    init: MRNNCaptioner | None = None,
) -> dict[str, Any]:
    """The captioner's run (:class:`CaptionerRun`) on prepared :class:`CaptionData` (any image-like
    features with their captions: whole images, or regions and their snippets): the run directory,
    checkpoint, exact resume and best-epoch selection by dev CIDEr-D of greedy captions. ``init``: the
    captioner to start from (its weights; ``data`` must use its vocabulary)."""
    options = RunOptions(resume=resume, progress=progress, device=device, log=say)
    return _PreparedRun(data, init, config, out_dir, score_fn, **options).run()
