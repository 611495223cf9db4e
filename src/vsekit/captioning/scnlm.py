"""The SC-NLM caption generator (Kiros et al. 2014, sec. 5.2): candidates, reranking, its file.

The network is :mod:`vsekit.captioning.scnlm_net` (Eq. 9-11); it is trained on captions alone, each
conditioned on its own sentence embedding from the joint model's text encoder (sec. 2.5), so at test time
it can be conditioned on an image embedding from the same space.

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
   interpolated Kneser-Ney trigram model of the training captions (:mod:`vsekit.captioning.scnlm_rerank`).
   The paper tuned the weights by hand; :func:`tune_rerank_weights` picks them on dev by a caption metric
   and they are saved with the model. ``length_power`` = 0 is the paper's raw log-probability; 1 is the
   per-token mean, which does not simply prefer the shortest template (it is a tuned option, not in the
   paper).

Training (with checkpoints and resume) is :mod:`vsekit.captioning.scnlm_trainer`, its inputs
:mod:`vsekit.captioning.scnlm_data`.

Everything lives in one safetensors file (:meth:`SCNLMCaptioner.save` / :func:`load_scnlm`): the network,
the KN trigram counts, the word and sentence banks (int8 rows: they are unit vectors, so per-row int8
moves cosines very little), and JSON config, vocabularies, templates and rerank weights in the header.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from vsekit.captioning.language_model import KneserNeyTrigramLM
from vsekit.captioning.scnlm_data import joint_fingerprint, log_progress
from vsekit.captioning.scnlm_net import SCNLM, SCNLMConfig, template_tensor
from vsekit.captioning.scnlm_rerank import (
    DEFAULT_GRID,
    STOPWORDS,
    RerankWeights,
    SCNLMCandidates,
    count_repeats,
    rerank_scores,
    translation_score,
)
from vsekit.data.vocab import Vocabulary
from vsekit.errors import CorpusError, VsekitError
from vsekit.fileio import atomic_save_safetensors, read_vsekit_safetensors

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

SCNLM_FORMAT = "vsekit.SCNLM"
SCNLM_FORMAT_VERSION = 1

# -- the banks' int8 rows --------------------------------------------------------------------------


def quantize_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric per-row int8: ``(codes [n, D] int8, scale [n] float16)``."""
    rows = np.asarray(rows, dtype=np.float32)
    scale = (np.abs(rows).max(axis=1) / 127.0).astype(np.float16)
    safe = np.where(scale > 0, scale.astype(np.float32), 1.0)
    return np.clip(np.rint(rows / safe[:, None]), -127, 127).astype(np.int8), scale


def dequantize_rows(codes: np.ndarray, scale: np.ndarray) -> torch.Tensor:
    """The unit rows of :func:`quantize_rows`' codes (renormalised: the rounding moves their norm)."""
    rows = torch.from_numpy(codes.astype(np.float32) * scale.astype(np.float32)[:, None])
    return F.normalize(rows, dim=-1)


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
        self._template_tensor, self._template_lengths = template_tensor(self.templates, self.config.forward)

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
            log_progress(progress, f"decoded {min(b + batch_images, len(emb))}/{len(emb)} images")
        unique = list(dict.fromkeys(t for texts in per_image for t in texts))
        t1 = time.perf_counter()
        vecs = F.normalize(self.joint_model.embed_texts(unique).float(), dim=-1)
        t_embed = time.perf_counter() - t1
        where = {t: i for i, t in enumerate(unique)}
        features = []
        for i, image_texts in enumerate(per_image):
            cos = (vecs[[where[t] for t in image_texts]] @ emb[i]).numpy().astype(np.float64)
            toks = [t.split() for t in image_texts]
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
            order = np.argsort(-rerank_scores(feats, w), kind="stable")[:n_best]
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
            codes, scale = quantize_rows(bank.numpy())
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
        word_bank = dequantize_rows(tensors["bank.words"].numpy(), tensors["bank.words_scale"].numpy())
        sentence_bank = dequantize_rows(
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
                log_progress(progress, f"rerank {asdict(w)}: {metric} {seen[key]:.2f}")
    assert best is not None
    captioner.rerank_weights = best
    return best, rows
