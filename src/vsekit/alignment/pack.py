"""Several trained MiniLM-token aligners packed into one wider aligner of the same file format.

Member m has region vectors ``v^m_i = P_m x_i + p_m`` and word vectors ``s^m_t`` from its head
``ReLU(W_d^m ReLU(W_e^m LN_m(x_t) + b_e^m) + b_d^m)``. Stacking the members' rows gives one aligner of
width ``sum h_m`` whose word-region dot product is the sum of the members' ones,

    v_i . s_t = sum_m v^m_i . s^m_t,

so its S_kl (Eq. 8) is ``sum_t max_i sum_m v^m_i . s^m_t``: one max over the regions for the summed
evidence (not the average of the members' S_kl). Each member's LayerNorm affine is folded into its
``W_e`` (``W_e (g * xhat + b) + b_e = (W_e diag g) xhat + (W_e b + b_e)``), so the packed model keeps one
LayerNorm with unit gain and zero bias; ``W_d`` becomes block diagonal. Only the MiniLM-token "mlp" head
packs this way (a BRNN's recurrence does not split into blocks through one module).

Members whose MiniLM top layers were tuned (``finetune_last``) read different word states ``x^m_t``: the
packed word encoder keeps each member's tuned layers as a *tower* over the shared frozen bottom, normalises
each tower's pooled states, and its ``W_e`` is block diagonal over the towers' concatenated states (frozen
members share one ``x_t``, so their ``W_e`` rows are stacked instead). The dots are the members' sums
either way.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

from vsekit.alignment.model import RegionAligner, load_aligner
from vsekit.errors import VsekitError
from vsekit.text.encoders import no_pretrained_init
from vsekit.training import EPOCHS_DIR, read_checkpoint

if TYPE_CHECKING:
    from vsekit.text.minilm_tokens import MiniLMWordEncoder

__all__ = ["as_half_file", "kept_epoch", "pack_aligners"]


def kept_epoch(
    run: str | os.PathLike[str], epoch: int, snapshots: Sequence[str | os.PathLike[str]] = ()
) -> RegionAligner:
    """Epoch ``epoch`` of the aligner run ``run`` (trained with ``--keep-epochs``), a member to pack: the
    run's aligner file's architecture with the weights of the kept checkpoint ``epochs/ep<epoch>.pt``,
    looked up in ``run`` and then in ``snapshots`` (earlier copies of a branched run's epochs)."""
    model, _ = load_aligner(Path(run) / "aligner.safetensors")
    for where in (run, *snapshots):
        path = Path(where) / EPOCHS_DIR / f"ep{epoch}.pt"
        if path.is_file():
            ckpt = read_checkpoint(path, "aligner")
            if ckpt["epoch"] != epoch:
                raise VsekitError(f"{path}: holds epoch {ckpt['epoch']}, not {epoch}")
            model.load_state_dict(ckpt["model"])
            return model.eval()
    where = f"{EPOCHS_DIR}/ep{epoch}.pt"
    raise VsekitError(f"{run}: no kept copy of epoch {epoch} ({where}; train with --keep-epochs)")


def _check(models: Sequence[RegionAligner]) -> None:
    if len(models) < 2:
        raise VsekitError("packing needs at least two aligners")
    first = models[0].config
    for k, model in enumerate(models):
        words = model.config["words"]
        if words.get("kind") != "minilm" or words.get("head") != "mlp":
            raise VsekitError(f"aligner {k}: only MiniLM-token aligners with the mlp head can be packed")
        if words.get("finetune_last", 0) != first["words"].get("finetune_last", 0):
            raise VsekitError(f"aligner {k}: tunes another number of MiniLM layers than the first aligner")
        for key in ("regions", "image_dim", "score"):
            if model.config[key] != first[key]:
                raise VsekitError(f"aligner {k}: field '{key}' differs from the first aligner's")


def _head(words: object) -> tuple[MiniLMWordEncoder, nn.Linear]:
    """An aligner's MiniLM-token word encoder and its mlp head's W_d (:func:`_check` made sure of both)."""
    from vsekit.text.minilm_tokens import MiniLMWordEncoder

    assert isinstance(words, MiniLMWordEncoder) and words.w_d is not None
    return words, words.w_d


@torch.no_grad()
def pack_aligners(models: Sequence[RegionAligner]) -> RegionAligner:
    """One aligner whose word-region dots are the sums of the members' (see the module docstring)."""
    _check(models)
    first = models[0]
    width = sum(m.config["embed_dim"] for m in models)
    tuned = int(first.config["words"].get("finetune_last", 0))
    towers = sum(_head(m.words)[0].towers for m in models) if tuned else 1
    with no_pretrained_init():
        packed = RegionAligner(
            first.vocab,
            first.config["regions"],
            first.config["image_dim"],
            width,
            score=first.config["score"],
            words="minilm",
            word_head="mlp",
            finetune_last=tuned,
            word_towers=towers,
        )
    packed.project.weight.copy_(torch.cat([m.project.weight for m in models]))
    packed.project.bias.copy_(torch.cat([m.project.bias for m in models]))
    words, w_d = _head(packed.words)
    heads = [_head(m.words) for m in models]
    words.norm.weight.fill_(1.0)
    words.norm.bias.zero_()
    w_e, b_e = [], []
    for m, _ in heads:  # a member's LayerNorm acts on each of its towers' 384 values alike
        gain, shift = m.norm.weight.repeat(m.towers), m.norm.bias.repeat(m.towers)
        w_e.append(m.w_e.weight * gain[None, :])
        b_e.append(m.w_e.weight @ shift + m.w_e.bias)
    words.w_e.weight.copy_(torch.block_diag(*w_e) if tuned else torch.cat(w_e))
    words.w_e.bias.copy_(torch.cat(b_e))
    if tuned:  # the members' tuned layers, tower after tower
        assert words.layers is not None
        mine = [layer for m, _ in heads for layer in m.layers or ()]
        for target, layer in zip(words.layers, mine, strict=True):
            target.load_state_dict(layer.state_dict())
    w_d.weight.copy_(torch.block_diag(*[d.weight for _, d in heads]))
    w_d.bias.copy_(torch.cat([d.bias for _, d in heads]))
    return packed.eval()


@torch.no_grad()
def as_half_file(models: Sequence[RegionAligner]) -> RegionAligner:
    """The aligner a float16 file of ``models`` gives back: packed (one model copied), each weight its file
    keeps rounded to float16, exactly what ``save_aligner(half=True)`` and then ``load_aligner`` return. A
    split ranked on it is ranked on the file before the file is written, so its numbers go into the file's
    header in one write. ``models`` are left as they are."""
    model = pack_aligners(models) if len(models) > 1 else copy.deepcopy(models[0])
    state = model.state_dict()
    model.load_state_dict({k: v.half().float() if v.is_floating_point() else v for k, v in state.items()})
    return model.eval()
