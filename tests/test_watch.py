"""`vsekit index update --watch` (issue 22 item 2): a watcher keeps an index current while photos are
copied in, replaced and deleted, and a server open on the same index answers from the new photos within
seconds; a file still being written waits (never recorded as unreadable); a stop event, Ctrl-C or a kill
inside a round leaves the index as it was, and a restarted watcher continues."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

import vsekit
from kill_helpers import calls_during, job_env, run_self_signalled
from serve_helpers import running_server
from store_helpers import index_content
from vsekit.errors import VsekitError
from vsekit.resources import sample_data_path
from vsekit.retrieval.index import Index
from vsekit.retrieval.watch import Watcher, watch
from vsekit.serve.app import ServeSettings, create_app

SAMPLE = sorted((sample_data_path() / "Images").glob("*.jpg"))
QUERY = "a dog runs through the grass"
READ = ("vsekit.retrieval.build", "read_photo_dated")  # one call per photo an update reads
SCAN = ("vsekit.retrieval.watch", "scan_photos")  # a watcher's full look at the folder


def folder_of(tmp: Path, photos: list[Path]) -> Path:
    folder = tmp / "photos"
    folder.mkdir()
    for photo in photos:
        shutil.copy2(photo, folder / photo.name)
    return folder


@pytest.fixture(scope="module")
def model():
    from vsekit.embedding.pipeline import VSEModel

    return VSEModel.load("vse")


@contextlib.contextmanager
def watching(index: Index, **options):
    """A watcher thread over ``index`` until the block ends; yields the rounds it reported."""
    stop, rounds = threading.Event(), []
    thread = threading.Thread(
        target=watch, args=(index,), kwargs=dict(stop=stop, on_round=rounds.append, **options)
    )
    thread.start()
    try:
        yield rounds
    finally:
        stop.set()
        thread.join(timeout=60)
        assert not thread.is_alive(), "the watcher did not stop"


def scores(base: str) -> dict[str, float]:
    answer = httpx.get(f"{base}/api/search", params={"q": QUERY, "k": 100}, timeout=30)
    assert answer.status_code == 200, answer.text
    return {hit["path"]: hit["score"] for hit in answer.json()["results"]}


def eventually(check, seconds: float = 20.0):
    """``check()``'s first truthy value, polled until ``seconds`` pass (then the last value, falsy)."""
    deadline = time.monotonic() + seconds
    while True:
        value = check()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.1)


def test_a_server_finds_photos_copied_in_replaced_and_deleted_under_a_watcher(tmp_path, model):
    a, b, c = SAMPLE[:3]
    photos = folder_of(tmp_path, [a, b, c])
    out = tmp_path / "index"
    Index.build(photos, out, model, progress=False)
    app = create_app(vsekit.Index.open(out, model=model), ServeSettings())  # the server's own index
    with running_server(app) as base, watching(Index.open(out, model=model), every=0.2, settle=0.3) as rounds:
        before = scores(base)
        assert set(before) == {a.name, b.name, c.name}

        shutil.copy(a, photos / "new.jpg")  # a copy of a: the same bytes score the same
        found = eventually(lambda: "new.jpg" in (s := scores(base)) and s)
        assert found, "the copied photo was not found within 20 s"
        assert found["new.jpg"] == found[a.name]
        assert httpx.get(f"{base}/api/info").json()["count"] == 4

        shutil.copy(b, photos / "new.jpg")  # replaced by other bytes (another size, a new mtime)
        found = eventually(lambda: (s := scores(base)).get("new.jpg") == s[b.name] and s)
        assert found, "the replaced photo still scores as its old bytes"
        assert found["new.jpg"] != before[a.name]

        (photos / "new.jpg").unlink()
        found = eventually(lambda: "new.jpg" not in (s := scores(base)) and s)
        assert found == before
        assert httpx.get(f"{base}/api/info").json()["count"] == 3
    assert [(len(r.added), len(r.changed), len(r.removed)) for r in rounds] == [
        (1, 0, 0),
        (0, 1, 0),
        (0, 0, 1),
    ]
    assert all(not r.unreadable for r in rounds)


def write_in_halves(path: Path, data: bytes, pause: float) -> None:
    with open(path, "wb") as f:
        f.write(data[: len(data) // 2])
        f.flush()
        time.sleep(pause)
        f.write(data[len(data) // 2 :])


def test_a_photo_written_in_two_halves_with_a_pause_is_indexed_whole(tmp_path, model):
    photos = folder_of(tmp_path, SAMPLE[:2])
    out = tmp_path / "index"
    index = Index.build(photos, out, model, progress=False)
    data = SAMPLE[2].read_bytes()
    # the pause is longer than a round (a watcher looks at the half file several times) but shorter
    # than the settle time
    with watching(index, every=0.1, settle=1.5) as rounds:
        write_in_halves(photos / "slow.jpg", data, pause=0.8)
        assert eventually(lambda: rounds), "the photo was never indexed"
    assert [r.added for r in rounds] == [["slow.jpg"]] and not rounds[0].unreadable
    assert Index.open(out).info()["failed"] == {}
    assert sorted(Index.open(out).paths) == sorted([p.name for p in SAMPLE[:2]] + ["slow.jpg"])


def test_without_settling_a_half_written_photo_would_be_unreadable(tmp_path, model):
    """What the debounce prevents (so the test above can fail): the same half file, read at once."""
    photos = folder_of(tmp_path, SAMPLE[:2])
    index = Index.build(photos, tmp_path / "index", model, progress=False)
    data = SAMPLE[2].read_bytes()
    (photos / "slow.jpg").write_bytes(data[: len(data) // 2])
    done = Watcher(index, settle=0).round()
    assert done is not None and list(done.unreadable) == ["slow.jpg"]


def test_a_file_waits_until_its_size_and_mtime_have_settled(tmp_path, model):
    """The rule on a fake clock: read only once unchanged for ``settle`` seconds as the watcher saw it."""
    photos = folder_of(tmp_path, SAMPLE[:2])
    index = Index.build(photos, tmp_path / "index", model, progress=False)
    now = [0.0]
    watcher = Watcher(index, settle=5.0, clock=lambda: now[0])
    data = SAMPLE[2].read_bytes()
    (photos / "slow.jpg").write_bytes(data[: len(data) // 2])
    assert watcher.round() is None and watcher.waiting == 1
    now[0] = 4.0
    (photos / "slow.jpg").write_bytes(data)  # it changed: the five seconds start again
    assert watcher.round() is None and watcher.waiting == 1
    now[0] = 8.9
    assert watcher.round() is None and watcher.waiting == 1
    now[0] = 9.0
    done = watcher.round()
    assert done is not None and done.added == ["slow.jpg"] and not done.unreadable and watcher.waiting == 0
    assert watcher.round() is None  # nothing changed since: no update, nothing read, not even scanned
    assert calls_during(watcher.round, READ) == 0
    assert calls_during(watcher.round, SCAN) == 0
    mtime = (photos / "slow.jpg").stat().st_mtime_ns
    os.utime(photos / "slow.jpg", ns=(mtime, mtime + 10**9))  # touched: the same size and bytes
    assert calls_during(watcher.round, SCAN) == 1 and watcher.waiting == 1
    now[0] = 14.0
    done = watcher.round()
    assert done is not None and not done.changed_anything  # read again, found the same bytes


def test_a_missing_or_empty_folder_does_not_empty_the_index(tmp_path, model, caplog):
    photos = folder_of(tmp_path, SAMPLE[:2])
    index = Index.build(photos, tmp_path / "index", model, progress=False)
    watcher = Watcher(index, settle=0)
    aside = photos.rename(tmp_path / "aside")
    photos.mkdir()  # a mount point without its drive
    with caplog.at_level(logging.WARNING, logger="vsekit.retrieval.watch"):
        assert watcher.round() is None and watcher.round() is None
    assert len(index) == 2 and len(Index.open(tmp_path / "index")) == 2
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "no photos in the folder" in said[0], said  # said once, not per round
    photos.rmdir()
    with pytest.raises(VsekitError, match="does not exist"):
        watcher.round()  # watch() logs it once and tries again a round later
    aside.rename(photos)
    assert watcher.round() is None and len(Index.open(tmp_path / "index")) == 2


def test_the_stop_event_ends_the_loop_between_rounds(tmp_path, model):
    photos = folder_of(tmp_path, SAMPLE[:1])
    index = Index.build(photos, tmp_path / "index", model, progress=False)
    stop = threading.Event()
    thread = threading.Thread(target=watch, args=(index,), kwargs=dict(every=60, stop=stop))
    thread.start()
    time.sleep(0.3)
    started = time.monotonic()
    stop.set()
    thread.join(timeout=10)
    assert not thread.is_alive() and time.monotonic() - started < 2  # not after the 60 s wait
    stop.set()
    watch(index, every=60, stop=stop)  # already set: returns at once


def assert_same_photos(got: list[tuple], want: list[tuple]) -> None:
    """The same records (id, size, mtime, sha256, folder, date, caption), and vectors equal up to float
    noise (the interrupted round's chunk was embedded by another process, with one thread)."""
    assert [r[:-1] for r in got] == [r[:-1] for r in want]
    for g, w in zip(got, want, strict=True):
        assert np.allclose(np.frombuffer(g[-1], np.float32), np.frombuffer(w[-1], np.float32), atol=1e-5)


CLI_WATCH = """
import sys
from vsekit.cli import app
app(["index", "update", sys.argv[1], "--watch", "--every", "0.2", "--settle", "0"])
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "kill-9"])
def test_a_watcher_stopped_inside_a_round_continues_when_restarted(tmp_path, model, sig):
    """Ctrl-C inside a round: "stopped", exit 0, the index at its last generation; kill -9 there too.
    Restarted, the watcher finishes the round, reading only the photos the interrupted round had not
    committed, and ends with the records of an uninterrupted update."""
    photos = folder_of(tmp_path, SAMPLE[:2])
    out, clean = tmp_path / "index", tmp_path / "clean"
    Index.build(photos, out, model, progress=False)
    shutil.copytree(out, clean)
    for photo in SAMPLE[2:42]:  # 40 photos: a chunk of 32 committed at the 33rd read, then 8
        shutil.copy2(photo, photos / photo.name)
    rc, stderr = run_self_signalled(CLI_WATCH, [str(out)], step=36, sig=sig, where=READ)
    if sig == signal.SIGINT:
        assert rc == 0, stderr
        assert "stopped" in stderr.splitlines()[-1], stderr
    else:
        assert rc == -signal.SIGKILL, stderr
    assert len(Index.open(out)) == 2  # the generation before the round
    resumed = Watcher(Index.open(out, model=model), settle=0)
    assert calls_during(resumed.round, READ) == 8  # the first chunk of 32 was kept
    Watcher(Index.open(clean, model=model), settle=0).round()
    assert_same_photos(index_content(out)["photos"], index_content(clean)["photos"])
    assert len(Index.open(out)) == 42


CLI_WATCH_CAPTIONS = """
import signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal, even as a background job
from vsekit.cli import app
app(["index", "update", sys.argv[1], "--watch", "--every", "0.2", "--settle", "0.2"])
"""


def test_the_command_prints_a_line_per_change_captions_new_photos_and_stops_on_ctrl_c(tmp_path, model):
    """What a user sees: a start line, one line for the round that added a photo (its caption stored,
    since the index stores captions), nothing while nothing changes; Ctrl-C: "stopped", exit 0."""
    photos = folder_of(tmp_path, SAMPLE[:2])
    out = tmp_path / "index"
    Index.build(photos, out, model, progress=False).set_captions({p.name: "a photo" for p in SAMPLE[:2]})
    env = job_env() | {"PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-c", CLI_WATCH_CAPTIONS, str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        lines = [proc.stdout.readline()]
        assert lines[0].startswith("watching "), lines
        time.sleep(1.0)  # idle rounds print nothing
        shutil.copy2(SAMPLE[2], photos / "new.jpg")
        while "captioned" not in lines[-1]:
            lines.append(proc.stdout.readline())
            assert lines[-1], f"the watcher ended: {lines} {proc.stderr.read()}"
        proc.send_signal(signal.SIGINT)
        rest, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr
    assert stderr.strip().splitlines()[-1] == "stopped", stderr
    assert len(lines) == 3 and not rest.strip(), (lines, rest)
    assert lines[1].split(" ", 1)[1].strip() == f"{out}: 3 photos (1 added, 0 changed, 0 removed)"
    assert lines[2].strip() == f"{out}: 1 photos captioned"
    caption = vsekit.Index.open(out).caption("new.jpg")
    assert caption and caption != "a photo"
