"""Image collections: a plain folder of photos (no captions), loose files, and a corpus's images."""

import shutil

import pytest

from vsekit.data import ImageCollection, load_corpus
from vsekit.errors import CorpusError
from vsekit.resources import sample_data_path


def test_folder_of_photos_is_scanned_recursively_case_insensitively(tmp_path):
    for rel in ("a.jpg", "b.JPEG", "sub/c.png", "sub/deeper/d.WebP", "e.bmp", "f.Gif", "g.tiff"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(b"x")
    for rel in ("notes.txt", "h.docx", ".hidden.jpg", ".thumbs/h.jpg", "sub/raw.cr2"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes(b"x")
    photos = ImageCollection.from_folder(tmp_path, name="mine")
    assert photos.name == "mine" and photos.root == tmp_path
    assert photos.image_ids() == [
        "a.jpg",
        "b.JPEG",
        "e.bmp",
        "f.Gif",
        "g.tiff",
        "sub/c.png",
        "sub/deeper/d.WebP",
    ]
    assert photos.images["sub/c.png"] == tmp_path / "sub" / "c.png"
    assert ImageCollection.from_folder(tmp_path).name == tmp_path.name
    assert photos.subset(["e.bmp", "a.jpg"]).image_ids() == ["e.bmp", "a.jpg"]
    with pytest.raises(CorpusError, match="nope.jpg"):
        photos.subset(["nope.jpg"])
    with pytest.raises(CorpusError, match="does not exist"):
        ImageCollection.from_folder(tmp_path / "missing")


def test_loose_files_and_a_corpus_are_collections(tmp_path):
    src = sorted((sample_data_path() / "Images").iterdir())[:2]
    (tmp_path / "x").mkdir()
    (tmp_path / "y").mkdir()
    a, b = shutil.copy(src[0], tmp_path / "x"), shutil.copy(src[1], tmp_path / "y")
    files = ImageCollection.from_paths([a, b])
    assert files.root == tmp_path and files.image_ids() == [f"x/{src[0].name}", f"y/{src[1].name}"]
    assert files.id_of(b) == f"y/{src[1].name}"
    corpus = load_corpus(sample_data_path())
    collection = corpus.image_collection()
    assert (collection.name, collection.root, dict(collection.images)) == (
        corpus.name,
        corpus.root,
        corpus.images,
    )
