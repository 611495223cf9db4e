"""Training of the structure-content NLM (Kiros et al. 2014, sec. 2.5) as a resumable run.

The SC-NLM learns from captions alone: each training caption is conditioned on its own sentence embedding
from a frozen joint model's text encoder, so at test time an image embedding from the same space can take
its place. One epoch = every training caption once (all its positions in one batch row group), in a seeded
order; Adam with an exponential learning-rate decay; the best epoch is the one with the lowest dev
perplexity. The run directory, checkpoint and exact resume are the training engine's
(:mod:`vsekit.training`); the model file ``scnlm.safetensors`` also holds what generation needs (KN
trigram LM, POS templates, word and sentence banks), built once from the training captions.
"""

from __future__ import annotations

import math
import os
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F
from torch.optim.lr_scheduler import ExponentialLR

from vsekit.captioning.language_model import KneserNeyTrigramLM
from vsekit.captioning.scnlm import SCNLMCaptioner, dequantize_rows, load_scnlm, quantize_rows
from vsekit.captioning.scnlm_data import (
    embed_cached,
    joint_fingerprint,
    log_progress,
    position_examples,
    tag_vocab,
)
from vsekit.captioning.scnlm_net import SCNLM, SCNLMConfig, perplexity
from vsekit.captioning.scnlm_rerank import STOPWORDS
from vsekit.data.corpus import Corpus
from vsekit.data.vocab import Vocabulary, tokenize
from vsekit.errors import ConfigMismatchError, CorpusError
from vsekit.resources import SCNLM_RECIPES_DIR, resolve_model_path
from vsekit.rng import seed_all
from vsekit.training import (
    Recipe,
    RunOptions,
    TrainingRun,
    TrainState,
    epoch_bar,
    field_error,
    list_recipe_names,
    load_recipe_file,
    shard,
)

__all__ = [
    "SCNLM_MODEL_NAME",
    "SCNLMTrainConfig",
    "list_scnlm_recipes",
    "load_scnlm_recipe",
    "train_scnlm",
    "train_scnlm_run",
]

if TYPE_CHECKING:
    from typing_extensions import Unpack

SCNLM_MODEL_NAME = "scnlm.safetensors"
KIND = "scnlm"  # the checkpoint kind this trainer writes
Tagger = Callable[[list[list[str]]], list[list[str]]]


@dataclass
class SCNLMTrainConfig(Recipe):
    """An SC-NLM training run; recipes in ``src/vsekit/recipes/scnlm/*.json`` are these as JSON.

    The sizes and generation settings go into the model's :class:`SCNLMConfig` (see it for their
    meaning); the vocabulary, tag set and content size come from the data and the joint model.
    ``patience`` counts epochs without a lower dev perplexity (null: never stop early).
    """

    name: str = "custom"
    description: str = ""
    word_dim: int = 300
    attr_dim: int = 300
    factors: int = 100
    context: int = 5
    forward: int = 5
    min_count: int = 5
    epochs: int = 8
    batch_captions: int = 128
    lr: float = 2e-3
    lr_decay: float = 0.8
    content_dropout: float = 0.0
    seed: int = 0
    lm_discount: float = 0.75
    min_len: int = 4
    max_len: int = 12
    n_neighbours: int = 5
    n_templates: int = 12
    patience: int | None = None
    num_threads: int | None = None
    train_split: str = "train"
    dev_split: str = "dev"

    def validate(self, source: str = "config") -> SCNLMTrainConfig:
        sizes = (
            "word_dim",
            "attr_dim",
            "factors",
            "context",
            "forward",
            "min_count",
            "epochs",
            "batch_captions",
        )
        for name in (*sizes, "min_len", "n_neighbours", "n_templates"):
            if getattr(self, name) < 1:
                raise field_error(source, name, getattr(self, name), "must be >= 1")
        for name in ("patience", "num_threads"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise field_error(source, name, getattr(self, name), "must be >= 1 or null")
        if self.lr <= 0 or not 0 < self.lr_decay <= 1:
            name = "lr" if self.lr <= 0 else "lr_decay"
            raise field_error(source, name, getattr(self, name), "is out of range")
        if self.max_len < self.min_len:
            raise field_error(source, "max_len", self.max_len, "must be >= min_len")
        return self

    @classmethod
    def from_model_config(cls, config: SCNLMConfig, **overrides: Any) -> SCNLMTrainConfig:
        """The recipe of an :class:`SCNLMConfig`'s training and generation settings."""
        names = {f.name for f in fields(cls)}
        return cls(
            **{f.name: getattr(config, f.name) for f in fields(config) if f.name in names}, **overrides
        )

    def model_config(self, vocab_size: int, n_tags: int, content_dim: int) -> SCNLMConfig:
        names = {f.name for f in fields(SCNLMConfig)}
        shared = {k: v for k, v in self.to_dict().items() if k in names}
        return SCNLMConfig(**shared, vocab_size=vocab_size, n_tags=n_tags, content_dim=content_dim)


def list_scnlm_recipes() -> list[str]:
    """Names of the SC-NLM recipes shipped in ``src/vsekit/recipes/scnlm``."""
    return list_recipe_names(SCNLM_RECIPES_DIR)


def load_scnlm_recipe(name_or_path: str | os.PathLike[str]) -> SCNLMTrainConfig:
    """A shipped SC-NLM recipe by name (``"scnlm"``) or a JSON file of its fields by path."""
    return load_recipe_file(SCNLMTrainConfig, name_or_path, SCNLM_RECIPES_DIR, "SC-NLM recipe")


# -- data ---------------------------------------------------------------------------------------------


@dataclass
class _SCNLMData:
    """Training captions (tokens, POS tags, content vectors, one row per predicted position) and dev."""

    tokens: list[list[str]]
    owners: list[str]  # the image of each training caption
    vocab: Vocabulary
    tag_names: list[str]
    tag_ids: list[list[int]]
    u_train: torch.Tensor
    train: tuple[np.ndarray, ...]
    dev: tuple[np.ndarray, ...] | None
    u_dev: torch.Tensor | None
    identity: dict[str, Any]  # checked on resume


def _load_data(
    corpus: Corpus, config: SCNLMTrainConfig, joint: Any, tagger: Tagger, cache: Path, progress: bool
) -> _SCNLMData:
    train = corpus.split(config.train_split)
    tokens = [tokenize(c.text) for c in train.captions]
    keep = [i for i, t in enumerate(tokens) if t]
    if not keep:
        raise CorpusError(f"{corpus.root}: split '{config.train_split}' has no captions to train on")
    tokens, owners = [tokens[i] for i in keep], [train.captions[i].image_id for i in keep]
    vocab = Vocabulary.build(tokens, min_count=config.min_count)
    t0 = time.perf_counter()
    tags = tagger(tokens)
    log_progress(progress, f"POS-tagged {len(tokens)} captions in {time.perf_counter() - t0:.0f} s")
    tag_names = tag_vocab(tags)
    tag_index = {t: i for i, t in enumerate(tag_names)}
    # Content vectors: each caption's own embedding (sec. 2.5).
    texts = [" ".join(t) for t in tokens]
    u_train = torch.from_numpy(embed_cached(joint, texts, cache, "train-captions", progress))
    tag_ids = [[tag_index[x] for x in t] for t in tags]
    train_data = position_examples([vocab.encode(t) for t in tokens], tag_ids, config.context, config.forward)
    dev_data = u_dev = None
    try:
        dev = corpus.split(config.dev_split)
    except (CorpusError, KeyError, ValueError):
        dev = None
    if dev is not None and len(dev.captions):
        dev_tokens = [t for t in (tokenize(c.text) for c in dev.captions) if t]
        dev_tags = [[tag_index.get(x, 0) for x in t] for t in tagger(dev_tokens)]
        dev_ids = [vocab.encode(t) for t in dev_tokens]
        dev_data = position_examples(dev_ids, dev_tags, config.context, config.forward)
        dev_texts = [" ".join(t) for t in dev_tokens]
        u_dev = torch.from_numpy(embed_cached(joint, dev_texts, cache, "dev-captions", progress))
    identity = {"vocab": vocab.to_dict(), "tags": tag_names, "joint": joint_fingerprint(joint)}
    return _SCNLMData(
        tokens, owners, vocab, tag_names, tag_ids, u_train, train_data, dev_data, u_dev, identity
    )


def _generation_parts(
    config: SCNLMTrainConfig, data: _SCNLMData, joint: Any, cache: Path, progress: bool
) -> dict[str, Any]:
    """What generation needs besides the network, from the training captions only: the KN trigram LM, the
    POS templates, and the word and sentence banks (sec. 5.2)."""
    vocab, tag_ids = data.vocab, data.tag_ids
    lm = KneserNeyTrigramLM.fit(
        [vocab.decode(vocab.encode(t)) for t in data.tokens], vocab.words[4:], config.lm_discount
    )
    seq_counts = Counter(tuple(t) for t in tag_ids if config.min_len <= len(t) <= config.max_len)
    # Sentence bank: per training image, the caption nearest the mean of its captions' embeddings (the
    # most typical one), so the N nearest sentences come from N different photos.
    by_image: dict[str, list[int]] = {}
    for i, image in enumerate(data.owners):
        by_image.setdefault(image, []).append(i)
    u_np = data.u_train.numpy()
    medoids = []
    for rows in by_image.values():
        block = u_np[rows]
        medoids.append(rows[int(np.argmax(block @ block.mean(axis=0)))])
    wanted = [tuple(tag_ids[i]) for i in medoids if tuple(tag_ids[i]) in seq_counts]
    frequent = [s for s, _ in seq_counts.most_common(config.n_templates)]
    templates = list(dict.fromkeys(frequent + sorted(set(wanted), key=lambda s: (-seq_counts[s], s))))
    template_index = {s: i for i, s in enumerate(templates)}
    bank_words = [w for w in vocab.words[4:] if w not in STOPWORDS]
    word_vecs = embed_cached(joint, bank_words, cache, "vocab-words", progress)
    return {
        "vocab": vocab,
        "tags": data.tag_names,
        "lm": lm,
        "templates": [list(s) for s in templates],
        "template_counts": [seq_counts[s] for s in templates],
        "word_bank": dequantize_rows(*quantize_rows(word_vecs)),
        "word_bank_ids": [vocab.index(w) for w in bank_words],
        "sentence_bank": dequantize_rows(*quantize_rows(u_np[medoids])),
        "sentence_templates": [template_index.get(tuple(tag_ids[i]), -1) for i in medoids],
        "joint_model": joint,
    }


# -- training -----------------------------------------------------------------------------------------


def _scnlm_epoch_trainer(
    state: TrainState[SCNLM], config: SCNLMTrainConfig, data: _SCNLMData, device: torch.device, progress: bool
) -> Callable[[int], dict[str, Any]]:
    """One epoch: batches of whole captions (the content term T_u u is computed once per caption)."""
    model, optimizer = state.model, state.optimizer
    ctx, tgs, tgt, own = (torch.from_numpy(a) for a in data.train)
    starts = np.searchsorted(data.train[3], np.arange(len(data.tokens) + 1))

    def train_epoch(epoch: int) -> dict[str, Any]:
        model.train()
        total, n_tok = 0.0, 0
        order = shard(torch.randperm(len(data.tokens), generator=state.generator)).numpy()
        bar = epoch_bar(range(0, len(order), config.batch_captions), epoch, config.epochs, progress)
        for b in bar:
            sents = order[b : b + config.batch_captions]
            rows = torch.from_numpy(np.concatenate([np.arange(starts[s], starts[s + 1]) for s in sents]))
            local = torch.from_numpy(np.repeat(np.arange(len(sents)), starts[sents + 1] - starts[sents]))
            content = model.content(data.u_train[torch.from_numpy(sents)].to(device))
            logits = model.step_logits(ctx[rows].to(device), tgs[rows].to(device), content[local.to(device)])
            loss = F.cross_entropy(logits, tgt[rows].to(device))
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            total += loss.item() * len(rows)
            n_tok += len(rows)
            bar.set_postfix(ppl=f"{math.exp(total / n_tok):.2f}")
        return {"train_ppl": math.exp(total / n_tok)}

    return train_epoch


class _SCNLMRun(TrainingRun[SCNLMTrainConfig, _SCNLMData, SCNLM]):
    """The SC-NLM's part of the run template: tagged captions and their joint embeddings, the lowest dev
    perplexity selects."""

    kind, model_name, metric, score_key = KIND, SCNLM_MODEL_NAME, "perplexity", "best_dev_ppl"
    higher_is_better = False
    single_process = ("the SC-NLM", "its trainer does not shard batches or sum gradients across ranks")

    def __init__(
        self,
        corpus: Corpus,
        config: SCNLMTrainConfig,
        out_dir: str | os.PathLike[str],
        joint_model: Any,
        tagger: Tagger | None,
        **options: Unpack[RunOptions],
    ) -> None:
        super().__init__(config, out_dir, **options)
        self.corpus, self.joint, self.tagger, self.cache = corpus, joint_model, tagger, self.out / "cache"
        self.parts: dict[str, Any] = {}  # what generation needs besides the network (built with it)

    def load_data(self, resumed: bool) -> _SCNLMData:
        if self.joint is None:
            self.joint = _shipped_joint_model()
        if self.tagger is None:
            from vsekit.captioning.pos import pos_tag

            self.tagger = pos_tag
        seed_all(self.config.seed)  # every RNG a checkpoint saves starts from the seed
        return _load_data(self.corpus, self.config, self.joint, self.tagger, self.cache, self.progress)

    def check_data(self, ckpt: dict[str, Any], data: _SCNLMData) -> None:
        if ckpt["data"] != data.identity:
            raise ConfigMismatchError(
                f"{self.dir.checkpoint_path}: cannot resume: field 'data' differs (the vocabulary, POS tag "
                "set or joint model is not the one the checkpoint was trained with)"
            )

    def build(self, data: _SCNLMData) -> tuple[SCNLM, torch.optim.Optimizer, ExponentialLR]:
        """The SC-NLM with its output biases at the log unigram frequencies (chance from step one), Adam
        with a per-epoch exponential decay."""
        config = self.config
        model = SCNLM(config.model_config(len(data.vocab), len(data.tag_names), int(self.joint.embed_dim)))
        with torch.no_grad():
            counts = torch.tensor(data.vocab.counts_by_index(), dtype=torch.float32)
            counts[data.vocab.end_id] = len(data.tokens)
            model.b.copy_(torch.log(counts.clamp(min=1.0) / counts.sum()))
        model.to(self.device)
        optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
        # after the network, from the training captions only (no RNG draws: a fresh run's stream is kept)
        self.parts = _generation_parts(config, data, self.joint, self.cache, self.progress)
        return model, optimizer, ExponentialLR(optimizer, gamma=config.lr_decay)

    def epoch_trainer(self, state: TrainState[SCNLM], data: _SCNLMData) -> Callable[[int], dict[str, Any]]:
        return _scnlm_epoch_trainer(state, self.config, data, self.device, self.progress)

    def evaluate(self, state: TrainState[SCNLM], data: _SCNLMData) -> tuple[float, dict[str, Any]]:
        # without a dev split, the training captions' perplexity (eval mode) selects the epoch
        on, examples, u = (
            ("dev", data.dev, data.u_dev) if data.dev is not None else ("train", data.train, data.u_train)
        )
        assert u is not None  # u_dev comes with dev
        ppl = perplexity(state.model, examples, u)
        return ppl, {"ppl": ppl, "split": on}

    def save_best(self, state: TrainState[SCNLM], data: _SCNLMData, epoch: int, dev: dict[str, Any]) -> None:
        captioner = SCNLMCaptioner(model=state.model, **self.parts)
        captioner.history = list(self.history)  # the epochs before this one
        meta = {"epoch": epoch, "dev": dev, "recipe": self.config.to_dict()}
        captioner.save(self.model_path, half=False, extra=meta)

    def describe(self, entry: dict[str, Any]) -> str:
        return _epoch_line(entry, self.config.epochs)

    def checkpoint_extra(self, data: _SCNLMData) -> dict[str, Any]:
        return {"data": data.identity}


def train_scnlm_run(
    corpus: Corpus,
    config: SCNLMTrainConfig,
    out_dir: str | os.PathLike[str],
    *,
    joint_model: Any = None,
    tagger: Tagger | None = None,
    **options: Unpack[RunOptions],
) -> dict[str, Any]:
    """Train an SC-NLM on ``corpus``'s training captions; write the run into ``out_dir``.

    Files: ``scnlm.safetensors`` (the epoch with the lowest dev perplexity, float32, with everything
    generation needs; default rerank weights: tune them with :func:`~vsekit.captioning.scnlm.
    tune_rerank_weights`), ``checkpoint.pt``, ``log.jsonl``, ``config.json``, and ``cache/`` (the joint
    embeddings of the captions). ``options``: ``resume`` (continue the run exactly; the config may differ
    only in ``SCNLMTrainConfig.RESUMABLE``), ``progress``, ``device``, ``log``
    (:class:`~vsekit.training.RunOptions`). ``joint_model`` is the frozen joint embedding that conditions
    the SC-NLM (default: the shipped ``vse`` model); ``tagger`` replaces spaCy's POS tagger (tests).
    Without a dev split the training perplexity selects the epoch. Returns a summary with ``model_path``,
    ``best_epoch``, ``best_dev_ppl``, ``best_dev``, ``epochs_completed``, ``stopped_early`` and ``history``.
    """
    return _SCNLMRun(corpus, config, out_dir, joint_model, tagger, **options).run()


def _epoch_line(entry: dict[str, Any], epochs: int) -> str:
    d = entry["dev"]
    best = "  *best" if entry.get("best") else ""
    return (
        f"epoch {entry['epoch']}/{epochs}  train ppl {entry['train_ppl']:.2f}  "
        f"{d['split']} ppl {d['ppl']:.2f}  ({entry['time_s']:.0f} s){best}"
    )


def _shipped_joint_model() -> Any:
    from vsekit.embedding.model import load_model

    return load_model(resolve_model_path(None, "vse"))[0]


def train_scnlm(
    corpus: Corpus,
    joint_model: Any,
    config: SCNLMConfig | None = None,
    out_dir: str | os.PathLike[str] | None = None,
    progress: bool = True,
    tagger: Tagger | None = None,
) -> SCNLMCaptioner:
    """Train an SC-NLM and return the captioner of its best epoch (``history``: the per-epoch log).

    A convenience over :func:`train_scnlm_run` for an :class:`SCNLMConfig`: the run goes to ``out_dir``
    (a fresh run; None: a temporary directory, removed afterwards).
    """
    recipe = SCNLMTrainConfig.from_model_config(config or SCNLMConfig())
    log = None if progress else (lambda s: None)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(out_dir) if out_dir is not None else Path(tmp)
        summary = train_scnlm_run(
            corpus,
            recipe,
            out,
            progress=progress,
            device="cpu",
            joint_model=joint_model,
            log=log,
            tagger=tagger,
        )
        captioner = load_scnlm(summary["model_path"], joint_model)
    captioner.history = summary["history"]
    return captioner
