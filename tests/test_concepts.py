"""The concept route (issue 33): ConSE scores, the fusion of both routes, the classes in the index store,
the migration of an index built before them, and damage to a stored class row."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

import vsekit
from search_helpers import SAMPLE_IMAGES
from vsekit.errors import VsekitError
from vsekit.retrieval import build as build_module
from vsekit.retrieval.answer import RoutePolicy, fuse
from vsekit.retrieval.concepts import concept_scores
from vsekit.retrieval.query import RouteScores
from vsekit.vision.classes import class_table, load_classifier, top_classes

EVERYDAY = Path(__file__).resolve().parents[2] / "shared" / "data" / "everyday" / "photos"
POLICY = RoutePolicy(scale=1.0, offset=0.15, margin=0.25, joint_below=0.28, concept_below=0.16)


def test_concept_scores_are_the_probability_weighted_relevance():
    relevance = np.zeros((2, 1000), dtype=np.float32)
    relevance[0, [3, 7]] = [0.5, 0.25]  # query 0 names classes 3 and 7
    relevance[1, 9] = 0.4
    ids = np.array([[3, 7, 9], [9, 1, 2]], dtype=np.uint16)
    probs = np.array([[0.6, 0.2, 0.1], [0.5, 0.3, 0.2]], dtype=np.float32)
    got = concept_scores(relevance, ids, probs)
    assert got == pytest.approx(np.array([[0.6 * 0.5 + 0.2 * 0.25, 0.0], [0.1 * 0.4, 0.5 * 0.4]]))


def test_top_classes_keeps_the_most_probable_best_first():
    p = np.array([[0.1, 0.5, 0.05, 0.35], [0.7, 0.1, 0.1, 0.1]], dtype=np.float32)
    ids, probs = top_classes(p, 2)
    assert ids.tolist() == [[1, 3], [0, 1]] and probs[0] == pytest.approx([0.5, 0.35])


def _scores(joint, concept, classes=(0, 0)) -> RouteScores:
    joint, concept = np.array(joint, np.float32), np.array(concept, np.float32)
    classes = np.array(classes)
    return RouteScores(
        np.arange(len(joint)), joint, concept, classes, np.ones(len(classes)), joint.max(), concept.max()
    )


def test_the_concept_route_wins_where_the_joint_space_does_not_know_the_object():
    # photo 0: the joint space's vague best (a cosine 0.30); photo 1: the classifier is sure it is a cat
    order, fused, routes = fuse(_scores([0.30, 0.22], [0.0, 0.30]), POLICY)
    assert order.tolist() == [1, 0] and routes[1] == "concept"
    assert fused.tolist() == pytest.approx([0.30, 0.30 + 0.15])  # max(cos, a * concept + b)


def test_the_joint_space_wins_where_it_knows_and_the_classes_say_little():
    # photo 0: "a dog catches a frisbee" at 0.45 in the joint space; photo 1: a weak class match
    order, fused, routes = fuse(_scores([0.45, 0.15], [0.02, 0.08]), POLICY)
    assert order.tolist() == [0, 1] and routes == ["joint", "concept"]
    assert fused.tolist() == pytest.approx([0.45, 0.08 + 0.15])


def test_no_concept_evidence_leaves_the_cosine_and_ties_go_to_the_cosine():
    order, fused, routes = fuse(_scores([0.10, 0.12, 0.05], [0.0, 0.0, 0.0], (0, 0, 0)), POLICY)
    assert order.tolist() == [1, 0, 2] and fused.tolist() == pytest.approx([0.10, 0.12, 0.05])
    assert routes == ["joint"] * 3


def test_a_trace_of_a_class_below_the_gate_lifts_nothing():
    gated = RoutePolicy(scale=1.0, offset=0.15, margin=0.25, joint_below=0.28, concept_below=0.16, gate=0.02)
    order, fused, routes = fuse(_scores([0.20, 0.05], [0.0, 0.01]), gated)
    assert order.tolist() == [0, 1] and fused.tolist() == pytest.approx([0.20, 0.05]) and routes[1] == "joint"


def test_a_query_that_names_a_class_lifts_the_concept_term_by_how_plainly_it_names_it():
    lifted = RoutePolicy(
        scale=0.5, offset=0.1, margin=0.25, joint_below=0.3, concept_below=0.15, gate=0.02, lift=0.5
    )
    scores = _scores(
        [0.30, 0.10], [0.0, 0.30]
    )  # photo 1: the classifier's cat; photo 0: the joint space's best
    # "a kiwi fruit" names a class plainly (best relevance 0.4): 0.5 * 0.3 + 0.1 + 0.5 * 0.4 = 0.45 wins
    order, fused, routes = fuse(scores, lifted.for_query(np.array([0.0, 0.4, 0.1])))
    assert order.tolist() == [1, 0] and routes[1] == "concept" and fused[1] == pytest.approx(0.45)
    # a Flickr8K-style sentence names none (best relevance 0.05): 0.15 + 0.1 + 0.025 = 0.275 < 0.30
    order, fused, routes = fuse(scores, lifted.for_query(np.array([0.0, 0.05, 0.0])))
    assert order.tolist() == [0, 1] and fused.tolist() == pytest.approx([0.30, 0.275])
    assert lifted.for_query(np.array([0.4])).lift == 0.0  # applied once
    assert lifted.for_query(np.array([0.4])).weak(scores) == lifted.weak(scores)  # (no joint_lift here)


def test_a_query_that_names_a_class_needs_a_higher_cosine_to_be_found_by_the_joint_space():
    policy = RoutePolicy(
        scale=1, offset=0.2, margin=0.25, joint_below=0.285, concept_below=0.22, joint_lift=0.2
    )
    scores = _scores([0.33, 0.2], [0.1, 0.0])  # the joint space's best 0.33, a faint concept match
    assert not policy.for_query(np.array([0.0, 0.1])).weak(scores)  # threshold 0.285 + 0.02: found
    assert policy.for_query(np.array([0.0, 0.4])).weak(scores)  # "a cat": 0.285 + 0.08 = 0.365, not found
    assert policy.for_query(np.array([0.0, 0.4])).joint_below == pytest.approx(0.365)
    assert policy.for_query(np.array([0.0, 0.4])).route(0.33, 0.25) == "concept"  # not "both": 0.33 < 0.365
    assert policy.route(0.33, 0.25) == "both"


def test_weak_when_neither_route_finds_the_subject():
    assert POLICY.weak(_scores([0.25, 0.2], [0.1, 0.05]))
    assert not POLICY.weak(_scores([0.25, 0.2], [0.2, 0.05]))  # the concept route found it
    assert not POLICY.weak(_scores([0.30, 0.2], [0.0, 0.0]))  # the joint space found it


def test_class_names_are_the_classifiers_order():
    table = class_table()
    assert len(table) == 1000 and table.synsets[0] == "n01440764" and table.name(281) == "tabby"
    classifier = load_classifier("efficientnet_lite0")
    assert classifier.weight.shape == (1000, 1280)


def _photos(tmp_path: Path, n: int = 4) -> Path:
    folder = tmp_path / "photos"
    folder.mkdir()
    for src in SAMPLE_IMAGES[:n]:
        shutil.copy(src, folder / src.name)
    return folder


def test_an_index_stores_each_photos_top_classes(tmp_path):
    folder = _photos(tmp_path)
    index = vsekit.Index.build(folder, tmp_path / "index", progress=False)
    ids, probs = index._view.concepts(10)
    model = vsekit.load_model()
    expected = load_classifier("efficientnet_lite0").probabilities(
        model.file_features([folder / p for p in index.paths])
    )
    want_ids, want_probs = top_classes(expected, 10)
    assert (ids == want_ids).all() and probs == pytest.approx(want_probs, abs=1e-5)
    assert index.manifest["concepts"]["top"] == 10


def test_an_index_built_before_the_concept_route_gains_it_on_update(tmp_path, monkeypatch):
    folder = _photos(tmp_path)
    with monkeypatch.context() as old_version:  # a build that knows no classes: none stored, no setting
        old_version.setattr(build_module, "photo_classifier", lambda model: None)
        vsekit.Index.build(folder, tmp_path / "index", progress=False)
    index = vsekit.Index.open(tmp_path / "index")
    before = np.asarray(index.vectors).copy()
    found = index.answer("a dog runs on the grass", k=2)
    assert found.routes == ("joint",) and "vsekit index update" in (found.notice or "")
    assert all(h.route is None for h in found.hits)  # nothing half-fused

    report = index.update(progress=False)
    assert report.added == [] and report.changed == [] and report.unchanged == 4  # nothing re-embedded
    assert np.array_equal(np.asarray(index.vectors), before)
    found = index.answer("a dog runs on the grass", k=2)
    assert found.routes == ("joint", "concept") and found.notice is None
    assert {h.route for h in found.hits} <= {"joint", "concept", "both"}


def test_a_damaged_class_row_is_an_error_not_a_silent_change(tmp_path):
    index_dir = tmp_path / "index"
    vsekit.Index.build(_photos(tmp_path), index_dir, progress=False)
    with sqlite3.connect(index_dir / "store.sqlite") as conn:
        sha, blob = conn.execute("SELECT sha256, classes FROM concepts LIMIT 1").fetchone()
        flipped = bytes([blob[0] ^ 1]) + bytes(blob[1:])
        conn.execute("UPDATE concepts SET classes = ? WHERE sha256 = ?", (flipped, sha))
    with pytest.raises(VsekitError, match="damaged index file"):
        vsekit.Index.open(index_dir).answer("a dog", k=2)


@pytest.mark.skipif(not EVERYDAY.is_dir(), reason="needs ../shared/data/everyday (the everyday photos)")
def test_a_cat_is_found_through_the_concept_route(tmp_path):
    folder = tmp_path / "photos"
    folder.mkdir()
    for name in ("animals/ocv-001.jpg", "things/gc-026.jpg", "vehicles/ocv-046.jpg", "buildings/gc-150.jpg"):
        shutil.copy(EVERYDAY / name, folder / Path(name).name)
    index = vsekit.Index.build(folder, tmp_path / "index", progress=False)
    found = index.answer("a cat", k=4)
    assert found.hits[0].path == "ocv-001.jpg" and found.hits[0].route in ("concept", "both")
    assert found.hits[0].label is not None and "cat" in found.hits[0].label.lower() + " tabby cat"
    assert not found.weak


def test_a_routes_files_fusion_reads_as_the_docs_print_it():
    from vsekit.retrieval.answer import fusion_rule

    lifted = {"scale": 0.5, "offset": 0.175, "gate": 0.05, "lift": 0.5}
    assert fusion_rule(lifted) == "max(cos, 0.5 x concept + 0.175 + 0.5 x named), concept >= 0.05"
    assert fusion_rule({"scale": 1.0, "offset": 0.25}) == "max(cos, 1 x concept + 0.25), concept >= 0"
