"""A file's sha256, hashed once per version of the file, not on every read.

The cached text graph (:mod:`vsekit.retrieval.text_engine`) and the model file an index recorded
(:func:`vsekit.retrieval.joint_model.check_recorded_model`) are checked against a sha256 by every cold
search; hashing them costs 0.03 to 0.07 s each time. When a file's bytes were hashed, a small JSON record
keeps the file's device, inode, size and modification and change times (ns) with the sha256; while the
file's stat is that, the recorded sha256 is the file's. Any write, a rename over the file or a reset
modification time moves the change time, and the file is hashed again. What this gives up is a change
that leaves all of those alone (bit rot under the file system): the records are the user's own cache,
and whoever can rewrite the file can rewrite its record too. A file changed within the last second is
not recorded: a second write in the same tick of the file system's clock would leave its times as they
were.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from pathlib import Path
from typing import Any

from vsekit.errors import VsekitError
from vsekit.fileio import atomic_write_json, read_json_record

__all__ = ["SETTLE_NS", "known_sha256", "remember", "settled", "sha256_once", "stat_key"]

logger = logging.getLogger(__name__)

#: A file changed more recently than this is hashed again next time (see the module docstring).
SETTLE_NS = 1_000_000_000


def stat_key(st: os.stat_result) -> list[int]:
    """What identifies one version of a file: any write, rename over it or utime moves one of these."""
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def settled(st: os.stat_result) -> bool:
    """Whether the file's last change is more than :data:`SETTLE_NS` old."""
    return time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) > SETTLE_NS


def remember(record: Path, verified: dict[str, Any]) -> None:
    """Write ``verified`` (``sha256`` and ``stat``) to ``record``; a read-only cache only costs a hash."""
    try:
        record.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(record, verified)
    except (OSError, VsekitError) as exc:
        logger.debug("%s: not recorded as verified (%s)", record, exc)


def known_sha256(path: Path, record: Path) -> str | None:
    """The sha256 ``record`` holds for ``path`` while the file's stat is the one recorded with it."""
    known = read_json_record(record)
    if known.get("sha256") and known.get("stat") == stat_key(path.stat()):
        return str(known["sha256"])
    return None


def sha256_once(path: Path, record: Path) -> str:
    """``path``'s sha256: from ``record`` while the file is the version recorded there, else hashed now
    (and recorded, when the file did not change while it was read and is settled)."""
    known = known_sha256(path, record)
    if known is not None:
        return known
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        before = os.fstat(f.fileno())
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
        after = os.fstat(f.fileno())
    sha = digest.hexdigest()
    if stat_key(before) == stat_key(after) and settled(after):
        remember(record, {"sha256": sha, "stat": stat_key(after)})
    return sha
