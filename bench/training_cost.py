"""Training time and peak memory of a shipped recipe on this machine (the model table's last columns).

    python bench/training_cost.py train bench/recipes/bow-retrain.json [--data ../shared/data/flickr8k]
    python bench/training_cost.py train bench/recipes/vse-views-retrain.json

Runs ``vsekit COMMAND --data DATA --recipe RECIPE --out TMP --no-progress`` as a child, the command a user
runs, and records its wall time and the peak resident memory of the child (``ru_maxrss`` of the waited
child; the parent here stays small, under 100 MB, so its peak does not mask the child's). Features
already in the cache are read from it, as on a second run of a user's training; the record says so.
Rows are merged by recipe name into bench/results/training_cost.json; the model cards read them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import load_now, peak_rss_mb, run_meta, write_result
from vsekit.resources import default_cache_root

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("VSEKIT_SHARED_DATA", REPO.parent / "shared" / "data" / "flickr8k"))
RESULTS = REPO / "bench" / "results" / "training_cost.json"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "command", choices=("train", "train-captioner", "train-aligner", "train-region-captioner")
    )
    parser.add_argument("recipe", type=Path)
    parser.add_argument("--data", type=Path, default=SHARED)
    parser.add_argument("--aligner", help="train-region-captioner: the aligner whose snippets it learns")
    args = parser.parse_args()
    recipe = json.loads(args.recipe.read_text(encoding="utf-8"))
    vsekit = str(Path(sys.executable).parent / "vsekit")
    minilm = recipe.get("text_encoder") == "minilm" or recipe.get("words") == "minilm"
    before = load_now()
    sentences = any((default_cache_root() / "sentences").glob("*.safetensors"))  # a previous run's
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [vsekit, args.command, "--data", str(args.data), "--recipe", str(args.recipe)]
        cmd += ["--out", str(Path(tmp) / "run"), "--no-progress"]
        cmd += ["--aligner", args.aligner] if args.aligner else []
        start = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - start
    row = {
        **run_meta(threads=recipe.get("num_threads")),
        "load_before": before["loadavg"],
        "command": f"vsekit {args.command} --recipe {args.recipe} --no-progress"
        + (f" --aligner {args.aligner}" if args.aligner else ""),
        "wall_s": round(wall, 1),
        "peak_rss_mb": round(peak_rss_mb(children=True)),
        "note": "image features already in the cache are read from it (a second run)"
        + (
            f"; MiniLM sentence vectors {'read from' if sentences else 'written to'} the cache"
            if minilm
            else ""
        ),
    }
    rows = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {"benchmark": "training cost"}
    # the first run on a machine and a later one (the sentence vectors read back) are kept apart
    warm = minilm and sentences
    name = recipe.get("name", args.recipe.stem)  # a recipe file may leave its name to its file name
    rows[name + (" (sentence vectors cached)" if warm else "")] = row
    write_result(RESULTS, rows, indent=2)
    print(f"{name}: {wall / 60:.1f} min wall, peak RSS {row['peak_rss_mb']} MB")


if __name__ == "__main__":
    main()
