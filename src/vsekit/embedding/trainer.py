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
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import random
import time
import typing
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from vsekit.data.corpus import Corpus
from vsekit.data.vocab import Vocabulary, build_vocabulary
from vsekit.device import resolve_device
from vsekit.embedding.losses import ContrastiveLoss
from vsekit.embedding.model import EnsembleEmbedding, JointEmbedding, load_model, save_model
from vsekit.errors import ConfigMismatchError, CorpusError, VsekitError
from vsekit.fileio import atomic_torch_save, atomic_write_text, read_named_json
from vsekit.metrics.ranking import evaluate_protocol
from vsekit.resources import RECIPES_DIR
from vsekit.rng import rng_state, set_rng_state
from vsekit.text import EMBED_DIM_KWARG, TEXT_ENCODERS, TextEncoder, build_text_encoder
from vsekit.vision.features import FEATURE_KINDS, image_features
from vsekit.vision.fne import FullNetworkEmbedding

__all__ = [
    "CHECKPOINT_NAME",
    "MODEL_NAME",
    "RECIPES_DIR",
    "TrainConfig",
    "list_recipes",
    "load_checkpoint",
    "load_recipe",
    "train",
]

CHECKPOINT_NAME = "checkpoint.pt"
MODEL_NAME = "model.safetensors"
LOG_NAME = "log.jsonl"
CONFIG_NAME = "config.json"
CHECKPOINT_FORMAT = "vsekit.checkpoint"
CHECKPOINT_VERSION = 1

#: Fields a resumed run may change: they do not alter what the finished epochs computed.
RESUMABLE_FIELDS = frozenset({"name", "description", "epochs", "patience", "num_threads"})

FeatureFn = Callable[..., tuple[np.ndarray, "FullNetworkEmbedding | None"]]


# -- configuration -----------------------------------------------------------------------------------


@dataclass
class TrainConfig:
    """Everything that defines a training run; recipes in ``src/vsekit/recipes/*.json`` are these as JSON.

    Loss schedule: ``loss="sum"`` is the sum of hinges over all in-batch negatives (Kiros Eq. 6) for
    every epoch. ``loss="max_violation"`` is the hardest negative (VSE++); with
    ``max_violation_after_epoch=N`` the first N epochs are a warm-up with the sum of hinges and epochs
    N+1.. use the hardest negative (None: hardest negative from the first epoch, no warm-up). The loss of
    a batch is the sum over its pairs, as in the papers (see ``ContrastiveLoss``).

    ``ensemble_seeds``: train one model per seed (``seed`` is then unused) and ship their ensemble (see
    the module docstring); None trains the single model of ``seed``.

    ``patience`` counts dev evaluations (every ``eval_every`` epochs) without a better rsum; None never
    stops early (the best epoch is still the one kept). ``lr_decay_epochs`` is StepLR's step size
    (None: constant learning rate). ``text_encoder_kwargs`` go to the encoder constructor; its output
    size is ``embed_dim`` (K), which must not be repeated there.
    """

    name: str = "custom"
    description: str = ""
    text_encoder: str = "gru"
    text_encoder_kwargs: dict = field(default_factory=lambda: {"word_dim": 300})
    embed_dim: int = 1024
    backbone: str = "mobilenet_v2"
    image_features: str = "one-layer"
    image_dropout: float = 0.0
    image_rank: int | None = None
    train_split: str = "train"
    dev_split: str = "dev"
    loss: str = "sum"
    margin: float = 0.2
    max_violation_after_epoch: int | None = None
    batch_size: int = 128
    epochs: int = 25
    lr: float = 2e-4
    lr_decay_epochs: int | None = None
    lr_decay_gamma: float = 0.1
    grad_clip: float | None = 2.0
    weight_decay: float = 0.0
    vocab_min_count: int = 1
    vocab_max_size: int | None = 1000
    patience: int | None = 5
    seed: int = 0
    ensemble_seeds: list[int] | None = None
    eval_every: int = 1
    num_threads: int | None = None

    def validate(self, source: str = "config") -> TrainConfig:
        """Raise VsekitError naming ``source`` and the field for any out-of-range value; returns self."""

        def bad(name: str, why: str) -> VsekitError:
            return VsekitError(f"{source}: field '{name}' {why} (got {getattr(self, name)!r})")

        if self.text_encoder not in TEXT_ENCODERS:
            raise bad("text_encoder", f"must be one of {', '.join(TEXT_ENCODERS)}")
        if self.image_features not in FEATURE_KINDS:
            raise bad("image_features", f"must be one of {', '.join(FEATURE_KINDS)}")
        if self.loss not in ("sum", "max_violation"):
            raise bad("loss", "must be 'sum' or 'max_violation'")
        if self.max_violation_after_epoch is not None:
            if self.loss != "max_violation":
                raise bad(
                    "max_violation_after_epoch", "is a warm-up for loss='max_violation'; set it to null"
                )
            if self.max_violation_after_epoch < 0:
                raise bad("max_violation_after_epoch", "must be >= 0 or null")
        embed_key = EMBED_DIM_KWARG.get(self.text_encoder)
        if embed_key in self.text_encoder_kwargs:
            raise bad("text_encoder_kwargs", f"must not set {embed_key!r}: the output size is embed_dim")
        for name in ("embed_dim", "batch_size", "epochs", "eval_every", "vocab_min_count"):
            if getattr(self, name) < 1:
                raise bad(name, "must be >= 1")
        if not 0.0 <= self.image_dropout < 1.0:
            raise bad("image_dropout", "must be in [0, 1)")
        for name in ("lr_decay_epochs", "patience", "num_threads", "vocab_max_size", "image_rank"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise bad(name, "must be >= 1 or null")
        if not self.lr > 0:
            raise bad("lr", "must be > 0")
        if self.margin < 0 or self.weight_decay < 0 or not 0 < self.lr_decay_gamma <= 1:
            name = (
                "margin" if self.margin < 0 else "weight_decay" if self.weight_decay < 0 else "lr_decay_gamma"
            )
            raise bad(name, "is out of range")
        if self.grad_clip is not None and not self.grad_clip > 0:
            raise bad("grad_clip", "must be > 0 or null")
        if self.ensemble_seeds is not None and (
            not self.ensemble_seeds or len(set(self.ensemble_seeds)) != len(self.ensemble_seeds)
        ):
            raise bad("ensemble_seeds", "must be a non-empty list of distinct seeds or null")
        return self

    @classmethod
    def from_dict(cls, data: Any, source: str = "config") -> TrainConfig:
        """Build from a JSON object; unknown fields and wrong types raise VsekitError naming them."""
        if not isinstance(data, dict):
            raise VsekitError(f"{source}: expected a JSON object, found {type(data).__name__}")
        hints = typing.get_type_hints(cls)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(k for k in data if k not in known)
        if unknown:
            raise VsekitError(f"{source}: unknown field(s) {', '.join(unknown)} (fields: {', '.join(known)})")
        for key, value in data.items():
            if not _type_ok(value, hints[key]):
                raise VsekitError(f"{source}: field '{key}' must be {_type_name(hints[key])}, got {value!r}")
        copied = {
            k: (dict(v) if isinstance(v, dict) else list(v) if isinstance(v, list) else v)
            for k, v in data.items()
        }
        return cls(**copied).validate(source)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def max_violation_at(self, epoch: int) -> bool:
        """Whether 1-based ``epoch`` uses the hardest-negative loss."""
        return self.loss == "max_violation" and epoch > (self.max_violation_after_epoch or 0)


def _type_ok(value: Any, hint: Any) -> bool:
    args = typing.get_args(hint)
    options = args if args else (hint,)
    for option in options:
        if option is type(None) and value is None:
            return True
        if typing.get_origin(option) is list:
            (item,) = typing.get_args(option)
            if isinstance(value, list) and all(_type_ok(v, item) for v in value):
                return True
            continue
        if option is float and isinstance(value, int | float) and not isinstance(value, bool):
            return True
        if option is int and isinstance(value, int) and not isinstance(value, bool):
            return True
        if option in (str, bool, dict) and isinstance(value, option):
            return True
    return False


def _type_name(hint: Any) -> str:
    def name(a: Any) -> str:
        if a is type(None):
            return "null"
        if typing.get_origin(a) is list:
            return f"a list of {name(typing.get_args(a)[0])}"
        return a.__name__

    return " or ".join(name(a) for a in typing.get_args(hint) or (hint,))


def list_recipes() -> list[str]:
    """Names of the recipes shipped in ``src/vsekit/recipes``."""
    return sorted(p.stem for p in RECIPES_DIR.glob("*.json"))


def load_recipe(name_or_path: str | os.PathLike[str]) -> TrainConfig:
    """A shipped recipe by name (``"kiros-gru"``) or any JSON file of TrainConfig fields by path."""
    data, path = read_named_json(name_or_path, RECIPES_DIR, "recipe")
    return TrainConfig.from_dict(data, source=str(path))


# -- checkpoint --------------------------------------------------------------------------------------


def load_checkpoint(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a training checkpoint with ``weights_only=True`` (no code runs); errors name the file."""
    path = Path(path)
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise VsekitError(f"{path}: checkpoint not found") from None
    except Exception as exc:  # truncated zip, foreign pickle, disallowed global, ...
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()] or [type(exc).__name__]
        why = next((ln for ln in lines if ln.startswith("WeightsUnpickler error")), lines[0])
        raise VsekitError(f"{path}: unreadable checkpoint ({why})") from exc
    if not isinstance(ckpt, dict) or ckpt.get("format") != CHECKPOINT_FORMAT:
        raise VsekitError(f"{path}: not a vsekit training checkpoint")
    if ckpt.get("version", 0) > CHECKPOINT_VERSION:
        raise VsekitError(f"{path}: checkpoint version {ckpt['version']} is newer than this vsekit reads")
    return ckpt


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


#: Defaults of TrainConfig fields: a checkpoint written before a field existed ran with its default.
_FIELD_DEFAULTS = {
    f.name: f.default for f in dataclasses.fields(TrainConfig) if f.default is not dataclasses.MISSING
}


def _check_same_run(ckpt: dict, path: Path, config: TrainConfig, ident: dict, data: dict, vocab) -> None:
    """ConfigMismatchError naming the first field where the checkpoint's run differs from this one."""
    old_cfg = {**_FIELD_DEFAULTS, **ckpt["config"]}
    for key, value in config.to_dict().items():
        if key in RESUMABLE_FIELDS:
            continue
        if key not in old_cfg or old_cfg[key] != value:
            raise ConfigMismatchError(
                f"{path}: cannot resume: the checkpoint was trained with {key}={old_cfg.get(key)!r}, "
                f"this run asks for {key}={value!r} (use another --out or the original settings)"
            )
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


# -- data --------------------------------------------------------------------------------------------


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
    resume: bool = False,
    progress: bool = True,
    device: str | torch.device = "auto",
    cache_root: str | os.PathLike[str] | None = None,
    feature_fn: FeatureFn | None = None,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Train a joint embedding on ``corpus`` with ``config``; write the run into ``out_dir``.

    Files: ``model.safetensors`` (best dev rsum so far, with FNE statistics), ``checkpoint.pt`` (last
    finished epoch), ``log.jsonl`` (one JSON object per epoch), ``config.json``.

    ``resume=True`` continues from ``checkpoint.pt`` (a fresh start if there is none yet); the config
    may differ only in :data:`RESUMABLE_FIELDS` (typically a larger ``epochs``), otherwise
    ConfigMismatchError names the field. Without ``resume`` an existing checkpoint is an error, so a run
    is never overwritten by accident.

    ``feature_fn`` replaces :func:`vsekit.vision.features.image_features` (same signature and return);
    tests use it to inject small fake features instead of running the CNN. ``log`` receives the
    per-epoch lines (default: written above the progress bar).

    Returns a summary: ``out_dir``, ``model_path``, ``epochs_completed``, ``best_epoch``, ``best_rsum``,
    ``best_dev`` (the dev metrics of the best epoch), ``stopped_early``, ``history`` (the log entries).

    With ``config.ensemble_seeds`` every seed is such a run in ``out_dir/seed-<s>`` (``resume`` applies to
    each) and ``out_dir/model.safetensors`` is their packed ensemble; the summary then has ``members``
    (the member summaries, each with its ``seed``), ``best_dev`` / ``best_rsum`` of the ensemble on dev,
    and ``epochs_completed`` / ``best_epoch`` as lists over the members.
    """
    config.validate()
    say = log if log is not None else tqdm.write
    run = dict(
        resume=resume, progress=progress, device=device, cache_root=cache_root, feature_fn=feature_fn, say=say
    )
    if config.ensemble_seeds:
        return _train_ensemble(corpus, config, Path(out_dir), **run)
    return _train_one(corpus, config, Path(out_dir), **run)[0]


def _train_ensemble(corpus: Corpus, config: TrainConfig, out: Path, **run: Any) -> dict[str, Any]:
    """Train one member per seed in ``out/seed-<s>`` (sharing the frozen text encoder), then pack them."""
    assert config.ensemble_seeds
    say = run["say"]
    if (out / CHECKPOINT_NAME).exists():
        raise VsekitError(
            f"{out} holds a single-model run ({CHECKPOINT_NAME}); an ensemble recipe trains into "
            "seed-<s>/ subdirectories: choose another --out"
        )
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / CONFIG_NAME, json.dumps(config.to_dict(), indent=2) + "\n")
    members: list[dict[str, Any]] = []
    shared: TextEncoder | None = None
    n = len(config.ensemble_seeds)
    for k, seed in enumerate(config.ensemble_seeds, start=1):
        say(f"ensemble member {k}/{n}: seed {seed} -> {out / f'seed-{seed}'}")
        member_config = dataclasses.replace(config, seed=seed, ensemble_seeds=None)
        summary, ctx = _train_one(corpus, member_config, out / f"seed-{seed}", share_text_from=shared, **run)
        shared = ctx.encoder
        if summary["best_dev"] is None:
            raise VsekitError(f"{out / f'seed-{seed}'}: the run has no dev-selected model to pack")
        members.append({"seed": seed, **summary})

    models = [load_model(m["model_path"], device=ctx.device)[0] for m in members]
    for model in models:
        model.text_encoder.share_frozen(shared)  # the captions are already encoded: reuse that cache
    packed = EnsembleEmbedding(models)
    metrics = evaluate_dev(packed, ctx.dev_feats, ctx.dev_texts, ctx.dev_ids, ctx.dev_cap_ids)
    metrics = {k: metrics[k] for k in ("i2t", "t2i", "rsum")}
    member_meta = [{"seed": m["seed"], "epoch": m["best_epoch"], "dev": m["best_dev"]} for m in members]
    save_model(
        packed,
        out / MODEL_NAME,
        fne=ctx.fne,
        extra_meta={"dev": metrics, "recipe": config.name, "train": config.to_dict(), "members": member_meta},
    )
    for m in member_meta:
        say(f"member seed {m['seed']}: dev rsum {m['dev']['rsum']:.1f} (epoch {m['epoch']})")
    say(
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


@dataclass
class _RunContext:
    """What an ensemble needs from a finished member run: its device, text encoder and dev data."""

    device: torch.device
    encoder: TextEncoder
    fne: FullNetworkEmbedding | None
    dev_feats: torch.Tensor
    dev_texts: list[str]
    dev_ids: list[str]
    dev_cap_ids: list[str]


def _train_one(
    corpus: Corpus,
    config: TrainConfig,
    out: Path,
    resume: bool,
    progress: bool,
    device: str | torch.device,
    cache_root: str | os.PathLike[str] | None,
    feature_fn: FeatureFn | None,
    say: Callable[[str], None],
    share_text_from: TextEncoder | None = None,
) -> tuple[dict[str, Any], _RunContext]:
    """One training run (see :func:`train`); ``share_text_from`` lends its frozen text encoder part."""
    ckpt_path = out / CHECKPOINT_NAME
    ckpt = None
    if ckpt_path.exists():
        if not resume:
            raise VsekitError(
                f"{out} already holds a training run ({CHECKPOINT_NAME}); pass --resume to continue it "
                "or choose another --out"
            )
        ckpt = load_checkpoint(ckpt_path)
    if config.num_threads:
        torch.set_num_threads(config.num_threads)
    dev = resolve_device(device)
    feature_fn = feature_fn or image_features

    # -- data: vocabulary from the training split only, image features fitted on it ----------------
    train_split, dev_split = corpus.split(config.train_split), corpus.split(config.dev_split)
    train_ids, train_texts, train_rows = _split_pairs(train_split)
    dev_ids, dev_texts, dev_rows = _split_pairs(dev_split)
    if not train_texts:
        raise CorpusError(f"{corpus.root}: split '{config.train_split}' has no captions to train on")
    if not dev_texts:
        raise CorpusError(f"{corpus.root}: split '{config.dev_split}' has no captions to evaluate on")
    dev_cap_ids = [dev_ids[r] for r in dev_rows]
    word_based = config.text_encoder != "minilm"
    vocab = (
        build_vocabulary(corpus, config.train_split, config.vocab_min_count, config.vocab_max_size)
        if word_based
        else None
    )
    feature_kwargs = {"cache_root": cache_root, "device": str(dev), "progress": progress}
    train_np, fne = feature_fn(
        corpus,
        train_ids,
        config.backbone,
        config.image_features,
        fit_split=config.train_split,
        **feature_kwargs,
    )
    dev_np, _ = feature_fn(corpus, dev_ids, config.backbone, config.image_features, fne=fne, **feature_kwargs)
    train_feats = _as_tensor(train_np, len(train_ids), "training")
    dev_feats = _as_tensor(dev_np, len(dev_ids), "dev")
    if config.image_features == "fne" and fne is None:
        raise VsekitError("FNE features came without their fitted Full-Network Embedding")
    image_dim = int(train_feats.shape[1])
    if dev_feats.shape[1] != image_dim:
        raise ConfigMismatchError(
            f"dev features have dim {dev_feats.shape[1]}, training features {image_dim}"
        )
    ident = _feature_identity(config.backbone, config.image_features, image_dim, fne)
    data_ident = _data_identity(train_split, dev_split)
    if ckpt is not None:
        _check_same_run(ckpt, ckpt_path, config, ident, data_ident, vocab)

    # -- model, optimiser, schedule (seeded: the same seed builds the same initial weights) ---------
    torch.manual_seed(config.seed)
    np.random.seed(config.seed % 2**32)
    random.seed(config.seed)
    enc_kwargs = {**config.text_encoder_kwargs, EMBED_DIM_KWARG[config.text_encoder]: config.embed_dim}
    encoder = build_text_encoder(config.text_encoder, vocab, **enc_kwargs)
    if share_text_from is not None:
        encoder.share_frozen(share_text_from)  # after building: the seeded RNG draws stay those of a lone run
    if encoder.output_dim != config.embed_dim:
        raise VsekitError(
            f"text encoder {config.text_encoder!r} gives {encoder.output_dim}-d vectors, embed_dim is "
            f"{config.embed_dim}"
        )
    model = JointEmbedding(
        encoder,
        image_dim,
        config.backbone,
        config.image_features,
        vocab,
        image_dropout=config.image_dropout,
        image_rank=config.image_rank,
    ).to(dev)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(params, lr=config.lr, weight_decay=config.weight_decay)
    scheduler = (
        torch.optim.lr_scheduler.StepLR(optimizer, config.lr_decay_epochs, config.lr_decay_gamma)
        if config.lr_decay_epochs
        else None
    )
    generator = torch.Generator().manual_seed(config.seed)
    losses = {False: ContrastiveLoss(config.margin, False), True: ContrastiveLoss(config.margin, True)}

    state = {"epoch": 0, "best_rsum": -math.inf, "best_epoch": 0, "bad_evals": 0, "stopped_early": False}
    best_dev: dict | None = None
    if ckpt is not None:
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        if scheduler is not None:
            scheduler.load_state_dict(ckpt["scheduler"])
        generator.set_state(ckpt["batch_generator"])
        set_rng_state(ckpt["rng"])
        state = {k: ckpt[k] for k in state}
        best_dev = ckpt.get("best_dev")

    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / CONFIG_NAME, json.dumps(config.to_dict(), indent=2) + "\n")
    history = _read_log(out / LOG_NAME, upto=state["epoch"])  # drops lines of an epoch that did not finish
    atomic_write_text(out / LOG_NAME, "".join(json.dumps(e) + "\n" for e in history))
    if ckpt is not None:
        say(f"resuming {out} after epoch {state['epoch']} (best rsum {state['best_rsum']:.1f})")
        if state["stopped_early"]:
            say(f"this run stopped early after epoch {state['epoch']}: nothing left to do")

    cap_rows = torch.tensor(train_rows, dtype=torch.int64)
    n_pairs = len(train_texts)
    epoch = state["epoch"]
    while epoch < config.epochs and not state["stopped_early"]:
        epoch += 1
        t0 = time.perf_counter()
        model.train()
        max_violation = config.max_violation_at(epoch)
        criterion = losses[max_violation]
        perm = torch.randperm(n_pairs, generator=generator)
        total = 0.0
        bar = tqdm(
            range(0, n_pairs, config.batch_size),
            desc=f"epoch {epoch}/{config.epochs}",
            unit="batch",
            disable=not progress,
            leave=False,
        )
        for start in bar:
            idx = perm[start : start + config.batch_size]
            rows = cap_rows[idx]
            prepared = encoder.prepare([train_texts[i] for i in idx.tolist()])
            img_emb, cap_emb = model(train_feats[rows].to(dev), **{k: v.to(dev) for k, v in prepared.items()})
            # rows are image ids: two captions of one image in a batch are never each other's negative
            loss = criterion(img_emb, cap_emb, rows.to(dev))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if config.grad_clip is not None:
                torch.nn.utils.clip_grad_norm_(params, config.grad_clip)
            optimizer.step()
            total += loss.item()
            bar.set_postfix(loss=f"{total / min(start + config.batch_size, n_pairs):.4f}")
        bar.close()
        lr = optimizer.param_groups[0]["lr"]
        if scheduler is not None:
            scheduler.step()

        entry: dict[str, Any] = {
            "epoch": epoch,
            "loss": total / n_pairs,  # mean hinge loss per training pair
            "loss_kind": "max_violation" if max_violation else "sum",
            "lr": lr,
        }
        if epoch % config.eval_every == 0 or epoch == config.epochs:
            metrics = evaluate_dev(model, dev_feats, dev_texts, dev_ids, dev_cap_ids)
            metrics = {k: metrics[k] for k in ("i2t", "t2i", "rsum")}
            entry["dev"] = metrics
            if metrics["rsum"] > state["best_rsum"]:
                state.update(best_rsum=metrics["rsum"], best_epoch=epoch, bad_evals=0)
                best_dev = metrics
                entry["best"] = True
                save_model(
                    model,
                    out / MODEL_NAME,
                    fne=fne,
                    extra_meta={
                        "epoch": epoch,
                        "dev": metrics,
                        "recipe": config.name,
                        "train": config.to_dict(),
                    },
                )
            else:
                state["bad_evals"] += 1
                if config.patience is not None and state["bad_evals"] >= config.patience:
                    state["stopped_early"] = True
        entry["time_s"] = time.perf_counter() - t0
        history.append(entry)
        with open(out / LOG_NAME, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")
        state["epoch"] = epoch
        atomic_torch_save(
            {
                "format": CHECKPOINT_FORMAT,
                "version": CHECKPOINT_VERSION,
                **state,
                "best_dev": best_dev,
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict() if scheduler is not None else None,
                "batch_generator": generator.get_state(),
                "rng": rng_state(),
                "config": config.to_dict(),
                "vocab": vocab.to_dict() if vocab is not None else None,
                "features": ident,
                "data": data_ident,
                "torch_version": str(torch.__version__),
            },
            ckpt_path,
        )
        say(_epoch_line(entry, config.epochs))
        if state["stopped_early"]:
            say(f"early stopping: no better dev rsum in {config.patience} evaluations")

    summary = {
        "out_dir": str(out),
        "model_path": str(out / MODEL_NAME),
        "epochs_completed": state["epoch"],
        "best_epoch": state["best_epoch"],
        "best_rsum": state["best_rsum"],
        "best_dev": best_dev,
        "stopped_early": state["stopped_early"],
        "history": history,
    }
    return summary, _RunContext(dev, encoder, fne, dev_feats, dev_texts, dev_ids, dev_cap_ids)


def _read_log(path: Path, upto: int) -> list[dict]:
    """Log entries of epochs 1..upto (later lines belong to an epoch whose checkpoint was never written)."""
    if upto == 0 or not path.is_file():
        return []
    entries = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short by a crash
        if isinstance(entry, dict) and isinstance(entry.get("epoch"), int) and entry["epoch"] <= upto:
            entries.append(entry)
    return entries
