"""Pack chosen members of an ensemble run into one model file (the selection protocol's last step).

    python ship/pack_members.py --run /work/runs/vse-effnet-val1000 --seeds 1 3 --out vse-val1000.safetensors

An ensemble recipe (``ensemble_seeds``) trains every seed into ``RUN/seed-<s>/`` and packs all of them.
Under the selection protocol the members are chosen afterwards on the validation slice
(``ship/reselect_vse.py`` ranks them); this writes the ensemble of the chosen ones, in float16 as the
shipped ``vse`` is, with each member's slice scores in the header. Nothing is evaluated here: dev is
read once, afterwards, by ``vsekit eval --model OUT --split dev``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from _common import read_run_log
from vsekit.embedding.model import EnsembleEmbedding, load_model, save_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, required=True, help="the ensemble run directory")
    parser.add_argument("--seeds", type=int, nargs="+", required=True, help="members to keep")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--selected-on",
        help="what chose the members' recipe (default: the run's dev_split; a fixed-epoch retrain whose "
        "recipe was chosen on the slice: val1000)",
    )
    args = parser.parse_args()
    config = json.loads((args.run / "config.json").read_text(encoding="utf-8"))
    members, meta = [], []
    for seed in args.seeds:
        folder = args.run / f"seed-{seed}"
        model, fne, _ = load_model(folder / "model.safetensors", device="cpu")
        log = read_run_log(folder)
        best = max((e for e in log if e.get("dev")), key=lambda e: e["dev"]["rsum"])
        members.append(model)
        meta.append({"seed": seed, "epoch": best["epoch"], config.get("dev_split", "dev"): best["dev"]})
    for model in members[1:]:
        model.text_encoder.share_frozen(members[0].text_encoder)
    extra = {
        "recipe": config["name"],
        "train": config,
        "members": meta,
        "selected_on": args.selected_on or config.get("dev_split"),
    }
    save_model(EnsembleEmbedding(members), args.out, fne, extra_meta=extra, half=True)
    print(f"wrote {args.out} ({args.out.stat().st_size / 2**20:.1f} MiB): seeds {args.seeds}")


if __name__ == "__main__":
    main()
