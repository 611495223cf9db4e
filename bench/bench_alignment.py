"""Benchmark: region extraction cost (grid vs proposals), S_kl ranking of an aligner on dev, fusion, words.

    python bench/bench_alignment.py [--images 200] [--skip-regions]
        [--model aligner --run RUN --fuse --write-fusion --words]

Times both region modes, uncached, on the first ``--images`` dev photos of ../shared/data/flickr8k
(MobileNetV2, torch threads 2) and extrapolates to the 7,000 train + dev photos; with ``--model``, ranks
the dev split by S_kl (1,000 images x 5,000 captions) and times that (``--run``: the training log's
minutes). ``--fuse``: the weighted sum with the shipped joint model's cosine, weight chosen on the
even-numbered dev images, reported on the odd-numbered ones and on all of dev. Under the selection protocol
(``--tune-on flickr8k-val1000 --tune-joint F --tune-aligner G``) the weight and the score statistics come
from the validation slice instead, scored by a joint model ``F`` and an aligner ``G`` trained without it,
and dev is only reported; ``--write-fusion`` writes that weight and the score statistics to
src/vsekit/pretrained/fusion-vse-aligner.json (the model ``vse+aligner``). ``--words``: the paper's Table
4, average ||s_t|| per word over the dev captions, top and bottom 40 words seen at least 10 times. Prints
a summary and updates bench/results/alignment.json (keys of earlier runs that this run does not
measure are kept).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from datetime import date
from pathlib import Path

import numpy as np
import torch

from _common import run_meta, write_result
from vsekit.alignment import Aligner
from vsekit.alignment.evaluate import evaluate_scores
from vsekit.alignment.fusion import FUSION_FILE, FusionSpec
from vsekit.data import load_corpus
from vsekit.fileio import content_fingerprint, file_sha256
from vsekit.metrics.ranking import positives_from_ids, ranking_metrics
from vsekit.resources import PACKAGE_DIR, pretrained_path
from vsekit.vision.regions import RegionSpec, region_features

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("VSEKIT_SHARED_DATA", REPO.parent / "shared" / "data" / "flickr8k"))
RESULTS = REPO / "bench" / "results"


def time_regions(paths: list[Path], n_total: int) -> dict:
    out = {}
    for mode in ("grid", "proposals"):
        spec = RegionSpec(mode=mode)
        region_features(paths[:2], spec, progress=False)  # load the backbone once
        t0 = time.perf_counter()
        region_features(paths, spec, cache=False, progress=False)
        seconds = time.perf_counter() - t0
        rate = len(paths) / seconds
        out[mode] = {
            "regions": spec.n_regions,
            "images": len(paths),
            "img_per_s": round(rate, 2),
            "train_dev_minutes": round(n_total / rate / 60, 1),
        }
        print(
            f"{mode:>9}: {spec.n_regions} regions, {rate:6.2f} img/s, "
            f"{n_total} photos ~ {n_total / rate / 60:.1f} min"
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--images", type=int, default=200)
    parser.add_argument("--model", default=None, help="an aligner: the shipped name (aligner) or a file")
    parser.add_argument("--run", default=None, help="the aligner's run directory (its log.jsonl: minutes)")
    parser.add_argument(
        "--fuse", action="store_true", help="also S_kl + w * the shipped joint model's cosine"
    )
    parser.add_argument(
        "--write-fusion", action="store_true", help="with --fuse: write the vse+aligner fusion file"
    )
    parser.add_argument(
        "--tune-on", help="with --fuse: choose weight and statistics on this validation slice, not dev"
    )
    parser.add_argument("--tune-joint", type=Path, help="with --tune-on: a joint model trained without it")
    parser.add_argument("--tune-aligner", type=Path, help="with --tune-on: an aligner trained without it")
    parser.add_argument("--words", action="store_true", help="the word-magnitude table (Table 4)")
    parser.add_argument("--skip-regions", action="store_true", help="do not time the region extraction")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    corpus = load_corpus(SHARED)
    dev_ids = corpus.split("dev").image_ids()
    path = RESULTS / "alignment.json"
    result = json.loads(path.read_text()) if path.is_file() else {}
    result.update(run_meta(threads=args.threads), backbone="mobilenet_v2")
    if not args.skip_regions:
        n_total = len(corpus.split("train").image_ids()) + len(dev_ids)
        result["regions"] = time_regions([corpus.images[i] for i in dev_ids[: args.images]], n_total)
    if args.model:
        aligner = Aligner.load(args.model, device="cpu")
        dev = _dev_pairs(corpus)
        key = "shipped" if args.model == "aligner" else "dev"
        result[key], s_kl = _rank_dev(aligner, corpus, dev, args)
        if args.fuse:
            tuned = tune_fusion_on_slice(corpus, args) if args.tune_on else None
            result["fusion"] = fuse_with_joint_model(aligner, corpus, dev, s_kl, args.write_fusion, tuned)
        if args.words:
            result["word_magnitudes"] = word_magnitudes(aligner, corpus)
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_result(path, result)


def _dev_pairs(corpus, split: str = "dev") -> tuple[list[str], list[str], list[str]]:
    """A split's image ids (those with captions), the captions image by image, each caption's image id."""
    by_image = corpus.split(split).captions_by_image()
    ids = [i for i, caps in by_image.items() if caps]
    return ids, [c for i in ids for c in by_image[i]], [i for i in ids for _ in by_image[i]]


def _rank_dev(aligner: Aligner, corpus, dev: tuple, args: argparse.Namespace) -> tuple[dict, np.ndarray]:
    """Dev ranked by S_kl (the region features cached before the clock starts); S_kl for the fusion."""
    ids, texts, cap_ids = dev
    feats = torch.from_numpy(aligner.regions(corpus, image_ids=ids, progress=False).features)
    t0 = time.perf_counter()
    s_kl = evaluate_scores(aligner.model, feats, texts)
    metrics = ranking_metrics(s_kl, positives_from_ids(ids, cap_ids))
    metrics.update(n_images=len(ids), n_captions=len(texts), seconds=round(time.perf_counter() - t0, 1))
    out = {"model": str(args.model), "file_bytes": aligner.path.stat().st_size}
    out.update(extra=aligner.extra.get("train"), best_epoch=aligner.extra.get("epoch"), **metrics)
    if "packed_from" in aligner.extra:  # ship/ship_aligner.py: which runs and epochs
        members = aligner.extra["packed_from"]
        # members chosen on dev (the first shipped aligner) carry their dev rsum; members chosen on
        # flickr8k-val1000 (ship/aligner_reselect.py) do not: dev was read once, for the packed file
        out["packed_from"] = [
            {"recipe": m["recipe"], "epoch": m["epoch"]}
            | ({"dev_rsum": round(m["dev"]["rsum"], 2)} if "dev" in m else {})
            for m in members
        ]
        if "selection" in aligner.extra:
            out["selection"] = aligner.extra["selection"]
    if args.run:
        log = [json.loads(line) for line in (Path(args.run) / "log.jsonl").read_text().splitlines()]
        out["training"] = {
            "epochs": len(log),
            "minutes": round(sum(e.get("time_s", e.get("train_s", 0.0)) for e in log) / 60, 1),
            "dev_rsum_by_epoch": [round(e["dev"]["rsum"], 2) for e in log if "dev" in e],
        }
    i2t, t2i = metrics["i2t"], metrics["t2i"]
    print(
        f"dev i2t {i2t['r1']:.1f}/{i2t['r5']:.1f}/{i2t['r10']:.1f} medr {i2t['medr']}, "
        f"t2i {t2i['r1']:.1f}/{t2i['r5']:.1f}/{t2i['r10']:.1f} medr {t2i['medr']} "
        f"rsum {metrics['rsum']:.1f} ({metrics['seconds']} s)"
    )
    return out, s_kl


def _halves(image_ids: list[str], cap_image_ids: list[str]) -> dict:
    """Even-numbered dev images (tune) and odd-numbered ones (held out), each with its captions."""
    halves = {}
    for name, start in (("tune", 0), ("held_out", 1)):
        rows = list(range(start, len(image_ids), 2))
        keep = {image_ids[r] for r in rows}
        cols = [j for j, i in enumerate(cap_image_ids) if i in keep]
        positives = positives_from_ids([image_ids[r] for r in rows], [cap_image_ids[j] for j in cols])
        halves[name] = (np.ix_(rows, cols), positives)
    everything = np.ix_(range(len(image_ids)), range(len(cap_image_ids)))
    halves["all"] = (everything, positives_from_ids(image_ids, cap_image_ids))
    return halves


WEIGHT_GRID = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.75, 1.0, 1.5, 2.0, 3.0)


def score_statistics(cosine: np.ndarray, s_kl: np.ndarray) -> dict:
    """Mean and sd of both scores over every (image, caption) pair: what puts them on one scale."""
    return {
        "cosine_mean": float(cosine.mean()),
        "cosine_std": float(cosine.std()),
        "skl_mean": float(s_kl.mean()),
        "skl_std": float(s_kl.std()),
    }


def joint_cosines(joint, corpus, ids: list[str], texts: list[str]) -> np.ndarray:
    return joint.embed_features(joint.corpus_features(corpus, ids)) @ joint.embed_texts(texts).T


def tune_fusion_on_slice(corpus, args: argparse.Namespace) -> dict:
    """The selection protocol's fusion: weight and statistics chosen on the validation slice, scored by a
    joint model and an aligner that never trained on it (so neither score is inflated there)."""
    import vsekit
    from vsekit.data.splits import apply_validation_slice, load_validation_slice

    if not (args.tune_joint and args.tune_aligner):
        raise SystemExit("--tune-on needs --tune-joint and --tune-aligner (models trained without the slice)")
    vslice = load_validation_slice(args.tune_on)
    sliced = apply_validation_slice(corpus, vslice)
    ids, texts, cap_ids = _dev_pairs(sliced, vslice.name)
    aligner = Aligner.load(args.tune_aligner, device="cpu")
    feats = torch.from_numpy(aligner.regions(sliced, image_ids=ids, progress=False).features)
    s_kl = evaluate_scores(aligner.model, feats, texts)
    cosine = joint_cosines(vsekit.load_model(args.tune_joint, device="cpu"), sliced, ids, texts)
    stats = score_statistics(cosine, s_kl)
    positives = positives_from_ids(ids, cap_ids)
    by_weight = {
        w: round(
            ranking_metrics(FusionSpec("vse", "aligner", w, **stats).fuse(cosine, s_kl), positives)["rsum"], 2
        )
        for w in WEIGHT_GRID
    }
    weight = max(by_weight, key=by_weight.get)
    print(f"{vslice.name}: rsum by weight {by_weight}; chosen w = {weight}")
    return {
        "weight": weight,
        "statistics": stats,
        "tune_rsum_by_weight": by_weight,
        "tuned_on": f"{vslice.name} ({len(ids)} photos, {len(texts)} captions)",
        "tune_models": {"joint": str(args.tune_joint), "aligner": str(args.tune_aligner)},
        "joint_alone_rsum": by_weight.get(0.0),  # w weighs S_kl: 0 is the cosine alone
    }


def fuse_with_joint_model(
    aligner: Aligner, corpus, dev: tuple, s_kl: np.ndarray, write: bool, tuned: dict | None = None
) -> dict:
    """Issue 10, item 8: does S_kl + w * cosine(shipped joint model) rank dev better than either alone?

    The statistics that put both scores on one scale (mean, sd) and the weight w come from ``tuned`` (the
    validation slice, :func:`tune_fusion_on_slice`), or else from the even-numbered dev images with their
    captions; the odd-numbered half is never seen by either, and is where the fused model is judged (all
    of dev is reported too)."""
    import vsekit

    joint = vsekit.load_model(device="cpu")
    ids, texts, cap_ids = dev
    cosine = joint_cosines(joint, corpus, ids, texts)
    halves = _halves(ids, cap_ids)
    tune = halves["tune"][0]
    stats = tuned["statistics"] if tuned else score_statistics(cosine[tune], s_kl[tune])

    def metrics(weight: float, half: str, aligner_only: bool = False) -> dict:
        spec = FusionSpec("vse", "aligner", weight, **stats)
        index, positives = halves[half]
        fused = spec.fuse(0 * cosine, s_kl) if aligner_only else spec.fuse(cosine, s_kl)
        return ranking_metrics(fused[index], positives)

    if tuned:
        best, out = tuned["weight"], dict(tuned)
    else:
        by_weight = {w: round(metrics(w, "tune")["rsum"], 2) for w in WEIGHT_GRID}
        best = max(by_weight, key=by_weight.get)
        out = {
            "weight": best,
            "statistics": stats,
            "tune_rsum_by_weight": by_weight,
            "tuned_on": "the even-numbered dev images",
        }
    for half in ("held_out", "all"):
        out[half] = {
            "joint alone": metrics(0.0, half),
            "aligner alone": metrics(1.0, half, aligner_only=True),
            f"fused w={best}": metrics(best, half),
        }
        for name, m in out[half].items():
            print(
                f"{half}, {name}: i2t {m['i2t']['r1']:.1f}/{m['i2t']['r5']:.1f}/{m['i2t']['r10']:.1f} "
                f"t2i {m['t2i']['r1']:.1f}/{m['t2i']['r5']:.1f}/{m['t2i']['r10']:.1f} rsum {m['rsum']:.1f}"
            )
    if write:
        _write_fusion(aligner, joint, best, stats, out)
    return out


def _write_fusion(aligner: Aligner, joint, weight: float, stats: dict, out: dict) -> None:
    shipped = pretrained_path("aligner")
    if aligner.path is None or file_sha256(aligner.path) != file_sha256(shipped):
        raise SystemExit("--write-fusion needs --model aligner (the shipped aligner)")
    held = out["held_out"]
    proxies = ", ".join(Path(m).name for m in out.get("tune_models", {}).values())
    scored_by = f", scored by models trained without it ({proxies})" if proxies else ""
    spec = FusionSpec(
        "vse",
        "aligner",
        weight,
        **stats,
        joint_sha256=content_fingerprint(joint.path),
        aligner_sha256=content_fingerprint(shipped),
        measured={
            "by": "bench/bench_alignment.py --fuse --write-fusion",
            "date": date.today().isoformat(),
            "how": f"weight and statistics from {out['tuned_on']}" + scored_by,
            "held_out_rsum": {k: round(v["rsum"], 2) for k, v in held.items()},
        },
    )
    spec.save(PACKAGE_DIR / "pretrained" / FUSION_FILE)
    print(f"wrote {PACKAGE_DIR / 'pretrained' / FUSION_FILE} (w = {weight})")


def word_magnitudes(aligner: Aligner, corpus, top: int = 40, min_count: int = 10) -> dict:
    """The paper's Table 4: the average ||s_t|| of each word over the dev captions (words seen at least
    ``min_count`` times), the ``top`` largest and smallest."""
    texts = [c.text for c in corpus.split("dev").captions]
    packed = aligner.word_vectors(texts)
    norms = packed.vectors.norm(dim=1).cpu().numpy()
    words = [w for t in texts for w in aligner.model.words.display_words(t)]
    if len(words) != len(norms):
        raise SystemExit(f"{len(words)} words but {len(norms)} word vectors")
    sums: dict[str, list[float]] = {}
    for word, norm in zip(words, norms, strict=True):
        sums.setdefault(word, []).append(float(norm))
    mean = {w: float(np.mean(v)) for w, v in sums.items() if len(v) >= min_count}
    order = sorted(mean, key=mean.get)
    row = lambda w: [w, round(mean[w], 2), len(sums[w])]  # noqa: E731
    print("largest:", ", ".join(f"{w} {mean[w]:.1f}" for w in order[::-1][:top]))
    print("smallest:", ", ".join(f"{w} {mean[w]:.1f}" for w in order[:top]))
    return {
        "min_count": min_count,
        "n_words": len(mean),
        "columns": ["word", "mean ||s_t||", "count"],
        "largest": [row(w) for w in order[::-1][:top]],
        "smallest": [row(w) for w in order[:top]],
    }


if __name__ == "__main__":
    main()
