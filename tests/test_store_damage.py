"""A damaged index store (issue 21 item 1): truncating, flipping bits in, deleting or swapping (with
another index's) any file of the store gives one clear line naming the file and saying `vsekit index
build` will rebuild it, or the undamaged results; never a traceback and never a wrong result list."""

from __future__ import annotations

import random
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from test_store import record, vector
from vsekit.errors import VsekitError
from vsekit.retrieval.build import add_vectors, new_store
from vsekit.retrieval.index import Index

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
