"""The joint image-sentence embedding (Kiros et al. 2014, sec. 2.2; Vilalta et al. 2017, sec. 3.2).

    image features q [D]  --W_I (Linear D -> K)-->  x = W_I q   --L2 norm-->  x / |x|
    caption S             --text encoder------->  v [K]       --L2 norm-->  v / |v|
    score s(x, v) = x . v   (the cosine, since both have unit norm)

The image side is one affine layer over fixed CNN features: one-layer features (CNN-MME) or the ternary
Full-Network Embedding (FN-MME, whose {-1, 0, 1} int8 codes are cast to float). The text side is any
:class:`~vsekit.text.TextEncoder`. Everything needed to rebuild the model (encoder config, vocabulary,
image feature spec) travels with it, and ``save_model`` writes one safetensors file: weights as tensors,
the rest as JSON in the header metadata. Nothing is pickled.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from vsekit.data.vocab import Vocabulary
from vsekit.errors import CorpusError, VsekitError
from vsekit.text import TextEncoder, build_text_encoder, encoder_spec, no_pretrained_init
from vsekit.vision.fne import FullNetworkEmbedding

__all__ = ["MODEL_FORMAT", "JointEmbedding", "load_model", "save_model"]

MODEL_FORMAT = "vsekit.JointEmbedding"
MODEL_FORMAT_VERSION = 1


class JointEmbedding(nn.Module):
    """Linear image projection + sentence encoder into one unit-norm K-dimensional space.

    Args:
        text_encoder: the sentence encoder; its ``output_dim`` is K.
        image_dim: D, the size of the image feature vectors (1280 one-layer / 18056 FNE for MobileNetV2).
        backbone: the CNN the features come from (recorded, so evaluation extracts the same features).
        kind: "one-layer" or "fne".
        vocab: the training vocabulary of a word-based encoder (None for a pretrained tokenizer).
    """

    def __init__(
        self,
        text_encoder: TextEncoder,
        image_dim: int,
        backbone: str,
        kind: str,
        vocab: Vocabulary | None = None,
        image_dropout: float = 0.0,
        image_rank: int | None = None,
    ) -> None:
        super().__init__()
        self.embed_dim = int(text_encoder.output_dim)
        self.image_dim = int(image_dim)
        if not 0.0 <= image_dropout < 1.0:
            raise ValueError(f"image_dropout must be in [0, 1), got {image_dropout}")
        # W_I in R^{K x D} (Kiros sec. 2.2): x = W_I q. The bias makes it the affine map of Vilalta sec. 3.2.
        # With image_rank=r, W_I = B A is factored through r dimensions: still one linear map, but
        # D*r + r*K parameters instead of D*K, which is what keeps an 18,056-d FNE model shippable.
        if image_rank:
            self.image_proj = nn.Sequential(
                nn.Linear(self.image_dim, int(image_rank), bias=False),
                nn.Linear(int(image_rank), self.embed_dim),
            )
        else:
            self.image_proj = nn.Linear(self.image_dim, self.embed_dim)
        # Dropout on the image features (training only): regularises the wide FNE projection, which
        # otherwise fits the 6,000 training images within a few epochs.
        self.image_dropout = nn.Dropout(image_dropout) if image_dropout else nn.Identity()
        self.text_encoder = text_encoder
        self.vocab = vocab
        encoder_name, encoder_kwargs = encoder_spec(text_encoder)
        self.config: dict[str, Any] = {
            "text_encoder": encoder_name,
            "text_encoder_config": encoder_kwargs,
            "image": {
                "backbone": backbone,
                "kind": kind,
                "image_dim": self.image_dim,
                "dropout": float(image_dropout),
                "rank": int(image_rank) if image_rank else None,
            },
            "embed_dim": self.embed_dim,
        }

    @property
    def device(self) -> torch.device:
        return next(self.image_proj.parameters()).device

    # -- training path -------------------------------------------------------------------------------

    def encode_images(self, features: torch.Tensor) -> torch.Tensor:
        """Unit-norm image embeddings ``[n, K]`` with autograd (FNE int8 codes are cast to float)."""
        dtype = next(self.image_proj.parameters()).dtype
        return F.normalize(self.image_proj(self.image_dropout(features.to(dtype))), dim=-1)

    def encode_texts(self, **prepared: torch.Tensor) -> torch.Tensor:
        """Unit-norm sentence embeddings ``[B, K]`` from ``text_encoder.prepare`` output, with autograd."""
        return F.normalize(self.text_encoder(**prepared), dim=-1)

    def forward(
        self, image_features: torch.Tensor, **prepared_text: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(img_emb [B, K], cap_emb [B, K])``, both unit-norm: ``img_emb @ cap_emb.T`` is the cosine."""
        return self.encode_images(image_features), self.encode_texts(**prepared_text)

    # -- inference helpers ---------------------------------------------------------------------------

    @torch.no_grad()
    def embed_images(self, features: torch.Tensor | np.ndarray, batch_size: int = 1024) -> torch.Tensor:
        """Unit-norm embeddings of image features ``[n, D]`` (eval mode, no grad, batched; CPU result).

        Batched because FNE features are wide: 5,000 x 18,056 in float32 would be 360 MB at once.
        """
        x = torch.as_tensor(features)
        if x.ndim != 2 or x.shape[1] != self.image_dim:
            raise VsekitError(
                f"image features have shape {tuple(x.shape)}; this model expects [n, "
                f"{self.image_dim}] ({self.config['image']['backbone']} "
                f"{self.config['image']['kind']} features)"
            )
        was_training = self.training
        self.eval()
        try:
            out = [
                self.encode_images(x[i : i + batch_size].to(self.device)).float().cpu()
                for i in range(0, x.shape[0], batch_size)
            ]
        finally:
            self.train(was_training)
        return torch.cat(out) if out else torch.empty(0, self.embed_dim)

    @torch.no_grad()
    def embed_texts(self, texts: Sequence[str], batch_size: int = 256) -> torch.Tensor:
        """Unit-norm embeddings of raw sentences ``[n, K]`` (eval mode, no grad, batched; CPU result)."""
        texts = list(texts)
        was_training = self.training
        self.eval()
        try:
            out = []
            for i in range(0, len(texts), batch_size):
                prepared = self.text_encoder.prepare(texts[i : i + batch_size])
                prepared = {k: v.to(self.device) for k, v in prepared.items()}
                out.append(self.encode_texts(**prepared).float().cpu())
        finally:
            self.train(was_training)
        return torch.cat(out) if out else torch.empty(0, self.embed_dim)


# -- persistence -------------------------------------------------------------------------------------


def _fne_from(meta: dict[str, str], mean: np.ndarray, m2: np.ndarray) -> FullNetworkEmbedding:
    """Rebuild a fitted FNE from its metadata and statistics (mirrors ``FullNetworkEmbedding.load``)."""
    fne = FullNetworkEmbedding(
        thresholds=tuple(json.loads(meta["thresholds"])),
        eps=float(meta["eps"]),
        layer_names=json.loads(meta["layer_names"]),
        layer_dims=json.loads(meta["layer_dims"]),
    )
    fne.mean_ = np.asarray(mean, dtype=np.float64)
    fne._m2 = np.asarray(m2, dtype=np.float64)
    fne.n_samples_ = int(meta["n_samples"])
    return fne


def save_model(
    model: JointEmbedding,
    path: str | os.PathLike[str],
    fne: FullNetworkEmbedding | None = None,
    extra_meta: dict[str, Any] | None = None,
    half: bool = False,
) -> Path:
    """Write ``model`` (and the FNE statistics it needs) to one safetensors file, atomically.

    Tensors: ``model.<param>`` for every state-dict entry (float16 when ``half``: half the size, cosine
    scores move by well under 1e-2), and ``fne.mean`` / ``fne.m2`` in float64 when the model reads FNE
    features (the statistics are never halved: they define the thresholds). Header metadata (JSON
    strings): ``format``, ``format_version``, ``config``, ``vocab``, ``dtype``, ``fne`` (settings),
    ``extra``.
    """
    from safetensors.torch import save_file

    path = Path(path)
    kind = model.config["image"]["kind"]
    if kind == "fne" and fne is None:
        raise VsekitError(f"{path}: this model reads FNE features; pass the fitted FNE to save it with them")
    tensors: dict[str, torch.Tensor] = {}
    for key, value in model.state_dict().items():
        value = value.detach().cpu()
        if half and value.is_floating_point():
            value = value.half()
        tensors[f"model.{key}"] = value.contiguous()
    meta = {
        "format": MODEL_FORMAT,
        "format_version": str(MODEL_FORMAT_VERSION),
        "config": json.dumps(model.config),
        "vocab": json.dumps(model.vocab.to_dict() if model.vocab is not None else None),
        "dtype": "float16" if half else "float32",
        "extra": json.dumps(extra_meta or {}),
        "fne": "null",
    }
    if fne is not None and kind == "fne":
        state = fne.state_dict()
        tensors["fne.mean"] = torch.from_numpy(np.ascontiguousarray(state["mean"], dtype=np.float64))
        tensors["fne.m2"] = torch.from_numpy(np.ascontiguousarray(state["m2"], dtype=np.float64))
        meta["fne"] = json.dumps(dict(fne.metadata()))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        save_file(tensors, str(tmp), metadata=meta)
        os.chmod(tmp, 0o644)  # safetensors creates 0600 files; a model is meant to be shared
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def load_model(
    path: str | os.PathLike[str], device: str | torch.device = "cpu"
) -> tuple[JointEmbedding, FullNetworkEmbedding | None, dict[str, Any]]:
    """Read a file written by :func:`save_model`: ``(model in eval mode, fne or None, meta)``.

    ``meta`` is the ``extra_meta`` given at save time plus ``config`` and ``dtype``. float16 weights are
    loaded into a float32 model. Anything that is not a vsekit model (a missing file, another
    safetensors file, a corrupt header, weights that do not fit the config) is a VsekitError naming
    ``path``.
    """
    from safetensors import SafetensorError, safe_open

    path = Path(path)
    if not path.is_file():
        raise VsekitError(f"{path}: model file not found")
    try:
        with safe_open(str(path), framework="pt") as f:
            header = f.metadata() or {}
            if header.get("format") != MODEL_FORMAT:
                raise VsekitError(f"{path}: not a vsekit model file (no '{MODEL_FORMAT}' header)")
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except VsekitError:
        raise
    except (SafetensorError, OSError, ValueError) as exc:
        raise VsekitError(f"{path}: not a vsekit model file ({exc})") from exc
    try:
        version = int(header.get("format_version", "0"))
        if version > MODEL_FORMAT_VERSION:
            raise VsekitError(
                f"{path}: model format version {version} is newer than this vsekit reads "
                f"({MODEL_FORMAT_VERSION}); upgrade vsekit"
            )
        config = json.loads(header["config"])
        vocab_dict = json.loads(header["vocab"])
        fne_meta = json.loads(header.get("fne", "null"))
        extra = json.loads(header.get("extra", "{}"))
        enc_name, enc_kwargs = config["text_encoder"], dict(config["text_encoder_config"])
        image = config["image"]
    except (KeyError, TypeError, json.JSONDecodeError) as exc:
        raise VsekitError(f"{path}: damaged vsekit model header ({type(exc).__name__}: {exc})") from exc
    try:
        vocab = Vocabulary.from_dict(vocab_dict, source=f"{path} (vocab)") if vocab_dict else None
    except CorpusError as exc:
        raise VsekitError(str(exc)) from exc
    with no_pretrained_init():
        encoder = build_text_encoder(enc_name, vocab, **enc_kwargs)
    model = JointEmbedding(
        encoder,
        image["image_dim"],
        image["backbone"],
        image["kind"],
        vocab,
        image_dropout=image.get("dropout", 0.0),
        image_rank=image.get("rank"),
    )
    state = {k.removeprefix("model."): v for k, v in tensors.items() if k.startswith("model.")}
    try:
        model.load_state_dict(state, strict=True)  # copy_ casts float16 weights into the float32 params
    except RuntimeError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise VsekitError(f"{path}: weights do not match the model config ({first})") from exc
    fne = None
    if image["kind"] == "fne":
        if fne_meta is None or "fne.mean" not in tensors or "fne.m2" not in tensors:
            raise VsekitError(f"{path}: FNE model without its FNE statistics (fne.mean / fne.m2)")
        fne = _fne_from(fne_meta, tensors["fne.mean"].numpy(), tensors["fne.m2"].numpy())
    model.to(device).eval()
    meta = {**extra, "config": config, "dtype": header.get("dtype", "float32")}
    return model, fne, meta
