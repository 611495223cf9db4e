"""Benchmark: image-feature extraction, per stage and end to end, ONNX Runtime and PyTorch engines.

For each backbone (MobileNetV2, EfficientNet-Lite0) and feature set (one-layer, FNE raw taps), on the
first --images photos of ../shared/data/flickr8k (the bundled sample without it):
  * the stages one at a time, single-threaded Python around them: decode (JPEG -> RGB), resize + crop
    (-> uint8 crops), normalise (PyTorch engine only; ONNX Runtime does it inside its graph), network
    (each engine, batches of --batch-size, network threads = torch threads), cache write (float16 rows
    into the memory map, plus one commit);
  * end to end, `extract_features` into a fresh cache (decode threads overlapping the network), for the
    default engine (auto) and for --engine torch;
  * the engines' network-only rates, so "default engine end to end / ORT network-only" reads directly;
a batch-size x decode-threads sweep for MobileNetV2 one-layer (default engine); and, unless --skip-full,
`vsekit extract` over every Flickr8K photo in a fresh cache, wall time and peak RSS read by a small
launcher (bench_extract_memory.py), default engine and --engine torch.

Prints a table and merges its keys into bench/results/extract.json (the "memory" section is kept).

    python bench/bench_extract.py [--images 256] [--batch-size 32] [--skip-full]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from _common import run_meta, write_result

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("VSEKIT_SHARED_DATA", REPO.parent / "shared" / "data" / "flickr8k"))
RESULTS = REPO / "bench" / "results"


def _measure(fn, repeats: int = 1) -> tuple[float, float]:
    """Best wall time and best process CPU time (all threads) of ``repeats`` calls of ``fn``.

    On a loaded machine the wall time mostly measures the other jobs; the CPU time of this process is what
    the work itself costs, and 2,000 / (CPU ms per image) bounds the rate on 2 idle cores.
    """
    wall, cpu = float("inf"), float("inf")
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        wall = min(wall, time.perf_counter() - start)
        cpu = min(cpu, time.process_time() - start_cpu)
    return wall, cpu


def _timed(fn, repeats: int = 1) -> float:
    return _measure(fn, repeats)[0]


def stages(files: list[Path], backbone: str, layers: str, batch: int, repeats: int) -> dict:
    """Seconds per stage for ``files``, one stage at a time, and the network rate of each engine."""
    from vsekit.fileio import atomic_save_npy
    from vsekit.vision.extract import _CNN
    from vsekit.vision.preprocess import load_image
    from vsekit.vision.store import _spec_for_layers

    spec = _spec_for_layers(backbone, layers, None)
    prep = spec.preprocessing
    start, start_cpu = time.perf_counter(), time.process_time()
    decoded = [load_image(f) for f in files]
    t_decode, c_decode = time.perf_counter() - start, time.process_time() - start_cpu
    crops = np.stack([prep.crop_uint8(img) for img in decoded])
    t_resize, c_resize = _measure(lambda: [prep.crop_uint8(img) for img in decoded], repeats)
    chunks = [crops[k : k + batch] for k in range(0, len(crops), batch)]
    t_norm, c_norm = _measure(lambda: [prep.normalise(c) for c in chunks], repeats)
    cnns = {name: _CNN(spec, "cpu", name) for name in ("torch", "onnxruntime")}
    for cnn in cnns.values():
        cnn(chunks[0])  # warm-up (oneDNN primitives, ORT arena)
    t_net = {name: float("inf") for name in cnns}
    c_net = dict(t_net)
    for _ in range(repeats):  # interleaved
        for name, cnn in cnns.items():
            wall, cpu = _measure(lambda cnn=cnn: [cnn(c) for c in chunks])
            t_net[name], c_net[name] = min(t_net[name], wall), min(c_net[name], cpu)
    rows = cnns["onnxruntime"](crops[:batch])
    with tempfile.TemporaryDirectory() as tmp:
        raw = np.memmap(Path(tmp) / "raw.f16", dtype=np.float16, mode="w+", shape=(len(files), rows.shape[1]))
        done = np.zeros(len(files), dtype=bool)

        def write(raw: np.memmap = raw) -> None:
            for k in range(0, len(files), batch):
                raw[k : k + batch] = rows[: min(batch, len(files) - k)]
                done[k : k + batch] = True
            raw.flush()
            atomic_save_npy(Path(tmp) / "done.npy", done)

        t_write, c_write = _measure(write, repeats)
    n = len(files)
    return {
        "decode_ms": 1e3 * t_decode / n,
        "resize_crop_ms": 1e3 * t_resize / n,
        "normalise_torch_only_ms": 1e3 * t_norm / n,
        "network_torch_ms": 1e3 * t_net["torch"] / n,
        "network_onnxruntime_ms": 1e3 * t_net["onnxruntime"] / n,
        "cache_write_ms": 1e3 * t_write / n,
        "cpu_decode_ms": 1e3 * c_decode / n,
        "cpu_resize_crop_ms": 1e3 * c_resize / n,
        "cpu_normalise_torch_only_ms": 1e3 * c_norm / n,
        "cpu_network_torch_ms": 1e3 * c_net["torch"] / n,
        "cpu_network_onnxruntime_ms": 1e3 * c_net["onnxruntime"] / n,
        "cpu_cache_write_ms": 1e3 * c_write / n,
        "torch_network_img_s": n / (t_net["torch"] + t_norm),
        "onnxruntime_network_img_s": n / t_net["onnxruntime"],
        "onnx_check": cnns["onnxruntime"].onnx.check,
    }


def end_to_end(corpus, backbone: str, layers: str, batch: int, engine: str) -> dict:
    from vsekit.vision.features import extract_features

    with tempfile.TemporaryDirectory() as tmp:
        start, start_cpu = time.perf_counter(), time.process_time()
        store = extract_features(
            corpus,
            backbone,
            layers,
            cache_dir=Path(tmp) / "c",
            batch_size=batch,
            progress=False,
            engine=engine,
        )
        elapsed, cpu = time.perf_counter() - start, time.process_time() - start_cpu
        n = len(corpus.images)
        return {
            "img_s": n / elapsed,
            "cpu_ms": 1e3 * cpu / n,
            "dim": store.dim,
            "engines": store.meta["engines"],
        }


def sweep(corpus, batch_sizes: tuple[int, ...], workers: tuple[int, ...]) -> list[dict]:
    from vsekit.vision import extract

    rows = []
    default_workers = extract._DECODE_WORKERS
    try:
        for w in workers:
            extract._DECODE_WORKERS = w
            for b in batch_sizes:
                run = end_to_end(corpus, "mobilenet_v2", "one-layer", b, "auto")
                rows.append({"decode_threads": w, "batch_size": b, "img_s": run["img_s"]})
    finally:
        extract._DECODE_WORKERS = default_workers
    return rows


def full_extraction(batch: int, engine: str) -> dict:
    """`vsekit extract` over all of ../shared/data/flickr8k in a fresh cache, timed as a user would see it."""
    from bench_extract_memory import extract_cmd, peak_rss

    with tempfile.TemporaryDirectory() as tmp:
        run = peak_rss(extract_cmd(SHARED, Path(tmp) / "c", batch) + ["--engine", engine])
        meta = json.loads((Path(tmp) / "c" / "meta.json").read_text())
    return {
        "engine": engine,
        "images": len(meta["image_ids"]),
        "wall_s": run["wall_s"],
        "peak_rss_mb": run["peak_rss_mb"],
        "img_s": len(meta["image_ids"]) / run["wall_s"],
    }


def first_use_export(backbone: str, layers: str) -> float:
    """Seconds to export + check one graph into an empty cache (what a fresh install pays once)."""
    from vsekit.vision.engine import OnnxCNN
    from vsekit.vision.store import _spec_for_layers

    spec = _spec_for_layers(backbone, layers, None)
    with tempfile.TemporaryDirectory() as tmp:
        return _timed(lambda: OnnxCNN(spec, torch.device("cpu"), cache_root=tmp))


def print_table(rows: list[dict], sweep_rows: list[dict], full: list[dict]) -> None:
    header = (
        f"{'backbone':<19}{'features':<10}{'decode':>7}{'resize':>7}{'norm':>6}{'net torch':>10}"
        f"{'net ORT':>8}{'write':>7}{'| e2e default':>14}{'e2e torch':>10}{'ORT net':>8}"
        f"{'default/ORTnet':>15}"
    )
    print("per image: ms;  end to end and network-only: img/s")
    print(header)
    print("-" * len(header))
    for r in rows:
        s = r["stages_ms"]
        print(
            f"{r['backbone']:<19}{r['features']:<10}{s['decode_ms']:>7.2f}{s['resize_crop_ms']:>7.2f}"
            f"{s['normalise_torch_only_ms']:>6.2f}{s['network_torch_ms']:>10.2f}{s['network_onnxruntime_ms']:>8.2f}"
            f"{s['cache_write_ms']:>7.3f}{r['end_to_end_img_s_default']:>14.1f}{r['end_to_end_img_s_torch']:>10.1f}"
            f"{r['onnxruntime_network_img_s']:>8.1f}{r['default_time_over_ort_network']:>15.2f}"
        )
    print("CPU ms per image (this process, all threads; robust to other jobs' load):")
    print(
        f"{'backbone':<19}{'features':<10}{'decode':>7}{'resize':>7}{'norm':>6}{'net torch':>10}"
        f"{'net ORT':>8}"
        f"{'write':>7}{'| e2e default':>14}{'e2e torch':>10}{'2-core bound img/s':>20}"
    )
    for r in rows:
        c = r["stages_cpu_ms"]
        print(
            f"{r['backbone']:<19}{r['features']:<10}{c['decode_ms']:>7.2f}{c['resize_crop_ms']:>7.2f}"
            f"{c['normalise_torch_only_ms']:>6.2f}{c['network_torch_ms']:>10.2f}{c['network_onnxruntime_ms']:>8.2f}"
            f"{c['cache_write_ms']:>7.3f}{r['end_to_end_cpu_ms_default']:>14.2f}{r['end_to_end_cpu_ms_torch']:>10.2f}"
            f"{r['cpu_bound_img_s_2_cores_default']:>20.1f}"
        )
    print("MobileNetV2 one-layer, default engine, end to end img/s by decode threads x batch size:")
    for r in sweep_rows:
        print(f"  threads {r['decode_threads']}  batch {r['batch_size']:>3}: {r['img_s']:.1f}")
    for f in full:
        print(
            f"whole Flickr8K (mobilenet_v2 one-layer, --engine {f['engine']}): {f['images']} images in "
            f"{f['wall_s']:.1f} s ({f['img_s']:.1f} img/s), peak RSS {f['peak_rss_mb']:.0f} MB"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--images", type=int, default=256, help="images for the per-stage and slice runs")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-full", action="store_true", help="skip the whole-Flickr8K extractions")
    parser.add_argument("--full-only", action="store_true", help="only the whole-Flickr8K extractions")
    parser.add_argument("--note", default="", help="load on the machine during the run, for the record")
    args = parser.parse_args()

    from vsekit.data import load_corpus
    from vsekit.resources import sample_data_path

    source = SHARED if SHARED.is_dir() else sample_data_path()
    corpus = load_corpus(source)
    ids = sorted(corpus.images)[: args.images]
    sliced = corpus.subset(ids)
    files = [corpus.images[i] for i in ids]
    rows = []
    for backbone in () if args.full_only else ("mobilenet_v2", "efficientnet_lite0"):
        for layers in ("one-layer", "full"):
            s = stages(files, backbone, layers, args.batch_size, args.repeats)
            e2e = {e: end_to_end(sliced, backbone, layers, args.batch_size, e) for e in ("auto", "torch")}
            rows.append(
                {
                    "backbone": backbone,
                    "features": "FNE" if layers == "full" else "one-layer",
                    "dim": e2e["auto"]["dim"],
                    "default_engine": e2e["auto"]["engines"][0],
                    "stages_ms": {
                        k: v for k, v in s.items() if k.endswith("_ms") and not k.startswith("cpu_")
                    },
                    "stages_cpu_ms": {k[4:]: v for k, v in s.items() if k.startswith("cpu_")},
                    "onnx_check": s["onnx_check"],
                    "torch_network_img_s": s["torch_network_img_s"],
                    "onnxruntime_network_img_s": s["onnxruntime_network_img_s"],
                    "end_to_end_img_s_default": e2e["auto"]["img_s"],
                    "end_to_end_img_s_torch": e2e["torch"]["img_s"],
                    "end_to_end_cpu_ms_default": e2e["auto"]["cpu_ms"],
                    "end_to_end_cpu_ms_torch": e2e["torch"]["cpu_ms"],
                    "cpu_bound_img_s_2_cores_default": 2000 / e2e["auto"]["cpu_ms"],
                    "default_time_over_ort_network": s["onnxruntime_network_img_s"] / e2e["auto"]["img_s"],
                    "first_use_export_s": first_use_export(backbone, layers),
                }
            )
    sweep_rows = [] if args.full_only else sweep(sliced, (16, 32, 64), (1, 2))
    full = []
    if not args.skip_full and SHARED.is_dir():
        full = [full_extraction(args.batch_size, e) for e in ("auto", "torch")]
    print_table(rows, sweep_rows, full)

    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / "extract.json"
    out = json.loads(path.read_text()) if path.is_file() else {}
    out.pop("rows", None)  # the pre-engine layout's keys; "memory" and anything else is kept
    out.pop("full_flickr8k", None)
    import onnxruntime

    if full:
        out["full_flickr8k_runs"] = {
            **run_meta(threads=torch.get_num_threads()),
            "load_note": args.note,
            "runs": full,
        }
    if args.full_only:
        write_result(path, out, indent=2)
        print(f"wrote {path} (full_flickr8k_runs)")
        return
    out.update(
        {
            "benchmark": "extract",
            **run_meta(threads=torch.get_num_threads()),
            "load_note": args.note,
            "torch": torch.__version__,
            "onnxruntime": onnxruntime.__version__,
            "images": len(ids),
            "image_source": str(source.name),
            "batch_size": args.batch_size,
            "engine_rows": rows,
            "decode_batch_sweep": sweep_rows,
        }
    )
    write_result(path, out, indent=2)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
