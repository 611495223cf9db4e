"""Benchmark: what a round of ``vsekit index update --watch`` costs (retrieval/watch.py).

For collections of N photo files (hard links to one sample JPEG, 500 to a folder) and an index that
holds all of them (records with their real size and mtime, random unit vectors, the shipped ``vse``'s
identity, so a real update runs on it): the median time of a watcher round when nothing changed (a
stat per file and one query), against a plain ``Index.update()`` with nothing changed (what a loop of
``vsekit index update`` would pay each time: the model's sha256, the database check, the folder scan,
the compaction check); and the time of a round that adds one new photo (read, embedded, committed as
a generation), model already loaded. The machine is shared: the load average is recorded.

    python bench/bench_watch.py [--sizes 1000 10000 30000] [--repeat 5] [--threads 2]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import run_meta, write_result  # noqa: E402
from vsekit.embedding.pipeline import VSEModel  # noqa: E402
from vsekit.resources import sample_data_path  # noqa: E402
from vsekit.retrieval.build import add_vectors, new_store  # noqa: E402
from vsekit.retrieval.index import Index  # noqa: E402
from vsekit.retrieval.joint_model import model_identity  # noqa: E402
from vsekit.retrieval.store import PhotoRecord  # noqa: E402
from vsekit.retrieval.watch import Watcher  # noqa: E402

SAMPLES = sorted((sample_data_path() / "Images").glob("*.jpg"))


def collection(root: Path, n: int, model: VSEModel) -> Index:
    """``n`` photo files and an index that holds every one of them, unchanged."""
    photos, out = root / "photos", root / "index"
    photos.mkdir()
    records = []
    for i in range(n):
        folder = photos / f"f{i // 500:04d}"
        folder.mkdir(exist_ok=True)
        path = folder / f"p{i:06d}.jpg"
        os.link(SAMPLES[0], path)
        st = path.stat()
        records.append(PhotoRecord(str(path.relative_to(photos)), st.st_size, st.st_mtime_ns, f"{i:064x}"))
    new_store(out, model.embed_dim, dtype="float16", photos_dir=str(photos.resolve()),
              model=model_identity(model, "vse"))  # fmt: skip
    vectors = np.random.default_rng(0).standard_normal((n, model.embed_dim)).astype(np.float32)
    add_vectors(out, records, vectors / np.linalg.norm(vectors, axis=1, keepdims=True))
    return Index.open(out, model=model)


def timed(fn, repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return times


def measure(n: int, repeat: int, model: VSEModel) -> dict:
    with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as tmp:
        index = collection(Path(tmp), n, model)
        watcher = Watcher(index, settle=0)
        assert watcher.round() is None  # the first round reads the records: nothing to do
        idle = timed(lambda: watcher.round(), repeat)
        update = timed(lambda: index.update(progress=False), max(2, repeat // 2))
        added = []
        for k in range(repeat):
            shutil.copy(SAMPLES[1 + k], index.photos_dir / f"new{k}.jpg")
            started = time.perf_counter()
            done = watcher.round()
            added.append(time.perf_counter() - started)
            assert done is not None and done.added == [f"new{k}.jpg"], done
    return {
        "photos": n,
        "idle_round_s": round(statistics.median(idle), 4),
        "idle_round_s_all": [round(t, 4) for t in idle],
        "plain_update_nothing_changed_s": round(statistics.median(update), 4),
        "round_adding_one_photo_s": round(statistics.median(added), 4),
        "round_adding_one_photo_s_all": [round(t, 4) for t in added],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 30000])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model = VSEModel.load("vse")
    rows = []
    for n in args.sizes:
        rows.append(measure(n, args.repeat, model))
        print(rows[-1], flush=True)
    write_result("watch.json", {"meta": run_meta(threads=args.threads), "rounds": rows})


if __name__ == "__main__":
    main()
