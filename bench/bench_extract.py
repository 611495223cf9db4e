"""Benchmark: image-feature extraction throughput, against ONNX Runtime, and a full Flickr8K extraction.

Measures, for each backbone and for one-layer and full-network (FNE) features:
  * network throughput (images/s) of our PyTorch backbone and of ONNX Runtime running the same network
    exported to ONNX, on the same pre-decoded images, same batch size, same threads, in the same run;
  * end-to-end throughput of `extract_features` (decode + preprocess + CNN + cache writes) on a slice;
  * FNE dimensionality;
and, unless --skip-full, the wall time and peak RSS of `vsekit extract` over every image of
../shared/data/flickr8k (MobileNetV2, one-layer) in a fresh cache, as a separate process.

Prints a table and writes bench/results/extract.json.

    python bench/bench_extract.py [--images 256] [--batch-size 32] [--skip-full]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from datetime import date
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("VSEKIT_SHARED_DATA", REPO.parent / "shared" / "data" / "flickr8k"))
RESULTS = REPO / "bench" / "results"


class _Wrapped(torch.nn.Module):
    """What we export: pixels -> the features `extract_features` stores (pooled, or all taps concatenated)."""

    def __init__(self, model: torch.nn.Module, full: bool) -> None:
        super().__init__()
        self.model, self.full = model, full

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pooled, taps = self.model.forward_features(x, taps=self.full)
        return torch.cat(taps, dim=1) if self.full else pooled


def _best_of(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def network_throughput(backbone: str, full: bool, pixels: torch.Tensor, batch: int, repeats: int) -> dict:
    import onnxruntime as ort

    from vsekit.vision.backbones import load_backbone, prepare_for_inference

    # ours: exactly what extract_features runs (BN folded, channels-last); ORT gets the plain network
    # exported to ONNX and applies its own graph fusions.
    model = _Wrapped(prepare_for_inference(load_backbone(backbone)), full).eval()
    exported = _Wrapped(load_backbone(backbone), full).eval()
    batches = list(torch.split(pixels, batch))
    batches_cl = [b.contiguous(memory_format=torch.channels_last) for b in batches]

    def run_torch() -> None:
        with torch.inference_mode():
            for b in batches_cl:
                model(b)

    with tempfile.TemporaryDirectory() as tmp:
        onnx_path = Path(tmp) / "model.onnx"
        torch.onnx.export(
            exported,
            (batches[0],),
            str(onnx_path),
            input_names=["pixels"],
            output_names=["features"],
            dynamic_shapes={"x": {0: torch.export.Dim("batch")}},
            dynamo=True,
            external_data=False,
        )
        options = ort.SessionOptions()
        options.intra_op_num_threads = torch.get_num_threads()
        session = ort.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])
        arrays = [b.numpy() for b in batches]
        # the exported network must compute the same features as ours
        with torch.inference_mode():
            ours = model(batches_cl[0]).numpy()
        theirs = session.run(None, {"pixels": arrays[0]})[0]
        max_abs_diff = float(np.abs(ours - theirs).max())

        def run_ort() -> None:
            for a in arrays:
                session.run(None, {"pixels": a})

        run_torch()  # warm-up
        run_ort()
        # interleaved, best of `repeats`: background load hits both engines alike
        t_torch, t_ort = float("inf"), float("inf")
        for _ in range(repeats):
            t_torch = min(t_torch, _best_of(run_torch, 1))
            t_ort = min(t_ort, _best_of(run_ort, 1))
    n = len(pixels)
    return {
        "torch_img_s": n / t_torch,
        "onnxruntime_img_s": n / t_ort,
        "torch_time_over_ort": t_torch / t_ort,
        "max_abs_diff_vs_ort": max_abs_diff,
    }


def end_to_end(corpus, backbone: str, layers: str, batch: int) -> dict:
    from vsekit.vision.features import extract_features

    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        store = extract_features(
            corpus, backbone, layers, cache_dir=Path(tmp) / "c", batch_size=batch, progress=False
        )
        elapsed = time.perf_counter() - start
        dim = store.dim
    return {"img_s": len(corpus.images) / elapsed, "dim": dim}


def full_extraction(batch: int) -> dict:
    """`vsekit extract` over all of ../shared/data/flickr8k in a fresh cache, timed as a user would see it.

    The peak RSS is read by a small launcher (see bench_extract_memory.py): this process's own
    RUSAGE_CHILDREN would report this process's size, copied into the child by fork + exec.
    """
    from bench_extract_memory import extract_cmd, peak_rss

    with tempfile.TemporaryDirectory() as tmp:
        run = peak_rss(extract_cmd(SHARED, Path(tmp) / "c", batch))
        meta = json.loads((Path(tmp) / "c" / "meta.json").read_text())
    return {
        "images": len(meta["image_ids"]),
        "wall_s": run["wall_s"],
        "peak_rss_mb": run["peak_rss_mb"],
        "img_s": len(meta["image_ids"]) / run["wall_s"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--images", type=int, default=256, help="images for the throughput runs")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-full", action="store_true", help="skip the full Flickr8K extraction")
    args = parser.parse_args()

    from vsekit.data import load_corpus
    from vsekit.resources import sample_data_path
    from vsekit.vision.backbones import BACKBONES
    from vsekit.vision.preprocess import load_image

    source = SHARED if SHARED.is_dir() else sample_data_path()
    corpus = load_corpus(source)
    ids = sorted(corpus.images)[: args.images]
    sliced = corpus.subset(ids)
    rows = []
    for backbone in ("mobilenet_v2", "efficientnet_lite0"):
        prep = BACKBONES[backbone].preprocessing
        pixels = torch.stack([prep(load_image(corpus.images[i])) for i in ids])
        e2e = {}
        for layers in ("one-layer", "full"):
            net = network_throughput(backbone, layers == "full", pixels, args.batch_size, args.repeats)
            e2e[layers] = end_to_end(sliced, backbone, layers, args.batch_size)
            rows.append(
                {
                    "backbone": backbone,
                    "features": "FNE" if layers == "full" else "one-layer",
                    "dim": e2e[layers]["dim"],
                    **net,
                    "end_to_end_img_s": e2e[layers]["img_s"],
                }
            )
        rows[-1]["fne_cost_over_one_layer"] = e2e["one-layer"]["img_s"] / e2e["full"]["img_s"]

    full = None if args.skip_full or not SHARED.is_dir() else full_extraction(args.batch_size)

    header = (
        f"{'backbone':<20}{'features':<11}{'dim':>7}{'torch img/s':>13}{'ORT img/s':>11}"
        f"{'torch/ORT time':>16}{'end-to-end img/s':>18}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r['backbone']:<20}{r['features']:<11}{r['dim']:>7}{r['torch_img_s']:>13.1f}"
            f"{r['onnxruntime_img_s']:>11.1f}{r['torch_time_over_ort']:>16.2f}{r['end_to_end_img_s']:>18.1f}"
        )
    for r in rows:
        if "fne_cost_over_one_layer" in r:
            print(
                f"FNE cost over one-layer ({r['backbone']}, end to end): {r['fne_cost_over_one_layer']:.2f}x"
            )
    if full:
        print(
            f"full Flickr8K extraction (mobilenet_v2, one-layer): {full['images']} images in "
            f"{full['wall_s']:.1f} s ({full['img_s']:.1f} img/s), peak RSS {full['peak_rss_mb']:.0f} MB"
        )

    RESULTS.mkdir(parents=True, exist_ok=True)
    out = {
        "benchmark": "extract",
        "date": date.today().isoformat(),
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch threads "
        f"{torch.get_num_threads()}",
        "torch": torch.__version__,
        "images": len(ids),
        "image_source": str(source.name),
        "batch_size": args.batch_size,
        "rows": rows,
        "full_flickr8k": full,
    }
    (RESULTS / "extract.json").write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {RESULTS / 'extract.json'}")


if __name__ == "__main__":
    main()
