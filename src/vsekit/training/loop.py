"""The epoch loop every trainer shares: train, step the schedule, evaluate on dev, keep the best model,
log, checkpoint; plus the state that makes ``resume`` exact and the best-epoch / early-stopping rule.

A trainer supplies what differs (one epoch of training, the dev evaluation, how to save its model) as
functions; :func:`fit` owns the order in which state is advanced and saved, which is what makes "2
epochs + resume to 4" give bit for bit the weights of 4 epochs in one go.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import torch
from tqdm.auto import tqdm

from vsekit.rng import rng_state, set_rng_state
from vsekit.training.distributed import barrier, broadcast_from_main, fork_rng
from vsekit.training.rundir import RunDir

__all__ = ["Selection", "TrainState", "epoch_bar", "fit", "resume_message", "step_lr"]

T = TypeVar("T")
M = TypeVar("M", bound=torch.nn.Module)


@dataclass
class Selection:
    """Best epoch by a dev score and early stopping after ``patience`` evaluations without a better one.

    ``higher_is_better``: True for rsum or CIDEr, False for a perplexity. ``patience`` None never stops
    early (the best epoch is still the one kept).
    """

    higher_is_better: bool
    patience: int | None
    best_score: float = math.nan
    best_epoch: int = 0
    bad_evals: int = 0
    stopped_early: bool = False

    def __post_init__(self) -> None:
        if math.isnan(self.best_score):
            self.best_score = -math.inf if self.higher_is_better else math.inf

    def observe(self, epoch: int, score: float) -> bool:
        """Record the dev ``score`` of ``epoch``; True if it is the best so far."""
        if score > self.best_score if self.higher_is_better else score < self.best_score:
            self.best_score, self.best_epoch, self.bad_evals = score, epoch, 0
            return True
        self.bad_evals += 1
        if self.patience is not None and self.bad_evals >= self.patience:
            self.stopped_early = True
        return False

    def state_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("best_score", "best_epoch", "bad_evals", "stopped_early")}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key, value in self.state_dict().items():
            setattr(self, key, type(value)(state[key]))


@dataclass
class TrainState(Generic[M]):
    """Everything the next epoch depends on; ``state_dict`` is what a checkpoint stores of it (``M``: the
    trainer's network)."""

    model: M
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler | None
    generator: torch.Generator  # draws each epoch's order
    selection: Selection
    epoch: int = 0
    best_dev: dict[str, Any] | None = None

    def state_dict(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            **self.selection.state_dict(),
            "best_dev": self.best_dev,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict() if self.scheduler is not None else None,
            "batch_generator": self.generator.get_state(),
            "rng": rng_state(),
        }

    def load_state_dict(self, ckpt: dict[str, Any]) -> None:
        """Restore from a checkpoint (the RNG states last: nothing after this may draw)."""
        self.model.load_state_dict(ckpt["model"])
        self.optimizer.load_state_dict(ckpt["optimizer"])
        if self.scheduler is not None and ckpt.get("scheduler") is not None:
            self.scheduler.load_state_dict(ckpt["scheduler"])
        self.generator.set_state(ckpt["batch_generator"])
        self.selection.load_state_dict(ckpt)
        self.epoch, self.best_dev = int(ckpt["epoch"]), ckpt.get("best_dev")
        set_rng_state(ckpt["rng"])


def step_lr(
    optimizer: torch.optim.Optimizer, every: int | None, gamma: float
) -> torch.optim.lr_scheduler.StepLR | None:
    """Multiply the learning rate by ``gamma`` every ``every`` epochs; None (constant) when ``every`` is."""
    return torch.optim.lr_scheduler.StepLR(optimizer, every, gamma) if every else None


def epoch_bar(items: Iterable[T], epoch: int, epochs: int, progress: bool) -> tqdm[T]:
    """The per-epoch tqdm bar over batches (``set_postfix`` shows the running loss); silent without
    ``progress``."""
    return tqdm(items, desc=f"epoch {epoch}/{epochs}", unit="batch", disable=not progress, leave=False)


def resume_message(run: RunDir, state: TrainState, metric: str) -> str:
    """What a trainer says when it picks up a run."""
    sel = state.selection
    line = f"resuming {run.path} after epoch {state.epoch} (best dev {metric} {sel.best_score:.2f}"
    line += f" at epoch {sel.best_epoch})"
    if sel.stopped_early:
        line += f"; it stopped early after epoch {state.epoch}: nothing left to do"
    return line


Evaluate = Callable[[int], "tuple[float, dict[str, Any]] | None"]


def fit(
    state: TrainState,
    run: RunDir,
    epochs: int,
    train_epoch: Callable[[int], dict[str, Any]],
    evaluate: Evaluate,
    save_best: Callable[[int, dict[str, Any]], None],
    checkpoint_extra: dict[str, Any],
    say: Callable[[str], None],
    describe: Callable[[dict[str, Any]], str],
    history: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    """Run epochs ``state.epoch + 1 .. epochs`` (or until early stopping); returns the full history.

    Per epoch: ``train_epoch(epoch)`` (returns log fields), the scheduler step, ``evaluate(epoch)``
    (``(score, dev metrics)`` or None to skip this epoch), ``save_best`` on a better score, one log line,
    then the checkpoint (with ``checkpoint_extra``: config, vocabulary, ...). A crash inside an epoch
    leaves the previous epoch's checkpoint, and the log line of the lost epoch is dropped on resume.

    With several ranks ``evaluate`` runs on rank 0 and its result is broadcast, so every rank makes the
    same best-epoch and early-stopping decisions; ranks > 0 draw dropout from their own stream
    (:func:`~vsekit.training.distributed.fork_rng`); all ranks leave together, after rank 0 wrote.
    """
    while state.epoch < epochs and not state.selection.stopped_early:
        epoch = state.epoch + 1
        t0 = time.perf_counter()
        fork_rng(state.generator.initial_seed(), epoch)
        entry: dict[str, Any] = {"epoch": epoch, **train_epoch(epoch)}
        if state.scheduler is not None:
            state.scheduler.step()
        result = broadcast_from_main(evaluate, epoch)
        if result is not None:
            score, entry["dev"] = result
            if state.selection.observe(epoch, score):
                state.best_dev, entry["best"] = entry["dev"], True
                run.save_model(save_best, epoch, entry["dev"])
        entry["time_s"] = time.perf_counter() - t0
        history.append(entry)
        run.append_log(entry)
        state.epoch = epoch
        run.save_checkpoint({**state.state_dict(), **checkpoint_extra})
        say(describe(entry))
        if state.selection.stopped_early:
            say(f"early stopping: no better dev score in {state.selection.patience} evaluations")
    barrier()
    return history
