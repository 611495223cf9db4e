"""What the concept route costs (issue 33): search latency at 10K photos, and index build speed.

    python bench/bench_concepts.py                # both; writes bench/results/concepts_cost.json
    python bench/bench_concepts.py --photos 10000 --queries 60

* **search**: a 10,000-photo index of the shipped ``vse`` (synthetic unit vectors and synthetic top-10
  classes, Dirichlet-drawn, so no photo folder is needed: the query side does the same work as with real
  photos), searched warm by distinct sentences, fused (both routes) and ``joint_only`` (the joint space
  alone), one thread. The difference of the medians is what the concept route adds.
* **build**: ``vsekit index build`` of the 152 everyday photos (../shared/data/everyday) with the classes
  and without them (the classifier switched off as in a build before the concept route), fresh index each,
  best of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from _common import latency_ms, run_meta, write_result
from vsekit import Index, load_model
from vsekit.retrieval import build as build_module
from vsekit.retrieval.build import add_vectors, new_store
from vsekit.retrieval.concepts import concepts_setting
from vsekit.retrieval.joint_model import model_identity
from vsekit.retrieval.store import PhotoRecord, Store, StoreChange, pack_concepts, writer_lock

EVERYDAY = Path(__file__).resolve().parents[2] / "shared" / "data" / "everyday" / "photos"
SUBJECTS = ["a dog", "a red car", "two children", "a cat on a sofa", "a bowl of soup", "a mountain lake"]
PLACES = ["in the snow", "on the beach", "in a kitchen", "at night", "in a park", "on a street"]


def synthetic_index(out: Path, n: int, seed: int = 0) -> None:
    """``n`` photos of the shipped vse's dimension with random vectors and random top-10 classes."""
    model = load_model()
    identity = model_identity(model, "vse")
    rng = np.random.default_rng(seed)
    new_store(out, model.embed_dim, dtype="float16", engine="exact", photos_dir=str(out), model=identity)
    vectors = rng.standard_normal((n, model.embed_dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    photos = [PhotoRecord(f"p{i:06d}.jpg", 1000 + i, i, f"{i:064x}") for i in range(n)]
    add_vectors(out, photos, vectors)
    classes = {}
    for p in photos:
        ids = rng.choice(1000, size=10, replace=False)
        probs = np.sort(rng.dirichlet(np.full(10, 0.3)))[::-1]
        classes[p.sha256] = pack_concepts(ids, probs)
    with writer_lock(out):
        store = Store.open(out)
        store.put_concepts(classes)
        store.commit(StoreChange(settings={"concepts": concepts_setting(model.image_spec["backbone"])}))
        store.close()


def search_latency(n: int, queries: int) -> dict:
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "index"
        synthetic_index(out, n)
        index = Index.open(out)
        texts = [f"{s} {p}" for s in SUBJECTS for p in PLACES][:queries]
        index.answer("warm up", k=10)  # the models, the class table
        timings = {"fused": [], "joint_only": []}
        for i, text in enumerate(texts):
            for mode in ("fused", "joint_only") if i % 2 else ("joint_only", "fused"):
                index.embed_texts([text + f" {mode}"])  # the sentence encoder's cost out of both
                start = time.perf_counter()
                found = index.answer(text + f" {mode}", k=10, joint_only=mode == "joint_only")
                timings[mode].append(time.perf_counter() - start)
                assert found.routes == (("joint",) if mode == "joint_only" else ("joint", "concept"))
    fused, joint = latency_ms(timings["fused"]), latency_ms(timings["joint_only"])
    return {"photos": n, "queries": len(texts), "fused_ms": fused, "joint_only_ms": joint,
            "added_p50_ms": round(fused["p50_ms"] - joint["p50_ms"], 2)}  # fmt: skip


def build_speed(repeat: int) -> dict:
    if not EVERYDAY.is_dir():
        return {"skipped": f"{EVERYDAY} not found"}
    runs = {"with_classes": [], "without_classes": []}
    load_model()  # loaded once, outside the timings
    for _ in range(repeat):
        for mode in runs:
            with tempfile.TemporaryDirectory() as tmp:
                original = build_module.photo_classifier
                if mode == "without_classes":
                    build_module.photo_classifier = lambda model: None
                try:
                    start = time.perf_counter()
                    Index.build(EVERYDAY, Path(tmp) / "index", progress=False)
                    runs[mode].append(time.perf_counter() - start)
                finally:
                    build_module.photo_classifier = original
                shutil.rmtree(Path(tmp) / "index", ignore_errors=True)
    best = {mode: min(t) for mode, t in runs.items()}
    photos = sum(1 for _ in EVERYDAY.rglob("*.jpg"))
    return {"photos": photos, "seconds_best": {k: round(v, 2) for k, v in best.items()},
            "photos_per_s": {k: round(photos / v, 2) for k, v in best.items()},
            "slowdown": round(best["with_classes"] / best["without_classes"] - 1, 4)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--photos", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=36)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    result = run_meta(threads=1) | {"benchmark": "concepts_cost", "backbone": "efficientnet_lite0"}
    result["search"] = search_latency(args.photos, args.queries)
    print(result["search"])
    result["build"] = build_speed(args.repeat)
    print(result["build"])
    write_result("concepts_cost.json", result)


if __name__ == "__main__":
    main()
