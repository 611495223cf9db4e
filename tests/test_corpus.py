"""The Corpus type (splits, aliases, subsets, files gone after loading), format auto-detection, and the
real Flickr8K; each format's reader has its own tests in test_corpus_<format>.py."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from corpus_format_helpers import (
    error_message,
    make_coco,
    make_flickr8k,
    make_karpathy_coco,
    write_image,
    write_text,
)
from vsekit.data import (
    Corpus,
    load_corpus,
    load_csv,
    load_flickr8k,
)
from vsekit.errors import CorpusError


def test_flickr8k_split_subset_and_aliases(tmp_path: Path) -> None:
    corpus = load_flickr8k(make_flickr8k(tmp_path, splits={"train": ["b.jpg", "a.jpg"], "dev": ["c.jpg"]}))
    train = corpus.split("train")
    assert isinstance(train, Corpus)
    assert train.splits == {"train": ["b.jpg", "a.jpg"]}
    assert train.image_ids() == ["b.jpg", "a.jpg"]  # split order, not sorted
    assert sorted(train.images) == ["a.jpg", "b.jpg"]
    # captions grouped by image in split order: caption k belongs to image k // 2 here
    assert train.caption_image_ids() == ["b.jpg", "b.jpg", "a.jpg", "a.jpg"]
    for alias in ("dev", "val", "validation"):
        assert corpus.split(alias).splits == {"dev": ["c.jpg"]}
    both = corpus.split("train+dev")
    assert both.image_ids() == ["b.jpg", "a.jpg", "c.jpg"] and len(both.captions) == 6


def test_unknown_split_lists_available(tmp_path: Path) -> None:
    corpus = load_flickr8k(make_flickr8k(tmp_path))
    with pytest.raises(CorpusError) as excinfo:
        corpus.split("test")
    message = error_message(excinfo)
    assert str(tmp_path) in message and "'test'" in message and "available: train, dev" in message


def test_verify_images_reports_files_gone_after_load(tmp_path: Path) -> None:
    root = make_flickr8k(tmp_path)
    corpus = load_flickr8k(root)
    (root / "Images" / "c.jpg").unlink()
    assert corpus.verify_images() == ["c.jpg"]


def test_detect_flickr8k_dir(tmp_path: Path) -> None:
    root = make_flickr8k(tmp_path)
    write_text(root / "captions.txt", ["image,caption", "a.jpg,x"])  # the Flickr8K layout wins
    assert load_corpus(root).format == "flickr8k"


def test_detect_karpathy_dir_and_file(tmp_path: Path) -> None:
    path = make_karpathy_coco(tmp_path)
    assert load_corpus(tmp_path).format == "karpathy"
    assert load_corpus(path).format == "karpathy"


def test_detect_coco_dir_and_file(tmp_path: Path) -> None:
    root = make_coco(tmp_path)
    assert load_corpus(root).format == "coco"
    corpus = load_corpus(root / "annotations" / "captions_val2014.json")
    assert corpus.format == "coco" and list(corpus.splits) == ["val"]


def test_detect_csv_dir_and_file(tmp_path: Path) -> None:
    write_image(tmp_path / "Images" / "x.jpg")
    path = write_text(tmp_path / "captions.txt", ["image,caption", "x.jpg,hello"])
    assert load_corpus(tmp_path).format == "csv"
    assert load_corpus(path).format == "csv"


def test_detect_flickr8k_token_file(tmp_path: Path) -> None:
    root = make_flickr8k(tmp_path)
    corpus = load_corpus(root / "Flickr8k_text" / "Flickr8k.token.txt")
    assert corpus.format == "flickr8k" and list(corpus.splits) == ["train", "dev"]


def test_detect_nothing_lists_what_was_looked_for(tmp_path: Path) -> None:
    (tmp_path / "notes.md").write_text("hello")
    with pytest.raises(CorpusError) as excinfo:
        load_corpus(tmp_path)
    message = error_message(excinfo)
    for looked_for in ("Flickr8k.token.txt", "dataset_*.json", "annotations/captions_*.json", "captions.csv"):
        assert looked_for in message
    with pytest.raises(CorpusError, match="no such file or folder"):
        load_corpus(tmp_path / "absent")
    with pytest.raises(CorpusError, match="unknown corpus file"):
        load_corpus(tmp_path / "notes.md")


def test_real_flickr8k(flickr8k_full: Path) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        corpus = load_corpus(flickr8k_full)
    assert corpus.format == "flickr8k"
    train, dev = corpus.split("train"), corpus.split("dev")
    assert len(train) == 6000 and len(dev) == 1000
    for subset in (train, dev):
        assert {len(texts) for texts in subset.captions_by_image().values()} == {5}
        assert len(subset.captions) == 5 * len(subset)
    in_split = set(train.images) | set(dev.images)
    assert len([i for i in corpus.images if i not in in_split]) == len(corpus) - 7000  # 91 in the original
    # the one known quirk, reported as a warning, never an error
    assert [str(w.message) for w in caught if "2258277193_586949ec62.jpg.1" in str(w.message)]
    assert "2258277193_586949ec62.jpg.1" not in corpus.images
    if (flickr8k_full / "captions.txt").is_file():  # the CSV form of the same captions agrees
        as_csv = load_csv(flickr8k_full / "captions.txt")
        assert as_csv.splits == corpus.splits
        assert as_csv.split("dev").captions_by_image() == dev.captions_by_image()
