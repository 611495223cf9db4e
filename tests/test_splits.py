"""Validation slices (the selection protocol of issue 24): drawn deterministically, disjoint from what they
must be disjoint from, applied to a corpus as two more splits, and the shipped Flickr8K slice re-made from
the split files gives the same file byte for byte."""

from __future__ import annotations

import json
import random

import pytest

from corpus_helpers import write_tiny_corpus
from vsekit.data import load_corpus
from vsekit.data.splits import (
    apply_validation_slice,
    check_selection_splits,
    draw_slice,
    ids_sha256,
    load_validation_slice,
    make_validation_slice,
    write_validation_slice,
)
from vsekit.errors import CorpusError, VsekitError
from vsekit.resources import SPLITS_DIR, sample_data_path


def test_draw_is_deterministic_sorted_and_independent_of_order():
    ids = [f"{k:05d}.jpg" for k in range(500)]
    drawn = draw_slice(ids, 50, seed=0)
    shuffled = ids[:]
    random.Random(1).shuffle(shuffled)
    assert drawn == draw_slice(shuffled, 50, seed=0) == sorted(drawn)
    assert len(set(drawn)) == 50 and set(drawn) <= set(ids)
    assert drawn != draw_slice(ids, 50, seed=1)  # another seed, another slice
    assert set(draw_slice(ids, 40, seed=0)) <= set(drawn)  # a smaller slice is a prefix of the ranking
    with pytest.raises(VsekitError, match="needs more than"):
        draw_slice(ids[:10], 10, seed=0)


def test_slice_splits_partition_train_and_leave_dev_and_test_alone(tmp_path):
    corpus = load_corpus(write_tiny_corpus(tmp_path / "c", 16, 6, 6))
    vslice = make_validation_slice(corpus, "val4", 4, seed=3)
    sliced = apply_validation_slice(corpus, vslice)
    train, val, fit = (sliced.splits[s] for s in ("train", "val4", "train-minus-val4"))
    assert sorted(val) == list(vslice.image_ids) and len(val) == 4
    assert not set(val) & set(fit) and sorted(val + fit) == sorted(train)
    assert [i for i in train if i in set(fit)] == fit  # the training order is kept
    for other in ("dev", "test"):
        assert sliced.splits[other] == corpus.splits[other] and not set(val) & set(corpus.splits[other])
    assert len(sliced.split("val4").captions) == 4 * 5
    assert vslice.source_sha256 == ids_sha256(corpus.splits["train"])
    # file round trip, then a corpus the slice was not made for
    path = write_validation_slice(vslice, tmp_path / "val4.json")
    assert load_validation_slice(path) == vslice.__class__(**{**vslice.__dict__, "path": str(path)})
    other = load_corpus(write_tiny_corpus(tmp_path / "o", 6, 16, 6))
    with pytest.raises(CorpusError, match="val4.json: .* not in split 'train'.*another corpus"):
        apply_validation_slice(other, load_validation_slice(path))


def test_recipes_must_train_on_the_rest_and_select_on_the_slice(tmp_path):
    corpus = load_corpus(write_tiny_corpus(tmp_path / "c", 16, 6, 6))
    vslice = make_validation_slice(corpus, "val4", 4, seed=0)
    check_selection_splits("r.json", "train-minus-val4", "val4", vslice)
    check_selection_splits("r.json", "train", "dev", None)
    with pytest.raises(VsekitError, match="r.json: field 'dev_split' must be 'val4'"):
        check_selection_splits("r.json", "train-minus-val4", "dev", vslice)
    with pytest.raises(VsekitError, match="r.json: field 'train_split' must be 'train-minus-val4'"):
        check_selection_splits("r.json", "train", "val4", vslice)


def test_bad_slice_files_are_named(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"name": "v", "source_split": "train", "seed": 0, "image_ids": ["a", "a"]}))
    with pytest.raises(VsekitError, match="bad.json: .*twice"):
        load_validation_slice(bad)
    bad.write_text(
        json.dumps({"name": "v", "source_split": "train", "seed": 0, "image_ids": ["a"], "size": 2})
    )
    with pytest.raises(VsekitError, match="bad.json: .*'size'"):
        load_validation_slice(bad)
    with pytest.raises(VsekitError, match="available validation slices: .*flickr8k-val1000"):
        load_validation_slice("no-such-slice")


def test_shipped_flickr8k_slice_is_well_formed_and_misses_the_sample_dev_photos():
    vslice = load_validation_slice("flickr8k-val1000")
    assert vslice.name == "val1000" and vslice.fit_split == "train-minus-val1000"
    assert len(vslice.image_ids) == 1000 == len(set(vslice.image_ids))
    assert list(vslice.image_ids) == sorted(vslice.image_ids)
    assert (vslice.source_split, vslice.source_count, vslice.method) == ("train", 6000, "sha256-rank")
    sample_dev = set(load_corpus(sample_data_path()).image_ids())  # 100 Flickr8K dev photos
    assert len(sample_dev) == 100 and not sample_dev & set(vslice.image_ids)


def test_shipped_slice_is_remade_exactly_from_the_real_split_files(flickr8k_full, tmp_path):
    corpus = load_corpus(flickr8k_full)
    shipped = load_validation_slice("flickr8k-val1000")
    remade = make_validation_slice(
        corpus, shipped.name, len(shipped.image_ids), shipped.seed, "train", shipped.description
    )
    path = write_validation_slice(remade, tmp_path / "v.json")
    assert path.read_bytes() == (SPLITS_DIR / "flickr8k-val1000.json").read_bytes()
    held = set(shipped.image_ids)
    assert held <= set(corpus.splits["train"]) and shipped.source_sha256 == ids_sha256(corpus.splits["train"])
    for other in ("dev", "test"):  # test is held back here; a user with the full download has it
        if other in corpus.splits:
            assert not held & set(corpus.splits[other])
    sliced = apply_validation_slice(corpus, shipped)
    assert len(sliced.splits["train-minus-val1000"]) == 5000 and len(sliced.splits["val1000"]) == 1000


def test_joint_embedding_recipe_with_a_slice_trains_on_the_rest_and_selects_on_the_slice(tmp_path):
    from corpus_helpers import fake_image_features
    from train_helpers import tiny_train_config
    from vsekit.embedding.trainer import train

    corpus = load_corpus(write_tiny_corpus(tmp_path / "c", 16, 6, 6))
    path = write_validation_slice(make_validation_slice(corpus, "val4", 4, seed=0), tmp_path / "val4.json")
    config = tiny_train_config(
        epochs=1, validation_slice=str(path), train_split="train-minus-val4", dev_split="val4"
    )
    summary = train(corpus, config, tmp_path / "run", progress=False, feature_fn=fake_image_features)
    meta = json.loads((tmp_path / "run" / "config.json").read_text())
    assert meta["validation_slice"] == str(path) and summary["best_epoch"] == 1
    from vsekit.training.checkpoint import read_checkpoint

    identity = read_checkpoint(tmp_path / "run" / "checkpoint.pt", "joint-embedding")["data"]
    assert (identity["n_train_captions"], identity["n_dev_captions"]) == (12 * 5, 4 * 5)
    bad = tiny_train_config(epochs=1, validation_slice=str(path))
    with pytest.raises(VsekitError, match="field 'dev_split' must be 'val4'"):
        train(corpus, bad, tmp_path / "bad", progress=False, feature_fn=fake_image_features)
