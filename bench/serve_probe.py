"""``vsekit serve`` with memory probes, for ``bench_serve_load.py --probe`` (issue 15: where does RSS go?).

Runs the same server as ``vsekit serve INDEX --host H --port P`` with two signal handlers, both writing
into the folder ``--probe-dir``:

* SIGUSR1: ``gc.collect()``; the first one starts tracemalloc (``--frames`` frames per allocation; not
  earlier: importing torch under tracemalloc takes minutes), so snapshot k > 1 holds what requests allocated
  after the first signal and still keep; then (unless ``--frames 0``) a tracemalloc snapshot to
  ``snap_<k>.tracemalloc`` (k = 1, 2, ...) and a line
  ``{"k", "rss_kib", "traced_kib", "mallinfo2"}`` appended to ``probe.jsonl``;
* SIGUSR2: glibc ``malloc_trim(0)`` (give free heap pages back to the system) and a line with the RSS
  before and after it appended to ``probe.jsonl``.

A growth that tracemalloc sees between two snapshots is Python objects kept alive (ours to fix); RSS that
grows while traced memory does not, and that ``malloc_trim`` gives back, is freed memory the allocator
keeps (fragmentation), not a leak.

    python bench/serve_probe.py INDEX --host 127.0.0.1 --port 8000 --probe-dir DIR [--frames 8]
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import signal
import tracemalloc
from pathlib import Path


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks")
        + ("fordblks", "keepcost")
    ]


def _rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _mallinfo(libc: ctypes.CDLL) -> dict[str, int]:
    """glibc's heap totals in KiB: arena (sbrk heap, main arena only), hblkhd (mmapped), uordblks (in use),
    fordblks (free but kept)."""
    try:
        libc.mallinfo2.restype = _MallInfo2
        info = libc.mallinfo2()
    except AttributeError:  # glibc < 2.33
        return {}
    return {name: getattr(info, name) // 1024 for name in ("arena", "hblkhd", "uordblks", "fordblks")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("index")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--probe-dir", type=Path, required=True)
    parser.add_argument("--frames", type=int, default=8, help="0: no tracemalloc (RSS and malloc only)")
    args = parser.parse_args()
    args.probe_dir.mkdir(parents=True, exist_ok=True)
    log = args.probe_dir / "probe.jsonl"
    libc = ctypes.CDLL("libc.so.6")
    count = [0]

    def write(row: dict) -> None:
        with log.open("a") as f:
            f.write(json.dumps(row) + "\n")

    def snapshot(*_: object) -> None:
        gc.collect()
        count[0] += 1
        traced = None
        if args.frames and not tracemalloc.is_tracing():  # from now on: what requests allocate and keep
            tracemalloc.start(args.frames)
        if tracemalloc.is_tracing():
            tracemalloc.take_snapshot().dump(str(args.probe_dir / f"snap_{count[0]}.tracemalloc"))
            traced = tracemalloc.get_traced_memory()[0] // 1024
        write({"k": count[0], "rss_kib": _rss_kib(), "traced_kib": traced, "mallinfo2": _mallinfo(libc)})

    def trim(*_: object) -> None:
        before = _rss_kib()
        libc.malloc_trim(0)
        write({"malloc_trim": True, "rss_before_kib": before, "rss_after_kib": _rss_kib()})

    signal.signal(signal.SIGUSR1, snapshot)
    signal.signal(signal.SIGUSR2, trim)
    from vsekit.serve import run

    run(args.index, host=args.host, port=args.port)


if __name__ == "__main__":
    main()
