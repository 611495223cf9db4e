"""The public Python API: load a model by name or path, embed images and sentences, rank, describe.

    import vsekit
    model = vsekit.load_model()                      # the shipped joint embedding ("vse")
    vectors = model.embed_texts(["a dog runs through the snow"])
    hits = vsekit.rank_images(model, ["a dog in the snow"], ["a.jpg", "b.jpg"], top=1)
    captioner = vsekit.load_captioner()              # the shipped m-RNN captioner ("captioner")
    print(captioner.describe(["a.jpg"]))
    fused = vsekit.load_fusion()                     # joint cosine + aligner S_kl ("vse+aligner")
    scores = fused.score_matrix(["a.jpg"], ["a dog in the snow", "a man on a bike"])
    index = vsekit.Index.build("photos/", "photos.index")   # a folder of photos, no captions needed
    index.search("a dog in the snow", minus=["snow"], plus=["beach"], k=5)

Every name here is re-exported by ``vsekit`` itself.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from vsekit.alignment.fusion import FusedModel
from vsekit.captioning.generator import CaptionGenerator, DecodeSettings
from vsekit.collection import Index
from vsekit.embedding.pipeline import ImageInput, VSEModel
from vsekit.retrieval.index import BuildReport, SearchHit
from vsekit.retrieval.ranking import Hit, rank

__all__ = [
    "BuildReport",
    "CaptionGenerator",
    "FusedModel",
    "Hit",
    "Index",
    "SearchHit",
    "VSEModel",
    "load_captioner",
    "load_fusion",
    "load_model",
    "rank_captions",
    "rank_images",
]


def load_model(name_or_path: str | os.PathLike[str] | None = None, device: str = "auto") -> VSEModel:
    """A joint image-sentence embedding: a shipped name (``"vse"``, the default) or a model file.

    The result embeds images (``embed_images(paths or PIL images)``) and sentences (``embed_texts``) as
    unit-norm float32 arrays, computing whatever image features it needs itself.
    """
    return VSEModel.load(name_or_path, device=device)


def load_fusion(name_or_path: str | os.PathLike[str] = "vse+aligner", device: str = "auto") -> FusedModel:
    """The joint model and the region-word aligner ranked together (``"vse+aligner"``, or a fusion JSON
    file): ``score_matrix(images, sentences)`` is the weighted sum of both models' normalised scores."""
    return FusedModel.load(name_or_path, device=device)


def load_captioner(
    name_or_path: str | os.PathLike[str] | None = None,
    method: str = "mrnn",
    joint_model: str | os.PathLike[str] | None = None,
    decoding: str = "beam",
    beam: int | None = None,
    rerank: bool = True,
    device: str = "auto",
    guard: bool = True,
    no_repeat_ngram: int = 3,
) -> CaptionGenerator:
    """A caption generator: the shipped m-RNN (``"captioner"``, the default), a captioner file, or an
    SC-NLM file with ``method="scnlm"``. ``describe(image paths, n)`` returns n captions per image.

    ``guard``: m-RNN beam search checks the objects of captions of photos unlike its training photos against
    the CNN's ImageNet classes and names a class it is sure of (:mod:`vsekit.captioning.guard`): fewer
    invented dogs and people on everyday photos, Flickr8K-style photos captioned as before.

    ``no_repeat_ngram``: no caption repeats a sequence of this many words (0 allows it)."""
    settings = DecodeSettings(decoding=decoding, beam_size=beam, no_repeat_ngram=no_repeat_ngram)
    return CaptionGenerator(method, name_or_path, settings, rerank, joint_model, device=device, guard=guard)


def rank_captions(
    model: VSEModel, images: Sequence[ImageInput], captions: Sequence[str], top: int = 5
) -> list[list[Hit]]:
    """For each image, the ``top`` of ``captions`` by cosine in the joint space (image annotation)."""
    captions = list(captions)
    return rank(model.embed_images(images), model.embed_texts(captions), captions, top)


def rank_images(
    model: VSEModel,
    sentences: Sequence[str],
    images: Sequence[ImageInput],
    top: int = 5,
    keys: Sequence[str] | None = None,
) -> list[list[Hit]]:
    """For each sentence, the ``top`` of ``images`` by cosine (image search). A hit's ``key`` is the
    image's entry of ``keys`` (default: its path as a string)."""
    images = list(images)
    keys = [str(i) for i in images] if keys is None else list(keys)
    return rank(model.embed_texts(list(sentences)), model.embed_images(images), keys, top)
