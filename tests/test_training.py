"""Training: exact resume (2 + 2 epochs == 4 epochs, bit for bit), overfitting, refusals, recipes.

The CNN never runs here: ``train(feature_fn=...)`` gets small fake features, a fixed random vector per
image id (and for FNE, ternary codes of those vectors with statistics fitted on the train split).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

import vsekit.embedding.trainer as trainer_mod
from corpus_helpers import write_tiny_corpus
from train_helpers import tiny_train_config
from vsekit.data import Caption, Corpus, load_corpus
from vsekit.embedding.evaluate import evaluate_model
from vsekit.embedding.model import EnsembleEmbedding, load_model
from vsekit.embedding.trainer import TrainConfig, list_recipes, load_checkpoint, load_recipe, train
from vsekit.errors import ConfigMismatchError, VsekitError
from vsekit.resources import sample_data_path
from vsekit.vision.fne import FullNetworkEmbedding


def fake_features(dim: int = 16):
    """A stand-in for ``vsekit.vision.features.image_features`` with the same signature and return."""

    def raw(ids):
        seeds = [int(hashlib.sha256(i.encode()).hexdigest()[:8], 16) for i in ids]
        return np.stack([np.random.default_rng(s).standard_normal(dim).astype(np.float32) for s in seeds])

    def image_features(corpus, image_ids, backbone="mobilenet_v2", kind="one-layer", fne=None, **kwargs):
        if kind == "one-layer":
            return raw(image_ids), None
        if fne is None:
            fne = FullNetworkEmbedding().fit(raw(corpus.split(kwargs.get("fit_split", "train")).image_ids()))
        return fne.transform(raw(image_ids)), fne

    return image_features


def tiny_corpus(root: Path, n_train: int = 24, n_dev: int = 8, n_test: int = 8) -> Corpus:
    """A CSV corpus of the bundled sample's captions (train/dev/test), with empty image files."""
    return load_corpus(write_tiny_corpus(root, n_train, n_dev, n_test))


TINY = tiny_train_config(text_encoder_kwargs={"word_dim": 16}, embed_dim=24, epochs=4)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Corpus:
    return tiny_corpus(tmp_path_factory.mktemp("corpus"))


def _run(corpus, config, out, **kw):
    return train(corpus, config, out, progress=False, feature_fn=fake_features(), log=lambda s: None, **kw)


def _assert_same_run(a: Path, b: Path) -> None:
    ca, cb = load_checkpoint(a / "checkpoint.pt"), load_checkpoint(b / "checkpoint.pt")
    assert ca["epoch"] == cb["epoch"]
    assert ca["model"].keys() == cb["model"].keys()
    for key in ca["model"]:
        assert torch.equal(ca["model"][key], cb["model"][key]), key
    ma, mb = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    assert ma.keys() == mb.keys() and all(torch.equal(ma[k], mb[k]) for k in ma)
    la = [json.loads(line) for line in (a / "log.jsonl").read_text().splitlines()]
    lb = [json.loads(line) for line in (b / "log.jsonl").read_text().splitlines()]
    assert [e["epoch"] for e in la] == [e["epoch"] for e in lb] == list(range(1, ca["epoch"] + 1))
    assert [e["loss"] for e in la] == [e["loss"] for e in lb]
    assert [e["dev"] for e in la] == [e["dev"] for e in lb]


# FNE features + warm-up then hardest negative + StepLR decay: every piece of state a resume must restore.
RESUME_CONFIG = dataclasses.replace(
    TINY, image_features="fne", loss="max_violation", max_violation_after_epoch=1, lr_decay_epochs=2
)


def test_resume_after_two_epochs_equals_an_uninterrupted_run(corpus, tmp_path):
    full = _run(corpus, RESUME_CONFIG, tmp_path / "full")
    assert full["epochs_completed"] == 4 and len(full["history"]) == 4
    assert [e["loss_kind"] for e in full["history"]] == [
        "sum",
        "max_violation",
        "max_violation",
        "max_violation",
    ]
    assert [e["lr"] for e in full["history"]] == pytest.approx([2e-3, 2e-3, 2e-4, 2e-4])

    _run(corpus, dataclasses.replace(RESUME_CONFIG, epochs=2), tmp_path / "split")
    resumed = _run(corpus, RESUME_CONFIG, tmp_path / "split", resume=True)
    assert resumed["epochs_completed"] == 4 and len(resumed["history"]) == 4
    _assert_same_run(tmp_path / "full", tmp_path / "split")
    assert resumed["best_epoch"] == full["best_epoch"] and resumed["best_rsum"] == full["best_rsum"]


def test_kept_epochs_are_the_checkpoints_and_best_models_of_shorter_runs(corpus, tmp_path):
    """``keep_epochs``: epoch N's kept copy is what a run stopped after N epochs leaves, so resuming from
    it (a branch, or a member chosen afterwards) continues exactly as the run did."""
    _run(corpus, RESUME_CONFIG, tmp_path / "full", keep_epochs=True)
    kept = tmp_path / "full" / "epochs"
    assert sorted(p.name for p in kept.iterdir()) == sorted(
        [f"ep{n}.pt" for n in range(1, 5)] + [f"best-after-ep{n}.safetensors" for n in range(1, 5)]
    )
    _run(corpus, dataclasses.replace(RESUME_CONFIG, epochs=2), tmp_path / "two")
    # the same state as the 2-epoch run's (whose files differ only in the recipe's epoch count)
    a, b = load_checkpoint(kept / "ep2.pt"), load_checkpoint(tmp_path / "two" / "checkpoint.pt")
    assert a["epoch"] == b["epoch"] == 2 and a["model"].keys() == b["model"].keys()
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    ma, mb = load_file(kept / "best-after-ep2.safetensors"), load_file(tmp_path / "two" / "model.safetensors")
    assert ma.keys() == mb.keys() and all(torch.equal(ma[k], mb[k]) for k in ma)
    assert (kept / "ep4.pt").read_bytes() == (tmp_path / "full" / "checkpoint.pt").read_bytes()
    # a run directory made of epoch 2's copies resumes to the full run's weights
    branch = tmp_path / "branch"
    branch.mkdir()
    (branch / "checkpoint.pt").write_bytes((kept / "ep2.pt").read_bytes())
    (branch / "model.safetensors").write_bytes((kept / "best-after-ep2.safetensors").read_bytes())
    (branch / "log.jsonl").write_text(
        "".join((tmp_path / "full" / "log.jsonl").read_text().splitlines(True)[:2])
    )
    _run(corpus, RESUME_CONFIG, branch, resume=True)
    _assert_same_run(tmp_path / "full", branch)
    assert not (tmp_path / "two" / "epochs").exists()  # off by default


def test_resume_after_a_crash_inside_an_epoch(corpus, tmp_path, monkeypatch):
    _run(corpus, TINY, tmp_path / "full")
    calls = {"n": 0}
    real = trainer_mod.evaluate_dev

    def crash_in_epoch_3(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt  # after epoch 3's training steps, before its checkpoint
        return real(*args, **kwargs)

    monkeypatch.setattr(trainer_mod, "evaluate_dev", crash_in_epoch_3)
    with pytest.raises(KeyboardInterrupt):
        _run(corpus, TINY, tmp_path / "crashed")
    assert load_checkpoint(tmp_path / "crashed" / "checkpoint.pt")["epoch"] == 2
    _run(corpus, TINY, tmp_path / "crashed", resume=True)
    _assert_same_run(tmp_path / "full", tmp_path / "crashed")


def test_run_directory_files_and_weights_only_checkpoint(corpus, tmp_path):
    summary = _run(corpus, dataclasses.replace(TINY, epochs=2), tmp_path / "run")
    run = tmp_path / "run"
    assert {p.name for p in run.iterdir()} == {
        "checkpoint.pt",
        "model.safetensors",
        "log.jsonl",
        "config.json",
    }
    assert json.loads((run / "config.json").read_text())["embed_dim"] == 24
    ckpt = torch.load(run / "checkpoint.pt", map_location="cpu", weights_only=True)
    assert ckpt["epoch"] == 2 and ckpt["config"]["name"] == "tiny"
    for key in ("model", "optimizer", "scheduler", "rng", "batch_generator", "vocab", "features", "data"):
        assert key in ckpt
    assert ckpt["features"] == {"backbone": "mobilenet_v2", "kind": "one-layer", "image_dim": 16, "fne": None}
    assert set(ckpt["rng"]) >= {"torch", "numpy", "python"}
    entry = json.loads((run / "log.jsonl").read_text().splitlines()[-1])
    assert {"epoch", "loss", "lr", "dev", "time_s"} <= entry.keys()
    assert set(entry["dev"]) == {"i2t", "t2i", "rsum"}
    # the best model file loads into a working model with the training vocabulary
    model, fne, meta = load_model(summary["model_path"])
    assert fne is None and meta["epoch"] == summary["best_epoch"] and meta["recipe"] == "tiny"
    assert model.vocab.words[4:7] == ckpt["vocab"]["words"][:3]


def test_resume_with_another_config_names_the_field(corpus, tmp_path):
    _run(corpus, dataclasses.replace(TINY, epochs=1), tmp_path / "run")
    with pytest.raises(ConfigMismatchError, match="lr=0.002.*lr=0.001"):
        _run(corpus, dataclasses.replace(TINY, lr=1e-3), tmp_path / "run", resume=True)
    with pytest.raises(ConfigMismatchError, match="image_features"):
        _run(corpus, dataclasses.replace(TINY, image_features="fne"), tmp_path / "run", resume=True)
    with pytest.raises(ConfigMismatchError, match="features.image_dim"):
        train(
            corpus,
            TINY,
            tmp_path / "run",
            resume=True,
            progress=False,
            feature_fn=fake_features(dim=12),
            log=lambda s: None,
        )
    with pytest.raises(VsekitError, match="--resume"):
        _run(corpus, TINY, tmp_path / "run")  # never overwrite a run silently
    # epochs / patience may change on resume
    assert (
        _run(corpus, dataclasses.replace(TINY, epochs=2), tmp_path / "run", resume=True)["epochs_completed"]
        == 2
    )


def test_checkpoint_that_is_not_ours_is_refused(corpus, tmp_path):
    (tmp_path / "run").mkdir()
    torch.save({"hello": torch.zeros(1)}, tmp_path / "run" / "checkpoint.pt")
    with pytest.raises(VsekitError, match="not a vsekit training checkpoint"):
        _run(corpus, TINY, tmp_path / "run", resume=True)


def handful_corpus(root: Path) -> Corpus:
    """Six sample photos with two captions each, the same six as train and dev split: a model that can
    overfit ranks every training pair first."""
    sample = load_corpus(sample_data_path())
    by_image = sample.captions_by_image()
    ids = list(by_image)[:6]
    captions = [Caption(i, text, "test") for i in ids for text in by_image[i][:2]]
    return Corpus(
        root=root,
        name="handful",
        format="test",
        images={i: root / i for i in ids},
        captions=captions,
        splits={"train": ids, "dev": ids},  # evaluate on the training pairs themselves
    )


def test_tiny_model_overfits_a_handful_of_pairs(tmp_path):
    corpus = handful_corpus(tmp_path)
    config = dataclasses.replace(TINY, epochs=40, batch_size=12, lr=1e-2, embed_dim=32, grad_clip=None)
    summary = _run(corpus, config, tmp_path / "run")
    assert summary["best_dev"]["i2t"]["r1"] == 100.0 and summary["best_dev"]["t2i"]["r1"] == 100.0
    model, fne, _ = load_model(tmp_path / "run" / "model.safetensors")
    result = evaluate_model(model, fne, corpus, "train", feature_fn=fake_features())
    assert result["i2t"]["r1"] == result["t2i"]["r1"] == 100.0
    assert set(result) == {"i2t", "t2i", "rsum", "protocol", "n_images", "n_captions", "backbone", "features"}
    assert (result["n_images"], result["n_captions"], result["features"]) == (6, 12, "one-layer")


def test_early_stopping_after_patience_evaluations_without_improvement(corpus, tmp_path):
    # a learning rate too small to change any rank: the dev rsum never beats epoch 1
    config = dataclasses.replace(TINY, epochs=10, lr=1e-12, patience=2)
    summary = _run(corpus, config, tmp_path / "run")
    assert summary["stopped_early"] and summary["epochs_completed"] == 3 and summary["best_epoch"] == 1
    again = _run(corpus, dataclasses.replace(config, epochs=20), tmp_path / "run", resume=True)
    assert again["epochs_completed"] == 3  # a stopped run stays stopped


def test_recipes_load_by_name_and_path(tmp_path):
    assert {"kiros-gru", "fne-gru", "vse-best"} <= set(list_recipes())
    kiros, fne, best = load_recipe("kiros-gru"), load_recipe("fne-gru"), load_recipe("vse-best")
    assert (kiros.image_features, fne.image_features) == ("one-layer", "fne")
    assert kiros.text_encoder == fne.text_encoder == "gru" and kiros.loss == fne.loss == "sum"
    assert (kiros.margin, kiros.lr, kiros.batch_size, kiros.grad_clip, kiros.epochs) == (
        0.2,
        2e-4,
        128,
        2.0,
        25,
    )
    assert kiros.vocab_max_size == 1000 and kiros.embed_dim == 1024
    assert best.loss == "max_violation" and best.max_violation_after_epoch == 2
    assert best.max_violation_at(2) is False and best.max_violation_at(3) is True
    assert best.text_encoder == "minilm" and best.image_features == "one-layer" and best.image_dropout == 0.4
    assert best.ensemble_seeds == [1, 2]  # the previously shipped model: the ensemble of these two seeds
    # the shipped model: the same recipe on EfficientNet-Lite0, only the backbone differs
    effnet = load_recipe("vse-best-effnet")
    assert effnet.backbone == "efficientnet_lite0" and best.backbone == "mobilenet_v2"
    differing = {k for k, v in effnet.to_dict().items() if v != best.to_dict()[k]}
    assert differing == {"name", "description", "backbone"}
    # the FNE variant's projection must stay factored to fit the 15 MB package budget
    fne_minilm = load_recipe("fne-minilm")
    assert fne_minilm.image_features == "fne" and fne_minilm.image_rank == 256
    with pytest.raises(VsekitError, match="unknown recipe 'nope'.*kiros-gru"):
        load_recipe("nope")
    path = tmp_path / "mine.json"
    path.write_text(json.dumps({"embed_dim": 8, "epochs": 1}))
    assert load_recipe(path).embed_dim == 8 and load_recipe(str(path)).name == "mine"
    path.write_text(json.dumps({"embed_dims": 8}))
    with pytest.raises(VsekitError, match="mine.json: unknown field.*embed_dims"):
        load_recipe(path)
    path.write_text(json.dumps({"margin": "big"}))
    with pytest.raises(VsekitError, match="field 'margin' must be float"):
        load_recipe(path)
    path.write_text(json.dumps({"loss": "sum", "max_violation_after_epoch": 2}))
    with pytest.raises(VsekitError, match="max_violation_after_epoch"):
        load_recipe(path)


# -- ensembles ---------------------------------------------------------------------------------------

ENSEMBLE = dataclasses.replace(TINY, epochs=2, ensemble_seeds=[3, 5])


def test_ensemble_recipe_trains_one_run_per_seed_and_packs_them(corpus, tmp_path):
    summary = _run(corpus, ENSEMBLE, tmp_path / "ens")
    out = tmp_path / "ens"
    assert {p.name for p in out.iterdir()} == {"config.json", "model.safetensors", "seed-3", "seed-5"}
    assert json.loads((out / "config.json").read_text())["ensemble_seeds"] == [3, 5]
    # each member is exactly the single run of its seed
    lone = _run(corpus, dataclasses.replace(TINY, epochs=2, seed=5), tmp_path / "lone")
    _assert_same_run(out / "seed-5", tmp_path / "lone")
    assert summary["members"][1]["best_dev"] == lone["best_dev"]
    assert [m["seed"] for m in summary["members"]] == [3, 5] and summary["epochs_completed"] == [2, 2]
    # the packed model: both members' best weights, its dev numbers recorded and reproducible
    model, fne, meta = load_model(summary["model_path"])
    assert isinstance(model, EnsembleEmbedding) and len(model.members) == 2 and model.embed_dim == 48
    single, _, _ = load_model(out / "seed-5" / "model.safetensors")
    assert all(torch.equal(v, model.members[1].state_dict()[k]) for k, v in single.state_dict().items())
    assert meta["dev"] == summary["best_dev"] and [m["seed"] for m in meta["members"]] == [3, 5]
    assert meta["train"]["ensemble_seeds"] == [3, 5]
    result = evaluate_model(model, fne, corpus, "dev", feature_fn=fake_features())
    assert {k: result[k] for k in ("i2t", "t2i", "rsum")} == summary["best_dev"]


def test_ensemble_resumes_after_a_crash_in_the_second_member(corpus, tmp_path, monkeypatch):
    _run(corpus, ENSEMBLE, tmp_path / "full")
    calls = {"n": 0}
    real = trainer_mod.evaluate_dev

    def crash_in_member_2(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:  # member 1 evaluated epochs 1-2; crash in member 2's first epoch
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(trainer_mod, "evaluate_dev", crash_in_member_2)
    with pytest.raises(KeyboardInterrupt):
        _run(corpus, ENSEMBLE, tmp_path / "crashed")
    assert not (tmp_path / "crashed" / "model.safetensors").exists()
    with pytest.raises(VsekitError, match="seed-3.*--resume"):
        _run(corpus, ENSEMBLE, tmp_path / "crashed")  # never overwrite a member silently
    _run(corpus, ENSEMBLE, tmp_path / "crashed", resume=True)
    for member in ("seed-3", "seed-5"):
        _assert_same_run(tmp_path / "full" / member, tmp_path / "crashed" / member)
    a, b = (
        load_file(tmp_path / "full" / "model.safetensors"),
        load_file(tmp_path / "crashed" / "model.safetensors"),
    )
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    # a single-model run directory is not taken over by an ensemble recipe
    _run(corpus, dataclasses.replace(TINY, epochs=1), tmp_path / "single")
    with pytest.raises(VsekitError, match="single-model run"):
        _run(corpus, ENSEMBLE, tmp_path / "single", resume=True)


def test_checkpoint_from_before_ensemble_seeds_existed_resumes(corpus, tmp_path):
    _run(corpus, dataclasses.replace(TINY, epochs=1), tmp_path / "run")
    path = tmp_path / "run" / "checkpoint.pt"
    ckpt = load_checkpoint(path)
    del ckpt["config"]["ensemble_seeds"]  # as written by the trainer before the field existed
    torch.save(ckpt, path)
    assert _run(corpus, TINY, tmp_path / "run", resume=True)["epochs_completed"] == 4


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([1, "a"], "must be a list of int or null"),
        ([], "non-empty"),
        ([1, 1], "distinct"),
        (3, "list of int"),
    ],
)
def test_ensemble_seeds_are_validated(tmp_path, value, message):
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"ensemble_seeds": value}))
    with pytest.raises(VsekitError, match=f"ensemble_seeds.*{message}"):
        load_recipe(path)


def test_seed_all_restarts_every_rng_a_checkpoint_saves():
    import random

    from vsekit.rng import seed_all

    def draws() -> tuple[list[float], list[float], float]:
        return torch.rand(3).tolist(), np.random.rand(3).tolist(), random.random()

    seed_all(3)
    first = draws()
    seed_all(3)
    assert draws() == first
    seed_all(4)
    other = draws()
    assert all(a != b for a, b in zip(other, first, strict=True))


def test_run_dir_open_checked_refuses_another_recipe_before_anything_is_loaded(tmp_path):
    from vsekit.training import RunDir, save_checkpoint

    config = TrainConfig(epochs=1, embed_dim=8)
    run = RunDir(tmp_path, "joint-embedding")
    assert run.open_checked(resume=True, config=config) is None  # nothing to resume: a fresh run
    save_checkpoint({"config": config.to_dict(), "epoch": 1}, run.checkpoint_path, "joint-embedding")
    assert run.open_checked(resume=True, config=dataclasses.replace(config, epochs=5))["epoch"] == 1
    with pytest.raises(ConfigMismatchError, match="embed_dim=8.*embed_dim=16"):
        run.open_checked(resume=True, config=dataclasses.replace(config, embed_dim=16))
    assert run.open(resume=True)["epoch"] == 1  # open alone leaves the recipe to the trainer


def test_images_without_captions_are_left_out_of_an_evaluation_with_a_warning(tmp_path):
    from vsekit.embedding.evaluate import captioned_images

    images = {i: tmp_path / i for i in ("a.jpg", "b.jpg", "c.jpg")}
    captions = [Caption("c.jpg", "a dog", "dev"), Caption("a.jpg", "a cat", "dev")]
    corpus = Corpus(
        root=tmp_path, name="t", format="test", images=images, captions=captions, splits={"dev": list(images)}
    )
    with pytest.warns(UserWarning, match=r"split 'dev': 1 image\(s\) without captions left out"):
        part, ids = captioned_images(corpus, "dev")
    assert ids == ["a.jpg", "c.jpg"] and len(part.captions) == 2
