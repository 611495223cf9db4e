"""Benchmark: exact copies and near-duplicates as ``vsekit index duplicates`` finds them, on a labelled set of
everyday photos (issue 34 item 6).

The everyday validation set (bench/everyday: photos that are not Flickr8K, many of one subject: cats,
monuments, landscapes) is the set of *similar but distinct* photos. A seeded sample of them gets the copies a
collection really holds, each written as a new file beside them:

* exact copies: the same bytes (``bytes``) and the same pixels in other bytes (``pixels``: a PNG);
* near-duplicates: re-saved as JPEG quality 60 (``jpeg60``), resized to half (``half``), cropped by 5 % on
  each side (``crop5``), and a burst shot stand-in (``burst``: the frame moved by 3 %, turned 1.5 degrees,
  5 % darker).

Everything is indexed with the shipped ``vse`` through ``vsekit.Index.build`` and grouped by
:func:`vsekit.retrieval.duplicates.find_duplicates` at the shipped threshold. Scored over pairs of files: an
exact pair must land in one exact group; a near pair (a photo and its near copy, or two near copies of one
photo) in one near group; any two distinct originals (or their copies) grouped together is a false pair.
Precision = true grouped pairs / grouped pairs (a photo's copies multiply the pairs: the list of distinct
originals put in one group says it plainly); recall per kind of copy. The dHash check below
``CERTAIN_COSINE`` (retrieval/duplicates.py) was chosen on this set, so its numbers are validation numbers.

    python bench/bench_duplicate_kinds.py [--photos 60] [--threads 2]
"""

from __future__ import annotations

import argparse
import io
import random
import shutil
import sys
import tempfile
import time
from itertools import combinations
from pathlib import Path

import torch
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))
import vsekit  # noqa: E402
from _common import run_meta, write_result  # noqa: E402
from everyday import dataset as everyday  # noqa: E402
from vsekit.retrieval.duplicates import DEFAULT_THRESHOLD, find_duplicates  # noqa: E402
from vsekit.vision.preprocess import load_image  # noqa: E402

EXACT, NEAR = ("bytes", "pixels"), ("jpeg60", "half", "crop5", "burst")


def near_copies(image: Image.Image) -> dict[str, Image.Image]:
    w, h = image.size
    buf = io.BytesIO()
    image.save(buf, format="JPEG", quality=60)
    dx, dy = round(w * 0.05), round(h * 0.05)
    sx, sy = round(w * 0.03), round(h * 0.03)
    moved = image.crop((sx, sy, w - dx + sx, h - dy + sy)).rotate(1.5, resample=Image.BICUBIC)
    return {
        "jpeg60": Image.open(io.BytesIO(buf.getvalue())).convert("RGB"),
        "half": image.resize((max(1, w // 2), max(1, h // 2)), Image.BICUBIC),
        "crop5": image.crop((dx, dy, w - dx, h - dy)),
        "burst": moved.point(lambda v: round(v * 0.95)),
    }


def make_folder(root: Path, sample: set[str]) -> dict[str, tuple[str, str]]:
    """The photos and their copies under ``root``: file -> (original key, kind of copy or "original")."""
    truth = {}
    for n, key in enumerate(sorted(k for k in everyday.labels() if everyday.photo_path(k).is_file())):
        source, name = everyday.photo_path(key), f"p{n:03d}{everyday.photo_path(key).suffix.lower()}"
        shutil.copyfile(source, root / name)
        truth[name] = (key, "original")
        if key not in sample:
            continue
        shutil.copyfile(source, root / f"p{n:03d}-bytes{Path(name).suffix}")
        truth[f"p{n:03d}-bytes{Path(name).suffix}"] = (key, "bytes")
        upright = load_image(source)
        upright.save(root / f"p{n:03d}-pixels.png")
        truth[f"p{n:03d}-pixels.png"] = (key, "pixels")
        for kind, image in near_copies(upright).items():
            image.save(root / f"p{n:03d}-{kind}.jpg", quality=92)
            truth[f"p{n:03d}-{kind}.jpg"] = (key, kind)
    return truth


def pair_kind(a: tuple[str, str], b: tuple[str, str]) -> str | None:
    """What grouping ``a`` with ``b`` should be: "exact", "near", or None (distinct photos)."""
    if a[0] != b[0]:
        return None
    kinds = {a[1], b[1]} - {"original"}
    return "exact" if kinds <= set(EXACT) and not ({a[1], b[1]} & set(NEAR)) else "near"


def score(truth: dict[str, tuple[str, str]], exact: list, near: list) -> dict:
    grouped: dict[frozenset, str] = {}
    for kind, groups in (("exact", exact), ("near", near)):
        for g in groups:
            files = [f for p in g.photos for f in (p.path, *p.copies)]
            for a, b in combinations(files, 2):
                grouped.setdefault(frozenset((a, b)), kind)
    true_pairs = {
        frozenset((a, b)): k for a, b in combinations(truth, 2) if (k := pair_kind(truth[a], truth[b]))
    }
    right = sum(1 for pair, kind in grouped.items() if pair in true_pairs)
    out = {"grouped_pairs": len(grouped), "precision": right / max(len(grouped), 1)}
    merged = {frozenset(truth[f][0] for f in pair) for pair in grouped if pair not in true_pairs}
    out["distinct_photos_grouped"] = sorted(sorted(m) for m in merged)  # pairs of originals put together
    out["false_pairs"] = sorted(
        sorted(truth[f][0] for f in pair) for pair in grouped if pair not in true_pairs
    )[:20]
    for kind in (*EXACT, *NEAR):
        pairs = [
            p
            for p in true_pairs
            if any(truth[f][1] == kind for f in p) and all(truth[f][1] in ("original", kind) for f in p)
        ]
        found = [p for p in pairs if p in grouped and (grouped[p] == "exact") == (kind in EXACT)]
        out[f"recall_{kind}"] = len(found) / max(len(pairs), 1)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--photos", type=int, default=60, help="originals that get copies")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    keys = sorted(k for k in everyday.labels() if everyday.photo_path(k).is_file())
    sample = set(random.Random(0).sample(keys, min(args.photos, len(keys))))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "photos"
        root.mkdir()
        truth = make_folder(root, sample)
        start = time.perf_counter()
        index = vsekit.Index.build(root, Path(tmp) / "index", progress=False)
        build_s = time.perf_counter() - start
        start = time.perf_counter()
        exact, near = find_duplicates(index.vectors, list(index.paths), index.records(), index.photos_dir)
        find_s = time.perf_counter() - start
    result = {
        "meta": run_meta(threads=args.threads, model="vse (shipped)", set="bench/everyday (not Flickr8K)"),
        "threshold": DEFAULT_THRESHOLD,
        "originals": len(keys),
        "with_copies": len(sample),
        "files": len(truth),
        "build_s": round(build_s, 1),
        "find_s": round(find_s, 2),
        "exact_groups": len(exact),
        "near_groups": len(near),
        **score(truth, exact, near),
    }
    print(result, flush=True)
    write_result("duplicate_kinds.json", result)


if __name__ == "__main__":
    main()
