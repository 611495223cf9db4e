"""Make the validation slice the recipes select on (the selection protocol of issue 24).

    python ship/make_validation_slice.py            # writes src/vsekit/recipes/splits/flickr8k-val1000.json

1,000 of the 6,000 Flickr8K training photos, drawn with :func:`vsekit.data.splits.draw_slice` (the smallest
``sha256("0:<image id>")``): re-running this on the standard split files gives the same file byte for byte
(tests/test_splits.py checks it when ../shared/data/flickr8k is there).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from _common import SHARED
from vsekit.data import load_corpus
from vsekit.data.splits import make_validation_slice, write_validation_slice
from vsekit.resources import SPLITS_DIR

DESCRIPTION = (
    "Validation slice of the selection protocol (issue 24): 1,000 Flickr8K training photos held out of "
    "training; every choice (epochs, seeds, ensemble members, rerank weights, beam, length penalty) is made "
    "on it, models train on the other 5,000 (split 'train-minus-val1000'), and dev is read once per shipped "
    "model. Drawn by ship/make_validation_slice.py: the 1,000 training ids with the smallest "
    "sha256('<seed>:<image id>'), listed sorted."
)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", type=Path, default=SHARED)
    parser.add_argument("--size", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=SPLITS_DIR / "flickr8k-val1000.json")
    args = parser.parse_args()
    corpus = load_corpus(args.data)
    vslice = make_validation_slice(corpus, f"val{args.size}", args.size, args.seed, "train", DESCRIPTION)
    write_validation_slice(vslice, args.out)
    print(f"{args.out}: {len(vslice.image_ids)} of {vslice.source_count} training images (seed {args.seed})")


if __name__ == "__main__":
    main()
