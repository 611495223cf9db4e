"""A build walks the photo folder once and opens each new or changed photo once: the bytes read once give
its sha256, its decoded image and its EXIF (orientation and date taken). What it stores is what the two
reads gave before: the sha256 of the file's bytes, the EXIF DateTimeOriginal as ISO text."""

from __future__ import annotations

import builtins
import hashlib
import io
import os
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
from PIL import Image
from typer.testing import CliRunner

import vsekit
from search_helpers import SAMPLE_IMAGES, make_photo_folder
from vsekit.retrieval.build import Builder, date_taken
from vsekit.retrieval.index import Index
from vsekit.retrieval.photos import PhotoEntry
from vsekit.vision.preprocess import decode_photo

WHEN = "2019:06:01 10:00:00"


@pytest.fixture(scope="module")
def model():
    return vsekit.load_model()


def _dated(src: Path, dst: Path, when: str, orientation: int | None = None) -> None:
    """``src`` saved as ``dst`` with EXIF DateTimeOriginal ``when`` (and an Orientation tag)."""
    exif = Image.Exif()
    exif.get_ifd(0x8769)[36867] = when
    if orientation is not None:
        exif[0x0112] = orientation
    Image.open(src).convert("RGB").save(dst, quality=92, exif=exif)


def _folder(root: Path) -> Path:
    photos = make_photo_folder(root / "photos", n=5)
    _dated(SAMPLE_IMAGES[6], photos / "dated.jpg", WHEN)
    _dated(SAMPLE_IMAGES[7], photos / "trip" / "sideways.jpg", "2021:12:24 18:30:00", orientation=6)
    return photos


def _photo_files(photos: Path) -> set[str]:
    return {os.path.realpath(p) for p in photos.rglob("*") if p.is_file() and p.suffix.lower() != ".txt"}


@pytest.fixture
def opens(monkeypatch):
    """Every open of a file by its path (os.open, open, io.open: Pillow's Image.open of a path goes
    through builtins.open), counted by real path."""
    counted: Counter[str] = Counter()

    def counting(real):
        def wrapper(file, *args, **kwargs):
            if isinstance(file, (str, bytes, os.PathLike)):
                counted[os.path.realpath(os.fsdecode(file))] += 1
            return real(file, *args, **kwargs)

        return wrapper

    monkeypatch.setattr(os, "open", counting(os.open))
    monkeypatch.setattr(builtins, "open", counting(builtins.open))
    monkeypatch.setattr(io, "open", counting(io.open))
    return counted


@pytest.fixture
def walks(monkeypatch):
    """Every listing of a folder (os.scandir), counted by real path."""
    counted: Counter[str] = Counter()
    real = os.scandir

    def scandir(path=".", *args, **kwargs):
        counted[os.path.realpath(os.fsdecode(path))] += 1
        return real(path, *args, **kwargs)

    monkeypatch.setattr(os, "scandir", scandir)
    return counted


def test_a_build_opens_each_photo_once(tmp_path, model, opens):
    photos = _folder(tmp_path)
    opens.clear()  # (the folder's files were written)
    index = Index.build(photos, tmp_path / "index", model, chunk_size=3, progress=False)
    files = _photo_files(photos)
    assert index.report is not None and list(index.report.failed) == ["broken.jpg"]
    assert len(index) == len(files) - 1
    assert {path: opens[path] for path in files} == {path: 1 for path in files}


def test_an_update_opens_only_the_new_and_changed_photos_once(tmp_path, model, opens):
    photos = _folder(tmp_path)
    index = Index.build(photos, tmp_path / "index", model, progress=False)
    _dated(SAMPLE_IMAGES[8], photos / "new.jpg", "2022:01:02 03:04:05")
    _dated(SAMPLE_IMAGES[9], photos / "dated.jpg", "2018:01:01 00:00:00")  # changed
    opens.clear()
    report = index.update(progress=False)
    assert report.added == ["new.jpg"] and report.changed == ["dated.jpg"]
    read = {path: n for path, n in opens.items() if path in _photo_files(photos)}
    assert read == {os.path.realpath(photos / "new.jpg"): 1, os.path.realpath(photos / "dated.jpg"): 1}
    assert index.records()["dated.jpg"]["taken"] == "2018-01-01T00:00:00"
    assert index.records()["new.jpg"]["taken"] == "2022-01-02T03:04:05"


def test_the_cli_build_walks_the_folder_once(tmp_path, model, walks, monkeypatch):
    from vsekit.cli import app

    monkeypatch.setattr(Index, "prepare_text_graph", lambda self: False)  # not what is counted here
    photos = _folder(tmp_path)
    walks.clear()
    result = CliRunner().invoke(app, ["index", "build", str(photos), "--out", str(tmp_path / "index")])
    assert result.exit_code == 0, result.output
    assert walks[os.path.realpath(photos)] == 1
    assert walks[os.path.realpath(photos / "trip")] == 1
    assert len(Index.open(tmp_path / "index")) == len(_photo_files(photos)) - 1


def test_stored_sha256_and_date_taken_are_those_of_the_file(tmp_path, model):
    photos = _folder(tmp_path)
    index = Index.build(photos, tmp_path / "index", model, progress=False)
    records = index.records()
    for photo_id, record in records.items():
        path = photos / photo_id
        assert record["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest(), photo_id
        assert record["taken"] == date_taken(path), photo_id  # the separate read's answer
    assert records["dated.jpg"]["taken"] == "2019-06-01T10:00:00"
    assert records["trip/sideways.jpg"]["taken"] == "2021-12-24T18:30:00"  # turned upright, date kept
    assert records[SAMPLE_IMAGES[0].name]["taken"] is None  # no EXIF date


def test_a_resumed_build_takes_the_dates_from_its_finished_chunks(tmp_path, model, opens, monkeypatch):
    """Killed after its chunks were written, before the commit: the re-run commits them without opening a
    photo again, dates included."""
    photos = _folder(tmp_path)
    out = tmp_path / "index"

    def killed(self, *args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(Builder, "_commit", killed)
        with pytest.raises(KeyboardInterrupt):
            Index.build(photos, out, model, chunk_size=3, progress=False)
    opens.clear()
    index = Index.build(photos, out, model, chunk_size=3, progress=False)
    assert not any(path in _photo_files(photos) for path in opens)
    records = index.records()
    assert records["dated.jpg"]["taken"] == "2019-06-01T10:00:00"
    assert records["trip/sideways.jpg"]["taken"] == "2021-12-24T18:30:00"
    assert all(records[i]["sha256"] == hashlib.sha256((photos / i).read_bytes()).hexdigest() for i in records)


def test_a_finished_chunk_of_an_older_vsekit_gets_its_dates_from_the_files(tmp_path):
    """Chunks recorded before the date was (``[id, size, mtime_ns, sha256]``): read from the file."""
    photos = _folder(tmp_path)
    builder = SimpleNamespace(photos_dir=photos)
    old = Builder._entry(builder, ["dated.jpg", 1, 2, "ab"])  # type: ignore[arg-type]
    new = Builder._entry(builder, ["dated.jpg", 1, 2, "ab", None])  # type: ignore[arg-type]
    assert old == PhotoEntry("dated.jpg", 1, 2, "ab", "2019-06-01T10:00:00")
    assert new == PhotoEntry("dated.jpg", 1, 2, "ab", None)


@pytest.mark.parametrize("kind", ["JPEG", "PNG", "WEBP", "TIFF", "HEIF"])
def test_the_date_from_the_one_decode_is_the_date_from_opening_the_file_again(tmp_path, kind):
    """Whatever the format (HEIC through pillow-heif; a TIFF's EXIF IFD is read from the buffer while it is
    open), the date taken read with the pixels is the one a second opening of the file read before; a
    sideways photo is turned upright all the same."""
    if kind == "HEIF":
        pillow_heif = pytest.importorskip("pillow_heif")
        pillow_heif.register_heif_opener()
    exif = Image.Exif()
    exif.get_ifd(0x8769)[36867] = WHEN
    exif[0x0112] = 6
    path = tmp_path / f"photo.{kind.lower()}"
    Image.new("RGB", (40, 20), "red").save(path, format=kind, exif=exif.tobytes())
    image, taken = decode_photo(path.read_bytes())
    assert image.size == (20, 40) and taken == date_taken(path)
    assert taken == "2019-06-01T10:00:00"
