"""Benchmark: photo-collection search (issue 11): engines, search = eval, indexing, the web API, Eq. 15.

Sections (each merged into bench/results/search.json under its own key, so they can be run one at a time):

* ``engines``: synthetic unit vectors at the shipped model's dimension (2048), N = 10K and 100K by default.
  Build time and bytes per vector of each engine; single-query latency p50/p99 of vsekit's exact search
  (chunked torch, :func:`vsekit.retrieval.search.exact_search`) against FAISS ``IndexFlatIP``, interleaved
  query by query in one run (their ratio is the goal: exact within 1.2x of FAISS flat); recall@10 against
  exact search and p50/p99 latency for HNSW (efSearch sweep) and IVF (nprobe sweep), plus the value the
  index's own calibration picks (on the bundled sample's captions and photo-like queries), and the
  recall of those captions. Goal: recall@10 >= 0.95 at p50 <= 5 ms. N = 1M: ``bench_search_1m.py``
  (float16, one structure at a time; here 1M would need about 17 GB: the matrix and a FAISS copy).
  *Vectors*: ``--distribution real-spectrum`` (default) draws Gaussian vectors with the mean and the
  principal axes / variances of the shipped model's embeddings of all Flickr8K photos (from the feature
  cache), then normalises them: anisotropic like real embeddings (uniform random unit vectors in 2048-d
  are all nearly orthogonal, a worst case no real collection looks like); ``uniform`` is that worst case.
  *Queries*: stored vectors pushed away to a cosine of about 0.3 (vector + 3 x a random unit vector,
  renormalised), as the index's calibration builds them and as a sentence lies from its best photo, so
  that recall is not trivially 1 (a stored vector finds itself). The query vectors are not the
  calibration's (another seed).
* ``real``: the 1,000 Flickr8K dev photos (symlinked into a temporary folder) indexed with the shipped
  model through ``vsekit.Index.build`` (photos/s end to end: decode, CNN, projection, writes); all 5,000
  dev captions searched through ``Index.search_texts`` (exact) and the same query vectors through each
  engine; t2i R@1/5/10 from the hits, compared with ``vsekit eval --split dev --json`` run as a child.
* ``serve``: ``vsekit serve`` on that index (a child process, 127.0.0.1, a free port); 500
  ``GET /api/search?q=...&k=10`` with 8 in flight (httpx), after 10 warm-up requests: p50/p99, requests/s;
  and 50 requests from one client alone. ``--serve-threads`` sets the server's OMP threads.
* ``arithmetic``: Kiros et al. 2014, Eq. 15, on the dev index. See :func:`arithmetic` for the protocol.

Prints markdown tables and writes bench/results/search.json.

    python bench/bench_search.py [--sizes 10000 100000] [--only engines real serve arithmetic]
        [--bow-model /tmp/bow/model.safetensors] [--threads 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from _common import latency_ms, load_now, model_extra, run_meta, write_result

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("VSEKIT_SHARED_DATA", REPO.parent / "shared" / "data" / "flickr8k"))
RESULTS = REPO / "bench" / "results" / "search.json"
VSEKIT = str(Path(sys.executable).parent / "vsekit")
K = 10
QUERY_SEED = 4321  # not the calibration's seed (1234)


# --------------------------------------------------------------------------- helpers
def _load() -> dict:
    """What this machine is doing besides us: load average and the other processes using CPU (ps)."""
    ps = subprocess.run(["ps", "-eo", "pid,ppid,pcpu,args", "--sort=-pcpu"], capture_output=True, text=True)
    mine = {os.getpid()}
    others = []
    for line in ps.stdout.splitlines()[1:]:
        pid, ppid, pcpu, args = line.split(None, 3)
        if int(ppid) in mine or int(pid) in mine:
            mine.add(int(pid))
            continue
        if float(pcpu) >= 10 and not args.startswith("ps "):
            others.append(f"{float(pcpu):.0f}% {args[:100]}")
    return {**load_now(), "other_processes": others}


def _pct(times_s: list[float]) -> dict:
    return latency_ms(times_s)


def _queries_near(vectors: np.ndarray, n: int, seed: int) -> np.ndarray:
    """``n`` stored vectors, each + 3 x a random unit vector, renormalised (cosine ~0.32 to its origin)."""
    rng = np.random.default_rng(seed)
    rows = np.sort(rng.choice(len(vectors), size=min(n, len(vectors)), replace=False))
    noise = rng.standard_normal((len(rows), vectors.shape[1])).astype(np.float32)
    q = vectors[rows] + 3.0 * noise / np.linalg.norm(noise, axis=1, keepdims=True)
    return (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)


def _recall(truth: np.ndarray, found: np.ndarray) -> float:
    return float(np.mean([len(set(t) & set(f)) / truth.shape[1] for t, f in zip(truth, found, strict=True)]))


# --------------------------------------------------------------------------- engines (synthetic)
def _real_spectrum(dim: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean, principal axes and standard deviations of the shipped model's Flickr8K photo embeddings."""
    import torch

    from vsekit.api import load_model
    from vsekit.data import load_corpus

    corpus = load_corpus(SHARED)
    model = load_model()
    ids = sorted(corpus.images)
    with torch.inference_mode():
        emb = model.embed_features(model.corpus_features(corpus, ids, progress=False))
    emb = np.asarray(emb, dtype=np.float64)
    if emb.shape[1] != dim:
        raise SystemExit(f"the shipped model is {emb.shape[1]}-d, not {dim}-d")
    mean = emb.mean(axis=0)
    _, s, vt = np.linalg.svd(emb - mean, full_matrices=False)
    return mean.astype(np.float32), vt.astype(np.float32), (s / np.sqrt(len(emb) - 1)).astype(np.float32)


def synthetic(n: int, dim: int, distribution: str, spectrum, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    out = np.empty((n, dim), dtype=np.float32)
    for start in range(0, n, 50_000):
        m = min(50_000, n - start)
        if distribution == "uniform":
            x = rng.standard_normal((m, dim), dtype=np.float32)
        else:
            mean, axes, std = spectrum
            z = rng.standard_normal((m, len(std)), dtype=np.float32) * std
            x = mean + z @ axes
            # a little isotropic noise: the ~7K real photos span fewer than 2048 directions
            x += rng.standard_normal((m, dim), dtype=np.float32) * np.float32(0.05 * std[-1] + 1e-3)
        out[start : start + m] = x / np.linalg.norm(x, axis=1, keepdims=True)
    return out


def _timed_queries(fn, queries: np.ndarray) -> tuple[list[float], np.ndarray]:
    times, found = [], []
    for q in queries:
        start = time.perf_counter()
        _, rows = fn(q[None])
        times.append(time.perf_counter() - start)
        found.append(rows[0])
    return times, np.asarray(found)


def _sample_captions() -> np.ndarray:
    """The bundled sample's 500 captions embedded by the shipped model (what the index calibrates on)."""
    import vsekit
    from vsekit.retrieval.index import calibration_sentences

    return calibration_sentences(vsekit.load_model())


def engines(n: int, dim: int, distribution: str, spectrum, n_queries: int) -> dict:
    from vsekit.retrieval import search as S

    load_before = _load()
    start = time.perf_counter()
    vectors = synthetic(n, dim, distribution, spectrum)
    gen_s = time.perf_counter() - start
    queries = _queries_near(vectors, n_queries, QUERY_SEED)
    captions = _sample_captions()
    _, caption_truth = S.exact_search(vectors, captions, K)
    # the cosine of a query to the vector it came from, and to its 10th neighbour (how hard the task is)
    truth_s, truth = S.exact_search(vectors, queries, K)

    start = time.perf_counter()
    flat = S.build_ann(vectors, "flat")
    flat_build = time.perf_counter() - start
    # warm-up, then exact and FAISS flat interleaved query by query: background load hits both alike
    for q in queries[:5]:
        S.exact_search(vectors, q[None], K)
        S.faiss_search(flat, q[None], K)
    t_exact, t_flat, flat_found = [], [], []
    for q in queries:
        start = time.perf_counter()
        _, r_exact = S.exact_search(vectors, q[None], K)
        t_exact.append(time.perf_counter() - start)
        start = time.perf_counter()
        _, r_flat = S.faiss_search(flat, q[None], K)
        t_flat.append(time.perf_counter() - start)
        flat_found.append(r_flat[0])
    row = {
        "n": n,
        "dim": dim,
        "distribution": distribution,
        "generate_s": gen_s,
        "query_cosine_top1_mean": float(truth_s[:, 0].mean()),
        "query_cosine_top10_mean": float(truth_s[:, K - 1].mean()),
        "exact": {"build_s": 0.0, "bytes_per_vector": vectors.nbytes / n, **_pct(t_exact)},
        "flat": {
            "build_s": flat_build,
            "bytes_per_vector": flat.ntotal * flat.d * 4 / n,
            "recall@10": _recall(truth, np.asarray(flat_found)),
            **_pct(t_flat),
        },
    }
    row["exact_over_flat_p50"] = row["exact"]["p50_ms"] / row["flat"]["p50_ms"]
    del flat

    for engine, name, values in (
        ("hnsw", "efSearch", (16, 32, 64, 128, 256, 512)),
        ("ivf", "nprobe", (1, 2, 4, 8, 16, 32, 64, 128, 256)),
    ):
        start = time.perf_counter()
        index = S.build_ann(vectors, engine)
        build_s = time.perf_counter() - start
        start = time.perf_counter()
        calibrated = S.calibrate(index, vectors, captions)
        calibrate_s = time.perf_counter() - start
        size = len(S.serialize_ann(index))
        sweep = []
        for value in sorted(set(values) | set(calibrated.values())):  # the calibrated value is measured too
            if engine == "ivf" and value > index.nlist:
                break
            S.set_search_params(index, {name: value})
            for q in queries[:5]:
                S.faiss_search(index, q[None], K)
            times, found = _timed_queries(lambda q, index=index: S.faiss_search(index, q, K), queries)
            _, on_captions = S.faiss_search(index, captions, K)
            sweep.append(
                {
                    name: value,
                    "recall@10": _recall(truth, found),
                    "recall@10_captions": _recall(caption_truth, on_captions),
                    **_pct(times),
                }
            )
        good = [s for s in sweep if s["recall@10"] >= 0.95]
        best = min(good, key=lambda s: s["p50_ms"]) if good else None
        row[engine] = {
            "build_s": build_s,
            "bytes_per_vector": size / n,
            "params": {"M": S.HNSW_M, "efConstruction": S.HNSW_EF_CONSTRUCTION}
            if engine == "hnsw"
            else {"nlist": int(index.nlist)},
            "calibrated": calibrated,
            "calibrate_s": calibrate_s,
            "sweep": sweep,
            "fastest_at_recall_0.95": best,
            "goal_met": bool(best and best["p50_ms"] <= 5.0),
        }
        del index
    row["load"] = {"before": load_before, "after": _load()}
    return row


def print_engines(rows: list[dict]) -> None:
    print("\n| N | vectors | engine | build s | bytes/vector | p50 ms | p99 ms | recall@10 | setting |")
    print("| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for r in rows:
        head = f"| {r['n']:,} | {r['distribution']} "
        for e in ("exact", "flat"):
            x = r[e]
            rec = f"{x['recall@10']:.3f}" if "recall@10" in x else "1 (truth)"
            print(
                f"{head}| {e} | {x['build_s']:.1f} | {x['bytes_per_vector']:,.0f} | {x['p50_ms']:.2f} "
                f"| {x['p99_ms']:.2f} | {rec} | exact/flat p50 {r['exact_over_flat_p50']:.2f}x |"
            )
        for e in ("hnsw", "ivf"):
            x = r[e]
            for s in x["sweep"]:
                (name, value), *_ = s.items()
                mark = " (calibrated)" if x["calibrated"].get(name) == value else ""
                print(
                    f"{head}| {e} | {x['build_s']:.1f} | {x['bytes_per_vector']:,.0f} | {s['p50_ms']:.2f} "
                    f"| {s['p99_ms']:.2f} | {s['recall@10']:.3f} | {name} {value}{mark} |"
                )


# --------------------------------------------------------------------------- real data
def _dev():
    from vsekit.data import load_corpus

    return load_corpus(SHARED).split("dev")


def _link_photos(dev, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for image_id in dev.image_ids():
        (folder / image_id).symlink_to(Path(dev.images[image_id]).resolve())


def build_dev_index(
    dev, work: Path, model_name: str | None = None, fresh: bool = True, engine: str | None = None
) -> tuple:
    """Index the dev photos (``fresh``: from scratch, timed; else an index already there is reused);
    ``engine``: the index's search engine (its ANN structures are built, calibrated and stored)."""
    import vsekit

    photos = work / "photos"
    if not photos.exists():
        _link_photos(dev, photos)
    start = time.perf_counter()
    model = vsekit.load_model(model_name) if model_name else vsekit.load_model()
    load_s = time.perf_counter() - start
    out = work / f"index-{Path(model_name).stem if model_name else 'vse'}{'-' + engine if engine else ''}"
    if fresh:
        shutil.rmtree(out, ignore_errors=True)
    start = time.perf_counter()
    index = vsekit.Index.build(photos, out, model, progress=False, engine=engine)
    build_s = time.perf_counter() - start
    return index, {
        "photos": len(index),
        "model_load_s": load_s,
        "build_s": build_s,
        "photos_per_s": len(index) / build_s,
        "index_bytes": index.info()["bytes"],
    }


def _t2i_from_hits(hits, caption_ids: list[str], n_images: int) -> dict:
    from vsekit.metrics.ranking import summarize_ranks

    ranks = []
    for want, row in zip(caption_ids, hits, strict=True):
        paths = [h.path for h in row]
        ranks.append(paths.index(want) + 1 if want in paths else n_images + 1)
    m = summarize_ranks(ranks)
    return {k: m[k] for k in ("r1", "r5", "r10")}


def _segment_ann(index, engine: str) -> tuple[object, dict]:
    """The dev index's one ANN structure and the search settings the build calibrated and stored (the
    dict the index searches with: changing it changes the next searches)."""
    (segment,) = [g for g in index._view.segments if g.ann is not None and g.ann[0] == engine]
    return index._ann_of(segment, engine)


def _sweep_real(index, engine: str, qv: np.ndarray, caption_ids: list[str], exact: dict) -> dict | None:
    """The smallest efSearch / nprobe (doubling from the calibrated value) whose t2i R@1/5/10 are all
    within 0.5 points of exact search; the calibrated setting is restored afterwards."""
    structure, params = _segment_ann(index, engine)
    calibrated = dict(params)
    (name, value), *_ = calibrated.items()
    limit = 4096 if name == "efSearch" else structure.nlist
    found = None
    while True:
        params[name] = value
        m = _t2i_from_hits(index.search_vectors(qv, K), caption_ids, len(index))
        if max(abs(m[k] - exact[k]) for k in m) <= 0.5:
            found = {name: value, **m}
            break
        if value >= limit:
            break
        value = min(limit, value * 2)
    params.update(calibrated)
    return found


def recall_study(index, qv: np.ndarray, caption_ids: list[str], exact: dict) -> dict:
    """Per engine and setting: recall@10 against exact search of the 5,000 dev captions, of the bundled
    sample's 500 captions (what the calibration uses) and of 200 photo-like queries (what it used
    alone before), with the t2i R@K loss in points: does the calibration's query set predict real
    queries?"""
    from vsekit.metrics.ranking import summarize_ranks
    from vsekit.retrieval import search as S
    from vsekit.retrieval.index import calibration_sentences

    vectors = np.asarray(index.vectors, dtype=np.float32)
    sets = {
        "dev_captions": qv,
        "sample_captions": calibration_sentences(index.model),
        "photo_like": S.photo_like_queries(vectors),
    }
    truths = {name: S.exact_search(vectors, q, K)[1] for name, q in sets.items()}
    out = {}
    for engine, name, values in (
        ("hnsw", "efSearch", (16, 32, 64, 128)),
        ("ivf", "nprobe", (8, 16, 32, 64, 128)),
    ):
        structure = S.build_ann(vectors, engine)
        rows = []
        for value in values:
            S.set_search_params(structure, {name: value})
            row = {name: value}
            for label, q in sets.items():
                row[f"recall@10_{label}"] = _recall(truths[label], S.faiss_search(structure, q, K)[1])
            _, found = S.faiss_search(structure, qv, K)
            hits = [[index.paths[r] for r in f] for f in found]
            ranks = [
                h.index(w) + 1 if w in h else len(index) + 1 for w, h in zip(caption_ids, hits, strict=True)
            ]
            m = summarize_ranks(ranks)
            row["t2i_loss_points"] = {k: exact[k] - m[k] for k in ("r1", "r5", "r10")}
            rows.append(row)
        out[engine] = rows
    return out


def _shipped_vse() -> str:
    """Which `vse` the rows measured: its recipe and file fingerprint (the shipped model changes)."""
    from vsekit.fileio import content_fingerprint
    from vsekit.resources import pretrained_path

    path = pretrained_path("vse")
    recipe = model_extra(path).get("recipe", "?")
    return f"vse (shipped: recipe {recipe}, content sha256 {content_fingerprint(path)[:12]})"


def real(work: Path, fresh: bool = True) -> tuple[dict, object]:
    """``fresh=False`` reuses the dev indexes in ``work`` and keeps the saved indexing figures. The
    photos are indexed three times, once per engine (``exact``, and ``hnsw`` / ``ivf``, whose structures
    the build calibrates on the bundled sample's captions and stores, as a user's index does)."""
    dev = _dev()
    load_before = _load()
    index, indexing = build_dev_index(dev, work, fresh=fresh, engine="exact")
    if not fresh:
        before = json.loads(RESULTS.read_text())
        indexing = before["real"]["indexing"] | {"measured": before.get("real_date", "?")}
    texts, caption_ids = [c.text for c in dev.captions], dev.caption_image_ids()

    start = time.perf_counter()
    exact_hits = index.search_texts(texts, k=K)  # the library path the CLI uses
    search_texts_s = time.perf_counter() - start
    start = time.perf_counter()
    qv = index.embed_texts(texts)
    embed_s = time.perf_counter() - start
    engines_out = {"exact": _t2i_from_hits(exact_hits, caption_ids, len(index))}
    exact = engines_out["exact"]
    for engine in ("hnsw", "ivf"):
        ann_index, built = build_dev_index(dev, work, fresh=fresh, engine=engine)
        ann_index.search_vectors(qv[:1], K)  # reads the stored structure
        start = time.perf_counter()
        hits = ann_index.search_vectors(qv, K)
        engines_out[engine] = {
            **_t2i_from_hits(hits, caption_ids, len(ann_index)),
            "search_5000_s": time.perf_counter() - start,
            "calibrated": dict(_segment_ann(ann_index, engine)[1]),
            "build_s": built["build_s"],
        }
        engines_out[engine]["within_0.5"] = _sweep_real(ann_index, engine, qv, caption_ids, exact)
    study = recall_study(index, qv, caption_ids, exact)

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "eval.json"
        cmd = [VSEKIT, "eval", "--data", str(SHARED), "--split", "dev", "--json", str(out)]
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        evaluated = json.loads(out.read_text())
    t2i = evaluated["t2i"] if "t2i" in evaluated else evaluated["metrics"]["t2i"]
    eval_t2i = {k: t2i[k] for k in ("r1", "r5", "r10")}
    diffs = {e: max(abs(v[k] - eval_t2i[k]) for k in ("r1", "r5", "r10")) for e, v in engines_out.items()}
    row = {
        "indexing": indexing,
        "captions": len(texts),
        "search_texts_5000_s": search_texts_s,
        "embed_5000_captions_s": embed_s,
        "t2i": engines_out,
        "eval_t2i": eval_t2i,
        "max_abs_diff_points": diffs,
        "exact_matches_eval": diffs["exact"] < 1e-9,
        "ann_within_0.5": all(diffs[e] <= 0.5 for e in ("hnsw", "ivf")),
        "flat": "the store searches exact and flat alike (from the memory-mapped segments)",
        "calibration_queries_vs_real": study,
        "load": {"before": load_before, "after": _load()},
    }
    return row, index


def print_real(r: dict) -> None:
    ix = r["indexing"]
    print(
        f"\nindexing {ix['photos']} dev photos: {ix['build_s']:.1f} s, {ix['photos_per_s']:.1f} photos/s "
        f"(model load {ix['model_load_s']:.1f} s, not included)"
    )
    print("\n| t2i on Flickr8K dev | R@1 | R@5 | R@10 | max diff vs eval |")
    print("| --- | ---: | ---: | ---: | ---: |")
    e = r["eval_t2i"]
    print(f"| vsekit eval | {e['r1']:.2f} | {e['r5']:.2f} | {e['r10']:.2f} | |")
    for name, v in r["t2i"].items():
        setting = ", ".join(f"{k} {x}" for k, x in v.get("calibrated", {}).items())
        print(
            f"| search, {name}{' (' + setting + ', calibrated)' if setting else ''} | {v['r1']:.2f} "
            f"| {v['r5']:.2f} | {v['r10']:.2f} | {r['max_abs_diff_points'][name]:.2f} |"
        )
        w = v.get("within_0.5")
        if w:
            (k, x), *_ = w.items()
            print(f"| search, {name} ({k} {x}) | {w['r1']:.2f} | {w['r5']:.2f} | {w['r10']:.2f} | <= 0.5 |")


# --------------------------------------------------------------------------- web API
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _hammer(port: int, queries: list[str], concurrency: int, budget_s: float) -> tuple:
    import httpx

    url = f"http://127.0.0.1:{port}/api/search"
    gate = asyncio.Semaphore(concurrency)
    times: list[float] = []
    async with httpx.AsyncClient(timeout=30.0) as client:

        async def one(q: str) -> None:
            async with gate:
                start = time.perf_counter()
                resp = await client.get(url, params={"q": q, "k": K})
                resp.raise_for_status()
                assert len(resp.json()["results"]) == K
                times.append(time.perf_counter() - start)

        for q in queries[:10]:  # warm-up (model load, first FAISS/torch calls)
            await one(q)
        times.clear()
        for q in queries[:50]:  # one client, one request at a time: a lone user's latency
            await one(q)
        alone = times[:]
        times.clear()
        start = time.perf_counter()
        await asyncio.wait_for(asyncio.gather(*(one(q) for q in queries)), timeout=budget_s)
        wall = time.perf_counter() - start
    return times, wall, alone


def serve(index_dir: Path, n_requests: int, concurrency: int, threads: int) -> dict:
    import httpx

    dev = _dev()
    queries = [c.text for c in dev.captions][:n_requests]
    port = _free_port()
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    proc = subprocess.Popen(
        [VSEKIT, "serve", str(index_dir), "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/api/info", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"vsekit serve did not come up: {proc.stderr.read().decode()[-2000:]}")
            time.sleep(0.5)
        load_before = _load()
        times, wall, alone = asyncio.run(_hammer(port, queries, concurrency, budget_s=300))
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
    return {
        "requests": len(times),
        "concurrency": concurrency,
        "k": K,
        **_pct(times),
        "requests_per_s": len(times) / wall,
        "one_client": {"requests": len(alone), **_pct(alone)},
        "load": {"before": load_before, "after": _load()},
    }


# --------------------------------------------------------------------------- arithmetic (Eq. 15)
WORDS = {
    "snow": ("snow", "snowy"),
    "beach": ("beach", "beaches"),
    "grass": ("grass", "grassy"),
    "water": ("water",),
    "street": ("street", "streets"),
}


def _mentions(split) -> dict[str, dict[str, int]]:
    """Per photo, per word of WORDS: how many of its captions mention it (as a whole word)."""
    out: dict[str, dict[str, int]] = {i: dict.fromkeys(WORDS, 0) for i in split.image_ids()}
    for c in split.captions:
        tokens = set(re.findall(r"[a-z]+", c.text.lower()))
        for word, forms in WORDS.items():
            out[c.image_id][word] += bool(tokens & set(forms))
    return out


@dataclass
class Embedded:
    """A split's photos embedded by one model, what :func:`arithmetic` searches: ``paths`` (the image
    ids), their unit ``vectors`` and the model's ``embed_texts`` (an index has all three)."""

    paths: list[str]
    vectors: np.ndarray
    embed_texts: Callable[[list[str]], np.ndarray]


def split_photos(name: str):
    """Flickr8K's ``dev``, or a validation slice's photos (``flickr8k-val1000``), as a corpus split."""
    from vsekit.data import load_corpus
    from vsekit.data.splits import apply_validation_slice, load_validation_slice

    corpus = load_corpus(SHARED)
    if name in corpus.splits:
        return corpus.split(name)
    vslice = load_validation_slice(name)
    return apply_validation_slice(corpus, vslice).split(vslice.name)


def embed_split(model, split) -> Embedded:
    """``split``'s photos embedded by ``model`` (a :class:`vsekit.VSEModel`) from the feature cache: the
    vectors an index of those photos stores (``file_features`` computes the cache's numbers), without
    writing one."""
    ids = sorted(split.image_ids())
    vectors = model.embed_features(model.corpus_features(split, ids, progress=False))
    return Embedded(ids, np.asarray(vectors, dtype=np.float32), model.embed_texts)


def arithmetic(
    index, reference=None, max_per_pair: int = 20, split=None, weight: float = 1.0, phrase: str = "{}"
) -> dict:
    """Kiros et al. 2014, Eq. 15, measured on the photos of a split (default: the 1,000 dev photos).

    For each ordered pair (A, B) of scene words in WORDS: source photos are photos of the split that at
    least 2 of their 5 captions describe with A and none with B (the first ``max_per_pair`` in id order).
    For a source photo, three queries, each answered by the top 10 of the split's photos with the source
    excluded:

    * ``arithmetic``: the photo's embedding + weight x ("B" - "A") (Eq. 15, each word unit-norm,
      renormalised; weight 1 is the paper's; ``phrase`` wraps each word, e.g. "a photo of {}");
    * ``image``: the photo's embedding alone (more like this, no arithmetic);
    * ``text B``: the word B alone.

    A hit is *right* when some caption of it mentions B and none mentions A. Reported: the share of right
    hits (the protocol's number), the share mentioning B at all, and the mean cosine of the hits to the
    source photo (how much of the rest of the picture the query keeps: arithmetic should keep more of it
    than the bare word), measured between photo embeddings of ``reference`` (default: ``index``), one
    yardstick for every model compared. ``index``: an index of the split's photos, or :class:`Embedded`.
    """
    from vsekit.retrieval.arithmetic import arithmetic_query
    from vsekit.retrieval.search import exact_search

    split = split if split is not None else _dev()
    mentions = _mentions(split)
    row_of = {p: i for i, p in enumerate(index.paths)}
    vectors = np.asarray(index.vectors, dtype=np.float32)
    reference = reference or index
    ref_row = {p: i for i, p in enumerate(reference.paths)}
    ref = np.asarray(reference.vectors, dtype=np.float32)
    word_vec = dict(zip(WORDS, index.embed_texts(list(WORDS)), strict=True))
    term_vec = dict(zip(WORDS, index.embed_texts([phrase.format(w) for w in WORDS]), strict=True))
    modes = ("arithmetic", "image", "text")
    totals = {m: {"right": 0.0, "mentions_b": 0.0, "cos_to_source": 0.0} for m in modes}
    pairs, n_queries = [], 0
    for a in WORDS:
        for b in WORDS:
            if a == b:
                continue
            sources = [i for i in sorted(mentions) if mentions[i][a] >= 2 and mentions[i][b] == 0]
            sources = sources[:max_per_pair]
            pair = {m: 0.0 for m in totals}
            for image_id in sources:
                src = row_of[image_id]
                queries = {
                    "arithmetic": arithmetic_query(
                        vectors[src], term_vec[b][None], term_vec[a][None], weight=weight
                    ),
                    "image": vectors[src],
                    "text": word_vec[b],
                }
                for m, q in queries.items():
                    _, rows = exact_search(vectors, q[None], K + 1)
                    hits = [r for r in rows[0].tolist() if r != src][:K]
                    hit_ids = [index.paths[r] for r in hits]
                    right = np.mean([mentions[h][b] > 0 and mentions[h][a] == 0 for h in hit_ids])
                    totals[m]["right"] += right
                    totals[m]["mentions_b"] += np.mean([mentions[h][b] > 0 for h in hit_ids])
                    same = ref[[ref_row[h] for h in hit_ids]] @ ref[ref_row[image_id]]
                    totals[m]["cos_to_source"] += float(np.mean(same))
                    pair[m] += right
            n_queries += len(sources)
            pairs.append(
                {"minus": a, "plus": b, "sources": len(sources)}
                | {f"right_{m}": pair[m] / max(1, len(sources)) for m in pair}
            )
    summary = {m: {k: v / n_queries for k, v in t.items()} for m, t in totals.items()}
    return {
        "queries": n_queries,
        "words": list(WORDS),
        "weight": weight,
        "phrase": phrase,
        "summary": summary,
        "pairs": pairs,
    }


def print_arithmetic(rows: dict) -> None:
    print("\n| model | query | right (B, not A) | mentions B | cos to source (vse photo space) |")
    print("| --- | --- | ---: | ---: | ---: |")
    for model, r in rows.items():
        if not isinstance(r, dict) or "summary" not in r:
            continue
        for m, s in r["summary"].items():
            label = {"arithmetic": "photo - A + B", "image": "photo", "text": "text B"}[m]
            print(
                f"| {model} ({r['queries']} q) | {label} | {100 * s['right']:.1f}% "
                f"| {100 * s['mentions_b']:.1f}% | {s['cos_to_source']:.3f} |"
            )


# --------------------------------------------------------------------------- main
def readme_table(out: dict) -> str:
    """The compact markdown the README quotes, from search.json."""
    lines = [
        "| N (synthetic, 2048-d) | engine | setting | build s | bytes/vector | p50 ms | p99 ms | recall@10 |",
        "| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in out.get("engines", []):
        kind = "" if r["distribution"] == "real-spectrum" else f"({r['distribution']}) "
        head = f"| {r['n']:,} {kind}"
        for e in ("exact", "flat"):
            x = r[e]
            note = f"exact/flat {r['exact_over_flat_p50']:.2f}x" if e == "exact" else "IndexFlatIP"
            lines.append(
                f"{head}| {e} | {note} | {x['build_s']:.1f} | {x['bytes_per_vector']:,.0f} "
                f"| {x['p50_ms']:.2f} | {x['p99_ms']:.2f} | {x.get('recall@10', 1.0):.3f} |"
            )
        for e in ("hnsw", "ivf"):
            x = r[e]
            (name, value), *_ = x["calibrated"].items()
            shown = [s for s in x["sweep"] if s[name] == value]
            best = x["fastest_at_recall_0.95"]
            if best and best[name] != value:
                shown.append(best)
            for s in shown:
                tag = " (calibrated)" if s[name] == value else " (fastest >= 0.95)"
                lines.append(
                    f"{head}| {e} | {name} {s[name]}{tag} | {x['build_s']:.1f} "
                    f"| {x['bytes_per_vector']:,.0f} | {s['p50_ms']:.2f} | {s['p99_ms']:.2f} "
                    f"| {s['recall@10']:.3f} |"
                )
    return "\n".join(lines)


def _versions() -> dict:
    import faiss
    import fastapi
    import torch

    import vsekit

    return {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "faiss": faiss.__version__,
        "torch": torch.__version__,
        "fastapi": fastapi.__version__,
        "vsekit": getattr(vsekit, "__version__", "?"),
    }


def _save(section: str, value, threads: int) -> dict:
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    out = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {"benchmark": "search"}
    out[section] = value
    # sections are measured at other times, with other settings and possibly another shipped vse
    out[f"{section}_run"] = run_meta(threads=threads, model=_shipped_vse())
    out[f"{section}_date"] = out[f"{section}_run"]["date"][:10]
    write_result(RESULTS, out, indent=2, default=float)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", nargs="*", default=["engines", "real", "serve", "arithmetic"])
    parser.add_argument("--sizes", nargs="*", type=int, default=[10_000, 100_000])
    parser.add_argument(
        "--distribution", nargs="*", default=["real-spectrum"], choices=["real-spectrum", "uniform"]
    )
    parser.add_argument("--queries", type=int, default=200, help="single queries timed per engine setting")
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--bow-model", type=Path, help="a bag-of-words model file for the arithmetic row")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--serve-threads", type=int, help="OMP threads of the server (default --threads; else saved apart)"
    )
    parser.add_argument("--work", type=Path, help="dev photos and indexes go here (default: a temp dir)")
    parser.add_argument(
        "--reuse-index",
        action="store_true",
        help="real: search the dev index already in --work (no re-timing)",
    )
    parser.add_argument("--no-save", action="store_true", help="print only (for trying the script out)")
    parser.add_argument("--readme", action="store_true", help="print the README's table from search.json")
    args = parser.parse_args()
    if args.readme:
        print(readme_table(json.loads(RESULTS.read_text())))
        return

    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    import faiss
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(args.threads)
    faiss.omp_set_num_threads(args.threads)
    threadpool_limits(args.threads)
    save = (lambda s, v: None) if args.no_save else (lambda s, v: _save(s, v, args.threads))
    if not args.no_save:  # each section records its own run (``<section>_run``); only versions are shared
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        out = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {"benchmark": "search"}
        write_result(RESULTS, {**out, "versions": _versions()}, indent=2, default=float)

    if "engines" in args.only:
        spectrum = _real_spectrum(2048) if "real-spectrum" in args.distribution else None
        # rows are merged by (distribution, N): sizes can be measured one run at a time
        previous = json.loads(RESULTS.read_text()).get("engines", []) if RESULTS.is_file() else []
        rows = {(r["distribution"], r["n"]): r for r in previous}
        for distribution in args.distribution:
            for n in args.sizes:
                row = engines(n, 2048, distribution, spectrum, args.queries)
                print_engines([row])
                rows[distribution, n] = row
                order = sorted(rows.values(), key=lambda r: (r["distribution"] != "real-spectrum", r["n"]))
                save("engines", order)

    tmp = tempfile.TemporaryDirectory()
    work = args.work or Path(tmp.name)
    index = None
    if "real" in args.only:
        row, index = real(work, fresh=not args.reuse_index)
        print_real(row)
        save("real", row)
    if "serve" in args.only or "arithmetic" in args.only:
        if index is None:
            index, _ = build_dev_index(_dev(), work, fresh=False)
    if "serve" in args.only:
        serve_threads = args.serve_threads or args.threads
        row = serve(index.path, args.requests, args.concurrency, serve_threads)
        row["server_threads"] = serve_threads
        print(
            f"\nweb API: {row['requests']} GET /api/search at concurrency {row['concurrency']}: p50 "
            f"{row['p50_ms']:.1f} ms, p99 {row['p99_ms']:.1f} ms, {row['requests_per_s']:.1f} requests/s; "
            f"one client alone: p50 {row['one_client']['p50_ms']:.1f} ms, "
            f"p99 {row['one_client']['p99_ms']:.1f} ms"
        )
        save("serve" if serve_threads == args.threads else f"serve_threads{serve_threads}", row)
    if "arithmetic" in args.only:
        rows = {"vse": arithmetic(index), "protocol": arithmetic.__doc__.split("\n\n", 1)[1].strip()}
        if args.bow_model:
            bow_index, bow_indexing = build_dev_index(_dev(), work, str(args.bow_model), fresh=False)
            bow = arithmetic(bow_index, reference=index)
            rows["bow"] = bow | {"model": str(args.bow_model), "indexing": bow_indexing}
        else:
            rows["bow"] = "not measured (no --bow-model given)"
        print_arithmetic(rows)
        save("arithmetic", rows)
    tmp.cleanup()
    if not args.no_save:
        print(f"\nwrote {RESULTS}")


if __name__ == "__main__":
    main()
