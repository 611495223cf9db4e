"""The everyday validation set as one thing: labels of both parts, queries, and where each photo is.

Part one: 152 photos in ../shared/data/everyday/photos (keys like "animals/ocv-001.jpg"); part two: 107 photos
that fetch_extra.py takes from other Debian packages into extra-photos/ (keys "extra/animals/tp-009.jpg").
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHARED = HERE.parents[2] / "shared" / "data" / "everyday" / "photos"
EXTRA = HERE / "extra-photos"


def labels() -> dict[str, dict]:
    """Every photo's labels (README.md), both parts, sorted by key."""
    found = json.loads((HERE / "labels.json").read_text())
    found.update(json.loads((HERE / "labels-extra.json").read_text()))
    return dict(sorted(found.items()))


def queries() -> list[dict]:
    return json.loads((HERE / "queries.json").read_text())


def relevant(labels: dict[str, dict], rule: dict) -> list[str]:
    """The photos a query's rule makes fit it (``files``; or ``any``/``main`` labels, ``require``d one)."""
    if "files" in rule:
        return sorted(rule["files"])
    out = []
    for name, label in labels.items():
        things = {label["main"], *label["objects"]}
        hit = label["main"] in rule["main"] if "main" in rule else bool(things & set(rule["any"]))
        if hit and ("require" not in rule or rule["require"] in things):
            out.append(name)
    return sorted(out)


def photo_path(key: str) -> Path:
    """Where a photo of the set is on disk (run fetch_extra.py once for the second part)."""
    if key.startswith("extra/"):
        path = EXTRA / key.removeprefix("extra/")
        if not path.is_file():
            raise SystemExit(f"{path}: missing; run `python bench/everyday/fetch_extra.py` first")
        return path
    return SHARED / key


def ranking_metrics(rankings: list[list[str]], queries: list[dict]) -> dict[str, float]:
    """Over the ``queries`` with a fitting photo, each with its ``rankings`` entry (photo keys, best
    first): a fit in the top 5, precision@5 and recall@10."""
    top5 = p5 = r10 = 0.0
    for found, q in zip(rankings, queries, strict=True):
        fits = set(q["relevant"])
        top5 += bool(fits & set(found[:5]))
        p5 += len(fits & set(found[:5])) / 5
        r10 += len(fits & set(found[:10])) / len(fits)
    n = len(queries)
    return {
        "fit_in_top5": round(top5 / n, 4),
        "precision_at_5": round(p5 / n, 4),
        "recall_at_10": round(r10 / n, 4),
    }
