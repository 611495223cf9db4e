"""Benchmark: memory and time to read a COCO-sized corpus (issue 14, item 4: corpora at scale).

Writes synthetic files the size of COCO (123,287 images, 616,435 captions: 5 per image, about 10 words
each) in the two formats vsekit reads, with every field the real files carry (Karpathy's
``dataset_coco.json``: filepath, filename, imgid, split, cocoid, sentences with tokens / raw / imgid /
sentid; COCO's ``captions_*.json``: info, images with license / url / size / date, annotations with id /
image_id / caption), plus an empty file per image (the readers check every image is on disk). Then, in a
fresh process per reader, ``load_corpus`` is timed and its peak RSS (``VmHWM``; ``ru_maxrss`` would
carry the parent's peak across exec) and the RSS it keeps
after loading are read.

    python bench/bench_corpus_memory.py --work /tmp/coco-synth [--label before|after]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
from pathlib import Path

from _common import run_meta, write_result

N_IMAGES, PER_IMAGE = 123_287, 5
WORDS = "a man woman dog cat child red blue green sits stands runs on in with the of near park street beach "
WORDS += "water grass snow table plate food frisbee ball bike car bus train sign tree building window"

MEASURE = """
import json, sys, time
def rss(key='VmRSS'):
    with open('/proc/self/status') as f:
        return next(int(l.split()[1]) for l in f if l.startswith(key)) / 1e3
base = rss()
from vsekit.data import load_corpus
start_rss = rss()
t = time.perf_counter()
corpus = load_corpus(sys.argv[1])
s = time.perf_counter() - t
print(json.dumps({"load_s": s, "captions": len(corpus.captions), "images": len(corpus.images),
    "rss_before_mb": start_rss, "rss_after_mb": rss(),
    "peak_rss_mb": rss('VmHWM')}))
"""


def _sentence(rng: random.Random) -> list[str]:
    words = WORDS.split()
    return [rng.choice(words) for _ in range(rng.randint(8, 13))]


def write(work: Path) -> tuple[Path, Path]:
    """The Karpathy file (``work/karpathy/dataset_coco.json``) and the COCO folder (``work/coco``)."""
    karpathy, coco = work / "karpathy" / "dataset_coco.json", work / "coco"
    if karpathy.is_file() and (coco / "annotations" / "captions_train2014.json").is_file():
        return karpathy, coco
    rng = random.Random(0)
    images_dir = work / "images" / "train2014"
    images_dir.mkdir(parents=True, exist_ok=True)
    kimages, cimages, anns = [], [], []
    for i in range(N_IMAGES):
        name = f"COCO_train2014_{i:012d}.jpg"
        (images_dir / name).touch()
        sentences = []
        for j in range(PER_IMAGE):
            tokens = _sentence(rng)
            sid = i * PER_IMAGE + j
            sentences.append(
                {"tokens": tokens, "raw": " ".join(tokens).capitalize() + ".", "imgid": i, "sentid": sid}
            )
            anns.append({"image_id": i, "id": sid, "caption": sentences[-1]["raw"]})
        split = "train" if i < N_IMAGES - 10_000 else ("val" if i % 2 else "test")
        kimages.append(
            {
                "filepath": "train2014",
                "sentids": [s["sentid"] for s in sentences],
                "filename": name,
                "imgid": i,
                "split": split,
                "sentences": sentences,
                "cocoid": i,
            }
        )
        cimages.append(
            {
                "license": 3,
                "file_name": name,
                "coco_url": f"http://images.cocodataset.org/train2014/{name}",
                "height": 480,
                "width": 640,
                "date_captured": "2013-11-14 11:18:45",
                "flickr_url": f"http://farm4.staticflickr.com/{i}.jpg",
                "id": i,
            }
        )
    karpathy.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(work / "images", karpathy.parent / "images") if not (
        karpathy.parent / "images"
    ).exists() else None
    karpathy.write_text(json.dumps({"images": kimages, "dataset": "coco"}))
    (coco / "annotations").mkdir(parents=True, exist_ok=True)
    if not (coco / "train2014").exists():
        os.symlink(images_dir, coco / "train2014")
    info = {"description": "synthetic COCO-sized captions", "year": 2014}
    (coco / "annotations" / "captions_train2014.json").write_text(
        json.dumps({"info": info, "images": cimages, "licenses": [], "annotations": anns})
    )
    return karpathy, coco


def measure(path: Path) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [sys.executable, "-c", MEASURE, str(path)], capture_output=True, text=True, env=env, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1]) | {"file_mb": _size_mb(path)}


def _size_mb(path: Path) -> float:
    files = [path] if path.is_file() else list((path / "annotations").glob("*.json"))
    return round(sum(f.stat().st_size for f in files) / 1e6, 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--label", default="after")
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "corpus_memory.json")
    args = ap.parse_args()
    karpathy, coco = write(args.work)
    result = json.loads(args.out.read_text()) if args.out.is_file() else {"benchmark": "corpus_memory"}
    result[args.label] = {
        **run_meta(threads=1),  # OMP_NUM_THREADS=1 in the measured process
        "karpathy": measure(karpathy),
        "coco": measure(coco),
    }
    print(json.dumps(result[args.label], indent=1))
    write_result(args.out, result)


if __name__ == "__main__":
    main()
