"""Make the shipped aligner: pack trained MiniLM-token aligners into one file and rank Flickr8K dev with it.

    python ship/ship_aligner.py RUN_A/aligner.safetensors RUN_B/aligner.safetensors RUN_A/checkpoint.pt \
        [--out src/vsekit/pretrained/aligner.safetensors]

The members (each trained by ``vsekit train-aligner`` on Flickr8K train, its epoch selected on dev; a
run's ``checkpoint.pt`` stands for its last epoch, read with the run's ``aligner.safetensors``) are packed
by :func:`vsekit.alignment.pack.pack_aligners` (one aligner whose word-region dot products are the sums of
the members') and saved in float16 with the members' recipes, epochs and dev numbers in the header. The
packed file then ranks ../shared/data/flickr8k dev by S_kl; those numbers go into the header too
(``extra.dev``) and are printed.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from _common import SHARED, read_run_log
from vsekit.alignment import Aligner, load_aligner, save_aligner
from vsekit.alignment.evaluate import evaluate_aligner
from vsekit.alignment.pack import pack_aligners
from vsekit.data import load_corpus
from vsekit.resources import pretrained_path
from vsekit.training import read_checkpoint


def _member(path: Path) -> tuple[torch.nn.Module, dict]:
    """An aligner file, or a run's checkpoint (its last epoch) read with the run's aligner file."""
    if path.name != "checkpoint.pt":
        return load_aligner(path)
    model, extra = load_aligner(path.parent / "aligner.safetensors")
    ckpt = read_checkpoint(path, "aligner")
    model.load_state_dict(ckpt["model"])
    log = read_run_log(path.parent)
    last = next(e for e in log if e["epoch"] == ckpt["epoch"])
    return model.eval(), {**extra, "epoch": ckpt["epoch"], "dev": last.get("dev")}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("members", nargs="+", help="aligner files to pack (at least two)")
    parser.add_argument("--out", default=str(pretrained_path("aligner")))
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    models, members = [], []
    for path in args.members:
        model, extra = _member(Path(path))
        models.append(model)
        members.append({k: extra.get(k) for k in ("recipe", "epoch", "dev", "train")})
        print(
            f"{path}: recipe {extra.get('recipe')}, epoch {extra.get('epoch')}, dev rsum "
            f"{extra.get('dev', {}).get('rsum', float('nan')):.1f}"
        )
    packed = pack_aligners(models)
    extra = {"recipe": "packed", "epoch": None, "packed_from": members}
    save_aligner(packed, args.out, extra=extra, half=True)
    model, _ = load_aligner(args.out)  # what ships: the float16 weights
    metrics = evaluate_aligner(Aligner(model), load_corpus(SHARED), "dev", progress=False)
    extra["dev"] = {k: metrics[k] for k in ("i2t", "t2i", "rsum")}
    save_aligner(packed, args.out, extra=extra, half=True)
    i2t, t2i = metrics["i2t"], metrics["t2i"]
    print(
        f"{args.out}: {Path(args.out).stat().st_size / 2**20:.1f} MiB; dev i2t "
        f"{i2t['r1']:.1f}/{i2t['r5']:.1f}/{i2t['r10']:.1f} t2i {t2i['r1']:.1f}/{t2i['r5']:.1f}/"
        f"{t2i['r10']:.1f} rsum {metrics['rsum']:.1f}"
    )


if __name__ == "__main__":
    main()
