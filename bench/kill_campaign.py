"""Kill campaign (issue 15 item 1, the long version of tests/test_kill.py): every long job on small data,
killed with SIGKILL at N seeded random moments, then run again with the same command; the final files
are compared with an uninterrupted run, and what each kill left behind is opened (never a half file).

Jobs: ``train`` (joint embedding), ``train-captioner``, ``train-scnlm``, ``train-aligner`` (library runs
with the tests' fake features or regions, as in tests/test_kill.py), ``extract`` (one-layer) and
``extract --fne`` (the real MobileNetV2 on 12 sample photos), ``index`` (``Index.build`` with the shipped
model on 12 sample photos), ``store update`` and ``store compact`` (the index store's own API on
synthetic vectors: tests/test_store_kill.py's jobs). A moment is drawn uniformly over the whole
uninterrupted run of the same child, measured from its ``ready`` line (after imports).

    python bench/kill_campaign.py [--trials 5] [--seed 15] [--jobs train extract ...]

Writes bench/results/kill_campaign.json: per job the trials, how many kills hit a running job, what the
kill had left (committed epochs / finished rows / chunks), and whether the rerun matched.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]

import numpy as np  # noqa: E402
import torch  # noqa: E402

import test_kill as tk  # noqa: E402
from _common import run_meta, write_result  # noqa: E402
from corpus_helpers import fake_image_features, write_tiny_corpus  # noqa: E402
from kill_helpers import overlap_score, run_and_signal, scnlm_run, seconds_after_ready, tmp_files  # noqa: E402
from vsekit.data import load_corpus  # noqa: E402
from vsekit.fileio import file_sha256  # noqa: E402
from vsekit.training.checkpoint import read_checkpoint  # noqa: E402

EXTRACT_ONE_LAYER = tk.EXTRACT.replace(
    "extract_fne(corpus, cache_dir=sys.argv[2]", "extract_features(corpus, cache_dir=sys.argv[2]"
).replace("import extract_fne", "import extract_features")


@dataclasses.dataclass
class Job:
    """``run(out)`` in-process; ``script``/``args(out)`` for the killed child; ``compare``; ``left``."""

    name: str
    run: Callable[[Path], None]
    script: str
    args: Callable[[Path], list[str]]
    compare: Callable[[Path, Path], bool]
    left: Callable[[Path], str]


def _same_run(model: str, kind: str) -> Callable[[Path, Path], bool]:
    def compare(full: Path, resumed: Path) -> bool:
        try:
            tk.assert_same_run(full, resumed, model, kind)
        except AssertionError as exc:
            print(f"    differs: {exc!r}"[:300], flush=True)
            return False
        return True

    return compare


def _epochs_left(kind: str) -> Callable[[Path], str]:
    def left(out: Path) -> str:
        if not (out / "checkpoint.pt").exists():
            return "no checkpoint"
        return f"checkpoint of epoch {read_checkpoint(out / 'checkpoint.pt', kind)['epoch']}"

    return left


def training_jobs(tmp: Path) -> list[Job]:
    from vsekit.captioning.trainer import CaptionTrainConfig, train_captioner
    from vsekit.embedding.trainer import train

    data = write_tiny_corpus(tmp / "corpus", 24, 8, 8)
    corpus, config = load_corpus(data), tk._train_config()
    caption_config = CaptionTrainConfig(
        word_dim=16, hidden_dim=24, batch_size=16, epochs=5, min_word_count=1, lr=0.01
    )
    quiet = {"progress": False, "log": lambda s: None}
    aligner_data, aligner_config = tk.aligner_corpus(tmp / "aligner-corpus"), tk.aligner_config()
    return [
        Job(
            "train",
            lambda out: train(corpus, config, out, resume=True, feature_fn=fake_image_features, **quiet),
            tk.TRAIN,
            lambda out: [str(data), str(out), json.dumps(dataclasses.asdict(config))],
            _same_run("model.safetensors", "joint-embedding"),
            _epochs_left("joint-embedding"),
        ),
        Job(
            "train-captioner",
            lambda out: train_captioner(
                corpus,
                caption_config,
                out,
                resume=True,
                device="cpu",
                feature_fn=fake_image_features,
                score_fn=overlap_score,
                **quiet,
            ),  # fmt: skip
            tk.CAPTIONER,
            lambda out: [str(data), str(out), json.dumps(caption_config.to_dict())],
            _same_run("captioner.safetensors", "captioner"),
            _epochs_left("captioner"),
        ),
        Job(
            "train-scnlm",
            scnlm_run,
            tk.SCNLM,
            lambda out: [str(out)],
            _same_run("scnlm.safetensors", "scnlm"),
            _epochs_left("scnlm"),
        ),
        Job(
            "train-aligner",
            lambda out: tk.aligner_run(aligner_data, aligner_config, out),
            tk.ALIGNER,
            lambda out: [str(aligner_data), str(out), json.dumps(aligner_config.to_dict())],
            _same_run("aligner.safetensors", "aligner"),
            _epochs_left("aligner"),
        ),
    ]


def _rows_left(out: Path) -> str:
    from vsekit.vision.features import FeatureStore

    if not (out / "meta.json").exists():
        return "no cache yet"
    store = FeatureStore.open(out)
    fne = ", FNE codes" if (out / "fne_codes.npy").exists() else ""
    return f"{int(store.done_mask().sum())}/{len(store.image_ids)} rows{fne}"


def extract_jobs(tmp: Path) -> list[Job]:
    from vsekit.vision.features import FeatureStore, extract_features, extract_fne

    data = tk.photo_corpus(tmp / "photos")
    corpus = load_corpus(data)

    def same_cache(fne: bool) -> Callable[[Path, Path], bool]:
        def compare(full: Path, again: Path) -> bool:
            a, b = FeatureStore.open(full), FeatureStore.open(again)
            same = np.array_equal(a.raw(), b.raw()) and not tmp_files(again)
            if fne:
                same = same and np.array_equal(a.fne_codes(), b.fne_codes())
                same = same and file_sha256(full / "fne.safetensors") == file_sha256(
                    again / "fne.safetensors"
                )
            return same

        return compare

    common = {"batch_size": 2, "progress": False, "device": "cpu"}
    return [
        Job(
            "extract",
            lambda out: extract_features(corpus, cache_dir=out, **common),
            EXTRACT_ONE_LAYER,
            lambda out: [str(data), str(out)],
            same_cache(False),
            _rows_left,
        ),
        Job(
            "extract --fne",
            lambda out: extract_fne(corpus, cache_dir=out, **common),
            tk.EXTRACT,
            lambda out: [str(data), str(out)],
            same_cache(True),
            _rows_left,
        ),
    ]


def index_jobs(tmp: Path) -> list[Job]:
    import vsekit
    from search_helpers import make_photo_folder
    from test_index import BUILD_SCRIPT, index_files
    from vsekit.retrieval.index import Index

    photos = make_photo_folder(tmp / "index-photos", n=12)
    model = vsekit.load_model()

    def left(out: Path) -> str:
        generations, chunks = store_state(out)
        return f"generation {generations} committed" if generations else f"{chunks} chunks committed"

    return [
        Job(
            "index build",
            lambda out: Index.build(photos, out, model, chunk_size=2, progress=False),
            BUILD_SCRIPT.replace('print("model loaded", flush=True)', 'print("ready", flush=True)'),
            lambda out: [str(photos), str(out)],
            lambda full, again: index_files(full) == index_files(again),
            left,
        )
    ]


def store_state(out: Path) -> tuple[int, int]:
    """(committed generations, committed chunks) of an index store."""
    import sqlite3

    if not (out / "store.sqlite").exists():
        return 0, 0
    conn = sqlite3.connect(out / "store.sqlite")
    try:
        return conn.execute(
            "SELECT (SELECT count(*) FROM generations), "
            "(SELECT count(*) FROM chunks WHERE entries IS NOT NULL)"
        ).fetchone()
    finally:
        conn.close()


ADDED = 20_000  # photos a killed store update adds
STORE_JOB = """
import sys
from pathlib import Path
from test_store_kill import run
print("ready", flush=True)
run(Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]))
"""


def store_jobs(tmp: Path) -> list[Job]:
    """An update (20,000 photos added, 10 deleted, 1 changed: long enough for a kill at a random moment
    to land in the work rather than the interpreter's exit) and a compaction of the 4-segment store it
    leaves (tests/test_store_kill.py's jobs); a trial's store starts as a copy of the same base."""
    import shutil

    import test_store_kill as sk
    from store_helpers import index_content
    from vsekit.retrieval.index import Index

    base = sk.base_store(tmp / "store-base")
    big = tmp / "store-big"  # what the compaction job starts from: the base after the update
    shutil.copytree(base, big)
    sk.run(big, "update", ADDED)

    def fresh(out: Path, what: str) -> list[str]:
        if not out.exists():
            shutil.copytree(base if what == "update" else big, out)
        return [str(out)]

    def left(out: Path) -> str:
        index = Index.open(out)  # must open: the old generation or the new one
        return f"generation {index.generation()}, {len(index)} photos"

    def job(what: str) -> Job:
        def run(out: Path) -> None:
            fresh(out, what)
            sk.run(out, what, ADDED)

        return Job(
            f"store {what}",
            run,
            STORE_JOB,
            lambda out: [*fresh(out, what), what, str(ADDED)],
            lambda full, again: index_content(full) == index_content(again),
            left,
        )

    return [job("update"), job("compact")]


def campaign(job: Job, tmp: Path, trials: int, seed: int) -> dict:
    job.run(tmp / "full")
    uninterrupted = seconds_after_ready(job.script, job.args(tmp / "child"))
    rng = random.Random(f"{seed}-{job.name}")
    rows = []
    for k in range(trials):
        out = tmp / f"trial{k}"
        moment = rng.uniform(0.0, 1.0) * uninterrupted
        alive, _, _ = run_and_signal(job.script, job.args(out), moment)
        try:
            left = job.left(out)
        except Exception as exc:  # a half-written file would land here: the campaign's failure
            left = f"UNREADABLE: {exc}"
        job.run(out)
        rows.append({"moment_s": round(moment, 2), "killed_running": alive, "left": left,
                     "identical": job.compare(tmp / "full", out)})  # fmt: skip
        print(f"  {job.name} trial {k}: kill at {moment:.2f}s, running={alive}, left {left}, "
              f"identical={rows[-1]['identical']}", flush=True)  # fmt: skip
    return {
        "uninterrupted_s": round(uninterrupted, 2),
        "trials": trials,
        "killed_running": sum(r["killed_running"] for r in rows),
        "identical": sum(r["identical"] for r in rows),
        "unreadable_leftovers": sum(r["left"].startswith("UNREADABLE") for r in rows),
        "rows": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--seed", type=int, default=15)
    parser.add_argument("--jobs", nargs="*", default=None, help="job names (default: all)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "kill_campaign.json")
    args = parser.parse_args()
    torch.set_num_threads(1)
    started = time.perf_counter()
    results = {}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        jobs = training_jobs(tmp / "t") + extract_jobs(tmp / "e") + index_jobs(tmp / "i")
        jobs += store_jobs(tmp / "s")
        for job in jobs:
            if args.jobs and job.name not in args.jobs:
                continue
            print(f"{job.name}: {args.trials} kills", flush=True)
            results[job.name] = campaign(job, tmp / job.name.replace(" ", "_"), args.trials, args.seed)
    payload = {
        **run_meta(threads=1),  # torch threads of every job
        "seed": args.seed,
        "minutes": round((time.perf_counter() - started) / 60, 1),
        "jobs": results,
    }
    write_result(args.out, payload)
    print("| job | trials | killed while running | identical after rerun | unreadable leftovers |")
    print("| --- | --- | --- | --- | --- |")
    for name, r in results.items():
        counts = [r[k] for k in ("trials", "killed_running", "identical", "unreadable_leftovers")]
        print(f"| {name} | " + " | ".join(str(c) for c in counts) + " |")


if __name__ == "__main__":
    main()
