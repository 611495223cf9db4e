"""The one training engine: run directory, strict recipes, atomic checkpoints, exact resume, the epoch loop,
and the hooks where data-parallel training plugs in.

The trainers (``vsekit.embedding.trainer``, ``vsekit.alignment.trainer``, ``vsekit.captioning.trainer``,
``vsekit.captioning.scnlm_trainer``, ``vsekit.alignment.region_captions``) fill in :class:`TrainingRun`
with their data, model, one epoch and the dev score; everything that must be the same for all of them
lives here:

- :mod:`~vsekit.training.recipe`: dataclass recipes read strictly from JSON, the resume compatibility check;
- :mod:`~vsekit.training.checkpoint`: the checkpoint format (atomic write, weights-only read, upgrades);
- :mod:`~vsekit.training.rundir`: the run's files, every write gated on the main process;
- :mod:`~vsekit.training.loop`: :func:`fit`, the resumable state, best-epoch selection and early stopping;
- :mod:`~vsekit.training.run`: :class:`TrainingRun`, the run template each trainer fills in (its data,
  model, epoch, dev score and best-model file) and :class:`RunOptions`, the keyword arguments they share;
- :mod:`~vsekit.training.distributed`: torchrun process groups, batch sharding, the cross-rank gather and
  gradient sum (identity at one process).

It sits below the model packages: it imports no embedding, captioning, text or vision code.
"""

from vsekit.training.checkpoint import CHECKPOINT_FORMAT, CHECKPOINT_VERSION, read_checkpoint, save_checkpoint
from vsekit.training.distributed import (
    barrier,
    broadcast_from_main,
    gather_for_loss,
    init_from_env,
    is_main_process,
    main_first,
    rank,
    refuse_data_parallel,
    shard,
    shut_down,
    sync_gradients,
    world_size,
)
from vsekit.training.loop import Selection, TrainState, epoch_bar, fit, resume_message, step_lr
from vsekit.training.recipe import Recipe, field_error, list_recipe_names, load_recipe_file
from vsekit.training.run import RunOptions, TrainingRun, selection_corpus
from vsekit.training.rundir import CHECKPOINT_NAME, CONFIG_NAME, EPOCHS_DIR, LOG_NAME, RunDir, read_log

__all__ = [
    "CHECKPOINT_FORMAT",
    "CHECKPOINT_NAME",
    "CHECKPOINT_VERSION",
    "CONFIG_NAME",
    "EPOCHS_DIR",
    "LOG_NAME",
    "Recipe",
    "RunDir",
    "RunOptions",
    "Selection",
    "TrainState",
    "TrainingRun",
    "barrier",
    "broadcast_from_main",
    "epoch_bar",
    "field_error",
    "fit",
    "gather_for_loss",
    "init_from_env",
    "is_main_process",
    "list_recipe_names",
    "load_recipe_file",
    "main_first",
    "rank",
    "read_checkpoint",
    "read_log",
    "refuse_data_parallel",
    "resume_message",
    "save_checkpoint",
    "selection_corpus",
    "shard",
    "shut_down",
    "step_lr",
    "sync_gradients",
    "world_size",
]
