"""Shipped model files carry a content checksum and pin each other by content (issue 15 item 3).

``ship/stamp_pretrained.py`` stamps files written before content checksums existed: a canonical header
with ``content_sha256``, the tensor bytes untouched, and pins by file sha256 moved to content
fingerprints (which stamping does not change). Here: every shipped file has been stamped and verifies,
its pins hold, and the script on a tiny unstamped folder does what it says, idempotently.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save

from vsekit.errors import VsekitError
from vsekit.fileio import (
    CONTENT_SHA256,
    content_fingerprint,
    file_sha256,
    fingerprint_matches,
    read_vsekit_safetensors,
    stamp_safetensors,
)
from vsekit.resources import PACKAGE_DIR

SCRIPT = Path(__file__).resolve().parents[1] / "ship" / "stamp_pretrained.py"
SHIPPED = sorted((PACKAGE_DIR / "pretrained").glob("*.safetensors"))


def _stamp_script():
    spec = importlib.util.spec_from_file_location("stamp_pretrained", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _header(path: Path) -> tuple[dict, bytes]:
    data = path.read_bytes()
    n = int.from_bytes(data[:8], "little")
    return json.loads(data[8 : 8 + n]), data[8 + n :]


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_every_shipped_model_file_carries_a_content_checksum_that_verifies(path):
    meta = _header(path)[0]["__metadata__"]
    assert meta.get(CONTENT_SHA256) == content_fingerprint(path), f"{path.name}: run ship/stamp_pretrained.py"
    assert list(meta) == sorted(meta)  # the canonical header: a stamped file is written deterministically


def test_the_shipped_pins_name_the_shipped_files_by_content():
    pins = _stamp_script()._pins(PACKAGE_DIR / "pretrained")
    assert {where for where, _, _ in pins} >= {
        "captioner.safetensors rerank",
        "fusion-vse-aligner.json joint",
    }
    for where, pinned, target in pins:
        assert pinned == content_fingerprint(PACKAGE_DIR / "pretrained" / target), where


def _unstamped(path: Path, tensors: dict, meta: dict) -> bytes:
    """A safetensors file as written before content checksums (the library's own header order)."""
    data = save(tensors, metadata=meta)
    path.write_bytes(data)
    return data


def test_stamping_keeps_the_tensors_and_the_fingerprint_and_is_idempotent(tmp_path):
    path = tmp_path / "m.safetensors"
    tensors = {"w": torch.arange(6, dtype=torch.float32).reshape(2, 3), "b": torch.ones(3)}
    data = _unstamped(path, tensors, {"format": "vsekit.captioner", "format_version": "1", "z": "1"})
    old_sha, fingerprint = file_sha256(path), content_fingerprint(path)
    assert CONTENT_SHA256 not in _header(path)[0]["__metadata__"]

    assert stamp_safetensors(path) is True
    header, body = _header(path)
    assert body == data[8 + int.from_bytes(data[:8], "little") :]  # the tensor bytes, as they were
    assert header["__metadata__"][CONTENT_SHA256] == fingerprint == content_fingerprint(path)
    assert file_sha256(path) != old_sha and fingerprint_matches(path, old_sha) is False
    assert fingerprint_matches(path, fingerprint)
    stamped = path.read_bytes()
    assert stamp_safetensors(path) is False and path.read_bytes() == stamped

    _, loaded = read_vsekit_safetensors(path, "vsekit.captioner", "captioner", 1)
    assert all(torch.equal(loaded[k], v) for k, v in tensors.items())
    flipped = bytearray(stamped)
    flipped[-1] ^= 1  # a bit of a tensor: the checksum names the file
    path.write_bytes(bytes(flipped))
    with pytest.raises(VsekitError, match="damaged captioner"):
        read_vsekit_safetensors(path, "vsekit.captioner", "captioner", 1)


def test_the_script_moves_file_sha_pins_to_content_fingerprints(tmp_path):
    joint = tmp_path / "vse.safetensors"
    _unstamped(joint, {"w": torch.randn(4, 4, generator=torch.Generator().manual_seed(0))}, {"format": "j"})
    aligner = tmp_path / "aligner.safetensors"
    _unstamped(aligner, {"w": torch.zeros(2)}, {"format": "a"})
    rerank = {"beam_size": 5, "joint_model_sha256": file_sha256(joint)}
    captioner = tmp_path / "captioner.safetensors"
    _unstamped(captioner, {"w": torch.ones(2)}, {"format": "c", "extra": json.dumps({"rerank": rerank})})
    fusion = {"joint": "vse", "aligner": "aligner", "joint_sha256": file_sha256(joint)}
    fusion["aligner_sha256"] = file_sha256(aligner)
    (tmp_path / "fusion-vse-aligner.json").write_text(json.dumps(fusion, indent=1) + "\n")
    bodies = {p: hashlib.sha256(_header(p)[1]).hexdigest() for p in (joint, aligner, captioner)}
    script = _stamp_script()

    rows = script.stamp(tmp_path)
    assert all(r["rewritten"] for r in rows)
    for where, pinned, target in script._pins(tmp_path):
        assert pinned == content_fingerprint(tmp_path / target), where
    assert len(script._pins(tmp_path)) == 3
    assert all(hashlib.sha256(_header(p)[1]).hexdigest() == b for p, b in bodies.items())
    files = {p: p.read_bytes() for p in tmp_path.iterdir()}
    assert not any(r["rewritten"] or r["repinned"] for r in script.stamp(tmp_path))  # idempotent
    assert files == {p: p.read_bytes() for p in tmp_path.iterdir()}
