"""Tiny training recipes the trainer tests share, and the comparison of two training runs' files (a resumed
or killed-and-rerun run against the uninterrupted one)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from kill_helpers import differing_keys, tmp_files
from vsekit.fileio import file_sha256
from vsekit.training.checkpoint import read_checkpoint


def tiny_train_config(**overrides: Any):
    """A joint-embedding recipe that trains in a second on a tiny corpus with fake features (a GRU over
    8-d words into a 12-d space, 3 epochs, every epoch evaluated, no early stop); ``overrides`` replace
    fields."""
    from vsekit.embedding.trainer import TrainConfig

    fields = {
        "name": "tiny",
        "text_encoder_kwargs": {"word_dim": 8},
        "embed_dim": 12,
        "batch_size": 16,
        "epochs": 3,
        "lr": 2e-3,
        "vocab_max_size": None,
        "patience": None,
    }
    return TrainConfig(**{**fields, **overrides})


def tiny_caption_config(**overrides: Any):
    """An m-RNN captioner recipe as tiny (16-d words, 24 hidden, 2 epochs, every word kept);
    ``overrides`` replace fields."""
    from vsekit.captioning.trainer import CaptionTrainConfig

    fields = {
        "word_dim": 16,
        "hidden_dim": 24,
        "batch_size": 16,
        "epochs": 2,
        "min_word_count": 1,
        "lr": 0.01,
    }
    return CaptionTrainConfig(**{**fields, **overrides})


def same(a, b) -> bool:
    """Equal checkpoint-like values: tensors of the same dtype, shape and values, containers alike."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return isinstance(b, list | tuple) and len(a) == len(b) and all(map(same, a, b))
    return type(a) is type(b) and a == b


def untimed(value):
    """``value`` without the timings its dicts hold (keys ``time_s``, ``train_s``, ``decode_s``...)."""
    if isinstance(value, dict):
        return {k: untimed(v) for k, v in value.items() if not str(k).endswith("_s")}
    if isinstance(value, list):
        return [untimed(v) for v in value]
    return value


def untimed_log(run: Path) -> list:
    """The run's log without its timings."""
    return [untimed(json.loads(line)) for line in (run / "log.jsonl").read_text().splitlines()]


def assert_same_run(full: Path, resumed: Path, model: str, kind: str) -> None:
    """The two run directories hold the same ``model`` file (bytes), checkpoint (content) and log."""
    assert file_sha256(full / model) == file_sha256(resumed / model), f"{model} differs"
    # timings (``time_s``, ``decode_s``...) are measurements, not state: left out of the comparison
    a = untimed(read_checkpoint(full / "checkpoint.pt", kind))
    b = untimed(read_checkpoint(resumed / "checkpoint.pt", kind))
    assert same(a, b), f"checkpoint.pt differs at {differing_keys(a, b)[:5]}"
    assert untimed_log(full) == untimed_log(resumed), "log.jsonl differs"
    assert tmp_files(resumed) == [], f"temp files left: {tmp_files(resumed)}"


def assert_readable_after_kill(out: Path, kind: str) -> None:
    """Whatever the kill left is whole: the checkpoint, if any, reads."""
    if (out / "checkpoint.pt").exists():
        read_checkpoint(out / "checkpoint.pt", kind)
