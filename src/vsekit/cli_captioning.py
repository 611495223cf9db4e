"""`vsekit train-captioner` and `vsekit caption`: the caption-generation commands of the CLI.

Registered on the main Typer app by :mod:`vsekit.cli` (kept in their own module so each file has one job).
"""

from __future__ import annotations

import json
import time
import warnings
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from vsekit.cli import _fail, _write_json, app, console, err_console
from vsekit.errors import VsekitError
from vsekit.resources import pretrained_path, resolve_model_path

METHODS = ("mrnn", "scnlm", "nn")


def packaged_captioner_path() -> Path:
    """The m-RNN captioner shipped with vsekit (used when --model is not given)."""
    return pretrained_path("captioner")


def _resolve_captioner_path(model: Path | None) -> Path:
    return resolve_model_path(model, "captioner")


@app.command("train-captioner")
def train_captioner_command(
    data: Path = typer.Option(..., "--data", help="Corpus with train and dev splits."),
    recipe: str = typer.Option(
        ..., "--recipe", help="Captioning recipe (mrnn-lstm, mrnn-rnn, ...) or path of a recipe JSON file."
    ),
    out: Path = typer.Option(..., "--out", help="Run directory: captioner, checkpoint, log and config."),
    resume: bool = typer.Option(False, "--resume", help="Continue the run in --out from its last epoch."),
    epochs: int | None = typer.Option(None, "--epochs", min=1, help="Override the recipe's epoch count."),
    seed: int | None = typer.Option(None, "--seed", help="Override the recipe's seed."),
    num_threads: int | None = typer.Option(None, "--num-threads", min=1, help="CPU threads for torch."),
    device: str = typer.Option("auto", "--device", help="auto, cpu, cuda or cuda:N."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show progress bars."),
) -> None:
    """Train a caption generator; the best epoch by dev CIDEr-D goes to OUT/captioner.safetensors.

    Image features come from the feature cache (computed on first use). Each epoch ends with greedy
    captions for every dev image scored with BLEU and CIDEr-D. Interrupt at any time and rerun with
    --resume to continue from the last finished epoch.
    """
    import dataclasses

    from vsekit.captioning.trainer import load_caption_recipe, train_captioner
    from vsekit.data import load_corpus

    try:
        config = load_caption_recipe(recipe)
        overrides = {
            k: v
            for k, v in (("epochs", epochs), ("seed", seed), ("num_threads", num_threads))
            if v is not None
        }
        config = dataclasses.replace(config, **overrides).validate(f"recipe {recipe!r}")
        corpus = load_corpus(data)
        console.print(
            f"{corpus!r}\nrecipe {config.name}: m-RNN ({config.cell}, hidden {config.hidden_dim}) on "
            f"{config.backbone} {config.image_features} features, {config.epochs} epochs"
        )
        summary = train_captioner(corpus, config, out, resume=resume, progress=progress, device=device)
    except VsekitError as exc:
        _fail(exc)
    except KeyboardInterrupt:
        err_console.print("interrupted: finished epochs are in the checkpoint; rerun with --resume")
        raise typer.Exit(code=130) from None
    best = summary["best_dev"]
    if best is None:
        console.print(f"no dev evaluation yet; checkpoint in {out}")
        return
    console.print(_scores_table(f"best dev epoch {summary['best_epoch']} (greedy captions)", best))
    console.print(f"captioner: {summary['model_path']}")


def _scores_table(title: str, scores: dict[str, Any]) -> Table:
    table = Table(title=title, header_style="bold")
    names = ("bleu1", "bleu2", "bleu3", "bleu4", "meteor", "rouge_l", "cider")
    labels = ("B-1", "B-2", "B-3", "B-4", "METEOR", "ROUGE-L", "CIDEr-D")
    for label in labels:
        table.add_column(label, justify="right")
    table.add_row(*("-" if scores.get(n) is None else f"{scores[n]:.1f}" for n in names))
    return table


class _Generator:
    """One interface over the three methods: ``describe(features, n) -> n-best caption lists``.

    m-RNN captioners carrying tuned rerank settings rerank their beam with the joint embedding (see
    :mod:`vsekit.captioning.rerank`); the SC-NLM needs the joint embedding for its conditioning vectors.
    Both use ``joint_model`` (default: the model shipped with vsekit).
    """

    def __init__(
        self,
        method: str,
        model: Path | None,
        decode: dict[str, Any],
        device: str,
        rerank: bool = True,
        joint_model: Path | None = None,
    ) -> None:
        self.method, self.decode, self.device = method, decode, device
        self.joint = self.joint_fne = self.rerank = None
        self.joint_path = joint_model
        if method == "mrnn":
            from vsekit.captioning.captioner import load_captioner
            from vsekit.captioning.rerank import RerankSettings

            self.captioner = load_captioner(_resolve_captioner_path(model), device=device)
            self.image = self.captioner.image
            tuned = self.captioner.meta.get("rerank")
            if rerank and tuned and decode["decoding"] == "beam":
                self.rerank = RerankSettings.from_dict(tuned)
                self._load_joint()
            if decode["beam_size"] is None:
                decode["beam_size"] = self.rerank.beam_size if self.rerank else 3
        elif method == "scnlm":
            from vsekit.captioning.scnlm import load_scnlm

            if model is None:
                raise VsekitError("--method scnlm needs --model PATH (the file bench/train_scnlm.py writes)")
            self._load_joint()
            self.captioner = load_scnlm(model, joint_model=self.joint)
            self.image = dict(self.joint.config["image"])
        else:
            self.image = {
                "backbone": decode.get("backbone", "mobilenet_v2"),
                "kind": decode.get("features", "one-layer"),
            }
            self.captioner = None  # fitted on the training split by fit_nn
            self._nn_fne = None

    def _load_joint(self) -> None:
        from vsekit.cli import _resolve_model_path
        from vsekit.embedding.model import load_model

        self.joint_path = _resolve_model_path(self.joint_path)
        self.joint, self.joint_fne, _ = load_model(self.joint_path, device=self.device)
        if self.rerank is not None and self.rerank.joint_model_sha256:
            from vsekit.captioning.rerank import file_fingerprint

            if file_fingerprint(self.joint_path) != self.rerank.joint_model_sha256:
                warnings.warn(
                    f"the captioner's rerank weights were tuned with another joint model than "
                    f"{self.joint_path}; captions may be reranked suboptimally",
                    stacklevel=2,
                )

    def fit_nn(self, corpus, train_split: str, cache_root: Path | None) -> None:
        from vsekit.captioning.nearest import NearestNeighbourCaptioner
        from vsekit.vision.features import image_features

        part = corpus.split(train_split)
        ids = [i for i, caps in part.captions_by_image().items() if caps]
        feats, self._nn_fne = image_features(
            corpus, ids, self.image["backbone"], self.image["kind"], cache_root=cache_root, device=self.device
        )
        self.image["image_dim"] = int(feats.shape[1])
        self.captioner = NearestNeighbourCaptioner().fit(feats, ids, part.captions_by_image())

    @property
    def config(self) -> dict[str, Any]:
        return {"image": self.image}

    @property
    def fne(self):
        if self.method == "scnlm":
            return self.joint_fne
        if self.method == "nn":
            return self._nn_fne
        return getattr(self.captioner, "fne", None)

    @property
    def needs_joint_features(self) -> bool:
        return self.joint is not None

    def describe(self, features, n: int, joint_features=None) -> list[list[str]]:
        """n-best captions per image; ``joint_features`` are the joint model's inputs for the images."""
        import torch

        if self.method == "nn":
            return [[c] for c in self.captioner.caption(features)]
        if self.method == "scnlm":
            return self.captioner.generate(self.joint.embed_images(torch.as_tensor(features)), n_best=n)
        decode = {k: v for k, v in self.decode.items() if k not in ("backbone", "features")}
        if self.rerank is not None:
            from vsekit.captioning.rerank import embedding_cosines, rerank_order

            settings = self.rerank
            decode["n_best"] = decode["beam_size"]
            candidates = self.captioner.decode(features, **decode)
            texts = [[self.captioner.text(c) for c in caps] for caps in candidates]
            cosines = embedding_cosines(self.joint, joint_features, texts)
            return [
                [group[j] for j in rerank_order(caps, cos, settings.weight, settings.length_penalty)[:n]]
                for caps, group, cos in zip(candidates, texts, cosines, strict=True)
            ]
        if decode["decoding"] == "beam":
            decode["n_best"] = min(n, decode["beam_size"])
            return [
                [self.captioner.text(c) for c in caps] for caps in self.captioner.decode(features, **decode)
            ]
        if decode["decoding"] == "sample" and n > 1:
            draws = [self.captioner.decode(features, **decode) for _ in range(n)]
            return [[self.captioner.text(d[i][0]) for d in draws] for i in range(len(draws[0]))]
        return [[self.captioner.text(c[0])] for c in self.captioner.decode(features, **decode)]


@app.command("caption")
def caption_command(
    image: list[Path] = typer.Option(None, "--image", help="Image file(s) to describe (repeat the option)."),
    data: Path | None = typer.Option(
        None, "--data", help="Corpus: describe every image of --split and score."
    ),
    split: str = typer.Option("test", "--split", help="Split of --data to caption."),
    model: Path | None = typer.Option(None, "--model", help="Captioner file (default: the shipped one)."),
    method: str = typer.Option(
        "mrnn", "--method", help="mrnn (multimodal RNN), scnlm or nn (nearest neighbour)."
    ),
    decoding: str = typer.Option("beam", "--decoding", help="m-RNN decoding: beam, greedy or sample."),
    beam: int | None = typer.Option(
        None, "--beam", min=1, help="Beam size (default: the captioner's rerank beam if it has one, else 3)."
    ),
    rerank: bool = typer.Option(
        True,
        "--rerank/--no-rerank",
        help="m-RNN: rerank the beam with the joint embedding, using the weights tuned on dev (if the "
        "captioner has them).",
    ),
    joint_model: Path | None = typer.Option(
        None, "--joint-model", help="Joint embedding for reranking and SC-NLM (default: the shipped one)."
    ),
    n: int = typer.Option(
        1, "--n", min=1, help="Captions per image to print (n-best of the beam, or samples)."
    ),
    temperature: float = typer.Option(1.0, "--temperature", help="Sampling temperature (sample decoding)."),
    length_penalty: float = typer.Option(
        0.0, "--length-penalty", help="Rank beam hypotheses by score / (words+1)^P (0: plain log-prob)."
    ),
    max_len: int = typer.Option(20, "--max-len", min=1, help="Longest caption, in words."),
    train_data: Path | None = typer.Option(
        None, "--train-data", help="nn method: corpus whose train split is searched (default: --data)."
    ),
    backbone: str = typer.Option("mobilenet_v2", "--backbone", help="nn method: CNN for the similarity."),
    features: str = typer.Option(
        "one-layer", "--features", help="nn method: one-layer or fne (Full-Network Embedding) features."
    ),
    json_out: Path | None = typer.Option(None, "--json", help="With --data: write the scores to this JSON."),
    out: Path | None = typer.Option(None, "--out", help="With --data: write one JSON line per image here."),
    device: str = typer.Option("auto", "--device", help="auto, cpu, cuda or cuda:N."),
    cache_root: Path | None = typer.Option(None, "--cache-root", help="Root of the feature cache."),
) -> None:
    """Describe images in words: print captions for --image files, or caption and score a corpus split.

    With --data the captions of every image of --split are scored against the human captions with
    BLEU-1..4, METEOR (needs Java), ROUGE-L and CIDEr-D (x100, as in the papers).
    """
    from vsekit.device import resolve_device

    try:
        if method not in METHODS:
            raise VsekitError(f"unknown --method {method!r}; choose one of {', '.join(METHODS)}")
        if features not in ("one-layer", "fne"):
            raise VsekitError(f"unknown --features {features!r}; choose one-layer or fne")
        if decoding not in ("beam", "greedy", "sample"):
            raise VsekitError(f"unknown --decoding {decoding!r}; choose beam, greedy or sample")
        if bool(image) == (data is not None):
            raise VsekitError(
                "give images to describe (--image IMG) or a corpus split (--data DIR --split S)"
            )
        if (json_out is not None or out is not None) and data is None:
            raise VsekitError("--json and --out need --data (they hold scores and captions of a split)")
        torch_device = str(resolve_device(device))
        settings = {
            "decoding": decoding,
            "beam_size": beam,
            "temperature": temperature,
            "length_penalty": length_penalty,
            "max_len": max_len,
            "backbone": backbone,
            "features": features,
        }
        generator = _Generator(method, model, settings, torch_device, rerank=rerank, joint_model=joint_model)
        if image:
            _caption_files(generator, list(image), n, train_data, cache_root)
        else:
            _caption_split(generator, data, split, n, train_data, json_out, out, cache_root, settings)
    except VsekitError as exc:
        _fail(exc)


def _caption_files(generator: _Generator, files: list[Path], n: int, train_data, cache_root) -> None:
    from vsekit.data import load_corpus
    from vsekit.embedding.evaluate import features_for_files

    if generator.method == "nn":
        if train_data is None:
            raise VsekitError("--method nn needs the training images to search: --train-data DIR")
        generator.fit_nn(load_corpus(train_data), "train", cache_root)
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise VsekitError(f"image file not found: {', '.join(missing)}")
    feats = features_for_files(files, generator, generator.fne, device=generator.device)
    joint_feats = None
    if generator.rerank is not None:
        same = generator.joint.config["image"]["backbone"] == generator.image["backbone"] and (
            generator.joint.config["image"]["kind"] == generator.image["kind"] == "one-layer"
        )
        joint_feats = feats if same else features_for_files(files, generator.joint, generator.joint_fne)
    for path, captions in zip(files, generator.describe(feats, n, joint_feats), strict=True):
        console.print(f"[bold]{path}[/]", soft_wrap=True)  # a path must stay copyable
        for k, text in enumerate(captions, start=1):
            console.print(f"  {k}. {text}" if len(captions) > 1 else f"  {text}")


def _caption_split(generator, data, split, n, train_data, json_out, out, cache_root, settings) -> None:
    from vsekit.data import load_corpus
    from vsekit.data.vocab import tokenize
    from vsekit.metrics.captions import score_captions
    from vsekit.vision.features import image_features

    corpus = load_corpus(data)
    part = corpus.split(split)
    references = {i: caps for i, caps in part.captions_by_image().items() if caps}
    ids = list(references)
    if not ids:
        raise VsekitError(f"{data}: split '{split}' has no captioned images")
    if generator.method == "nn":
        generator.fit_nn(load_corpus(train_data) if train_data else corpus, "train", cache_root)
    spec = generator.image
    feats, _ = image_features(
        corpus,
        ids,
        spec["backbone"],
        spec["kind"],
        fne=generator.fne,
        cache_root=cache_root,
        device=generator.device,
    )
    joint_feats = None
    if generator.rerank is not None:
        from vsekit.embedding.evaluate import model_features

        joint_feats = model_features(
            generator.joint, generator.joint_fne, corpus, ids, cache_root=cache_root, device=generator.device
        )
    t0 = time.perf_counter()
    generated = generator.describe(feats, n, joint_feats)
    seconds = time.perf_counter() - t0
    predictions = {i: caps[0] for i, caps in zip(ids, generated, strict=True)}
    scores = score_captions(predictions, references)
    train_sentences = set()
    if "train" in corpus.splits:
        train_sentences = {" ".join(tokenize(c.text)) for c in corpus.split("train").captions}
    in_train = sum(" ".join(tokenize(p)) in train_sentences for p in predictions.values())
    result = {
        **scores,
        "n_images": len(ids),
        "method": generator.method,
        "backbone": spec["backbone"],
        "features": spec["kind"],
        "split": split,
        "decoding": settings["decoding"] if generator.method == "mrnn" else generator.method,
        "beam": settings["beam_size"]
        if generator.method == "mrnn" and settings["decoding"] == "beam"
        else None,
        "rerank": generator.rerank.to_dict() if generator.rerank is not None else None,
        "in_training_set": round(100 * in_train / len(ids), 1) if train_sentences else None,
        "captions_per_s": round(len(ids) / max(seconds, 1e-9), 1),
    }
    if out is not None:
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            with open(out, "w", encoding="utf-8") as f:
                for i, caps in zip(ids, generated, strict=True):
                    f.write(json.dumps({"image": i, "caption": caps[0], "n_best": caps}) + "\n")
        except OSError as exc:
            raise VsekitError(f"{out}: cannot write captions ({exc.strerror or exc})") from None
    if json_out is not None:
        _write_json(json_out, result)
    title = (
        f"{corpus.name} {split}: {len(ids)} images, {generator.method}"
        + (f" ({settings['decoding']}, beam {settings['beam_size']})" if generator.method == "mrnn" else "")
        + (" + joint-embedding rerank" if generator.rerank is not None else "")
        + f", {spec['backbone']} {spec['kind']} features"
    )
    console.print(_scores_table(title, result))
    if result["in_training_set"] is not None:
        console.print(f"{result['in_training_set']:.1f}% of the captions occur verbatim in the training set")
    for i in ids[:3]:
        console.print(f"[bold]{i}[/]: {predictions[i]}  [dim](human: {references[i][0]})[/]")
    if json_out is not None:
        console.print(f"scores written to {json_out}")


def demo_captions(corpus, image_ids: list[str], joint_model_path: Path, device: str) -> list[str] | None:
    """Captions of the shipped m-RNN (reranked as tuned) for the demo, or None if none is shipped."""
    from vsekit.device import resolve_device
    from vsekit.vision.features import image_features

    if not packaged_captioner_path().is_file():
        return None
    device = str(resolve_device(device))
    settings = {
        "decoding": "beam",
        "beam_size": None,
        "temperature": 1.0,
        "length_penalty": 0.0,
        "max_len": 20,
    }
    generator = _Generator("mrnn", None, settings, device, rerank=True, joint_model=joint_model_path)
    spec = generator.image
    feats, _ = image_features(
        corpus, image_ids, spec["backbone"], spec["kind"], fne=generator.fne, device=device
    )
    joint_feats = None
    if generator.rerank is not None:
        from vsekit.embedding.evaluate import model_features

        joint_feats = model_features(generator.joint, generator.joint_fne, corpus, image_ids, device=device)
    return [caps[0] for caps in generator.describe(feats, 1, joint_feats)]
