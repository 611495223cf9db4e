"""A file's sha256 hashed once per version of the file (vsekit.retrieval.file_versions): the model file an
index recorded is checked by every cold search from a record of its stat, and any change to the file,
even one that keeps its size and puts its modification time back, has it hashed again and refused."""

from __future__ import annotations

import hashlib
import os
from types import SimpleNamespace

import pytest

from vsekit.errors import ConfigMismatchError
from vsekit.retrieval import file_versions
from vsekit.retrieval.file_versions import sha256_once
from vsekit.retrieval.joint_model import check_recorded_model


@pytest.fixture
def settled(monkeypatch):
    monkeypatch.setattr(file_versions, "SETTLE_NS", -(10**12))  # as if every file were written long ago


def flip_in_place(path) -> None:
    """Change one byte without changing the inode, the size or the access and modification times."""
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    with open(path, "r+b") as f:
        f.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_the_recorded_sha256_is_used_until_the_file_changes(tmp_path, settled, monkeypatch):
    path, record = tmp_path / "model.bin", tmp_path / "rec" / "model.json"
    path.write_bytes(os.urandom(4096))
    true = hashlib.sha256(path.read_bytes()).hexdigest()
    assert sha256_once(path, record) == true and record.is_file()
    hashed = []
    counting = SimpleNamespace(sha256=lambda: hashed.append(1) or hashlib.sha256())
    monkeypatch.setattr(file_versions, "hashlib", counting)  # this module's hashing only
    assert sha256_once(path, record) == true and hashed == []  # from the record
    flip_in_place(path)
    changed = sha256_once(path, record)
    assert hashed == [1] and changed == hashlib.sha256(path.read_bytes()).hexdigest() != true


def test_a_fresh_file_is_hashed_every_time(tmp_path):
    """Changed within the last second: a second write in the same clock tick would keep its times."""
    path, record = tmp_path / "model.bin", tmp_path / "model.json"
    path.write_bytes(b"x" * 100)
    assert sha256_once(path, record) == hashlib.sha256(b"x" * 100).hexdigest()
    assert not record.exists()


def test_an_index_model_file_changed_in_place_is_refused(tmp_path, settled, monkeypatch):
    monkeypatch.setenv("VSEKIT_CACHE", str(tmp_path / "cache"))
    model = tmp_path / "my model.safetensors"
    model.write_bytes(os.urandom(1 << 16))
    recorded = {"name": str(model), "sha256": hashlib.sha256(model.read_bytes()).hexdigest()}
    check_recorded_model(tmp_path / "index", recorded)  # hashed and recorded
    assert list((tmp_path / "cache" / "verified").iterdir())
    check_recorded_model(tmp_path / "index", recorded)  # from the record
    flip_in_place(model)
    with pytest.raises(ConfigMismatchError, match="--rebuild"):
        check_recorded_model(tmp_path / "index", recorded)
