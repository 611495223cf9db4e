"""A trained captioner as one object and one file: network, vocabulary, image spec, FNE statistics.

The network is the m-RNN (:mod:`vsekit.captioning.mrnn`, one pooled vector per photo) or the soft-attention
LSTM (:mod:`vsekit.captioning.attention`, the grid of the last conv map); both decode through the same
step interface, so everything here serves either.

The file is safetensors: ``model.<param>`` tensors (float16 when ``half``), ``fne.mean``/``fne.m2`` in
float64 for FNE-conditioned captioners, and JSON header fields ``format`` (``vsekit.captioner``),
``format_version``, ``method`` (``mrnn`` or ``attention``: the network), ``config`` (its architecture),
``image`` (backbone, feature kind, dimension), ``vocab``, ``fne``, ``decoding`` (defaults) and ``extra``
(recipe, dev scores, ...).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vsekit.captioning.attention import SoftAttentionCaptioner, SoftAttentionConfig
from vsekit.captioning.decode import Caption, beam_search, greedy, sample
from vsekit.captioning.mrnn import MultimodalRNN, MultimodalRNNConfig
from vsekit.data.vocab import Vocabulary
from vsekit.errors import VsekitError
from vsekit.fileio import atomic_save_safetensors, read_vsekit_safetensors
from vsekit.vision.fne import FullNetworkEmbedding

__all__ = [
    "CAPTIONER_FORMAT",
    "DECODINGS",
    "CaptionNet",
    "MRNNCaptioner",
    "load_captioner",
    "network_method",
    "save_captioner",
]

CAPTIONER_FORMAT = "vsekit.captioner"
CAPTIONER_FORMAT_VERSION = 1
DECODINGS = ("beam", "greedy", "sample")

#: The step-wise caption networks a captioner file can hold.
CaptionNet = MultimodalRNN | SoftAttentionCaptioner


def network_method(model: CaptionNet) -> str:
    """The file's ``method`` field for ``model``: ``mrnn`` or ``attention``."""
    return "attention" if isinstance(model, SoftAttentionCaptioner) else "mrnn"


@dataclass
class MRNNCaptioner:
    """A step-wise caption network (the m-RNN or the soft-attention LSTM) with what it needs to turn image
    features into caption strings."""

    model: CaptionNet
    vocab: Vocabulary
    image: dict[str, Any]  # {"backbone", "kind", "image_dim"}: what features the network reads
    fne: FullNetworkEmbedding | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    method = "mrnn"

    @property
    def config(self) -> dict[str, Any]:
        """``{"image": spec}``: the shape :func:`vsekit.vision.features_for_model` reads from ``config``."""
        return {"image": self.image}

    def decode(
        self,
        features: torch.Tensor | np.ndarray,
        decoding: str = "beam",
        beam_size: int = 3,
        max_len: int = 20,
        length_penalty: float = 0.0,
        temperature: float = 1.0,
        n_best: int = 1,
        batch_size: int = 256,
        generator: torch.Generator | None = None,
        word_bias: torch.Tensor | None = None,
        prefix: torch.Tensor | None = None,
        no_repeat_ngram: int = 0,
        once: torch.Tensor | None = None,
    ) -> list[list[Caption]]:
        """Decoded captions per image (``n_best`` for beam search, one otherwise), best first.

        Beam search only: ``word_bias`` ``[n, V]`` added to each step's log-probabilities, ``prefix``
        ``[n, P]`` forced first words, ``once`` ``[V]`` words said at most once
        (:func:`vsekit.captioning.decode.beam_search`). Every decoding:
        ``no_repeat_ngram`` N > 0 bars a word that would repeat an N-word sequence of the caption."""
        if decoding not in DECODINGS:
            raise VsekitError(f"unknown decoding {decoding!r}; known: {', '.join(DECODINGS)}")
        x = torch.as_tensor(np.asarray(features))
        if x.ndim != 2 or x.shape[1] != self.image["image_dim"]:
            raise VsekitError(
                f"image features have shape {tuple(x.shape)}; this captioner reads "
                f"{self.image['image_dim']}-d {self.image['backbone']} {self.image['kind']} features"
            )
        self.model.eval()
        out: list[list[Caption]] = []
        for start in range(0, x.shape[0], batch_size):
            chunk = x[start : start + batch_size].to(self.model.device)
            if decoding == "beam":
                rows = slice(start, start + batch_size)
                bias = None if word_bias is None else word_bias[rows]
                forced = None if prefix is None else prefix[rows]
                settings = (beam_size, max_len, length_penalty, n_best, bias, forced, no_repeat_ngram, once)
                out.extend(beam_search(self.model, chunk, *settings))
            elif decoding == "greedy":
                out.extend([c] for c in greedy(self.model, chunk, max_len, no_repeat_ngram))
            else:
                draws = sample(self.model, chunk, temperature, max_len, generator, no_repeat_ngram)
                out.extend([c] for c in draws)
        return out

    def caption(self, features: torch.Tensor | np.ndarray, **decode_kwargs: Any) -> list[str]:
        """The best caption of each image as a string."""
        return [self.text(caps[0]) for caps in self.decode(features, **decode_kwargs)]

    def text(self, caption: Caption) -> str:
        return " ".join(self.vocab.decode(caption.tokens))


def save_captioner(captioner: MRNNCaptioner, path: str | os.PathLike[str], half: bool = False) -> Path:
    """Write ``captioner`` to one safetensors file, atomically (float16 weights when ``half``)."""

    path = Path(path)
    if captioner.image["kind"] == "fne" and captioner.fne is None:
        raise VsekitError(f"{path}: this captioner reads FNE features; it needs its FNE statistics")
    tensors = {}
    for key, value in captioner.model.state_dict().items():
        value = value.detach().cpu()
        tensors[f"model.{key}"] = (value.half() if half and value.is_floating_point() else value).contiguous()
    header = {
        "format": CAPTIONER_FORMAT,
        "format_version": str(CAPTIONER_FORMAT_VERSION),
        "method": network_method(captioner.model),
        "config": json.dumps(captioner.model.config.to_dict()),
        "image": json.dumps(captioner.image),
        "vocab": json.dumps(captioner.vocab.to_dict()),
        "dtype": "float16" if half else "float32",
        "extra": json.dumps(captioner.meta),
        "fne": "null",
    }
    if captioner.fne is not None and captioner.image["kind"] == "fne":
        fne_tensors, fne_meta = captioner.fne.to_tensors(prefix="fne.")
        tensors.update({k: torch.from_numpy(v) for k, v in fne_tensors.items()})
        header["fne"] = json.dumps(fne_meta)
    return atomic_save_safetensors(tensors, path, header)


def load_captioner(path: str | os.PathLike[str], device: str | torch.device = "cpu") -> MRNNCaptioner:
    """Read a file written by :func:`save_captioner` (eval mode, float32 weights).

    A missing file, another kind of safetensors file, a corrupt header or weights that do not fit the
    config are a VsekitError naming ``path``.
    """
    path = Path(path)
    header, tensors = read_vsekit_safetensors(path, CAPTIONER_FORMAT, "captioner", CAPTIONER_FORMAT_VERSION)
    try:
        method, config = header.get("method"), json.loads(header["config"])
        model: CaptionNet
        if method == "mrnn":
            model = MultimodalRNN(MultimodalRNNConfig(**config))
        elif method == "attention":
            model = SoftAttentionCaptioner(SoftAttentionConfig(**config))
        else:
            raise VsekitError(f"{path}: unknown captioner method {method!r}")
        state = {k[len("model.") :]: v.float() for k, v in tensors.items() if k.startswith("model.")}
        model.load_state_dict(state, strict=True)
        vocab = Vocabulary.from_dict(json.loads(header["vocab"]), source=f"{path} (vocab)")
        image = json.loads(header["image"])
        fne_meta = json.loads(header.get("fne", "null"))
        fne = FullNetworkEmbedding.from_tensors(tensors, fne_meta, prefix="fne.") if fne_meta else None
        extra = json.loads(header.get("extra", "{}"))
    except VsekitError:
        raise
    except (KeyError, TypeError, ValueError, RuntimeError, json.JSONDecodeError) as exc:
        raise VsekitError(f"{path}: damaged captioner file ({type(exc).__name__}: {exc})") from exc
    if len(vocab) != model.config.vocab_size:
        raise VsekitError(
            f"{path}: vocabulary has {len(vocab)} words but the network {model.config.vocab_size}"
        )
    model.to(device).eval()
    return MRNNCaptioner(model=model, vocab=vocab, image=image, fne=fne, meta=extra)
