"""A training run's directory: ``config.json``, ``log.jsonl``, ``checkpoint.pt`` and the best model.

Every write of a run goes through :class:`RunDir`, and each asks :func:`is_main_process` first, so with
several data-parallel ranks only rank 0 touches the files.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vsekit.errors import VsekitError
from vsekit.fileio import atomic_write_bytes, atomic_write_text
from vsekit.training.checkpoint import read_checkpoint, save_checkpoint
from vsekit.training.distributed import broadcast_from_main, is_main_process

__all__ = ["CHECKPOINT_NAME", "CONFIG_NAME", "EPOCHS_DIR", "LOG_NAME", "RunDir"]

CHECKPOINT_NAME = "checkpoint.pt"
LOG_NAME = "log.jsonl"
CONFIG_NAME = "config.json"
EPOCHS_DIR = "epochs"  # the kept copies of each epoch (keep_epochs)

if TYPE_CHECKING:
    from vsekit.training.recipe import Recipe


class RunDir:
    """The files of one run of a ``kind`` trainer ("joint-embedding", "captioner", "scnlm").

    With ``keep_epochs`` every epoch's checkpoint is also kept as ``epochs/ep<N>.pt``, and the best model
    file as it stood after that epoch as ``epochs/best-after-ep<N><suffix>`` (``model_name``'s suffix):
    what choosing an epoch or an ensemble member afterwards needs (the run itself keeps only the last
    checkpoint and the best model)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        kind: str,
        keep_epochs: bool = False,
        model_name: str | None = None,
    ) -> None:
        self.path = Path(path)
        self.kind = kind
        self.checkpoint_path = self.path / CHECKPOINT_NAME
        self.log_path = self.path / LOG_NAME
        self.keep_epochs, self.model_name = keep_epochs, model_name

    def open(self, resume: bool) -> dict[str, Any] | None:
        """The checkpoint to resume from (None: a fresh run). Without ``resume`` an existing checkpoint is
        an error, so a run is never overwritten by accident. With several ranks rank 0 reads it and every
        rank gets its copy (the run directory need not be on a filesystem the other machines share)."""
        return broadcast_from_main(self._open, resume)

    def _open(self, resume: bool) -> dict[str, Any] | None:
        if not self.checkpoint_path.exists():
            return None
        if not resume:
            raise VsekitError(
                f"{self.path} already holds a training run ({CHECKPOINT_NAME}); pass --resume to continue "
                "it or choose another --out"
            )
        return read_checkpoint(self.checkpoint_path, self.kind)

    def start(self, config: dict[str, Any], epoch: int) -> list[dict[str, Any]]:
        """Write ``config.json`` and cut the log back to epochs 1..``epoch`` (what the checkpoint holds);
        returns those log entries."""
        history = read_log(self.log_path, upto=epoch)
        if is_main_process():
            self.path.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.path / CONFIG_NAME, json.dumps(config, indent=2) + "\n")
            atomic_write_text(self.log_path, "".join(json.dumps(e) + "\n" for e in history))
        return history

    def append_log(self, entry: dict[str, Any]) -> None:
        if is_main_process():
            with open(self.log_path, "a", encoding="utf-8") as f:
                f.write(json.dumps(entry) + "\n")

    def save_checkpoint(self, state: dict[str, Any]) -> None:
        if is_main_process():
            save_checkpoint(state, self.checkpoint_path, self.kind)
            if self.keep_epochs:
                self._keep(int(state["epoch"]))

    def _keep(self, epoch: int) -> None:
        """Copies of the checkpoint just written and of the best model, for epoch ``epoch``."""
        folder = self.path / EPOCHS_DIR
        folder.mkdir(exist_ok=True)
        atomic_write_bytes(folder / f"ep{epoch}.pt", self.checkpoint_path.read_bytes())
        best = self.path / self.model_name if self.model_name else None
        if best is not None and best.is_file():
            atomic_write_bytes(folder / f"best-after-ep{epoch}{best.suffix}", best.read_bytes())

    def save_model(self, save: Callable[..., Any], *args: Any) -> None:
        """Call ``save(*args)`` (which writes the best model) on the main process only."""
        if is_main_process():
            save(*args)

    def open_checked(self, resume: bool, config: Recipe) -> dict[str, Any] | None:
        """:meth:`open`, then the checkpoint's recipe checked against ``config`` (only its ``RESUMABLE``
        fields may differ: :meth:`Recipe.check_resumable`), before any data is loaded."""
        ckpt = self.open(resume)
        if ckpt is not None:
            config.check_resumable(ckpt["config"], self.checkpoint_path)
        return ckpt


def read_log(path: Path, upto: int) -> list[dict[str, Any]]:
    """Log entries of epochs 1..upto (later lines belong to an epoch whose checkpoint was never written)."""
    if upto == 0 or not path.is_file():
        return []
    entries = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short by a crash
        if isinstance(entry, dict) and isinstance(entry.get("epoch"), int) and entry["epoch"] <= upto:
            entries.append(entry)
    return entries
