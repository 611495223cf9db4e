"""`vsekit train`, `vsekit eval` and `vsekit rank`: the joint image-sentence embedding."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import typer
from rich.table import Table

from vsekit.cli._common import (
    CACHE_ROOT_HELP,
    CNN_ENGINE_HELP,
    DEVICE_HELP,
    JSON_HELP_SUFFIX,
    RANK_MODEL_HELP,
    SKIP_BAD_HELP,
    SPLIT_HELP,
    KeepEpochsOption,
    console,
    metrics_table,
    plain,
    read_caption_lines,
    rounded,
    run_options,
    set_cnn_engine,
    user_errors,
    with_overrides,
    write_json,
)
from vsekit.errors import VsekitError
from vsekit.resources import RECIPES_DIR, recipe_names

_RECIPES = ", ".join(recipe_names(RECIPES_DIR))  # the shipped recipes, for --help


def train(
    data: Path = typer.Option(..., "--data", help="Corpus with train and dev splits."),
    recipe: str = typer.Option(
        ..., "--recipe", help=f"Recipe name ({_RECIPES}) or path of a recipe JSON file."
    ),
    out: Path = typer.Option(..., "--out", help="Run directory: model, checkpoint, log and config go here."),
    resume: bool = typer.Option(
        False, "--resume", help="Continue the run in --out from its last checkpoint."
    ),
    epochs: int | None = typer.Option(None, "--epochs", min=1, help="Override the recipe's epoch count."),
    seed: int | None = typer.Option(
        None, "--seed", help="Override the recipe's seed (an ensemble recipe then trains one model)."
    ),
    num_threads: int | None = typer.Option(
        None, "--num-threads", min=1, help="CPU threads for torch (1 is often fastest on a shared CPU)."
    ),
    device: str = typer.Option("auto", "--device", help=DEVICE_HELP),
    engine: str | None = typer.Option(None, "--engine", help=CNN_ENGINE_HELP),
    cache_root: Path | None = typer.Option(None, "--cache-root", help=CACHE_ROOT_HELP),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show progress bars."),
    keep_epochs: KeepEpochsOption = False,
) -> None:
    """Train a joint image-sentence embedding; the best epoch on the selection split (the recipe's
    dev_split: val1000 under the selection protocol) goes to OUT/model.safetensors.

    Interrupt it at any time: `--resume` with the same arguments continues from the last finished epoch
    and gives exactly the weights an uninterrupted run would have. Data-parallel:
    `torchrun --nproc-per-node N -m vsekit train ...` (see docs/scale-out.md).
    """
    from vsekit.data import load_corpus
    from vsekit.embedding.trainer import load_recipe
    from vsekit.embedding.trainer import train as run_training

    if os.environ.get("RANK", "0") != "0":  # under torchrun: rank 0 reports; errors still go to stderr
        console.quiet = True

    with user_errors("finished epochs are saved in the checkpoint; run the same command with --resume"):
        set_cnn_engine(engine)
        config = with_overrides(
            load_recipe(recipe), recipe, epochs=epochs, seed=seed, num_threads=num_threads
        )
        if seed is not None:  # one seed given: train that one model, not the recipe's ensemble
            config = dataclasses.replace(config, ensemble_seeds=None)
        corpus = load_corpus(data)
        console.print(
            f"{corpus!r}\nrecipe {config.name}: {config.text_encoder} + {config.image_features} "
            f"{config.backbone} features, K={config.embed_dim}, loss {config.loss}"
            + (f", ensemble of seeds {config.ensemble_seeds}" if config.ensemble_seeds else "")
        )
        options = run_options(resume, progress, device, keep_epochs)
        summary = run_training(corpus, config, out, cache_root=cache_root, **options)
    _print_training_summary(summary, out)


def _print_training_summary(summary: dict, out: Path) -> None:
    best = summary["best_dev"]
    if "members" in summary:
        for m in summary["members"]:
            title = f"member seed {m['seed']}: best dev epoch {m['best_epoch']} of {m['epochs_completed']}"
            console.print(metrics_table(title, m["best_dev"]))
        console.print(metrics_table(f"ensemble of {len(summary['members'])} members on dev", best))
    elif best is None:
        console.print(f"no dev evaluation yet; checkpoint in {out}")
        return
    else:
        title = f"best dev epoch {summary['best_epoch']} of {summary['epochs_completed']}"
        console.print(metrics_table(title, best))
    console.print(plain(f"model: {summary['model_path']}"), soft_wrap=True)


def evaluate(
    data: Path = typer.Option(..., "--data", help="Corpus directory or file."),
    split: str | None = typer.Option(None, "--split", help=SPLIT_HELP),
    model: str | None = typer.Option(None, "--model", help=RANK_MODEL_HELP),
    protocol: str = typer.Option("flickr", "--protocol", help="flickr, coco1k or coco5k."),
    json_out: Path | None = typer.Option(
        None, "--json", help="Write the metrics to this JSON file" + JSON_HELP_SUFFIX + "."
    ),
    device: str = typer.Option("auto", "--device", help=DEVICE_HELP),
    engine: str | None = typer.Option(None, "--engine", help=CNN_ENGINE_HELP),
    cache_root: Path | None = typer.Option(None, "--cache-root", help=CACHE_ROOT_HELP),
    skip_bad_images: bool = typer.Option(False, "--skip-bad-images", help=SKIP_BAD_HELP),
) -> None:
    """Recall@K, median and mean rank of a trained model on a corpus split, both directions."""
    from vsekit.alignment.evaluate import evaluate_aligner_file, is_aligner_file
    from vsekit.alignment.fusion import FusedModel, evaluate_fused, is_fusion
    from vsekit.data import load_corpus
    from vsekit.embedding.evaluate import evaluate_model
    from vsekit.embedding.pipeline import VSEModel
    from vsekit.resources import resolve_model_path

    with user_errors():
        set_cnn_engine(engine)
        corpus = load_corpus(data)
        split = split or corpus.default_split()
        if is_aligner_file(model):  # an aligner ranks by S_kl; same JSON keys
            result = evaluate_aligner_file(
                model, corpus, split, protocol, device=device, cache_root=cache_root
            )
            path: Path | None = resolve_model_path(model, "aligner")
        elif is_fusion(model):  # cosine and S_kl, weighted (the fusion file says how)
            fused = FusedModel.load(model, device=device)
            result = evaluate_fused(fused, corpus, split, protocol, cache_root=cache_root)
            path = fused.path
        else:
            vse = VSEModel.load(model, device=device)
            result = evaluate_model(
                vse.network,
                vse.fne,
                corpus,
                split,
                protocol,
                skip_bad_images=skip_bad_images,
                cache_root=cache_root,
                device=str(vse.device),
            )
            path = vse.path
        assert path is not None  # a loaded model knows its file
        result = {
            **result,
            "split": split,
            "model": {"name": model or "vse", "path": str(path), "sha256": _sha256(path)},
        }
        if json_out is not None:
            write_json(json_out, rounded(result))
    title = (
        f"{corpus.name} {split}: {result['n_images']} images x {result['n_captions']} captions, "
        f"{protocol} protocol, {result['backbone']} {result['features']} features"
    )
    console.print(metrics_table(title, result))
    if json_out is not None:
        console.print(plain(f"metrics written to {json_out}"), soft_wrap=True)


def rank(
    image: Path | None = typer.Option(None, "--image", help="Query image: rank captions for it."),
    sentence: str | None = typer.Option(None, "--sentence", help="Query sentence: rank the split's images."),
    model: str | None = typer.Option(None, "--model", help=RANK_MODEL_HELP),
    captions: Path | None = typer.Option(None, "--captions", help="Candidate captions, one per line."),
    data: Path | None = typer.Option(None, "--data", help="Corpus whose split provides the candidates."),
    split: str | None = typer.Option(None, "--split", help=SPLIT_HELP),
    top: int = typer.Option(5, "--top", min=1, help="How many results to show."),
    json_out: Path | None = typer.Option(
        None, "--json", help="Also write the results to this JSON file" + JSON_HELP_SUFFIX + "."
    ),
    device: str = typer.Option("auto", "--device", help=DEVICE_HELP),
    engine: str | None = typer.Option(None, "--engine", help=CNN_ENGINE_HELP),
    cache_root: Path | None = typer.Option(None, "--cache-root", help=CACHE_ROOT_HELP),
    skip_bad_images: bool = typer.Option(False, "--skip-bad-images", help=SKIP_BAD_HELP),
) -> None:
    """Rank captions for an image (--image) or images for a sentence (--sentence): by the cosine in the joint
    space, by S_kl (--model aligner) or by both (--model vse+aligner)."""
    from vsekit.alignment.evaluate import is_aligner_file
    from vsekit.alignment.fusion import is_fusion
    from vsekit.data import load_corpus

    with user_errors():
        set_cnn_engine(engine)
        if (image is None) == (sentence is None):
            raise VsekitError("give exactly one query: --image IMG or --sentence TEXT")
        if image is not None and (captions is None) == (data is None):
            raise VsekitError("--image needs candidates: --captions FILE or --data DIR (with --split)")
        if sentence is not None and data is None:
            raise VsekitError("--sentence needs images to search: --data DIR (with --split)")
        if sentence is not None and not sentence.strip():
            raise VsekitError("--sentence is empty: give the words to search for")
        corpus = load_corpus(data) if data is not None else None
        if corpus is not None:
            split = split or corpus.default_split()
        if is_fusion(model) or is_aligner_file(model):
            rows = _rank_by_pairs(model, image, sentence, captions, corpus, split, top, device, cache_root)
        else:
            rows = _rank_in_joint_space(
                model, image, sentence, captions, corpus, split, top, device, cache_root, skip_bad_images
            )
        if json_out is not None:
            query = str(image) if image is not None else sentence
            write_json(json_out, rounded({"query": query, "results": rows}, 4))
    console.print(_rank_table(image, sentence, rows))


def _rank_in_joint_space(
    model: str | None,
    image: Path | None,
    sentence: str | None,
    captions: Path | None,
    corpus,  # noqa: ANN001 - a Corpus or None
    split: str | None,
    top: int,
    device: str,
    cache_root: Path | None,
    skip_bad_images: bool,
) -> list[dict]:
    """`rank` with a joint model: cosines in the joint space, best first."""
    from vsekit.embedding.pipeline import VSEModel
    from vsekit.embedding.text_cache import cached_text_embeddings
    from vsekit.retrieval import rank as rank_in_space

    vse = VSEModel.load(model, device=device)
    if image is not None:
        if captions is not None:
            candidates = read_caption_lines(captions)
        else:
            candidates = [c.text for c in corpus.split(split).captions]
        texts = cached_text_embeddings(vse, candidates, cache_root)
        (hits,) = rank_in_space(vse.embed_images([image]), texts, candidates, top)
        rows = [{"rank": k, "score": h.score, "caption": h.key} for k, h in enumerate(hits, 1)]
    else:
        assert sentence is not None  # (one query: the image or the sentence)
        part = corpus.split(split)
        ids = part.image_ids()
        if skip_bad_images:
            ids, _ = vse.readable_ids(corpus, ids, cache_root=cache_root)
        images = vse.embed_features(vse.corpus_features(corpus, ids, cache_root=cache_root))
        (hits,) = rank_in_space(vse.embed_texts([sentence]), images, ids, top)
        first = {i: caps[0] if caps else "" for i, caps in part.captions_by_image().items()}
        rows = [
            {
                "rank": k,
                "score": h.score,
                "image": h.key,
                "path": str(corpus.images[h.key]),
                "caption": first[h.key],
            }
            for k, h in enumerate(hits, 1)
        ]
    return rows


def _rank_by_pairs(
    model: str | os.PathLike[str],
    image: Path | None,
    sentence: str | None,
    captions: Path | None,
    corpus,  # noqa: ANN001 - a Corpus or None
    split: str | None,
    top: int,
    device: str,
    cache_root: Path | None,
) -> list[dict]:
    """`rank` for models that score pairs (an aligner's S_kl, a fusion): one row of scores, best first."""
    import numpy as np
    import torch

    from vsekit.alignment.fusion import FusedModel, is_fusion
    from vsekit.alignment.model import Aligner
    from vsekit.alignment.trainer import evaluate_scores

    if is_fusion(model):
        scorer = FusedModel.load(model, device=device)
        aligner = None
    else:
        scorer, aligner = None, Aligner.load(model, device=device)
    if image is not None:
        if captions is not None:
            candidates = read_caption_lines(captions)
        else:
            candidates = [c.text for c in corpus.split(split).captions]
        if scorer is not None:
            scores = scorer.score_matrix([image], candidates)[0]
        else:
            assert aligner is not None
            scores = aligner.score_matrix(aligner.regions([image], cache=False).features, candidates)[0]
        order = np.argsort(-scores, kind="stable")[:top]
        return [
            {"rank": k, "score": float(scores[j]), "caption": candidates[j]} for k, j in enumerate(order, 1)
        ]
    assert sentence is not None  # (one query: the image or the sentence)
    part = corpus.split(split)
    ids = part.image_ids()
    if scorer is not None:
        scores = scorer.corpus_scores(corpus, ids, [sentence], cache_root=cache_root)[:, 0]
    else:
        assert aligner is not None
        feats = aligner.regions(corpus, image_ids=ids, cache_root=cache_root).features
        scores = evaluate_scores(aligner.model, torch.from_numpy(feats), [sentence])[:, 0]
    first = {i: caps[0] if caps else "" for i, caps in part.captions_by_image().items()}
    order = np.argsort(-scores, kind="stable")[:top]
    return [
        {
            "rank": k,
            "score": float(scores[j]),
            "image": ids[j],
            "path": str(corpus.images[ids[j]]),
            "caption": first[ids[j]],
        }
        for k, j in enumerate(order, 1)
    ]


def _rank_table(image: Path | None, sentence: str | None, rows: list[dict]) -> Table:
    query = str(image) if image is not None else repr(sentence)
    console.print(plain(f"query: {query}"), soft_wrap=True, highlight=False)  # a path must stay copyable
    table = Table(header_style="bold")
    table.add_column("#", justify="right")
    table.add_column("score", justify="right")
    if image is not None:
        table.add_column("caption")
        for r in rows:
            table.add_row(str(r["rank"]), f"{r['score']:.3f}", plain(r["caption"]))
    else:
        table.add_column("image")
        table.add_column("first human caption")
        for r in rows:
            table.add_row(str(r["rank"]), f"{r['score']:.3f}", plain(r["image"]), plain(r["caption"]))
    return table


def _sha256(path: Path) -> str:
    from vsekit.fileio import file_sha256  # torch comes with fileio: imported here, --help stays fast

    return file_sha256(path)
