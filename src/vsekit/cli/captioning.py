"""`vsekit train-captioner` and `vsekit caption`: describing images in words."""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import typer

from vsekit.cli._common import (
    CACHE_ROOT_HELP,
    CNN_ENGINE_HELP,
    DEVICE_HELP,
    JSON_HELP_SUFFIX,
    SPLIT_HELP,
    KeepEpochsOption,
    console,
    err_console,
    plain,
    run_options,
    scores_table,
    set_cnn_engine,
    show_progress,
    user_errors,
    warn,
    with_overrides,
    write_json,
    write_jsonl,
)
from vsekit.errors import VsekitError, command, printable
from vsekit.resources import CAPTION_RECIPES_DIR, recipe_names

if TYPE_CHECKING:
    from vsekit.retrieval.photos import PhotoFile

_CAPTION_RECIPES = ", ".join(recipe_names(CAPTION_RECIPES_DIR))  # the shipped recipes, for --help


def train_captioner(
    data: Path = typer.Option(..., "--data", help="Corpus with train and dev splits."),
    recipe: str = typer.Option(
        ..., "--recipe", help="A captioning recipe (named above) or a recipe JSON file."
    ),
    out: Path = typer.Option(..., "--out", help="Run directory: captioner, checkpoint, log and config."),
    resume: bool = typer.Option(False, "--resume", help="Continue the run in --out from its last epoch."),
    epochs: int | None = typer.Option(None, "--epochs", min=1, help="Override the recipe's epoch count."),
    seed: int | None = typer.Option(None, "--seed", help="Override the recipe's seed."),
    num_threads: int | None = typer.Option(None, "--num-threads", min=1, help="CPU threads for torch."),
    device: str = typer.Option("auto", "--device", help=DEVICE_HELP),
    engine: str | None = typer.Option(None, "--engine", help=CNN_ENGINE_HELP),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show progress bars."),
    keep_epochs: KeepEpochsOption = False,
) -> None:
    """Train a caption generator; the best epoch on the selection split goes to OUT/captioner.safetensors.

    The selection split is the recipe's dev_split (val1000, a slice of train, in recipes that follow the
    selection protocol; dev in older ones). Image features come from the feature cache (computed on first
    use). Each epoch ends with greedy captions for the selection images scored with BLEU and CIDEr-D.
    Interrupt at any time and rerun with --resume to continue from the last finished epoch.
    Shipped recipes: {recipes}.
    """
    from vsekit.captioning.trainer import load_caption_recipe
    from vsekit.captioning.trainer import train_captioner as run_training
    from vsekit.data import load_corpus

    with user_errors("finished epochs are in the checkpoint; rerun with --resume"):
        set_cnn_engine(engine)
        config = load_caption_recipe(recipe)
        config = with_overrides(config, recipe, epochs=epochs, seed=seed, num_threads=num_threads)
        corpus = load_corpus(data)
        network = "soft-attention LSTM" if config.decoder == "attention" else "m-RNN"
        console.print(
            f"{corpus!r}\nrecipe {config.name}: {network} ({config.cell}, hidden {config.hidden_dim}) on "
            f"{config.backbone} {config.image_features} features, {config.epochs} epochs"
        )
        summary = run_training(corpus, config, out, **run_options(resume, progress, device, keep_epochs))
    best = summary["best_dev"]
    if best is None:
        console.print(f"no dev evaluation yet; checkpoint in {out}")
        return
    console.print(scores_table(f"best dev epoch {summary['best_epoch']} (greedy captions)", best))
    console.print(plain(f"captioner: {summary['model_path']}"), soft_wrap=True)


train_captioner.__doc__ = (train_captioner.__doc__ or "").replace("{recipes}", _CAPTION_RECIPES)


def caption(
    paths: list[Path] | None = typer.Argument(
        None,
        help="Image files or folders of photos to describe (e.g. photos/*.jpg or photos/).",
        show_default=False,
    ),
    image: list[Path] | None = typer.Option(
        None, "--image", help="Image file or folder to describe (repeatable)."
    ),
    data: Path | None = typer.Option(
        None, "--data", help="Corpus: describe every image of --split and score."
    ),
    split: str | None = typer.Option(None, "--split", help=SPLIT_HELP),
    model: str | None = typer.Option(
        None, "--model", help="Captioner: a shipped name (captioner) or a file (default: captioner)."
    ),
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
        help="m-RNN: rerank the beam with the joint embedding, using the weights the captioner carries "
        "(the shipped one's were tuned on a validation slice of Flickr8K train).",
    ),
    guard: bool = typer.Option(
        True,
        "--guard/--no-guard",
        help="m-RNN beam: for photos unlike the captioner's training photos (or sure of a class they never "
        "show), check the caption's objects against the CNN's ImageNet classes and name a class it is sure "
        "of (the concept guard: fewer invented dogs and people on everyday photos).",
    ),
    joint_model: str | None = typer.Option(
        None, "--joint-model", help="Joint embedding for reranking and SC-NLM (name or file; default vse)."
    ),
    n: int = typer.Option(
        1, "--n", min=1, help="Captions per image to print (n-best of the beam, or samples)."
    ),
    temperature: float = typer.Option(1.0, "--temperature", help="Sampling temperature (sample decoding)."),
    length_penalty: float = typer.Option(
        0.0, "--length-penalty", help="Rank beam hypotheses by score / (words+1)^P (0: plain log-prob)."
    ),
    max_len: int = typer.Option(20, "--max-len", min=1, help="Longest caption, in words."),
    no_repeat_ngram: int = typer.Option(
        3,
        "--no-repeat-ngram",
        min=0,
        help='m-RNN: never repeat a sequence of this many words in a caption ("a blue shirt and a blue '
        'shirt"); 0 allows repeats.',
    ),
    train_data: Path | None = typer.Option(
        None, "--train-data", help="nn method: corpus whose train split is searched (default: --data)."
    ),
    backbone: str = typer.Option("mobilenet_v2", "--backbone", help="nn method: CNN for the similarity."),
    features: str = typer.Option(
        "one-layer", "--features", help="nn method: one-layer or fne (Full-Network Embedding) features."
    ),
    json_out: Path | None = typer.Option(
        None, "--json", help="With --data: write the scores to this JSON" + JSON_HELP_SUFFIX + "."
    ),
    out: Path | None = typer.Option(
        None,
        "--out",
        help="Write the captions here as they are done: F.jsonl ({path, captions} per photo, path relative "
        "to the folder given) or F.csv (path, caption; or caption_1 to caption_N); with --data, JSON lines "
        "of the split's captions.",
    ),
    device: str = typer.Option("auto", "--device", help=DEVICE_HELP),
    engine: str | None = typer.Option(None, "--engine", help=CNN_ENGINE_HELP),
    cache_root: Path | None = typer.Option(None, "--cache-root", help=CACHE_ROOT_HELP),
    skip_bad_images: bool = typer.Option(
        False,
        "--skip-bad-images",
        help="With --data: leave unreadable photos out instead of stopping.",
    ),
) -> None:
    """Describe images in words: print captions for --image files, or caption and score a corpus split.

    With --data the captions of every image of --split are scored against the human captions with
    BLEU-1..4, METEOR (needs Java), ROUGE-L and CIDEr-D (x100, as in the papers).
    """
    from vsekit.captioning.generator import METHODS, CaptionGenerator, DecodeSettings
    from vsekit.data import load_corpus

    with user_errors():
        set_cnn_engine(engine)
        if method not in METHODS:
            raise VsekitError(f"unknown --method {method!r}; choose one of {', '.join(METHODS)}")
        image = [*(paths or []), *(image or [])]
        if bool(image) == (data is not None):
            raise VsekitError(
                f"give photos to describe ({command('caption', 'PHOTOS')}: files or folders, or --image IMG) "
                "or a corpus split (--data DIR --split S)"
            )
        if json_out is not None and data is None:
            raise VsekitError("--json needs --data (it holds the scores of a split)")
        settings = DecodeSettings(
            decoding, beam, temperature, length_penalty, max_len, no_repeat_ngram
        ).validate()
        photos = _gather_photos(image) if image else []  # paths checked before any model loads
        if image and method == "nn" and train_data is None:
            raise VsekitError("--method nn needs the training images to search: --train-data DIR")
        if image and out is not None and out.suffix.lower() not in (".jsonl", ".csv"):
            raise VsekitError(f"{printable(str(out))}: --out must end in .jsonl or .csv")
        generator = CaptionGenerator(
            method,
            model,
            settings,
            rerank,
            joint_model,
            nn_features=(backbone, features),
            device=device,
            guard=guard,
        )
        if image:
            if method == "nn":
                assert train_data is not None  # (checked above)
                generator.fit_nn(load_corpus(train_data), "train", cache_root)
            _caption_photos(generator, photos, n, out)
        else:
            assert data is not None  # (images or --data: checked above)
            corpus = load_corpus(data)
            split = split or corpus.default_split()
            if method == "nn":
                generator.fit_nn(load_corpus(train_data) if train_data else corpus, "train", cache_root)
            _caption_split(generator, corpus, split, n, cache_root, json_out, out, skip_bad_images)


#: Photos decoded and captioned together: lines appear as each group is done, memory stays bounded.
STREAM_GROUP = 8


def _gather_photos(paths: list[Path]) -> list[tuple[str, PhotoFile]]:
    """The photos named on the command line, each with the path shown for it: a folder's photos
    (recursive, sorted) relative to that folder, a file as given. A path that does not exist, or a
    folder without a photo, is an error naming what was found; files left out are reported."""
    from vsekit.retrieval.photos import PhotoFile, scan_photos

    found: list[tuple[str, PhotoFile]] = []
    for path in paths:
        if path.is_dir():
            scan = scan_photos(path)
            for image_id, reason in scan.skipped.items():
                warn(f"{printable(str(path / image_id))}: {reason}")
            if not scan.photos:
                raise VsekitError(scan.nothing_to_index())
            found.extend((photo.id, photo) for photo in scan.photos)
        elif path.exists() or path.is_symlink():
            found.append((str(path), PhotoFile(str(path), path, 0, 0)))  # read_photo checks its type
        else:
            raise VsekitError(f"{printable(str(path))}: no such image file or folder")
    return found


@dataclass
class _CaptionSink:
    """Where captions go as they are done: the terminal, or a JSONL / CSV file (flushed per group)."""

    n: int
    file: IO[str] | None = None
    csv_writer: Any = None

    @classmethod
    @contextmanager
    def open(cls, out: Path | None, n: int) -> Iterator[_CaptionSink]:
        if out is None:
            yield cls(n)
            return
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            f = open(out, "w", encoding="utf-8", newline="")
        except OSError as exc:
            raise VsekitError(f"{printable(str(out))}: cannot write ({exc.strerror or exc})") from None
        with f:
            sink = cls(n, f)
            if out.suffix.lower() == ".csv":
                sink.csv_writer = csv.writer(f)
                columns = ["caption"] if n == 1 else [f"caption_{k}" for k in range(1, n + 1)]
                sink.csv_writer.writerow(["path", *columns])
            yield sink

    def put(self, path: str, captions: list[str]) -> None:
        path = printable(path)
        if self.csv_writer is not None:
            self.csv_writer.writerow([path, *captions, *[""] * (self.n - len(captions))])
        elif self.file is not None:
            self.file.write(json.dumps({"path": path, "captions": captions}, ensure_ascii=False) + "\n")
        else:
            console.print(plain(path, "bold"), soft_wrap=True)  # a path must stay copyable
            for k, text in enumerate(captions, start=1):
                console.print(plain(f"  {k}. {text}" if len(captions) > 1 else f"  {text}"), soft_wrap=True)

    def flush(self) -> None:
        (self.file or sys.stdout).flush()


def _caption_photos(generator, photos: list[tuple[str, PhotoFile]], n: int, out: Path | None) -> None:  # noqa: ANN001
    """Caption ``photos`` a group at a time, each group's lines written as soon as it is done; an
    unreadable photo is reported (and left out of --out) and the others go on."""
    from tqdm.auto import tqdm

    from vsekit.retrieval.photos import read_photo

    failed = 0
    # a bar with --out; on the terminal the captions themselves show the progress
    quiet_bar = out is None or not show_progress() or len(photos) < 2
    bar = tqdm(total=len(photos), desc="captioning", unit="img", disable=quiet_bar)
    with bar, _CaptionSink.open(out, n) as sink:
        for start in range(0, len(photos), STREAM_GROUP):
            group, pictures = [], []
            for shown, photo in photos[start : start + STREAM_GROUP]:
                _, picture, error = read_photo(photo)
                if picture is None:
                    failed += 1
                    assert error is not None  # read_photo gives a picture or an error
                    with bar.external_write_mode():
                        warn(error, "unreadable")
                else:
                    group.append(shown)
                    pictures.append(picture)
            captions = generator.describe(pictures, n) if pictures else []
            with bar.external_write_mode():
                for shown, texts in zip(group, captions, strict=True):
                    sink.put(shown, texts)
                sink.flush()
            bar.update(len(photos[start : start + STREAM_GROUP]))
    if failed:
        err_console.print(f"{failed} of {len(photos)} image(s) could not be read")
        if failed == len(photos):
            raise typer.Exit(code=2)
    if out is not None:
        console.print(plain(f"captions of {len(photos) - failed} photo(s) written to {out}"), soft_wrap=True)


def _caption_split(generator, corpus, split: str, n: int, cache_root, json_out, out, skip: bool) -> None:  # noqa: ANN001
    from vsekit.captioning.evaluate import caption_split

    done = caption_split(generator, corpus, split, n, skip_bad_images=skip, cache_root=cache_root)
    if out is not None:
        rows = [
            {"image": i, "caption": caps[0], "n_best": caps}
            for i, caps in zip(done.image_ids, done.generated, strict=True)
        ]
        write_jsonl(out, rows)
    if json_out is not None:
        write_json(json_out, done.result)
    console.print(
        scores_table(
            f"{corpus.name} {split}: {len(done.image_ids)} images, {generator.describe_settings()}",
            done.result,
        )
    )
    if done.result["in_training_set"] is not None:
        console.print(
            f"{done.result['in_training_set']:.1f}% of the captions occur verbatim in the training set"
        )
    best = done.best
    for i in done.image_ids[:3]:
        human = plain(f"  (human: {done.references[i][0]})", "dim")
        console.print(plain(i, "bold") + plain(f": {best[i]}") + human, soft_wrap=True)
    if json_out is not None:
        console.print(f"scores written to {json_out}")


def train_scnlm(
    data: Path = typer.Option(
        ..., "--data", help="Corpus with a train split (and a dev split for selection)."
    ),
    recipe: str = typer.Option("scnlm", "--recipe", help="SC-NLM recipe name (scnlm) or recipe JSON file."),
    out: Path = typer.Option(..., "--out", help="Run directory: scnlm.safetensors, checkpoint, log, config."),
    joint_model: str | None = typer.Option(
        None, "--joint-model", help="Joint embedding that conditions the SC-NLM (name or file; default vse)."
    ),
    resume: bool = typer.Option(False, "--resume", help="Continue the run in --out from its last epoch."),
    epochs: int | None = typer.Option(None, "--epochs", min=1, help="Override the recipe's epoch count."),
    seed: int | None = typer.Option(None, "--seed", help="Override the recipe's seed."),
    num_threads: int | None = typer.Option(None, "--num-threads", min=1, help="CPU threads for torch."),
    device: str = typer.Option("auto", "--device", help=DEVICE_HELP),
    engine: str | None = typer.Option(None, "--engine", help=CNN_ENGINE_HELP),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show progress bars."),
    keep_epochs: KeepEpochsOption = False,
) -> None:
    """Train the structure-content neural language model (Kiros et al. 2014, sec. 2.4) on a corpus.

    Captions are POS-tagged with spaCy and conditioned on their own embedding in the joint space; the
    epoch with the best dev perplexity goes to OUT/scnlm.safetensors. Interrupt at any time and rerun
    with --resume to continue from the last finished epoch. Describe images with it:
    `vsekit caption --method scnlm --model OUT/scnlm.safetensors --image photo.jpg`.
    """
    from vsekit.captioning.scnlm_trainer import load_scnlm_recipe, train_scnlm_run
    from vsekit.data import load_corpus
    from vsekit.embedding.pipeline import VSEModel

    with user_errors("finished epochs are in the checkpoint; rerun with --resume"):
        set_cnn_engine(engine)
        config = load_scnlm_recipe(recipe)
        config = with_overrides(config, recipe, epochs=epochs, seed=seed, num_threads=num_threads)
        corpus = load_corpus(data)
        console.print(f"{corpus!r}\nrecipe {config.name}: SC-NLM, {config.epochs} epochs")
        joint = VSEModel.load(joint_model, device=device).network
        options = run_options(resume, progress, device, keep_epochs)
        summary = train_scnlm_run(corpus, config, out, joint_model=joint, **options)
    console.print(
        f"best dev epoch {summary['best_epoch']} of {summary['epochs_completed']} "
        f"(dev perplexity {summary['best_dev_ppl']:.2f})"
    )
    console.print(plain(f"SC-NLM: {summary['model_path']}"), soft_wrap=True)
