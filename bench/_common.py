"""What every benchmark records with its numbers: when, where, how loaded, how many threads, which commit;
and the few measurements several benchmarks take the same way (load now, peak RSS, latency percentiles).

from _common import run_meta, write_result
write_result("duplicates.json", {"meta": run_meta(threads=2), ...})

Scripts run as ``python bench/NAME.py``, so ``bench/`` is on the path and ``_common`` imports as is. The
selection and shipping scripts in ``ship/`` use these helpers too, through ``ship/_common.py``.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import re
import resource
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"


def git_commit() -> str:
    """The checkout's commit, with ``+dirty`` when tracked files differ from it."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True).stdout.strip()

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    return commit + ("+dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def load_now() -> dict[str, Any]:
    """The load average now: ``loadavg`` (1/5/15 min) and ``loadavg_1m`` (what docs/gen_tables.py reads)."""
    loadavg = [round(x, 2) for x in os.getloadavg()]
    return {"loadavg_1m": loadavg[0], "loadavg": loadavg}


def machine() -> str:
    """CPU architecture, core count and Python version: the machine line of every result."""
    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


def run_meta(threads: Any = None, **extra: Any) -> dict[str, Any]:
    """Date (UTC), machine, load averages (1/5/15 min), thread count and git commit; ``extra`` is kept
    (and wins: a script may say more about its machine or its threads)."""
    return {
        "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": machine(),
        **load_now(),
        "threads": threads,
        "commit": git_commit(),
        **extra,
    }


def children_cpu_s() -> float:
    """User + system seconds of this process's finished children (what a fresh-process timing reads)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


#: The start of a fresh child process that times its own steps: ``mark(name)`` after each step, then
#: ``print_stages()`` prints ``{name: seconds}`` as one JSON line (bench_cold_start, bench_cold_search_1m).
STAGE_TIMER = """
import json, sys, time
t = [time.perf_counter()]
names = []
def mark(name):
    t.append(time.perf_counter()); names.append(name)
def print_stages():
    print(json.dumps({n: round(b - a, 3) for n, a, b in zip(names, t, t[1:])}))
"""


def time_command(command: list[str], runs: int, env: dict[str, str], expect: str = "") -> dict[str, Any]:
    """``command`` in ``runs`` fresh processes: median / min / max wall (what a user waits; inflated by the
    machine's load) and median CPU seconds (user + system: far less sensitive to other processes on a
    shared machine), and the load before and after; stops with the command's output when it fails or its
    stdout lacks ``expect``."""
    import statistics
    import time

    times, cpu = [], []
    load_before = load_now()["loadavg_1m"]
    for _ in range(runs):
        start, cpu_start = time.perf_counter(), children_cpu_s()
        done = subprocess.run(command, capture_output=True, text=True, env=env)
        times.append(time.perf_counter() - start)
        cpu.append(children_cpu_s() - cpu_start)
        if done.returncode != 0 or expect not in done.stdout:
            raise SystemExit(f"{' '.join(command)}: {done.stdout[-400:]} {done.stderr[-400:]}")
    return {
        "median_s": round(statistics.median(times), 3),
        "min_s": round(min(times), 3),
        "max_s": round(max(times), 3),
        "median_cpu_s": round(statistics.median(cpu), 3),
        "runs": runs,
        "load_1min": [load_before, load_now()["loadavg_1m"]],
    }


def time_vsekit(argv: list[str], runs: int, env: dict[str, str], expect: str = "") -> dict[str, Any]:
    """:func:`time_command` of ``python -m vsekit ARGV``."""
    return time_command([sys.executable, "-m", "vsekit", *argv], runs, env, expect)


def latency_ms(seconds: Iterable[float], percentiles: Iterable[int] = (50, 99)) -> dict[str, float]:
    """``{"p50_ms": ..., "p99_ms": ...}`` of durations given in seconds (unrounded)."""
    ms = 1000.0 * np.asarray(list(seconds), dtype=np.float64)
    return {f"p{q}_ms": float(np.percentile(ms, q)) for q in percentiles}


def peak_rss_mb(children: bool = False) -> float:
    """Peak resident memory in MiB of this process (or of its waited-for children), from ``ru_maxrss``
    (KiB on Linux). A child's figure carries the parent's peak across ``exec``: read ``VmHWM`` of the
    child (:func:`proc_status_kib`) where that matters."""
    who = resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF
    return resource.getrusage(who).ru_maxrss / 1024


def proc_status_kib(pid: int | str = "self", keys: Iterable[str] = ("VmRSS", "VmHWM")) -> dict[str, int]:
    """Memory fields of ``/proc/<pid>/status`` in KiB (Linux): VmRSS now, VmHWM its peak, RssAnon..."""
    wanted = set(keys)
    fields: dict[str, int] = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in wanted:
                fields[key] = int(value.split()[0])
    return fields


def memory_gb() -> dict[str, float]:
    """This process's RSS now and its peak, in GB (10^9 bytes), rounded to 0.01."""
    now = proc_status_kib(keys=("VmRSS",))["VmRSS"] / 1e6
    return {"rss_gb": round(now, 2), "peak_rss_gb": round(peak_rss_mb() * 1024 / 1e6, 2)}


def write_result(name: str | Path, result: dict[str, Any], indent: int = 1, default: Any = None) -> Path:
    """Write ``bench/results/<name>`` (or the path ``name``, when it is one) as pretty JSON with a
    trailing newline."""
    path = name if isinstance(name, Path) else RESULTS / name
    path.write_text(json.dumps(result, indent=indent, default=default) + "\n", encoding="utf-8")
    return path


def write_labelled(path: Path, label: str, result: dict[str, Any], benchmark: str, target: str) -> Path:
    """Put ``result`` under ``label`` in the JSON at ``path`` (before/after runs of one benchmark side by
    side), keeping the other labels; ``benchmark`` and ``target`` name the file's contents."""
    previous = json.loads(path.read_text()) if path.is_file() else {}
    previous.setdefault("benchmark", benchmark)
    previous.setdefault("target", target)
    previous[label] = result
    return write_result(path, previous)


def model_extra(path: str | Path) -> dict[str, Any]:
    """The ``extra`` header of a vsekit model file (recipe, epoch, dev numbers), read without loading it."""
    from safetensors import safe_open

    with safe_open(str(path), framework="np") as f:
        return json.loads((f.metadata() or {}).get("extra", "{}"))


def read_run_log(run: str | Path) -> list[dict[str, Any]]:
    """A training run's ``log.jsonl``: one dict per finished epoch, read by the trainers' own reader
    (:func:`vsekit.training.read_log`: a line cut short by a run still writing it is skipped). A run
    without a log is an error (FileNotFoundError), not an empty list."""
    from vsekit.training.rundir import LOG_NAME, read_log

    path = Path(run) / LOG_NAME
    if not path.is_file():
        raise FileNotFoundError(path)
    return read_log(path, upto=sys.maxsize)


def time_v(path: Path) -> dict[str, float]:
    """Wall seconds and peak RSS (``peak_rss_gb``, decimal GB; ``peak_rss_mb``, MiB) from ``/usr/bin/time -v``
    output in ``path`` (a run started under it: its log), or {} when the file is missing or holds none."""
    if not path.is_file():
        return {}
    text = path.read_text(errors="replace")
    out: dict[str, float] = {}
    if m := re.search(r"Maximum resident set size \(kbytes\): (\d+)", text):
        out["peak_rss_gb"] = round(int(m.group(1)) / 1e6, 2)
        out["peak_rss_mb"] = round(int(m.group(1)) / 1024, 1)
    if m := re.search(r"Elapsed \(wall clock\) time.*: (?:(\d+):)?(\d+):([\d.]+)", text):
        h, mnt, sec = int(m.group(1) or 0), int(m.group(2)), float(m.group(3))
        out["wall_seconds"] = round(3600 * h + 60 * mnt + sec, 1)
    return out


def dev_recalls(dev: dict[str, Any]) -> dict[str, float]:
    """A run log's ranking entry (``{"i2t": {"r1", ...}, "t2i": ..., "rsum"}``) as flat rounded fields."""
    out = {f"{side}_{k}": round(dev[side][k], 2) for side in ("i2t", "t2i") for k in ("r1", "r5", "r10")}
    return {**out, "rsum": round(dev["rsum"], 2)}
