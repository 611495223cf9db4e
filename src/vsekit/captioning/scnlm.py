"""The structure-content neural language model (SC-NLM) and its caption generator (Kiros et al. 2014).

The SC-NLM is a multiplicative log-bilinear language model (sec. 2.3-2.5). With previous words
w_{n-c..n-1}, the POS tags of the next k+1 positions t_n..t_{n+k} and a content vector u:

    E     = W_fk^T W_fv                       folded K x V word embeddings            (sec. 2.4)
    r_hat = sum_i C(i) E(:, w_i)              predicted next-word representation      (Eq. 10)
    u_hat = ReLU(sum_i T(i) t_i + T_u u + b)  attribute = structure + content         (Eq. 11)
    f     = (W_fk r_hat) * (W_fd u_hat)       factor outputs, F of them               (Eq. 9)
    P(w_n = i | ...) = softmax_i(W_fv(:, i)^T f + b_i)                                (sec. 2.4)

It is trained on captions alone, each conditioned on its own sentence embedding from the joint model's
text encoder (sec. 2.5), so at test time it can be conditioned on an image embedding from the same space.

Generation (sec. 5.2), per image x (unit-norm embedding):

1. conditioning vectors: x itself, and the mean of the N = 5 nearest words and N nearest training
   sentences in the joint space ("bag of concepts"), renormalised;
2. POS templates of 4-12 tags from the training captions: the ``n_templates`` most frequent ones for every
   image, plus the templates of the N nearest training sentences (the paper samples 1,000 conditioning
   vector / template pairs per image; we take these few deterministic pairs, because every candidate
   must go through the sentence encoder);
3. MAP decoding: for a template of length L, L greedy argmax steps (specials masked), so the template fixes
   the length and the word classes;
4. reranking the unique candidates by  translation + lm_weight * LM / (len + 1) ** length_power, where the
   translation score is the cosine between x and the candidate's embedding, multiplied by
   repeat_penalty ** (repeated non-stopwords) (footnote 9), and LM is the natural-log probability under an
   interpolated Kneser-Ney trigram model of the training captions. The paper tuned the weights by hand;
   :func:`tune_rerank_weights` picks them on dev by a caption metric and they are saved with the model.
   ``length_power`` = 0 is the paper's raw log-probability; 1 is the per-token mean, which does not
   simply prefer the shortest template (it is a tuned option, not in the paper).

Sizes (defaults, the paper's where it gives them): K = G = 300, F = 100 (sec. 2.5); previous-word context
c = 5 and forward structure context k + 1 = 5 tags (not given in the paper); content vector D = the joint
space (the shipped joint model's size).

Training (with checkpoints and resume) is :mod:`vsekit.captioning.scnlm_trainer`.

Everything lives in one safetensors file (:meth:`SCNLMCaptioner.save` / :func:`load_scnlm`): the network,
the KN trigram counts, the word and sentence banks (int8 rows: they are unit vectors, so per-row int8
moves cosines very little), and JSON config, vocabularies, templates and rerank weights in the header.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from vsekit.captioning.language_model import KneserNeyTrigramLM
from vsekit.data.vocab import Vocabulary
from vsekit.errors import CorpusError, VsekitError
from vsekit.fileio import atomic_save_npy, atomic_save_safetensors, read_vsekit_safetensors

__all__ = [
    "SCNLM",
    "SCNLMCandidates",
    "SCNLMCaptioner",
    "SCNLMConfig",
    "STOPWORDS",
    "RerankWeights",
    "count_repeats",
    "load_scnlm",
    "translation_score",
    "tune_rerank_weights",
]

logger = logging.getLogger(__name__)

SCNLM_FORMAT = "vsekit.SCNLM"
SCNLM_FORMAT_VERSION = 1
TAG_PAD, TAG_END = "<pad>", "<end>"  # tag ids 0 and 1: beyond the sentence / the position of <end>

# Function words: repeating them is normal ("a dog and a cat"), so footnote 9's penalty ignores them.
STOPWORDS = frozenset(
    """a an the and or but of in on at to with by for from into onto over under up down out off near
    through across along around behind above below between while as its it his her their them they he
    she him this that these those there here who which what is are was were be been being has have
    had some other another each one""".split()
)


@dataclass
class SCNLMConfig:
    """Architecture, training and generation settings of an SC-NLM (stored in the model file)."""

    word_dim: int = 300  # K: word representations (paper: 300)
    attr_dim: int = 300  # G: attribute / structure embeddings (paper: G = K = 300)
    factors: int = 100  # F (paper: 100)
    context: int = 5  # previous words n - 1
    forward: int = 5  # structure tags t_n .. t_{n+k}, i.e. k + 1
    content_dim: int = 1024  # D of the content vector u (set from the joint model)
    vocab_size: int = 0  # set from the data
    n_tags: int = 0  # set from the data
    # training
    min_count: int = 5  # rarer training words become <unk>
    epochs: int = 8
    batch_captions: int = 128  # captions per batch (all their positions): T_u u is computed once each
    lr: float = 2e-3
    lr_decay: float = 0.8  # per epoch
    content_dropout: float = 0.0
    seed: int = 0
    lm_discount: float = 0.75
    # generation (sec. 5.2)
    min_len: int = 4
    max_len: int = 12
    n_neighbours: int = 5  # N nearest words and sentences
    n_templates: int = 12  # most frequent training POS sequences tried for every image

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SCNLMConfig:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass
class RerankWeights:
    """score = translation * repeat_penalty ** repeats + lm_weight * logP_KN / (len + 1) ** length_power."""

    lm_weight: float = 0.05
    length_power: float = 1.0
    repeat_penalty: float = 0.5


# -- the network ------------------------------------------------------------------------------------


class SCNLM(nn.Module):
    """The structure-content neural language model of Kiros et al. 2014, Eq. 9-11."""

    def __init__(self, config: SCNLMConfig) -> None:
        super().__init__()
        cfg = self.config = config
        if (
            min(cfg.vocab_size, cfg.n_tags, cfg.word_dim, cfg.attr_dim, cfg.factors, cfg.context, cfg.forward)
            <= 0
        ):
            raise VsekitError(f"SC-NLM config has a non-positive size: {cfg}")
        # Factored tensor T u = W_fv^T diag(W_fd u) W_fk (Eq. 9); W_fv also folds into the embeddings E.
        self.W_fk = nn.Linear(cfg.word_dim, cfg.factors, bias=False)  # F x K
        self.W_fd = nn.Linear(cfg.attr_dim, cfg.factors, bias=False)  # F x G
        self.W_fv = nn.Parameter(torch.randn(cfg.factors, cfg.vocab_size) / math.sqrt(cfg.factors))  # F x V
        self.b = nn.Parameter(torch.zeros(cfg.vocab_size))  # output biases b_i
        # [C(1) ... C(n-1)] side by side: one K x (n-1)K matrix applied to the concatenated context (Eq. 10).
        self.C = nn.Linear(cfg.context * cfg.word_dim, cfg.word_dim, bias=False)
        # Structure variables: a learned tag lookup table and [T(n) ... T(n+k)] side by side (Eq. 11).
        self.tag_emb = nn.Embedding(cfg.n_tags, cfg.attr_dim)
        self.T = nn.Linear(cfg.forward * cfg.attr_dim, cfg.attr_dim, bias=False)
        # T_u u + b of Eq. 11 (the Linear's bias is b).
        self.T_u = nn.Linear(cfg.content_dim, cfg.attr_dim)
        self.content_dropout = nn.Dropout(cfg.content_dropout)

    def folded_embeddings(self) -> torch.Tensor:
        """E^T = (W_fk^T W_fv)^T: the V x K word representations of sec. 2.4 (row i = E(:, i))."""
        return self.W_fv.t() @ self.W_fk.weight

    def content(self, u: torch.Tensor) -> torch.Tensor:
        """T_u u + b of Eq. 11 ``[B, G]``: computed once per sentence, shared by all its positions."""
        return self.T_u(self.content_dropout(u))

    def step_logits(
        self, context: torch.Tensor, tags: torch.Tensor, content: torch.Tensor, E: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Next-word logits ``[B, V]`` from word ids ``[B, c]``, tag ids ``[B, k+1]`` and ``content(u)``
        ``[B, G]``."""
        E = self.folded_embeddings() if E is None else E
        r_hat = self.C(E[context].flatten(1))  # Eq. 10
        u_hat = F.relu(self.T(self.tag_emb(tags).flatten(1)) + content)  # Eq. 11
        f = self.W_fk(r_hat) * self.W_fd(u_hat)  # factor outputs (sec. 2.4)
        return f @ self.W_fv + self.b  # softmax logits (sec. 2.4)

    def forward(self, context: torch.Tensor, tags: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """Logits ``[B, V]`` for one position per row, conditioned on content vectors ``u`` ``[B, D]``."""
        return self.step_logits(context, tags, self.content(u))

    @torch.no_grad()
    def map_decode(
        self,
        u: torch.Tensor,
        templates: torch.Tensor,
        lengths: torch.Tensor,
        banned: Sequence[int] = (0, 1, 2, 3),
    ) -> list[list[int]]:
        """MAP (greedy argmax) word ids for each row: content ``u`` ``[R, D]``, tag ids ``[R, >= L + k + 1]``
        (the template, then the <end> tag, then padding), template lengths ``[R]``. Row r gets exactly
        ``lengths[r]`` words; ``banned`` ids (specials by default) are never chosen."""
        cfg = self.config
        E = self.folded_embeddings()
        content = self.content(u)
        n_rows, steps = u.shape[0], int(lengths.max()) if len(lengths) else 0
        words = torch.full((n_rows, cfg.context + steps), 2, dtype=torch.long)  # <start> padding
        ban = torch.zeros(cfg.vocab_size, dtype=torch.bool)
        ban[list(banned)] = True
        for n in range(steps):
            logits = self.step_logits(
                words[:, n : n + cfg.context], templates[:, n : n + cfg.forward], content, E
            )
            words[:, cfg.context + n] = logits.masked_fill(ban, float("-inf")).argmax(-1)
        out = words[:, cfg.context :].tolist()
        return [row[: int(length)] for row, length in zip(out, lengths.tolist(), strict=True)]


# -- training data ----------------------------------------------------------------------------------


def _tag_vocab(tag_lists: Sequence[Sequence[str]]) -> list[str]:
    return [TAG_PAD, TAG_END, *sorted({t for tags in tag_lists for t in tags} - {TAG_PAD, TAG_END})]


def _examples(
    word_ids: Sequence[Sequence[int]],
    tag_ids: Sequence[Sequence[int]],
    context: int,
    forward: int,
    end_id: int = 3,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One row per predicted position (each word and the final <end>): ``(context [M, c], tags [M, k+1],
    target [M], sentence index [M])``, rows of a sentence contiguous and in order."""
    ctx_rows, tag_rows, targets, owners = [], [], [], []
    for s, (w, t) in enumerate(zip(word_ids, tag_ids, strict=True)):
        padded = [2] * context + list(w) + [end_id]
        tpad = list(t) + [1] + [0] * forward
        for p in range(len(w) + 1):
            ctx_rows.append(padded[p : p + context])
            tag_rows.append(tpad[p : p + forward])
            targets.append(padded[p + context])
            owners.append(s)
    return (
        np.asarray(ctx_rows, dtype=np.int64).reshape(-1, context),
        np.asarray(tag_rows, dtype=np.int64).reshape(-1, forward),
        np.asarray(targets, dtype=np.int64),
        np.asarray(owners, dtype=np.int64),
    )


def _template_tensor(templates: Sequence[Sequence[int]], forward: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Tag ids padded as ``template + <end> + <pad>...`` to a common width, and the lengths."""
    width = max((len(t) for t in templates), default=0) + forward + 1
    out = torch.zeros(len(templates), width, dtype=torch.long)
    for i, t in enumerate(templates):
        out[i, : len(t)] = torch.as_tensor(list(t), dtype=torch.long)
        out[i, len(t)] = 1
    return out, torch.as_tensor([len(t) for t in templates], dtype=torch.long)


@torch.no_grad()
def _perplexity(model: SCNLM, data: tuple[np.ndarray, ...], u: torch.Tensor, batch: int = 4096) -> float:
    device = model.b.device
    ctx, tags, tgt, own = (torch.from_numpy(a).to(device) for a in data)
    u = u.to(device)
    model.eval()
    E, total = model.folded_embeddings(), 0.0
    content = model.content(u)
    for i in range(0, len(tgt), batch):
        logits = model.step_logits(ctx[i : i + batch], tags[i : i + batch], content[own[i : i + batch]], E)
        total += F.cross_entropy(logits, tgt[i : i + batch], reduction="sum").item()
    return math.exp(total / max(len(tgt), 1))


def _log(progress: bool, message: str) -> None:
    """Progress notes: through logging (``vsekit -v`` shows them), only when ``progress`` is on."""
    if progress:
        logger.info(message)


def joint_fingerprint(joint_model: Any) -> str:
    """A short hash of the joint model's image projection: which embedding space an SC-NLM belongs to."""
    digest = hashlib.sha256()
    for name, value in sorted(joint_model.image_proj.state_dict().items()):
        digest.update(name.encode())
        digest.update(value.detach().cpu().to(torch.float16).numpy().tobytes())
    return digest.hexdigest()[:16]


def _embed_cached(
    joint_model: Any, texts: list[str], cache_dir: Path | None, name: str, progress: bool
) -> np.ndarray:
    """Joint-space sentence embeddings of ``texts`` (float32), cached as .npy keyed by texts and model."""
    key = hashlib.sha256(("\n".join(texts) + joint_fingerprint(joint_model)).encode()).hexdigest()[:12]
    path = cache_dir / f"{name}-{key}.npy" if cache_dir is not None else None
    if path is not None and path.is_file():
        try:
            cached = np.load(path, allow_pickle=False)
            if cached.shape == (len(texts), joint_model.embed_dim) and cached.dtype == np.float32:
                return cached
        except Exception as exc:  # a damaged cache file (numpy's header parser raises many kinds)
            logger.warning("%s: unreadable embedding cache, recomputing (%s)", path, exc)
    t0 = time.perf_counter()
    emb = joint_model.embed_texts(texts).numpy().astype(np.float32)
    _log(progress, f"embedded {len(texts)} {name} in {time.perf_counter() - t0:.0f} s")
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_save_npy(path, emb)  # a kill mid-write must not leave half a file to load next time
    return emb


def _quantize(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric per-row int8: ``(codes [n, D] int8, scale [n] float16)``."""
    rows = np.asarray(rows, dtype=np.float32)
    scale = (np.abs(rows).max(axis=1) / 127.0).astype(np.float16)
    safe = np.where(scale > 0, scale.astype(np.float32), 1.0)
    return np.clip(np.rint(rows / safe[:, None]), -127, 127).astype(np.int8), scale


def _dequantize(codes: np.ndarray, scale: np.ndarray) -> torch.Tensor:
    rows = torch.from_numpy(codes.astype(np.float32) * scale.astype(np.float32)[:, None])
    return F.normalize(rows, dim=-1)


# -- reranking features ----------------------------------------------------------------------------


def count_repeats(tokens: Sequence[str], stopwords: frozenset[str] = STOPWORDS) -> int:
    """How many tokens repeat an earlier non-stopword ("a dog and a dog" -> 1)."""
    seen: Counter[str] = Counter(t for t in tokens if t not in stopwords)
    return sum(c - 1 for c in seen.values())


def translation_score(
    cosine: float | np.ndarray, repeats: int | np.ndarray, penalty: float
) -> float | np.ndarray:
    """Footnote 9's multiplicative penalty: ``cosine * penalty ** repeats`` for a positive cosine; a
    negative one is divided instead, so a repeat always lowers the score."""
    factor = np.power(float(penalty), np.asarray(repeats, dtype=np.float64))
    cos = np.asarray(cosine, dtype=np.float64)
    out = np.where(cos >= 0, cos * factor, cos / np.maximum(factor, 1e-12))
    return float(out) if out.ndim == 0 else out


@dataclass
class SCNLMCandidates:
    """Unique candidates per image and their rerank features ``[n, 4]``: cosine to the image, repeated
    non-stopwords, KN log-probability, number of words."""

    captions: list[list[str]]
    features: list[np.ndarray]
    seconds: float = 0.0
    stats: dict[str, float] = field(default_factory=dict)


def _rerank_scores(features: np.ndarray, w: RerankWeights) -> np.ndarray:
    trans = translation_score(features[:, 0], features[:, 1], w.repeat_penalty)
    return trans + w.lm_weight * features[:, 2] / np.power(features[:, 3] + 1.0, w.length_power)


# -- the captioner ----------------------------------------------------------------------------------


class SCNLMCaptioner:
    """SC-NLM + KN trigram LM + POS templates + word/sentence banks + rerank weights (Kiros sec. 5.2).

    ``generate(image_embeddings)`` takes unit-norm joint-space image embeddings (``joint_model.embed_images``)
    and returns captions per image, best first. ``joint_model`` (the one the SC-NLM was trained with) embeds
    the candidates for the translation score.
    """

    def __init__(
        self,
        model: SCNLM,
        vocab: Vocabulary,
        tags: list[str],
        lm: KneserNeyTrigramLM,
        templates: list[list[int]],
        template_counts: list[int],
        word_bank: torch.Tensor,
        word_bank_ids: list[int],
        sentence_bank: torch.Tensor,
        sentence_templates: list[int],
        joint_model: Any = None,
        rerank: RerankWeights | None = None,
    ) -> None:
        self.model = model.eval()
        self.config = model.config
        self.vocab = vocab
        self.tags = list(tags)
        self.lm = lm
        self.templates = [list(t) for t in templates]
        self.template_counts = list(template_counts)
        self.word_bank = word_bank.float()
        self.word_bank_ids = list(word_bank_ids)
        self.sentence_bank = sentence_bank.float()
        self.sentence_templates = list(sentence_templates)
        self.joint_model = joint_model
        self.rerank_weights = rerank or RerankWeights()
        self.history: list[dict[str, float]] = []
        self.extra: dict[str, Any] = {}
        self._template_tensor, self._template_lengths = _template_tensor(self.templates, self.config.forward)

    # -- candidates ---------------------------------------------------------------------------------

    def conditioning_vectors(self, image_embeddings: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(vectors [n, 2, D], nearest sentence ids [n, N])``: the image itself and the renormalised mean
        of its N nearest words and N nearest training sentences (sec. 5.2)."""
        x = F.normalize(torch.as_tensor(image_embeddings, dtype=torch.float32), dim=-1)
        n = self.config.n_neighbours
        words = (x @ self.word_bank.t()).topk(min(n, len(self.word_bank)), dim=1).indices
        sents = (x @ self.sentence_bank.t()).topk(min(n, len(self.sentence_bank)), dim=1).indices
        concepts = torch.cat([self.word_bank[words], self.sentence_bank[sents]], dim=1).mean(dim=1)
        return torch.stack([x, F.normalize(concepts, dim=-1)], dim=1), sents

    @torch.no_grad()
    def candidates(
        self, image_embeddings: torch.Tensor, batch_images: int = 64, progress: bool = False
    ) -> SCNLMCandidates:
        """MAP captions for every (conditioning vector, template) pair of every image, deduplicated, with
        their rerank features. The expensive part is the sentence encoder: unique texts are embedded once."""
        if self.joint_model is None:
            raise VsekitError("SC-NLM reranking needs the joint model: pass joint_model to load_scnlm")
        t0 = time.perf_counter()
        emb = F.normalize(torch.as_tensor(image_embeddings, dtype=torch.float32), dim=-1)
        n_frequent = min(self.config.n_templates, len(self.templates))
        per_image: list[list[str]] = []
        n_decoded = 0
        for b in range(0, len(emb), batch_images):
            x = emb[b : b + batch_images]
            conds, sents = self.conditioning_vectors(x)
            rows_u, rows_t, owner = [], [], []
            for i in range(len(x)):
                picks = list(range(n_frequent))
                picks += [
                    self.sentence_templates[s] for s in sents[i].tolist() if self.sentence_templates[s] >= 0
                ]
                for p in dict.fromkeys(picks):
                    for c in range(conds.shape[1]):
                        rows_u.append(conds[i, c])
                        rows_t.append(p)
                        owner.append(i)
            picked = torch.as_tensor(rows_t, dtype=torch.long)
            ids = self.model.map_decode(
                torch.stack(rows_u), self._template_tensor[picked], self._template_lengths[picked]
            )
            n_decoded += len(ids)
            texts: list[list[str]] = [[] for _ in range(len(x))]
            for i, row in zip(owner, ids, strict=True):
                texts[i].append(" ".join(self.vocab.decode(row)))
            per_image.extend(list(dict.fromkeys(t)) for t in texts)
            _log(progress, f"decoded {min(b + batch_images, len(emb))}/{len(emb)} images")
        unique = list(dict.fromkeys(t for texts in per_image for t in texts))
        t1 = time.perf_counter()
        vecs = F.normalize(self.joint_model.embed_texts(unique).float(), dim=-1)
        t_embed = time.perf_counter() - t1
        where = {t: i for i, t in enumerate(unique)}
        features = []
        for i, texts in enumerate(per_image):
            cos = (vecs[[where[t] for t in texts]] @ emb[i]).numpy().astype(np.float64)
            toks = [t.split() for t in texts]
            features.append(
                np.stack(
                    [
                        cos,
                        np.asarray([count_repeats(t) for t in toks], dtype=np.float64),
                        np.asarray([self.lm.logprob(t) for t in toks], dtype=np.float64),
                        np.asarray([len(t) for t in toks], dtype=np.float64),
                    ],
                    axis=1,
                )
            )
        seconds = time.perf_counter() - t0
        stats = {
            "decoded": n_decoded,
            "candidates": sum(len(t) for t in per_image),
            "unique_texts": len(unique),
            "embed_seconds": t_embed,
        }
        return SCNLMCandidates(per_image, features, seconds, stats)

    def rerank(
        self, candidates: SCNLMCandidates, n_best: int = 1, weights: RerankWeights | None = None
    ) -> list[list[str]]:
        """The ``n_best`` candidates per image by the weighted score, best first (ties: earlier candidate)."""
        w = weights or self.rerank_weights
        out = []
        for texts, feats in zip(candidates.captions, candidates.features, strict=True):
            order = np.argsort(-_rerank_scores(feats, w), kind="stable")[:n_best]
            out.append([texts[j] for j in order])
        return out

    def generate(
        self, image_embeddings: torch.Tensor, n_best: int = 1, progress: bool = False
    ) -> list[list[str]]:
        """Captions for each image embedding ``[n, K]`` (unit-norm joint space), ``n_best`` per image."""
        return self.rerank(self.candidates(image_embeddings, progress=progress), n_best=n_best)

    # -- persistence --------------------------------------------------------------------------------

    def save(
        self, path: str | os.PathLike[str], half: bool = True, extra: dict[str, Any] | None = None
    ) -> Path:
        """One safetensors file, written atomically: network (float16 when ``half``), KN counts, int8
        banks; config, vocabularies, templates, rerank weights and the joint model's fingerprint as JSON."""

        path = Path(path)
        tensors: dict[str, torch.Tensor] = {}
        for key, value in self.model.state_dict().items():
            value = value.detach().cpu()
            tensors[f"scnlm.{key}"] = (value.half() if half else value).contiguous()
        _, tri, cnt = self.lm.to_arrays()
        tensors["lm.trigrams"] = torch.from_numpy(tri)
        tensors["lm.counts"] = torch.from_numpy(cnt)
        for name, bank in (("words", self.word_bank), ("sentences", self.sentence_bank)):
            codes, scale = _quantize(bank.numpy())
            tensors[f"bank.{name}"] = torch.from_numpy(codes)
            tensors[f"bank.{name}_scale"] = torch.from_numpy(scale)
        tensors["bank.word_ids"] = torch.as_tensor(self.word_bank_ids, dtype=torch.int32)
        tensors["bank.sentence_templates"] = torch.as_tensor(self.sentence_templates, dtype=torch.int32)
        joint = None
        if self.joint_model is not None:
            joint = {"fingerprint": joint_fingerprint(self.joint_model), "config": self.joint_model.config}
        meta = {
            "format": SCNLM_FORMAT,
            "format_version": str(SCNLM_FORMAT_VERSION),
            "config": json.dumps(asdict(self.config)),
            "vocab": json.dumps(self.vocab.to_dict()),
            "tags": json.dumps(self.tags),
            "templates": json.dumps({"sequences": self.templates, "counts": self.template_counts}),
            "rerank": json.dumps(asdict(self.rerank_weights)),
            "lm": json.dumps({"discount": self.lm.discount, "words": "vocab"}),
            "joint_model": json.dumps(joint),
            "dtype": "float16" if half else "float32",
            "extra": json.dumps({**self.extra, **(extra or {}), "history": self.history}),
        }
        return atomic_save_safetensors(tensors, path, meta)


def load_scnlm(
    path: str | os.PathLike[str], joint_model: Any = None, check_joint: bool = True
) -> SCNLMCaptioner:
    """Read a file written by :meth:`SCNLMCaptioner.save`. ``joint_model`` is the joint embedding used for
    the translation score (must be the one the SC-NLM was trained with: checked by fingerprint unless
    ``check_joint=False``). Anything that is not an SC-NLM file raises VsekitError naming ``path``."""
    path = Path(path)
    header, tensors = read_vsekit_safetensors(path, SCNLM_FORMAT, "SC-NLM", SCNLM_FORMAT_VERSION)
    try:
        cfg = SCNLMConfig.from_dict(json.loads(header["config"]))
        vocab = Vocabulary.from_dict(json.loads(header["vocab"]), source=f"{path} (vocab)")
        tags = json.loads(header["tags"])
        templates = json.loads(header["templates"])
        rerank = RerankWeights(**json.loads(header["rerank"]))
        lm_meta = json.loads(header["lm"])
        joint = json.loads(header.get("joint_model", "null"))
        extra = json.loads(header.get("extra", "{}"))
        model = SCNLM(cfg)
        state = {k.removeprefix("scnlm."): v for k, v in tensors.items() if k.startswith("scnlm.")}
        model.load_state_dict(state, strict=True)
        lm = KneserNeyTrigramLM.from_arrays(
            vocab.words[4:], tensors["lm.trigrams"].numpy(), tensors["lm.counts"].numpy(), lm_meta["discount"]
        )
        word_bank = _dequantize(tensors["bank.words"].numpy(), tensors["bank.words_scale"].numpy())
        sentence_bank = _dequantize(
            tensors["bank.sentences"].numpy(), tensors["bank.sentences_scale"].numpy()
        )
        word_ids = tensors["bank.word_ids"].tolist()
        sentence_templates = tensors["bank.sentence_templates"].tolist()
    except VsekitError:
        raise
    except (CorpusError, KeyError, TypeError, ValueError, RuntimeError, json.JSONDecodeError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise VsekitError(f"{path}: damaged SC-NLM file ({type(exc).__name__}: {first})") from exc
    if joint_model is not None:
        if int(joint_model.embed_dim) != cfg.content_dim:
            raise VsekitError(
                f"{path}: the SC-NLM reads {cfg.content_dim}-d content vectors; the joint model gives "
                f"{joint_model.embed_dim}-d embeddings"
            )
        if check_joint and joint is not None and joint.get("fingerprint") != joint_fingerprint(joint_model):
            raise VsekitError(f"{path}: the SC-NLM was trained with another joint embedding model")
    captioner = SCNLMCaptioner(
        model=model,
        vocab=vocab,
        tags=tags,
        lm=lm,
        templates=templates["sequences"],
        template_counts=templates["counts"],
        word_bank=word_bank,
        word_bank_ids=word_ids,
        sentence_bank=sentence_bank,
        sentence_templates=sentence_templates,
        joint_model=joint_model,
        rerank=rerank,
    )
    captioner.history = list(extra.pop("history", []))
    captioner.extra = extra
    return captioner


# -- tuning ---------------------------------------------------------------------------------------


DEFAULT_GRID: dict[str, tuple[float, ...]] = {
    "lm_weight": (0.0, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5),
    "length_power": (0.0, 1.0),
    "repeat_penalty": (1.0, 0.7, 0.4),
}


def tune_rerank_weights(
    captioner: SCNLMCaptioner,
    image_embeddings: torch.Tensor,
    image_ids: Sequence[str],
    references: dict[str, list[str]],
    score_fn: Callable[[dict[str, str], dict[str, list[str]]], dict[str, float]],
    metric: str = "cider",
    grid: dict[str, Sequence[float]] | None = None,
    candidates: SCNLMCandidates | None = None,
    progress: bool = False,
) -> tuple[RerankWeights, list[dict[str, float]]]:
    """Pick the rerank weights that maximise ``score_fn(...)[metric]`` over a small grid (sec. 5.2's
    weighted sum; the paper tuned by hand). Candidates are generated once (or passed in) and only
    re-ranked per grid point. Sets ``captioner.rerank_weights`` and returns ``(best, one row per point)``."""
    grid = {**DEFAULT_GRID, **(grid or {})}
    cands = (
        candidates if candidates is not None else captioner.candidates(image_embeddings, progress=progress)
    )
    refs = {i: references[i] for i in image_ids}
    rows, seen, best, best_score = [], {}, None, -float("inf")
    for lm_weight in grid["lm_weight"]:
        for power in grid["length_power"]:
            for penalty in grid["repeat_penalty"]:
                w = RerankWeights(float(lm_weight), float(power), float(penalty))
                picks = [c[0] for c in captioner.rerank(cands, 1, w)]
                key = tuple(picks)
                if key not in seen:  # many grid points pick the same captions
                    seen[key] = float(score_fn(dict(zip(image_ids, picks, strict=True)), refs)[metric])
                rows.append({**asdict(w), metric: seen[key]})
                if seen[key] > best_score:
                    best, best_score = w, seen[key]
                _log(progress, f"rerank {asdict(w)}: {metric} {seen[key]:.2f}")
    assert best is not None
    captioner.rerank_weights = best
    return best, rows
