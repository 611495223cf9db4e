"""The CSV reader (data/formats/csv.py): image,caption[,split] files and their one-line errors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from corpus_format_helpers import (
    error_message,
    make_flickr8k,
    write_image,
    write_text,
)
from vsekit.data import (
    load_csv,
)
from vsekit.errors import CorpusError


def test_csv_quoted_commas_and_single_split(tmp_path: Path) -> None:
    for name in ("x.png", "y.png"):
        write_image(tmp_path / "images" / name)
    path = write_text(
        tmp_path / "captions.csv",
        ["image,caption", 'x.png,"A dog , running ."', "x.png,A dog plays", 'y.png,"He said ""hi"", twice"'],
        newline="\r\n",
    )
    corpus = load_csv(path)
    assert corpus.format == "csv"
    assert corpus.splits == {"all": ["x.png", "y.png"]}
    assert corpus.captions_by_image() == {
        "x.png": ["A dog , running .", "A dog plays"],
        "y.png": ['He said "hi", twice'],
    }
    assert corpus.captions[2].source == f"{path}:4"
    assert corpus.images["x.png"] == tmp_path / "images" / "x.png"


def test_csv_split_column_and_explicit_images_dir(tmp_path: Path) -> None:
    for name in ("x.jpg", "y.jpg", "z.jpg"):
        write_image(tmp_path / "pics" / name)
    path = write_text(
        tmp_path / "data.csv",
        ["image,caption,split", "x.jpg,one,train", "y.jpg,two,val", "x.jpg,three,train", "z.jpg,four,test"],
    )
    corpus = load_csv(path, images_dir=tmp_path / "pics")
    assert corpus.splits == {"train": ["x.jpg"], "val": ["y.jpg"], "test": ["z.jpg"]}
    assert corpus.split("dev").captions_by_image() == {"y.jpg": ["two"]}


def test_csv_uses_flickr8k_split_files_next_to_it(tmp_path: Path) -> None:
    root = make_flickr8k(tmp_path)
    lines = ["image,caption"] + [f"{i},{i[0]} caption" for i in ("a.jpg", "b.jpg", "c.jpg", "d.jpg")]
    corpus = load_csv(write_text(root / "captions.txt", lines))
    assert corpus.splits == {"train": ["a.jpg", "b.jpg"], "dev": ["c.jpg"]}
    assert len(corpus) == 4


def test_csv_bad_header(tmp_path: Path) -> None:
    path = write_text(tmp_path / "captions.csv", ["filename,text", "x.jpg,hello"])
    with pytest.raises(CorpusError) as excinfo:
        load_csv(path, images_dir=tmp_path)
    message = error_message(excinfo)
    assert message.startswith(f"{path}:1:") and "expected header 'image,caption'" in message


def test_csv_empty_caption_names_line(tmp_path: Path) -> None:
    write_image(tmp_path / "x.jpg")
    path = write_text(tmp_path / "captions.csv", ["image,caption", "x.jpg,fine", 'x.jpg,"  "'])
    with pytest.raises(CorpusError, match=re.escape(f"{path}:3: empty caption")):
        load_csv(path)


def test_csv_wrong_field_count_names_line(tmp_path: Path) -> None:
    write_image(tmp_path / "x.jpg")
    path = write_text(tmp_path / "captions.csv", ["image,caption", "x.jpg,a dog, unquoted comma"])
    with pytest.raises(CorpusError, match=re.escape(f"{path}:2: expected 2 fields")):
        load_csv(path)


def test_csv_missing_image_with_split_column(tmp_path: Path) -> None:
    write_image(tmp_path / "x.jpg")
    path = write_text(tmp_path / "captions.csv", ["image,caption,split", "x.jpg,a,train", "gone.jpg,b,test"])
    with pytest.raises(CorpusError, match=re.escape(f"{path}:3: image 'gone.jpg' of split 'test'")):
        load_csv(path)


def test_csv_without_splits_drops_strays_with_warning(tmp_path: Path) -> None:
    write_image(tmp_path / "x.jpg")
    path = write_text(tmp_path / "captions.csv", ["image,caption", "x.jpg,a", "x.jpg.1,b"])
    with pytest.warns(UserWarning, match="dropped 1 caption"):
        corpus = load_csv(path)
    assert corpus.splits == {"all": ["x.jpg"]}


def test_csv_with_wrong_images_dir_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    path = write_text(tmp_path / "captions.csv", ["image,caption", "x.jpg,a"])
    with pytest.raises(CorpusError, match="none of the 1 images"):
        load_csv(path, images_dir=tmp_path / "empty")
