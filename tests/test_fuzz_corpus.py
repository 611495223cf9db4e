"""Fuzzing the corpus readers (issue 15 item 4): malformed files give a CorpusError naming the file, and
the line or field, never another exception.

Examples per property (fixed, derandomized profile in ``fuzz_helpers``): Flickr8K token file 200, split
files 60, CSV 200, Karpathy JSON 150 structured + 100 byte-mutated, COCO JSON 150 structured + 100
byte-mutated, auto-detection 60: 1,020 in all.
"""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fuzz_helpers import NASTY_BYTES, mutated
from vsekit.data import load_corpus
from vsekit.data.corpus import load_coco, load_csv, load_flickr8k, load_karpathy
from vsekit.errors import CorpusError

IMAGES = ("a.jpg", "b.jpg", "c.jpg")


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    """A corpus folder whose caption files each example overwrites; three (empty) images on disk."""
    root = tmp_path_factory.mktemp("fuzz-corpus")
    (root / "Images").mkdir()
    for name in IMAGES:
        (root / "Images" / name).write_bytes(b"")
    (root / "Flickr8k_text").mkdir()
    return root


def universal_lines(path: Path) -> list[str]:
    """The file's lines as an editor numbers them (\\n, \\r\\n and \\r end a line; nothing else does)."""
    with open(path, encoding="utf-8-sig", errors="replace") as f:
        return f.read().split("\n")


def load_or_corpus_error(path: Path, load) -> str | None:
    """Run ``load``; return None on success, else the CorpusError message (checked to name ``path``)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            load()
    except CorpusError as exc:
        message = str(exc)
        assert "\n" not in message, message
        return message
    return None


def assert_names_file(message: str | None, *paths: Path) -> None:
    if message is not None:
        assert any(str(p) in message for p in paths), message


def assert_line_is_right(message: str | None, path: Path) -> None:
    """``path:N:`` in the message names a line that exists, and a quoted excerpt is that line's."""
    if message is None:
        return
    m = re.match(re.escape(str(path)) + r":(\d+): ", message)
    if m is None:
        return
    lines = universal_lines(path)
    n = int(m.group(1))
    assert 1 <= n <= len(lines), (n, len(lines), message)
    if ", found '" in message or ', found "' in message:
        assert repr(lines[n - 1][:80]) in message, (lines[n - 1][:80], message)


# -- Flickr8K token file and split files -----------------------------------------------------------

TOKEN_LINES = st.sampled_from(
    [
        "a.jpg#0\tA dog runs on the grass .",
        "a.jpg#1\tA brown dog .",
        "a.jpg#1\tA duplicate of the line above .",
        "b.jpg#0\tA cat sleeps .",
        "c.jpg#4\tTwo people , one bike .",
        "missing.jpg#0\tAn image not on disk .",
        "b.jpg#x\tnot a number",
        "b.jpg\tno hash",
        "b.jpg#0 no tab",
        "b.jpg#0\t   ",
        "#0\tno image",
        "",
        "   ",
    ]
)


@st.composite
def token_files(draw: st.DrawFn) -> bytes:
    lines = draw(st.lists(TOKEN_LINES | st.text(max_size=30), min_size=0, max_size=8))
    return draw(mutated("\n".join(lines).encode("utf-8", "surrogatepass")))


@settings(max_examples=200)
@given(data=token_files())
def test_flickr8k_token_file_fails_only_with_a_corpus_error_naming_the_line(root, data):
    token = root / "Flickr8k_text" / "Flickr8k.token.txt"
    token.write_bytes(data)
    message = load_or_corpus_error(token, lambda: load_flickr8k(root))
    assert_names_file(message, token, root)
    assert_line_is_right(message, token)


@settings(max_examples=60)
@given(
    data=st.lists(st.sampled_from([*IMAGES, "missing.jpg", ""]), max_size=5).flatmap(
        lambda ids: mutated("\n".join(ids).encode())
    )
)
def test_flickr8k_split_files_fail_only_with_a_corpus_error_naming_the_file(root, data):
    token = root / "Flickr8k_text" / "Flickr8k.token.txt"
    token.write_text("a.jpg#0\tA dog .\nb.jpg#0\tA cat .\n")
    split_file = root / "Flickr8k_text" / "Flickr_8k.trainImages.txt"
    split_file.write_bytes(data)
    try:
        message = load_or_corpus_error(split_file, lambda: load_flickr8k(root))
        assert_names_file(message, split_file, root)
        assert_line_is_right(message, split_file)
    finally:
        split_file.unlink()


def test_a_caption_holding_a_file_separator_byte_keeps_the_editors_line_numbers(root):
    """Regression (found by the fuzzer): ``str.splitlines`` also splits on \\x1c, \\x0c, U+2028..., so
    a caption holding one of them shifted every later line number and split the caption in two."""
    token = root / "Flickr8k_text" / "Flickr8k.token.txt"
    token.write_text("a.jpg#0\tA dog \x1c runs .\na.jpg#1\tA dog\u2028jumps .\nb.jpg#0 no tab\n")
    with pytest.raises(CorpusError, match=re.escape(f"{token}:3: expected")):
        load_flickr8k(root)
    token.write_text("a.jpg#0\tA dog \x1c runs .\nb.jpg#0\tA cat .\n")
    corpus = load_flickr8k(root)
    assert [c.text for c in corpus.captions] == ["A dog \x1c runs .", "A cat ."]
    assert corpus.captions[1].source == f"{token}:2"


# -- CSV -----------------------------------------------------------------------------------------

CSV_ROWS = st.sampled_from(
    [
        "a.jpg,A dog runs .,train",
        'b.jpg,"A cat, asleep .",dev',
        "a.jpg,Again the dog .,dev",
        "c.jpg,,train",
        ",no image,train",
        "missing.jpg,not on disk,train",
        "c.jpg,too,many,fields",
        'c.jpg,"unclosed quote,train',
        "c.jpg",
        "",
    ]
)


@settings(max_examples=200)
@given(
    header=st.sampled_from(["image,caption,split", "image,caption", "Image , Caption", "img,text", ""]),
    rows=st.lists(CSV_ROWS | st.text(max_size=30), max_size=6),
    mutate=st.data(),
)
def test_csv_fails_only_with_a_corpus_error_naming_the_file(root, header, rows, mutate):
    path = root / "captions.csv"
    path.write_bytes(mutate.draw(mutated("\n".join([header, *rows]).encode("utf-8", "surrogatepass"))))
    message = load_or_corpus_error(path, lambda: load_csv(path))
    assert_names_file(message, path, root / "Images")
    if message is not None and re.match(re.escape(str(path)) + r":(\d+): ", message):
        n = int(re.match(re.escape(str(path)) + r":(\d+): ", message).group(1))
        assert 1 <= n <= len(re.split(rb"\r\n|\r|\n", path.read_bytes())), message


def test_csv_that_is_not_utf8_names_the_file_and_byte(root):
    """Regression (found by the fuzzer): a bad byte after the header raised UnicodeDecodeError."""
    path = root / "captions.csv"
    path.write_bytes(b"image,caption,split\na.jpg,caf\xe9 au lait,train\n")
    with pytest.raises(CorpusError, match=re.escape(f"{path}: not UTF-8 text")):
        load_csv(path)


# -- JSON (Karpathy and COCO) ---------------------------------------------------------------------

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


def odd(*values):
    """One of ``values`` or any JSON value (a wrong type)."""
    return st.sampled_from(values) | JSON_VALUES


SENTENCE = (
    st.fixed_dictionaries(
        {}, optional={"raw": odd("A dog .", "", "  "), "tokens": odd(["a", "dog"], [1, None])}
    )
    | JSON_VALUES
)
KARPATHY_IMAGE = (
    st.fixed_dictionaries(
        {},
        optional={
            "filename": odd(*IMAGES, "missing.jpg", "", "a\x00.jpg", "../a.jpg"),
            "filepath": odd("", "Images", "/", "a\x00b", "..", "nope", "a.jpg"),
            "split": odd("train", "val", "test", ""),
            "sentences": st.lists(SENTENCE, max_size=3) | JSON_VALUES,
        },
    )
    | JSON_VALUES
)
KARPATHY = (
    st.fixed_dictionaries(
        {}, optional={"images": st.lists(KARPATHY_IMAGE, max_size=4) | JSON_VALUES, "dataset": JSON_VALUES}
    )
    | JSON_VALUES
)

COCO_IMAGE = (
    st.fixed_dictionaries(
        {},
        optional={
            "id": odd(1, 2, 1.0, "1", [1], {"a": 1}),
            "file_name": odd(*IMAGES, "missing.jpg", "", "a\x00"),
        },
    )
    | JSON_VALUES
)
COCO_ANNOTATION = (
    st.fixed_dictionaries(
        {}, optional={"image_id": odd(1, 2, 3, [1], {"b": 2}, None), "caption": odd("A dog .", "", 7)}
    )
    | JSON_VALUES
)
COCO = (
    st.fixed_dictionaries(
        {},
        optional={
            "images": st.lists(COCO_IMAGE, max_size=4) | JSON_VALUES,
            "annotations": st.lists(COCO_ANNOTATION, max_size=4) | JSON_VALUES,
        },
    )
    | JSON_VALUES
)

VALID_KARPATHY = json.dumps(
    {"images": [{"filename": "a.jpg", "split": "train", "sentences": [{"raw": "A dog ."}]}]}, indent=1
).encode()
VALID_COCO = json.dumps(
    {"images": [{"id": 1, "file_name": "a.jpg"}], "annotations": [{"image_id": 1, "caption": "A dog ."}]},
    indent=1,
).encode()


def check_json_reader(path: Path, data: bytes, load) -> None:
    path.write_bytes(data)
    message = load_or_corpus_error(path, load)
    assert_names_file(message, path)
    assert_line_is_right(message, path)


@settings(max_examples=150)
@given(value=KARPATHY)
def test_karpathy_json_structures_fail_only_with_a_corpus_error_naming_the_field(root, value):
    path = root / "dataset_fuzz.json"
    check_json_reader(path, json.dumps(value).encode(), lambda: load_karpathy(path))


@settings(max_examples=100)
@given(data=mutated(VALID_KARPATHY) | st.sampled_from([b"[" * 100_000, b"{}" + NASTY_BYTES[1], b""]))
def test_karpathy_json_bytes_fail_only_with_a_corpus_error_naming_the_line(root, data):
    path = root / "dataset_fuzz.json"
    check_json_reader(path, data, lambda: load_karpathy(path))


@settings(max_examples=150)
@given(value=COCO)
def test_coco_json_structures_fail_only_with_a_corpus_error_naming_the_field(root, value):
    path = root / "captions_val2014.json"
    check_json_reader(path, json.dumps(value).encode(), lambda: load_coco(path, root / "Images"))


@settings(max_examples=100)
@given(data=mutated(VALID_COCO) | st.sampled_from([b"[" * 100_000, b"\xef\xbb\xbf" + VALID_COCO]))
def test_coco_json_bytes_fail_only_with_a_corpus_error_naming_the_line(root, data):
    path = root / "captions_val2014.json"
    check_json_reader(path, data, lambda: load_coco(path, root / "Images"))


@settings(max_examples=60)
@given(
    name=st.sampled_from(["x.json", "x.csv", "x.txt", "x.tsv", "x.dat"]),
    data=st.sampled_from(
        [VALID_KARPATHY, VALID_COCO, b"image,caption\na.jpg,A dog .\n", b"a.jpg#0\tA dog ."]
    ).flatmap(mutated),
)
def test_auto_detection_fails_only_with_a_corpus_error_naming_the_file(root, name, data):
    path = root / name
    try:
        check_json_reader(path, data, lambda: load_corpus(path))
    finally:
        path.unlink()


def test_unhashable_coco_ids_name_the_field(root):
    """Regression (seen while writing the COCO property): an ``id`` or ``image_id`` that is a list raised
    TypeError (unhashable)."""
    path = root / "captions_val2014.json"
    path.write_text(json.dumps({"images": [{"id": [1], "file_name": "a.jpg"}], "annotations": []}))
    with pytest.raises(CorpusError, match=re.escape(f"{path}:images[0]: 'id' must be")):
        load_coco(path, root / "Images")
    images = [{"id": 1, "file_name": "a.jpg"}]
    path.write_text(json.dumps({"images": images, "annotations": [{"image_id": {"a": 1}, "caption": "x"}]}))
    with pytest.raises(CorpusError, match=re.escape(f"{path}:annotations[0]: 'image_id' must be")):
        load_coco(path, root / "Images")


def test_deeply_nested_json_is_a_corpus_error(root):
    """Regression (found by the fuzzer): 100,000 nested brackets raised RecursionError."""
    path = root / "dataset_fuzz.json"
    path.write_bytes(b"[" * 100_000)
    with pytest.raises(CorpusError, match=re.escape(f"{path}: invalid JSON")):
        load_karpathy(path)


def test_a_karpathy_filepath_holding_nul_names_the_field(root):
    """Regression (seen while writing the Karpathy property): a NUL in ``filepath`` raised ValueError."""
    path = root / "dataset_fuzz.json"
    path.write_text(json.dumps({"images": [{"filename": "a.jpg", "filepath": "a\x00b", "split": "train"}]}))
    with pytest.raises(CorpusError, match=re.escape(f"{path}:images[0]")):
        load_karpathy(path)
