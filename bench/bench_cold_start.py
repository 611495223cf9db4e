"""Benchmark: what a cold `vsekit search` waits for, and the first query of `vsekit serve` (issue 34 item 7:
search from a cold process <= 2 s p50 on the 2-core machine; serve's first query after "serving" <= 1 s).

Three measurements on an index of the everyday photos (built once in a temporary folder, or ``--index``):

* ``search``: ``vsekit search INDEX "a dog on the beach"`` in a fresh process, ``--runs`` times: median wall
  (inflated by a shared machine's load) and CPU time.
* ``stages``: one fresh process timing each step of that search in order: importing the CLI's modules,
  opening the index, loading the text side (the cached ONNX graph of the model's text side, or, before
  it existed, the joint model with its MiniLM in PyTorch), the first sentence embedding, the concept
  route (class vectors from the disk cache), and the answer.
* ``serve``: ``vsekit serve`` started on a free port: seconds until it says "serving", then the first and
  the second ``/api/search`` answer.

Python writes bytecode to a private cache (``PYTHONPYCACHEPREFIX``), as an installed package has it.

    python bench/bench_cold_start.py --label before|after [--runs 5] [--src OTHER_CHECKOUT/src]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import REPO, STAGE_TIMER, run_meta, time_vsekit, write_labelled

RESULTS = Path(__file__).resolve().parent / "results" / "cold_start.json"
EVERYDAY = REPO.parent / "shared" / "data" / "everyday" / "photos"
QUERY = "a dog on the beach"
STAGES = (
    STAGE_TIMER
    + """
import vsekit.cli.search, vsekit.collection, vsekit.retrieval.answer
mark("import")
index = vsekit.collection.Index.open(sys.argv[1]); len(index)
mark("open_index")
getattr(index, "text_side", lambda: index.model)()  # (index.model before the text graph)
mark("text_side")
index.embed_texts(["a cat"])
mark("first_sentence")
index.concept_route(0.25).class_vectors()
mark("concept_route")
index.answer(sys.argv[2], k=10)
mark("answer")
print_stages()
"""
)


def _serve(index: Path, env: dict[str, str]) -> dict:
    import httpx

    start = time.perf_counter()
    command = [sys.executable, "-m", "vsekit", "serve", str(index), "--port", "0"]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        for line in server.stdout:
            found = re.search(r"serving .* on (http://\S+) ", line)
            if found:
                break
        else:
            raise SystemExit("vsekit serve stopped before serving")
        serving = time.perf_counter() - start
        answers = []
        for query in (QUERY, "two children playing football"):
            t0 = time.perf_counter()
            done = httpx.get(f"{found.group(1)}/api/search", params={"q": query}, timeout=300)
            answers.append(round(time.perf_counter() - t0, 3))
            done.raise_for_status()
    finally:
        server.terminate()
        server.wait(timeout=30)
    return {"until_serving_s": round(serving, 3), "first_query_s": answers[0], "second_query_s": answers[1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--label", required=True, help="Where the numbers go, e.g. before or after.")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--index", type=Path, help="An index of the everyday photos (default: built now).")
    parser.add_argument("--src", type=Path, help="Time the vsekit in this src/ folder (another commit's).")
    parser.add_argument("--src-commit", help="The commit --src was exported from (recorded as is).")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="vsekit-cold-") as tmp:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
        if args.src is not None:
            env["PYTHONPATH"] = str(args.src.resolve())
        index = args.index or Path(tmp) / "index"
        if args.index is None:
            build = [
                sys.executable,
                "-m",
                "vsekit",
                "-q",
                "index",
                "build",
                str(EVERYDAY),
                "--out",
                str(index),
            ]
            subprocess.run(build, check=True, env=env)
        time_vsekit(["search", str(index), QUERY], 1, env)  # warm the page cache and the bytecode cache
        search = time_vsekit(["search", str(index), QUERY], args.runs, env)
        stages = json.loads(
            subprocess.run(
                [sys.executable, "-c", STAGES, str(index), QUERY], capture_output=True, text=True, env=env
            ).stdout.splitlines()[-1]
        )
        serve = _serve(index, env)
    print(
        f"search median {search['median_s']} s, cpu {search['median_cpu_s']} s (load {search['load_1min']})"
    )
    print("stages", stages)
    print("serve", serve)
    timed = {"commit": args.src_commit or "unknown"} if args.src is not None else {}
    result = {**run_meta(threads="default", **timed), "search": search, "stages_s": stages, "serve": serve}
    target = "vsekit search cold <= 2 s p50; serve's first query <= 1 s (issue 34 item 7)"
    write_labelled(RESULTS, args.label, result, "cold_start", target)


if __name__ == "__main__":
    main()
