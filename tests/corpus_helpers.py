"""Test helpers: small corpora written on the fly (no ../shared), fake image features, torch threads."""

import contextlib
import csv
import hashlib
from pathlib import Path

import numpy as np
import torch

from vsekit.data import load_corpus
from vsekit.resources import sample_data_path


def write_tiny_corpus(root: Path, n_train: int = 16, n_dev: int = 6, n_test: int = 6) -> Path:
    by_image = load_corpus(sample_data_path()).captions_by_image()
    ids = list(by_image)[: n_train + n_dev + n_test]
    (root / "Images").mkdir(parents=True, exist_ok=True)
    with open(root / "captions.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["image", "caption", "split"])
        for k, image_id in enumerate(ids):
            (root / "Images" / image_id).touch()
            split = "train" if k < n_train else "dev" if k < n_train + n_dev else "test"
            for text in by_image[image_id]:
                writer.writerow([image_id, text, split])
    return root / "captions.csv"


FAKE_FEATURE_DIM = 1280  # MobileNetV2's one-layer size, so shipped-model code paths see the usual shape


def fake_image_features(corpus, image_ids, backbone="mobilenet_v2", kind="one-layer", fne=None, **kwargs):
    """Stand-in for ``vision.features.image_features``: a fixed random vector per image id, no CNN run.

    The vector depends on the id only, so train and eval (and two processes) see the same features.
    """
    assert kind == "one-layer"
    seeds = [int(hashlib.sha256(i.encode()).hexdigest()[:8], 16) for i in image_ids]
    rows = [np.random.default_rng(s).standard_normal(FAKE_FEATURE_DIM).astype(np.float32) for s in seeds]
    return np.stack(rows), None


@contextlib.contextmanager
def torch_threads(n: int):
    """Run the block with ``n`` torch threads, then restore the count.

    Tiny models train fastest on one thread; two threads crawl when other jobs share the CPU. Module-scoped
    fixtures that train use this directly (they run before function-scoped fixtures); tests use the
    ``one_torch_thread`` fixture from conftest.
    """
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)
