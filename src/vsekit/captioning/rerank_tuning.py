"""Tuning a trained m-RNN captioner's joint-embedding rerank on dev, and storing it in the captioner file.

After training (a recipe with ``rerank_beam``) or when shipping a captioner: every dev image is decoded
with a beam, each candidate scored by its cosine with the image under the joint model, and the rerank
weights chosen by grid search (:func:`vsekit.captioning.rerank.tune_rerank`); the captioner file is
rewritten with the settings and their dev scores.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from vsekit.captioning.captioner import save_captioner
from vsekit.captioning.mrnn_data import FeatureFn
from vsekit.data.corpus import Corpus
from vsekit.resources import resolve_model_path
from vsekit.vision.features import image_features

__all__ = ["ScoreFn", "tune_captioner_rerank"]

# scores of predictions (image id -> caption) against references (image id -> captions): cider, bleu4, ...
ScoreFn = Callable[[dict[str, str], Mapping[str, Sequence[str]]], dict[str, float | None]]


def tune_captioner_rerank(
    captioner_path: Path,
    corpus: Corpus,
    dev_split: str,
    beam_size: int,
    score_fn: ScoreFn,
    feature_fn: FeatureFn | None = None,
    say: Callable[[str], None] = print,
    joint_model_path: str | os.PathLike[str] | None = None,
    search_grid: dict[str, Sequence[float]] | None = None,
) -> dict[str, Any]:
    """Tune the joint-embedding reranking of a captioner's beam on dev and store it in the file.

    Decodes every dev image with ``beam_size`` candidates, scores each candidate's cosine with its
    image under the joint model (default: the one shipped with vsekit), grid-searches the weights
    (:func:`vsekit.captioning.rerank.tune_rerank`) and rewrites the captioner with ``meta["rerank"]``
    (the settings) and ``meta["dev_rerank"]`` (their dev scores). ``search_grid`` (``weights``,
    ``length_penalties``) replaces the default grid of :func:`~vsekit.captioning.rerank.tune_rerank`.
    """
    from vsekit.captioning.captioner import load_captioner
    from vsekit.captioning.rerank import RerankSettings, embedding_cosines, file_fingerprint, tune_rerank
    from vsekit.embedding.evaluate import model_features
    from vsekit.embedding.model import load_model

    feature_fn = feature_fn or image_features
    joint_path = resolve_model_path(joint_model_path, "vse")
    joint, joint_fne, _ = load_model(joint_path)
    captioner = load_captioner(captioner_path)
    refs = {i: caps for i, caps in corpus.split(dev_split).captions_by_image().items() if caps}
    ids = list(refs)
    spec = captioner.image
    feats, _ = feature_fn(corpus, ids, spec["backbone"], spec["kind"], fne=captioner.fne)
    t0 = time.perf_counter()
    candidates = captioner.decode(feats, beam_size=beam_size, n_best=beam_size)
    texts = [[captioner.text(c) for c in caps] for caps in candidates]
    joint_feats = model_features(joint, joint_fne, corpus, ids, feature_fn=feature_fn)
    cosines = embedding_cosines(joint, joint_feats, texts)
    seconds = time.perf_counter() - t0
    weight, penalty, grid = tune_rerank(
        candidates, texts, cosines, ids, refs, score_fn, **(search_grid or {})
    )
    settings = RerankSettings(beam_size, weight, penalty, file_fingerprint(joint_path))
    best = next(g for g in grid if g["weight"] == weight and g["length_penalty"] == penalty)
    plain = next(g for g in grid if g["weight"] == 0 and g["length_penalty"] == 0.0)
    captioner.meta["rerank"] = settings.to_dict()
    # no timing in the file: the same tuning must give the same file (issue 15); it is returned instead
    captioner.meta["dev_rerank"] = {"best": best, "beam_only": plain, "grid": grid}
    save_captioner(captioner, captioner_path)
    say(
        f"rerank on {dev_split} ({len(ids)} images, beam {beam_size}): weight {weight:g}, "
        f"length penalty {penalty:g}: "
        f"CIDEr {best['cider']:.1f} B-4 {best['bleu4']:.1f} (beam alone: CIDEr {plain['cider']:.1f} "
        f"B-4 {plain['bleu4']:.1f})"
    )
    return captioner.meta["dev_rerank"] | {"seconds": round(seconds, 1), "settings": settings.to_dict()}
