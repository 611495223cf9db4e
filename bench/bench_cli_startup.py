"""Benchmark: how long `vsekit --help` and friends take to start (issue 22 item 9: under 0.5 s).

Each command runs ``--runs`` times in a fresh process (the installed ``vsekit`` script, else
``python -m vsekit.cli``); the median wall time is kept with the load average before and after, since the
machine is shared. ``python -X importtime -c "import vsekit.cli"`` gives the import cost of the CLI
package, the heaviest modules it pulls in, and whether torch is among them.

    python bench/bench_cli_startup.py --label before|after [--runs 5] [--src OTHER_CHECKOUT/src]

Merges its numbers under ``--label`` into bench/results/cli_startup.json (other labels are kept, so a
before and an after run sit side by side).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from _common import run_meta, time_command, write_labelled

RESULTS = Path(__file__).resolve().parent / "results" / "cli_startup.json"
COMMANDS = (["--help"], ["search", "--help"], ["index", "build", "--help"], ["--version"])


def _vsekit(src: Path | None) -> list[str]:
    script = Path(sys.executable).with_name("vsekit")
    return [str(script)] if script.is_file() and src is None else [sys.executable, "-m", "vsekit.cli"]


def _importtime(env: dict[str, str]) -> dict:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import vsekit.cli"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    rows = []  # (cumulative microseconds, module)
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative, name = line.split(":", 1)[1].split("|")
        rows.append((int(cumulative), name[1:].rstrip()))  # two spaces of indent per nesting level
    top_level = {name: us for us, name in rows if not name.startswith(" ")}
    # what vsekit.cli pulls in, two levels down (torch shows up under whichever module imports it first)
    near = {name.strip(): us for us, name in rows if name.startswith("  ") and not name.startswith("     ")}
    heaviest = sorted(((us, name) for name, us in near.items()), reverse=True)[:10]
    return {
        "import_vsekit_cli_s": round(top_level.get("vsekit.cli", 0) / 1e6, 3),
        "torch_imported": "torch" in {name.strip() for _, name in rows},
        "heaviest_imports_s": {name: round(us / 1e6, 3) for us, name in heaviest},
    }


def _commit(src: Path | None) -> str:
    where = src.parent if src is not None else Path(__file__).resolve().parent
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False, cwd=where
    )
    return done.stdout.strip() or "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--label", required=True, help="Where the numbers go, e.g. before or after.")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--src", type=Path, help="Time the vsekit in this src/ folder (e.g. a worktree of an older commit)."
    )
    parser.add_argument("--src-commit", help="The commit --src was exported from (recorded as is).")
    args = parser.parse_args()
    env = dict(os.environ)
    if args.src is not None:
        env["PYTHONPATH"] = str(args.src.resolve())
    base = _vsekit(args.src)
    time_command([*base, "--help"], 1, env)  # warm the page cache: every run below reads the same files
    commands = {
        " ".join(["vsekit", *argv]): time_command([*base, *argv], args.runs, env) for argv in COMMANDS
    }
    for name, row in commands.items():
        print(
            f"{name:<28} median {row['median_s']:.3f} s, cpu {row['median_cpu_s']:.3f} s "
            f"(load {row['load_1min']})",
            flush=True,
        )
    # the commit timed is --src's when one is given, else this checkout's (run_meta's)
    timed = {"commit": args.src_commit or _commit(args.src)} if args.src is not None else {}
    result = {
        **run_meta(
            threads="one process per run, default torch threads (no torch import is the point)", **timed
        ),
        "commands": commands,
        "importtime": _importtime(env),
    }
    print(json.dumps(result["importtime"], indent=1))
    target = "vsekit --help and vsekit search --help under 0.5 s (issue 22 item 9)"
    write_labelled(RESULTS, args.label, result, "cli_startup", target)


if __name__ == "__main__":
    main()
