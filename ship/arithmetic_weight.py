"""Choose the words' weight of photo arithmetic (Kiros et al. 2014, Eq. 15) on the validation slice.

    python ship/arithmetic_weight.py --proxy PROXY.safetensors          # val1000 grid and the choice
    python ship/arithmetic_weight.py --proxy PROXY.safetensors --ship   # and pretrained/vse-arithmetic.json
    python ship/arithmetic_weight.py --ship                             # the choice arithmetic.json holds
    python ship/arithmetic_weight.py --dev                              # dev, read once: before and after

Candidates: ``q' = normalise(q + weight * (sum plus - sum minus))`` (each word unit-norm; weight 1 is the
paper's Eq. 15), for every weight of WEIGHTS, with the words embedded bare ("beach") or as a phrase ("a photo
of beach"), measured by the protocol of bench/bench_search.py (:func:`bench_search.arithmetic`: 400 queries,
a photo showing scene A minus "A" plus "B"; *right*: the share of top-10 hits whose captions mention B and
not A; *closeness*: their mean cosine to the source photo in the vse photo space) on the 1,000 photos of
flickr8k-val1000. ``vse``: PROXY, the shipped recipe trained without val1000; ``bow``: the shipped file,
trained on all of train (its val1000 rows are not held out). Closeness is measured in PROXY's photo space for
both models.

The rule, fixed before the grid was run: the highest *right* among candidates whose closeness stays at or
above CLOSENESS_FLOOR, 0.15 (for scale: bench/results/search.json has 0.29 for vse at weight 1 on dev, 0.08
for bow, about 0 for "text B" alone); ties go to the smaller weight, then to bare words. A model
none of whose candidates reach the floor keeps weight 1. Writes bench/results/arithmetic.json; ``--ship``
writes the chosen vse weight as src/vsekit/pretrained/vse-arithmetic.json pinned to the shipped vse's sha256
(:func:`vsekit.retrieval.arithmetic.load_arithmetic_weight`). ``--dev`` reads the chosen rule back from the
JSON and measures the shipped vse and bow on the 1,000 dev photos, before (weight 1) and after, closeness in
the shipped vse's photo space; it adds ``dev`` to the JSON.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
from pathlib import Path

from _common import RESULTS, run_meta, write_result

WEIGHTS = (1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0)
PHRASES = ("{}", "a photo of {}")
CLOSENESS_FLOOR = 0.15
SLICE = "flickr8k-val1000"
OUT = "arithmetic.json"
FORMAT = "vsekit.arithmetic"


def _row(result: dict) -> dict:
    s = result["summary"]["arithmetic"]
    return {
        "weight": result["weight"],
        "phrase": result["phrase"],
        "right": round(float(s["right"]), 4),
        "mentions_b": round(float(s["mentions_b"]), 4),
        "closeness": round(float(s["cos_to_source"]), 4),
    }


def _baselines(result: dict) -> dict:
    return {
        m: {"right": round(float(s["right"]), 4), "closeness": round(s["cos_to_source"], 4)}
        for m, s in result["summary"].items()
        if m != "arithmetic"
    }


def choose(rows: list[dict], floor: float = CLOSENESS_FLOOR) -> dict:
    """The rule of the module docstring: the highest right at closeness >= floor, else weight 1 bare."""
    allowed = [r for r in rows if r["closeness"] >= floor]
    if not allowed:
        return {"weight": 1.0, "phrase": "{}", "why": f"no candidate keeps closeness >= {floor}"}
    best = min(allowed, key=lambda r: (-r["right"], r["weight"], PHRASES.index(r["phrase"])))
    return {
        "weight": best["weight"],
        "phrase": best["phrase"],
        "why": f"highest right at closeness >= {floor}",
    }


def grid(embedded, reference, split) -> tuple[list[dict], dict, dict]:
    from bench_search import arithmetic

    rows, by_rule = [], {}
    for phrase in PHRASES:
        for weight in WEIGHTS:
            result = arithmetic(embedded, reference=reference, split=split, weight=weight, phrase=phrase)
            rows.append(_row(result))
            by_rule[weight, phrase] = result
            print(rows[-1], flush=True)
    return rows, _baselines(by_rule[1.0, "{}"]), by_rule


def _sha(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def validation(proxy: Path, threads: int) -> dict:
    from bench_search import embed_split, split_photos
    from vsekit.embedding.pipeline import VSEModel

    split = split_photos(SLICE)
    vse, bow = VSEModel.load(proxy), VSEModel.load("bow")
    reference = embed_split(vse, split)
    out: dict = {}
    for name in ("vse", "bow"):
        embedded = reference if name == "vse" else embed_split(bow, split)
        rows, baselines, by_rule = grid(embedded, reference, split)
        chosen = choose(rows)
        out[name] = {
            "model": proxy.name if name == "vse" else "bow (shipped; trained on all of train: not held out)",
            "queries": by_rule[1.0, "{}"]["queries"],
            "grid": rows,
            "baselines": baselines,
            "chosen": chosen | {"row": _row(by_rule[chosen["weight"], chosen["phrase"]])},
            "chosen_pairs": by_rule[chosen["weight"], chosen["phrase"]]["pairs"],
        }
    return run_meta(threads=threads) | {
        "benchmark": "arithmetic",
        "split": SLICE,
        "photos": len(reference.paths),
        "closeness_space": f"{proxy.name} photo embeddings (both models)",
        "protocol": "bench/bench_search.py arithmetic(): 400 queries over the scene words; right = top-10 "
        "hits mention B and not A; closeness = mean cosine of the hits to the source photo",
        "candidates": {"weights": list(WEIGHTS), "phrases": list(PHRASES)},
        "rule": f"highest right among candidates with closeness >= {CLOSENESS_FLOOR} "
        "(fixed before the grid); "
        "ties: smaller weight, then bare words; none: weight 1",
        "closeness_floor": CLOSENESS_FLOOR,
        "val1000": out,
    }


def dev(result: dict, threads: int) -> dict:
    from bench_search import arithmetic, embed_split, split_photos
    from vsekit.embedding.pipeline import VSEModel
    from vsekit.resources import pretrained_path

    split = split_photos("dev")
    vse, bow = VSEModel.load("vse"), VSEModel.load("bow")
    reference = embed_split(vse, split)
    rows: dict = {}
    for name, model in (("vse", vse), ("bow", bow)):
        embedded = reference if name == "vse" else embed_split(model, split)
        chosen = result["val1000"][name]["chosen"]
        before = arithmetic(embedded, reference=reference, split=split)
        after = arithmetic(
            embedded, reference=reference, split=split, weight=chosen["weight"], phrase=chosen["phrase"]
        )
        rows[name] = {
            "model": f"{name} (shipped, sha256 {_sha(pretrained_path(name))[:12]})",
            "queries": before["queries"],
            "before": _row(before),
            "after": _row(after),
            "baselines": _baselines(before),
            "after_pairs": after["pairs"],
        }
        print(name, rows[name]["before"], rows[name]["after"], rows[name]["baselines"], flush=True)
    return {"run": run_meta(threads=threads), "closeness_space": "the shipped vse's photo embeddings"} | rows


def ship(chosen: dict) -> None:
    from vsekit.resources import pretrained_path

    path = pretrained_path("vse")
    data = {
        "format": FORMAT,
        "model": "vse",
        "model_sha256": _sha(path),
        "weight": chosen["weight"],
        "phrase": chosen["phrase"],
        "rule": "q' = normalise(q + weight * (sum plus - sum minus)), each word put in the phrase, embedded "
        "and unit-normed (Kiros Eq. 15: weight 1, bare words)",
        "made_with": {
            "script": "ship/arithmetic_weight.py",
            "data": f"{SLICE} photos embedded by the shipped vse recipe trained without them; "
            "results in bench/results/arithmetic.json",
            "rule": f"highest right at closeness >= {CLOSENESS_FLOOR}",
        },
    }
    out = path.with_name("vse-arithmetic.json")
    out.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--proxy", type=Path, help="the vse recipe trained without val1000")
    parser.add_argument("--ship", action="store_true", help="write src/vsekit/pretrained/vse-arithmetic.json")
    parser.add_argument("--dev", action="store_true", help="dev, once: the shipped models before and after")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    import torch

    torch.set_num_threads(args.threads)
    path = RESULTS / OUT
    if args.ship and args.proxy is None and not args.dev:  # the choice already recorded
        ship(json.loads(path.read_text())["val1000"]["vse"]["chosen"])
        return
    if args.dev:
        result = json.loads(path.read_text())
        result["dev"] = dev(result, args.threads)
    else:
        if args.proxy is None:
            parser.error("--proxy is needed for the validation grid")
        result = validation(args.proxy, args.threads)
        for name in ("vse", "bow"):
            print(name, "chosen:", result["val1000"][name]["chosen"])
    write_result(OUT, result)
    if args.ship:
        ship(result["val1000"]["vse"]["chosen"])


if __name__ == "__main__":
    main()
