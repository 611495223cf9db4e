"""What every command shares: the consoles, error handling, JSON output and the result tables."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from vsekit.errors import VsekitError, printable

console = Console()
err_console = Console(stderr=True)

DEVICE_HELP = "auto, cpu, cuda or cuda:N."
CACHE_ROOT_HELP = "Root of the feature cache (default $VSEKIT_CACHE or ~/.cache/vsekit)."
SPLIT_HELP = (
    "Split of --data: default 'test' when the corpus has one, else its only split (a CSV without a "
    "split column has one split, 'all'); join splits with '+'."
)
SKIP_BAD_HELP = "Leave unreadable photos out (each reported) instead of stopping."
MODEL_HELP = "Joint model: a shipped name (vse) or a model file (default: vse, shipped with vsekit)."
RANK_MODEL_HELP = (
    "Model: a shipped name (vse; aligner: S_kl; vse+aligner: the fusion of both), a joint-model or aligner "
    "file, or a fusion JSON file (default: vse)."
)

# Options the commands share (a training run's options, --device, --cache-root): one definition each, so
# their names, checks and help read the same everywhere. A command gives the default in its signature
# (``resume: ResumeOption = False``); a required one (--data) has none.
TrainDataOption = Annotated[Path, typer.Option("--data", help="Corpus with train and dev splits.")]
ResumeOption = Annotated[
    bool, typer.Option("--resume", help="Continue the run in --out from its last checkpoint.")
]
EpochsOption = Annotated[
    int | None, typer.Option("--epochs", min=1, help="Override the recipe's epoch count.")
]
NumThreadsOption = Annotated[int | None, typer.Option("--num-threads", min=1, help="CPU threads for torch.")]
DeviceOption = Annotated[str, typer.Option("--device", help=DEVICE_HELP)]
CacheRootOption = Annotated[Path | None, typer.Option("--cache-root", help=CACHE_ROOT_HELP)]
ProgressOption = Annotated[bool, typer.Option("--progress/--no-progress", help="Show progress bars.")]
KeepEpochsOption = Annotated[
    bool,
    typer.Option(
        "--keep-epochs",
        help="Also keep every epoch's checkpoint and best model under OUT/epochs/ (to pick epochs or "
        "ensemble members afterwards).",
    ),
]
TRAIN_INTERRUPTED = "finished epochs are saved in the checkpoint; run the same command with --resume"


def _one_line_warning(message, category, filename, lineno, line=None) -> str:  # noqa: ANN001 - stdlib hook
    return f"warning: {message}\n"


def install_warning_format() -> None:
    """Print library warnings as one line, not a source excerpt."""
    warnings.formatwarning = _one_line_warning


_quiet = False
_verbose = False


def configure_logging(verbose: bool, quiet: bool) -> None:
    """Library messages (``logging``) on stderr: warnings by default, info with -v, errors only with -q
    (which also turns progress bars off: commands pass ``progress=show_progress()`` to the library)."""
    global _quiet, _verbose
    _quiet, _verbose = quiet, verbose
    level = logging.ERROR if quiet else logging.INFO if verbose else logging.WARNING
    logging.basicConfig(level=level, format="%(levelname)s: %(message)s", force=True)
    if quiet:
        warnings.simplefilter("ignore")


def verbose(requested: bool = False) -> bool:
    """Whether a command says everything it knows: its own --verbose, or ``vsekit -v``."""
    return requested or _verbose


def show_progress(requested: bool = True) -> bool:
    """Whether a command shows progress bars: ``requested`` (its --progress flag) unless -q was given."""
    return requested and not _quiet


def plain(value: object, style: str = "") -> Text:
    """User text (a file name, caption or query) for a rich table cell or line: printed literally, never
    as markup (``[bold red]boom.jpg`` stays that name), file-name bytes that are not UTF-8 as ``\\xNN``."""
    return Text(printable(str(value)), style=style)


def warn(message: str, label: str = "skipped") -> None:
    """``label: message`` on stderr, the label in yellow, the message (user text) literally."""
    err_console.print(Text.assemble((f"{label}:", "yellow"), " ", plain(message)), soft_wrap=True)


def hide_flag_metavars() -> None:
    """Show on/off flags as ``--fne``, not ``--fne <bool>`` (typer's rich help prints the type of every
    option, which reads as if the flag took a value). Cosmetic: a typer without that hook (its help is
    drawn another way) is left as it is, never a reason for the command line not to start."""
    from typer.core import TyperOption

    shown = getattr(TyperOption, "display_type_rich", None)
    if shown is None or getattr(TyperOption, "_vsekit_flags_hidden", False):
        return

    def display_type_rich(self, ctx):  # noqa: ANN001, ANN202 - typer's hook
        return "" if self.is_flag else shown(self, ctx)

    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]  # patches typer's hook
    TyperOption._vsekit_flags_hidden = True  # type: ignore[attr-defined]  # our marker on typer's class


def say(message: str) -> None:
    """A line of a long job's running account (a trainer's epoch lines), above any progress bar; -q hides
    it."""
    if not _quiet:
        from tqdm.auto import tqdm

        tqdm.write(message)


def run_options(resume: bool, progress: bool, device: str, keep_epochs: bool) -> dict[str, Any]:
    """What every train command hands its trainer (:class:`vsekit.training.RunOptions`): resume, progress
    bars (only on a terminal), the device, each epoch's line said on the console, and the kept epochs."""
    return {
        "resume": resume,
        "progress": show_progress(progress),
        "device": device,
        "log": say,
        "keep_epochs": keep_epochs,
    }


def fail(exc: Exception) -> None:
    """Print ``exc`` as one red line and exit with status 2 (its text verbatim: ``[x]`` is no markup)."""
    err_console.print(f"[bold red]error:[/] {escape(printable(str(exc)))}", highlight=False, soft_wrap=True)
    raise typer.Exit(code=2)


@contextlib.contextmanager
def user_errors(interrupted: str | None = None) -> Iterator[None]:
    """Turn a VsekitError, or an OS error on a path the user gave (cache, output, model, data), into one
    line + exit 2, and Ctrl-C into ``interrupted`` + exit 130."""
    try:
        yield
    except VsekitError as exc:
        fail(exc)
    except OSError as exc:
        where = printable(str(exc.filename)) if exc.filename is not None else "a file"
        fail(VsekitError(f"{where}: {exc.strerror or exc} (check the path and its permissions)"))
    except KeyboardInterrupt:
        if interrupted is None:
            raise
        err_console.print(f"interrupted: {interrupted}")
        raise typer.Exit(code=130) from None


def with_overrides(config: Any, recipe: str, **values: Any) -> Any:
    """``config`` with the command-line overrides that were given (None = not given), validated."""
    given = {k: v for k, v in values.items() if v is not None}
    return dataclasses.replace(config, **given).validate(f"recipe {recipe!r}")


JSON_HELP_SUFFIX = " (an existing file is overwritten)"


def rounded(value: Any, digits: int = 2) -> Any:
    """``value`` with every float rounded to ``digits`` decimals (JSON for people: no float noise)."""
    if isinstance(value, float):
        return round(value, digits)
    if isinstance(value, dict):
        return {k: rounded(v, digits) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [rounded(v, digits) for v in value]
    return value


def write_json(path: Path, payload: object) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise VsekitError(f"{path}: cannot write JSON ({exc.strerror or exc})") from None


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(row) + "\n" for row in rows)
    except OSError as exc:
        raise VsekitError(f"{path}: cannot write ({exc.strerror or exc})") from None


def read_caption_lines(path: Path) -> list[str]:
    """Candidate captions from a text file, one per line (blank lines skipped)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise VsekitError(f"{path}: captions file does not exist") from None
    except UnicodeDecodeError as exc:
        raise VsekitError(f"{path}: not UTF-8 text ({exc.reason})") from None
    texts = [line.strip() for line in lines if line.strip()]
    if not texts:
        raise VsekitError(f"{path}: no captions (expected one caption per line)")
    return texts


def metrics_table(title: str, result: dict) -> Table:
    """Recall@K / median / mean rank in both directions, rsum as the caption."""
    table = Table(title=title, header_style="bold")
    table.add_column("direction")
    for name in ("R@1", "R@5", "R@10", "Med r", "Mean r"):
        table.add_column(name, justify="right")
    for key, label in (("i2t", "image annotation (i2t)"), ("t2i", "image search (t2i)")):
        m = result[key]
        table.add_row(
            label,
            f"{m['r1']:.1f}",
            f"{m['r5']:.1f}",
            f"{m['r10']:.1f}",
            f"{m['medr']:g}",
            f"{m['meanr']:.1f}",
        )
    table.caption = f"rsum {result['rsum']:.1f}"
    return table


def scores_table(title: str, scores: dict[str, Any]) -> Table:
    """Caption metrics (x100) in one row."""
    table = Table(title=title, header_style="bold")
    names = ("bleu1", "bleu2", "bleu3", "bleu4", "meteor", "rouge_l", "cider")
    labels = ("B-1", "B-2", "B-3", "B-4", "METEOR", "ROUGE-L", "CIDEr-D")
    for label in labels:
        table.add_column(label, justify="right")
    table.add_row(*("-" if scores.get(n) is None else f"{scores[n]:.1f}" for n in names))
    return table


CNN_ENGINE_HELP = (
    "Engine running the CNN for image features: auto (ONNX Runtime when installed, else PyTorch), "
    "onnxruntime, onnxruntime-int8 (quantised: faster on CPU, slightly different numbers, cached apart) "
    "or torch (default: $VSEKIT_ENGINE, else auto)."
)


def set_cnn_engine(engine: str | None) -> None:
    """The engine every feature extraction of this command uses: ``--engine``, else ``$VSEKIT_ENGINE``,
    else auto (set on every command, so one command's choice does not outlive it in a shared process)."""
    from vsekit.vision.engine import set_default_engine

    set_default_engine(engine or os.environ.get("VSEKIT_ENGINE") or "auto")
