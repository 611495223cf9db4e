"""The joint image-sentence embedding (Kiros et al. 2014, sec. 2.2; Vilalta et al. 2017, sec. 3.2).

    image features q [D]  --W_I (Linear D -> K)-->  x = W_I q   --L2 norm-->  x / |x|
    caption S             --text encoder------->  v [K]       --L2 norm-->  v / |v|
    score s(x, v) = x . v   (the cosine, since both have unit norm)

The image side is one affine layer over fixed CNN features: one-layer features (CNN-MME) or the ternary
Full-Network Embedding (FN-MME, whose {-1, 0, 1} int8 codes are cast to float). With ``grid`` features
(the cells of the CNN's last conv map) the same affine layer projects every cell, and GPO (VSE-infinity,
:mod:`vsekit.embedding.gpo`) pools the projected cells into one vector before the norm:

    cells phi_1..phi_M [D]  --W_I per cell-->  W_I phi_m  --GPO over m-->  x  --L2 norm-->  x / |x|

With ``pre-head`` features (the cells of the CNN's last block) the model holds a trainable copy of the
CNN's head (:mod:`vsekit.embedding.cnn_head`) whose pooled output W_I reads:

    cells c_1..c_M [320]  --head per cell, ReLU6, mean-->  q [1280]  --W_I-->  x  --L2 norm-->  x / |x|

The text side is any :class:`~vsekit.text.TextEncoder`. Everything needed to rebuild the model (encoder
config, vocabulary, image feature spec, the pool) travels with it, and ``save_model`` writes one
safetensors file: weights as tensors, the rest as JSON in the header metadata. Nothing is pickled.

:class:`EnsembleEmbedding` packs M such models (independently seeded) as one joint embedding of dimension
M*K: each member's unit-norm embedding, concatenated and scaled by 1/sqrt(M). The packed vectors are
unit-norm and their dot product is the mean of the members' cosines, so eval, rank, demo and search use
an ensemble exactly like a single model. It saves to and loads from one file the same way.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from vsekit.data.vocab import Vocabulary
from vsekit.embedding.cnn_head import CNNHead
from vsekit.embedding.gpo import GPO
from vsekit.errors import CorpusError, VsekitError
from vsekit.fileio import atomic_save_safetensors, read_vsekit_safetensors
from vsekit.text import TextEncoder, build_text_encoder, encoder_spec, no_pretrained_init
from vsekit.vision.fne import FullNetworkEmbedding

__all__ = [
    "GRID_DROPOUTS",
    "HEADS",
    "IMAGE_POOLS",
    "MODEL_FORMAT",
    "EnsembleEmbedding",
    "JointEmbedding",
    "load_model",
    "save_model",
]

MODEL_FORMAT = "vsekit.JointEmbedding"
#: Version 1: one JointEmbedding. Version 2 adds ensembles (single models are still written as version 1,
#: so older vsekit versions keep reading them; they refuse an ensemble file with an "upgrade" message).
MODEL_FORMAT_VERSION = 2


#: Heads over the image features and the sentence vector: ``linear`` (Kiros: one affine map of the image
#: features, the sentence vector as it is) or ``twin`` (the T-LSTM seed's two-layer columns, sec. 3.2).
HEADS: tuple[str, ...] = ("linear", "twin")

#: How a set of image vectors (``grid`` features: the cells of the last conv map) becomes one: ``gpo``,
#: the Generalized Pooling Operator of VSE-infinity over the projected cells. Pooled kinds (one-layer, FNE)
#: have no pool of their own (the CNN averaged them already).
IMAGE_POOLS: tuple[str, ...] = ("gpo",)

#: How ``image_dropout`` drops values of a grid row (training only): ``cell`` (each value of each cell on
#: its own) or ``channel`` (one mask per image over the channels, shared by all its cells). Averaged over
#: 49 cells, independent masks mostly cancel; a shared mask does not: with uniform GPO weights it is
#: exactly the one-vector model's dropout (the mean of the masked cells is the masked mean).
GRID_DROPOUTS: tuple[str, ...] = ("cell", "channel")


def _twin_layer(dim: int) -> nn.Sequential:
    """The second layer of a twin column: affine, then leaky ReLU with leakiness 0.01 (T-LSTM sec. 4)."""
    return nn.Sequential(nn.Linear(dim, dim), nn.LeakyReLU(0.01))


class _JointSpace(nn.Module):
    """Inference helpers shared by :class:`JointEmbedding` and :class:`EnsembleEmbedding`.

    Subclasses provide ``encode_images``, ``encode_texts``, ``text_encoder`` (whose ``prepare`` feeds
    ``encode_texts``), ``image_dim``, ``embed_dim`` and ``config``.
    """

    embed_dim: int
    image_dim: int
    config: dict[str, Any]

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def encode_images(self, features: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def encode_texts(self, **prepared: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(
        self, image_features: torch.Tensor, **prepared_text: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(img_emb [B, K], cap_emb [B, K])``, both unit-norm: ``img_emb @ cap_emb.T`` is the cosine."""
        return self.encode_images(image_features), self.encode_texts(**prepared_text)

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
    def embed_texts(
        self, texts: Sequence[str], batch_size: int = 256, progress: bool = False
    ) -> torch.Tensor:
        """Unit-norm embeddings of raw sentences ``[n, K]`` (eval mode, no grad, batched; CPU result).

        ``progress`` shows a bar when there is more than one batch (thousands of captions take seconds)."""
        from tqdm.auto import tqdm

        texts = list(texts)
        was_training = self.training
        self.eval()
        starts = range(0, len(texts), batch_size)
        try:
            out = []
            bar = tqdm(starts, desc="embed sentences", unit="batch", disable=not progress or len(starts) < 2)
            encoder = self.text_encoder
            assert isinstance(encoder, TextEncoder)  # an attribute or a property of the subclass
            for i in bar:
                prepared = encoder.prepare(texts[i : i + batch_size])
                prepared = {k: v.to(self.device) for k, v in prepared.items()}
                out.append(self.encode_texts(**prepared).float().cpu())
        finally:
            self.train(was_training)
        return torch.cat(out) if out else torch.empty(0, self.embed_dim)


class JointEmbedding(_JointSpace):
    """Linear image projection + sentence encoder into one unit-norm K-dimensional space.

    Args:
        text_encoder: the sentence encoder; its ``output_dim`` is K.
        image_dim: D, the size of the image feature vectors (1280 one-layer / 18056 FNE for MobileNetV2).
        backbone: the CNN the features come from (recorded, so evaluation extracts the same features).
        kind: "one-layer", "fne" or "grid" (then ``image_dim`` is the width of a feature row, ``cells``
            vectors of ``image_dim // cells`` values each, and ``pool`` says how they become one).
        vocab: the training vocabulary of a word-based encoder (None for a pretrained tokenizer).
        head: ``"linear"`` (the image projection above; the sentence vector as the encoder gives it) or
            ``"twin"`` (the T-LSTM seed's twin network, sec. 3.2: each column a projection into the
            shared dimension K, then an affine layer with leaky ReLU 0.01). Available to every encoder.
        embed_dim: K; only the twin head may differ from the encoder's ``output_dim`` (its sentence
            column projects into K).
        pool: for ``grid`` features, one of :data:`IMAGE_POOLS` (``"gpo"``: ``image_proj`` maps every
            cell to K, then GPO pools the M projected cells, VSE-infinity sec. 3); None for pooled kinds.
        cells: M, the number of vectors in a ``grid`` or ``pre-head`` feature row (49 for a 7 x 7 map).
        grid_dropout: one of :data:`GRID_DROPOUTS`, how ``image_dropout`` masks a grid row.
        head_dim: for ``pre-head`` features, the width of the CNN head's output (1280): the model's
            :class:`~vsekit.embedding.cnn_head.CNNHead` maps each of the ``cells`` cells of
            ``image_dim // cells`` values to it, then averages them; None for the other kinds.
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
        head: str = "linear",
        embed_dim: int | None = None,
        pool: str | None = None,
        cells: int | None = None,
        grid_dropout: str = "cell",
        head_dim: int | None = None,
    ) -> None:
        super().__init__()
        if (kind == "pre-head") != (head_dim is not None) or (
            head_dim is not None and (not cells or cells < 1 or image_dim % cells)
        ):
            raise ValueError(
                f"pre-head features need head_dim and cells that split the row, other kinds neither; got "
                f"kind {kind!r}, head_dim {head_dim!r}, cells {cells!r} for a {image_dim}-wide row"
            )
        if (kind == "grid") != (pool is not None) or (pool is not None and pool not in IMAGE_POOLS):
            raise ValueError(
                f"grid features need a pool ({', '.join(IMAGE_POOLS)}) and pooled ones none; "
                f"got kind {kind!r} with pool {pool!r}"
            )
        if pool is not None and (not cells or cells < 1 or image_dim % cells):
            raise ValueError(f"a {image_dim}-wide grid row does not split into {cells} cells")
        if grid_dropout not in GRID_DROPOUTS or (pool is None and grid_dropout != "cell"):
            raise ValueError(
                f"grid_dropout must be one of {', '.join(GRID_DROPOUTS)} (and 'cell' without a grid)"
            )
        self.grid_dropout = grid_dropout
        if head not in HEADS:
            raise ValueError(f"head must be one of {', '.join(HEADS)}, got {head!r}")
        if head == "linear" and embed_dim not in (None, text_encoder.output_dim):
            raise ValueError(
                f"a linear head keeps the text encoder's {text_encoder.output_dim} dimensions; "
                f"embed_dim {embed_dim} needs head='twin'"
            )
        self.head = head
        self.embed_dim = int(embed_dim or text_encoder.output_dim)
        self.image_dim = int(image_dim)  # the width of a feature row
        self.cells = int(cells) if pool is not None and cells else None
        # what W_I reads: the whole row, one cell of a grid row, or the CNN head's pooled output
        proj_dim = self.image_dim // self.cells if self.cells else self.image_dim
        proj_dim = int(head_dim) if head_dim is not None else proj_dim
        if not 0.0 <= image_dropout < 1.0:
            raise ValueError(f"image_dropout must be in [0, 1), got {image_dropout}")
        # W_I in R^{K x D} (Kiros sec. 2.2): x = W_I q. The bias makes it the affine map of Vilalta sec. 3.2.
        # With image_rank=r, W_I = B A is factored through r dimensions: still one linear map, but
        # D*r + r*K parameters instead of D*K, which is what keeps an 18,056-d FNE model shippable.
        self.image_proj: nn.Module
        if image_rank:
            self.image_proj = nn.Sequential(
                nn.Linear(proj_dim, int(image_rank), bias=False),
                nn.Linear(int(image_rank), self.embed_dim),
            )
        else:
            self.image_proj = nn.Linear(proj_dim, self.embed_dim)
        # VSE-infinity (sec. 3) pools after the projection: GPO over the M projected cells
        self.image_pool = GPO() if pool == "gpo" else None
        # The twin network of the T-LSTM seed (sec. 3.2): on top of each column's projection into the
        # shared dimension, an affine layer with a leaky ReLU (leakiness 0.01, sec. 4); the sentence
        # column gets the same two layers. Scored by cosine here (the joint model normalises), not the
        # seed's raw dot product (Eq. 1), so the margin means the same as for every other model.
        self.image_twin = _twin_layer(self.embed_dim) if head == "twin" else None
        self.text_head = (
            nn.Sequential(nn.Linear(text_encoder.output_dim, self.embed_dim), _twin_layer(self.embed_dim))
            if head == "twin"
            else None
        )
        # Dropout on the image features (training only): regularises the wide FNE projection, which
        # otherwise fits the 6,000 training images within a few epochs.
        self.image_dropout = nn.Dropout(image_dropout) if image_dropout else nn.Identity()
        # Built after every other layer, so that a seed draws the same W_I and text head as a one-layer
        # model's; its weights are the CNN's ImageNet head until training or a file sets them.
        self.cnn_head: CNNHead | None = None
        if head_dim is not None:
            assert cells is not None  # checked above
            self.cnn_head = CNNHead(int(cells), self.image_dim // int(cells), int(head_dim))
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
        if head != "linear":  # absent means linear: files written before the twin head read unchanged
            self.config["head"] = head
        if pool is not None:  # absent for pooled kinds: their configs read as they always did
            self.config["image"].update(pool=pool, cells=self.cells)
            if grid_dropout != "cell":
                self.config["image"]["grid_dropout"] = grid_dropout
        if head_dim is not None:  # absent for the other kinds: their configs read as they always did
            self.config["image"].update(cells=int(cells or 0), head_dim=int(head_dim))

    # -- training path -------------------------------------------------------------------------------

    def encode_images(self, features: torch.Tensor) -> torch.Tensor:
        """Unit-norm image embeddings ``[n, K]`` with autograd (FNE int8 codes are cast to float).

        Grid rows ``[n, M*D]`` are seen as M cells of D values: each cell projected, then pooled.
        Pre-head rows go through the model's copy of the CNN head first (its pooled output is the vector
        W_I reads)."""
        dtype = next(self.image_proj.parameters()).dtype
        if self.cnn_head is not None:
            features = self.cnn_head(features)
        if self.image_pool is not None:
            assert self.cells is not None  # set with the pool
            cells = features.to(dtype).reshape(features.shape[0], self.cells, -1)
            if self.grid_dropout == "channel":  # one mask per image, shared by its cells
                cells = cells * self.image_dropout(cells.new_ones(cells.shape[0], 1, cells.shape[2]))
            else:
                cells = self.image_dropout(cells)
            x = self.image_pool(self.image_proj(cells))
        else:
            x = self.image_proj(self.image_dropout(features.to(dtype)))
        if self.image_twin is not None:
            x = self.image_twin(x)
        return F.normalize(x, dim=-1)

    def encode_texts(self, **prepared: torch.Tensor) -> torch.Tensor:
        """Unit-norm sentence embeddings ``[B, K]`` from ``text_encoder.prepare`` output, with autograd."""
        v = self.text_encoder(**prepared)
        if self.text_head is not None:
            v = self.text_head(v)
        return F.normalize(v, dim=-1)


class EnsembleEmbedding(_JointSpace):
    """M joint embeddings of one architecture packed as one joint embedding of dimension M*K.

    With ``x_m``, ``v_m`` the unit-norm image and sentence embeddings of member m, the packed embeddings
    are ``x = [x_1, ..., x_M] / sqrt(M)`` and ``v = [v_1, ..., v_M] / sqrt(M)``. Then ``|x| = |v| = 1``
    and ``x . v = (1/M) sum_m x_m . v_m``: ranking by the packed dot product *is* ranking by the mean of
    the members' cosine scores (score averaging), and everything that uses a joint embedding (``eval``,
    ``rank``, ``demo``, search) uses the ensemble unchanged.

    The members keep their own image projections and text heads; anything frozen in their text encoders
    (the pretrained MiniLM transformer and its per-text cache) is shared with the first member, so the
    transformer is held, and each sentence encoded, once. ``text_encoder`` is the first member's: its
    ``prepare`` is the common front end that feeds :meth:`encode_texts`.

    Args:
        members: the models, all with the same ``config`` and vocabulary (e.g. one recipe, other seeds).
    """

    def __init__(self, members: Sequence[JointEmbedding]) -> None:
        super().__init__()
        members = list(members)
        if not members:
            raise VsekitError("an ensemble needs at least one member")
        first = members[0]
        for k, member in enumerate(members[1:], start=2):
            if not isinstance(member, JointEmbedding) or member.config != first.config:
                raise VsekitError(
                    f"ensemble member {k} differs from member 1 in its architecture or image features "
                    "(config); an ensemble packs models of one recipe"
                )
            if member.vocab != first.vocab:
                raise VsekitError(f"ensemble member {k} has another vocabulary than member 1")
        self.members = nn.ModuleList(members)
        for member in members[1:]:
            member.text_encoder.share_frozen(first.text_encoder)
        self.member_dim = first.embed_dim
        self.embed_dim = self.member_dim * len(members)
        self.image_dim = first.image_dim
        self.vocab = first.vocab
        self.config: dict[str, Any] = {
            **first.config,
            "embed_dim": self.embed_dim,
            "ensemble": {"members": len(members), "member_embed_dim": self.member_dim},
        }
        self._scale = 1.0 / math.sqrt(len(members))

    @property
    def text_encoder(self) -> TextEncoder:
        """The first member's text encoder: its ``prepare`` output feeds every member's head."""
        return self._members()[0].text_encoder

    @property
    def image_proj(self) -> nn.ModuleList:
        """The members' image projections, in order (to inspect or fingerprint the image side; the packed
        projection is :meth:`encode_images`, which normalises each member's output before concatenating)."""
        return nn.ModuleList([m.image_proj for m in self._members()])

    def encode_images(self, features: torch.Tensor) -> torch.Tensor:
        """Packed unit-norm image embeddings ``[n, M*K]`` (with autograd)."""
        return torch.cat([m.encode_images(features) for m in self._members()], dim=-1) * self._scale

    def encode_texts(self, **prepared: torch.Tensor) -> torch.Tensor:
        """Packed unit-norm sentence embeddings ``[B, M*K]`` from ``text_encoder.prepare`` output."""
        return torch.cat([m.encode_texts(**prepared) for m in self._members()], dim=-1) * self._scale

    def _members(self) -> list[JointEmbedding]:
        """``members`` as the joint embeddings they are (an ``nn.ModuleList`` is typed as holding modules)."""
        return cast(list[JointEmbedding], list(self.members))


def _member_config(config: dict[str, Any]) -> dict[str, Any]:
    """The config of one member of an ensemble config (a plain config comes back unchanged)."""
    ensemble = config.get("ensemble")
    if ensemble is None:
        return config
    return {
        **{k: v for k, v in config.items() if k != "ensemble"},
        "embed_dim": int(ensemble["member_embed_dim"]),
    }


# -- persistence -------------------------------------------------------------------------------------


def save_model(
    model: JointEmbedding | EnsembleEmbedding,
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
    ``extra``. An ensemble is the same file with its members' tensors under ``model.members.<m>.`` and
    ``config["ensemble"]``; it is written as format version 2, a single model as version 1.
    """

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
        "format_version": "2" if isinstance(model, EnsembleEmbedding) else "1",
        "config": json.dumps(model.config),
        "vocab": json.dumps(model.vocab.to_dict() if model.vocab is not None else None),
        "dtype": "float16" if half else "float32",
        "extra": json.dumps(extra_meta or {}),
        "fne": "null",
    }
    if fne is not None and kind == "fne":
        fne_tensors, fne_meta = fne.to_tensors(prefix="fne.")
        tensors.update({k: torch.from_numpy(v) for k, v in fne_tensors.items()})
        meta["fne"] = json.dumps(fne_meta)
    return atomic_save_safetensors(tensors, path, meta)


def load_model(
    path: str | os.PathLike[str], device: str | torch.device = "cpu"
) -> tuple[JointEmbedding | EnsembleEmbedding, FullNetworkEmbedding | None, dict[str, Any]]:
    """Read a file written by :func:`save_model`: ``(model in eval mode, fne or None, meta)``.

    The model is an :class:`EnsembleEmbedding` when the file holds one, else a :class:`JointEmbedding`.

    ``meta`` is the ``extra_meta`` given at save time plus ``config`` and ``dtype``. float16 weights are
    loaded into a float32 model. Anything that is not a vsekit model (a missing file, another
    safetensors file, a corrupt header, weights that do not fit the config) is a VsekitError naming
    ``path``.
    """
    path = Path(path)
    header, tensors = read_vsekit_safetensors(path, MODEL_FORMAT, "model", MODEL_FORMAT_VERSION)
    try:
        config = json.loads(header["config"])
        vocab_dict = json.loads(header["vocab"])
        fne_meta = json.loads(header.get("fne", "null"))
        extra = json.loads(header.get("extra", "{}"))
        n_members = int(config["ensemble"]["members"]) if "ensemble" in config else None
        member_config = _member_config(config)
        enc_name, enc_kwargs = member_config["text_encoder"], dict(member_config["text_encoder_config"])
        image = member_config["image"]
    except (KeyError, TypeError, ValueError, json.JSONDecodeError) as exc:
        raise VsekitError(f"{path}: damaged vsekit model header ({type(exc).__name__}: {exc})") from exc
    try:
        vocab = Vocabulary.from_dict(vocab_dict, source=f"{path} (vocab)") if vocab_dict else None
    except CorpusError as exc:
        raise VsekitError(str(exc)) from exc

    def build() -> JointEmbedding:
        with no_pretrained_init():
            encoder = build_text_encoder(enc_name, vocab, **enc_kwargs)
        return JointEmbedding(
            encoder,
            image["image_dim"],
            image["backbone"],
            image["kind"],
            vocab,
            image_dropout=image.get("dropout", 0.0),
            image_rank=image.get("rank"),
            head=member_config.get("head", "linear"),
            embed_dim=member_config["embed_dim"],
            pool=image.get("pool"),
            cells=image.get("cells"),
            grid_dropout=image.get("grid_dropout", "cell"),
            head_dim=image.get("head_dim"),
        )

    if n_members is None:
        model: JointEmbedding | EnsembleEmbedding = build()
    else:
        if n_members < 1:
            raise VsekitError(f"{path}: damaged vsekit model header (an ensemble of {n_members} members)")
        model = EnsembleEmbedding([build() for _ in range(n_members)])
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
        fne = FullNetworkEmbedding.from_tensors(tensors, fne_meta, prefix="fne.")
    model.to(device).eval()
    meta = {**extra, "config": config, "dtype": header.get("dtype", "float32")}
    return model, fne, meta
