"""Does the concept route find more when the classifier also reads parts of the photo? (issue 33, a probe)

    python ship/concept_regions.py --proxy /work/runs/vse-views-val1000.safetensors

The concept route (:mod:`vsekit.retrieval.concepts`) reads each photo's ImageNet class probabilities from
the global-average-pooled features. Its everyday failures are classifier limits: a thing the global
classifier misreads, or a small subject in a busy photo. The classifier is linear over the last conv
grid (``S_c = mean_{x,y} M_c(x, y) + b_c``, the CAM identity of :mod:`vsekit.vision.cam`), so the
probabilities of a pooled sub-region of the grid cost one more small matrix product on numbers the CNN
computes anyway. Candidates, each scored alone with the same fusion rule and its fusion and weak
thresholds chosen again on these validation sets with the grid of bench/concept_route.py:

* ``lite0-global``: today (the pooled 7 x 7 grid of EfficientNet-Lite0's centre crop);
* ``lite0-<regions>-<combine>``: the same grid's class probabilities also for sub-windows (``corners``:
  the four overlapping 5 x 5 windows in the corners, ``centre``: the centre 5 x 5, ``small``: nine 3 x 3
  windows at stride 2), combined per class with the global probabilities by ``max`` or noisy-OR before the
  top 10 are kept;
* ``lite2-...``: the same with the shipped EfficientNet-Lite2's classifier (a second CNN pass at 260 px: the
  joint space stays on Lite0's features).

Also: the ceiling of precision@5 on the everyday set (a query with 2 fitting photos cannot score above
0.4), and what each candidate costs per photo beside today's index build (``embed_chunk``: read, decode,
CNN, joint embedding, classes), one thread. Validation only (everyday and flickr8k-val1000); never dev or
test. Writes bench/results/concept_regions.json.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

import concept_route as route
from _common import run_meta, write_result
from everyday import dataset as everyday
from vsekit.embedding.pipeline import VSEModel
from vsekit.resources import pretrained_path
from vsekit.retrieval.build import embed_chunk
from vsekit.retrieval.concepts import ConceptRoute, concept_scores
from vsekit.retrieval.photos import PhotoFile
from vsekit.vision.backbones import BACKBONES, load_backbone, prepare_for_inference
from vsekit.vision.classes import TOP_CLASSES, load_classifier, top_classes
from vsekit.vision.preprocess import load_image

CACHE = Path("/tmp/concept_regions_cache")
BACKBONE_NAMES = ("efficientnet_lite0", "efficientnet_lite2")
SHORT = {"efficientnet_lite0": "lite0", "efficientnet_lite2": "lite2"}
FAMILIES = ("corners", "centre", "corners+centre", "small", "corners+centre+small")
COMBINES = ("max", "noisy-or")
SHIPPED = {"scale": 0.75, "offset": 0.2, "gate": route.GATE}  # bench/results/concept_route.json's choice


# ----------------------------------------------------------------------------- the grid's windows
def windows(h: int) -> dict[str, list[tuple[int, int, int]]]:
    """``(y0, x0, size)`` windows of an ``h x h`` grid by family: the whole grid, the four corner windows and
    the centre window of 5/7 of its side (5 x 5 on Lite0's 7 x 7), nine windows of 3/7 of its side."""
    big, small = round(h * 5 / 7), round(h * 3 / 7)
    centre = (h - big) // 2
    steps = sorted({int(round(s)) for s in np.linspace(0, h - small, 3)})
    return {
        "global": [(0, 0, h)],
        "corners": [(y, x, big) for y in (0, h - big) for x in (0, h - big)],
        "centre": [(centre, centre, big)],
        "small": [(y, x, small) for y in steps for x in steps],
    }


def window_list(h: int) -> list[tuple[int, int, int]]:
    return [w for family in windows(h).values() for w in family]


def pooled_windows(grid: np.ndarray, wins: list[tuple[int, int, int]]) -> np.ndarray:
    """``[n, W, K]``: the mean of ``grid [n, K, h, w]`` over each window."""
    return np.stack([grid[:, :, y : y + s, x : x + s].mean(axis=(2, 3)) for y, x, s in wins], axis=1)


def window_probabilities(backbone: str, pooled: np.ndarray) -> np.ndarray:
    """``[n, W, 1000]`` softmax probabilities of each window's pooled features."""
    n, w, k = pooled.shape
    return load_classifier(backbone).probabilities(pooled.reshape(n * w, k)).reshape(n, w, -1)


def combined(probs: np.ndarray, h: int, family: str, how: str) -> np.ndarray:
    """``[n, 1000]``: the global probabilities combined per class with those of ``family``'s windows."""
    if family == "global":
        return probs[:, 0]
    by_family, where, at = windows(h), {}, 0
    for name, wins in by_family.items():
        where[name] = list(range(at, at + len(wins)))
        at += len(wins)
    chosen = [0] + [i for part in family.split("+") for i in where[part]]
    p = probs[:, chosen]
    if how == "max":
        return p.max(axis=1)
    return 1.0 - np.prod(1.0 - p, axis=1)


# ----------------------------------------------------------------------------- one CNN pass per photo
def grid_windows(backbone: str, paths: list[Path], tag: str) -> tuple[np.ndarray, int, float]:
    """``(pooled windows [n, W, K] float32, grid side, seconds per photo of the grid pass)`` of each photo's
    centre crop (the crop the index classifies), through the BN-folded PyTorch backbone; cached in
    :data:`CACHE` (``tag`` names the set)."""
    path = CACHE / f"{backbone}-{tag}.npz"
    if path.is_file():
        saved = np.load(path)
        return saved["pooled"].astype(np.float32), int(saved["side"]), float(saved["seconds"])
    model = prepare_for_inference(load_backbone(backbone))
    pre = BACKBONES[backbone].preprocessing
    out, side, spent = [], 0, 0.0
    for start in range(0, len(paths), 8):
        crops = np.stack([pre.crop_uint8(load_image(p)) for p in paths[start : start + 8]])
        t0 = time.perf_counter()
        x = torch.from_numpy(pre.normalise(crops)).permute(0, 3, 1, 2)
        with torch.inference_mode():
            grid = model.forward_map(x.contiguous(memory_format=torch.channels_last)).float().numpy()
        side = grid.shape[2]
        out.append(pooled_windows(grid, window_list(side)))
        spent += time.perf_counter() - t0
        print(f"{backbone} {tag}: {start + len(crops)}/{len(paths)}", end="\r", flush=True)
    print()
    pooled = np.concatenate(out)
    CACHE.mkdir(parents=True, exist_ok=True)
    np.savez(path, pooled=pooled.astype(np.float16), side=side, seconds=spent / len(paths))
    return pooled, side, spent / len(paths)


# ----------------------------------------------------------------------------- the two sets
def everyday_set(shipped: VSEModel, relevance_route: ConceptRoute) -> dict:
    scores, queries, names = route.everyday_scores(shipped, relevance_route)
    texts = [q["query"] for q in queries]
    return {
        "scores": scores,
        "queries": queries,
        "names": names,
        "paths": [everyday.photo_path(n) for n in names],
        "relevance": relevance_route.relevance(texts),
    }


def val1000_set(proxy: VSEModel, relevance_route: ConceptRoute) -> dict:
    photos = route.val1000_photos(proxy)
    scores, truth = route.val1000_scores(proxy, relevance_route, photos)
    return {
        "scores": scores,
        "truth": truth,
        "paths": [Path(photos.corpus.images[i]) for i in photos.ids],
        "relevance": relevance_route.relevance([c.text for c in photos.captions]),
    }


def concept_of(relevance: np.ndarray, probs: np.ndarray) -> np.ndarray:
    ids, p = top_classes(probs, TOP_CLASSES)
    return concept_scores(relevance, ids, p)


def evaluate(every: dict, val: dict, every_concept: np.ndarray, val_concept: np.ndarray) -> dict:
    """The candidate at today's fusion and thresholds, and with both chosen again (concept_route.py)."""
    e = {"joint": every["scores"]["joint"], "concept": every_concept}
    v = {"joint": val["scores"]["joint"], "concept": val_concept}
    queries, names, truth = every["queries"], every["names"], val["truth"]
    chosen, _ = route.choose_fusion(e, v, queries, names, truth)
    weak = route.choose_thresholds(e, v, queries)
    a, b, g = chosen["scale"], chosen["offset"], chosen["gate"]
    present = np.array([bool(q["relevant"]) for q in queries])
    shipped_weak = json.loads((pretrained_path("vse").with_name("vse-routes.json")).read_text())["weak"]
    weak_now = route.weak_verdicts(route.bests(e), shipped_weak["joint_below"], shipped_weak["concept_below"])
    flagged, kept = float(weak_now[~present].mean()), float(1 - weak_now[present].mean())
    return {
        "refit": {
            "fusion": {"scale": a, "offset": b, "gate": g},
            "everyday": route.everyday_metrics(route.fused(e, a, b, g), queries, names) | weak["everyday"],
            "val1000": route.val1000_metrics(route.fused(v, a, b, g), truth) | weak["val1000"],
            "weak": {"joint_below": weak["joint_below"], "concept_below": weak["concept_below"]},
            "no_fit_in_top5": misses(route.fused(e, a, b, g), queries, names),
        },
        "shipped_settings": {
            "everyday": route.everyday_metrics(
                route.fused(e, SHIPPED["scale"], SHIPPED["offset"], SHIPPED["gate"]), queries, names
            )
            | {"absent_flagged": round(flagged, 4), "present_not_flagged": round(kept, 4)},
            "val1000": route.val1000_metrics(
                route.fused(v, SHIPPED["scale"], SHIPPED["offset"], SHIPPED["gate"]), truth
            ),
        },
    }


def misses(scores: np.ndarray, queries: list[dict], names: list[str]) -> list[str]:
    """The everyday queries with a fitting photo but none in the top 5 of ``scores``."""
    out = []
    for i, q in enumerate(queries):
        top = {names[j] for j in np.argsort(-scores[i], kind="stable")[:5]}
        if q["relevant"] and not top & set(q["relevant"]):
            out.append(q["query"])
    return out


def precision_ceiling(queries: list[dict]) -> dict:
    """The best precision@5 any ranking can have: ``min(5, #fitting) / 5`` averaged over the queries."""
    present = [q for q in queries if q["relevant"]]
    counts = np.array([len(q["relevant"]) for q in present])
    return {
        "precision_at_5": round(float(np.mean(np.minimum(5, counts) / 5)), 4),
        "queries": len(present),
        "queries_with_fewer_than_5_fitting": int((counts < 5).sum()),
        "fitting_photos_median": float(np.median(counts)),
    }


# ----------------------------------------------------------------------------- cost
def build_cost(shipped: VSEModel, paths: list[Path], repeats: int = 2) -> dict:
    """Seconds per photo of today's index build step (:func:`embed_chunk`: read and hash, decode, CNN
    through the default engine, joint embedding, top classes), best of ``repeats``."""
    files = [PhotoFile(str(i), p, p.stat().st_size, p.stat().st_mtime_ns) for i, p in enumerate(paths)]
    embed_chunk(shipped, files[:8], {})  # warm: the CNN session and the classifier load once
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        embed_chunk(shipped, files, {})
        best = min(best, time.perf_counter() - t0)
    return {"embed_chunk_s_per_photo": best / len(paths), "photos": len(paths), "repeats": repeats}


def region_head_cost(backbone: str, paths: list[Path], family: str, how: str, repeats: int = 3) -> float:
    """Seconds per photo of what regions add after the CNN: pool the windows of the grid, classify them,
    combine with the global probabilities, keep the top classes (the grid itself is the map the CNN's
    pooling reads: no more CNN work)."""
    model = prepare_for_inference(load_backbone(backbone))
    pre = BACKBONES[backbone].preprocessing
    crops = np.stack([pre.crop_uint8(load_image(p)) for p in paths[:32]])
    with torch.inference_mode():
        x = torch.from_numpy(pre.normalise(crops)).permute(0, 3, 1, 2)
        grid = model.forward_map(x.contiguous(memory_format=torch.channels_last)).float().numpy()
    side = grid.shape[2]
    wins = window_list(side)
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        for start in range(0, len(grid), 8):
            probs = window_probabilities(backbone, pooled_windows(grid[start : start + 8], wins))
            top_classes(combined(probs, side, family, how), TOP_CLASSES)
        best = min(best, time.perf_counter() - t0)
    return best / len(grid)


def second_pass_cost(paths: list[Path], repeats: int = 2) -> float:
    """Seconds per photo of a second CNN pass for Lite2's classes (default engine, decode included)."""
    from vsekit.vision.features import features_for_model

    spec = {"backbone": "efficientnet_lite2", "kind": "one-layer", "image_dim": 1280}
    classifier = load_classifier("efficientnet_lite2")
    features_for_model(spec, [str(p) for p in paths[:8]], cache=False)  # warm (and export the graph once)
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        for start in range(0, len(paths), 8):
            images = [str(p) for p in paths[start : start + 8]]
            top_classes(classifier.probabilities(features_for_model(spec, images, cache=False)), TOP_CLASSES)
        best = min(best, time.perf_counter() - t0)
    return best / len(paths)


# ----------------------------------------------------------------------------- main
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--proxy", type=Path, required=True, help="vse recipe trained without val1000")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-cost", action="store_true", help="skip the timing (numbers only)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    shipped, proxy = VSEModel.load("vse"), VSEModel.load(args.proxy)
    every = everyday_set(shipped, ConceptRoute.create(shipped.network.text_encoder, route.MARGIN))
    val = val1000_set(proxy, ConceptRoute.create(proxy.network.text_encoder, route.MARGIN))

    candidates: dict[str, dict] = {}
    today = evaluate(every, val, every["scores"]["concept"], val["scores"]["concept"])
    candidates["lite0-global-index"] = today  # as the index computes it: default engine, float16 rows
    grids = {}
    for backbone in BACKBONE_NAMES:
        e_pooled, side, e_s = grid_windows(backbone, every["paths"], "everyday")
        v_pooled, _, v_s = grid_windows(backbone, val["paths"], "val1000")
        e_probs, v_probs = window_probabilities(backbone, e_pooled), window_probabilities(backbone, v_pooled)
        grids[backbone] = {"side": side, "grid_pass_s_per_photo_torch": round((e_s + v_s) / 2, 4)}
        for family in ("global", *FAMILIES):
            for how in ("max",) if family == "global" else COMBINES:
                name = f"{SHORT[backbone]}-{family}" + ("" if family == "global" else f"-{how}")
                ec = concept_of(every["relevance"], combined(e_probs, side, family, how))
                vc = concept_of(val["relevance"], combined(v_probs, side, family, how))
                candidates[name] = evaluate(every, val, ec, vc)
                r = candidates[name]["refit"]
                print(name, json.dumps({"everyday": r["everyday"], "val1000": r["val1000"]}), flush=True)

    cost: dict = {"threads": args.threads}
    if not args.no_cost:
        cost["today"] = build_cost(shipped, every["paths"])
        base = cost["today"]["embed_chunk_s_per_photo"]
        cost["regions_head_s_per_photo"] = {
            f"{SHORT[b]}-{family}-{how}": region_head_cost(b, every["paths"], family, how)
            for b in BACKBONE_NAMES
            for family in FAMILIES
            for how in COMBINES
        }
        cost["regions_head_share_of_build"] = {
            k: round(v / base, 4) for k, v in cost["regions_head_s_per_photo"].items()
        }
        cost["lite2_second_pass_s_per_photo"] = second_pass_cost(every["paths"])
        cost["lite2_second_pass_share_of_build"] = round(cost["lite2_second_pass_s_per_photo"] / base, 4)
    result = run_meta(threads=args.threads) | {
        "benchmark": "concept_regions",
        "sets": {
            "everyday": {"photos": len(every["names"]), "queries": len(every["queries"])},
            "val1000": {"captions": len(val["truth"]), "proxy": args.proxy.name},
        },
        "rule": "max(cos, scale * concept + offset) where concept >= gate; fusion and weak thresholds "
        "chosen per candidate with bench/concept_route.py's grid and rule (refit); shipped_settings: "
        "today's fusion and thresholds unchanged",
        "top_classes": TOP_CLASSES,
        "margin": route.MARGIN,
        "windows": {SHORT[b]: windows(g["side"]) for b, g in grids.items()},
        "grids": grids,
        "precision_at_5_ceiling": precision_ceiling(every["queries"]),
        "candidates": candidates,
        "cost": cost,
    }
    write_result("concept_regions.json", result)
    print(json.dumps({k: v["refit"] for k, v in candidates.items()}, indent=1))
    print(json.dumps(result["precision_at_5_ceiling"]), json.dumps(cost, indent=1))


if __name__ == "__main__":
    main()
