"""What every benchmark records with its numbers: when, where, how loaded, how many threads, which commit.

from _common import run_meta, write_result
write_result("duplicates.json", {"meta": run_meta(threads=2), ...})
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"


def git_commit() -> str:
    """The checkout's commit, with ``+dirty`` when tracked files differ from it."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True).stdout.strip()

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    return commit + ("+dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def run_meta(threads: int | None = None, **extra: Any) -> dict[str, Any]:
    """Date (UTC), machine, load averages (1/5/15 min), thread count and git commit."""
    return {
        "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "loadavg": [round(x, 2) for x in os.getloadavg()],
        "threads": threads,
        "commit": git_commit(),
        **extra,
    }


def write_result(name: str, result: dict[str, Any]) -> Path:
    """Write ``bench/results/<name>`` (pretty JSON, trailing newline)."""
    path = RESULTS / name
    path.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return path
