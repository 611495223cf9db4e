"""Render the tables of measured numbers in README.md and docs/*.md from bench/results/*.json.

    python docs/gen_tables.py            # rewrite every generated block in place
    python docs/gen_tables.py --check    # exit 1 if a block differs from what the JSON says

A page asks for a table with a pair of markers; everything between them is replaced:

    <!-- table:ranking-grid -->
    (generated)
    <!-- /table:ranking-grid -->

Each table starts with a line naming its JSON file (and key) and the measurement conditions that file
records: date, machine, load, threads, commit ("not recorded" where the bench did not write one). Numbers
are never typed into a page by hand; labels (what a recipe is) live here, beside the renderer.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
MARKER = re.compile(r"(<!-- table:([a-z0-9-]+) -->\n)(.*?)(<!-- /table:\2 -->)", re.S)


def load(name: str) -> dict[str, Any]:
    return json.loads((RESULTS / name).read_text(encoding="utf-8"))


def _load_text(d: dict[str, Any]) -> str:
    for key in ("load", "load_note", "note", "load_start", "load_before"):
        value = d.get(key)
        if isinstance(value, str):
            return value
        if isinstance(value, dict):
            for k in ("loadavg_1m", "load_avg_1m"):
                if k in value:
                    return f"load average {value[k]:.1f}"
            if "before" in value and isinstance(value["before"], dict):
                return f"load average {value['before'].get('loadavg_1m', '?')} at the start"
    for k in ("load_avg_1m", "loadavg_1m"):
        if k in d:
            return f"load average {d[k]:.1f}"
    return "not recorded"


def source(name: str, d: dict[str, Any], key: str | None = None, extra: str = "") -> str:
    """The line under a table: where its numbers come from and under which conditions."""
    where = f"`bench/results/{name}`" + (f", key `{key}`" if key else "")
    threads = d.get("threads", d.get("threads_per_process", d.get("server_omp_threads", "not recorded")))
    parts = [
        f"date {d.get('date', d.get('measured', 'not recorded'))}",
        f"machine {d.get('machine', 'not recorded')}",
        f"load: {_load_text(d)}",
        f"threads {threads}",
        f"commit {d.get('commit', 'not recorded')}",
    ]
    return f"*Source: {where}; " + "; ".join(parts) + (f". {extra}" if extra else ".") + "*"


def table(header: list[str], rows: Iterable[list[Any]], right_from: int = 1) -> str:
    lines = ["| " + " | ".join(header) + " |"]
    lines.append("| " + " | ".join("---" if i < right_from else "---:" for i in range(len(header))) + " |")
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def f1(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def f2(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def f3(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def medr(x: float) -> str:
    return f"{x:g}"


def recall_cells(dev: dict[str, Any], ks: tuple[str, ...] = ("r1", "r5", "r10")) -> list[str]:
    cells = []
    for side in ("i2t", "t2i"):
        cells += [f1(dev[side][k]) for k in ks] + [medr(dev[side]["medr"])]
    return cells


RECALL_HEADER = ["i2t R@1", "R@5", "R@10", "Med r", "t2i R@1", "R@5", "R@10", "Med r", "rsum"]
FEATURES = {"mobilenet_v2": "MobileNetV2", "efficientnet_lite0": "EfficientNet-Lite0"}


def _features(row: dict[str, Any]) -> str:
    kind = "FNE" if row["features"] == "fne" else "one-layer"
    return f"{FEATURES[row['backbone']]} {kind}"


# ---------------------------------------------------------------------------------------------- joint model

GRID = {  # bench/recipes row -> what it changes in kiros-gru
    "kiros-gru": "CNN-MME `kiros-gru` (none; its own 25-epoch cap)",
    "kiros-gru-hardest": "hardest negative (VSE++) after 2 sum epochs",
    "kiros-lstm": "LSTM instead of GRU",
    "kiros-bow": "bag of words (v = sum of word vectors)",
    "kiros-bow-hardest": "bag of words + hardest negative",
    "fne-gru-10ep": "FN-MME: FNE features (`fne-gru`, 10 epochs)",
    "fne-gru-hardest": "FN-MME + hardest negative",
    "fne-bow": "FN-MME with bag of words",
    "kiros-gru-effnet": "EfficientNet-Lite0 backbone",
}
PRETRAINED = {
    "mini-ol": "frozen MiniLM + residual head, hardest negative",
    "vse-best": "`vse-best`: MiniLM + dropout 0.4 on image features, ensemble of seeds 1 + 2",
    "vse-best-3seeds": "the same, seeds 0 + 1 + 2 (not shipped: over the 15 MB budget)",
    "vse-best-effnet-s1": "`vse-best` on EfficientNet-Lite0, seed 1 alone",
    "vse-best-effnet": "**`vse-best-effnet`, shipped as `vse` until 2026-11-24**: ensemble of seeds 1 + 2",
    "fne-mini-r256": "FN-MME + frozen MiniLM, dropout 0.5, rank-256 projection (`fne-minilm`)",
    "fne-mini-full": "the same, full-rank projection",
}


def _train_min(row: dict[str, Any]) -> str:
    seconds = row.get("train_wall_s", row.get("train_epochs_time_s"))
    return f1(seconds / 60) if seconds else "-"


def _epochs(row: dict[str, Any]) -> str:
    best, run = row["best_epoch"], row["epochs_run"]
    if isinstance(best, list):
        return ", ".join(f"{b}/{r}" for b, r in zip(best, run, strict=True))
    return f"{best}/{run}"


def _ranking_table(labels: dict[str, str]) -> str:
    d = load("ranking.json")
    rows = {r["recipe"]: r for r in d["rows"]}
    body = [
        [
            labels[k],
            _features(rows[k]),
            *recall_cells(rows[k]["dev"]),
            f1(rows[k]["dev"]["rsum"]),
            _train_min(rows[k]),
            _epochs(rows[k]),
            rows[k].get("threads", "-"),
        ]
        for k in labels
    ]
    header = ["model", "features", *RECALL_HEADER, "train min", "best / run epochs", "threads"]
    note = (
        "Flickr8K dev, 1,000 images x 5,000 captions, `flickr` protocol; "
        "`python bench/bench_ranking.py RECIPE`"
    )
    return table(header, body, right_from=2) + "\n\n" + source("ranking.json", d, "rows", note)


def t_ranking_grid() -> str:
    return _ranking_table(GRID)


def t_ranking_pretrained() -> str:
    return _ranking_table(PRETRAINED)


TREE = {
    "tree-lstm-vs": 'T-LSTM "VS" as in the paper (`tree-lstm-vs`: hidden 300, p = 2, twin 300, Adam 2e-4)',
    "tree-lstm-linear": "T-LSTM, our best (`tree-lstm-best`: the VS encoder, linear head, Adam 5e-4)",
    "tree-lstm-linear-p1": "the same with p = 1 (`tree-lstm-p1`, shipped as `tree-lstm`)",
    "tree-lstm-linear-2e-4": "VS encoder, linear head, Adam 2e-4 (stopped at epoch 5)",
    "tree-lstm-linear-hardest": "VS encoder, linear head, hardest negative after 2 sum epochs (collapsed)",
    "kiros-bow": "bag of words (`kiros-bow`, re-run)",
    "kiros-bow-twin": "bag of words with the twin head",
}


def t_tree_lstm() -> str:
    d = load("tree_lstm.json")
    rows = {r["recipe"]: r for r in d["rows"]}
    body = []
    for k, label in TREE.items():
        r = rows[k]
        cpu = f" ({f1(r['train_cpu_min'])})" if r.get("train_cpu_min") else ""
        body.append(
            [
                label,
                r["head"],
                r["loss"],
                *recall_cells(r["dev"], ("r1", "r5", "r10", "r20", "r50")),
                f1(r["dev"]["rsum"]),
                f"{f1(r['train_min'])}{cpu}",
                f"{r['best_epoch']}/{r['epochs_run']}",
                f"{r['params'] / 1e6:.1f} M",
            ]
        )
    header = [
        "model",
        "head",
        "loss",
        "i2t R@1",
        "R@5",
        "R@10",
        "R@20",
        "R@50",
        "Med r",
        "t2i R@1",
        "R@5",
        "R@10",
        "R@20",
        "R@50",
        "Med r",
        "rsum",
        "train wall min (CPU min)",
        "best / run epochs",
        "parameters",
    ]
    note = "MobileNetV2 one-layer features, 10-epoch cap, one seed; `python bench/bench_tree_lstm.py`"
    return table(header, body, right_from=3) + "\n\n" + source("tree_lstm.json", d, "rows", note)


# ---------------------------------------------------------------------------------------------- captioning

CAPTIONERS = {
    "nearest neighbour": "nearest neighbour (Karpathy Table 2 baseline)",
    "nearest neighbour (FNE)": "nearest neighbour",
    "cap-rnn beam 1": "m-RNN, vanilla RNN (`mrnn-rnn`, the paper's model)",
    "cap-rnn beam 3": "m-RNN, vanilla RNN (`mrnn-rnn`)",
    "cap-lstm-fne beam 1": "m-RNN, LSTM (`mrnn-lstm-fne`, W_hi rank 256)",
    "cap-lstm-fne beam 3": "m-RNN, LSTM (`mrnn-lstm-fne`)",
    "cap-lstm-ship beam 1": "m-RNN, LSTM (`mrnn-lstm`)",
    "cap-lstm-ship beam 3": "m-RNN, LSTM (`mrnn-lstm`)",
    "cap-lstm-ship beam 5 + rerank": "m-RNN LSTM + rerank with the MobileNetV2 `vse-best`",
    "cap-effnet-ship beam 1": "m-RNN, LSTM (`mrnn-lstm-effnet`)",
    "cap-effnet-ship beam 3": "m-RNN, LSTM (`mrnn-lstm-effnet`)",
    "cap-effnet-ship beam 7 + rerank": "`mrnn-lstm-effnet` + rerank with `vse` "
    "(epoch and decoding chosen on dev)",
    "cap-retrain-ship beam 1": "m-RNN, LSTM (`mrnn-lstm-effnet-retrain`)",
    "cap-retrain-ship beam 3": "m-RNN, LSTM (`mrnn-lstm-effnet-retrain`)",
    "cap-retrain-ship beam 7 + rerank": "**shipped `captioner`: `mrnn-lstm-effnet-retrain` + rerank "
    "with `vse` (epochs and decoding chosen on val1000)**",
    "scnlm scnlm": "SC-NLM (Kiros 2014), KN-LM + translation-score rerank",
}


def t_captioning() -> str:
    d = load("captioning.json")
    rows = {r["name"]: r for r in d["rows"]}
    body = []
    for k, label in CAPTIONERS.items():
        r = rows[k]
        feats = "joint space" if r["method"] == "scnlm" else _features(r)
        body.append(
            [
                label,
                feats,
                r.get("beam") or "-",
                *(f1(r[m]) for m in ("bleu1", "bleu2", "bleu3", "bleu4", "meteor", "rouge_l", "cider")),
                f1(r["in_training_set"]),
                f"{r['captions_per_s']:g} ({r['threads']})",
            ]
        )
    header = [
        "method",
        "features",
        "beam",
        "B-1",
        "B-2",
        "B-3",
        "B-4",
        "METEOR",
        "ROUGE-L",
        "CIDEr-D",
        "in train %",
        "captions/s (threads)",
    ]
    note = (
        "Flickr8K dev, 1,000 photos x 5 references, pycocoevalcap x100, PTB tokenizer; "
        "`python bench/bench_captioning.py`"
    )
    return table(header, body, right_from=2) + "\n\n" + source("captioning.json", d, "rows", note)


# ---------------------------------------------------------------------------------------------- alignment

PAPER_ALIGNMENT = [  # Karpathy & Fei-Fei 2015, supplementary Table 5 (Flickr8K test; the paper, not us)
    [
        "Karpathy 2015 DeFrag (paper, test)",
        "12.6",
        "32.9",
        "44.0",
        "14",
        "9.7",
        "29.6",
        "42.5",
        "15",
        "171.3",
    ],
    [
        "Karpathy 2015 BRNN (paper, test)",
        "16.5",
        "40.6",
        "54.2",
        "7.6",
        "11.8",
        "32.1",
        "44.7",
        "12.4",
        "199.9",
    ],
]


def t_alignment() -> str:
    d = load("alignment.json")
    runs = d["minilm_grid"]["runs"]["minilm-grid (lr 5e-4, x0.1 after 6 epochs)"]
    fusion = d["fusion"]["all"]
    body = [*PAPER_ALIGNMENT]
    body.append(
        ["ours, `brnn-grid` (BRNN from GloVe 50-d, h = 512)", *recall_cells(d["dev"]), f1(d["dev"]["rsum"])]
    )
    body.append(
        [
            "ours, `minilm-grid` (MiniLM-token words, h = 512)",
            *recall_cells(runs["best_dev"]),
            f1(runs["best_dev"]["rsum"]),
        ]
    )
    reselect = load("aligner_reselect.json")
    earlier, before = reselect["shipped_aligner_dev"], reselect["retrained_on_train"]["dev_once"]
    body += [
        ["earlier `aligner` (3 snapshots packed, members chosen on dev)", *recall_cells(earlier),
         f1(earlier["rsum"])],
        ["previous `aligner` (3 frozen-MiniLM members packed, chosen on val1000, retrained on train)",
         *recall_cells(before), f1(before["rsum"])],
        ["**shipped `aligner`** (2 members with MiniLM's top layer tuned, packed as towers, h = 1024, "
         "float16; members chosen on val1000, retrained on train, dev read once)",
         *recall_cells(d["shipped"]), f1(d["shipped"]["rsum"])],
    ]  # fmt: skip
    body.append(
        [
            "shipped `vse` alone (cosine)",
            *recall_cells(fusion["joint alone"]),
            f1(fusion["joint alone"]["rsum"]),
        ]
    )
    w = d["fusion"]["weight"]
    body.append(
        [
            f"**`vse+aligner`** (cosine + {w:g} S_kl, normalised)",
            *recall_cells(fusion[f"fused w={w:g}"]),
            f1(fusion[f"fused w={w:g}"]["rsum"]),
        ]
    )
    note = (
        "ours: Flickr8K dev, MobileNetV2 grid regions; the paper's rows: its Flickr8K test numbers with VGG "
        "and 19 RCNN detections; the earlier and previous aligners' rows: "
        "`bench/results/aligner_reselect.json`; "
        "`python bench/bench_alignment.py --skip-regions --model aligner --fuse`"
    )
    return table(["model", *RECALL_HEADER], body) + "\n\n" + source("alignment.json", d, None, note)


def t_fusion_held_out() -> str:
    d = load("alignment.json")
    held = d["fusion"]["held_out"]
    body = [[name, *recall_cells(m), f1(m["rsum"])] for name, m in held.items()]
    tuned_on = d["fusion"].get("tuned_on", "the even-numbered dev images")
    note = (
        "the odd-numbered 500 dev images x 2,500 captions, which chose nothing "
        f"(w and the statistics come from {tuned_on})"
    )
    return (
        table(["model", *RECALL_HEADER], body) + "\n\n" + source("alignment.json", d, "fusion.held_out", note)
    )


def t_region_captions() -> str:
    d = load("alignment.json")
    rc = d["region_captions"]
    body = []
    for recipe, run in rc["runs"].items():
        proxy = run["dev_proxy"]
        for who, label in (
            ("region_captioner", f"region captioner `{recipe}`"),
            ("crop_baseline", "baseline: the full-frame captioner on the region's crop"),
        ):
            if who == "crop_baseline" and recipe != "region-lstm":
                continue
            m = proxy[who]
            body.append(
                [
                    label,
                    f"{m['n_items']:,}",
                    f2(m["mean_words"]),
                    *(f1(m[k]) for k in ("bleu1", "bleu2", "bleu3", "rouge_l", "cider")),
                ]
            )
    header = ["captioner", "items", "mean words", "BLEU-1", "BLEU-2", "BLEU-3", "ROUGE-L", "CIDEr-D"]
    note = "proxy references: the aligner's MRF snippets of the dev captions; first 300 dev images, beam 3"
    return table(header, body) + "\n\n" + source("alignment.json", rc, "region_captions.runs", note)


# ------------------------------------------------------------------------------------------ the model table


def t_models() -> str:
    """The short model table (README, index, benchmarks): a view of the model cards."""

    def r(dev: dict[str, Any]) -> str:
        if "i2t" not in dev:
            return dev["headline"]
        return (
            f"R@1 {f1(dev['i2t']['r1'])} / {f1(dev['t2i']['r1'])}, R@10 {f1(dev['i2t']['r10'])} / "
            f"{f1(dev['t2i']['r10'])}, rsum {f1(dev['rsum'])}"
        )

    body = []
    for c in load_cards():
        name = f"`{c['name']}`" + (" (default)" if c["name"] == "vse" else "")
        body.append([name, c["use"], c["summary"], r(c["dev"])])
        # a fusion is a model of its own (`--model vse+aligner`), scored here on all of dev
        fused = [a for a in c["attachments"] if "all_dev" in a]
        body += [["`vse+aligner`", a["use"], a["summary"], r(a["all_dev"])] for a in fused]
    note = (
        "held-out numbers: Flickr8K dev (1,000 images x 5,000 captions; i2t / t2i), not trained on but used "
        "to choose epochs and recipes (so slightly optimistic); "
        "the test split is held back"
    )
    return (
        table(["model", "use it for", "what it is", "Flickr8K dev"], body, right_from=4)
        + "\n\n"
        + (
            "*Sources: `bench/results/ranking.json`, `tree_lstm.json`, `captioning.json`, "
            f"`alignment.json`; {note}.*"
        )
    )


# ------------------------------------------------------------------------------------------ the model cards
CARDS = ROOT / "src" / "vsekit" / "pretrained" / "cards.json"


def load_cards() -> list[dict[str, Any]]:
    """The shipped models' cards (written by ship/model_cards.py from the model files and bench/results)."""
    return json.loads(CARDS.read_text(encoding="utf-8"))["cards"]


def _size(facts: dict[str, Any]) -> str:
    return f"{facts['mib']:.1f} MiB" if facts["bytes"] >= 2**20 // 10 else f"{facts['bytes'] / 1024:.1f} KiB"


def t_model_cards() -> str:
    rows = []
    for c in load_cards():
        rows.append(
            [f"`{c['name']}`", c["summary"], c["data"], c["selected_on"], c["validation"]["headline"],
             c["dev"]["headline"], _size(c["file"]), c["licence"]["summary"]]
        )  # fmt: skip
        for a in c["attachments"]:
            rows.append([f"+ `{a['name']}`", a["short"], "", "", "", a.get("headline", ""), _size(a), ""])
    header = ["model", "what it is", "trained on", "chosen on", "val1000", "Flickr8K dev", "size", "licences"]
    note = (
        "*Source: `src/vsekit/pretrained/cards.json` (`vsekit models`), written by "
        "`python ship/model_cards.py` from the model files and `bench/results/*.json`; dev = 1,000 photos "
        "x 5,000 captions, R@1 image annotation / image search; the test split is held back.*"
    )
    return table(header, rows, right_from=8) + "\n\n" + note


def t_model_card_costs() -> str:
    rows = []
    for c in load_cards():
        t = c["training"]
        peak = "not recorded" if t["peak_rss_mb"] is None else f"{t['peak_rss_mb']:,} MB"
        wall = t["wall"] + (f" ({t['note']})" if t["note"] else "")
        rows.append([f"`{c['name']}`", f"`{c['recipe']}`", c["speed"], wall, peak])
    header = ["model", "recipe", "speed (where a bench measured it)", "training on the 2-core machine"]
    header.append("peak memory")
    return table(header, rows, right_from=5)


def t_model_card_details() -> str:
    rows = []
    for c in load_cards():
        lic = c["licence"]
        rows.append(
            [f"`{c['name']}`", c["method"], c["text_encoder"], c["selection"],
             f"file {lic['file']}; needs: {'; '.join(lic['needs'])}", f"`{c['file']['content_sha256'][:12]}`"]
        )  # fmt: skip
    header = ["model", "method", "text side", "how it was selected", "licences", "content sha256"]
    return table(header, rows, right_from=6) + f"\n\nData: {load_cards()[0]['licence']['data']}."


# ---------------------------------------------------------------------------------------------- features


def t_extract() -> str:
    d = load("extract.json")
    body = []
    for r in d["engine_rows"]:
        s = r["stages_ms"]
        feats = "one-layer" if r["features"] == "one-layer" else f"FNE ({r['dim']:,})"
        body.append(
            [
                r["backbone"],
                feats,
                f2(s["decode_ms"]),
                f2(s["resize_crop_ms"]),
                f2(s["normalise_torch_only_ms"]),
                f1(s["network_torch_ms"]),
                f1(s["network_onnxruntime_ms"]),
                f2(s["cache_write_ms"]),
                f"{f1(r['end_to_end_img_s_default'])} / {f1(r['end_to_end_img_s_torch'])}",
                f1(r["onnxruntime_network_img_s"]),
                f"{r['default_time_over_ort_network']:.2f}x",
            ]
        )
    header = [
        "backbone",
        "features",
        "decode ms",
        "resize + crop ms",
        "normalise (torch only) ms",
        "network torch ms",
        "network ORT ms",
        "cache write ms",
        "end to end default / torch img/s",
        "ORT network-only img/s",
        "default e2e / ORT network-only",
    ]
    note = (
        f"{d['images']} Flickr8K photos, batch {d['batch_size']}; "
        "`python bench/bench_extract.py --images 256`"
    )
    return table(header, body, right_from=2) + "\n\n" + source("extract.json", d, "engine_rows", note)


def t_extract_memory() -> str:
    d = load("extract.json")
    m = d["memory"]
    body = [[r["suspect"], f"{r['images']:,}", f"{r['peak_rss_mb']:,.0f}"] for r in m["rows"]]
    return (
        table(["run", "photos", "peak RSS MB"], body)
        + "\n\n"
        + source("extract.json", m, "memory", "`python bench/bench_extract_memory.py`")
    )


# ---------------------------------------------------------------------------------------------- search


def t_search_engines() -> str:
    d = load("search.json")
    body = []
    for e in d["engines"]:
        n = f"{e['n']:,}"
        body.append(
            [
                n,
                "exact",
                f"exact/flat {e['exact_over_flat_p50']:.2f}x",
                f1(e["exact"]["build_s"]),
                f"{e['exact']['bytes_per_vector']:,.0f}",
                f2(e["exact"]["p50_ms"]),
                f2(e["exact"]["p99_ms"]),
                "1.000",
            ]
        )
        fl = e["flat"]
        body.append(
            [
                n,
                "flat",
                "IndexFlatIP",
                f1(fl["build_s"]),
                f"{fl['bytes_per_vector']:,.0f}",
                f2(fl["p50_ms"]),
                f2(fl["p99_ms"]),
                f3(fl["recall@10"]),
            ]
        )
        for eng, knob in (("hnsw", "efSearch"), ("ivf", "nprobe")):
            x = e[eng]
            chosen = x["calibrated"][knob]
            for s in x["sweep"]:
                if s[knob] == chosen:
                    body.append(
                        [
                            n,
                            eng,
                            f"{knob} {chosen} (calibrated)",
                            f1(x["build_s"]),
                            f"{x['bytes_per_vector']:,.0f}",
                            f2(s["p50_ms"]),
                            f2(s["p99_ms"]),
                            f3(s["recall@10"]),
                        ]
                    )
            fast = next((s for s in x["sweep"] if s["recall@10"] >= 0.95), None)
            if fast is not None and fast[knob] != chosen:
                body.append(
                    [
                        n,
                        eng,
                        f"{knob} {fast[knob]} (fastest >= 0.95)",
                        f1(x["build_s"]),
                        f"{x['bytes_per_vector']:,.0f}",
                        f2(fast["p50_ms"]),
                        f2(fast["p99_ms"]),
                        f3(fast["recall@10"]),
                    ]
                )
    header = [
        "N (synthetic, 2048-d)",
        "engine",
        "setting",
        "build s",
        "bytes/vector",
        "p50 ms",
        "p99 ms",
        "recall@10",
    ]
    note = (
        "synthetic unit vectors with the spectrum of the shipped model's photo embeddings; 200 photo-like "
        "queries, k = 10; `python bench/bench_search.py`"
    )
    return (
        table(header, body, right_from=3)
        + "\n\n"
        + source(
            "search.json",
            {**d, "date": d.get("engines_date"), "load": d["engines"][0].get("load")},
            "engines",
            note,
        )
    )


def t_search_1m() -> str:
    d = load("search.json")
    e = d["engines_1m"]
    ev = e["exact_vs_flat"]
    body = [
        ["vsekit exact (float16 memmap)", f1(ev["exact"]["p50_ms"]), f1(ev["exact"]["p99_ms"]), "1.000"],
        [
            "FAISS exact (QT_fp16)",
            f1(ev["flat"]["p50_ms"]),
            f1(ev["flat"]["p99_ms"]),
            f3(ev["flat"]["top10_overlap_with_exact"]),
        ],
    ]
    for s in e["ivf_sq"]["sweep"]:
        body.append(
            [
                f"{e['ivf_sq']['engine']}, nprobe {s['nprobe']}",
                f1(s["pushed"]["p50_ms"]),
                f1(s["pushed"]["p99_ms"]),
                f"{f3(s['pushed']['recall@10'])} / {f3(s['captions']['recall@10'])}",
            ]
        )
    hnsw = e.get("hnsw_sq")
    for s in hnsw["sweep"] if hnsw else []:
        body.append(
            [
                f"{hnsw['engine']}, efSearch {s['efSearch']}",
                f1(s["pushed"]["p50_ms"]),
                f1(s["pushed"]["p99_ms"]),
                f"{f3(s['pushed']['recall@10'])} / {f3(s['captions']['recall@10'])}",
            ]
        )
    built = (
        f"; HNSW built in {hnsw['build_s'] / 60:.0f} min, {hnsw['memory']['peak_rss_gb']} GB peak RSS "
        "(efConstruction 80, under a test run's load)"
        if hnsw
        else ""
    )
    note = (
        f"{e['n']:,} x {e['dim']} float16 vectors, memory-mapped; recall@10 photo-like / captions{built}; "
        "`python bench/bench_search_1m.py [--hnsw]`"
    )
    return (
        table(["engine", "p50 ms", "p99 ms", "recall@10"], body)
        + "\n\n"
        + source(
            "search.json",
            {**d, "date": d.get("engines_1m_date"), "load_before": e.get("load_before")},
            "engines_1m",
            note,
        )
    )


def t_search_dev() -> str:
    d = load("search.json")
    t = d["real"]["t2i"]
    ev = d["real"]["eval_t2i"]
    body = [
        ["`vsekit eval --split dev`", f2(ev["r1"]), f2(ev["r5"]), f2(ev["r10"])],
        ["search, exact", f2(t["exact"]["r1"]), f2(t["exact"]["r5"]), f2(t["exact"]["r10"])],
        *(
            [["search, FAISS flat", f2(t["flat"]["r1"]), f2(t["flat"]["r5"]), f2(t["flat"]["r10"])]]
            if "flat" in t
            else []
        ),  # before the store: a FAISS flat index; the store searches it exactly
        [
            f"search, HNSW, calibrated efSearch {t['hnsw']['calibrated']['efSearch']}",
            f2(t["hnsw"]["r1"]),
            f2(t["hnsw"]["r5"]),
            f2(t["hnsw"]["r10"]),
        ],
        [
            f"search, IVF, calibrated nprobe {t['ivf']['calibrated']['nprobe']}",
            f2(t["ivf"]["r1"]),
            f2(t["ivf"]["r5"]),
            f2(t["ivf"]["r10"]),
        ],
    ]
    note = "1,000 dev photos indexed from their files, the 5,000 dev captions as queries, top 10"
    return (
        table(["t2i", "R@1", "R@5", "R@10"], body)
        + "\n\n"
        + source(
            "search.json",
            d.get("real_run") or {**d, "date": d.get("real_date"), "load": d["real"].get("load")},
            "real",
            note,
        )
    )


def _rule_text(rule: dict) -> str:
    """``1.25 x ("a photo of B" - "a photo of A")``: how the words of an arithmetic rule join the photo."""
    b, a = (rule["phrase"].replace("{}", w) for w in ("B", "A"))
    return f'{rule["weight"]:g} x ("{b}" - "{a}")'


def t_arithmetic() -> str:
    """Dev, read once: the shipped models before (Eq. 15, weight 1) and with their default rule."""
    d = load("arithmetic.json")
    dev, body = d["dev"], []
    for name, label in (("vse", "`vse` (MiniLM)"), ("bow", "`bow` (bag of words)")):
        r, chosen = dev[name], d["val1000"][name]["chosen"]
        rule = "Eq. 15 (unchanged)" if r["after"] == r["before"] else _rule_text(chosen)
        body.append(
            [
                label,
                rule,
                *(f"{100 * r[k]['right']:.1f}% | {r[k]['closeness']:.2f}" for k in ("before", "after")),
                *(
                    f"{100 * r['baselines'][k]['right']:.1f}% | {r['baselines'][k]['closeness']:.2f}"
                    for k in ("image", "text")
                ),
            ]
        )
    header = [
        "model",
        "default rule (photo + ...)",
        "Eq. 15, weight 1: right",
        "closeness",
        "default: right",
        "closeness",
        "photo alone: right",
        "closeness",
        '"B" alone: right',
        "closeness",
    ]
    note = (
        "400 queries over the scene words snow, beach, grass, water, street on Flickr8K dev (1,000 photos), "
        "read once with the shipped models after the rule was chosen on flickr8k-val1000; closeness in the "
        "shipped vse's photo space"
    )
    return table(header, body, right_from=2) + "\n\n" + source("arithmetic.json", dev["run"], "dev", note)


def t_arithmetic_grid() -> str:
    """The validation slice's grid: every candidate rule, both models; the chosen one in bold."""
    d = load("arithmetic.json")
    val = d["val1000"]
    chosen = {m: (val[m]["chosen"]["weight"], val[m]["chosen"]["phrase"]) for m in ("vse", "bow")}
    by_rule = {m: {(r["weight"], r["phrase"]): r for r in val[m]["grid"]} for m in ("vse", "bow")}
    body = []
    for r in val["vse"]["grid"]:
        key = (r["weight"], r["phrase"])
        cells = [f"{r['weight']:g}", "bare" if r["phrase"] == "{}" else f'"{r["phrase"].replace("{}", "B")}"']
        for m in ("vse", "bow"):
            x = by_rule[m][key]
            right, close = f"{100 * x['right']:.1f}%", f"{x['closeness']:.3f}"
            if chosen[m] == key:
                right, close = f"**{right}**", f"**{close}**"
            cells += [right, close]
        body.append(cells)
    header = ["weight", "words", "vse (proxy): right", "closeness", "bow: right", "closeness"]
    note = (
        f"{val['vse']['queries']} queries on the 1,000 photos of {d['split']}; vse: "
        f"{val['vse']['model']}, the shipped recipe trained without them; bow: the shipped file (trained on "
        f"all of train: not held out); closeness in the proxy's photo space; rule: {d['rule']}; "
        "chosen in bold"
    )
    return table(header, body, right_from=2) + "\n\n" + source("arithmetic.json", d, "val1000", note)


# ---------------------------------------------------------------------------------------------- scale-out


def t_scaling_search() -> str:
    d = load("scaling_search.json")
    body = []
    for r in d["rows"]:
        body.append(
            [
                f"{r['n']:,}",
                f2(r["exact"]["p50_ms"]),
                f1(r["ivfpq_build_s"]),
                f"{r['ivfpq_bytes'] / r['n']:,.0f}",
                f"{r['calibrated']['nprobe']} / {r['ivfpq_params']['nlist']}, "
                f"{r['calibrated']['candidates']}",
                f2(r["ivfpq_query"]["p50_ms"]),
                f3(r["ivfpq_query"]["recall@10_new"]),
            ]
        )
    header = [
        "vectors",
        "exact p50 ms",
        "IVF-PQ build s",
        "index bytes / vector",
        "calibrated nprobe / lists, candidates",
        "IVF-PQ p50 ms",
        "recall@10 (new)",
    ]
    note = "clustered synthetic 256-d vectors, float16, memory-mapped; `python bench/bench_scaling.py`"
    return (
        table(header, body)
        + "\n\n"
        + source("scaling_search.json", {**d, "load": d["rows"][0]["load_start"]}, "rows", note)
    )


def t_ivfpq_10m() -> str:
    d = load("ivfpq_10m.json")
    body = [
        [
            s["nprobe"],
            s["candidates"],
            f3(s["new"]["recall@10"]),
            f1(s["new"]["p50_ms"]),
            f1(s["new"]["p99_ms"]),
        ]
        for s in d["sweep_new"]
    ]
    note = (
        f"{d['n']:,} x {d['dim']} float16 vectors, {d['index']['kind']}, build {d['build_s']:,.0f} s, "
        f"{d['index']['bytes_per_vector']:.1f} bytes a vector; `python bench/bench_ivfpq_10m.py`"
    )
    return (
        table(
            [f"nprobe (of {d['index']['nlist']:,})", "candidates", "recall@10", "p50 ms", "p99 ms"],
            body,
            right_from=0,
        )
        + "\n\n"
        + source("ivfpq_10m.json", d, "sweep_new", note)
    )


def t_corpus_memory() -> str:
    d = load("corpus_memory.json")
    body = []
    for kind, label in (("karpathy", "Karpathy JSON"), ("coco", "COCO captions JSON")):
        b, a = d["before"][kind], d["after"][kind]
        body.append(
            [
                f"{label} ({b['file_mb']:.0f} MB)",
                f"{b['peak_rss_mb']:,.0f}",
                f"{a['peak_rss_mb']:,.0f}",
                f"{b['load_s']:.0f}",
                f"{a['load_s']:.0f}",
            ]
        )
    note = (
        "synthetic files the size of COCO (123,287 images, 616,435 captions); "
        "before = `json.load`, after = streamed"
    )
    return (
        table(["file", "peak RSS MB before", "after", "load s before", "after"], body)
        + "\n\n"
        + source("corpus_memory.json", d["after"], None, note)
    )


def t_projections() -> str:
    d = load("scaling.json")
    p = d["projections"]
    body = []
    for key, label in (("10M_photos", "10M photos"), ("100M_photos", "100M photos")):
        for r in p[key]:
            body.append(
                [
                    label,
                    r["machines"],
                    f1(r["extraction_h"]),
                    f1(r["store_disk_gb_per_machine"]),
                    f2(r["ivfpq_ram_gb_per_machine"]),
                ]
            )
    header = [
        "collection",
        "machines",
        "extraction h",
        "float16 store GB a machine",
        "IVF-PQ RAM GB a machine",
    ]
    return table(header, body) + "\n\n" + source("scaling.json", d, "projections", p["note"])


def t_projection_coco() -> str:
    d = load("scaling.json")
    c = d["projections"]["coco"]
    body = [
        [
            f"COCO, {c['images']:,} images, {c['captions']:,} captions",
            f"{60 * c['extraction_h_1_machine']:.0f} min on 1 machine",
            f"{c['feature_cache_gb_1280d_float16']:.2f} GB features (1,280-d float16); "
            f"{c['index_store_gb_2048d_float16']:.2f} GB index (2048-d float16)",
            f"corpus {c['corpus_read_peak_rss_gb']:.2f} GB + page cache for the features",
            f"first epoch {c['training_first_epoch_min']:.0f} min (the MiniLM pass, once), then "
            f"{c['training_epoch_min']:.1f} min an epoch",
        ]
    ]
    header = ["collection", "extraction", "on disk", "RAM", "training the shipped recipe"]
    return (
        table(header, body, right_from=5)
        + "\n\n"
        + source("scaling.json", d, "projections.coco", d["projections"]["note"])
    )


def t_word_magnitudes() -> str:
    d = load("alignment.json")
    w = d["word_magnitudes"]
    large = ", ".join(f"{word} {norm:.2f}" for word, norm, _ in w["largest"][:20])
    small = ", ".join(f"{word} {norm:.2f}" for word, norm, _ in w["smallest"][:20])
    header = [
        f"largest ‖s_t‖ (first 20 of {len(w['largest'])})",
        f"smallest ‖s_t‖ (first 20 of {len(w['smallest'])})",
    ]
    note = (
        f"the mean ‖s_t‖ over the dev captions of each of the {w['n_words']} words seen at least "
        f"{w['min_count']} times"
    )
    return (
        table(header, [[large, small]], right_from=2)
        + "\n\n"
        + source("alignment.json", d, "word_magnitudes", note)
    )


def t_ddp() -> str:
    d = load("ddp.json")
    out = []
    for runs, meta, key in ((d["runs"], d, "runs"), (d["loaded_run"]["runs"], d["loaded_run"], "loaded_run")):
        body = [
            [
                r["procs"],
                *(f1(x) for x in r["epoch_s"]),
                f1(r["cpu_s"]),
                f1(r["wall_s"]),
                f"{r['loss'][-1]:.6f}",
                f2(r["dev_rsum"][-1]),
            ]
            for r in runs
        ]
        header = [
            "processes",
            *(f"epoch {i + 1} s" for i in range(len(runs[0]["epoch_s"]))),
            "CPU s",
            "wall s",
            "loss, last epoch",
            "dev rsum, last epoch",
        ]
        note = (
            f"recipe `{meta['recipe']}` on {meta['backbone']} features, {meta['epochs']} epochs; "
            f"{meta['note']}"
        )
        out.append(table(header, body, right_from=0) + "\n\n" + source("ddp.json", meta, key, note))
    return "\n\n".join(out)


def t_ray() -> str:
    d = load("ray.json")
    configs: dict[str, list[dict[str, Any]]] = {}
    for r in d["runs"]:
        configs.setdefault(r["config"], []).append(r)
    body = []
    for config, rs in configs.items():
        init = " / ".join(f1(r["ray_init_s"]) for r in rs) if "ray_init_s" in rs[0] else "-"
        body.append(
            [
                config,
                init,
                " / ".join(f1(r["extract_s"]) for r in rs),
                " / ".join(f1(r["img_per_s_extract"]) for r in rs),
                " / ".join(f1(r["total_s"]) for r in rs),
            ]
        )
    header = ["configuration", "cluster start s", "extract s, round 1 / 2", "img/s", "whole process s"]
    note = f"{d['data']}, {d['backbone']}; Ray {d['versions']['ray']}; `python bench/bench_ray.py --rounds 2`"
    return table(header, body) + "\n\n" + source("ray.json", d, "runs", note)


# ---------------------------------------------------------------------------------------------- reliability

KINDS = {
    "search": "`GET /api/search` (a dev caption, k = 10)",
    "search_image": "`POST /api/search/image`",
    "caption": "`POST /api/caption` (upload)",
    "caption_id": "`GET /api/caption/{id}`",
}


def t_serve_load() -> str:
    d = load("serve_load.json")
    body = [
        [KINDS[k], f"{v['requests']:,}", f"{v['p50_ms']:,.0f}", f"{v['p99_ms']:,.0f}"]
        for k, v in d["per_kind"].items()
    ]
    body.append(
        [
            f"all ({d['errors']} errors, {d['requests_per_s']:.1f} requests/s)",
            f"{d['all']['requests']:,}",
            f"{d['all']['p50_ms']:,.0f}",
            f"{d['all']['p99_ms']:,.0f}",
        ]
    )
    rss = d["rss_mib"]
    note = (
        f"{d['photos']}, concurrency {d['concurrency']}; server RSS MiB: {rss['before_warmup']} idle, "
        f"{rss['after_warmup']} after the warm-up, {rss['after_last']} after the last answer; "
        "`python bench/bench_serve_load.py`"
    )
    return (
        table(["endpoint", "requests", "p50 ms", "p99 ms"], body)
        + "\n\n"
        + source("serve_load.json", d, None, note)
    )


def t_kill_campaign() -> str:
    d = load("kill_campaign.json")
    body = [
        [
            f"`{job}`",
            v["trials"],
            v["killed_running"],
            v["identical"],
            v["unreadable_leftovers"],
            f1(v["uninterrupted_s"]),
        ]
        for job, v in d["jobs"].items()
    ]
    header = [
        "job",
        "trials",
        "killed while running",
        "rerun identical",
        "unreadable leftovers",
        "uninterrupted run s",
    ]
    note = f"seed {d['seed']}, {d['minutes']} minutes; `python bench/kill_campaign.py --trials 6`"
    return table(header, body) + "\n\n" + source("kill_campaign.json", d, "jobs", note)


def t_rerank() -> str:
    d = load("rerank.json")
    meta, half = d["meta"], d["held_out_half"]
    rows = [["plain (both routes fused)", *[f2(half["plain"][k]) for k in ("R@1", "R@5", "R@10")],
             f1(half["plain"]["p50_ms"]), f1(half["plain"]["p99_ms"])]]  # fmt: skip
    keys = sorted((k for k in half if k.startswith("rerank")), key=lambda k: int(k[6:]))
    for n, key in enumerate(keys):  # the first pass fills the region cache, later ones find it filled
        r, cache = half[key], "filling the region cache" if n == 0 else "regions cached"
        rows.append([f"`rerank={key[6:]}`, {cache}", *[f2(r[k]) for k in ("R@1", "R@5", "R@10")],
                     f1(r["p50_ms"]), f1(r["p99_ms"])])  # fmt: skip
    header = ["search", "R@1", "R@5", "R@10", "p50 ms", "p99 ms"]
    note = (
        f"image search through the folder contract on the odd-numbered half of {meta['split']} "
        f"({half['photos']} photos, {half['queries']:,} captions as queries; the fusion's weight was chosen "
        f"on {meta.get('fusion_tuned_on', 'the even half')}); "
        "a cold re-rank of the top 50 (regions computed) took "
        f"{f1(half['cold_rerank_ms_p50'])} ms at the median; "
        f"`python bench/bench_rerank.py --parts odd everyday --threads {meta['threads']}`"
    )
    flat = {**meta, "load_avg_1m": meta["loadavg"][0]}
    out = table(header, rows) + "\n\n" + source("rerank.json", flat, "held_out_half", note)
    if "everyday" in d:
        e = d["everyday"]
        pct = lambda x: f"{100 * x:.1f}%"  # noqa: E731
        cells = lambda r: [pct(r["fit_in_top5"]), f2(r["precision_at_5"]), f2(r["recall_at_10"])]  # noqa: E731
        every = [["plain (both routes fused)", *cells(e["plain"])]]
        for key in sorted(
            (k for k in e if k.startswith("rerank") and k[6:].isdigit()), key=lambda k: int(k[6:])
        ):
            every.append([f"`rerank={key[6:]}`: the joint space's hits re-ordered in place", *cells(e[key])])
            every.append(
                [f"`rerank={key[6:]}`, every hit re-ordered (before)", *cells(e[key + "_every_hit"])]
            )
        head = [f"everyday validation set ({e['photos']} photos)", "fit in top 5", "P@5", "R@10"]
        out += "\n\n" + table(head, every)
    return out


def t_concept_route() -> str:
    from vsekit.retrieval.answer import fusion_rule

    d = load("concept_route.json")
    before, after = d["before"], d["after"]
    pct = lambda x: f"{100 * x:.1f}%"  # noqa: E731
    rows = []
    for label, run, weak in (
        ("joint space alone (0.1.0)", before, before),
        (
            f"both routes: {fusion_rule(d['fusion'])}",
            after,
            after["weak"],
        ),
    ):
        e, v, we, wv = run["everyday"], run["val1000"], weak["everyday"], weak["val1000"]
        absent = pct(wv["absent_flagged"]) if "absent_flagged" in wv else ""
        rows.append([label, pct(e["fit_in_top5"]), f2(e["precision_at_5"]), f2(e["recall_at_10"]),
                     pct(we["absent_flagged"]), pct(we["present_not_flagged"]),
                     f2(v["t2i_r1"]), f2(v["t2i_r10"]), pct(wv["present_not_flagged"]), absent])  # fmt: skip
    header = ["search", "everyday: fit in top 5", "P@5", "R@10", "absent flagged weak", "present not flagged",
              "val1000: t2i R@1", "t2i R@10", "present not flagged", "absent flagged"]  # fmt: skip
    note = (
        f"validation sets only: everyday ({d['sets']['everyday']['photos']} photos, "
        f"{d['sets']['everyday']['queries']} queries) and flickr8k-val1000 "
        f"({d['sets']['val1000']['captions']:,} captions; joint space scored by {d['proxy']}, trained "
        f"without it; absent: the {len(d['sets']['val1000'].get('absent_queries', []))} everyday queries "
        "whose nouns no val1000 caption says, searching its photos); backbone "
        f"{d['backbone']}; the fusion and the thresholds were chosen on these "
        "numbers, so they are validation numbers, not held-out ones; `python ship/concept_route.py`"
    )
    return table(header, rows) + "\n\n" + source("concept_route.json", d, extra=note)


def t_concept_regions() -> str:
    d = load("concept_regions.json")
    pct = lambda x: f"{100 * x:.1f}%"  # noqa: E731
    cost = d["cost"]
    share, second = cost.get("regions_head_share_of_build", {}), cost.get("lite2_second_pass_share_of_build")
    rows = []
    for name, c in d["candidates"].items():
        r = c["refit"]
        e, v, f = r["everyday"], r["val1000"], r["fusion"]
        backbone, _, rest = name.partition("-")
        extra = share.get(name, 0.0) if "global" not in rest else 0.0
        if backbone == "lite2":
            extra += second or 0.0
        label = {"lite0-global-index": "lite0-global (the index today)",
                 "lite0-global": "lite0-global, from the grid (a check)"}.get(name, name)  # fmt: skip
        rows.append([label, pct(e["fit_in_top5"]), f2(e["precision_at_5"]), f2(e["recall_at_10"]),
                     pct(e["absent_flagged"]), pct(e["present_not_flagged"]), f2(v["t2i_r1"]),
                     f2(v["t2i_r5"]), f2(v["t2i_r10"]), f"{f['scale']:g} / {f['offset']:g}",
                     "today" if label.endswith("today)") else f"{100 * extra:+.1f}%"])  # fmt: skip
    header = ["classes from", "everyday: fit in top 5", "P@5", "R@10", "absent flagged", "present kept",
              "val1000: t2i R@1", "R@5", "R@10", "a / b", "build cost per photo"]  # fmt: skip
    ceiling = d["precision_at_5_ceiling"]
    note = (
        f"validation sets only: everyday ({d['sets']['everyday']['photos']} photos, "
        f"{d['sets']['everyday']['queries']} queries) and flickr8k-val1000 "
        f"({d['sets']['val1000']['captions']:,} captions, joint space scored by "
        f"{d['sets']['val1000']['proxy']}); each row's fusion a, b (gate 0.05) and weak thresholds chosen on "
        "these sets by bench/concept_route.py's grid and rule; the best P@5 any ranking can have on everyday "
        f"is {f2(ceiling['precision_at_5'])} "
        f"({ceiling['queries_with_fewer_than_5_fitting']} of {ceiling['queries']} queries have fewer than 5 "
        "fitting photos); build cost: what the row adds to today's index build step per photo (Lite2: a "
        "second CNN pass); `python ship/concept_regions.py`"
    )
    return table(header, rows) + "\n\n" + source("concept_regions.json", d, extra=note)


def t_concept_captions() -> str:
    d = load("concept_captions.json")
    pct = lambda x: "" if x is None else f"{100 * x:.1f}%"  # noqa: E731
    rows = []
    unguarded = d["ablations"][0]["val1000"]["cider"]  # the repeat guard alone: what the rule compares with
    for run in (d["before"], *d["ablations"], d["after"], *d["familiar_grid"]):
        e, v, share = run["everyday"], run["val1000"], run["guarded_share"]
        label = run["setting"] + (" (shipped)" if run is d["after"] else "")
        cost = f"{v['cider'] - unguarded:+.2f}" if run["guard"] else ""
        rows.append([label, pct(share["everyday"]), f2(e["chair_s"]), f2(e["chair_i"]),
                     pct(e["subject_named"]), e["person_words"], e["dog_words"], pct(e.get("broken")),
                     pct(e.get("repeat_word")), pct(share["val1000"]), f1(v["bleu4"]), f1(v["cider"]), cost,
                     pct(v["repeat_trigram"])])  # fmt: skip
    header = ["captions", "everyday: guarded", "CHAIR_s", "CHAIR_i", "subject named", "person words",
              "dog words", "broken", "repeat a word", "val1000: guarded", "BLEU-4", "CIDEr-D",
              "CIDEr-D cost", "repeat a trigram"]  # fmt: skip
    e = d["after"]["everyday"]
    note = (
        f"validation sets only: everyday ({e['photos']} photos, not Flickr8K) and flickr8k-val1000 (1,000 "
        "photos the shipped captioner trained on, so its scores are high; the guard's table, familiarity "
        "reference and novel classes were built without them); `familiar_at` and `novel_at`: of the pairs "
        "that cost val1000 at most 1 CIDEr-D point against the captioner without the concept guard, the one "
        "whose everyday captions invent least (CIDEr-D cost: against the repeat guard alone); broken: "
        "captions that lose their subject (a colour or size "
        "word straight before a verb, or three colour pairs: bench/concept_captions.py); repeat a word: "
        "captions that say a content word twice; "
        "`python bench/concept_captions.py --pairs 0.6:0.7 0.59:0.6 0.58:0.6 0.59:0.7 0.61:0.6 --dev`"
    )
    out = table(header, rows) + "\n\n" + source("concept_captions.json", d["meta"], extra=note)
    if "dev" in d:
        runs = (("before (no guards)", d["dev"]["before"]), ("after (shipped)", d["dev"]["after"]))
        dev = [[label, f1(r["bleu4"]), f1(r["meteor"]), f1(r["cider"]), pct(r["repeat_trigram"]),
                pct(r["distinct_captions"]), r["vocabulary"]] for label, r in runs]  # fmt: skip
        head = [
            "Flickr8K dev, read once",
            "BLEU-4",
            "METEOR",
            "CIDEr-D",
            "repeat a trigram",
            "distinct",
            "words",
        ]
        out += "\n\n" + table(head, dev)
    return out


def t_gpu_check() -> str:
    d = load("gpu_check.json")
    before, torch_f, auto_f = d["before_padding"], d["features_torch"], d["features_auto"]
    cnn, first_before = d["torch_cnn"], d["before_padding"]["torch_cnn"]
    firsts = lambda r: " / ".join(f"{r[k]:.0f}" for k in ("1", "3", "8"))  # noqa: E731
    train = d["training"]
    cap = d["captions"]
    rows = [
        ["image features, PyTorch engine, 100 photos: photos/s (first pass, before the padding)",
         f1(before["features_torch"]["cpu_photos_per_s"]), f1(before["features_torch"]["cuda_photos_per_s"])],
        ["the same, batches padded to 32 on CUDA (shipped): first pass / again",
         f"{f1(torch_f['cpu_photos_per_s'])} / {f1(torch_f['cpu_photos_per_s_again'])}",
         f"{f1(torch_f['cuda_photos_per_s'])} / {f1(torch_f['cuda_photos_per_s_again'])}"],
        ["image features, `--engine auto` (ONNX Runtime): first pass / again",
         f"{f1(auto_f['cpu_photos_per_s'])} / {f1(auto_f['cpu_photos_per_s_again'])}",
         f"{f1(auto_f['cuda_photos_per_s'])} / {f1(auto_f['cuda_photos_per_s_again'])}"],
        ["first batch of 1 / 3 / 8 photos after batches of 8, 32 and 4, ms (before the padding)",
         firsts(first_before["cpu_first_batch_ms"]), firsts(first_before["cuda_first_batch_ms"])],
        ["the same, ms (shipped)",
         firsts(cnn["cpu_first_batch_ms"]), firsts(cnn["cuda_first_batch_ms"])],
        ["largest difference of a feature, CPU against CUDA (largest value)",
         "", f"{torch_f['max_abs_diff']:.4f} ({torch_f['max_abs_value']:.2f})"],
        ["`vsekit caption` (concept guard, no rerank): captions equal to the CPU's", "",
         f"{cap['same_captions']} of {cap['photos']}"],
        ["`vsekit train` (bag-of-words `vse`, 1 epoch, then `--resume` to 2): loss, dev rsum",
         f"{train['cpu']['train_last']['loss']:.4f}, {f1(train['cpu']['train_last']['dev']['rsum'])}",
         f"{train['cuda']['train_last']['loss']:.4f}, {f1(train['cuda']['train_last']['dev']['rsum'])}"],
        ["`vsekit train-captioner` (2 epochs): last training loss",
         *(f"{train[device]['captioner_last']['train_loss']:.4f}" for device in ("cpu", "cuda"))],
    ]  # fmt: skip
    header = ["on the bundled sample", "CPU (16 cores)", f"CUDA ({d['cuda']})"]
    note = f"torch {d['torch']}; {d['note']}; `python bench/gpu_check.py`"
    return table(header, rows) + "\n\n" + source("gpu_check.json", d["meta"], extra=note)


def t_duplicate_kinds() -> str:
    d = load("duplicate_kinds.json")
    pct = lambda x: f"{100 * x:.1f}%"  # noqa: E731
    kinds = ("bytes", "pixels", "jpeg60", "half", "crop5", "burst")
    header = ["precision (pairs)", "distinct photos grouped", *[f"recall: {k}" for k in kinds]]
    row = [
        pct(d["precision"]),
        str(len(d["distinct_photos_grouped"])),
        *[pct(d[f"recall_{k}"]) for k in kinds],
    ]
    note = (
        f"the everyday validation set ({d['originals']} photos that are not Flickr8K, many of one "
        f"subject) as the similar-but-distinct photos; {d['with_copies']} of them with an exact copy "
        "(bytes), a PNG of their pixels, a JPEG quality 60 re-save, a half-size copy, a 5% crop and a "
        f"burst stand-in (moved 3%, turned 1.5 degrees, 5% darker): {d['files']} files, threshold "
        f"{d['threshold']}; the dHash check was chosen on this set; finding took {d['find_s']} s; "
        "`python bench/bench_duplicate_kinds.py`"
    )
    return table(header, [row]) + "\n\n" + source("duplicate_kinds.json", d["meta"], extra=note)


def t_cold_start() -> str:
    d = load("cold_start.json")
    runs = {
        "before-idle": "before issue 34 item 7 (idle machine)",
        "after-idle": "no model for a no-op update, serve warmed (idle machine)",
        "text-graph-before": "the same code (9a9bdc9), timed back to back with the next row",
        "text-graph": "**the text side as a cached ONNX graph, exact search in NumPy: no torch**",
        "tuned-vse": "the same, with the `vse` whose MiniLM top layer is tuned (shipped 2026-11-26)",
    }
    rows = []
    for key, what in runs.items():
        r = d[key]
        search, serve = r["search"], r["serve"]
        rows.append([
            what, f"{r['loadavg_1m']:.1f}", f2(search["median_s"]), f2(search["median_cpu_s"]),
            f2(serve["until_serving_s"]), f2(serve["first_query_s"]), r["commit"],
        ])  # fmt: skip
    header = [
        "code", "load", "`vsekit search`: wall s", "CPU s", "serve: until serving s", "first query s",
        "commit",
    ]  # fmt: skip
    note = (
        'median of 5 fresh processes of `vsekit search INDEX "a dog on the beach"` over the 152 everyday '
        "photos; CPU = user + system, the number a shared machine's load inflates least; "
        "`python bench/bench_cold_start.py --label LABEL`"
    )
    return table(header, rows) + "\n\n" + source("cold_start.json", d["text-graph"], extra=note)


def t_concepts_cost() -> str:
    d = load("concepts_cost.json")
    search, build = d["search"], d["build"]
    rows = [
        [f"warm text search, {search['photos']:,} photos, p50 ms", f2(search["joint_only_ms"]["p50_ms"]),
         f2(search["fused_ms"]["p50_ms"]), f"+{f2(search['added_p50_ms'])}"],
        [f"index build, {build['photos']} everyday photos, photos/s",
         f1(build["photos_per_s"]["without_classes"]), f1(build["photos_per_s"]["with_classes"]),
         f"{100 * build['slowdown']:+.1f}%"],
    ]  # fmt: skip
    note = (
        f"search: synthetic vectors and classes, {search['queries']} distinct sentences, the joint side's "
        "MiniLM pass taken out of both (the pretrained top layer the concept route runs over it, for a "
        "`vse` whose top layer was tuned, is in its cost); build: best of the runs, the classes switched "
        "off as in a build before the concept route; `python bench/bench_concepts.py`"
    )
    return (
        table(["what", "joint space only", "with the concept route", "cost"], rows)
        + "\n\n"
        + source("concepts_cost.json", d, extra=note)
    )


def t_serve_latency() -> str:
    runs = [
        ("text search alone, 1 client", "serve_text_c1.json", ["search"]),
        ("text search alone, 16 clients", "serve_text_c16.json", ["search"]),
        ("the mix, 16 clients", "serve_mix_c16.json", ["search", "search_image", "caption", "caption_id"]),
    ]
    rows, sources = [], []
    for label, name, kinds in runs:
        d = load(name)
        for kind in kinds:
            k = d["per_kind"][kind]
            rows.append([label, f"`{kind}`", k["requests"], f1(k["p50_ms"]), f1(k["p99_ms"]), d["errors"]])
        sources.append(source(name, d, "per_kind"))
    header = ["run", "request", "requests", "p50 ms", "p99 ms", "errors (run)"]
    note = (
        "`python bench/bench_serve_load.py --only search --concurrency 1` / `--concurrency 16`, and the "
        "full mix (half text search, a quarter photo search, an eighth caption uploads and indexed captions)"
    )
    return table(header, rows, right_from=2) + "\n\n" + "\n\n".join(sources) + "\n\n" + note


def t_reselect_vse() -> str:
    d = load("reselect.json")
    v = d["vse_val1000"]
    dev, shipped, test = v["dev"], v["shipped_vse_dev"], v["shipped_vse_test_independent"]
    rows = [
        ["re-selected on val1000 (seeds 1+3, 5,000 training photos), **dev**", f1(dev["i2t"]["r1"]),
         f1(dev["t2i"]["r1"]), f1(dev["rsum"])],
        ["previous `vse`, selected on dev (seeds 1+2, 6,000 photos), **dev**", f1(shipped["i2t_r1"]),
         f1(shipped["t2i_r1"]), f1(shipped["rsum"])],
        ["previous `vse`, held-out **test** (measured independently)", f1(test["i2t_r1"]), f1(test["t2i_r1"]),
         f1(test["rsum"])],
    ]  # fmt: skip
    members = "; ".join(
        f"seed {s}: epoch {m['epoch']}, val1000 rsum {f1(m['rsum'])}" for s, m in v["members"].items()
    )
    meta = {**d["meta"], "load_avg_1m": d["meta"]["loadavg"][0]}
    note = f"members chosen on val1000 ({members}); `python ship/reselect_vse.py`, `ship/pack_members.py`"
    return (
        table(["model", "i2t R@1", "t2i R@1", "rsum"], rows)
        + "\n\n"
        + source("reselect.json", meta, "vse_val1000", note)
    )


def t_scst_dev() -> str:
    d = load("reselect.json")
    c = d["captioner_scst"]
    keys = ("bleu1", "bleu4", "meteor", "rouge_l", "cider")
    rows = [
        ["cross-entropy captioner, greedy", *(f1(c["cross_entropy_dev_greedy"][k]) for k in keys)],
        ["after SCST (epoch 1, chosen on val1000), greedy", *(f1(c["dev_greedy"][k]) for k in keys)],
        ["shipped: cross-entropy, beam 7 + rerank", *(f1(c["shipped_dev_beam7_rerank"][k]) for k in keys)],
    ]
    meta = {**d["meta"], "load_avg_1m": d["meta"]["loadavg"][0]}
    header = ["captioner on dev", "BLEU-1", "BLEU-4", "METEOR", "ROUGE-L", "CIDEr-D"]
    return table(header, rows) + "\n\n" + source("reselect.json", meta, "captioner_scst", c["what"])


def t_scst_protocol() -> str:
    """SCST along the selection protocol: every number on val1000, from models that never saw it."""
    d = load("scst_val1000.json")
    best = next(c for c in d["curves"] if c["epoch"] == d["best_epoch"])
    last = d["curves"][-1]
    keys = ("bleu4", "cider", "mean_words", "distinct_pct")
    greedy = f"greedy, first {d['recipe']['eval_images']} photos"
    rows = [
        [f"cross-entropy, {greedy}", *(f1(d["start"][k]) for k in keys), f"{d['start']['vocab_used']:.0f}"],
        *(
            [f"SCST epoch {c['epoch']} ({which}), {greedy}", *(f1(c["val"][k]) for k in keys)]
            + [f"{c['val']['vocab_used']:.0f}"]
            for c, which in ((best, "the best"), (last, "the last"))
        ),
    ]
    for label, name in (("cross-entropy", "xent"), ("SCST", "scst")):
        r = load(f"captioner_rerank_val1000_{name}.json")
        chosen = next(b for b in r["beams"] if b["beam"] == r["chosen_beam"])
        s = chosen["settings"]
        rows.append(
            [
                f"{label}, beam {s['beam_size']} + rerank (weight {s['weight']:g}, length penalty "
                f"{s['length_penalty']:g}), all 1,000 photos",
                f1(chosen["best"]["bleu4"]),
                f1(chosen["best"]["cider"]),
                "",
                "",
                "",
            ]
        )
    header = ["on val1000", "BLEU-4", "CIDEr-D", "words", "distinct %", "vocabulary"]
    meta = {k: v for k, v in d.items() if k != "note"} | {"load_avg_1m": d["loadavg"][0]}
    note = (
        f"{d['note']}. Decoding rows: bench/results/captioner_rerank_val1000_{{xent,scst}}.json "
        "(ship/ship_models.py captioner --joint, the joint model trained without val1000)"
    )
    return table(header, rows) + "\n\n" + source("scst_val1000.json", meta, None, note)


def t_int8() -> str:
    """The int8 engine against float ONNX Runtime: dev ranking of a shipped model, and CNN speed."""
    d = load("int8.json")
    rows = []
    for name, m in d["models"].items():
        f, q = m["onnxruntime"], m["onnxruntime-int8"]
        speed = d["speed"][f["backbone"]]
        rows.append([f"`{name}` ({f['backbone']})", f1(f["rsum"]), f1(q["rsum"]), f"{m['rsum_change']:+.1f}",
                     f1(speed["img_per_s"]["onnxruntime"]), f1(speed["img_per_s"]["onnxruntime-int8"]),
                     f"{speed['int8_over_float']:.2f}x"])  # fmt: skip
    header = ["model", "dev rsum, float", "dev rsum, int8", "change", "photos/s, float", "photos/s, int8",
              "int8 speed-up"]  # fmt: skip
    note = (
        "Flickr8K dev ranking with each engine's features (`vsekit eval --engine ...`); speed: the bundled "
        "sample's 100 photos uncached, 3 passes after a warm-up, engines interleaved; "
        "`python bench/bench_int8.py --models bow --threads 1`"
    )
    return table(header, rows) + "\n\n" + source("int8.json", d["meta"], None, note)


def t_joint_space() -> str:
    """Each joint-space change on val1000 against the baseline member of the same seed."""
    d = load("joint_space.json")

    def cells(run: dict[str, Any]) -> list[str]:
        late = [c["rsum"] for c in run["val1000"] if c["epoch"] > run["epochs"] - 5]
        best = run["best"]
        return [str(run["seed"]), str(best["epoch"]), f1(best["rsum"]), f1(best["i2t_r1"]),
                f1(best["t2i_r1"]), f1(sum(late) / len(late))]  # fmt: skip

    rows = [
        ["baseline (`vse-best-effnet-val1000`)", *cells(b), "-"]
        for b in sorted(d["baselines"].values(), key=lambda b: b["seed"])
    ]
    for e in d["experiments"]:
        gain = e["vs_baseline_same_seed_best"]["rsum"]
        rows.append([f"{e['name']} (`{Path(e['recipe']).stem}`)", *cells(e), f"{gain:+.1f}"])
    header = ["recipe", "seed", "best epoch", "val1000 rsum", "i2t R@1", "t2i R@1",
              "mean rsum, last 5 epochs", "vs baseline, same seed (rsum)"]  # fmt: skip
    note = f"{d['protocol']}; `python bench/joint_space.py`"
    return table(header, rows) + "\n\n" + source("joint_space.json", d["meta"], None, note)


def _run_cells(r: dict[str, Any]) -> list[str]:
    """A val1000 training run's row (bench/gpo.py's ``row``): epochs, best epoch, recalls, rsum, time, RSS."""
    b = r["best"]
    recalls = [f1(b[f"{side}_{k}"]) for side in ("i2t", "t2i") for k in ("r1", "r5", "r10")]
    status = " (early stop)" if r["stopped_early"] else "" if r["finished"] else " (running)"
    done = f"{r['epochs_done']}/{r['epochs']}{status}"
    per_epoch = f"{r['later_epoch_mean_s']:.0f}" if r["later_epoch_mean_s"] is not None else "-"
    rss = f"{r['peak_rss_mb'] / 1024:.1f}" if r["peak_rss_mb"] else "-"
    return [done, str(b["epoch"]), *recalls, f1(b["rsum"]), per_epoch, rss]


_RUN_HEADER = ["epochs", "best epoch", "i2t R@1", "R@5", "R@10", "t2i R@1", "R@5", "R@10", "val1000 rsum",
               "s / epoch (2-15)", "peak RSS (GiB)"]  # fmt: skip


def t_gpo() -> str:
    """GPO over the grid against the one-vector image, same seed and schedule, on val1000."""
    d = load("gpo.json")
    rows = [[f"{r['name']} (`{Path(r['recipe']).stem}`)", *_run_cells(r)] for r in d["rows"] if r["best"]]
    note = f"{d['protocol']}; `python bench/gpo.py`"
    return table(["image side", *_RUN_HEADER], rows) + "\n\n" + source("gpo.json", d["meta"], None, note)


def _aligner_runs(d: dict[str, Any], first: str, script: str) -> str:
    """Aligner runs on val1000 (bench/aligner_backbone.py's rows): best epochs, then rsum by epoch against
    the first row."""
    rows = []
    for r in d["rows"]:
        b = r["best"]
        recalls = [f1(b[f"{side}_{k}"]) for side in ("i2t", "t2i") for k in ("r1", "r5", "r10")]
        later = [e["time_s"] for e in r["val1000"][1:]]
        rss = f"{r['peak_rss_mb'] / 1024:.1f}" if r["peak_rss_mb"] else "-"
        rows.append([r["name"], f"{r['epochs_done']}/{r['epochs']}", str(b["epoch"]), *recalls, f1(b["rsum"]),
                     f"{sum(later) / len(later):.0f}", rss])  # fmt: skip
    header = [first, "epochs", "best epoch", "i2t R@1", "R@5", "R@10", "t2i R@1", "R@5", "R@10",
              "val1000 rsum", "s / epoch (2-12)", "peak RSS (GiB)"]  # fmt: skip
    curves = [[e["rsum"] for e in r["val1000"]] for r in d["rows"]]
    curve_rows = [
        [str(k + 1), *(f1(c[k]) for c in curves), *(f"{c[k] - curves[0][k]:+.1f}" for c in curves[1:])]
        for k in range(min(len(c) for c in curves))
    ]
    names = [r["name"].split(" (")[0] for r in d["rows"]]
    differences = ["difference"] if len(curves) == 2 else [f"{n}: difference" for n in names[1:]]
    curve = table(["epoch", *(f"{n} rsum" for n in names), *differences], curve_rows)
    note = f"{d['protocol']}; `python bench/{script}`"
    where = source(f"{Path(script).stem}.json", d["meta"], None, note)
    return table(header, rows) + "\n\n" + curve + "\n\n" + where


def t_aligner_backbone() -> str:
    """The aligner's grid regions from Lite0 against MobileNetV2, same recipe and seed, on val1000."""
    return _aligner_runs(load("aligner_backbone.json"), "regions from", "aligner_backbone.py")


_FLAT_HEADER = ["i2t R@1", "R@5", "R@10", "t2i R@1", "R@5", "R@10", "rsum"]


def _flat_cells(m: dict[str, Any]) -> list[str]:
    """R@1/5/10 both ways from a bench script's flat recall keys (``i2t_r1``, ...)."""
    return [f1(m[f"{side}_{k}"]) for side in ("i2t", "t2i") for k in ("r1", "r5", "r10")]


def t_aligner_text_finetune() -> str:
    """The aligner with MiniLM's top layer tuned against the frozen encoder, same recipe, on val1000; its
    packings on val1000; the chosen ones retrained on all of train, dev read once, beside the shipped
    aligner and the paper."""
    d = load("aligner_text_finetune.json")
    parts = [_aligner_runs(d, "word states", "aligner_text_finetune.py")]
    cells, header = _flat_cells, _FLAT_HEADER
    if "packings" in d:
        p = d["packings"]
        rows = [
            [f"**{k}**" if k == p["chosen"] else k, *cells(v), f1(v["rsum"])] for k, v in p["val1000"].items()
        ]
        check = p["chosen_as_packed_file"]
        rows.append(
            [f"{p['chosen']}, packed and saved in float16 (a check)", *cells(check), f1(check["rsum"])]
        )
        note = "members: epochs of the runs above (ft1: the recipe's rate, slow: a fifth of it, frozen); "
        note += "`python bench/aligner_text_finetune.py --packings --out-model FILE`"
        parts += [table(["packing, val1000", *header], rows)]
        parts += [source("aligner_text_finetune.json", p["meta"], "packings", note)]
    if "retrained" in d:
        parts.append(_aligner_retrained(d))
    return "\n\n".join(parts)


def _aligner_retrained(d: dict[str, Any]) -> str:
    """Dev, read once: the retrained tuned aligner (and its packing) beside the shipped one and BRNN."""
    cells, header = _flat_cells, _FLAT_HEADER
    r, before = d["retrained"], load("aligner_reselect.json")["retrained_on_train"]["dev_once"]
    flat = {f"{side}_{k}": before[side][k] for side in ("i2t", "t2i") for k in ("r1", "r5", "r10")}
    rows = [
        ["Karpathy 2015 BRNN (paper, test)", "16.5", "40.6", "54.2", "11.8", "32.1", "44.7", "199.9"],
        ["previous `aligner` (3 frozen-MiniLM members packed)", *cells(flat), f1(before["rsum"])],
        [f"tuned top layer, epoch {r['epochs']}, trained on all of train (float16)", *cells(r["dev_float16"]),
         f1(r["dev_float16"]["rsum"])],
    ]  # fmt: skip
    meta, key = r["meta"], "retrained"
    note = (
        f"`{r['recipe']}`; {r['training_s'] / 60:.0f} min of epochs ({r['wall_seconds'] / 60:.0f} min wall), "
        f"peak RSS {r['peak_rss_gb']:.1f} GB (`--retrained RUN --out-model FILE`)"
    )
    if "retrained_pack" in d:
        pack = d["retrained_pack"]
        names = " + ".join(f"{m['name']} epoch {m['epochs']}" for m in pack["members"])
        rows.append([f"**shipped `aligner`**: {names} packed (float16, {pack['file_bytes'] / 2**20:.1f} MiB)",
                     *cells(pack["dev_float16"]), f1(pack["dev_float16"]["rsum"])])  # fmt: skip
        second = pack["members"][1]
        minutes = second["training_s"] / 60
        note += f"; the second member `{second['recipe']}`: {minutes:.0f} min of epochs, peak RSS "
        note += f"{second['peak_rss_gb']:.1f} GB; `--retrained-pack RUN RUN --out-model FILE`"
        meta, key = pack["meta"], "retrained_pack"
    note += "; the previous aligner's row: `bench/results/aligner_reselect.json`, key `retrained_on_train`; "
    note += "`python bench/aligner_text_finetune.py`"
    where = source("aligner_text_finetune.json", meta, key, note)
    return table(["Flickr8K dev, read once", *header], rows) + "\n\n" + where


def t_cnn_head_probe() -> str:
    """Lite0's head tuned with the joint space against frozen, same seed and schedule, on val1000."""
    d = load("cnn_head_probe.json")
    rows = [[r["name"], *_run_cells(r)] for r in d["rows"]]
    note = f"{d['protocol']}; `python bench/cnn_head_probe.py --report`"
    return (
        table(["image side", *_RUN_HEADER], rows)
        + "\n\n"
        + source("cnn_head_probe.json", d["meta"], None, note)
    )


def t_text_finetune() -> str:
    """MiniLM's top layer fine-tuned against the frozen encoder, same seed and schedule, on val1000."""
    d = load("text_finetune.json")
    runs = [("frozen MiniLM, seed 1", d["frozen"])] + [
        (f"top layer fine-tuned, seed {r['seed']}", r) for r in d["finetuned"]
    ]
    for seed, frozen in sorted(d.get("views_frozen", {}).items()):
        runs.append((f"six-crop views, frozen MiniLM, seed {seed}", frozen))
        runs += [
            (f"six-crop views, top layer fine-tuned, seed {seed}", r)
            for r in d.get("views_finetuned", [])
            if str(r["seed"]) == seed
        ]
    rows = [[f"{label} (`{Path(r['recipe']).stem}`)", *_run_cells(r)] for label, r in runs if r["best"]]
    note = f"{d['protocol']}; `python bench/text_finetune.py`"
    return (
        table(["text side", *_RUN_HEADER], rows)
        + "\n\n"
        + source("text_finetune.json", d["meta"], None, note)
    )


def t_attention_captioner() -> str:
    """The soft-attention captioner against the m-RNN on val1000: final numbers, then the run's curve."""
    d = load("attention_captioner.json")
    a, m = d["attention"], d["mrnn"]
    beam = next(k for k in a if k.endswith("_rerank")).split("_")[0]  # "beam7"
    size = beam[4:]

    def row(label: str, r: dict[str, Any]) -> list[str]:
        keys = ("cider", "bleu4", "meteor", "rouge_l", "mean_words", "distinct_pct", "repeat_trigram_pct")
        return [label, *(f1(r.get(k)) for k in keys)]

    def reranked(label: str, r: dict[str, Any]) -> list[str]:
        return row(f"{label} + rerank (weight {r['weight']:g}, length penalty {r['length_penalty']:g})", r)

    rerank = a[f"{beam}_rerank"]
    rows = [
        row(f"attention, greedy (best epoch {d['best_epoch']})", a["greedy"]),
        row("attention, greedy, no repeated trigram", a["greedy_no_repeat_3"]),
        row(f"attention, beam {size}", rerank["beam_alone"]),
        reranked(f"attention, beam {size}", rerank),
        row(f"m-RNN on file, greedy (best epoch {m['greedy']['best_epoch']})", m["greedy"]),
        row("m-RNN on file, beam 7", m["beam7_alone"]),
        reranked("m-RNN on file, beam 7", m["beam7_rerank"]),
    ]
    if "rerun" in m:  # the m-RNN's recipe rerun, scored and reranked exactly like the attention
        r = m["rerun"]
        again = r[f"{beam}_rerank"]
        rows += [
            row(f"m-RNN rerun, greedy (best epoch {r['best_epoch']})", r["greedy"]),
            row("m-RNN rerun, greedy, no repeated trigram", r["greedy_no_repeat_3"]),
            row(f"m-RNN rerun, beam {size}", again["beam_alone"]),
            reranked(f"m-RNN rerun, beam {size}", again),
        ]
    header = ["on val1000", "CIDEr-D", "B-4", "METEOR", "ROUGE-L", "words", "distinct %", "repeat 3-gram %"]
    curve = [
        [
            f"{e['epoch']}" + (" *" if e["best"] else ""),
            f"{e['train_loss']:.3f}",
            f"{e['train_s']:.0f}",
            *(f1(e.get(k)) for k in ("cider", "bleu4", "mean_words", "distinct_pct")),
            f"{e['vocab_used']:.0f}",
            f1(e.get("repeat_end_pct")),
        ]
        for e in d["training"]["curve"]
    ]
    curve_header = [
        "epoch",
        "train NLL",
        "train s",
        "CIDEr-D",
        "B-4",
        "words",
        "distinct %",
        "vocab",
        "'a a' %",
    ]
    rss = d["training"].get("peak_rss_mb")
    note = (
        f"{d['split']}; greedy rows scored with pycocoevalcap (METEOR where Java ran); the rerank rows with "
        "CIDEr-D and BLEU-4 only (the tuning's metrics), the attention's reranked by "
        f"{Path(d['rerank_joint_model']).name}, "
        f"the m-RNN's by {Path(m['rerank_joint_model']).name} (both the shipped recipe's seeds 1 + 3 trained "
        f"without the slice); m-RNN numbers from {m['source']} and {m['greedy']['source']}; "
        f"training peak RSS {f'{rss / 1024:.1f} GiB' if rss else 'not recorded'}; "
        "`python bench/attention_captioner.py --run RUN --joint VSE_WITHOUT_SLICE`"
    )
    return (
        table(header, rows)
        + "\n\nThe run, epoch by epoch (greedy captions of the slice; * the best so far):\n\n"
        + table(curve_header, curve)
        + "\n\n"
        + source("attention_captioner.json", d, None, note)
    )


def _candidate_table(name: str, kind: str, shipped: str, previous: str, command: str) -> str:
    """A fixed-epoch retrain of a recipe chosen on val1000 (ship/vse_candidate.py): each member and the
    packed ensemble on dev, read once, beside the `vse` it would replace."""
    d = load(name)

    def row(label: str, m: dict[str, Any]) -> list[str]:
        return [
            label,
            *(f1(m[side][k]) for side in ("i2t", "t2i") for k in ("r1", "r5", "r10")),
            f1(m["rsum"]),
        ]

    rows = [row(f"{kind} member, seed {seed}", m["dev"]) for seed, m in d["members"].items()]
    rows.append(row(f"**{kind} ensemble (seeds {' + '.join(d['members'])}){shipped}**", d["ensemble_dev"]))
    rows.append(row(previous, d["shipped_vse_dev"]))
    header = ["on dev", "i2t R@1", "R@5", "R@10", "t2i R@1", "R@5", "R@10", "rsum"]
    return table(header, rows) + "\n\n" + source(name, d, None, command)


def t_vse_views_candidate() -> str:
    """The six-crop views recipe retrained on all of train with val1000's choices; dev read once."""
    return _candidate_table(
        "vse_views_candidate.json",
        "views",
        ": shipped as `vse` 2026-11-24 to 26",
        "previous `vse` (seeds, epochs chosen on dev)",
        "`python ship/vse_candidate.py --run RUN` (recipe bench/recipes/vse-views-retrain.json)",
    )


def t_vse_views_ft1_candidate() -> str:
    """The views recipe with MiniLM's top layer tuned, retrained on all of train; dev read once."""
    return _candidate_table(
        "vse_views_ft1_candidate.json",
        "views + tuned MiniLM",
        ": shipped as `vse` since 2026-11-26",
        "the previous `vse` (views, frozen MiniLM; shipped 2026-11-24 to 26)",
        "`python ship/pack_members.py --run RUN --seeds 1 3 --out PACKED`, `python ship/ship_models.py vse "
        "PACKED --out CANDIDATE` (dev read once, float16), `python ship/vse_candidate.py --run RUN --recipe "
        "bench/recipes/vse-views-ft1-retrain.json --model CANDIDATE --evidence views-ft1`",
    )


def t_vse_views_ft1_head_candidate() -> str:
    """The same recipe with Lite0's head conv tuned too (pre-head cells), retrained; dev read once."""
    return _candidate_table(
        "vse_views_ft1_head_candidate.json",
        "views + tuned MiniLM + tuned CNN head",
        ": the candidate, not shipped",
        "the shipped `vse` (the same without the head; since 2026-11-26)",
        "`python ship/pack_members.py --run RUN --seeds 1 3 --selected-on val1000 --out PACKED`, `python "
        "ship/ship_models.py vse PACKED --out CANDIDATE` (dev read once, float16), `python "
        "ship/vse_candidate.py --run RUN --model CANDIDATE --evidence views-ft1-head`",
    )


def t_confidence() -> str:
    d = load("confidence.json")
    rows = [["shipped: " + d["made_with"]["rule"].split("; ")[1].split(" (")[0], f3(d["weak_below"])]]
    rows[0] += [f2(d["at_threshold"][k]) for k in ("precision", "recall", "f1")]
    if "f1_optimal" in d:
        o = d["f1_optimal"]
        rows.append(["for comparison: the F1-optimal threshold", f3(o["weak_below"])])
        rows[-1] += [f2(o[k]) for k in ("precision", "recall", "f1")]
    if "report_dev" in d:  # the shipped threshold on dev, read once for the report (not chosen there)
        r = d["report_dev"]
        label = f"the shipped threshold on **dev** ({r['photos']:,} photos, read once)"
        rows.append([label, f3(r["weak_below"])])
        rows[-1] += [f2(r["at_threshold"][k]) for k in ("precision", "recall", "f1")]
    header = ["threshold", "weak below", "precision", "recall", "F1"]
    best = d["best_score"]
    spread = [
        [label, *(f3(best[key][p]) for p in ("p5", "p25", "p50", "p75", "p95"))]
        for label, key in (("its photo is in the gallery", "has_match"), ("its photo is not", "no_match"))
    ]
    probes = [
        [
            f"`{text}`",
            f3(v["best_score_over_1000"]),
            "yes" if v["weak"] else "no",
            v["language_warning"] or "",
        ]
        for text, v in d["probes_over_the_1000_photos"].items()
    ]
    queries = d["queries"]
    note = f"{queries['has_match']:,} + {queries['no_match']:,} caption searches; {d['made_with']['data']}"
    return (
        table(header, rows)
        + "\n\nBest score of a search, percentiles 5 / 25 / 50 / 75 / 95:\n\n"
        + table(["the query's photo", "p5", "p25", "p50", "p75", "p95"], spread)
        + "\n\nProbe queries over the 1,000 photos:\n\n"
        + table(["query", "best score", "weak", "language warning"], probes, right_from=1)
        + "\n\n"
        + source("confidence.json", {**d, "load_avg_1m": d.get("load_1min", 0.0)}, None, note)
    )


def _meta_source(name: str, d: dict[str, Any], key: str | None, note: str) -> str:
    """``source`` for a result written through bench/_common.py (conditions under ``meta``)."""
    meta = d["meta"]
    load = f"load average {meta['loadavg'][0]} (1 min) at the end"
    if "loadavg_before" in meta:
        load += f", {meta['loadavg_before'][0]} at the start"
    return source(name, meta | {"load": load}, key, note)


FAULT_OUTCOMES = [
    "identical",
    "clear_error",
    "repaired",
    "unclear_error",
    "advice_failed",
    "traceback",
    "wrong",
    "overwrote",
    "check_missed",
    "hang",
]


def t_fault_campaign() -> str:
    d = load("fault_campaign.json")
    counts = d["counts"]

    def row(label: str, c: dict[str, int]) -> list[Any]:
        return [label, sum(c.values()), *(c.get(o, 0) for o in FAULT_OUTCOMES)]

    body = [row(f"fault `{k[6:]}`", v) for k, v in counts.items() if k.startswith("fault ")]
    body += [row(f"file `{k[5:]}`", v) for k, v in counts.items() if k.startswith("file ")]
    body += [row(f"index `{k[4:]}`", v) for k, v in counts.items() if k.startswith("kit ")]
    body += [row(f"action `{k[7:]}`", v) for k, v in counts.items() if k.startswith("action ")]
    floats = Counter()
    for fault in ("flip-data", "flip-keep-mtime", "flip-late"):
        floats.update(counts.get(f"cell {fault} x segment .npy", {}))
    if floats:
        label = "one bit in a segment's floats (`flip-data`, `flip-keep-mtime`, `flip-late` of a `.npy`)"
        body.append(row(label, floats))
    body.append(row("**all trials**", counts["all"]))
    if (RESULTS / "fault_campaign_seed22.json").is_file():
        other = load("fault_campaign_seed22.json")
        m = other["meta"]
        label = (
            f"all, another run: seed {other['seed']} (`fault_campaign_seed22.json`, {m['date']}, "
            f"load average {m['loadavg_before'][0]} -> {m['loadavg'][0]}, commit {m['commit']}; the "
            "campaign before `flip-record`, `plant` and the CLI actions)"
        )
        body.append(row(label, other["counts"]["all"]))
    if "baseline" in d:
        base = d["baseline"]
        what = d.get("baseline_note", "the store before these fixes")
        body.append(row(f"all, {what} (commit {base['meta']['commit']})", base["counts"]["all"]))
    header = ["trials by", "trials", *(o.replace("_", " ") for o in FAULT_OUTCOMES)]
    note = f"seed {d['seed']}, {d['minutes']} minutes; `{d['command']}`"
    return table(header, body) + "\n\n" + _meta_source("fault_campaign.json", d, "counts", note)


def _store_1m_row(label: str, r: dict[str, Any]) -> list[Any]:
    """One run of bench/bench_store.py at 1M: open (first in a process / again), cold searches."""
    cold = [r.get("cold_ivfpq"), r.get("cold_exact")]
    first = [f"{c['open_s'] + c['first_search_s']:.2f} s" if c else "-" for c in cold]
    return [
        label,
        f"{r['open_first_s']:.3f} s / {r['open_again_s'] * 1000:.0f} ms",
        *first,
        f"{r['exact_p50_ms_one_segment'] / 1000:.2f} s",
        f"{r['compact_s']:.0f} s",
        f"{r['add_1_s'] * 1000:.0f} ms",
    ]


def t_store_1m() -> str:
    d = load("store.json")
    body = [_store_1m_row("block CRC-32s, checked as read (format 3)", d["size_1m"])]
    if "size_1m_sha256" in d:
        old = d["meta_1m_sha256"]
        label = f"sha256 of every file on open (format 2, commit {old['commit']}, load {old['loadavg'][0]})"
        body.append(_store_1m_row(label, d["size_1m_sha256"]))
    header = [
        "1M photos",
        "open: first in a process / again",
        "fresh process: open + first IVF-PQ search",
        "fresh process: open + first exact search",
        "exact search p50 (warm)",
        "compaction",
        "add 1 photo",
    ]
    meta = d["meta_1m"]
    load_text = (
        f"load average {meta['loadavg'][0]} (1 min) at the end, {meta['loadavg_at_start'][0]} at the start"
    )
    return table(header, body) + "\n\n" + source("store.json", meta | {"load": load_text}, "size_1m", "")


def t_cold_search_1m() -> str:
    d = load("cold_search_1m.json")
    r = d["result"]
    rows = []
    for engine in ("ivfpq", "exact"):
        run = r[f"search_{engine}"]
        rows.append([f"`--engine {engine}`", f2(run["median_s"]), f2(run["median_cpu_s"]), f2(run["min_s"]),
                     f"{run['load_1min'][0]:.1f}"])  # fmt: skip
    if "against_previous_vse" in r:  # the same index recording the previous vse, alternated with it
        a = r["against_previous_vse"]
        for label, key in ((f"`--engine ivfpq`, the `vse` of {a['release']}", "previous"),
                           ("`--engine ivfpq`, the shipped `vse`", "shipped")):  # fmt: skip
            run = a[key]
            rows.append([f"{label} ({run['pairs']} alternating pairs)", f2(run["median_s"]),
                         f2(run["median_cpu_s"]), "-", "-"])  # fmt: skip
    header = ["1M photos, 2,048-d float16", "`vsekit search`: wall s (median)", "CPU s", "fastest s", "load"]
    stages = ", ".join(f"{name.replace('_', ' ')} {seconds:.2f} s" for name, seconds in r["stages"].items())
    note = (
        f'median of {r["search_ivfpq"]["runs"]} fresh processes of `vsekit search INDEX "{r["query"]}"`; '
        f"one process's stages: {stages}; `python bench/bench_cold_search_1m.py`"
    )
    return table(header, rows) + "\n\n" + source("cold_search_1m.json", d, extra=note)


def _runs(updates: list[dict[str, Any]]) -> str:
    """``6 / 2 (all exit 0)``: the update and compact runs of a live-update bench and their exit codes."""
    kinds = [sum(u.get("command", "update") == c for u in updates) for c in ("update", "compact")]
    failed = sum(u["rc"] != 0 for u in updates)
    return f"{kinds[0]} / {kinds[1]} ({'all exit 0' if not failed else f'{failed} failed'})"


def t_live_update() -> str:
    d = load("live_update.json")
    body = []
    for engine, e in d["engines"].items():
        served = [x for x in e["commit_to_served_s"] if x is not None]
        body.append(
            [
                f"`{engine}`",
                f"{e['requests_total']:,}",
                e["errors_total"],
                f"{e['info_counts_never_committed']} of {e['info_answers']:,}",
                _runs(e["updates"]),
                f"{e['photos_at_start']} -> {e['count_served_at_end']}"
                f" ({e['photos_in_folder_at_end']} in the folder)",
                f"{e['new_photos_seen_in_results']} of {e['new_photos_added']}",
                "-"
                if not served
                else f"{min(served):.2f} / {e['commit_to_served_mean_s']:.2f} / {max(served):.2f}",
                e["updates_never_served"],
            ]
        )
    header = [
        "engine",
        "requests",
        "errors (non-2xx)",
        "`/api/info` counts never committed",
        "`index update` / `index compact` runs",
        "photos served, start -> end",
        "new photos seen in results",
        "commit to served s (min / mean / max)",
        "updates never served",
    ]
    s = d["settings"]
    note = (
        f"{s['threads']} client threads + one `/api/info` poller every 50 ms, {s['photos']} sample photos at "
        f"the start, each update adds 3 and removes 1, {s['settle']} s between updates; "
        f"{d['minutes']} minutes; "
        f"`{d['command']}`"
    )
    return table(header, body) + "\n\n" + _meta_source("live_update.json", d, "engines", note)


# ---------------------------------------------------------------------------------------------- the papers
# The papers' own numbers (their tables, as printed: constants, not measurements of ours) beside our rows from
# the JSON, with the command that makes each of ours.


def _paper(label: str, numbers: str) -> list[str]:
    return [label, *numbers.split()]


PAPER_RANKING = {  # Flickr8K test: i2t R@1 R@5 R@10 Med r, t2i R@1 R@5 R@10 Med r
    "kiros": [
        _paper("Kiros 2014, AlexNet-class features (paper, test)", "13.5 36.2 45.7 13 10.4 31.0 43.7 14"),
        _paper("Kiros 2014, VGG features (paper, test)", "18.0 40.9 55.0 8 12.5 37.0 51.5 10"),
    ],
    "vilalta": [
        _paper(
            "Vilalta 2017 CNN-MME* (VGG16 fc7, GRU 2048; paper, test)", "21.0 45.7 60.4 7 14.0 35.8 48.6 11"
        ),
        _paper(
            "Vilalta 2017 FN-MME (VGG16 FNE, GRU 2048; paper, test)", "23.3 50.8 66.8 5 15.0 38.2 51.6 10"
        ),
    ],
}
OURS_RANKING = {
    "kiros": [
        ("kiros-gru", "ours: CNN-MME `kiros-gru` (GRU from scratch, sum of hinges)"),
        ("kiros-bow", "ours: linear bag-of-words encoder (the recipe of the shipped `bow`)"),
        ("kiros-bow-hardest", "ours: bag of words + hardest negative"),
        ("vse-best-effnet", "ours: shipped `vse` (frozen MiniLM, 2 seeds)"),
    ],
    "vilalta": [
        ("kiros-gru", "ours: CNN-MME (`kiros-gru`)"),
        ("fne-gru-10ep", "ours: FN-MME (`fne-gru`, 10 epochs)"),
        ("fne-bow", "ours: FN-MME with bag of words"),
        ("fne-mini-r256", "ours: FN-MME + frozen MiniLM, rank-256 projection (`fne-minilm`)"),
    ],
}
BENCH_RECIPE = {"fne-mini-r256": "fne-minilm"}  # ranking.json rows whose recipe ships under another name


def _bench_command(recipe: str) -> str:
    """The command that makes a ranking.json row: a shipped recipe by name, else the bench grid's file."""
    name = BENCH_RECIPE.get(recipe, recipe)
    shipped = (ROOT / "src" / "vsekit" / "recipes" / f"{name}.json").is_file()
    return f"`python bench/bench_ranking.py {name if shipped else f'bench/recipes/{name}.json'}`"


def _with_rsum(row: list[str]) -> list[str]:
    """A paper's row with its rsum (the sum of its six recalls) appended."""
    return [*row, f"{sum(float(row[i]) for i in (1, 2, 3, 5, 6, 7)):.1f}"]


def _paper_ranking(key: str) -> str:
    d = load("ranking.json")
    rows = {r["recipe"]: r for r in d["rows"]}
    body = [[*_with_rsum(r), "-"] for r in PAPER_RANKING[key]]
    for recipe, label in OURS_RANKING[key]:
        r = rows[recipe]
        body.append(
            [
                f"{label}, {_features(r)}",
                *recall_cells(r["dev"]),
                f1(r["dev"]["rsum"]),
                _bench_command(recipe),
            ]
        )
    note = "ours: Flickr8K dev (the test split is held back); the paper's rows: Flickr8K test, as printed"
    return (
        table(["model", *RECALL_HEADER, "our command"], body)
        + "\n\n"
        + source("ranking.json", d, "rows", note)
    )


def t_paper_kiros() -> str:
    return _paper_ranking("kiros")


def t_paper_vilalta() -> str:
    return _paper_ranking("vilalta")


PAPER_CAPTIONS = [  # Flickr8K test, as printed: BLEU-1..4, METEOR, CIDEr
    _paper("Karpathy & Fei-Fei 2015 m-RNN, VGG (paper, test)", "57.9 38.3 24.5 16.0 16.7 31.8"),
    _paper("Google NIC (as cited by Karpathy 2015, test)", "63 41 27 - - -"),
]
OURS_CAPTIONS = [
    ("nearest neighbour", "ours: nearest neighbour (the paper's baseline)", "caption --data DIR --method nn"),
    ("cap-rnn beam 3", "ours: vanilla RNN as in the paper, beam 3", "train-captioner --recipe mrnn-rnn"),
    ("cap-lstm-ship beam 3", "ours: LSTM, beam 3", "train-captioner --recipe mrnn-lstm"),
    ("cap-effnet-ship beam 7 + rerank", "ours: shipped `captioner`, beam 7 + rerank", "caption --data DIR"),
]


def t_paper_karpathy_captions() -> str:
    d = load("captioning.json")
    rows = {r["name"]: r for r in d["rows"]}
    body = [[*r, "-"] for r in PAPER_CAPTIONS]
    for name, label, command in OURS_CAPTIONS:
        r = rows[name]
        metrics = (f1(r[m]) for m in ("bleu1", "bleu2", "bleu3", "bleu4", "meteor", "cider"))
        body.append([f"{label}, {_features(r)}", *metrics, f"`vsekit {command}`"])
    note = (
        "ours: Flickr8K dev (`--split dev`), pycocoevalcap x100; the paper's rows: Flickr8K test, as printed"
    )
    header = ["model", "B-1", "B-2", "B-3", "B-4", "METEOR", "CIDEr", "our command"]
    return table(header, body) + "\n\n" + source("captioning.json", d, "rows", note)


# the T-LSTM seed's "VS" on 1,000 test pairs of MSCOCO + Flickr30K, as printed: i2t and t2i R@1, 5, 10, 20, 50
PAPER_TREE = _paper(
    "T-LSTM seed, VS (paper: MSCOCO + Flickr30K test pairs)", "3.3 14.0 24.2 37.4 61.0 2.4 9.5 16.2 28.5 49.7"
)


def t_paper_tree_lstm() -> str:
    d = load("tree_lstm.json")
    rows = {r["recipe"]: r for r in d["rows"]}
    body = [[*PAPER_TREE, "-", "-"]]
    for recipe, label in (
        ("tree-lstm-vs", "ours: VS as in the paper (`tree-lstm-vs`)"),
        ("tree-lstm-linear", "ours: `tree-lstm-best`"),
        ("tree-lstm-linear-p1", "ours: shipped `tree-lstm` (p = 1)"),
    ):
        r = rows[recipe]
        cells = [f1(r["dev"][side][k]) for side in ("i2t", "t2i") for k in ("r1", "r5", "r10", "r20", "r50")]
        body.append([label, *cells, f1(r["dev"]["rsum"]), _bench_tree(recipe)])
    header = [
        "model",
        "i2t R@1",
        "R@5",
        "R@10",
        "R@20",
        "R@50",
        "t2i R@1",
        "R@5",
        "R@10",
        "R@20",
        "R@50",
        "rsum",
        "our recipe",
    ]
    note = "ours: Flickr8K dev, 10-epoch cap, `python bench/bench_tree_lstm.py`; the paper: its own test set"
    return table(header, body) + "\n\n" + source("tree_lstm.json", d, "rows", note)


def _bench_tree(recipe: str) -> str:
    shipped = (ROOT / "src" / "vsekit" / "recipes" / f"{recipe}.json").is_file()
    return f"`{recipe}`" if shipped else f"`bench/recipes/{recipe}.json`"


TABLES: dict[str, Callable[[], str]] = {
    "models": t_models,
    "model-cards": t_model_cards,
    "model-card-costs": t_model_card_costs,
    "model-card-details": t_model_card_details,
    "ranking-grid": t_ranking_grid,
    "ranking-pretrained": t_ranking_pretrained,
    "tree-lstm": t_tree_lstm,
    "captioning": t_captioning,
    "alignment": t_alignment,
    "fusion-held-out": t_fusion_held_out,
    "region-captions": t_region_captions,
    "extract": t_extract,
    "extract-memory": t_extract_memory,
    "search-engines": t_search_engines,
    "search-1m": t_search_1m,
    "search-dev": t_search_dev,
    "arithmetic": t_arithmetic,
    "arithmetic-grid": t_arithmetic_grid,
    "scaling-search": t_scaling_search,
    "ivfpq-10m": t_ivfpq_10m,
    "corpus-memory": t_corpus_memory,
    "projections": t_projections,
    "projection-coco": t_projection_coco,
    "word-magnitudes": t_word_magnitudes,
    "ddp": t_ddp,
    "ray": t_ray,
    "serve-load": t_serve_load,
    "kill-campaign": t_kill_campaign,
    "confidence": t_confidence,
    "rerank": t_rerank,
    "concept-route": t_concept_route,
    "concept-regions": t_concept_regions,
    "concept-captions": t_concept_captions,
    "duplicate-kinds": t_duplicate_kinds,
    "gpu-check": t_gpu_check,
    "cold-start": t_cold_start,
    "cold-search-1m": t_cold_search_1m,
    "text-finetune": t_text_finetune,
    "concepts-cost": t_concepts_cost,
    "serve-latency": t_serve_latency,
    "reselect-vse": t_reselect_vse,
    "scst-dev": t_scst_dev,
    "scst-protocol": t_scst_protocol,
    "vse-views-candidate": t_vse_views_candidate,
    "vse-views-ft1-candidate": t_vse_views_ft1_candidate,
    "vse-views-ft1-head-candidate": t_vse_views_ft1_head_candidate,
    "joint-space": t_joint_space,
    "gpo": t_gpo,
    "aligner-backbone": t_aligner_backbone,
    "aligner-text-finetune": t_aligner_text_finetune,
    "cnn-head-probe": t_cnn_head_probe,
    "attention-captioner": t_attention_captioner,
    "int8": t_int8,
    "fault-campaign": t_fault_campaign,
    "store-1m": t_store_1m,
    "live-update": t_live_update,
    "paper-kiros": t_paper_kiros,
    "paper-vilalta": t_paper_vilalta,
    "paper-karpathy-captions": t_paper_karpathy_captions,
    "paper-tree-lstm": t_paper_tree_lstm,
}


def regenerate(text: str, rendered: dict[str, str]) -> str:
    """``text`` with every marked block replaced by its table (an unknown name is an error)."""

    def fill(m: re.Match[str]) -> str:
        name = m.group(2)
        if name not in TABLES:
            raise KeyError(f"unknown table {name!r}; known: {', '.join(TABLES)}")
        if name not in rendered:
            rendered[name] = TABLES[name]()
        return f"{m.group(1)}{rendered[name]}\n{m.group(4)}"

    return MARKER.sub(fill, text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if a page's tables differ from the JSON")
    args = parser.parse_args()
    rendered: dict[str, str] = {}
    stale = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        new = regenerate(text, rendered)
        if new != text:
            stale.append(page)
            if not args.check:
                page.write_text(new, encoding="utf-8")
    if args.check and stale:
        print(
            "tables differ from bench/results: "
            + ", ".join(str(p.relative_to(ROOT)) for p in stale)
            + " (run python docs/gen_tables.py)",
            file=sys.stderr,
        )
        return 1
    unused = set(TABLES) - set(rendered)
    if unused:
        print(f"tables no page asks for: {', '.join(sorted(unused))}", file=sys.stderr)
        return 1
    if not args.check:
        print(f"{len(rendered)} tables, {len(stale)} page(s) rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
