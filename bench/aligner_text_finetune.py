"""MiniLM's top layer tuned for the aligner's word states (issue 35 item 5), against the frozen encoder, on
val1000.

    python bench/aligner_text_finetune.py   # the runs' logs -> bench/results/aligner_text_finetune.json

The runs (side by side, one torch thread each, nice 5; ``/usr/bin/time -v`` gives the peak RSS)::

    vsekit train-aligner --data ../shared/data/flickr8k --recipe bench/recipes/NAME.json \\
        --out /work/runs/NAME --keep-epochs --num-threads 1 --no-progress

``aligner-minilm-ft1-val1000`` and ``aligner-minilm-ft1-slow-val1000`` are ``minilm-grid-val1000`` (the
shipped aligner's step recipe under the selection protocol: train-minus-val1000, ranked on val1000 after
every epoch) with one change, ``finetune_last: 1`` (the top transformer layer trained with the word head;
the bottom five run once per caption and their piece states are cached), at the recipe's rate and at a
fifth of it. The frozen baseline is that recipe's run made on this machine on 2026-11-27 for the aligner's
val1000 proxy (``/work/runs/align-minilm-grid-val1000``, the same seed). Dev is not read.

Then the epoch chosen there, trained on all of train (``bench/recipes/aligner-minilm-ft1-retrain.json``,
``eval_every`` = its epochs, so the trainer ranks dev once, after the last epoch)::

    python bench/aligner_text_finetune.py --retrained /work/runs/aligner-minilm-ft1-retrain \
        --out-model /work/runs/aligner-ft1-candidate.safetensors

saves it in float16 (as an aligner ships), ranks dev with that file and adds both to the JSON.

``--packings`` ranks candidate packings of the kept epochs on val1000 (the two tuned runs' best epochs, each
with the same run's other good epochs, the frozen run's best): a packing's word-region dots are its members'
sums (:mod:`vsekit.alignment.pack`), so each member's region and word vectors are computed once, in the
float16 weights a packed file holds, and a packing's S_kl is taken over their concatenation; the chosen
packing is then made with ``pack_aligners``, saved in float16 and ranked from that file, as a check.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from _common import REPO, RESULTS, dev_recalls, read_run_log, run_meta, time_v, write_result
from aligner_backbone import row

RUNS = Path("/work/runs")
SHARED = REPO.parent / "shared" / "data" / "flickr8k"
ROWS = [
    {
        "name": "frozen MiniLM (the shipped aligner's recipe)",
        "recipe": "minilm-grid-val1000",
        "run": RUNS / "align-minilm-grid-val1000",
    },
    {
        "name": "tuned top layer (at the recipe's rate)",
        "recipe": "bench/recipes/aligner-minilm-ft1-val1000.json",
        "run": RUNS / "aligner-minilm-ft1-val1000",
    },
    {
        "name": "tuned top layer, rate / 5 (finetune_lr_scale 0.2)",
        "recipe": "bench/recipes/aligner-minilm-ft1-slow-val1000.json",
        "run": RUNS / "aligner-minilm-ft1-slow-val1000",
    },
]


def retrained(run: Path, out_model: Path) -> dict:
    """The run's aligner (the last epoch's: ranked once on dev by the trainer) in float16, dev ranked with
    that file; training time and peak RSS from the run's log and ``/usr/bin/time -v`` output."""
    from vsekit.alignment import Aligner, load_aligner, save_aligner
    from vsekit.alignment.evaluate import evaluate_aligner
    from vsekit.data import load_corpus

    model, extra = load_aligner(run / "aligner.safetensors")
    save_aligner(
        model, out_model, extra={**extra, "selection": "flickr8k-val1000 (epoch chosen there)"}, half=True
    )
    dev = evaluate_aligner(Aligner(load_aligner(out_model)[0]), load_corpus(SHARED), "dev", progress=False)
    log = read_run_log(run)
    return {
        "recipe": "bench/recipes/aligner-minilm-ft1-retrain.json",
        "run": str(run),
        "model": str(out_model),
        "epochs": len(log),
        "dev_float32_trainer": dev_recalls(log[-1]["dev"]),
        "dev_float16": dev_recalls(dev),
        "training_s": round(sum(e["time_s"] for e in log), 1),
        "meta": run_meta(
            threads="2 (--num-threads 2)",
            note="the retrain alone at nice 0; a vse training's view extraction at nice 10 and a "
            "packing probe at nice 15 beside it",
        ),
        **time_v(run.with_suffix(".time")),
    }


def _retrained_member(run: Path) -> dict:
    """A retrained member's recipe, epochs, training seconds, wall time and peak RSS."""
    log = read_run_log(run)
    name = json.loads((run / "config.json").read_text())["name"]
    seconds = round(sum(e["time_s"] for e in log), 1)
    return {"recipe": f"bench/recipes/{name}.json", "name": name, "run": str(run), "epochs": len(log),
            "training_s": seconds, **time_v(run.with_suffix(".time"))}  # fmt: skip


def retrained_pack(runs: list[Path], out_model: Path) -> dict:
    """The retrained members (each run's last epoch: the epochs chosen on val1000) packed in float16, dev
    ranked once with that file."""
    from vsekit.alignment import Aligner, load_aligner, save_aligner
    from vsekit.alignment.evaluate import evaluate_aligner
    from vsekit.alignment.pack import as_half_file
    from vsekit.data import load_corpus

    rows = [_retrained_member(run) for run in runs]
    extra = {
        "recipe": "packed",
        "selection": "flickr8k-val1000 (each member's run and epoch chosen there; trained on all of train)",
        "packed_from": [{"recipe": r["name"], "epoch": r["epochs"]} for r in rows],
    }
    packed = as_half_file([load_aligner(run / "aligner.safetensors")[0] for run in runs])
    dev = evaluate_aligner(Aligner(packed), load_corpus(SHARED), "dev", progress=False)
    extra["dev"] = {k: dev[k] for k in ("i2t", "t2i", "rsum")}  # in the header, as the shipped aligners'
    save_aligner(packed, out_model, extra=extra, half=True)
    note = "the second member's retrain beside a vse training"
    return {
        "members": rows,
        "model": str(out_model),
        "file_bytes": out_model.stat().st_size,
        "dev_float16": dev_recalls(dev),
        "meta": run_meta(threads="1-2 (--num-threads)", note=note),
    }


PACKINGS = [
    ["ft1 e8"],
    ["ft1 e8", "ft1 e11"],
    ["ft1 e8", "ft1 e10"],
    ["ft1 e8", "ft1 e7"],
    ["ft1 e8", "slow e11"],
    ["ft1 e8", "ft1 e11", "slow e11"],
    ["ft1 e8", "ft1 e10", "slow e11"],
    ["ft1 e8", "ft1 e7", "slow e11"],
    ["ft1 e8", "frozen e10"],
]
MEMBERS = {
    "ft1 e8": ("aligner-minilm-ft1-val1000", 8),
    "ft1 e11": ("aligner-minilm-ft1-val1000", 11),
    "ft1 e10": ("aligner-minilm-ft1-val1000", 10),
    "ft1 e7": ("aligner-minilm-ft1-val1000", 7),
    "slow e11": ("aligner-minilm-ft1-slow-val1000", 11),
    "frozen e10": ("align-minilm-grid-val1000", 10),
}


def packings(out_model: Path) -> dict:
    """Every candidate packing of :data:`PACKINGS` ranked on val1000; the best made and ranked as a file."""
    import torch

    from vsekit.alignment import Aligner, load_aligner, save_aligner
    from vsekit.alignment.evaluate import evaluate_aligner
    from vsekit.alignment.pack import as_half_file, kept_epoch
    from vsekit.alignment.score import alignment_scores
    from vsekit.data import load_corpus
    from vsekit.data.splits import apply_validation_slice, load_validation_slice
    from vsekit.embedding.evaluate import captioned_images
    from vsekit.metrics.ranking import positives_from_ids, ranking_metrics

    corpus = apply_validation_slice(load_corpus(SHARED), load_validation_slice("flickr8k-val1000"))
    part, ids = captioned_images(corpus, "val1000")
    captions = [c for c in part.captions if c.image_id in set(ids)]
    positives = positives_from_ids(ids, [c.image_id for c in captions])
    vectors, feats = {}, None
    for name, (run, epoch) in MEMBERS.items():
        aligner = Aligner(as_half_file([kept_epoch(RUNS / run, epoch)]))  # the weights a float16 file holds
        feats = aligner.regions(corpus, image_ids=ids).features if feats is None else feats
        vectors[name] = (aligner.region_vectors(feats), aligner.word_vectors([c.text for c in captions]))
    ranked = {}
    for names in PACKINGS:
        regions = torch.cat([vectors[n][0] for n in names], dim=-1)
        words = vectors[names[0]][1]
        stacked = torch.cat([vectors[n][1].vectors for n in names], dim=-1)
        with torch.no_grad():
            scores = alignment_scores(regions, stacked, words.sentence, len(words.lengths), "max")
        ranked[" + ".join(names)] = dev_recalls(ranking_metrics(scores.numpy(), positives))
    best = max(ranked, key=lambda k: ranked[k]["rsum"])
    members = [kept_epoch(RUNS / MEMBERS[n][0], MEMBERS[n][1]) for n in best.split(" + ")]
    extra = {"recipe": "packed", "selection": "flickr8k-val1000", "packed_from": best.split(" + ")}
    save_aligner(as_half_file(members), out_model, extra=extra, half=True)
    check = dev_recalls(evaluate_aligner(Aligner(load_aligner(out_model)[0]), corpus, "val1000"))
    return {"members": {k: {"run": v[0], "epoch": v[1]} for k, v in MEMBERS.items()}, "val1000": ranked,
            "chosen": best, "chosen_as_packed_file": check}  # fmt: skip


def _add_to_result(key: str, value: dict) -> None:
    """``value`` under ``key`` in the results file, the rest of it kept."""
    path = RESULTS / "aligner_text_finetune.json"
    result = json.loads(path.read_text()) | {key: value}
    write_result(path.name, result)
    print(json.dumps(value, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--retrained", type=Path, help="the retrain's run directory (reads dev once)")
    parser.add_argument("--out-model", type=Path, help="where the float16 candidate goes")
    parser.add_argument("--packings", action="store_true", help="rank packings of kept epochs on val1000")
    parser.add_argument("--retrained-pack", type=Path, nargs="+", help="retrained members' runs to pack")
    args = parser.parse_args()
    if args.packings:
        return _add_to_result("packings", packings(args.out_model) | {"meta": run_meta(threads=1)})
    if args.retrained_pack:
        return _add_to_result("retrained_pack", retrained_pack(args.retrained_pack, args.out_model))
    if args.retrained:
        return _add_to_result("retrained", retrained(args.retrained, args.out_model))
    rows = [row(spec) for spec in ROWS]
    note = "the two tuned runs side by side, nice 5 (load about 2); the frozen run earlier the same day "
    note += "beside the aligner proxy's constant-rate branch"
    path = RESULTS / "aligner_text_finetune.json"
    kept = json.loads(path.read_text()) if path.is_file() else {}  # the packings and retrains stay
    kept["benchmark"] = "The aligner with MiniLM's top layer tuned against the frozen encoder, on val1000"
    kept["meta"] = run_meta(threads=1, note=note)
    kept["protocol"] = "train-minus-val1000 / val1000 (flickr8k-val1000 slice); dev not read; 12 epochs; "
    kept["protocol"] += "MobileNetV2 grid regions; seed 0"
    kept["rows"] = rows
    write_result(path.name, kept)
    for r in rows:
        print(r["name"], r["best"])


if __name__ == "__main__":
    main()
