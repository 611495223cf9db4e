"""Stamp the shipped model files with their content checksum, and move the pins between them to content
fingerprints (issue 15 item 3). Idempotent: a second run changes nothing.

For every ``src/vsekit/pretrained/*.safetensors`` (or the files given):

1. its :func:`~vsekit.fileio.content_fingerprint` (which stamping does not change) and its file sha256;
2. pins that name another shipped file by its file sha256 (any ``*sha256`` field in a model's ``extra``
   header, e.g. the captioner's ``rerank.joint_model_sha256``, and ``*_sha256`` in the fusion JSON files)
   are rewritten to that file's content fingerprint;
3. the header is rewritten canonically with ``content_sha256`` (:func:`~vsekit.fileio.stamp_safetensors`);
4. checked: the tensor bytes of every file are unchanged, every file's checksum verifies, every pin
   matches the file it names.

    python ship/stamp_pretrained.py [--dry-run]        (or: make stamp)
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path
from typing import Any

from vsekit.fileio import (
    atomic_write_text,
    content_fingerprint,
    file_sha256,
    fingerprint_matches,
    stamp_safetensors,
)
from vsekit.resources import PACKAGE_DIR

PRETRAINED = PACKAGE_DIR / "pretrained"


def _header(path: Path) -> tuple[dict[str, Any], str]:
    """The safetensors header and the sha256 of the tensor bytes."""
    data = path.read_bytes()
    n = int.from_bytes(data[:8], "little")
    return json.loads(data[8 : 8 + n]), hashlib.sha256(data[8 + n :]).hexdigest()


def _repin(value: Any, pins: dict[str, str], key: str = "") -> Any:
    """``value`` with every string under a key ending in ``sha256`` that is a key of ``pins`` replaced."""
    if isinstance(value, dict):
        return {k: _repin(v, pins, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_repin(v, pins, key) for v in value]
    if isinstance(value, str) and key.endswith("sha256"):
        return pins.get(value, value)
    return value


def _repinned_extra(path: Path, pins: dict[str, str]) -> dict[str, str]:
    """The header fields of ``path`` whose pins change (the JSON ``extra`` field), else {}."""
    meta = _header(path)[0].get("__metadata__", {})
    if "extra" not in meta:
        return {}
    extra = json.loads(meta["extra"])
    new = _repin(extra, pins)
    return {} if new == extra else {"extra": json.dumps(new)}


def _pins(folder: Path) -> list[tuple[str, str, str]]:
    """(where, pinned fingerprint, file it names) for every pin between the files of ``folder``."""
    found = []
    for path in sorted(folder.glob("*.safetensors")):
        rerank = json.loads(_header(path)[0].get("__metadata__", {}).get("extra", "{}")).get("rerank") or {}
        if rerank.get("joint_model_sha256"):
            pin = rerank["joint_model_sha256"]
            found.append((f"{path.name} rerank", pin, _kept_vse(folder, pin) or "vse.safetensors"))
    for path in sorted(folder.glob("fusion-*.json")):
        spec = json.loads(path.read_text())
        for role in ("joint", "aligner"):
            if spec.get(f"{role}_sha256"):
                found.append((f"{path.name} {role}", spec[f"{role}_sha256"], f"{spec[role]}.safetensors"))
    return found


def _kept_vse(folder: Path, pin: str) -> str | None:
    """The kept earlier release of vse (``previous/``, never restamped: indexes pin its file sha256) whose
    content ``pin`` names, as a path under ``folder``; None when the pin names no kept file."""
    for path in sorted((folder / "previous").glob("vse-*.safetensors")):
        if fingerprint_matches(path, pin):
            return f"previous/{path.name}"
    return None


def stamp(folder: Path, dry_run: bool = False) -> list[dict[str, Any]]:
    models = sorted(folder.glob("*.safetensors"))
    before = {p: _header(p)[1] for p in models}
    pins = {file_sha256(p): content_fingerprint(p) for p in models}
    rows = []
    for path in models:
        changes = _repinned_extra(path, pins)
        changed = False if dry_run else stamp_safetensors(path, changes)
        rows.append({"file": path.name, "repinned": sorted(changes), "rewritten": changed})
    for path in sorted(folder.glob("fusion-*.json")):
        spec = json.loads(path.read_text())
        new = _repin(spec, pins)
        if new != spec and not dry_run:
            atomic_write_text(path, json.dumps(new, indent=1) + "\n")
        rows.append({"file": path.name, "repinned": new != spec, "rewritten": new != spec and not dry_run})
    if not dry_run:
        _check(folder, before)
    return rows


def _check(folder: Path, before: dict[Path, str]) -> None:
    for path, tensors in before.items():
        header, after = _header(path)
        if after != tensors:
            raise SystemExit(f"{path}: tensor bytes changed by stamping")
        if header["__metadata__"].get("content_sha256") != content_fingerprint(path):
            raise SystemExit(f"{path}: content_sha256 does not verify")
    for where, pinned, target in _pins(folder):
        if not fingerprint_matches(folder / target, pinned):
            print(f"warning: {where} pins {pinned[:12]}, which is not {target} (stale pin, left as is)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--folder", type=Path, default=PRETRAINED)
    parser.add_argument("--dry-run", action="store_true", help="say what would change, write nothing")
    args = parser.parse_args()
    for row in stamp(args.folder, args.dry_run):
        print(f"{row['file']:32} repinned {row['repinned'] or '-'}  rewritten {row['rewritten']}")


if __name__ == "__main__":
    main()
