"""Does vsekit run on a GPU and give what the CPU gives? (The README: "uses a GPU when there is one".)

Run on a machine with CUDA (the project's CPU machine has none); each step runs the command line a user
would, once with ``--device cpu`` and once with ``--device cuda``, on the bundled sample's 100 photos:

1. image features of the shipped captioner's CNN (EfficientNet-Lite0), PyTorch engine and ``--engine auto``:
   the largest difference between the two devices, and photos per second;
2. ``vsekit caption`` with the shipped captioner and its concept guard (no rerank: the rerank's MiniLM is
   not carried to that machine): how many captions agree;
3. ``vsekit train`` (a bag-of-words ``vse`` on Lite0 features) and ``vsekit train-captioner`` for two epochs
   on the sample split 60 / 20 / 20: both finish and resume, and their losses.

    python bench/gpu_check.py            # writes bench/results/gpu_check.json (or $OUT/gpu_check.json)
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _common import run_meta  # noqa: E402
from vsekit.data import load_corpus  # noqa: E402
from vsekit.resources import sample_data_path  # noqa: E402

WORK = Path(os.environ.get("GPU_CHECK_WORK", "/tmp/vsekit-gpu-check"))
DEVICES = ("cpu", "cuda") if torch.cuda.is_available() else ("cpu",)


def vsekit(*args: str) -> dict[str, Any]:
    """One command line, timed; its exit code and the end of its output."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "vsekit", *args], capture_output=True, text=True)
    tail = (done.stdout + done.stderr)[-1500:]
    return {
        "args": list(args),
        "rc": done.returncode,
        "wall_s": round(time.perf_counter() - start, 2),
        "tail": tail,
    }


def sample_corpus() -> Path:
    """The bundled sample's 100 photos as train 60 / dev 20 / test 20 (a CSV corpus)."""
    by_image = load_corpus(sample_data_path()).captions_by_image()
    images = sample_data_path() / "Images"
    out = WORK / "corpus" / "captions.csv"
    out.parent.mkdir(parents=True, exist_ok=True)
    (out.parent / "Images").mkdir(exist_ok=True)
    with open(out, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["image", "caption", "split"])
        for k, image_id in enumerate(sorted(by_image)):
            link = out.parent / "Images" / image_id
            if not link.exists():
                link.symlink_to(images / image_id)
            split = "train" if k < 60 else "dev" if k < 80 else "test"
            writer.writerows([image_id, text, split] for text in by_image[image_id])
    return out


def features(engine: str) -> dict[str, Any]:
    """Lite0 one-layer features of the 100 photos on each device; the largest difference, photos/s."""
    from vsekit.vision import FeatureSpec, compute_features

    spec = FeatureSpec("efficientnet_lite0", "one-layer")

    photos = sorted((sample_data_path() / "Images").glob("*.jpg"))
    out: dict[str, Any] = {}
    got = {}
    for device in DEVICES:
        kwargs = {"cache": False, "device": device, "engine": engine, "progress": False}
        compute_features(photos[:8], spec, **kwargs)  # warm-up (CUDA context, ONNX session)
        for label in ("", "_again"):  # again: every batch size seen once already
            start = time.perf_counter()
            got[device] = compute_features(photos, spec, **kwargs)
            out[f"{device}_photos_per_s{label}"] = round(len(photos) / (time.perf_counter() - start), 1)
    if len(got) == 2:
        out["max_abs_diff"] = float(np.abs(got["cpu"] - got["cuda"]).max())
        out["max_abs_value"] = float(np.abs(got["cpu"]).max())
    return out


def torch_cnn() -> dict[str, Any]:
    """The PyTorch engine's CNN alone on a batch of 32 random crops per device (ms), and on CUDA a
    profile of one batch: where the time goes when the decode is out of the way."""
    from vsekit.vision import FeatureSpec
    from vsekit.vision.extract import cnn_extractor

    out: dict[str, Any] = {}
    for device in DEVICES:
        cnn = cnn_extractor(FeatureSpec("efficientnet_lite0", "one-layer"), device, "torch")
        crop = cnn.preprocessing.crop
        pixels = np.random.default_rng(0).integers(0, 256, (32, crop, crop, 3), dtype=np.uint8)
        firsts = {}
        for size in (1, 3, 8, 32):  # the first batch of each size: a new shape for cuDNN
            start = time.perf_counter()
            cnn(pixels[:size])
            firsts[size] = round((time.perf_counter() - start) * 1000, 1)
        out[f"{device}_first_batch_ms"] = firsts
        start = time.perf_counter()
        for _ in range(5):
            cnn(pixels)
        out[f"{device}_batch32_ms"] = round((time.perf_counter() - start) / 5 * 1000, 1)
        if device == "cuda":
            activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
            with torch.profiler.profile(activities=activities) as prof:
                cnn(pixels)
            out["cuda_profile"] = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12)
    return out


def captions() -> dict[str, Any]:
    photos = str(sample_data_path() / "Images")
    runs, texts = {}, {}
    for device in DEVICES:
        jsonl = WORK / f"captions-{device}.jsonl"
        runs[device] = vsekit("caption", photos, "--no-rerank", "--device", device, "--out", str(jsonl))
        if jsonl.is_file():
            texts[device] = {
                r["path"]: r["captions"] for r in map(json.loads, jsonl.read_text().splitlines())
            }
    out: dict[str, Any] = {"runs": runs}
    if len(texts) == 2:
        same = sum(texts["cpu"][p] == texts["cuda"].get(p) for p in texts["cpu"])
        out |= {"photos": len(texts["cpu"]), "same_captions": same}
        out["differ"] = [
            [p, texts["cpu"][p], texts["cuda"].get(p)]
            for p in texts["cpu"]
            if texts["cpu"][p] != texts["cuda"].get(p)
        ][:10]
    return out


def last_metrics(run: Path) -> dict[str, Any]:
    log = run / "log.jsonl"
    lines = log.read_text().splitlines() if log.is_file() else []
    return json.loads(lines[-1]) if lines else {}


def training(corpus: Path) -> dict[str, Any]:
    recipe = WORK / "bow-lite0.json"
    base = json.loads((HERE.parent / "src/vsekit/recipes/bow.json").read_text())
    recipe.write_text(json.dumps(base | {"name": "bow-lite0", "backbone": "efficientnet_lite0", "epochs": 2}))
    captioning = WORK / "mrnn-lite0.json"  # the shipped recipe without the rerank (its MiniLM is not carried)
    base = json.loads((HERE.parent / "src/vsekit/recipes/captioning/mrnn-lstm-effnet.json").read_text())
    captioning.write_text(json.dumps(base | {"epochs": 2, "rerank_beam": None}))
    out: dict[str, Any] = {}
    for device in DEVICES:
        vse, cap = WORK / f"vse-{device}", WORK / f"captioner-{device}"
        common = ("--data", str(corpus), "--device", device, "--no-progress")
        out[device] = {
            "train": vsekit("train", *common, "--recipe", str(recipe), "--out", str(vse), "--epochs", "1"),
            "train_resume": vsekit("train", *common, "--recipe", str(recipe), "--out", str(vse), "--resume"),
            "train_last": last_metrics(vse),
            "train_captioner": vsekit(
                "train-captioner", *common, "--recipe", str(captioning), "--out", str(cap), "--epochs", "2"
            ),
            "captioner_last": last_metrics(cap),
        }
    return out


def main() -> None:
    WORK.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {
        "meta": run_meta(threads=torch.get_num_threads()),
        "cuda": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "torch": torch.__version__,
        "features_torch": features("torch"),
        "features_auto": features("auto"),
        "torch_cnn": torch_cnn(),
        "captions": captions(),
        "training": training(sample_corpus()),
    }
    target = Path(os.environ["OUT"]) if os.environ.get("OUT") else HERE / "results"
    (target / "gpu_check.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    print(json.dumps(result, default=str)[:6000])


if __name__ == "__main__":
    main()
