"""kill -9 during an update and during a compaction of the index store (issue 27): the store is left at
the old or the new generation (never between), and running the same command again ends with the same
records, vectors and files as an uninterrupted run. The moment is a seeded transaction of the writer
(``kill_helpers.run_self_signalled``: the job signals itself, no clock); bench/kill_campaign.py runs
more moments."""

from __future__ import annotations

import shutil
import signal
from pathlib import Path

import numpy as np
import pytest

from kill_helpers import calls_during, run_self_signalled
from store_helpers import index_content
from test_store import brute_force, record, vector
from vsekit.retrieval.build import add_vectors, compact_store, new_store
from vsekit.retrieval.index import Index

WHERE = ("vsekit.retrieval.store", "Store.transaction")  # every write to the database starts here
WRITTEN = ("vsekit.retrieval.store.writer", "file_checksum")  # a segment file just written, not yet committed

JOB = """
import sys
from pathlib import Path
from test_store_kill import run
run(Path(sys.argv[1]), sys.argv[2])
"""


def base_store(out: Path) -> Path:
    new_store(out, 8, dtype="float16")
    for part in range(3):  # three segments, so a compaction has something to merge
        ids = range(20 * part, 20 * part + 20)
        add_vectors(
            out, [record(f"p{i}.jpg", i) for i in ids], np.stack([vector(i) for i in ids]), auto_compact=False
        )
    return out


def run(out: Path, what: str, added: int = 30) -> None:
    """The job: an update (``added`` photos, 10 deleted, 1 changed) or a compaction."""
    if what == "update":
        new = range(500, 500 + added)
        add_vectors(
            out,
            [record(f"n{i}.jpg", i) for i in new] + [record("p3.jpg", 999)],
            np.stack([vector(i) for i in new] + [vector(999)]),
            removed=[f"p{i}.jpg" for i in range(0, 20, 2)],
            auto_compact=False,
        )
    else:
        compact_store(out)


def live_after(what: str) -> dict[str, np.ndarray]:
    live = {f"p{i}.jpg": vector(i) for i in range(60)}
    if what == "update":
        live |= {f"n{i}.jpg": vector(i) for i in range(500, 530)} | {"p3.jpg": vector(999)}
        for i in range(0, 20, 2):
            del live[f"p{i}.jpg"]
    return live


@pytest.mark.parametrize("what", ["update", "compact"])
def test_kill_9_leaves_the_old_or_new_generation_and_a_rerun_finishes_it(tmp_path, what):
    base = base_store(tmp_path / "base")
    reference = tmp_path / "reference"
    shutil.copytree(base, reference)
    steps = calls_during(lambda: run(reference, what), WHERE)
    assert steps >= 2
    before, after = live_after("compact"), live_after(what)
    query = vector(4242)
    moments = [(WHERE, step) for step in range(1, steps + 1)] + [(WRITTEN, 1)]
    for trial, (where, step) in enumerate(moments):
        out = tmp_path / f"killed{trial}"
        shutil.copytree(base, out)
        status, stderr = run_self_signalled(JOB, [str(out), what], step, signal.SIGKILL, where)
        assert status == -signal.SIGKILL, f"not killed at transaction {step} of {steps}: {stderr[-400:]}"
        index = Index.open(out)  # the old generation or the new one, searchable
        live = after if len(index) == len(after) and set(index.paths) == set(after) else before
        assert set(index.paths) == set(live), (step, len(index))
        hits = index.search(vector=query, k=10)
        expected = brute_force(live, query, "float16")[:10]
        np.testing.assert_allclose([h.score for h in hits], [s for _, s in expected], atol=1e-6)
        run(out, what)  # the same command again
        assert index_content(out) == index_content(reference), (what, step)
