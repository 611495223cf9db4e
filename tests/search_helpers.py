"""A small photo folder for the index tests: sample photos as JPEG, PNG and upper-case names, one in a
subfolder, one GIF, and one corrupt file that must be reported and skipped."""

from __future__ import annotations

import shutil
from pathlib import Path

from PIL import Image

from vsekit.resources import sample_data_path

SAMPLE_IMAGES = sorted((sample_data_path() / "Images").glob("*.jpg"))


def make_photo_folder(root: Path, n: int = 12) -> Path:
    """``n`` readable photos under ``root`` (mixed formats and letter cases) plus ``broken.jpg``."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "trip").mkdir(exist_ok=True)
    for k, src in enumerate(SAMPLE_IMAGES[:n]):
        if k % 4 == 1:
            Image.open(src).convert("RGB").save(root / f"{src.stem}.png")
        elif k % 4 == 2:
            shutil.copyfile(src, root / f"{src.stem}.JPG")
        elif k == 3:
            Image.open(src).convert("RGB").save(root / f"{src.stem}.gif")
        elif k % 4 == 3:
            shutil.copyfile(src, root / "trip" / src.name)
        else:
            shutil.copyfile(src, root / src.name)
    (root / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 this is not really a jpeg")
    (root / "notes.txt").write_text("not a photo")
    return root
