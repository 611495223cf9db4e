"""Training of the joint embedding, with exact resume (VSE++-style loop, without its resume bug).

One epoch = every training caption once, paired with its image, in an order drawn from a
``torch.Generator`` seeded by ``seed``. Each batch of (image feature, caption) pairs is pushed through
the model, the in-batch contrastive hinge loss (Kiros et al. 2014, Eq. 6; Vilalta et al. 2017, Eq. 1) is
computed with image-id negative masks, and Adam takes a step after grad-norm clipping (Vilalta sec. 4.2:
Adam, lr 2e-4, batch 128, clip 2, margin 0.2, up to 25 epochs, best model on validation).

After every epoch: R@K on the dev split (all images x all captions, the ``flickr`` protocol), the best
model by dev rsum written to ``model.safetensors`` (with its FNE statistics), one line in ``log.jsonl``,
and a checkpoint ``checkpoint.pt`` written atomically. The checkpoint holds everything the next epoch
depends on (weights, Adam moments, scheduler, counters, every RNG state including the batch-order
generator) as tensors and plain containers, so ``torch.load(weights_only=True)`` reads it and
``resume=True`` continues bit for bit where an interrupted run stopped: 2 epochs + resume to 4 gives the
same weights as 4 epochs in one go.

A recipe with ``ensemble_seeds`` trains one such run per seed, in turn, into ``OUT/seed-<s>/`` (each
selected on dev rsum and resumable like any run), then packs the members' best models into one
:class:`~vsekit.embedding.model.EnsembleEmbedding` in ``OUT/model.safetensors``. The members share the
frozen MiniLM transformer and its per-text cache, so the training captions are encoded once, not once per
member.

The recipe (:class:`~vsekit.embedding.recipe.TrainConfig`) lives in :mod:`vsekit.embedding.recipe` and
a run's inputs and their identity in :mod:`vsekit.embedding.train_data`; this module is the loop.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from vsekit.data.corpus import Corpus
from vsekit.device import resolve_device
from vsekit.embedding.losses import ContrastiveLoss, InfoNCELoss
from vsekit.embedding.model import EnsembleEmbedding, JointEmbedding, load_model, save_model
from vsekit.embedding.recipe import RECIPES_DIR, TRAIN_VIEW_SETS, TrainConfig, list_recipes, load_recipe
from vsekit.embedding.train_data import FeatureFn, RunData, check_same_run, load_data
from vsekit.errors import VsekitError
from vsekit.fileio import atomic_write_text
from vsekit.metrics.ranking import evaluate_protocol
from vsekit.rng import seed_all
from vsekit.text import EMBED_DIM_KWARG, TextEncoder, build_text_encoder
from vsekit.training import (
    CHECKPOINT_NAME,
    CONFIG_NAME,
    RunOptions,
    TrainingRun,
    TrainState,
    broadcast_from_main,
    epoch_bar,
    gather_for_loss,
    init_from_env,
    is_main_process,
    main_first,
    read_checkpoint,
    selection_corpus,
    shard,
    shut_down,
    step_lr,
    sync_gradients,
)
from vsekit.vision.backbones import head_affine, load_backbone
from vsekit.vision.features import FeatureSpec, image_features

__all__ = [
    "CHECKPOINT_NAME",
    "MODEL_NAME",
    "RECIPES_DIR",
    "TRAIN_VIEW_SETS",
    "TrainConfig",
    "evaluate_dev",
    "list_recipes",
    "load_checkpoint",
    "load_recipe",
    "train",
    "train_in_turn",
]

if TYPE_CHECKING:
    from torch.optim.lr_scheduler import StepLR
    from typing_extensions import Unpack

MODEL_NAME = "model.safetensors"
KIND = "joint-embedding"  # the checkpoint kind this trainer writes


# -- checkpoint --------------------------------------------------------------------------------------


def load_checkpoint(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a joint-embedding training checkpoint with ``weights_only=True``; errors name the file."""
    return read_checkpoint(path, KIND)


# -- the loop ----------------------------------------------------------------------------------------


def evaluate_dev(
    model: JointEmbedding | EnsembleEmbedding,
    features: torch.Tensor,
    texts: Sequence[str],
    image_ids: Sequence[str],
    caption_image_ids: Sequence[str],
) -> dict:
    """Dev R@K under the flickr protocol (every dev image against every dev caption)."""
    img = model.embed_images(features)
    cap = model.embed_texts(texts)
    return evaluate_protocol(img, cap, image_ids, caption_image_ids, "flickr")


def _epoch_line(entry: dict, epochs: int) -> str:
    line = f"epoch {entry['epoch']:>3}/{epochs} loss {entry['loss']:.4f}"
    dev = entry.get("dev")
    if dev is not None:
        i2t, t2i = dev["i2t"], dev["t2i"]
        line += (
            f" | i2t R@1 {i2t['r1']:5.1f} R@5 {i2t['r5']:5.1f} R@10 {i2t['r10']:5.1f}"
            f" | t2i R@1 {t2i['r1']:5.1f} R@5 {t2i['r5']:5.1f} R@10 {t2i['r10']:5.1f}"
            f" | rsum {dev['rsum']:6.1f}{' *' if entry.get('best') else ''}"
        )
    return line + f" | {entry['time_s']:.1f}s"


def train(
    corpus: Corpus,
    config: TrainConfig,
    out_dir: str | os.PathLike[str],
    *,
    cache_root: str | os.PathLike[str] | None = None,
    feature_fn: FeatureFn | None = None,
    **options: Unpack[RunOptions],
) -> dict[str, Any]:
    """Train a joint embedding on ``corpus`` with ``config``; write the run into ``out_dir``.

    Files: ``model.safetensors`` (best dev rsum so far, with FNE statistics), ``checkpoint.pt`` (last
    finished epoch), ``log.jsonl`` (one JSON object per epoch), ``config.json``.

    ``options`` (:class:`~vsekit.training.RunOptions`): ``resume=True`` continues from ``checkpoint.pt``
    (a fresh start if there is none yet); the config may differ only in ``TrainConfig.RESUMABLE``
    (typically a larger ``epochs``), otherwise ConfigMismatchError names the field. Without ``resume`` an
    existing checkpoint is an error, so a run is never overwritten by accident. ``progress``, ``device``,
    and ``log``, which receives the per-epoch lines (default: written above the progress bar).

    ``feature_fn`` replaces :func:`vsekit.vision.features.image_features` (same signature and return);
    tests use it to inject small fake features instead of running the CNN.

    Returns a summary: ``out_dir``, ``model_path``, ``epochs_completed``, ``best_epoch``, ``best_rsum``,
    ``best_dev`` (the dev metrics of the best epoch), ``stopped_early``, ``history`` (the log entries).

    With ``config.ensemble_seeds`` every seed is such a run in ``out_dir/seed-<s>`` (``resume`` applies to
    each) and ``out_dir/model.safetensors`` is their packed ensemble; the summary then has ``members``
    (the member summaries, each with its ``seed``), ``best_dev`` / ``best_rsum`` of the ensemble on dev,
    and ``epochs_completed`` / ``best_epoch`` as lists over the members.

    Under ``torchrun`` (``WORLD_SIZE`` > 1) this joins the process group and trains data-parallel:
    ``config.batch_size`` stays the global batch (each rank embeds its share, the loss sees the whole
    batch), so the run follows the single-process one up to float summation order; only rank 0 writes
    files and reports (see :mod:`vsekit.training.distributed`).
    """
    config.validate()
    corpus = selection_corpus(corpus, config)
    joined = init_from_env(resolve_device(options.get("device", "auto")))  # under torchrun only
    try:
        if config.ensemble_seeds:
            return _train_ensemble(corpus, config, Path(out_dir), cache_root, feature_fn, options)
        return _EmbeddingRun(corpus, config, out_dir, cache_root, feature_fn, None, **options).run()
    finally:
        shut_down(joined)


def train_in_turn(
    corpus: Corpus,
    runs: Sequence[tuple[TrainConfig, str | os.PathLike[str]]],
    *,
    cache_root: str | os.PathLike[str] | None = None,
    feature_fn: FeatureFn | None = None,
    **options: Unpack[RunOptions],
) -> list[dict[str, Any]]:
    """Train several single-model recipes one after the other in this process, each into its own run
    directory exactly as :func:`train` would, sharing the frozen text encoder between them as ensemble
    members do: with MiniLM the training captions are encoded once for all runs instead of once per run
    (most of a run's first epoch). Experiments that differ in anything but the frozen text part use it.
    ``feature_fn`` and ``options`` as in :func:`train`. Returns the runs' summaries, in order. (Single
    process only; not under torchrun.)
    """
    summaries: list[dict[str, Any]] = []
    shared: TextEncoder | None = None
    for config, out in runs:
        if config.ensemble_seeds:
            raise VsekitError(f"recipe {config.name!r}: train_in_turn takes single-model recipes")
        selected = selection_corpus(corpus, config)
        run = _EmbeddingRun(selected, config, out, cache_root, feature_fn, shared, **options)
        run.say(f"run {len(summaries) + 1}/{len(runs)}: recipe {config.name!r} -> {out}")
        summaries.append(run.run())
        shared = run.text_encoder
    return summaries


def _train_ensemble(
    corpus: Corpus,
    config: TrainConfig,
    out: Path,
    cache_root: str | os.PathLike[str] | None,
    feature_fn: FeatureFn | None,
    options: RunOptions,
) -> dict[str, Any]:
    """Train one member per seed in ``out/seed-<s>`` (sharing the frozen text encoder), then pack them."""
    assert config.ensemble_seeds
    if (out / CHECKPOINT_NAME).exists():
        raise VsekitError(
            f"{out} holds a single-model run ({CHECKPOINT_NAME}); an ensemble recipe trains into "
            "seed-<s>/ subdirectories: choose another --out"
        )
    out.mkdir(parents=True, exist_ok=True)
    if is_main_process():
        atomic_write_text(out / CONFIG_NAME, json.dumps(config.to_dict(), indent=2) + "\n")
    members: list[dict[str, Any]] = []
    shared: TextEncoder | None = None
    n = len(config.ensemble_seeds)
    for k, seed in enumerate(config.ensemble_seeds, start=1):
        member_config = dataclasses.replace(config, seed=seed, ensemble_seeds=None)
        member = _EmbeddingRun(
            corpus, member_config, out / f"seed-{seed}", cache_root, feature_fn, shared, **options
        )
        member.say(f"ensemble member {k}/{n}: seed {seed} -> {member.out}")
        summary = member.run()
        shared = member.text_encoder
        if summary["best_dev"] is None:
            raise VsekitError(f"{member.out}: the run has no dev-selected model to pack")
        members.append({"seed": seed, **summary})

    member_meta = [{"seed": m["seed"], "epoch": m["best_epoch"], "dev": m["best_dev"]} for m in members]

    def pack() -> dict[str, Any]:  # on rank 0 only: the member files are on its machine
        assert shared is not None  # the first member's text encoder
        models: list[JointEmbedding] = []
        for m in members:
            model = load_model(m["model_path"], device=member.device)[0]
            assert isinstance(model, JointEmbedding)  # a member's file holds one model
            models.append(model)
        for model in models:
            model.text_encoder.share_frozen(shared)  # the captions are already encoded: reuse that cache
        packed = EnsembleEmbedding(models)
        metrics = _dev_rsum(packed, member.data)
        meta = {"dev": metrics, "recipe": config.name, "train": config.to_dict(), "members": member_meta}
        save_model(packed, out / MODEL_NAME, fne=member.data.fne, extra_meta=meta)
        return metrics

    metrics = broadcast_from_main(pack)
    for m in member_meta:
        member.say(f"member seed {m['seed']}: dev rsum {m['dev']['rsum']:.1f} (epoch {m['epoch']})")
    member.say(
        f"ensemble of {n}: i2t R@1 {metrics['i2t']['r1']:.1f} | t2i R@1 {metrics['t2i']['r1']:.1f} "
        f"| rsum {metrics['rsum']:.1f} -> {out / MODEL_NAME}"
    )
    return {
        "out_dir": str(out),
        "model_path": str(out / MODEL_NAME),
        "epochs_completed": [m["epochs_completed"] for m in members],
        "best_epoch": [m["best_epoch"] for m in members],
        "best_rsum": metrics["rsum"],
        "best_dev": metrics,
        "stopped_early": [m["stopped_early"] for m in members],
        "history": [],
        "members": members,
    }


def _dev_rsum(model: JointEmbedding | EnsembleEmbedding, data: RunData) -> dict[str, Any]:
    """The dev metrics a run keeps: R@K both ways and rsum."""
    metrics = evaluate_dev(model, data.dev_feats, data.dev_texts, data.dev_ids, data.dev_cap_ids)
    return {k: metrics[k] for k in ("i2t", "t2i", "rsum")}


def _build_model(
    config: TrainConfig, data: RunData, device: torch.device, share_text_from: TextEncoder | None
) -> JointEmbedding:
    """The seeded initial model: the same seed builds the same weights (a pre-head model's copy of the
    CNN head: the CNN's ImageNet head, read before seeding since building the CNN draws from the RNG)."""
    imagenet_head = _imagenet_head(config.backbone) if config.image_features == "pre-head" else None
    seed_all(config.seed)
    enc_kwargs = {EMBED_DIM_KWARG[config.text_encoder]: config.embed_dim, **config.text_encoder_kwargs}
    encoder = build_text_encoder(config.text_encoder, data.vocab, **enc_kwargs)
    if share_text_from is not None:
        encoder.share_frozen(share_text_from)  # after building: the seeded RNG draws stay those of a lone run
    if config.head == "linear" and encoder.output_dim != config.embed_dim:
        raise VsekitError(
            f"text encoder {config.text_encoder!r} gives {encoder.output_dim}-d vectors, embed_dim is "
            f"{config.embed_dim}"
        )
    with_cells = config.image_pool is not None or imagenet_head is not None
    cells = FeatureSpec(config.backbone, "grid").grid_cells if with_cells else None
    model = JointEmbedding(
        encoder,
        data.features["image_dim"],
        config.backbone,
        config.image_features,
        data.vocab,
        image_dropout=config.image_dropout,
        image_rank=config.image_rank,
        head=config.head,
        embed_dim=config.embed_dim,
        pool=config.image_pool,
        grid_dropout=config.grid_dropout,
        cells=cells,
        head_dim=imagenet_head[0].shape[0] if imagenet_head is not None else None,
    )
    if model.cnn_head is not None and imagenet_head is not None:
        model.cnn_head.load_affine(*imagenet_head)
    return model.to(device)


def _imagenet_head(backbone: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The CNN's head as one affine map per cell, BatchNorm folded in (``head_affine``), from its
    installed ImageNet weights: where a pre-head model's trainable copy starts."""
    return head_affine(load_backbone(backbone))


class _WithLoss(torch.nn.Module):
    """The network and a loss with parameters of its own (InfoNCE's temperature), trained together: one
    module, so the checkpoint holds both and resume restores both."""

    def __init__(self, net: JointEmbedding, loss: torch.nn.Module) -> None:
        super().__init__()
        self.net, self.loss = net, loss


def _epoch_trainer(
    state: TrainState, config: TrainConfig, data: RunData, device: torch.device, progress: bool
) -> Callable[[int], dict[str, Any]]:
    """One epoch: every training caption once with its image (one view of it, when the recipe has views),
    in a seeded order, Adam on the hinge or InfoNCE loss."""
    model, optimizer = state.model, state.optimizer
    learned_loss = model.loss if isinstance(model, _WithLoss) else None
    if isinstance(model, _WithLoss):
        model = model.net
    params = [p for group in optimizer.param_groups for p in group["params"]]
    cap_rows = torch.tensor(data.train_rows, dtype=torch.int64)
    n_pairs = len(data.train_texts)
    views = data.train_views

    def embed(idx: torch.Tensor, view_of: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        if len(idx) == 0:  # this rank's share of a short last batch (data-parallel only)
            empty = torch.zeros(0, config.embed_dim, device=device)
            return empty, empty
        prepared = model.text_encoder.prepare([data.train_texts[i] for i in idx.tolist()])
        rows = cap_rows[idx]
        if view_of is None:
            feats = data.train_feats[rows]
        else:
            assert views is not None  # view_of is drawn only when there are views
            feats = views[view_of[rows], rows]
        return model(feats.to(device), **{k: v.to(device) for k, v in prepared.items()})

    def train_epoch(epoch: int) -> dict[str, Any]:
        model.train()
        max_violation = config.max_violation_at(epoch)
        criterion = learned_loss or ContrastiveLoss(config.margin, max_violation)
        perm = torch.randperm(n_pairs, generator=state.generator)
        # one view per photo for the whole epoch, drawn after the order (no draw without views, so runs
        # without them keep the stream they always had); the generator is in the checkpoint
        view_of = (
            torch.randint(len(views), (len(data.train_feats),), generator=state.generator)
            if views is not None
            else None
        )
        total = 0.0
        bar = epoch_bar(range(0, n_pairs, config.batch_size), epoch, config.epochs, progress)
        for start in bar:
            # batch_size is the global batch; with several ranks each embeds every world_size-th pair of it
            idx = shard(perm[start : start + config.batch_size])
            img_emb, cap_emb = embed(idx, view_of)
            # the global batch on every rank (identity on one process): negatives and the hardest negative
            # come from all ranks; rows are image ids, so two captions of one image are never negatives
            img_all, cap_all, ids = gather_for_loss(img_emb, cap_emb, cap_rows[idx].to(device))
            loss = criterion(img_all, cap_all, ids)
            optimizer.zero_grad(set_to_none=True)
            if loss.requires_grad:  # not on a rank whose share of the batch is empty
                loss.backward()
            sync_gradients(params)  # sum of the ranks' partial gradients = the global loss's gradient
            if config.grad_clip is not None:
                torch.nn.utils.clip_grad_norm_(params, config.grad_clip)
            optimizer.step()
            total += loss.item()
            bar.set_postfix(loss=f"{total / min(start + config.batch_size, n_pairs):.4f}")
        bar.close()
        entry = {
            # hinge: the mean loss per training pair; InfoNCE: per batch of pairs (it is a batch mean)
            "loss": total / (n_pairs if learned_loss is None else len(range(0, n_pairs, config.batch_size))),
            "loss_kind": config.loss
            if learned_loss is not None
            else "max_violation"
            if max_violation
            else "sum",
            "lr": optimizer.param_groups[0]["lr"],
        }
        if isinstance(learned_loss, InfoNCELoss):
            entry["temperature"] = learned_loss.temperature
        return entry

    return train_epoch


class _EmbeddingRun(TrainingRun[TrainConfig, RunData, torch.nn.Module]):
    """The joint embedding's part of the run template: image features and captions, hinge or InfoNCE
    epochs, dev rsum. ``share_text_from`` lends its frozen text encoder part (ensemble members, runs in
    turn)."""

    kind, model_name, metric, score_key = KIND, MODEL_NAME, "rsum", "best_rsum"

    def __init__(
        self,
        corpus: Corpus,
        config: TrainConfig,
        out_dir: str | os.PathLike[str],
        cache_root: str | os.PathLike[str] | None,
        feature_fn: FeatureFn | None,
        share_text_from: TextEncoder | None,
        **options: Unpack[RunOptions],
    ) -> None:
        super().__init__(config, out_dir, **options)
        self.corpus, self.cache_root, self.share_text_from = corpus, cache_root, share_text_from
        self.feature_fn = feature_fn or image_features

    def load_data(self, resumed: bool) -> RunData:
        feature_kwargs = {
            "cache_root": self.cache_root,
            "device": str(self.device),
            "progress": self.progress,
        }
        self.data = load_data(self.corpus, self.config, self.feature_fn, feature_kwargs)  # kept for a pack
        return self.data

    def check_data(self, ckpt: dict[str, Any], data: RunData) -> None:
        check_same_run(ckpt, self.dir.checkpoint_path, self.config, data.features, data.identity, data.vocab)

    def build(self, data: RunData) -> tuple[torch.nn.Module, torch.optim.Optimizer, StepLR | None]:
        config = self.config
        self.net = model = _build_model(config, data, self.device, self.share_text_from)
        # what the text encoder computes once per corpus (the Tree-LSTM's dependency parses), cached on disk
        with main_first():
            texts = data.train_texts + data.dev_texts
            model.text_encoder.precompute(texts, cache_root=self.cache_root, progress=self.progress)
        trained: torch.nn.Module = model
        if config.loss == "infonce":  # the temperature is learned with the network (and checkpointed with it)
            trained = _WithLoss(model, InfoNCELoss(config.temperature)).to(self.device)
        params = [p for p in trained.parameters() if p.requires_grad]
        optimizer = torch.optim.Adam(params, lr=config.lr, weight_decay=config.weight_decay)
        return trained, optimizer, step_lr(optimizer, config.lr_decay_epochs, config.lr_decay_gamma)

    @property
    def text_encoder(self) -> TextEncoder:
        """The trained network's text encoder (its frozen part can be lent to the next run)."""
        return self.net.text_encoder

    def epoch_trainer(
        self, state: TrainState[torch.nn.Module], data: RunData
    ) -> Callable[[int], dict[str, Any]]:
        return _epoch_trainer(state, self.config, data, self.device, self.progress)

    def evaluate(self, state: TrainState[torch.nn.Module], data: RunData) -> tuple[float, dict[str, Any]]:
        metrics = _dev_rsum(self.net, data)
        return metrics["rsum"], metrics

    def save_best(
        self, state: TrainState[torch.nn.Module], data: RunData, epoch: int, dev: dict[str, Any]
    ) -> None:
        meta = {"epoch": epoch, "dev": dev, "recipe": self.config.name, "train": self.config.to_dict()}
        save_model(self.net, self.model_path, fne=data.fne, extra_meta=meta)

    def describe(self, entry: dict[str, Any]) -> str:
        return _epoch_line(entry, self.config.epochs)

    def checkpoint_extra(self, data: RunData) -> dict[str, Any]:
        return {
            "vocab": data.vocab.to_dict() if data.vocab is not None else None,
            "features": data.features,
            "data": data.identity,
        }
