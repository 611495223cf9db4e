"""The text side of a joint model as one ONNX graph, so that a search needs no torch (the export half).

A sentence query costs one frozen MiniLM pass and a small head; in a fresh process, importing torch and
transformers and building the BERT model cost five times what the pass does (bench/results/cold_start.json).
This exports that whole path, word pieces in, both vectors a search uses out:

    input_ids, attention_mask [n, T]  ->  sentence [n, 384]  MiniLM's mean-pooled states, the concept
                                                             route's input (retrieval/concepts.py)
                                      ->  joint [n, D]       ``network.encode_texts``: the head(s), unit
                                                             norm, an ensemble's members packed

and checks the graph against the PyTorch model on :data:`CHECK_TEXTS` through ONNX Runtime and the same
tokenizer the runtime uses (:mod:`vsekit.retrieval.text_engine` owns the cached file and runs it). A
MiniLM text side can be exported, frozen or with its top layers tuned (``finetune_last``): then the
frozen bottom runs once and feeds both the tuned layers of each ensemble member (``joint``) and the
pretrained copies of those layers (``sentence``: the concept route reads the pretrained MiniLM's sentence
space, whatever the joint model tuned). A word-based encoder has its own vocabulary and no such graph.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from torch import nn

from vsekit.embedding.model import EnsembleEmbedding, JointEmbedding
from vsekit.fileio import atomic_write_bytes
from vsekit.text.pretrained import MiniLMEncoder, mean_pool, run_layers

__all__ = ["CHECK_TEXTS", "OPSET", "exportable", "export_text_tower"]

logger = logging.getLogger(__name__)

#: The ONNX opset of the graph (the TorchScript exporter's, as the image engine's).
OPSET = 17
#: Sentences the exported graph must reproduce: short and long (cut at the model's length), cased,
#: accented, with digits and punctuation, and not English.
CHECK_TEXTS: tuple[str, ...] = (
    "a dog on the beach",
    "A Black Dog Runs Across The Grass, Chasing A Red Ball!",
    "two people sit at a café table with 3 cups of coffee",
    "un chat noir dort sur le canapé",
    "x",
    " ".join(["a child in a yellow raincoat jumps into a puddle"] * 40),
)

Tokenize = Callable[[Sequence[str]], tuple[np.ndarray, np.ndarray]]


def exportable(network: nn.Module) -> bool:
    """Whether ``network``'s text side is MiniLM with a head (the graph this module exports)."""
    encoder = getattr(network, "text_encoder", None)
    return isinstance(network, JointEmbedding | EnsembleEmbedding) and isinstance(encoder, MiniLMEncoder)


def _pretrained(encoder: MiniLMEncoder) -> MiniLMEncoder:
    """``encoder`` itself when its transformer is frozen, else a frozen MiniLM beside it (the reference of
    the ``sentence`` output)."""
    return encoder if not encoder.finetune_last else MiniLMEncoder(output_dim=1, head="linear")


class _TextTower(nn.Module):
    """Word pieces -> (sentence, joint): the frozen transformer, its mean pooling and the joint head; with
    tuned top layers, the frozen bottom feeds them and their pretrained copies (module docstring)."""

    def __init__(self, network: JointEmbedding | EnsembleEmbedding) -> None:
        super().__init__()
        self.network = network
        encoder = network.text_encoder
        assert isinstance(encoder, MiniLMEncoder)
        self.transformer = encoder.transformer
        tuned = encoder.finetune_last
        self.pretrained_top: nn.ModuleList | None = None
        if tuned:
            stack = cast(nn.ModuleList, _pretrained(encoder).transformer.get_submodule("encoder.layer"))
            self.pretrained_top = nn.ModuleList(list(stack)[-tuned:])

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
        states = self.transformer(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=torch.zeros_like(input_ids)
        ).last_hidden_state
        if self.pretrained_top is None:
            sentence = mean_pool(states, attention_mask)
            return sentence, self.network.encode_texts(sentence=sentence)
        sentence = mean_pool(run_layers(self.pretrained_top, states, attention_mask), attention_mask)
        return sentence, self.network.encode_texts(states=states, mask=attention_mask)


def export_text_tower(
    network: JointEmbedding | EnsembleEmbedding, path: Path, tokenize: Tokenize, run: Callable[[bytes], Any]
) -> tuple[bytes, dict[str, Any]]:
    """Export ``network``'s text side to ``path`` (atomically) and check it: ``tokenize(texts)`` gives the
    ``(input_ids, attention_mask)`` the runtime feeds, ``run(graph bytes)(ids, mask)`` the runtime's
    ``(sentence, joint)``. Returns the graph's bytes and the check: the largest differences from the
    PyTorch model on :data:`CHECK_TEXTS`, and the identity the sentence vectors are cached under."""
    tower = _TextTower(network).eval().float()
    ids, mask = tokenize(["a dog", "a photo of a cat"])
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        with warnings.catch_warnings(), torch.no_grad():  # the TorchScript exporter's notices
            warnings.simplefilter("ignore")
            torch.onnx.export(
                tower,
                (torch.from_numpy(ids), torch.from_numpy(mask)),
                str(tmp),
                input_names=["input_ids", "attention_mask"],
                output_names=["sentence", "joint"],
                dynamic_axes={
                    "input_ids": {0: "batch", 1: "pieces"},
                    "attention_mask": {0: "batch", 1: "pieces"},
                    "sentence": {0: "batch"},
                    "joint": {0: "batch"},
                },
                opset_version=OPSET,
                dynamo=False,
            )
        data = tmp.read_bytes()
    finally:
        tmp.unlink(missing_ok=True)
    check = _compare(network, run(data), tokenize)
    atomic_write_bytes(path, data)
    logger.info("exported the text side of the joint model to %s", path)
    return data, check


def _compare(network: JointEmbedding | EnsembleEmbedding, graph: Any, tokenize: Tokenize) -> dict[str, Any]:
    """The exported ``graph`` against PyTorch on :data:`CHECK_TEXTS` (each vector's largest difference)."""
    encoder = network.text_encoder
    assert isinstance(encoder, MiniLMEncoder)
    pretrained = _pretrained(encoder)
    texts = list(CHECK_TEXTS)
    with torch.no_grad():
        sentence = pretrained.prepare(texts)["sentence"].numpy()
        joint = network.eval().encode_texts(**encoder.prepare(texts)).float().numpy()
    got_sentence, got_joint = graph(*tokenize(texts))
    return {
        "texts": len(texts),
        "sentence_max_abs_diff": float(np.abs(got_sentence - sentence).max()),
        "joint_max_abs_diff": float(np.abs(got_joint - joint).max()),
        "sentence_identity": pretrained.identity(),
    }
