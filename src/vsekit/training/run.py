"""The run template every trainer fills in: one training run, from its recipe to its summary.

A trainer subclasses :class:`TrainingRun` and supplies only what differs: its data (:meth:`load_data`,
:meth:`check_data`), the seeded model and optimiser (:meth:`build`), one epoch (:meth:`epoch_trainer`),
the dev score (:meth:`evaluate`) and how its best model is written (:meth:`save_best`). The template owns
the order of everything else, because that order is what keeps ``resume`` exact:

1. the run directory is opened and a checkpoint's recipe checked, before any data is read;
2. the data is loaded (rank 0 first, so the other ranks read the caches it fills) and checked against
   the checkpoint's;
3. the model is built from the seed, then overwritten by the checkpoint, every RNG state last;
4. the log is cut back to the checkpoint's epochs and :func:`~vsekit.training.loop.fit` runs the rest:
   train, evaluate, keep the best model, log, checkpoint, after each epoch;
5. the summary.

The entry points (``train_aligner``, ``train_captioner``, ...) stay functions; each builds its run and
calls :meth:`TrainingRun.run`. They share the keyword arguments of :class:`RunOptions`.
"""

from __future__ import annotations

import logging
import os
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypedDict, TypeVar

import torch

from vsekit.data.splits import corpus_for_selection
from vsekit.device import resolve_device
from vsekit.training.distributed import is_main_process, main_first, refuse_data_parallel
from vsekit.training.loop import Selection, TrainState, fit, resume_message
from vsekit.training.recipe import Recipe
from vsekit.training.rundir import RunDir

if TYPE_CHECKING:
    from vsekit.data.corpus import Corpus

__all__ = ["RunOptions", "TrainingRun", "selection_corpus"]

C = TypeVar("C", bound=Recipe)  # a trainer's recipe
D = TypeVar("D")  # a trainer's data
M = TypeVar("M", bound=torch.nn.Module)  # the network it trains


class RunOptions(TypedDict, total=False):
    """How to run a training, the keyword arguments every trainer's entry point takes.

    ``resume`` (default False): continue the run in the output directory from its checkpoint (a fresh
    start if there is none yet); the recipe may differ only in its ``RESUMABLE`` fields. Without it an
    existing checkpoint is an error, so a run is never overwritten by accident. ``progress`` (True):
    progress bars. ``device`` ("auto"): where to train. ``log``: receives the per-epoch lines (default:
    the trainer module's logger, at INFO). ``keep_epochs`` (False): keep a copy of every epoch's checkpoint
    and best model under ``epochs/`` (see :class:`~vsekit.training.rundir.RunDir`).
    """

    resume: bool
    progress: bool
    device: str | torch.device
    log: Callable[[str], None] | None
    keep_epochs: bool


class SelectingRecipe(Protocol):
    """What :func:`selection_corpus` reads of a recipe."""

    name: str
    train_split: str
    dev_split: str
    validation_slice: str | None


def selection_corpus(corpus: Corpus, config: SelectingRecipe) -> Corpus:
    """``corpus`` with the recipe's validation slice applied (its ``train-minus-<slice>`` and ``<slice>``
    splits), after checking that the recipe trains on the one and selects on the other."""
    source = f"recipe {config.name!r}"
    return corpus_for_selection(corpus, config.train_split, config.dev_split, config.validation_slice, source)


def _silent(line: str) -> None:
    pass


class TrainingRun(ABC, Generic[C, D, M]):
    """One training run of a recipe into a run directory; subclasses fill in the abstract methods.

    Class attributes a trainer sets: ``kind`` (the checkpoint kind), ``model_name`` (the best model's
    file in the run directory), ``metric`` (the dev score's name in messages), ``higher_is_better``,
    ``score_key`` (the summary key of the best score, if any) and ``single_process`` (what it is and why
    it cannot train data-parallel; None: it can).
    """

    kind: ClassVar[str]
    model_name: ClassVar[str]
    metric: ClassVar[str]
    higher_is_better: ClassVar[bool] = True
    score_key: ClassVar[str | None] = None
    single_process: ClassVar[tuple[str, str] | None] = None

    def __init__(
        self,
        config: C,
        out_dir: str | os.PathLike[str],
        *,
        resume: bool = False,
        progress: bool = True,
        device: str | torch.device = "auto",
        log: Callable[[str], None] | None = None,
        keep_epochs: bool = False,
    ) -> None:
        if self.single_process is not None:  # from the environment: before any process group exists
            refuse_data_parallel(*self.single_process)
        self.config = config.validate()
        self.out = Path(out_dir)
        self.dir = RunDir(self.out, self.kind, keep_epochs=keep_epochs, model_name=self.model_name)
        self.resume = resume
        self.device = resolve_device(device)
        self.progress = progress and is_main_process()  # with several ranks, rank 0 tells the story
        # the default: the trainer's own module logger, so logging configured for it still applies
        default = logging.getLogger(type(self).__module__).info
        self.say = (log if log is not None else default) if is_main_process() else _silent
        self.history: list[dict[str, Any]] = []  # the log entries of the finished epochs

    @property
    def model_path(self) -> Path:
        return self.out / self.model_name

    # -- what a trainer fills in ------------------------------------------------------------------------

    @abstractmethod
    def load_data(self, resumed: bool) -> D:
        """The run's data (``resumed``: a checkpoint is being continued)."""

    def check_data(self, ckpt: dict[str, Any], data: D) -> None:
        """Raise ConfigMismatchError if ``data`` is not what the checkpoint was trained on."""

    @abstractmethod
    def build(self, data: D) -> tuple[M, torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler | None]:
        """The initial model (from the recipe's seed: the same seed builds the same weights), its
        optimiser and learning-rate schedule."""

    @abstractmethod
    def epoch_trainer(self, state: TrainState[M], data: D) -> Callable[[int], dict[str, Any]]:
        """One epoch of training: called with the epoch number, returns that epoch's log fields."""

    @abstractmethod
    def evaluate(self, state: TrainState[M], data: D) -> tuple[float, dict[str, Any]]:
        """The dev score that selects the best epoch, and the dev metrics to log and keep."""

    @abstractmethod
    def save_best(self, state: TrainState[M], data: D, epoch: int, dev: dict[str, Any]) -> None:
        """Write the model of ``epoch``, the best so far, to :attr:`model_path`."""

    @abstractmethod
    def describe(self, entry: dict[str, Any]) -> str:
        """The line an epoch's log ``entry`` is told as."""

    def checkpoint_extra(self, data: D) -> dict[str, Any]:
        """What the checkpoint stores besides the state and the recipe (the data's identity, ...)."""
        return {}

    def summary_extra(self, data: D) -> dict[str, Any]:
        """Fields the summary adds to the template's."""
        return {}

    # -- the template ------------------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        """Train (or resume) to ``config.epochs`` or early stopping; returns the summary."""
        ckpt = self.dir.open_checked(self.resume, self.config)  # a changed recipe fails before data work
        if self.config.num_threads:
            torch.set_num_threads(self.config.num_threads)
        # a first run extracts every photo's features before epoch 1 (minutes): say so, bars or not
        self.say("preparing the data: photo features (extracted and cached on a first run), captions")
        with main_first():  # rank 0 fills the caches, the other ranks read them
            data = self.load_data(resumed=ckpt is not None)
        if ckpt is not None:
            self.check_data(ckpt, data)
        state = self._state(data)
        if ckpt is not None:
            state.load_state_dict(ckpt)  # the RNG states last: nothing between here and fit draws
        self.history = history = self.dir.start(self.config.to_dict(), state.epoch)
        if ckpt is not None:
            self.say(resume_message(self.dir, state, self.metric))
        extra = {"config": self.config.to_dict(), **self.checkpoint_extra(data)}

        def evaluate(epoch: int) -> tuple[float, dict[str, Any]] | None:
            return self.evaluate(state, data) if self._scores(epoch) else None

        def save_best(epoch: int, dev: dict[str, Any]) -> None:
            self.save_best(state, data, epoch, dev)

        train_epoch = self.epoch_trainer(state, data)
        epochs = self.config.epochs
        fit(
            state, self.dir, epochs, train_epoch, evaluate, save_best, extra, self.say, self.describe, history
        )
        return self._summary(state, history) | self.summary_extra(data)

    def _state(self, data: D) -> TrainState[M]:
        model, optimizer, scheduler = self.build(data)
        return TrainState(
            model=model,
            optimizer=optimizer,
            scheduler=scheduler,
            generator=torch.Generator().manual_seed(self.config.seed),  # each epoch's batch order
            selection=Selection(higher_is_better=self.higher_is_better, patience=self.config.patience),
        )

    def _scores(self, epoch: int) -> bool:
        """Dev is scored every ``eval_every`` epochs (for recipes that have the field) and after the last;
        the epochs between have no dev numbers in their log line."""
        every = getattr(self.config, "eval_every", 1)
        return epoch % every == 0 or epoch == self.config.epochs

    def _summary(self, state: TrainState[M], history: list[dict[str, Any]]) -> dict[str, Any]:
        sel = state.selection
        summary: dict[str, Any] = {
            "out_dir": str(self.out),
            "model_path": str(self.model_path),
            "epochs_completed": state.epoch,
            "best_epoch": sel.best_epoch,
        }
        if self.score_key is not None:
            summary[self.score_key] = sel.best_score
        summary.update(best_dev=state.best_dev, stopped_early=sel.stopped_early, history=history)
        return summary
