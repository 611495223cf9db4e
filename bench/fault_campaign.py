"""Damage campaign over the photo index store (issue 21 item 1, the long version of
tests/test_store_damage.py): seeded damage to one file of a real small index, then open + search (and,
for a share of trials, a write over the damage), each trial in a forked child with a time limit.

Indexes ("kits"), each built twice (the second, with other vectors or photos and the same history, is
the source of the ``swap`` fault: a file of the same name from another index):

* ``synthetic-exact`` / ``synthetic-hnsw``: 16-d float16 vectors through the store's own API
  (``new_store`` / ``add_vectors``): 40 photos, then 12 more with 5 removed (2 segments, tombstones,
  and for HNSW an ANN file per segment). ``+wal``: the same copied while a reader held the first
  generation, so ``store.sqlite-wal`` (with the second commit) and ``-shm`` are part of the index.
* ``photos`` / ``photos-hnsw``: 12 bundled sample photos indexed by ``Index.build`` with the shipped
  model, by its name ``vse`` (two generations: 9 photos, then 3 more), searched exactly or through an
  HNSW structure per segment.

Faults: ``truncate`` (to a random length), ``flip`` (one bit anywhere), ``flip-data`` (one bit in the
float data of a segment, or in a random page of ``store.sqlite``), ``flip-keep-mtime`` (the index was
opened and searched in this process first, as a server would, then one bit is flipped and the file's
mtime put back with ``os.utime``), ``delete``, ``swap``, ``flip-record`` (one bit of one value of one
record of ``store.sqlite``, flipped through SQLite: a record SQLite reads without complaint, its
checksum, if it has one, untouched; issue 36 item 10 found ``{"efSearch": 32}`` read as 12 this way),
``plant`` (synthetic indexes: a user's file at the name the next segment, its temp file or its ANN
file would get; the trial is ``overwrote`` if the file is not intact after the action), ``flip-late``
(issue 36 item 9: the index is opened first, which checks only sizes, headers and the blocks that hold
them, then one bit is flipped in the last block of a segment, which the open index reads later). The
campaign gives new files 256-byte checksum blocks (``--block-bytes``), so the kits' small segments have
several blocks, as a 2 GB one has 32,768 of 64 KiB. Actions:
``search`` (open, 3 vector queries, a folder-filtered query, the count, the model's recorded name),
``update`` (``add_vectors`` of 2 photos and 1 removal, then ``search``; compared with the same update
on the undamaged index), ``build`` (``Index.build`` over the damaged index with the loaded model, then
``search``), ``cli-update`` (``vsekit index update INDEX`` through typer's runner, then ``search``),
``advice`` (``search``; when it fails with a clear error, the command the error advises is run as
printed through the CLI, PHOTOS being the photo folder, then ``search`` again), ``check`` (``vsekit index
check INDEX`` through the CLI: exit code 1 with one clear line per damaged file is ``clear_error``; when it
finds nothing, ``search``, which must then give the undamaged answers: else ``check_missed``).

Outcomes: ``identical`` (the undamaged answers), ``clear_error`` (one ``VsekitError`` line naming the
damaged index and saying ``vsekit index build`` rebuilds it), ``repaired`` (a clear error whose advised
command, run as printed, brought the undamaged answers back), ``unclear_error`` (a ``VsekitError``
without both), ``advice_failed`` (the advised command failed, or left an error or other answers),
``traceback`` (any other exception, or the child died), ``wrong`` (other answers, no error),
``overwrote`` (a planted file was changed or deleted), ``check_missed`` (``index check`` found nothing,
and a search then failed or answered otherwise), ``hang`` (over the time limit). Nothing is
asserted: the counts go to bench/results/fault_campaign.json.

    nice -n 10 python bench/fault_campaign.py [--trials 420] [--seed 21] [--photos-trials 60]
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")  # forked children: no thread pools inherited mid-flight

import hashlib  # noqa: E402
import json  # noqa: E402
import multiprocessing as mp  # noqa: E402
import random  # noqa: E402
import re  # noqa: E402
import shlex  # noqa: E402
import shutil  # noqa: E402
import sqlite3  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from collections import Counter, defaultdict  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "bench")]

import numpy as np  # noqa: E402

from _common import run_meta, write_result  # noqa: E402
from vsekit.errors import VsekitError  # noqa: E402
from vsekit.retrieval.build import add_vectors, new_store  # noqa: E402
from vsekit.retrieval.index import Index  # noqa: E402
from vsekit.retrieval.store import PhotoRecord, blocks  # noqa: E402

DIM = 16
TIME_LIMIT_S = 90.0
OUTCOMES = (
    "identical",
    "clear_error",
    "repaired",
    "unclear_error",
    "advice_failed",
    "traceback",
    "wrong",
    "overwrote",
    "check_missed",
    "hang",
)
FAULTS = (
    "truncate",
    "flip",
    "flip-data",
    "flip-keep-mtime",
    "delete",
    "swap",
    "flip-record",
    "plant",
    "flip-late",
)
FAULT_WEIGHTS = (1, 2, 2, 1, 1, 1, 2, 1, 2)
#: What a user put in the index folder (``plant``): it must survive every action byte for byte.
PLANTED = b"a user's own file, at the name the index's next file would get"


# ----------------------------------------------------------------------------- the indexes
def vector(seed: int, dim: int = DIM) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal(dim).astype(np.float32)
    return v / np.linalg.norm(v)


def record(photo_id: str, seed: int) -> PhotoRecord:
    return PhotoRecord(photo_id, seed, seed, hashlib.sha256(str(seed).encode()).hexdigest())


def synthetic(out: Path, salt: int, engine: str, wal: bool) -> Path:
    """40 photos (half in folder ``a``), then 12 more with 5 removed; with ``wal``, the directory is
    copied into ``out`` while a reader holds the first generation (the second commit stays in the WAL)."""
    work = out.with_name(out.name + ".work") if wal else out
    new_store(work, DIM, dtype="float16", engine=engine)
    names = [f"{'a/' if i % 2 else ''}p{i:02d}.jpg" for i in range(40)]
    add_vectors(
        work,
        [record(n, salt + i) for i, n in enumerate(names)],
        np.stack([vector(salt + i) for i in range(40)]),
    )
    reader = None
    if wal:
        reader = sqlite3.connect(work / "store.sqlite", isolation_level=None)
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM photos").fetchone()
    more = [record(f"q{i}.jpg", salt + 100 + i) for i in range(12)]
    add_vectors(
        work,
        more,
        np.stack([vector(salt + 100 + i) for i in range(12)]),
        removed=names[:5],
        auto_compact=False,
    )
    if reader is not None:
        shutil.copytree(work, out)
        reader.close()
        shutil.rmtree(work)
    return out


def photo_index(out: Path, photos: Path, sample: list[Path], engine: str) -> Path:
    """9 sample photos (3 in ``a/``) indexed, then 3 more added: two generations, two segments. The model
    is given by its shipped name, as the CLI gives it (the name the index records)."""
    photos.mkdir(parents=True, exist_ok=True)
    (photos / "a").mkdir(exist_ok=True)
    for i, src in enumerate(sample[:9]):
        shutil.copyfile(src, photos / ("a/" if i % 3 == 0 else "") / f"p{i:02d}.jpg")
    Index.build(photos, out, "vse", engine=engine, progress=False, chunk_size=16)._view.close()
    for i, src in enumerate(sample[9:12], start=9):
        shutil.copyfile(src, photos / f"p{i:02d}.jpg")
    Index.build(photos, out, "vse", progress=False, chunk_size=16)._view.close()
    return out


# ----------------------------------------------------------------------------- answers and actions
QUERY_SEEDS = (900, 901, 902)


def answers(out: Path, dim: int, index: Index | None = None) -> list:
    """What a user sees: 3 queries' top 10 (path, score), a folder-filtered top 10, the count, and the
    model's recorded name (the shipped confidence calibration is found by it). ``index``: an index
    already open on ``out`` (opened before the damage)."""
    index = index or Index.open(out)
    try:
        queries = np.stack([vector(s, dim) for s in QUERY_SEEDS])
        found: list = [
            [(h.path, round(h.score, 4)) for h in row] for row in index.search_vectors(queries, k=10)
        ]
        found.append(
            [(h.path, round(h.score, 4)) for h in index.search_vectors(queries[:1], k=10, folder="a")[0]]
        )
        found.append(len(index))
        found.append(index.info()["count"])
        found.append(index.info()["model"])
        return found
    finally:
        index._view.close()


def update(out: Path) -> None:
    add_vectors(
        out,
        [record("late1.jpg", 777), record("a/late2.jpg", 778)],
        np.stack([vector(777), vector(778)]),
        removed=["q3.jpg"],
    )


def cli(args: list[str]) -> None:
    """``vsekit ARGS`` as a user runs it (typer's runner, in this process); a failure is the
    ``VsekitError`` of its one ``error:`` line (of its whole output when there is not exactly one)."""
    from typer.testing import CliRunner

    from vsekit.cli import app

    result = CliRunner().invoke(app, [str(a) for a in args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    if result.exit_code != 0:
        errors = [line[len("error: ") :] for line in result.output.splitlines() if line.startswith("error: ")]
        raise VsekitError(errors[0] if len(errors) == 1 else result.output.strip()[-700:])


ADVICE = re.compile(r"`vsekit ([^`]+)`")


def advised(message: str, photos: Path) -> list[str] | None:
    """The command an error advises, as printed (PHOTOS: the photo folder), or None."""
    found = ADVICE.search(message)
    if found is None:
        return None
    return [str(photos) if arg == "PHOTOS" else arg for arg in shlex.split(found[1])]


# ----------------------------------------------------------------------------- damage
def data_offset(path: Path) -> int:
    """Where a .npy file's array data starts (after its header)."""
    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        read = (
            np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        )
        read(f)
        return f.tell()


def damage(path: Path, fault: str, rng: random.Random, other: Path) -> str:
    """Damage ``path``; returns what was done (offsets) for the examples."""
    if fault == "delete":
        path.unlink()
        return "deleted"
    if fault == "swap":
        shutil.copyfile(other, path)
        return f"replaced by the other index's {other.name}"
    data = bytearray(path.read_bytes())
    if not data:
        path.unlink()
        return "empty file deleted"
    if fault == "truncate":
        size = rng.randrange(len(data))
        path.write_bytes(bytes(data[:size]))
        return f"truncated to {size} of {len(data)} bytes"
    start = 0
    if fault == "flip-data" and path.suffix == ".npy":
        start = min(data_offset(path), len(data) - 1)
    if fault == "flip-late":  # the last checksum block, past the header's
        start = max(
            min(data_offset(path), len(data) - 1), (len(data) - 1) // blocks.BLOCK_BYTES * blocks.BLOCK_BYTES
        )
    st = os.stat(path)
    bit = rng.randrange(8 * start, 8 * len(data))
    data[bit // 8] ^= 1 << (bit % 8)
    with open(path, "r+b") as f:  # in place: same inode, same size
        f.seek(bit // 8)
        f.write(bytes([data[bit // 8]]))
    if fault == "flip-keep-mtime":
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    page = f", page {bit // 8 // 4096 + 1}" if path.name == "store.sqlite" else ""
    return f"bit {bit % 8} of byte {bit // 8} of {len(data)}{page}"


RECORD_COLUMNS = {
    "ann": ("segment", "engine", "file", "params"),
    "photos": ("id", "size", "mtime_ns", "sha256", "folder", "taken", "segment", "row"),
    "tombstones": ("segment", "row", "generation"),
    "segments": ("n", "rows", "file", "sha256"),
    "settings": ("value",),
    "files": ("name", "state", "sha256"),
}


def flip_value(value: Any, rng: random.Random) -> Any:
    """``value`` with one bit flipped (an integer's low 16 bits, an ASCII character's 7), or None."""
    if isinstance(value, int):
        return value ^ (1 << rng.randrange(16))
    if isinstance(value, bytes) and value:
        data = bytearray(value)
        bit = rng.randrange(8 * len(data))
        data[bit // 8] ^= 1 << (bit % 8)
        return bytes(data)
    if isinstance(value, str):
        ascii_at = [i for i, ch in enumerate(value) if ord(ch) < 128]
        if ascii_at:
            i = rng.choice(ascii_at)
            return value[:i] + chr(ord(value[i]) ^ (1 << rng.randrange(7))) + value[i + 1 :]
    return None  # NULL, or nothing to flip


def flip_record(db: Path, rng: random.Random) -> str:
    """One bit of one value of one record of the store's database, through SQLite (what a flipped bit
    in a record's payload leaves: SQLite reads the page without complaint; checksums are untouched)."""
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        tables = [t for t in RECORD_COLUMNS if conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]]
        for _ in range(50):
            table = rng.choice(tables)
            column = rng.choice(RECORD_COLUMNS[table])
            rowid = rng.choice([r for (r,) in conn.execute(f"SELECT rowid FROM {table} ORDER BY rowid")])
            value = conn.execute(f"SELECT {column} FROM {table} WHERE rowid = ?", (rowid,)).fetchone()[0]
            flipped = flip_value(value, rng)
            if flipped is None:
                continue
            try:
                conn.execute(f"UPDATE {table} SET {column} = ? WHERE rowid = ?", (flipped, rowid))
            except sqlite3.IntegrityError:  # a key flipped onto another record's: a flip SQLite would see
                continue
            return f"{table}.{column} of row {rowid}: {str(value)[:60]!r} -> {str(flipped)[:60]!r}"
    finally:
        conn.close()
    return "no record to flip"


def plant_targets(base: Path, engine: str) -> list[str]:
    """The names a user's file may sit at for ``plant``: those of the next segment, its temp file, and
    its ANN file (and that file's temp) when the index has one per segment (read from a copy: a
    connection to the kit itself would fold its write-ahead log in)."""
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(base, Path(tmp) / "copy")
        conn = sqlite3.connect(Path(tmp) / "copy" / "store.sqlite")
        n = json.loads(conn.execute("SELECT value FROM settings WHERE key = 'next_segment'").fetchone()[0])
        conn.close()
    names = [f"segments/{n}.npy", f"segments/.{n}.npy.tmp"]
    if engine == "hnsw":
        names += [f"segments/ann-hnsw-{n}.faiss", f"segments/.ann-hnsw-{n}.faiss.tmp"]
    return names


def kind_of(name: str) -> str:
    if name.endswith(".faiss"):
        return "ann .faiss"
    if name.endswith(".npy"):
        return "segment .npy"
    return name


# ----------------------------------------------------------------------------- one trial (forked child)
def trial(plan: dict[str, Any], kit: dict[str, Any], conn: Any) -> None:
    """Copy the kit's index, damage one file, act, classify; send (outcome, detail) to the parent."""
    try:
        conn.send(_trial(plan, kit))
    except BaseException:  # noqa: BLE001 - the campaign counts it, it must not die here
        conn.send(("traceback", traceback.format_exc()[-700:]))
    finally:
        conn.close()


def _trial(plan: dict[str, Any], kit: dict[str, Any]) -> tuple[str, str]:
    rng = random.Random(plan["seed"])
    out = Path(plan["dir"])
    shutil.copytree(kit["base"], out)
    name, fault, action = plan["file"], plan["fault"], plan["action"]
    if fault == "flip-keep-mtime":
        answers(out, kit["dim"])  # a process that already opened and searched this index
    held = Index.open(out) if fault == "flip-late" and action == "search" else None
    target = out / name
    if fault == "plant":
        target.write_bytes(PLANTED)
        done = f"a user's file at {name}"
    elif not target.exists():
        return "skipped", f"{name} not present"
    elif fault == "flip-record":
        done = flip_record(target, rng)
    else:
        done = damage(target, fault, rng, Path(kit["other"]) / name)
    try:
        outcome, detail = _act(out, kit, action, done, held)
    except Exception:  # noqa: BLE001 - counted as a traceback, with the damage that caused it
        outcome, detail = "traceback", f"{done}: {traceback.format_exc()[-600:]}"
    if fault == "plant" and not (target.is_file() and target.read_bytes() == PLANTED):
        return "overwrote", f"{done}: {'changed' if target.exists() else 'deleted'} ({outcome}: {detail})"
    return outcome, detail


def _act(
    out: Path, kit: dict[str, Any], action: str, done: str, held: Index | None = None
) -> tuple[str, str]:
    """Run ``action`` over the damaged index ``out`` (``held``: an index opened before the damage, which
    the search then uses); the outcome and what it showed."""
    expected = kit["reference"]
    if action == "check":
        return _check(out, kit, done)
    try:
        if action == "update":
            update(out)
            expected = kit["reference_update"]
        elif action == "build":
            Index.build(kit["photos"], out, kit["model"], progress=False, chunk_size=16)._view.close()
        elif action == "cli-update":
            cli(["index", "update", out])
        elif action == "advice":
            return _advice(out, kit, done)
        got = answers(out, kit["dim"], held)
    except VsekitError as exc:
        message = str(exc)
        return ("clear_error" if _clear(message, out) else "unclear_error"), f"{done}: {message}"
    if got == expected:
        return "identical", done
    return "wrong", f"{done}: {_diff(expected, got)}"


def _check(out: Path, kit: dict[str, Any], done: str) -> tuple[str, str]:
    """``vsekit index check``: damage found is one clear line per damaged file (and a count); none
    found, a search must give the undamaged answers."""
    from typer.testing import CliRunner

    from vsekit.cli import app

    result = CliRunner().invoke(app, ["index", "check", str(out)])
    lines = result.output.strip().splitlines()
    if result.exit_code == 1:
        damaged, summary = lines[:-1], lines[-1] if lines else ""
        clear = (
            bool(damaged)
            and all(_clear(line, out) for line in damaged)
            and f"{len(damaged)} damaged" in summary
        )
        return ("clear_error" if clear else "unclear_error"), f"{done}: {result.output.strip()[-600:]}"
    if result.exit_code != 0:
        return "unclear_error", f"{done}: rc {result.exit_code}: {result.output.strip()[-600:]}"
    try:
        got = answers(out, kit["dim"])
    except VsekitError as exc:
        return "check_missed", f"{done}: index check found nothing, then {exc}"
    if got != kit["reference"]:
        return "check_missed", f"{done}: index check found nothing, then {_diff(kit['reference'], got)}"
    return "identical", done


def _clear(message: str, out: Path) -> bool:
    says_what = "vsekit index build" in message or "use another --out" in message
    return "\n" not in message and str(out) in message and says_what


def _advice(out: Path, kit: dict[str, Any], done: str) -> tuple[str, str]:
    """Search; on a clear error, run the command it advises as printed, then search again."""
    try:
        got = answers(out, kit["dim"])
    except VsekitError as exc:
        message = str(exc)
        command = advised(message, kit["photos"])
        if not _clear(message, out) or command is None:
            return ("clear_error" if _clear(message, out) else "unclear_error"), f"{done}: {message}"
        try:
            cli(command)
            got = answers(out, kit["dim"])
        except VsekitError as again:
            return "advice_failed", f"{done}: {message} -> `{shlex.join(command)}`: {again}"
        if got != kit["reference"]:
            return "advice_failed", f"{done}: {message} -> {_diff(kit['reference'], got)}"
        return "repaired", f"{done}: {message}"
    if got == kit["reference"]:
        return "identical", done
    return "wrong", f"{done}: {_diff(kit['reference'], got)}"


def _diff(expected: list, got: list) -> str:
    for i, (e, g) in enumerate(zip(expected, got, strict=False)):
        if e != g:
            return f"answer {i}: expected {str(e)[:160]}, got {str(g)[:160]}"
    return "different lengths"


def run_trial(plan: dict[str, Any], kit: dict[str, Any]) -> tuple[str, str, float]:
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    start = time.monotonic()
    proc = ctx.Process(target=trial, args=(plan, kit, child))
    proc.start()
    child.close()
    if parent.poll(TIME_LIMIT_S):
        try:
            outcome, detail = parent.recv()
        except EOFError:
            outcome, detail = "traceback", "the child died"
    else:
        outcome, detail = "hang", f"no answer in {TIME_LIMIT_S:.0f} s"
        proc.kill()
    proc.join(10)
    if proc.exitcode not in (0, None) and outcome == "identical":
        outcome, detail = "traceback", f"exit code {proc.exitcode}"
    shutil.rmtree(plan["dir"], ignore_errors=True)
    return outcome, detail, time.monotonic() - start


# ----------------------------------------------------------------------------- the campaign
def files_of(base: Path) -> list[str]:
    return sorted(str(p.relative_to(base)) for p in base.rglob("*") if p.is_file() and p.name != ".lock")


def make_kits(tmp: Path, photos_trials: int) -> dict[str, dict[str, Any]]:
    kits: dict[str, dict[str, Any]] = {}
    for engine in ("exact", "hnsw"):
        for wal in (False, True):
            name = f"synthetic-{engine}" + ("+wal" if wal else "")
            base = synthetic(tmp / name / "base", 0, engine, wal)
            other = synthetic(tmp / name / "other", 5000, engine, wal)
            kits[name] = {
                "base": base,
                "other": other,
                "dim": DIM,
                "actions": ("search", "search", "search", "update", "check"),
                "faults": FAULTS,
                "plant": plant_targets(base, engine),
            }
    if photos_trials:
        kits |= photo_kits(tmp)
    for name, kit in kits.items():
        kit["files"] = files_of(kit["base"])
        ref = tmp / name / "ref"
        shutil.copytree(kit["base"], ref)
        kit["reference"] = answers(ref, kit["dim"])
        if "update" in kit["actions"]:
            update(ref)
            kit["reference_update"] = answers(ref, kit["dim"])
        shutil.rmtree(ref)
    return kits


def photo_kits(tmp: Path) -> dict[str, dict[str, Any]]:
    """The sample-photo indexes, searched exactly and through HNSW (no ``plant``: their actions write
    no new segment unless the damage makes them)."""
    from vsekit.embedding.pipeline import VSEModel
    from vsekit.resources import sample_data_path

    images = sorted((Path(sample_data_path()) / "Images").glob("*.jpg"))
    model = VSEModel.load(None, device="cpu")
    kits = {}
    for name, engine in (("photos", "exact"), ("photos-hnsw", "hnsw")):
        kits[name] = {
            "base": photo_index(tmp / name / "base", tmp / "P0", images[:12], engine),
            "other": photo_index(tmp / name / "other", tmp / "P1", images[12:24], engine),
            "dim": model.embed_dim,
            "photos": tmp / "P0",
            "model": model,
            "actions": ("search", "build", "cli-update", "advice", "check"),
            "faults": tuple(f for f in FAULTS if f != "plant"),
        }
    return kits


def plans(
    kits: dict[str, dict[str, Any]], trials: int, photos_trials: int, seed: int, tmp: Path
) -> list[dict]:
    rng = random.Random(seed)
    synthetic_kits = [k for k in kits if not k.startswith("photos")]
    photo_kits = [k for k in kits if k.startswith("photos")]
    out = []
    for i in range(trials + (photos_trials if photo_kits else 0)):
        kit = synthetic_kits[i % len(synthetic_kits)] if i < trials else photo_kits[i % len(photo_kits)]
        files, faults = kits[kit]["files"], kits[kit]["faults"]
        fault = rng.choices(faults, [FAULT_WEIGHTS[FAULTS.index(f)] for f in faults])[0]
        if (
            fault == "flip-keep-mtime"
        ):  # files that stay while the index is open (the WAL is folded in on close)
            files = [f for f in files if "-wal" not in f and "-shm" not in f]
        if fault == "flip-late":  # segments only, read late by the index opened before the flip
            files = [f for f in files if f.endswith(".npy")]
        if fault == "plant":
            file, action = rng.choice(kits[kit]["plant"]), "update"  # (only a write can overwrite it)
        elif fault == "flip-record":
            file, action = "store.sqlite", rng.choice(kits[kit]["actions"])
        else:
            kind = rng.choice(sorted({kind_of(f) for f in files}))  # a kind first: each gets its share
            file = rng.choice([f for f in files if kind_of(f) == kind])
            action = rng.choice(kits[kit]["actions"])
        out.append(
            {
                "i": i,
                "kit": kit,
                "file": file,
                "fault": fault,
                "action": action,
                "seed": rng.randrange(1 << 30),
                "dir": str(tmp / "trials" / f"t{i}"),
            }
        )
    return out


def kind_of_plan(plan: dict[str, Any]) -> str:
    return "the next file's name (planted)" if plan["fault"] == "plant" else kind_of(plan["file"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=420, help="synthetic-index trials (spread over 4 kits)")
    parser.add_argument(
        "--photos-trials",
        type=int,
        default=60,
        help="trials on the sample-photo indexes (spread over 2 kits)",
    )
    parser.add_argument("--seed", type=int, default=21)
    parser.add_argument("--out", default="fault_campaign.json")
    parser.add_argument(
        "--baseline", help="a result of this campaign run over an older src/ (kept as `baseline`)"
    )
    parser.add_argument("--baseline-note", help="what the baseline run was (the docs' table says it)")
    parser.add_argument("--only", type=int, nargs="*", help="run only these trial numbers (to look at one)")
    parser.add_argument("--block-bytes", type=int, default=256, help="checksum block of the files written")
    args = parser.parse_args()
    blocks.BLOCK_BYTES = args.block_bytes  # (forked trials inherit it)
    import torch

    torch.set_num_threads(1)
    started, load_before = time.monotonic(), os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="vsekit-faults-") as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "trials").mkdir()
        kits = make_kits(tmp, args.photos_trials)
        counts: dict[str, Counter] = defaultdict(Counter)
        examples: dict[str, list] = defaultdict(list)
        for plan in plans(kits, args.trials, args.photos_trials, args.seed, tmp):
            if args.only and plan["i"] not in args.only:
                continue
            outcome, detail, seconds = run_trial(plan, kits[plan["kit"]])
            if outcome == "skipped":
                continue
            for key in (
                "all",
                f"fault {plan['fault']}",
                f"file {kind_of_plan(plan)}",
                f"kit {plan['kit']}",
                f"action {plan['action']}",
                f"cell {plan['fault']} x {kind_of_plan(plan)}",
            ):
                counts[key][outcome] += 1
            if len(examples[outcome]) < (6 if outcome in ("identical", "clear_error", "repaired") else 30):
                examples[outcome].append(
                    {k: plan[k] for k in ("i", "kit", "file", "fault", "action")} | {"detail": detail[-700:]}
                )
            row = f"{plan['i']:4d} {plan['kit']:20s} {plan['fault']:15s} {plan['action']:10s}"
            row += f" {plan['file']:26s}"
            print(f"{row} {outcome:13s} {seconds:5.1f}s", flush=True)
        kit_notes = {
            name: {"files": kit["files"], "actions": list(kit["actions"]), "planted": kit.get("plant", [])}
            for name, kit in kits.items()
        }
    result = {
        "meta": run_meta(threads=1, loadavg_before=[round(x, 2) for x in load_before]),
        "seed": args.seed,
        "minutes": round((time.monotonic() - started) / 60, 1),
        "trials": sum(counts["all"].values()),
        "outcomes": OUTCOMES,
        "counts": {key: {o: c[o] for o in OUTCOMES} for key, c in sorted(counts.items())},
        "examples": dict(examples),
        "kits": kit_notes,
        "command": "nice -n 10 python bench/fault_campaign.py " + " ".join(sys.argv[1:]),
        "block_bytes": args.block_bytes,
    }
    if args.baseline:
        before = json.loads(Path(args.baseline).read_text(encoding="utf-8"))
        result["baseline"] = {k: before[k] for k in ("meta", "trials", "counts", "examples")}
        if args.baseline_note:
            result["baseline_note"] = args.baseline_note
    path = write_result(args.out, result)
    print(path, result["counts"]["all"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
