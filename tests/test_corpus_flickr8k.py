"""The Flickr8K reader (data/formats/flickr8k.py): the standard layout, its quirks and one-line errors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from corpus_format_helpers import (
    SAMPLE,
    error_message,
    make_flickr8k,
    write_text,
)
from vsekit.data import (
    Caption,
    load_corpus,
    load_flickr8k,
)
from vsekit.errors import CorpusError


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_flickr8k_reads_standard_layout(tmp_path: Path, newline: str) -> None:
    root = make_flickr8k(tmp_path / "f8k", newline=newline)
    corpus = load_flickr8k(root)
    assert corpus.format == "flickr8k"
    assert corpus.name == "f8k"
    assert corpus.splits == {"train": ["a.jpg", "b.jpg"], "dev": ["c.jpg"]}
    assert sorted(corpus.images) == ["a.jpg", "b.jpg", "c.jpg", "d.jpg"]  # d.jpg: on disk, in no split
    assert corpus.images["a.jpg"] == root / "Images" / "a.jpg"
    assert len(corpus) == 4 and len(corpus.captions) == 8
    first = corpus.captions[0]
    assert first == Caption(
        "a.jpg", "a caption number 0 .", f"{root / 'Flickr8k_text' / 'Flickr8k.token.txt'}:1"
    )
    assert not any("\r" in c.text for c in corpus.captions)
    assert corpus.image_ids() == ["a.jpg", "b.jpg", "c.jpg", "d.jpg"]
    assert corpus.captions_by_image()["b.jpg"] == ["b caption number 0 .", "b caption number 1 ."]
    assert corpus.caption_image_ids()[:3] == ["a.jpg", "a.jpg", "b.jpg"]
    assert corpus.verify_images() == []
    assert "images=4" in repr(corpus) and "captions=8" in repr(corpus) and "train=2" in repr(corpus)


def test_flickr8k_with_test_split(tmp_path: Path) -> None:
    splits = {"train": ["a.jpg"], "dev": ["b.jpg"], "test": ["c.jpg"]}
    corpus = load_flickr8k(make_flickr8k(tmp_path, splits=splits, no_split=()))
    assert list(corpus.splits) == ["train", "dev", "test"]
    assert corpus.split("test").captions_by_image() == {
        "c.jpg": ["c caption number 0 .", "c caption number 1 ."]
    }


def test_missing_image_in_split_names_split_file_and_image(tmp_path: Path) -> None:
    root = make_flickr8k(tmp_path)
    (root / "Images" / "b.jpg").unlink()
    with pytest.raises(CorpusError) as excinfo:
        load_flickr8k(root)
    message = error_message(excinfo)
    assert message.startswith(f"{root / 'Flickr8k_text' / 'Flickr_8k.trainImages.txt'}:2:")
    assert "'b.jpg'" in message and "split 'train'" in message


def test_jpg1_quirk_warns_and_drops(tmp_path: Path) -> None:
    quirk = [f"2258277193_586949ec62.jpg.1#{n}\tpeople waiting for the subway" for n in range(5)]
    root = make_flickr8k(tmp_path, extra_token_lines=tuple(quirk))
    with pytest.warns(UserWarning, match=r"dropped 5 caption\(s\) of 1 image.*2258277193_586949ec62\.jpg\.1"):
        corpus = load_flickr8k(root)
    assert len(corpus.captions) == 8
    assert "2258277193_586949ec62.jpg.1" not in corpus.images


def test_empty_caption_names_file_and_line(tmp_path: Path) -> None:
    root = make_flickr8k(tmp_path, extra_token_lines=("a.jpg#2\t   ",))
    token = root / "Flickr8k_text" / "Flickr8k.token.txt"
    with pytest.raises(CorpusError, match=re.escape(f"{token}:10: empty caption")):
        load_flickr8k(root)


@pytest.mark.parametrize("bad_line", ["a.jpg#0 no tab here", "a.jpg\tno number", "a.jpg#x\tbad number"])
def test_malformed_token_line_names_file_and_line(tmp_path: Path, bad_line: str) -> None:
    root = make_flickr8k(tmp_path, extra_token_lines=(bad_line,))
    token = root / "Flickr8k_text" / "Flickr8k.token.txt"
    with pytest.raises(CorpusError) as excinfo:
        load_flickr8k(root)
    assert error_message(excinfo).startswith(f"{token}:10: expected 'IMAGE.jpg#N<TAB>caption'")


def test_overlapping_splits_are_refused(tmp_path: Path) -> None:
    root = make_flickr8k(tmp_path, splits={"train": ["a.jpg", "b.jpg"], "dev": ["b.jpg"]})
    with pytest.raises(CorpusError, match=r"'b.jpg' is in split 'train' .* and in split 'dev'"):
        load_flickr8k(root)


def test_missing_image_folder(tmp_path: Path) -> None:
    write_text(tmp_path / "Flickr8k_text" / "Flickr8k.token.txt", ["a.jpg#0\tx"])
    with pytest.raises(CorpusError, match="no image folder"):
        load_flickr8k(tmp_path)


def test_bundled_sample() -> None:
    corpus = load_corpus(SAMPLE)
    assert corpus.format == "flickr8k"
    assert len(corpus) == 100 and len(corpus.captions) == 500
    assert list(corpus.splits) == ["dev"] and len(corpus.splits["dev"]) == 100
    dev = corpus.split("val")
    assert all(len(texts) == 5 for texts in dev.captions_by_image().values())
    assert dev.image_ids() == corpus.splits["dev"]
    assert corpus.verify_images() == []
