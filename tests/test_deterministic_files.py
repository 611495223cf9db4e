"""Deterministic files (issue 15 item 3): the same model saved twice is the same bytes, so a file's
sha256 (the captioner's rerank weights name their joint model by it) fingerprints the model itself.

The safetensors library writes its header metadata in hash-map order, which changes from one process
to the next; ``fileio.atomic_save_safetensors`` rewrites the header sorted.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import vsekit.embedding.trainer as trainer_mod
from corpus_helpers import fake_image_features, write_tiny_corpus
from train_helpers import same, tiny_caption_config, tiny_train_config
from vsekit.data import load_corpus
from vsekit.embedding.trainer import train
from vsekit.fileio import file_sha256
from vsekit.training.checkpoint import read_checkpoint

SAVE_IN_A_FRESH_PROCESS = """
import sys, torch
from vsekit.data.vocab import Vocabulary
from vsekit.embedding.model import JointEmbedding, save_model
from vsekit.text import build_text_encoder
torch.manual_seed(0)
vocab = Vocabulary("a dog runs on the grass".split())
text = build_text_encoder("gru", vocab, word_dim=4, hidden_dim=6)
model = JointEmbedding(text, 5, "mobilenet_v2", "one-layer", vocab)
save_model(model, sys.argv[1], extra_meta={"epoch": 3, "dev": {"rsum": 1.5}, "recipe": "x"})
"""


def test_the_same_model_saved_by_two_processes_is_the_same_file(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "OMP_NUM_THREADS": "1"}
    paths = [tmp_path / f"m{k}.safetensors" for k in range(2)]
    for path in paths:
        subprocess.run([sys.executable, "-c", SAVE_IN_A_FRESH_PROCESS, str(path)], check=True, env=env)
    assert len({path.read_bytes() for path in paths}) == 1


def test_saving_twice_in_one_process_gives_the_same_bytes(tmp_path):
    from vsekit.fileio import atomic_save_safetensors

    tensors = {"b": torch.arange(6.0).view(2, 3), "a": torch.ones(2, dtype=torch.float16)}
    meta = {f"key{k}": str(k) for k in range(12)}  # 12! orders: equal by chance would be a miracle
    one = atomic_save_safetensors(tensors, tmp_path / "one.safetensors", meta).read_bytes()
    two = atomic_save_safetensors(tensors, tmp_path / "two.safetensors", dict(reversed(meta.items())))
    assert one == two.read_bytes()


TINY = tiny_train_config()


@pytest.mark.usefixtures("one_torch_thread")
def test_an_interrupted_and_resumed_training_writes_the_uninterrupted_file(tmp_path, monkeypatch):
    corpus = load_corpus(write_tiny_corpus(tmp_path / "corpus", 16, 6, 6))

    def run(out: Path, **kw):
        return train(
            corpus, TINY, out, progress=False, feature_fn=fake_image_features, log=lambda s: None, **kw
        )

    run(tmp_path / "full")
    real, calls = trainer_mod.evaluate_dev, {"n": 0}

    def interrupt_in_epoch_3(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt  # Ctrl-C after epoch 3's steps, before its checkpoint
        return real(*args, **kwargs)

    monkeypatch.setattr(trainer_mod, "evaluate_dev", interrupt_in_epoch_3)
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path / "resumed")
    monkeypatch.setattr(trainer_mod, "evaluate_dev", real)
    run(tmp_path / "resumed", resume=True)
    full, resumed = tmp_path / "full" / "model.safetensors", tmp_path / "resumed" / "model.safetensors"
    assert file_sha256(full) == file_sha256(resumed)
    # A checkpoint is a pickle: its bytes depend on which equal strings are the same object (memo
    # references), so the resumed run's differ; its content is the same, tensor for tensor.
    assert same(
        read_checkpoint(tmp_path / "full" / "checkpoint.pt"),
        read_checkpoint(tmp_path / "resumed" / "checkpoint.pt"),
    )


class _Clock:
    """A stand-in for the ``time`` module whose clock runs ``step`` seconds per reading."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def perf_counter(self) -> float:
        self.now += self.step
        return self.now

    def __getattr__(self, name):
        import time

        return getattr(time, name)


@pytest.mark.usefixtures("one_torch_thread")
def test_two_captioner_trainings_at_different_speeds_write_the_same_file(tmp_path, monkeypatch):
    """Regression: the captioner file held the dev decoding time (decode_s), so the same training on a
    slower machine gave another file."""
    import vsekit.captioning.trainer as caption_trainer
    from kill_helpers import overlap_score

    corpus = load_corpus(write_tiny_corpus(tmp_path / "corpus", 12, 4, 4))
    config = tiny_caption_config(word_dim=8, hidden_dim=12)
    for step, out in ((0.01, "fast"), (0.37, "slow")):
        monkeypatch.setattr(caption_trainer, "time", _Clock(step))
        caption_trainer.train_captioner(
            corpus, config, tmp_path / out, progress=False, device="cpu",
            feature_fn=fake_image_features, score_fn=overlap_score, log=lambda s: None,
        )  # fmt: skip
    assert file_sha256(tmp_path / "fast" / "captioner.safetensors") == file_sha256(
        tmp_path / "slow" / "captioner.safetensors"
    )
