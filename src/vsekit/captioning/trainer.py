"""Training of the multimodal RNN captioner (Karpathy & Fei-Fei 2015, section 3.2 and appendix).

One epoch = every training caption once, with its image's features, in an order drawn from a seeded
generator; the loss is the mean negative log-likelihood of the target words (softmax classifier, Eq. 15).
Optimiser: Adam or RMSprop (the paper's choice), gradients clipped element-wise (the paper clips at 5).
After each epoch the captioner decodes the dev images greedily, scores them (CIDEr-D, BLEU-4), and the
best epoch by dev CIDEr is written to ``captioner.safetensors``; ``log.jsonl`` gets one line per epoch
and ``checkpoint.pt`` (weights, optimiser, scheduler, counters, RNG states) lets ``resume=True`` continue
from the last finished epoch.
"""

from __future__ import annotations

import json
import os
import time
import typing
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

import vsekit
from vsekit.captioning.captioner import MRNNCaptioner, save_captioner
from vsekit.captioning.mrnn import CELLS, MultimodalRNN, MultimodalRNNConfig, caption_batch, perplexity
from vsekit.data.corpus import Corpus
from vsekit.data.vocab import Vocabulary, tokenize
from vsekit.device import resolve_device
from vsekit.errors import ConfigMismatchError, CorpusError, VsekitError
from vsekit.fileio import atomic_torch_save, atomic_write_text, read_named_json
from vsekit.resources import CAPTION_RECIPES_DIR, resolve_model_path
from vsekit.rng import rng_state, set_rng_state
from vsekit.vision.features import FEATURE_KINDS, image_features

__all__ = [
    "CAPTIONER_NAME",
    "CAPTION_RECIPES_DIR",
    "CaptionTrainConfig",
    "list_caption_recipes",
    "load_caption_recipe",
    "train_captioner",
]

CAPTIONER_NAME = "captioner.safetensors"
CHECKPOINT_NAME = "checkpoint.pt"
CHECKPOINT_FORMAT = "vsekit.captioner-checkpoint"
RESUMABLE_FIELDS = frozenset({"name", "description", "epochs", "patience", "num_threads", "rerank_beam"})

FeatureFn = Callable[..., tuple[np.ndarray, Any]]
ScoreFn = Callable[[dict[str, str], dict[str, list[str]]], dict[str, float | None]]


@dataclass
class CaptionTrainConfig:
    """A captioner training run; recipes in ``src/vsekit/recipes/captioning/*.json`` are these as JSON."""

    name: str = "custom"
    description: str = ""
    method: str = "mrnn"
    cell: str = "lstm"
    word_dim: int = 256
    hidden_dim: int = 512
    dropout: float = 0.5
    image_dropout: float = 0.5
    image_rank: int = 0
    backbone: str = "mobilenet_v2"
    image_features: str = "one-layer"
    min_word_count: int = 5  # Karpathy's threshold: words seen fewer times become <unk>
    max_caption_words: int = 30  # longer training captions are cut (a handful in Flickr8K)
    max_decode_words: int = 20
    batch_size: int = 128
    epochs: int = 20
    optimizer: str = "adam"
    lr: float = 4e-4
    weight_decay: float = 0.0
    lr_decay_epochs: int = 0  # 0: constant learning rate
    lr_decay_gamma: float = 0.5
    grad_clip_value: float = 5.0  # element-wise, as in the paper
    patience: int = 5
    rerank_beam: int = 0  # > 0: after training, tune reranking of this many beam candidates on dev
    seed: int = 0
    num_threads: int = 0
    train_split: str = "train"
    dev_split: str = "dev"

    def validate(self, source: str = "config") -> CaptionTrainConfig:
        def bad(why: str) -> VsekitError:
            return VsekitError(f"{source}: {why}")

        if self.method != "mrnn":
            raise bad(f"method {self.method!r} is not trained by this trainer (only 'mrnn')")
        if self.cell not in CELLS:
            raise bad(f"cell must be one of {', '.join(CELLS)}, got {self.cell!r}")
        if self.image_features not in FEATURE_KINDS:
            raise bad(
                f"image_features must be one of {', '.join(FEATURE_KINDS)}, got {self.image_features!r}"
            )
        if self.optimizer not in ("adam", "rmsprop"):
            raise bad(f"optimizer must be 'adam' or 'rmsprop', got {self.optimizer!r}")
        for name in ("word_dim", "hidden_dim", "batch_size", "epochs", "min_word_count", "max_decode_words"):
            if getattr(self, name) < 1:
                raise bad(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.lr <= 0:
            raise bad(f"lr must be positive, got {self.lr}")
        return self

    @classmethod
    def from_dict(cls, data: Any, source: str = "config") -> CaptionTrainConfig:
        if not isinstance(data, dict):
            raise VsekitError(f"{source}: a captioning recipe is a JSON object")
        known = {f.name: f for f in fields(cls)}
        hints = typing.get_type_hints(cls)
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise VsekitError(f"{source}: unknown field(s) {', '.join(unknown)}; known: {', '.join(known)}")
        for key, value in data.items():
            hint = hints[key]
            ok = isinstance(value, hint) if hint is not float else isinstance(value, int | float)
            if not ok or (hint in (int, float) and isinstance(value, bool)):
                raise VsekitError(f"{source}: field {key!r} must be {hint.__name__}, got {value!r}")
        return cls(**data).validate(source)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def list_caption_recipes() -> list[str]:
    return sorted(p.stem for p in CAPTION_RECIPES_DIR.glob("*.json"))


def load_caption_recipe(name_or_path: str | os.PathLike[str]) -> CaptionTrainConfig:
    """A shipped captioning recipe by name (``"mrnn-lstm"``) or a JSON file of config fields by path."""
    data, path = read_named_json(name_or_path, CAPTION_RECIPES_DIR, "captioning recipe")
    return CaptionTrainConfig.from_dict(data, source=str(path))


# -- data ---------------------------------------------------------------------------------------------


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


def default_score_fn(
    predictions: dict[str, str], references: dict[str, list[str]]
) -> dict[str, float | None]:
    from vsekit.metrics.captions import score_captions

    return score_captions(predictions, references, meteor=False)


# -- training -----------------------------------------------------------------------------------------


def _load_checkpoint(path: Path) -> dict[str, Any]:
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise VsekitError(f"{path}: unreadable checkpoint ({type(exc).__name__})") from exc
    if not isinstance(ckpt, dict) or ckpt.get("format") != CHECKPOINT_FORMAT:
        raise VsekitError(f"{path}: not a vsekit captioner checkpoint")
    return ckpt


def train_captioner(
    corpus: Corpus,
    config: CaptionTrainConfig,
    out_dir: str | os.PathLike[str],
    resume: bool = False,
    progress: bool = True,
    device: str | torch.device = "auto",
    feature_fn: FeatureFn | None = None,
    score_fn: ScoreFn | None = None,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Train an m-RNN captioner on ``corpus``; write the run into ``out_dir``.

    Files: ``captioner.safetensors`` (best epoch by dev CIDEr-D of greedy captions), ``checkpoint.pt``,
    ``log.jsonl``, ``config.json``. ``feature_fn`` replaces :func:`image_features` (tests inject small
    features) and ``score_fn`` the metrics. Returns a summary with ``model_path``, ``best_epoch``,
    ``best_dev`` (the scores of the best epoch), ``epochs_completed`` and ``history``.
    """
    config.validate()
    say = log if log is not None else tqdm.write
    out = Path(out_dir)
    ckpt_path = out / CHECKPOINT_NAME
    ckpt = None
    if ckpt_path.exists():
        if not resume:
            raise VsekitError(
                f"{out} already holds a captioner run ({CHECKPOINT_NAME}); pass --resume to continue it "
                "or choose another --out"
            )
        ckpt = _load_checkpoint(ckpt_path)
        # a field added after the run started is compared with its default (what the run used)
        saved = {**CaptionTrainConfig().to_dict(), **ckpt["config"]}
        for key, value in config.to_dict().items():
            if key not in RESUMABLE_FIELDS and saved.get(key) != value:
                raise ConfigMismatchError(
                    f"{ckpt_path}: the run was started with {key}={saved.get(key)!r}, not {value!r}"
                )
    if config.num_threads:
        torch.set_num_threads(config.num_threads)
    dev = resolve_device(device)
    feature_fn = feature_fn or image_features
    score_fn = score_fn or default_score_fn
    generator = torch.Generator().manual_seed(config.seed)
    torch.manual_seed(config.seed)

    train_split, dev_split = corpus.split(config.train_split), corpus.split(config.dev_split)
    if not train_split.captions:
        raise CorpusError(f"{corpus.root}: split '{config.train_split}' has no captions to train on")
    dev_refs = {i: caps for i, caps in dev_split.captions_by_image().items() if caps}
    if not dev_refs:
        raise CorpusError(f"{corpus.root}: split '{config.dev_split}' has no captions to select a model on")
    vocab = build_caption_vocabulary(train_split, config.min_word_count)
    train_ids = train_split.image_ids()
    row_of = {image_id: row for row, image_id in enumerate(train_ids)}
    pairs = [
        (row_of[c.image_id], vocab.encode(tokenize(c.text))[: config.max_caption_words])
        for c in train_split.captions
    ]
    pairs = [(row, ids) for row, ids in pairs if ids]
    dev_ids = list(dev_refs)

    train_feats, fne = feature_fn(corpus, train_ids, config.backbone, config.image_features)
    dev_feats, _ = feature_fn(corpus, dev_ids, config.backbone, config.image_features, fne=fne)
    train_x = torch.as_tensor(np.asarray(train_feats))
    dev_x = torch.as_tensor(np.asarray(dev_feats))
    image = {"backbone": config.backbone, "kind": config.image_features, "image_dim": int(train_x.shape[1])}

    model = MultimodalRNN(
        MultimodalRNNConfig(
            image_dim=image["image_dim"],
            vocab_size=len(vocab),
            cell=config.cell,
            word_dim=config.word_dim,
            hidden_dim=config.hidden_dim,
            dropout=config.dropout,
            image_dropout=config.image_dropout,
            image_rank=config.image_rank,
        )
    )
    model.init_output_bias(target_counts([ids for _, ids in pairs], vocab))
    model.to(dev)
    params = [p for p in model.parameters() if p.requires_grad]
    if config.optimizer == "adam":
        optimizer: torch.optim.Optimizer = torch.optim.Adam(
            params, lr=config.lr, weight_decay=config.weight_decay
        )
    else:
        optimizer = torch.optim.RMSprop(params, lr=config.lr, alpha=0.95, weight_decay=config.weight_decay)
    scheduler = torch.optim.lr_scheduler.StepLR(
        optimizer, step_size=config.lr_decay_epochs or 10**9, gamma=config.lr_decay_gamma
    )

    out.mkdir(parents=True, exist_ok=True)
    start_epoch, best, best_epoch, history = 1, -1.0, 0, []
    if ckpt is not None:
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["scheduler"])
        generator.set_state(ckpt["generator"])
        set_rng_state(ckpt["rng"])
        start_epoch, best, best_epoch = ckpt["epoch"] + 1, ckpt["best"], ckpt["best_epoch"]
        history = list(ckpt["history"])
        say(f"resuming {out} after epoch {ckpt['epoch']} (best dev CIDEr {best:.1f} at epoch {best_epoch})")
    atomic_write_text(out / "config.json", json.dumps(config.to_dict(), indent=2) + "\n")

    def dev_scores() -> dict[str, Any]:
        captioner = MRNNCaptioner(model=model, vocab=vocab, image=image, fne=fne)
        t0 = time.perf_counter()
        texts = captioner.caption(dev_x, decoding="greedy", max_len=config.max_decode_words)
        decode_s = time.perf_counter() - t0
        model.train()
        scores = score_fn(dict(zip(dev_ids, texts, strict=True)), dev_refs)
        return {**scores, "decode_s": round(decode_s, 2)}

    stale = history[-1]["epoch"] - best_epoch if history else 0
    stopped_early = False
    for epoch in range(start_epoch, config.epochs + 1):
        if stale >= config.patience:
            stopped_early = True
            break
        model.train()
        batches = length_bucketed_batches([len(ids) for _, ids in pairs], config.batch_size, generator)
        t0 = time.perf_counter()
        total, words = 0.0, 0
        bar = tqdm(batches, desc=f"epoch {epoch}/{config.epochs}", disable=not progress, leave=False)
        for batch in bar:
            chunk = [pairs[i] for i in batch]
            inputs, targets = caption_batch([ids for _, ids in chunk], vocab)
            feats = train_x[torch.tensor([row for row, _ in chunk])]
            loss = model.loss(feats.to(dev), inputs.to(dev), targets.to(dev))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_value_(params, config.grad_clip_value)
            optimizer.step()
            n_words = int((targets != -100).sum())
            total += loss.item() * n_words
            words += n_words
            bar.set_postfix(loss=f"{total / max(words, 1):.3f}")
        scheduler.step()
        train_s = time.perf_counter() - t0
        scores = dev_scores()
        entry = {
            "epoch": epoch,
            "train_loss": round(total / max(words, 1), 4),
            "train_ppl": round(perplexity(total / max(words, 1)), 2),
            "train_s": round(train_s, 1),
            "dev": {k: (round(v, 2) if isinstance(v, float) else v) for k, v in scores.items()},
        }
        cider = float(scores["cider"] or 0.0)
        if cider > best:
            best, best_epoch, stale = cider, epoch, 0
            captioner = MRNNCaptioner(
                model=model,
                vocab=vocab,
                image=image,
                fne=fne,
                meta={
                    "recipe": config.to_dict(),
                    "epoch": epoch,
                    "dev_greedy": entry["dev"],
                    "vsekit": vsekit.__version__,
                },
            )
            save_captioner(captioner, out / CAPTIONER_NAME)
            entry["best"] = True
        else:
            stale += 1
        history.append(entry)
        with open(out / "log.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")
        d = entry["dev"]
        say(
            f"epoch {epoch}/{config.epochs}  loss {entry['train_loss']:.3f}  {train_s:.0f}s  dev greedy "
            f"B-4 {d['bleu4']:.1f}  CIDEr {d['cider']:.1f}" + ("  *best" if entry.get("best") else "")
        )
        atomic_torch_save(
            {
                "format": CHECKPOINT_FORMAT,
                "config": config.to_dict(),
                "epoch": epoch,
                "best": best,
                "best_epoch": best_epoch,
                "history": history,
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "scheduler": scheduler.state_dict(),
                "generator": generator.get_state(),
                "rng": rng_state(),
            },
            ckpt_path,
        )
    rerank = None
    if config.rerank_beam and best_epoch:
        rerank = tune_captioner_rerank(
            out / CAPTIONER_NAME, corpus, config.dev_split, config.rerank_beam, score_fn, feature_fn, say
        )
    return {
        "out_dir": str(out),
        "model_path": str(out / CAPTIONER_NAME),
        "rerank": rerank,
        "best_epoch": best_epoch,
        "best_dev": next((h["dev"] for h in history if h["epoch"] == best_epoch), None),
        "epochs_completed": history[-1]["epoch"] if history else 0,
        "stopped_early": stopped_early,
        "history": history,
        "vocab_size": len(vocab),
    }


def tune_captioner_rerank(
    captioner_path: Path,
    corpus: Corpus,
    dev_split: str,
    beam_size: int,
    score_fn: ScoreFn,
    feature_fn: FeatureFn | None = None,
    say: Callable[[str], None] = print,
    joint_model_path: str | os.PathLike[str] | None = None,
) -> dict[str, Any]:
    """Tune the joint-embedding reranking of a captioner's beam on dev and store it in the file.

    Decodes every dev image with ``beam_size`` candidates, scores each candidate's cosine with its
    image under the joint model (default: the one shipped with vsekit), grid-searches the weights
    (:func:`vsekit.captioning.rerank.tune_rerank`) and rewrites the captioner with ``meta["rerank"]``
    (the settings) and ``meta["dev_rerank"]`` (their dev scores).
    """
    from vsekit.captioning.captioner import load_captioner
    from vsekit.captioning.rerank import RerankSettings, embedding_cosines, file_fingerprint, tune_rerank
    from vsekit.embedding.evaluate import model_features
    from vsekit.embedding.model import load_model

    feature_fn = feature_fn or image_features
    joint_path = resolve_model_path(joint_model_path, "vse")
    joint, joint_fne, _ = load_model(joint_path)
    captioner = load_captioner(captioner_path)
    refs = {i: caps for i, caps in corpus.split(dev_split).captions_by_image().items() if caps}
    ids = list(refs)
    spec = captioner.image
    feats, _ = feature_fn(corpus, ids, spec["backbone"], spec["kind"], fne=captioner.fne)
    t0 = time.perf_counter()
    candidates = captioner.decode(feats, beam_size=beam_size, n_best=beam_size)
    texts = [[captioner.text(c) for c in caps] for caps in candidates]
    joint_feats = model_features(joint, joint_fne, corpus, ids, feature_fn=feature_fn)
    cosines = embedding_cosines(joint, joint_feats, texts)
    seconds = time.perf_counter() - t0
    weight, penalty, grid = tune_rerank(candidates, texts, cosines, ids, refs, score_fn)
    settings = RerankSettings(beam_size, weight, penalty, file_fingerprint(joint_path))
    best = next(g for g in grid if g["weight"] == weight and g["length_penalty"] == penalty)
    plain = next(g for g in grid if g["weight"] == 0 and g["length_penalty"] == 0.0)
    captioner.meta["rerank"] = settings.to_dict()
    captioner.meta["dev_rerank"] = {
        "best": best,
        "beam_only": plain,
        "grid": grid,
        "seconds": round(seconds, 1),
    }
    save_captioner(captioner, captioner_path)
    say(
        f"rerank on dev ({len(ids)} images, beam {beam_size}): weight {weight:g}, "
        f"length penalty {penalty:g}: "
        f"CIDEr {best['cider']:.1f} B-4 {best['bleu4']:.1f} (beam alone: CIDEr {plain['cider']:.1f} "
        f"B-4 {plain['bleu4']:.1f})"
    )
    return captioner.meta["dev_rerank"] | {"settings": settings.to_dict()}
