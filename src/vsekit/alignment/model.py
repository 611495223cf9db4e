"""The region-word aligner (Karpathy & Fei-Fei 2015, sec. 3.1): projected regions, BRNN words, S_kl.

:class:`RegionAligner` is the network: ``v_i = W_m CNN(I_b) + b_m`` (Eq. 1) for each region's CNN
features, :class:`~vsekit.text.brnn.BRNNWordEncoder` for the words (Eq. 2-6), and the score of
:mod:`vsekit.alignment.score` (Eq. 8, or Eq. 7). A saved aligner is one safetensors file (format
``vsekit.aligner``) carrying its region spec, its architecture and its vocabulary, so a loaded one
computes its own region features from image files (:class:`Aligner`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from vsekit.alignment.score import SCORES, alignment_scores, word_region_dots
from vsekit.data.vocab import Vocabulary
from vsekit.device import resolve_device
from vsekit.errors import VsekitError
from vsekit.fileio import atomic_save_safetensors, read_vsekit_safetensors
from vsekit.text.brnn import BRNNWordEncoder, PackedWords
from vsekit.text.encoders import no_pretrained_init
from vsekit.vision.regions import Regions, RegionSpec, region_features

if TYPE_CHECKING:
    from vsekit.text.minilm_tokens import MiniLMWordEncoder

__all__ = ["ALIGNER_FORMAT", "WORD_ENCODERS", "Aligner", "RegionAligner", "load_aligner", "save_aligner"]

ALIGNER_FORMAT = "vsekit.aligner"
ALIGNER_FORMAT_VERSION = 1
#: Word encoders of the aligner: the paper's BRNN (Eq. 2-6) or pooled MiniLM token states + a head.
WORD_ENCODERS: tuple[str, ...] = ("brnn", "minilm")


class RegionAligner(nn.Module):
    """Regions and words in one h-dimensional space, scored by Eq. 8 (or Eq. 7)."""

    def __init__(
        self,
        vocab: Vocabulary,
        regions: dict[str, Any],
        image_dim: int,
        embed_dim: int = 512,
        word_dim: int = 300,
        glove: bool = False,
        freeze_words: bool = False,
        dropout: float = 0.0,
        score: str = "max",
        words: str = "brnn",
        word_head: str = "mlp",
        finetune_last: int = 0,
        word_towers: int = 1,
    ) -> None:
        super().__init__()
        if score not in SCORES:
            raise VsekitError(f"unknown alignment score {score!r}; known: {', '.join(SCORES)}")
        self.vocab = vocab
        self.score_kind = score
        self.project = nn.Linear(image_dim, embed_dim)  # W_m, b_m of Eq. 1
        self.drop = nn.Dropout(dropout)
        if words not in WORD_ENCODERS:
            raise VsekitError(f"unknown word encoder {words!r}; known: {', '.join(WORD_ENCODERS)}")
        self.words: BRNNWordEncoder | MiniLMWordEncoder
        if finetune_last and words != "minilm":
            raise VsekitError(f"finetune_last tunes MiniLM's top layers; the {words!r} word encoder has none")
        if words == "minilm":
            # The vocabulary is kept (file format) but unused: word pieces cover every word.
            from vsekit.text.minilm_tokens import MiniLMWordEncoder

            self.words = MiniLMWordEncoder(
                embed_dim, head=word_head, dropout=dropout, finetune_last=finetune_last, towers=word_towers
            )
        else:
            self.words = BRNNWordEncoder(vocab, embed_dim, word_dim, glove, freeze_words, dropout)
        self.config: dict[str, Any] = {
            "regions": dict(regions),
            "image_dim": int(image_dim),
            "embed_dim": int(embed_dim),
            "score": score,
            "words": self.words.config(),
        }

    @property
    def region_spec(self) -> RegionSpec:
        return RegionSpec.from_config(self.config["regions"])

    def embed_regions(self, features: torch.Tensor) -> torch.Tensor:
        """``[n, R, D]`` region CNN features -> ``[n, R, h]`` region vectors ``v_i`` (Eq. 1)."""
        return self.project(self.drop(features))

    def embed_words(self, texts: Sequence[str]) -> PackedWords:
        prepared = self.words.prepare(texts)
        device = self.project.weight.device
        return self.words(**{k: v.to(device) for k, v in prepared.items()})

    def scores(self, regions: torch.Tensor, words: PackedWords) -> torch.Tensor:
        """``S[k, l]`` of every projected image ``[n, R, h]`` against every sentence of ``words``."""
        return alignment_scores(regions, words.vectors, words.sentence, len(words.lengths), self.score_kind)

    def forward(self, features: torch.Tensor, texts: Sequence[str]) -> torch.Tensor:
        return self.scores(self.embed_regions(features), self.embed_words(texts))


def save_aligner(
    model: RegionAligner, path: str | os.PathLike[str], extra: dict | None = None, half: bool = False
) -> Path:
    """One safetensors file: weights (float16 with ``half``); config, vocabulary, ``extra`` in the header."""
    tensors = {}
    for key, value in model.state_dict().items():
        value = value.detach().cpu()
        tensors[f"model.{key}"] = (value.half() if half and value.is_floating_point() else value).contiguous()
    meta = {
        "format": ALIGNER_FORMAT,
        "format_version": str(ALIGNER_FORMAT_VERSION),
        "config": json.dumps(model.config),
        "vocab": json.dumps(model.vocab.to_dict()),
        "dtype": "float16" if half else "float32",
        "extra": json.dumps(extra or {}),
    }
    return atomic_save_safetensors(tensors, path, meta)


def load_aligner(
    path: str | os.PathLike[str], device: str | torch.device = "cpu"
) -> tuple[RegionAligner, dict]:
    """``(model in eval mode, extra header)``; anything wrong is a VsekitError naming ``path``."""
    header, tensors = read_vsekit_safetensors(path, ALIGNER_FORMAT, "aligner", ALIGNER_FORMAT_VERSION)
    try:
        config = json.loads(header["config"])
        vocab = Vocabulary.from_dict(json.loads(header["vocab"]), source=f"{path} (vocab)")
        extra = json.loads(header.get("extra", "{}"))
        with no_pretrained_init():
            model = RegionAligner(
                vocab,
                config["regions"],
                config["image_dim"],
                config["embed_dim"],
                score=config["score"],
                **_word_kwargs(config["words"]),
            )
        state = {
            k.removeprefix("model."): v.float() if v.is_floating_point() else v for k, v in tensors.items()
        }
        model.load_state_dict(state, strict=True)
    except (KeyError, TypeError, ValueError, RuntimeError, json.JSONDecodeError) as exc:
        raise VsekitError(f"{path}: damaged vsekit aligner ({type(exc).__name__}: {str(exc)[:200]})") from exc
    return model.to(resolve_device(device)).eval(), extra


def _word_kwargs(words: dict[str, Any]) -> dict[str, Any]:
    if words.get("kind", "brnn") == "minilm":
        return {
            "words": "minilm",
            "word_head": words["head"],
            "dropout": words["dropout"],
            "finetune_last": words.get("finetune_last", 0),
            "word_towers": words.get("towers", 1),
        }
    return {k: words[k] for k in ("word_dim", "glove", "freeze_words", "dropout")}


class Aligner:
    """A loaded aligner that works on image files: regions, word-region scores, S_kl ranking."""

    def __init__(self, model: RegionAligner, extra: dict | None = None, path: Path | None = None) -> None:
        self.model = model.eval()
        self.extra = extra or {}
        self.path = path
        self.device = model.project.weight.device

    @classmethod
    def load(cls, name_or_path: str | os.PathLike[str] | None = None, device: str = "auto") -> Aligner:
        from vsekit.resources import resolve_model_path

        path = resolve_model_path(name_or_path, "aligner")
        model, extra = load_aligner(path, device=resolve_device(device))
        return cls(model, extra, path)

    def regions(self, images: Any, **kwargs: Any) -> Regions:
        """The model's regions of ``images`` (files, PIL images, a collection or a corpus)."""
        regions = region_features(images, self.model.region_spec, device=self.device, **kwargs)
        if regions.features.shape[-1] != self.model.config["image_dim"]:
            raise VsekitError(
                f"region features are {regions.features.shape[-1]}-d; the aligner reads "
                f"{self.model.config['image_dim']}-d"
            )
        return regions

    @torch.no_grad()
    def region_vectors(self, features: np.ndarray) -> torch.Tensor:
        return self.model.embed_regions(torch.as_tensor(features, dtype=torch.float32, device=self.device))

    @torch.no_grad()
    def word_vectors(self, texts: Sequence[str], batch_size: int = 512) -> PackedWords:
        """Words of every sentence, packed; batched so long lists stay in bounded memory."""
        parts = [self.model.embed_words(texts[k : k + batch_size]) for k in range(0, len(texts), batch_size)]
        offsets = np.cumsum([0] + [len(p.lengths) for p in parts[:-1]])
        return PackedWords(
            torch.cat([p.vectors for p in parts]),
            torch.cat([p.sentence + int(o) for p, o in zip(parts, offsets, strict=True)]),
            torch.cat([p.lengths for p in parts]),
        )

    @torch.no_grad()
    def score_matrix(self, features: np.ndarray, texts: Sequence[str]) -> np.ndarray:
        """S_kl ``[n_images, n_sentences]`` from region features ``[n, R, D]``."""
        return self.model.scores(self.region_vectors(features), self.word_vectors(texts)).cpu().numpy()

    @torch.no_grad()
    def word_region_scores(self, features: np.ndarray, sentence: str) -> tuple[list[str], np.ndarray]:
        """The known words of ``sentence`` (unknown ones shown as <unk>) and ``v_i . s_t`` ``[n_words, R]``
        for one image's region features ``[R, D]``."""
        shown = self.model.words.display_words(sentence)
        words = self.model.embed_words([sentence])
        dots = word_region_dots(self.region_vectors(features[None]), words.vectors)[0]  # [R, n_words]
        return shown, dots.T.cpu().numpy()
