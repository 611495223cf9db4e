"""Write src/vsekit/vision/imagenet_classes.tsv: the 1,000 ImageNet-1k classes in the classifier's order.

The shipped CNNs (EfficientNet-Lite0, MobileNetV2) end in a 1,000-way ImageNet classifier whose output i is
the i-th WordNet synset in sorted order. Their names come from the PyPI package ``timm`` (Apache-2.0), which
ships the WordNet 3.0 lemmas and glosses of those synsets as data (``timm/data/_info/``; WordNet 3.0 is under
the Princeton WordNet licence, which allows redistribution with its notice: see docs/concepts.md). timm does
not import here (it needs torchvision), so this script reads the files straight from its wheel:

    pip download --no-deps timm==1.0.31 -d /tmp/timm
    python scripts/imagenet_classes.py /tmp/timm/timm-1.0.31-py3-none-any.whl

Run once; the TSV is committed. Columns: index, synset, lemmas (comma-separated, as WordNet lists
them), gloss.
"""

from __future__ import annotations

import argparse
import zipfile
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "src" / "vsekit" / "vision" / "imagenet_classes.tsv"
INFO = "timm/data/_info/"


def _pairs(text: str) -> dict[str, str]:
    return dict(line.split("\t", 1) for line in text.splitlines() if line.strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("wheel", type=Path, help="timm's wheel (pip download --no-deps timm)")
    args = parser.parse_args()
    with zipfile.ZipFile(args.wheel) as wheel:
        read = lambda name: wheel.read(INFO + name).decode("utf-8")  # noqa: E731
        synsets = read("imagenet_synsets.txt").split()
        lemmas, glosses = (
            _pairs(read("imagenet_synset_to_lemma.txt")),
            _pairs(read("imagenet_synset_to_definition.txt")),
        )
    if len(synsets) != 1000 or synsets != sorted(synsets):
        raise SystemExit(f"{args.wheel}: expected the 1,000 ImageNet-1k synsets in sorted order")
    rows = ["index\tsynset\tlemmas\tgloss"]
    for i, wnid in enumerate(synsets):
        clean = lambda s: " ".join(s.split()).replace("\t", " ")  # noqa: E731
        rows.append(f"{i}\t{wnid}\t{clean(lemmas[wnid])}\t{clean(glosses[wnid])}")
    OUT.write_text("\n".join(rows) + "\n", encoding="utf-8")
    print(f"wrote {OUT} ({len(synsets)} classes) from {args.wheel.name}")


if __name__ == "__main__":
    main()
