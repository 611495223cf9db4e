"""Make the shipped joint model (`vse`) and captioner (`captioner`) from finished training runs.

    python ship/ship_models.py vse bench/runs/vse-best-effnet/model.safetensors
    python ship/ship_models.py captioner runs/cap-effnet/captioner.safetensors [--beams 3,5,7]

``vse`` (or ``bow``): the run's (ensemble) joint model, rewritten in float16 with its header (recipe, dev
numbers) kept, then ranked on ../shared/data/flickr8k dev from the float16 weights; those numbers replace
``extra.dev``.

``captioner``: the run's best epoch in float16; then for each beam size the reranking of that many beam
candidates with the shipped joint model is tuned on the validation slice val1000 (selection protocol,
docs/joint-embedding.md; ``--tune-split dev`` for the old behaviour) (weight x length penalty grid of
:func:`vsekit.captioning.rerank.tune_rerank`, on the float16 weights that ship), and the beam with the best
CIDEr-D on that split (ties: BLEU-4) is kept, with its weights and the joint model's sha256 pin. Ship `vse`
first: the captioner is tuned against, and pinned to, whatever `vse` is in the package then. Every beam's
grid goes to bench/results/captioner_rerank.json.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import torch

from _common import RESULTS, SHARED, run_meta, write_result
from vsekit.captioning.captioner import load_captioner, save_captioner
from vsekit.captioning.trainer import default_score_fn, tune_captioner_rerank
from vsekit.data import load_corpus
from vsekit.data.splits import apply_validation_slice, load_validation_slice
from vsekit.embedding.evaluate import model_features
from vsekit.embedding.model import load_model, save_model
from vsekit.metrics.ranking import evaluate_protocol
from vsekit.resources import pretrained_path

RERANK_RESULTS = RESULTS / "captioner_rerank.json"
# the library's default grid, widened: the previous captioner's best length penalty was its grid's largest
GRID = {"weights": (0, 1, 2, 3, 5, 10, 20), "length_penalties": (0.0, 0.5, 1.0, 1.5, 2.0)}


def dev_ranking(path: Path) -> dict:
    """i2t / t2i / rsum of the model file on Flickr8K dev (flickr protocol)."""
    model, fne, _ = load_model(path)
    dev = load_corpus(SHARED).split("dev")
    ids = dev.image_ids()
    with torch.inference_mode():
        feats = model_features(model, fne, dev, ids, progress=False)
        img = model.embed_images(torch.as_tensor(feats, dtype=torch.float32)).numpy()
        cap = model.embed_texts([c.text for c in dev.captions]).numpy()
    metrics = evaluate_protocol(img, cap, ids, dev.caption_image_ids(), "flickr")
    return {k: metrics[k] for k in ("i2t", "t2i", "rsum")}


def ship_joint(run_model: Path, out: Path) -> None:
    model, fne, meta = load_model(run_model)
    extra = {k: v for k, v in meta.items() if k not in ("config", "dtype")}
    extra["dev_float32"] = extra.get("dev")
    save_model(model, out, fne, extra_meta=extra, half=True)
    extra["dev"] = dev_ranking(out)  # what ships: the float16 weights
    save_model(model, out, fne, extra_meta=extra, half=True)
    d = extra["dev"]
    print(
        f"{out}: {out.stat().st_size / 2**20:.1f} MiB; dev i2t R@1 {d['i2t']['r1']:.1f} t2i R@1 "
        f"{d['t2i']['r1']:.1f} rsum {d['rsum']:.1f} (float32 run: {extra['dev_float32']})"
    )


def ship_captioner(
    run_model: Path,
    out: Path,
    beams: list[int],
    tune_split: str = "val1000",
    joint: Path | None = None,
    results_path: Path = RERANK_RESULTS,
) -> None:
    corpus = load_corpus(SHARED)
    if tune_split != "dev":  # the selection protocol: choices on the slice, dev read once for the report
        slice_name = {"val1000": "flickr8k-val1000"}.get(tune_split, tune_split)
        corpus = apply_validation_slice(corpus, load_validation_slice(slice_name))
        tune_split = load_validation_slice(slice_name).name
    joint_name = str(joint) if joint else "vse (shipped)"
    joint = joint or pretrained_path("vse")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        half = Path(tmp) / "half.safetensors"
        save_captioner(load_captioner(run_model), half, half=True)
        for beam in beams:
            tuned = Path(tmp) / f"beam{beam}.safetensors"
            shutil.copyfile(half, tuned)  # the float16 weights, re-read as float32 values
            info = tune_captioner_rerank(
                tuned,
                corpus,
                tune_split,
                beam,
                default_score_fn,
                say=print,
                joint_model_path=joint,
                search_grid=GRID,
            )
            results.append({"beam": beam, "path": tuned, **info})
        best = max(results, key=lambda r: (round(r["best"]["cider"], 6), r["best"]["bleu4"]))
        save_captioner(load_captioner(best["path"]), out, half=True)  # float16 values: lossless
    print(f"{out}: {out.stat().st_size / 2**20:.1f} MiB; kept beam {best['beam']}: {best['settings']}")
    record = {
        "benchmark": f"captioner rerank tuning (Flickr8K {tune_split})",
        "tune_split": tune_split,
        **run_meta(threads=torch.get_num_threads()),
        "captioner": str(run_model),
        "joint_model": joint_name,
        "chosen_beam": best["beam"],
        "beams": [{k: v for k, v in r.items() if k != "path"} for r in results],
    }
    write_result(results_path, record, indent=2)


def ship_tuned_rerank(run_model: Path, out: Path, tuned: Path) -> None:
    """The run's captioner in float16 with the decoding chosen elsewhere: ``tuned`` is a captioner file whose
    rerank (beam, weight, length penalty) was tuned on the validation slice (``captioner --joint``, with a
    joint model that never saw the slice); its settings are kept and pinned to the shipped ``vse``, which
    reranks at use. Its slice scores travel as ``meta["val1000_rerank"]``."""
    from vsekit.captioning.rerank import file_fingerprint

    chosen = load_captioner(tuned)
    settings = dict(chosen.meta["rerank"])
    settings["joint_model_sha256"] = file_fingerprint(pretrained_path("vse"))
    captioner = load_captioner(run_model)
    captioner.meta["rerank"] = settings
    captioner.meta["val1000_rerank"] = chosen.meta["dev_rerank"]["best"]
    captioner.meta.pop("dev_rerank", None)
    save_captioner(captioner, out, half=True)
    print(f"{out}: {out.stat().st_size / 2**20:.1f} MiB; rerank {settings} (chosen on the slice: {tuned})")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("what", choices=("vse", "bow", "captioner"))
    parser.add_argument("run_model", type=Path, help="the run's model file")
    parser.add_argument("--out", type=Path, help="default: the shipped file of that name")
    parser.add_argument("--beams", default="3,5,7", help="captioner: beam sizes to tune the rerank for")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--tune-split",
        default="val1000",
        help="captioner: where the rerank is tuned (val1000, a slice, or dev)",
    )
    parser.add_argument(
        "--joint",
        type=Path,
        help="captioner: the joint model that reranks while tuning (default: the shipped vse); on the "
        "validation slice, one trained without it (ship/reselect_vse.py), so that no score is inflated",
    )
    parser.add_argument(
        "--results", type=Path, default=RERANK_RESULTS, help="captioner: where the tuning grid is written"
    )
    parser.add_argument(
        "--rerank-from",
        type=Path,
        help="captioner: take the rerank settings of this already tuned file instead of tuning",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    out = args.out or pretrained_path(args.what)
    if args.what in ("vse", "bow"):
        ship_joint(args.run_model, out)
    elif args.rerank_from:
        ship_tuned_rerank(args.run_model, out, args.rerank_from)
    else:
        beams = [int(b) for b in args.beams.split(",")]
        ship_captioner(args.run_model, out, beams, args.tune_split, args.joint, args.results)


if __name__ == "__main__":
    main()
