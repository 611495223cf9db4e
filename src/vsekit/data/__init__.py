"""Corpora (Flickr8K, CSV, Karpathy JSON, COCO), the caption tokenizer and the word vocabulary."""

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
from vsekit.data.vocab import SPECIALS, Vocabulary, build_vocabulary, tokenize

__all__ = [
    "IMAGE_EXTENSIONS",
    "SPECIALS",
    "Caption",
    "Corpus",
    "Vocabulary",
    "build_vocabulary",
    "load_coco",
    "load_coco_dir",
    "load_corpus",
    "load_csv",
    "load_flickr8k",
    "load_karpathy",
    "tokenize",
]
