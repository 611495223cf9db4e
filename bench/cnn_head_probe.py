"""Fine-tuning the top of the image CNN (issue 35 item 3, the image side): a probe on val1000.

Every shipped `vse` learns projections over a frozen EfficientNet-Lite0. This probe asks whether training
the CNN's last layer with the joint space pays, before any library code is written for it. The layer is
Lite0's head: a 1 x 1 convolution from the last block's 7 x 7 x 320 map to 1280 channels, BatchNorm and
ReLU6, then the average pool the `one-layer` features are. Its input is computed once per photo and
cached (7 x 7 x 320 float16, 31 KB a photo), so an epoch adds only the head's 20 million multiply-adds
per photo.

    python bench/cnn_head_probe.py --arm frozen --out /work/runs/head-frozen
    python bench/cnn_head_probe.py --arm tuned --out /work/runs/head-tuned
    python bench/cnn_head_probe.py --arm tuned --views six-crop [--seed 3] --out /work/runs/head-views-tuned
    python bench/cnn_head_probe.py --extract br bl --views six-crop   # fill views' caches in another process
    python bench/cnn_head_probe.py --arm tuned --views six-crop [--seed 3] \
        --recipe bench/recipes/joint-views-ft1-seed1.json --out /work/runs/head-views-ft1-tuned[-seed3]
    python bench/cnn_head_probe.py --report      # write bench/results/cnn_head_probe.json from the logs
    python bench/cnn_head_probe.py --export RUN1 RUN3 --recipe R --pack PROXY   # library files, a proxy
    python bench/cnn_head_probe.py --evaluate FILE   # a library model file ranked on val1000

Each arm is member seed 1 of the re-selected `vse` recipe without training views
(`bench/recipes/joint-onevector-seed1.json`: frozen MiniLM + residual head, hardest negative after two sum
epochs, dropout 0.4 on the pooled features, 15 epochs, StepLR at 9), trained on train-minus-val1000 and
scored on val1000 after every epoch; dev is not read. The image side is the head (BatchNorm folded into
the convolution, as at inference), ReLU6, the mean over the 49 cells, the recipe's dropout, then W_I:

* ``frozen``: the head keeps its ImageNet weights, so the pooled vector is the `one-layer` feature (up to
  float16 rounding of the cached map): the control, which should repeat the one-vector run of
  bench/results/gpo.json;
* ``tuned``: the head trains with the rest at the recipe's learning rate times ``--head-lr-scale``.

The ImageNet classifier the concept route reads sits on the original head; a shipped tuned head would
run beside it (the index would keep both pooled vectors), which this probe does not build.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import logging
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from _common import REPO, dev_recalls, read_run_log, run_meta, time_v, write_result
from vsekit.data.corpus import load_corpus
from vsekit.embedding.cnn_head import CNNHead
from vsekit.embedding.evaluate import evaluate_model
from vsekit.embedding.model import EnsembleEmbedding, load_model, save_model
from vsekit.embedding.recipe import load_recipe
from vsekit.embedding.train_data import _split_pairs
from vsekit.embedding.trainer import _build_model, _EmbeddingRun
from vsekit.training.loop import step_lr
from vsekit.training.run import selection_corpus
from vsekit.vision.backbones import head_affine, load_backbone
from vsekit.vision.extract import _load_batch
from vsekit.vision.spec import FeatureSpec

RECIPE = REPO / "bench" / "recipes" / "joint-onevector-seed1.json"
FT1_RECIPE = REPO / "bench" / "recipes" / "joint-views-ft1-seed1.json"  # the shipped vse's member recipe
DATA = REPO.parent / "shared" / "data" / "flickr8k"
CELLS, PRE_DIM, HEAD_DIM = 49, 320, 1280
ARMS = {
    "frozen": "Lite0's head frozen (the control: the one-layer features)",
    "tuned": "Lite0's head tuned",
    "views-frozen": "six-crop views, head frozen",
    "views-tuned": "six-crop views, head tuned",
    "views-frozen-seed3": "six-crop views, head frozen, seed 3",
    "views-tuned-seed3": "six-crop views, head tuned, seed 3",
    "views-ft1-tuned": "six-crop views, MiniLM's top layer and the head tuned",
    "views-ft1-tuned-seed3": "six-crop views, MiniLM's top layer and the head tuned, seed 3",
}
RUNS = {name: Path(f"/work/runs/head-{name}") for name in ARMS}


def _cache_dir() -> Path:
    root = Path(os.environ.get("VSEKIT_CACHE", Path.home() / ".cache" / "vsekit"))
    return root / "probe-pre-head"


def pre_head_maps(corpus: Any, ids: list[str], threads: int, view: str = "centre") -> np.ndarray:
    """``[n, 49 * 320]`` float16: the input of Lite0's head conv for each photo's ``view`` (the evaluation
    crop by default; cells row-major, channels last), cached by the ids and the view."""
    digest = hashlib.sha256("\n".join(ids).encode()).hexdigest()[:16]
    path = _cache_dir() / (f"{digest}.npy" if view == "centre" else f"{digest}-{view}.npy")
    if path.is_file():
        return np.load(path)
    torch.set_num_threads(threads)
    spec = FeatureSpec("efficientnet_lite0", "one-layer")
    assert spec.preprocessing is not None  # FeatureSpec fills it in
    spec = dataclasses.replace(spec, preprocessing=spec.preprocessing.with_view(view))
    model = load_backbone("efficientnet_lite0")
    taken: list[torch.Tensor] = []
    model._conv_head.register_forward_hook(lambda m, args, out: taken.append(args[0]))
    out = np.empty((len(ids), CELLS * PRE_DIM), np.float16)
    for start in tqdm(range(0, len(ids), 64), desc="pre-head maps", unit="batch"):
        batch = [(i, corpus.images[i]) for i in ids[start : start + 64]]
        ok, pixels, bad = _load_batch(batch, spec.preprocessing)
        if bad or pixels is None:
            raise SystemExit(f"unreadable photos: {bad}")
        x = torch.from_numpy(spec.preprocessing.normalise(pixels)).permute(0, 3, 1, 2)
        taken.clear()
        with torch.inference_mode():
            model.forward_features(x.contiguous())
        out[start : start + len(ok)] = taken[0].permute(0, 2, 3, 1).reshape(len(ok), -1).numpy()
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.partial.npy")
    np.save(partial, out)
    os.replace(partial, path)  # whole or absent for another process filling other views
    return out


class HeadRun(_EmbeddingRun):
    """The recipe's run with the head in front of W_I (the recipe's dropout moved between them)."""

    def __init__(self, *args: Any, tune: bool, head_lr_scale: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tune, self.head_lr_scale = tune, head_lr_scale

    def build(self, data: Any) -> tuple[nn.Module, torch.optim.Optimizer, Any]:
        config = self.config
        backbone = load_backbone("efficientnet_lite0")  # first: building it draws from torch's RNG
        # the seeded model of a one-layer run: the same W_I and text head as the control's
        net = _build_model(
            config, SimpleNamespace(features={"image_dim": HEAD_DIM}, vocab=None), self.device, None
        )
        # the library's head (the same Linear per cell, ReLU6 and mean the probe first wrote as HeadPool)
        head = CNNHead(CELLS, PRE_DIM, HEAD_DIM).load_affine(*head_affine(backbone)).requires_grad_(self.tune)
        net.image_proj = nn.Sequential(head, net.image_dropout, net.image_proj)
        net.image_dropout = nn.Identity()
        net.image_dim = CELLS * PRE_DIM  # what embed_images checks its input against
        self.net = net
        net.text_encoder.precompute(
            data.train_texts + data.dev_texts, cache_root=self.cache_root, progress=False
        )
        head_params = [p for p in head.parameters() if p.requires_grad]
        rest = [p for n, p in net.named_parameters() if p.requires_grad and not n.startswith("image_proj.0.")]
        groups = [{"params": rest}]
        if head_params:
            groups.append({"params": head_params, "lr": config.lr * self.head_lr_scale})
        optimizer = torch.optim.Adam(groups, lr=config.lr, weight_decay=config.weight_decay)
        return net, optimizer, step_lr(optimizer, config.lr_decay_epochs, config.lr_decay_gamma)

    def save_best(self, state: Any, data: Any, epoch: int, dev: dict[str, Any]) -> None:
        torch.save(self.net.state_dict(), self.dir.path / "best.pt")  # a probe's weights, not a model file


def run_arm(
    arm: str, out: Path, head_lr_scale: float, threads: int, views: str, seed: int, recipe: Path = RECIPE
) -> dict[str, Any]:
    config = dataclasses.replace(load_recipe(str(recipe)), train_views=views, seed=seed)
    corpus = selection_corpus(load_corpus(DATA), config)
    maps: dict[str, np.ndarray] = {}

    def feature_fn(
        corpus_: Any, image_ids: list[str], backbone: str, kind: str, view: str = "centre", **_: Any
    ) -> tuple:
        ids = list(image_ids)
        key = "\n".join([view, *ids])
        if key not in maps:
            maps[key] = pre_head_maps(corpus_, ids, threads, view)
        return maps[key], None

    torch.set_num_threads(threads)
    run = HeadRun(
        corpus,
        config,
        out,
        None,
        feature_fn,
        None,
        tune=arm != "frozen",
        head_lr_scale=head_lr_scale,
        progress=False,
        log=print,
    )
    return run.run()


#: The probe's parameter names -> the library's (image_proj was Sequential(head, dropout, W_I)).
LIBRARY_NAMES = {
    "image_proj.0.proj.weight": "cnn_head.proj.weight",
    "image_proj.0.proj.bias": "cnn_head.proj.bias",
    "image_proj.2.weight": "image_proj.weight",
    "image_proj.2.bias": "image_proj.bias",
}


def export_model(run: Path, recipe: Path, seed: int) -> Path:
    """The probe's best epoch (``RUN/best.pt``) as a library model file over ``pre-head`` features
    (``RUN/model.safetensors``, float32): the same weights under the library's names."""
    config = dataclasses.replace(load_recipe(str(recipe)), image_features="pre-head", seed=seed)
    data = SimpleNamespace(features={"image_dim": CELLS * PRE_DIM}, vocab=None)
    model = _build_model(config, data, torch.device("cpu"), None)  # type: ignore[arg-type]
    state = torch.load(run / "best.pt", map_location="cpu", weights_only=True)
    model.load_state_dict({LIBRARY_NAMES.get(k, k): v for k, v in state.items()}, strict=True)
    best = max((h for h in read_run_log(run) if h.get("dev")), key=lambda h: h["dev"]["rsum"])
    extra = {"recipe": config.name, "probe": str(run), "epoch": best["epoch"], "val1000": best["dev"]}
    return save_model(model, run / "model.safetensors", extra_meta=extra)


def pack(runs: list[Path], out: Path) -> Path:
    """The exported members packed as one ensemble, float16, as ship/pack_members.py writes the shipped
    ``vse`` (here: a val1000 proxy, trained without the slice)."""
    members = [load_model(run / "model.safetensors")[0] for run in runs]
    for member in members[1:]:
        member.text_encoder.share_frozen(members[0].text_encoder)
    extra = {"members": [str(r) for r in runs], "selected_on": "val1000", "proxy": "trained without val1000"}
    return save_model(EnsembleEmbedding(members), out, extra_meta=extra, half=True)  # type: ignore[arg-type]


def evaluate_val1000(path: Path, threads: int) -> dict[str, Any]:
    """A library model file ranked on val1000 through the library's own pre-head features (the check
    that an export is the probe's model: its rsum should repeat the logged best)."""
    torch.set_num_threads(threads)
    model, _, _ = load_model(path)
    config = load_recipe(str(RECIPE))
    corpus = selection_corpus(load_corpus(DATA), config)
    return evaluate_model(model, None, corpus, config.dev_split, progress=False)


def arm_row(arm: str, run: Path, epochs: int) -> dict[str, Any] | None:
    """One arm's val1000 curve, best epoch, time and peak RSS (the gpo table's row fields)."""
    history = read_run_log(run) if (run / "log.jsonl").is_file() else []
    curve = [
        {
            "epoch": h["epoch"],
            **dev_recalls(h["dev"]),
            "loss": round(h["loss"], 4),
            "time_s": round(h["time_s"], 1),
        }
        for h in history
    ]
    if not curve:
        return None
    time_log, out_log = run.with_suffix(".time"), run.with_suffix(".log")
    later = [c["time_s"] for c in curve[1:]]
    return {
        "name": ARMS[arm],
        "arm": arm,
        "run": str(run),
        "epochs_done": len(curve),
        "epochs": epochs,
        "stopped_early": out_log.is_file() and "early stopping" in out_log.read_text(errors="replace"),
        "finished": time_log.is_file(),
        "best": max(curve, key=lambda c: c["rsum"]),
        "val1000": curve,
        "later_epoch_mean_s": round(sum(later) / len(later), 1) if later else None,
        "peak_rss_mb": time_v(time_log).get("peak_rss_mb"),
    }


def ft1_controls() -> list[dict[str, Any]]:
    """The ft1 arms' controls, the same recipe with the head frozen: the text_finetune.json rows of the
    shipped recipe's members (trained there, not here)."""
    done = json.loads((REPO / "bench" / "results" / "text_finetune.json").read_text(encoding="utf-8"))
    rows = []
    for row in done["views_finetuned"]:
        suffix = "" if row["seed"] == 1 else f", seed {row['seed']}"
        arm = "views-ft1-frozen" + ("" if row["seed"] == 1 else f"-seed{row['seed']}")
        name = f"six-crop views, MiniLM's top layer tuned, head frozen{suffix} (text_finetune.json)"
        rows.append({**row, "name": name, "arm": arm})
    return rows


#: The ft1 pair without the tuned head, packed the same way (docs/joint-embedding.md, "Together with the
#: training views", 2026-11-26; its proxy file was not kept on this machine).
FT1_PAIR_VAL1000 = {"rsum": 329.0, "i2t_r1": 36.5, "t2i_r1": 26.4}
RESULT = REPO / "bench" / "results" / "cnn_head_probe.json"


def keep_packed(path: Path, result: dict[str, Any]) -> None:
    """The packed ft1 + head pair's val1000 ranking, beside the ft1 pair's, in the results file."""
    data = json.loads(RESULT.read_text(encoding="utf-8"))
    data["packed"] = {
        "file": str(path),
        "what": "the two ft1 arms' best epochs, exported and packed in float16 (the val1000 proxy)",
        "val1000": dev_recalls(result),
        "without_head": FT1_PAIR_VAL1000,
    }
    write_result("cnn_head_probe.json", data)


def report() -> None:
    config = load_recipe(str(RECIPE))
    rows = [r for arm, run in RUNS.items() if (r := arm_row(arm, run, config.epochs)) is not None]
    if any(r["arm"].startswith("views-ft1") for r in rows):  # each tuned ft1 arm after its control
        controls = {r["arm"].replace("frozen", "tuned"): r for r in ft1_controls()}
        rows = [x for r in rows for x in ([controls[r["arm"]], r] if r["arm"] in controls else [r])]
    packed = json.loads(RESULT.read_text(encoding="utf-8")).get("packed") if RESULT.is_file() else None
    write_result(
        "cnn_head_probe.json",
        {
            "benchmark": "Lite0's head (1 x 1 conv 320 -> 1280) tuned with the joint space, on val1000",
            "meta": run_meta(
                threads=1,
                note="arms two at a time, nice 5, beside feature extraction, (views arms) a test suite or "
                "(MiniLM arms) an aligner run, the library's tests and extraction",
            ),
            "protocol": "train-minus-val1000 / val1000 (flickr8k-val1000 slice); dev not read; seed 1 "
            "(seed 3: the rows that say so); 15 epochs; bench/recipes/joint-onevector-seed1.json with "
            "the head in front of W_I (the MiniLM rows: joint-views-ft1-seed1.json, MiniLM's top layer "
            "tuned, the shipped vse's member recipe)",
            "head_lr": config.lr,
            "rows": rows,
            **({"packed": packed} if packed else {}),
        },
    )
    for r in rows:
        print(r["arm"], r["best"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arm", choices=("frozen", "tuned"))
    parser.add_argument("--out", type=Path)
    parser.add_argument("--head-lr-scale", type=float, default=1.0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=1, help="the recipe's seed (1: as on file)")
    parser.add_argument("--views", default="centre", help="the recipe's train_views (six-crop: the shipped)")
    parser.add_argument(
        "--recipe", type=Path, default=RECIPE, help=f"the member recipe (the ft1 arms: {FT1_RECIPE.name})"
    )
    parser.add_argument("--report", action="store_true")
    parser.add_argument("--extract", nargs="+", metavar="VIEW", help="only fill the maps of these views")
    parser.add_argument("--export", nargs="+", type=Path, metavar="RUN", help="write RUN/model.safetensors")
    parser.add_argument("--pack", type=Path, metavar="FILE", help="with --export: pack the runs into FILE")
    parser.add_argument("--evaluate", type=Path, metavar="FILE", help="rank a model file on val1000")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO)
    if args.report:
        report()
        return
    if args.export:  # each run's seed is in its config.json (the probe's run directory)
        for run in args.export:
            seed = json.loads((run / "config.json").read_text(encoding="utf-8"))["seed"]
            print(export_model(run, args.recipe, seed))
        if args.pack:
            print(pack(args.export, args.pack))
        return
    if args.evaluate:
        result = evaluate_val1000(args.evaluate, args.threads)
        print(json.dumps(result, indent=1))
        if args.pack:  # --evaluate PROXY --pack: keep the packed pair's val1000 numbers in the results
            keep_packed(args.evaluate, result)
        return
    if args.extract:  # a second process fills other views' caches while a run extracts its own
        config = dataclasses.replace(load_recipe(str(RECIPE)), train_views=args.views)
        corpus = selection_corpus(load_corpus(DATA), config)
        ids = _split_pairs(corpus.split(config.train_split))[0]  # the run's ids, in its order
        for view in args.extract:
            pre_head_maps(corpus, ids, args.threads, view)
        return
    if not args.arm or not args.out:
        parser.error("--arm and --out, or --report")
    print(
        json.dumps(
            {
                k: v
                for k, v in run_arm(
                    args.arm, args.out, args.head_lr_scale, args.threads, args.views, args.seed, args.recipe
                ).items()
                if k != "history"
            },
            default=str,
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
