"""Corpora (Flickr8K, CSV, Karpathy JSON, COCO), image collections, the caption tokenizer and vocabulary."""

from vsekit.data.corpus import (
    IMAGE_EXTENSIONS,
    Caption,
    Corpus,
    load_coco,
    load_coco_dir,
    load_corpus,
    load_csv,
    load_flickr8k,
    load_karpathy,
)
from vsekit.data.images import PHOTO_EXTENSIONS, ImageCollection, photo_extensions
from vsekit.data.vocab import SPECIALS, Vocabulary, build_vocabulary, tokenize

__all__ = [
    "IMAGE_EXTENSIONS",
    "SPECIALS",
    "Caption",
    "Corpus",
    "ImageCollection",
    "PHOTO_EXTENSIONS",
    "Vocabulary",
    "build_vocabulary",
    "load_coco",
    "load_coco_dir",
    "load_corpus",
    "load_csv",
    "load_flickr8k",
    "photo_extensions",
    "load_karpathy",
    "tokenize",
]
