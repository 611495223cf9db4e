"""One object that describes images in words, whatever the method: load once, then ``describe``.

:class:`CaptionGenerator` puts the three generators behind one interface:

* ``mrnn``: the multimodal RNN/LSTM (Karpathy & Fei-Fei 2015, sec. 3.2) with beam, greedy or sampled
  decoding; a captioner that carries rerank settings (tuned on validation data) reranks its beam with
  the joint embedding (:mod:`vsekit.captioning.rerank`);
* ``scnlm``: the structure-content NLM (Kiros et al. 2014, sec. 2.4 and 5.2), conditioned on the joint
  model's image embeddings;
* ``nn``: nearest-neighbour caption transfer (Karpathy & Fei-Fei 2015, Table 2 baseline), fitted on the
  training split of a corpus with :meth:`CaptionGenerator.fit_nn`.

It computes the image features each part needs (the captioner's, and the joint model's for reranking)
from image files (:meth:`describe`) or from a corpus through the feature cache (:meth:`describe_corpus`).
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from vsekit.captioning.captioner import DECODINGS, load_captioner
from vsekit.captioning.guard import ConceptGuard, load_guard
from vsekit.captioning.nearest import NearestNeighbourCaptioner
from vsekit.captioning.rerank import RerankSettings, embedding_cosines, rerank_order
from vsekit.data.corpus import Corpus
from vsekit.device import resolve_device
from vsekit.embedding.pipeline import VSEModel
from vsekit.errors import ImageError, VsekitError, command
from vsekit.fileio import fingerprint_matches
from vsekit.resources import previous_models, resolve_model_path
from vsekit.vision import features as vision_features
from vsekit.vision.backbones import BACKBONES
from vsekit.vision.classes import Classifier, load_classifier
from vsekit.vision.features import readable_image_ids
from vsekit.vision.fne import FullNetworkEmbedding
from vsekit.vision.preprocess import load_image
from vsekit.vision.spec import FeatureSpec

__all__ = ["METHODS", "CaptionGenerator", "DecodeSettings", "FileCaptions"]

logger = logging.getLogger(__name__)

METHODS = ("mrnn", "scnlm", "nn")
#: Images decoded per step: the captioner's own decoding batch, so batching here changes no caption
#: (not even sampled ones); a progress bar advances once per batch.
DECODE_BATCH = 256
FEATURE_KINDS = ("one-layer", "fne")


@dataclass
class FileCaptions:
    """The captions of one image file, or why it could not be read."""

    path: Path
    captions: list[str]
    error: str | None = None


@dataclass(frozen=True)
class DecodeSettings:
    """How the m-RNN decodes. ``beam_size=None``: the captioner's rerank beam if it has one, else 3;
    ``no_repeat_ngram``: no caption repeats a sequence of this many words (0: allowed)."""

    decoding: str = "beam"
    beam_size: int | None = None
    temperature: float = 1.0
    length_penalty: float = 0.0
    max_len: int = 20
    no_repeat_ngram: int = 3

    def validate(self) -> DecodeSettings:
        if self.decoding not in DECODINGS:
            raise VsekitError(f"unknown --decoding {self.decoding!r}; choose beam, greedy or sample")
        if self.no_repeat_ngram < 0 or self.no_repeat_ngram == 1:
            raise VsekitError(f"--no-repeat-ngram must be 0 (off) or at least 2, got {self.no_repeat_ngram}")
        return self


class CaptionGenerator:
    """Describe images with ``method`` (see the module docstring); everything is loaded once.

    Args:
        method: ``mrnn``, ``scnlm`` or ``nn``.
        model: the captioner (name or path; default the shipped ``captioner`` for mrnn; required for
            scnlm; unused by nn).
        decode: m-RNN decoding settings.
        rerank: m-RNN: rerank the beam with the joint embedding when the captioner has tuned settings.
        joint_model: the joint embedding for reranking and the SC-NLM (name or path; default ``vse``).
        nn_features: nn method: ``(backbone, kind)`` of the image similarity.
        device: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.
        guard: m-RNN beam: the concept guard for photos unlike the captioner's training photos
            (:mod:`vsekit.captioning.guard`).
    """

    def __init__(
        self,
        method: str = "mrnn",
        model: str | os.PathLike[str] | None = None,
        decode: DecodeSettings | None = None,
        rerank: bool = True,
        joint_model: str | os.PathLike[str] | None = None,
        nn_features: tuple[str, str] = ("mobilenet_v2", "one-layer"),
        device: str = "auto",
        guard: bool = True,
    ) -> None:
        if method not in METHODS:
            raise VsekitError(f"unknown --method {method!r}; choose one of {', '.join(METHODS)}")
        if nn_features[1] not in FEATURE_KINDS:
            raise VsekitError(f"unknown --features {nn_features[1]!r}; choose one-layer or fne")
        self.method = method
        self.decode = (decode or DecodeSettings()).validate()
        self.device = str(resolve_device(device))
        self.joint: VSEModel | None = None
        self.rerank: RerankSettings | None = None
        self._joint_name = joint_model
        self.captioner: Any = None
        self.fne: FullNetworkEmbedding | None = None
        self.guard: ConceptGuard | None = None
        self.classifier: Classifier | None = None
        if method == "mrnn":
            self._load_mrnn(model, rerank)
            if guard and self.decode.decoding == "beam":
                self._load_guard()
        elif method == "scnlm":
            self._load_scnlm(model)
        else:
            self.image: dict[str, Any] = {"backbone": nn_features[0], "kind": nn_features[1]}

    # -- loading -------------------------------------------------------------------------------------

    def _load_mrnn(self, model: str | os.PathLike[str] | None, rerank: bool) -> None:
        self.captioner = load_captioner(resolve_model_path(model, "captioner"), device=self.device)
        self.image, self.fne = self.captioner.image, self.captioner.fne
        tuned = self.captioner.meta.get("rerank")
        if rerank and tuned and self.decode.decoding == "beam":
            self.rerank = RerankSettings.from_dict(tuned)
            self._load_joint()
        if self.decode.beam_size is None:
            self.decode = replace(self.decode, beam_size=self.rerank.beam_size if self.rerank else 3)

    def _load_guard(self) -> None:
        """The concept guard, when the captioner's features are its backbone classifier's input and the
        guard's table is installed (a trimmed install captions without it, saying so in the log)."""
        backbone = self.image.get("backbone")
        if self.image.get("kind") != "one-layer" or backbone not in BACKBONES:
            logger.info(
                "no concept guard: the captioner reads %s %s features", backbone, self.image.get("kind")
            )
            return
        classifier = load_classifier(backbone)
        if classifier.dim != int(self.image["image_dim"]):
            logger.info("no concept guard: %s's classifier does not read these features", backbone)
            return
        try:
            self.guard = load_guard(self.captioner.vocab, backbone)
        except VsekitError as exc:
            logger.warning("no concept guard: %s", exc)
            return
        self.classifier = classifier

    def _load_scnlm(self, model: str | os.PathLike[str] | None) -> None:
        from vsekit.captioning.scnlm import load_scnlm

        if model is None:
            train = command("train-scnlm", "--data", "CORPUS", "--out", "DIR")
            raise VsekitError(f"--method scnlm needs --model PATH (DIR/scnlm.safetensors: {train} writes it)")
        self._load_joint()
        assert self.joint is not None
        self.captioner = load_scnlm(model, joint_model=self.joint.network)
        self.image, self.fne = dict(self.joint.image_spec), self.joint.fne

    def _load_joint(self) -> None:
        pin = self.rerank.joint_model_sha256 if self.rerank is not None else ""
        name, tuned_with = self._joint_name, None
        if name is None and pin:  # the file the rerank weights were tuned with, when this install has it
            name = _pinned_vse(pin)
            tuned_with = name is not None
        self.joint = VSEModel.load(name, device=self.device)
        if pin and tuned_with is None:  # a joint model named by the caller: is it the one tuned with?
            assert self.joint.path is not None  # VSEModel.load keeps the file's path
            tuned_with = fingerprint_matches(self.joint.path, pin)
        if pin and not tuned_with:
            warnings.warn(
                f"the captioner's rerank weights were tuned with another joint model than "
                f"{self.joint.path}; captions may be reranked suboptimally",
                stacklevel=3,
            )

    def fit_nn(self, corpus: Corpus, split: str = "train", cache_root: Path | None = None) -> None:
        """nn method: index the captioned images of ``split`` of ``corpus`` (features through the cache)."""
        part = corpus.split(split)
        ids = [i for i, caps in part.captions_by_image().items() if caps]
        feats, self.fne = vision_features.image_features(
            corpus, ids, self.image["backbone"], self.image["kind"], cache_root=cache_root, device=self.device
        )
        self.image = {**self.image, "image_dim": int(feats.shape[1])}
        self.captioner = NearestNeighbourCaptioner().fit(feats, ids, part.captions_by_image())

    @property
    def config(self) -> dict[str, Any]:
        """``{"image": spec}``: the features this generator reads (the shape the feature path takes)."""
        return {"image": self.image}

    def describe_settings(self) -> str:
        """One line saying what generates the captions (for titles and logs)."""
        text = self.method
        if self.method == "mrnn":
            text += f" ({self.decode.decoding}" + (
                f", beam {self.decode.beam_size})" if self.decode.decoding == "beam" else ")"
            )
        if self.rerank is not None:
            text += " + joint-embedding rerank"
        if self.guard is not None:
            text += " + concept guard"
        return text + f", {self.image['backbone']} {self.image['kind']} features"

    # -- describing ----------------------------------------------------------------------------------

    def describe(self, images: Sequence[Any], n: int = 1) -> list[list[str]]:
        """``n`` captions (best first) for each image file or PIL image; features computed without the
        cache."""
        self._need_fitted()
        files = [Path(p) if isinstance(p, str | os.PathLike) else p for p in images]
        missing = [str(f) for f in files if isinstance(f, Path) and not f.is_file()]
        if missing:
            raise VsekitError(f"image file not found: {', '.join(missing)}")
        feats = vision_features.features_for_model(
            self.image, files, self.fne, cache=False, device=self.device, progress=False
        )
        joint_feats = None
        if self.rerank is not None:
            assert self.joint is not None  # loaded with the rerank settings
            joint_feats = feats if self._joint_reads_same_features() else self.joint.file_features(files)
        return self.describe_features(feats, n, joint_feats)

    def describe_files(self, files: Sequence[str | os.PathLike[str]], n: int = 1) -> list[FileCaptions]:
        """``n`` captions for each file, where one unreadable file costs only itself: it comes back with
        its error and no captions, and the others are described."""
        decoded: list[Any] = []
        results = []
        for path in files:
            try:
                decoded.append(load_image(path))
                results.append(FileCaptions(Path(path), []))
            except ImageError as exc:
                results.append(FileCaptions(Path(path), [], str(exc)))
        readable = [r for r in results if r.error is None]
        for result, captions in zip(readable, self.describe(decoded, n) if decoded else [], strict=True):
            result.captions = captions
        return results

    def describe_corpus(
        self, corpus: Corpus, image_ids: Sequence[str], n: int = 1, **feature_kwargs: Any
    ) -> list[list[str]]:
        """``n`` captions for each of ``image_ids`` of ``corpus`` (features through the cache)."""
        self._need_fitted()
        ids = list(image_ids)
        feats, _ = vision_features.image_features(
            corpus,
            ids,
            self.image["backbone"],
            self.image["kind"],
            fne=self.fne,
            device=self.device,
            **feature_kwargs,
        )
        joint_feats = None
        if self.rerank is not None:
            assert self.joint is not None  # loaded with the rerank settings
            joint_feats = self.joint.corpus_features(corpus, ids, **feature_kwargs)
        return self.describe_features(feats, n, joint_feats, progress=feature_kwargs.get("progress", True))

    def readable_ids(self, corpus: Corpus, image_ids: Sequence[str], **cache_kwargs: Any) -> list[str]:
        """The ids of ``image_ids`` whose photos can be read, for every feature this generator needs (its
        own, and the joint model's when it reranks); each unreadable photo is reported once."""
        options = {k: v for k, v in cache_kwargs.items() if k in ("cache_dir", "cache_root", "progress")}
        spec = FeatureSpec.from_config(self.image)
        kept, _ = readable_image_ids(corpus, spec, list(image_ids), device=self.device, **options)
        if self.rerank is not None:
            assert self.joint is not None  # loaded with the rerank settings
            kept, _ = self.joint.readable_ids(corpus, kept, **options)
        return kept

    def describe_features(
        self,
        features: np.ndarray,
        n: int = 1,
        joint_features: np.ndarray | None = None,
        progress: bool = False,
    ) -> list[list[str]]:
        """``n`` captions per row of precomputed ``features`` (``joint_features``: the joint model's
        inputs for the same images, needed for reranking); ``progress`` shows a bar over the images
        when there is more than one batch of them."""
        self._need_fitted()
        total = len(features)
        out: list[list[str]] = []
        with tqdm(
            total=total, desc="captioning", unit="img", disable=not progress or total <= DECODE_BATCH
        ) as bar:
            for start in range(0, total, DECODE_BATCH):
                rows = slice(start, start + DECODE_BATCH)
                joint = None if joint_features is None else joint_features[rows]
                out.extend(self._describe_batch(features[rows], n, joint))
                bar.update(len(features[rows]))
        return out

    def _describe_batch(
        self, features: np.ndarray, n: int, joint_features: np.ndarray | None
    ) -> list[list[str]]:
        if self.method == "nn":
            return [[c] for c in self.captioner.caption(features)]
        if self.method == "scnlm":
            assert self.joint is not None  # the SC-NLM is conditioned on it
            return self.captioner.generate(self.joint.network.embed_images(features), n_best=n)
        if self.rerank is not None and joint_features is None:
            raise VsekitError("reranking needs the joint model's features of the images")
        if self.guard is not None:
            return self._guard_unfamiliar(features, n, joint_features)
        return self._beam_plain(features, n, joint_features)

    def _beam_plain(self, features: np.ndarray, n: int, joint_features: np.ndarray | None) -> list[list[str]]:
        if self.rerank is not None:
            assert joint_features is not None  # checked by _describe_batch
            return self._beam_reranked(features, n, joint_features)
        return self._decode(features, n)

    def _guard_unfamiliar(
        self, features: np.ndarray, n: int, joint_features: np.ndarray | None
    ) -> list[list[str]]:
        """The concept guard for the photos unlike the captioner's training photos, the plain beam for the
        rest (:mod:`vsekit.captioning.guard`, "When")."""
        assert self.guard is not None and self.classifier is not None  # set together
        probs = self.classifier.probabilities(features)  # the class probabilities, once per photo
        unfamiliar = self.guard.unfamiliar(features, probs)
        out: list[list[str]] = [[] for _ in range(len(features))]
        for rows, guarded in ((np.flatnonzero(unfamiliar), True), (np.flatnonzero(~unfamiliar), False)):
            if len(rows):
                joint = None if joint_features is None else joint_features[rows]
                done = (
                    self._beam_guarded(features[rows], probs[rows], n, joint)
                    if guarded
                    else self._beam_plain(features[rows], n, joint)
                )
                for row, captions in zip(rows, done, strict=True):
                    out[row] = captions
        return out

    # -- m-RNN decoding ------------------------------------------------------------------------------

    def _decode_kwargs(self) -> dict[str, Any]:
        d = self.decode
        return {
            "decoding": d.decoding,
            "beam_size": d.beam_size,
            "temperature": d.temperature,
            "length_penalty": d.length_penalty,
            "max_len": d.max_len,
            "no_repeat_ngram": d.no_repeat_ngram,
        }

    def _decode(self, features: np.ndarray, n: int) -> list[list[str]]:
        kwargs, text = self._decode_kwargs(), self.captioner.text
        if self.decode.decoding == "beam":
            assert self.decode.beam_size is not None  # set when the m-RNN was loaded
            kwargs["n_best"] = min(n, self.decode.beam_size)
            return [[text(c) for c in caps] for caps in self.captioner.decode(features, **kwargs)]
        if self.decode.decoding == "sample" and n > 1:
            draws = [self.captioner.decode(features, **kwargs) for _ in range(n)]
            return [[text(d[i][0]) for d in draws] for i in range(len(draws[0]))]
        return [[text(c[0])] for c in self.captioner.decode(features, **kwargs)]

    def _beam_reranked(self, features: np.ndarray, n: int, joint_features: np.ndarray) -> list[list[str]]:
        settings = self.rerank
        assert settings is not None and self.joint is not None
        kwargs = {**self._decode_kwargs(), "n_best": self.decode.beam_size}
        candidates = self.captioner.decode(features, **kwargs)
        texts = [[self.captioner.text(c) for c in caps] for caps in candidates]
        cosines = embedding_cosines(self.joint.network, joint_features, texts)
        return [
            [group[j] for j in rerank_order(caps, cos, settings.weight, settings.length_penalty)[:n]]
            for caps, group, cos in zip(candidates, texts, cosines, strict=True)
        ]

    def _beam_guarded(
        self, features: np.ndarray, probs: np.ndarray, n: int, joint_features: np.ndarray | None
    ) -> list[list[str]]:
        """Beam search under the concept guard (:mod:`vsekit.captioning.guard`, "the decoding policy")
        given the photos' class ``probs``, then the rerank, if any; captions that are only a name are not
        reranked."""
        guard = self.guard
        assert guard is not None  # set with the classifier when the guard is on
        evidence = guard.word_evidence(probs)
        bias = guard.bias_of(evidence)
        kwargs = {**self._decode_kwargs(), "n_best": self.decode.beam_size, "once": guard.said_once()}
        candidates = [
            guard.grounded(guard.fluent(caps), evidence[i])
            for i, caps in enumerate(self.captioner.decode(features, word_bias=bias, **kwargs))
        ]
        plain: dict[int, str] = {}
        forced: dict[int, list[int]] = {}
        sure, top = guard.subjects(probs), guard.subjects(probs, threshold=0.0)
        for i, subject in enumerate(sure):
            text = self.captioner.text
            if subject is not None and not any(guard.names_subject(text(c), subject) for c in candidates[i]):
                prefix = guard.prefix_ids(subject)
                forced.update({i: prefix} if prefix else {})
                plain.update({} if prefix else {i: subject.phrase})
            elif not candidates[i]:
                fallback = top[i]
                assert fallback is not None  # threshold 0: every photo has a top subject
                plain[i] = fallback.phrase
        for length in sorted({len(p) for p in forced.values()}):  # one decode per prefix length
            rows = [i for i in sorted(forced) if len(forced[i]) == length]
            prefixes = torch.tensor([forced[i] for i in rows])
            redone = self.captioner.decode(features[rows], word_bias=bias[rows], prefix=prefixes, **kwargs)
            for i, caps in zip(rows, redone, strict=True):
                candidates[i] = guard.supported(guard.fluent(caps), bias[i], skip=length)
                named = sure[i]
                assert named is not None  # a forced prefix comes from a sure subject
                plain.update({} if candidates[i] else {i: named.phrase})
        return self._order_guarded(candidates, plain, n, joint_features)

    def _order_guarded(
        self, candidates: list[list[Any]], plain: dict[int, str], n: int, joint_features: np.ndarray | None
    ) -> list[list[str]]:
        """The ``n`` best of each image's candidates (reranked when tuned), or its plain name."""
        texts = [
            [] if i in plain else [self.captioner.text(c) for c in caps] for i, caps in enumerate(candidates)
        ]
        if self.rerank is None:
            order = [list(range(len(t))) for t in texts]
        else:
            assert self.joint is not None and joint_features is not None  # a rerank has its joint model
            cosines = embedding_cosines(self.joint.network, joint_features, texts)
            s = self.rerank
            order = [
                rerank_order(caps, cos, s.weight, s.length_penalty) if i not in plain else []
                for i, (caps, cos) in enumerate(zip(candidates, cosines, strict=True))
            ]
        return [[plain[i]] if i in plain else [texts[i][j] for j in order[i][:n]] for i in range(len(texts))]

    def _joint_reads_same_features(self) -> bool:
        assert self.joint is not None
        spec = self.joint.image_spec
        return (
            spec["backbone"] == self.image["backbone"] and spec["kind"] == self.image["kind"] == "one-layer"
        )

    def _need_fitted(self) -> None:
        if self.captioner is None:
            raise VsekitError("the nearest-neighbour method needs training images: call fit_nn(corpus) first")


def _pinned_vse(pin: str) -> Path | None:
    """The ``vse`` file whose content ``pin`` names: the shipped one, or an earlier release this install
    keeps (``pretrained/previous/``; the validation slice may choose an earlier ``vse`` to rerank with,
    docs/captioning.md); None when neither is."""
    shipped = resolve_model_path(None, "vse")
    if fingerprint_matches(shipped, pin):
        return shipped
    for entry in previous_models():
        if entry["name"] == "vse" and fingerprint_matches(entry["path"], pin):
            logger.info(
                "the rerank uses %s (vse of vsekit %s), its weights' model", entry["path"], entry["release"]
            )
            return Path(entry["path"])
    return None
