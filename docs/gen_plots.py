"""Draw the benchmark plots of the docs from bench/results/*.json (SVG, byte-stable for the same JSON).

    python docs/gen_plots.py            # write docs/img/plots/*.svg
    python docs/gen_plots.py --check    # exit 1 if a plot differs from what the JSON draws

Like the tables (docs/gen_tables.py), the plots are never drawn by hand: `make docs` redraws them.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
OUT = ROOT / "docs" / "img" / "plots"

# the same bytes for the same data: no date in the file, fixed ids, text kept as text
plt.rcParams.update({"svg.hashsalt": "vsekit-docs", "svg.fonttype": "none", "font.size": 9})


def load(name: str) -> dict[str, Any]:
    return json.loads((RESULTS / name).read_text(encoding="utf-8"))


def engines_recall_latency() -> plt.Figure:
    """Recall@10 against p50 latency of the ANN engines' settings, per collection size (search.json)."""
    d = load("search.json")
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    for e in d["engines"]:
        for eng, knob, marker in (("hnsw", "efSearch", "o"), ("ivf", "nprobe", "s")):
            sweep = e[eng]["sweep"]
            ax.plot(
                [s["p50_ms"] for s in sweep],
                [s["recall@10"] for s in sweep],
                marker=marker,
                ms=3,
                label=f"{eng.upper()} ({knob}), {e['n']:,} vectors",
            )
        ax.scatter([e["exact"]["p50_ms"]], [1.0], marker="*", s=60, zorder=3, label=f"exact, {e['n']:,}")
    ax.set_xscale("log")
    ax.set_xlabel("p50 latency per query (ms, log scale)")
    ax.set_ylabel("recall@10 against exact search")
    ax.set_title("Search engines: recall against latency (synthetic 2048-d, photo-like queries)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    return fig


def scaling_curves() -> plt.Figure:
    """Exact and IVF-PQ query time and IVF-PQ build time against collection size (scaling_search.json and
    ivfpq_10m.json)."""
    d = load("scaling_search.json")
    big = load("ivfpq_10m.json")
    n = [r["n"] for r in d["rows"]]
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    ax.plot(n, [r["exact"]["p50_ms"] for r in d["rows"]], "o-", label="exact search, p50 ms")
    ax.plot(
        n, [r["ivfpq_query"]["p50_ms"] for r in d["rows"]], "s-", label="IVF-PQ search (calibrated), p50 ms"
    )
    best = max(big["sweep_new"], key=lambda s: s["new"]["recall@10"])
    ax.plot(
        [big["n"]],
        [best["new"]["p50_ms"]],
        "s",
        color="C1",
        mfc="none",
        label=f"IVF-PQ at 10M (nprobe {best['nprobe']}, loaded machine)",
    )
    ax.plot(
        [*n, big["n"]],
        [*(r["ivfpq_build_s"] for r in d["rows"]), big["build_s"]],
        "^--",
        label="IVF-PQ build, s (10M: loaded machine)",
    )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("vectors (256-d, float16, memory-mapped)")
    ax.set_ylabel("ms per query / s per build")
    ax.set_title("How search costs grow with the collection (1 thread)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    return fig


def alignment_training() -> plt.Figure:
    """Dev rsum by epoch of the aligner runs (alignment.json)."""
    d = load("alignment.json")
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    runs = {"brnn-grid": d["training"]["dev_rsum_by_epoch"]}
    names = {"lr 5e-4 constant (first try)": "minilm-grid-constant-lr"}
    for name, run in d["minilm_grid"]["runs"].items():
        runs[names.get(name, name)] = run["dev_rsum_by_epoch"]
    for name, rsums in runs.items():
        ax.plot(range(1, len(rsums) + 1), rsums, "o-", ms=3, label=name)
    ax.axhline(199.9, color="grey", ls=":", label="Karpathy 2015 BRNN (paper, test)")
    ax.set_xlabel("epoch")
    ax.set_ylabel("dev rsum")
    ax.set_title("Training the region aligner: dev rsum by epoch")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    return fig


PLOTS: dict[str, Callable[[], plt.Figure]] = {
    "engines-recall-latency": engines_recall_latency,
    "scaling": scaling_curves,
    "alignment-training": alignment_training,
}


def render(name: str) -> bytes:
    fig = PLOTS[name]()
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None})
    plt.close(fig)
    return buffer.getvalue()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if a plot differs from its JSON")
    args = parser.parse_args()
    stale = []
    OUT.mkdir(parents=True, exist_ok=True)
    for name in PLOTS:
        path = OUT / f"{name}.svg"
        data = render(name)
        if not path.is_file() or path.read_bytes() != data:
            stale.append(path.name)
            if not args.check:
                path.write_bytes(data)
    if args.check and stale:
        print(
            f"plots differ from bench/results: {', '.join(stale)} (run python docs/gen_plots.py)",
            file=sys.stderr,
        )
        return 1
    if not args.check:
        print(f"{len(PLOTS)} plots, {len(stale)} redrawn")
    return 0


if __name__ == "__main__":
    sys.exit(main())
