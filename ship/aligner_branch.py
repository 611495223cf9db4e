"""Start an aligner run from epoch K of another run whose recipe differs only in its learning-rate step.

    python ship/aligner_branch.py SRC_RUN K RECIPE DEST_RUN
    vsekit train-aligner --recipe RECIPE --out DEST_RUN --resume ...

``minilm-grid-val1000`` (Adam 5e-4, times 0.1 after 6 epochs) and ``minilm-grid-constant-lr-val1000``
(5e-4 throughout) are the same run for epochs 1..6: same seed, data order, model and learning rate. So the
constant-lr run need not train those six epochs again: its directory is made from SRC_RUN's copy of the
checkpoint after epoch K (``epochs/ep<K>.pt``, kept by ``--keep-epochs``), with the recipe swapped in, no
learning-rate scheduler and the learning rate back at the recipe's, the first K log lines, and the best
model file as it was after epoch K (``epochs/best-after-ep<N>.safetensors``, N <= K). ``--resume`` then
continues exactly as the uninterrupted run would (the engine's resume is bit-exact, tested; on the
tests' four-scene corpus, branch at 2 + resume to 4 gave the weights of a fresh 4-epoch constant-lr run
bit for bit). Refused when the recipes differ in anything but the resumable fields (name, description,
epochs, patience, threads) and the step (``lr_decay_*``), or when a step falls before epoch K.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from vsekit.alignment import load_aligner
from vsekit.alignment.trainer import AlignerConfig, load_aligner_recipe
from vsekit.training import read_checkpoint
from vsekit.training.checkpoint import save_checkpoint

ALLOWED = AlignerConfig.RESUMABLE | {"lr_decay_epochs", "lr_decay_gamma"}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("src", type=Path)
    parser.add_argument("epoch", type=int)
    parser.add_argument("recipe")
    parser.add_argument("dest", type=Path)
    parser.add_argument("--num-threads", type=int, default=1)
    args = parser.parse_args()
    ckpt = read_checkpoint(args.src / "epochs" / f"ep{args.epoch}.pt", "aligner")
    if ckpt["epoch"] != args.epoch:
        raise SystemExit(f"{args.src}/epochs/ep{args.epoch}.pt holds epoch {ckpt['epoch']}")
    old = AlignerConfig(**ckpt["config"])
    new = load_aligner_recipe(args.recipe)
    new.num_threads = args.num_threads
    differ = {k for k, v in new.to_dict().items() if old.to_dict().get(k) != v}
    if differ - ALLOWED:
        raise SystemExit(f"the recipes differ in {sorted(differ - ALLOWED)}: not the same run up to epoch K")
    for cfg in (old, new):
        if cfg.lr_decay_epochs is not None and cfg.lr_decay_epochs < args.epoch:
            raise SystemExit(f"{cfg.name}: the learning rate steps after epoch {cfg.lr_decay_epochs} < K")
    ckpt["config"] = new.to_dict()
    ckpt["scheduler"] = None  # a constant rate; the source's StepLR has already stepped the rate down
    for group in ckpt["optimizer"]["param_groups"]:
        group["lr"] = new.lr
        group.pop("initial_lr", None)
    args.dest.mkdir(parents=True)
    save_checkpoint(ckpt, args.dest / "checkpoint.pt", "aligner")
    lines = (args.src / "log.jsonl").read_text().splitlines()[: args.epoch]
    (args.dest / "log.jsonl").write_text("".join(line + "\n" for line in lines))
    bests = sorted(
        (int(p.stem.removeprefix("best-after-ep")), p)
        for p in (args.src / "epochs").glob("best-after-ep*.safetensors")
    )
    best = [p for n, p in bests if n <= args.epoch][-1]
    if load_aligner(best)[1].get("epoch") != ckpt["best_epoch"]:
        raise SystemExit(f"{best}: not the best epoch of the checkpoint ({ckpt['best_epoch']})")
    shutil.copy(best, args.dest / "aligner.safetensors")
    (args.dest / "BRANCHED").write_text(json.dumps({"from": str(args.src), "epoch": args.epoch}) + "\n")
    print(f"{args.dest}: from {args.src} epoch {args.epoch} (best file {best.name}); now --resume")


if __name__ == "__main__":
    main()
