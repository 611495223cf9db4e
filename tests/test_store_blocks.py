"""File checksums of the index store (issue 36 item 9): a CRC-32 per block, recorded as text that says
how the file is checked; the sha256 of a store before format version 3 still checks the old way."""

from __future__ import annotations

import hashlib
import os

import numpy as np
import pytest

from vsekit.retrieval.store.blocks import (
    BlockCheck,
    bytes_checksum,
    file_checksum,
    is_sha256,
    mismatch,
    parse_checksum,
    upgrade_checksum,
)


def test_a_file_and_its_bytes_have_the_same_checksum_and_it_parses_back(tmp_path):
    data = os.urandom(1000)
    path = tmp_path / "f"
    path.write_bytes(data)
    text = file_checksum(path, 256)
    assert text == bytes_checksum(data, 256) and text.startswith("crc32:256:1000:")
    sums = parse_checksum(text)
    assert (sums.block, sums.size, sums.blocks) == (256, 1000, 4)
    assert list(sums.span(255, 257)) == [0, 1] and list(sums.span(900, 5000)) == [3]
    assert not is_sha256(text) and mismatch(data, text) is None


def test_every_one_bit_flip_is_found_in_its_block():
    data = bytearray(os.urandom(700))
    text = bytes_checksum(bytes(data), 256)
    for byte in range(0, 700, 7):
        flipped = bytearray(data)
        flipped[byte] ^= 1 << (byte % 8)
        assert mismatch(bytes(flipped), text) == f"block {byte // 256} of 3 does not match its CRC-32"
        check = BlockCheck(parse_checksum(text))
        others = [b for b in range(3) if b != byte // 256]
        assert check.check_blocks(bytes(flipped), others) is None  # the other blocks are sound
        assert check.check(bytes(flipped)) is not None and not check.complete


def test_a_short_file_or_an_unreadable_record_is_damage():
    data = os.urandom(600)
    text = bytes_checksum(data, 256)
    assert mismatch(data[:-1], text) == "599 bytes, the index recorded 600"
    for bad in (None, "", "crc32:256:600:00", "crc32:0:0:", "md5:1:2:3", text[:-1] + "g"):
        with pytest.raises(ValueError):
            parse_checksum(bad)
        assert mismatch(data, bad) is not None


def test_a_sha256_checks_the_whole_file_and_upgrades_only_a_sound_one(tmp_path):
    data = os.urandom(5000)
    sha = hashlib.sha256(data).hexdigest()
    assert is_sha256(sha) and mismatch(data, sha) is None
    assert mismatch(data[:-1] + b"x", sha).startswith("sha256 ")
    path = tmp_path / "f"
    path.write_bytes(data)
    assert upgrade_checksum(path, sha) == file_checksum(path)
    path.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    assert upgrade_checksum(path, sha) is None  # damaged bytes never get CRCs of their own
    assert upgrade_checksum(tmp_path / "gone", sha) is None


def test_checked_blocks_are_remembered():
    data = np.arange(1024, dtype=np.uint8).tobytes()
    check = BlockCheck(parse_checksum(bytes_checksum(data, 256)))
    assert check.check(data, 0, 1) is None and not check.complete
    assert check.check(b"\0" * 1024, 0, 1) is None  # block 0 was checked: not read again
    assert check.check(data) is None and check.complete
