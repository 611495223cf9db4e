"""What the scripts in ship/ share: the benchmarks' record helpers, and the data they all read.

    from _common import SHARED, run_meta, write_result
    write_result("vse_reselect.json", {"meta": run_meta(threads=1), ...})

Scripts run as ``python ship/NAME.py``, so ``ship/`` is on the path and ``_common`` imports as this file.
The record helpers (``REPO``, ``RESULTS``, ``run_meta``, ``write_result``, ``model_extra``,
``read_run_log``, ...) have one copy, ``bench/_common.py``: it is loaded here from its path under the name
``bench_common`` (both files are called ``_common``, so a ``sys.path`` entry could not tell them apart) and
its names are re-exported. A selection script's JSON goes where a benchmark's goes, ``bench/results/``: the
docs' tables read it there. ``bench/`` is appended to ``sys.path`` (after ``ship/``) for the everyday
validation set, ``from everyday import dataset`` (bench/everyday/).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType


def _bench_common() -> ModuleType:
    path = Path(__file__).resolve().parents[1] / "bench" / "_common.py"
    spec = importlib.util.spec_from_file_location("bench_common", path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_common"] = module
    spec.loader.exec_module(module)
    return module


_bench = _bench_common()
REPO: Path = _bench.REPO
RESULTS: Path = _bench.RESULTS
git_commit = _bench.git_commit
load_now = _bench.load_now
run_meta = _bench.run_meta
write_result = _bench.write_result
model_extra = _bench.model_extra
read_run_log = _bench.read_run_log
peak_rss_mb = _bench.peak_rss_mb
latency_ms = _bench.latency_ms
time_v = _bench.time_v

if str(REPO / "bench") not in sys.path:
    sys.path.append(str(REPO / "bench"))

#: The Flickr8K download beside the checkout (``../shared/data/flickr8k``), or ``$VSEKIT_SHARED_DATA``.
SHARED = Path(os.environ.get("VSEKIT_SHARED_DATA", REPO.parent / "shared" / "data" / "flickr8k"))


#: Where the shipped files live (``src/vsekit/pretrained/``): what ``ship_*.py`` and the stamping write.
PRETRAINED_DIR = REPO / "src" / "vsekit" / "pretrained"

__all__ = [
    "time_v",
    "PRETRAINED_DIR",
    "REPO",
    "RESULTS",
    "SHARED",
    "git_commit",
    "latency_ms",
    "load_now",
    "model_extra",
    "peak_rss_mb",
    "read_run_log",
    "run_meta",
    "write_result",
]
