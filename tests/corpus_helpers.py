"""Small corpora written on the fly for tests that must not depend on ../shared."""

import csv
from pathlib import Path

from vsekit.cli import sample_data_path
from vsekit.data import load_corpus


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
