"""The scaling report (issue 14, item 5): measured cost curves, fitted growth, and projections.

Reads what the benches measured on this machine (``bench/results/``): ``extract.json`` (feature
extraction), ``scaling_search.json`` (exact search and IVF-PQ at 1K / 10K / 100K), ``ivfpq_10m.json``
(10M), ``search.json`` (1M exact and IVF at 2048-d, issue 11), ``corpus_memory.json`` (reading a COCO-
sized corpus); the training epoch cost is the one measured for the shipped ``vse`` recipe on Flickr8K
(README, "Joint embedding"). ``ddp.json`` / ``ray.json`` are cited when present. Writes ``scaling.json``:

* ``curves``: every measured point, with its source;
* ``fits``: for each curve, the exponent b of t = a n^b (least squares on log-log) and which of
  t = a n and t = a n log n fits better (smaller squared log error);
* ``projections``: COCO (123,287 images, 616,435 captions), 10M and 100M photos on N machines, with
  the memory and disk each machine needs. **Projections, not measurements**: linear extrapolations of
  the measured per-item costs (stated with each).

    python bench/scaling_report.py
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from _common import run_meta, write_result

RESULTS = Path(__file__).parent / "results"
COCO_IMAGES, COCO_CAPTIONS = 123_287, 616_435
#: The shipped `vse` recipe on Flickr8K (README, Joint embedding): 30,000 training captions; the first
#: epoch (which encodes every training caption with MiniLM once, then cached) about 100 s, later
#: epochs about 6 s (1 thread).
TRAIN_CAPTIONS, FIRST_EPOCH_S, EPOCH_S = 30_000, 100.0, 6.0
EMBED_DIM = 2048
#: Bytes per vector of an IVF-PQ index (64 one-byte codes + an 8-byte id; the same at 256-d and 2048-d).
IVFPQ_BYTES = 64 + 8


def _load(name: str) -> dict | None:
    path = RESULTS / name
    return json.loads(path.read_text()) if path.is_file() else None


def fit(points: list[tuple[float, float]]) -> dict:
    """Exponent of t = a n^b, and whether a n or a n log n fits the points better (log-space error)."""
    xs = [math.log(n) for n, _ in points]
    ys = [math.log(t) for _, t in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)

    def err(model) -> float:
        logs = [y - math.log(model(n)) for (n, _), y in zip(points, ys, strict=True)]
        c = sum(logs) / len(logs)  # the best constant a, in log space
        return sum((v - c) ** 2 for v in logs)

    linear, nlogn = err(lambda n: n), err(lambda n: n * math.log(n))
    return {
        "exponent": round(b, 3),
        "points": len(points),
        "better": "n" if linear <= nlogn else "n log n",
        "sq_log_error": {"n": round(linear, 4), "n log n": round(nlogn, 4)},
    }


def curves() -> dict:
    out: dict = {}
    scaling, tenm, search = _load("scaling_search.json"), _load("ivfpq_10m.json"), _load("search.json")
    rows = (scaling or {}).get("rows", [])
    out["exact_query_p50_ms_256d"] = [[r["n"], r["exact"]["p50_ms"]] for r in rows]
    out["ivfpq_build_s_256d"] = [[r["n"], r["ivfpq_build_s"]] for r in rows]
    out["ivfpq_query_p50_ms_256d"] = [[r["n"], r["ivfpq_query"]["p50_ms"]] for r in rows]
    out["ivfpq_recall@10_256d"] = [[r["n"], r["ivfpq_query"]["recall@10_new"]] for r in rows]
    out["ivfpq_index_bytes_256d"] = [[r["n"], r["ivfpq_bytes"]] for r in rows]
    if tenm and "build_s" in tenm:
        out["ivfpq_build_s_256d"].append([tenm["n"], tenm["build_s"]])
        out["ivfpq_index_bytes_256d"].append([tenm["n"], tenm["index"]["bytes"]])
        best = _calibrated_row(tenm)
        if best:
            out["ivfpq_query_p50_ms_256d"].append([tenm["n"], best["new"]["p50_ms"]])
            out["ivfpq_recall@10_256d"].append([tenm["n"], best["new"]["recall@10"]])
    if search and "engines_1m" in search:
        m = search["engines_1m"]
        out["exact_query_p50_ms_2048d_1m"] = [[m["n"], m["exact_vs_flat"]["exact"]["p50_ms"]]]
        out["ivf_sq_build_s_2048d_1m"] = [[m["n"], m["ivf_quantizer"]["train_s"] + m["ivf_sq"]["add_s"]]]
    extract = _load("extract.json")
    if extract:
        # the default engine's whole-Flickr8K run (bench_extract.py --full-only); older files had one run
        runs = extract.get("full_flickr8k_runs", {}).get("runs", [])
        full = next((r for r in runs if r["engine"] == "auto"), None) or extract["full_flickr8k"]
        out["extraction_img_s"] = [[full["images"], full["img_s"]]]
        out["extraction_peak_rss_mb_batch32"] = [  # the default runs only (other rows vary the batch)
            [r["images"], r["peak_rss_mb"]]
            for r in extract["memory"]["rows"]
            if r["suspect"].startswith("default")
        ]
    out["training_epoch_s_vse"] = [[TRAIN_CAPTIONS, EPOCH_S]]
    return out


def _calibrated_row(tenm: dict) -> dict | None:
    """The fastest swept setting of the 10M run whose recall@10 on new queries reaches 0.95."""
    ok = [r for r in tenm.get("sweep_new", []) if r["new"]["recall@10"] >= 0.95]
    return min(ok, key=lambda r: r["new"]["p50_ms"]) if ok else None


def projections(c: dict) -> dict:
    img_s = c["extraction_img_s"][0][1] if c.get("extraction_img_s") else 86.0
    per_caption_first = FIRST_EPOCH_S / TRAIN_CAPTIONS
    per_caption = EPOCH_S / TRAIN_CAPTIONS
    corpus = (_load("corpus_memory.json") or {}).get("after", {}).get("karpathy", {})
    out = {
        "note": "PROJECTIONS (linear in the per-item costs measured on this 2-core machine), not measured",
        "per_item": {
            "extraction_s_per_image": 1 / img_s,
            "training_first_epoch_s_per_caption": per_caption_first,
            "training_epoch_s_per_caption": per_caption,
            "float16_store_bytes_per_photo_2048d": 2 * EMBED_DIM,
            "ivfpq_bytes_per_photo": IVFPQ_BYTES,
        },
        "coco": {
            "images": COCO_IMAGES,
            "captions": COCO_CAPTIONS,
            "extraction_h_1_machine": COCO_IMAGES / img_s / 3600,
            "feature_cache_gb_1280d_float16": COCO_IMAGES * 1280 * 2 / 1e9,
            "training_first_epoch_min": COCO_CAPTIONS * per_caption_first / 60,
            "training_epoch_min": COCO_CAPTIONS * per_caption / 60,
            "corpus_read_peak_rss_gb": corpus.get("peak_rss_mb", float("nan")) / 1e3,
            "index_store_gb_2048d_float16": COCO_IMAGES * 2 * EMBED_DIM / 1e9,
        },
    }
    for photos in (10_000_000, 100_000_000):
        rows = []
        for machines in (1, 4, 16, 64):
            per = photos / machines
            rows.append(
                {
                    "machines": machines,
                    "extraction_h": per / img_s / 3600,
                    "store_disk_gb_per_machine": per * 2 * EMBED_DIM / 1e9,
                    "ivfpq_ram_gb_per_machine": per * IVFPQ_BYTES / 1e9,
                }
            )
        out[f"{photos // 1_000_000}M_photos"] = rows
    return out


def main() -> None:
    c = curves()
    fits = {
        name: fit(points)
        for name, points in c.items()
        if len(points) >= 3 and "recall" not in name and all(t > 0 for _, t in points)
    }
    result = {
        "benchmark": "scaling",
        **run_meta(
            threads="none: a report over bench/results, nothing measured here",
            machine="x86_64, 2 cores, 24 GB, no GPU, shared with other jobs (latencies pessimistic)",
        ),
        "sources": sorted(p.name for p in RESULTS.glob("*.json") if p.name != "scaling.json"),
        "curves": c,
        "fits": fits,
        "projections": projections(c),
        "cited_if_present": {name: (RESULTS / name).is_file() for name in ("ddp.json", "ray.json")},
    }
    write_result("scaling.json", result)
    print(json.dumps({"fits": fits, "projections": result["projections"]}, indent=1))


if __name__ == "__main__":
    main()
