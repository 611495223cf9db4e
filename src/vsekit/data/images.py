"""Image collections: a named set of image files, with or without captions.

An :class:`ImageCollection` is what the feature cache works on: a name, a root folder and a mapping from
image id to file. A captioned :class:`~vsekit.data.corpus.Corpus` has one (``corpus.image_collection()``);
a plain folder of one's own photos is one too (:meth:`ImageCollection.from_folder`), with ids the file
paths relative to the folder (``"2023/beach/IMG_0042.jpg"``), so nothing needs captions to be indexed.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from vsekit.errors import CorpusError

__all__ = ["OPTIONAL_PHOTO_EXTENSIONS", "PHOTO_EXTENSIONS", "ImageCollection", "photo_extensions"]

#: File suffixes (compared case-insensitively) that a folder of photos is scanned for: formats every
#: Pillow build reads.
PHOTO_EXTENSIONS = frozenset({".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff"})
#: Suffixes read only when Pillow has an opener for their format: AVIF is built into recent Pillow
#: wheels, HEIF (every iPhone photo) comes from a plugin (pillow-heif) that registers itself with Pillow.
OPTIONAL_PHOTO_EXTENSIONS = {".heic": "HEIF", ".heif": "HEIF", ".avif": "AVIF"}


def photo_extensions() -> frozenset[str]:
    """The suffixes vsekit reads as photos now: :data:`PHOTO_EXTENSIONS` plus each optional one whose
    format Pillow can open in this process (the one place that answers "which files are photos")."""
    from PIL import Image

    _register_heif()
    Image.init()  # imports Pillow's own plugins; a third-party opener registered itself on import
    return PHOTO_EXTENSIONS | {ext for ext, fmt in OPTIONAL_PHOTO_EXTENSIONS.items() if fmt in Image.OPEN}


def _register_heif() -> None:
    """Register pillow-heif's opener when it is installed, so that a scan counts .heic files as photos
    exactly when the decoder can read them (whatever else this process has imported before)."""
    try:
        from pillow_heif import register_heif_opener
    except ImportError:
        return
    register_heif_opener()


@dataclass(frozen=True, eq=False)
class ImageCollection:
    """A named set of image files: ``images`` maps an image id to its path.

    ``name`` and ``root`` identify the collection (the feature cache names its directory after them);
    ids are unique strings, by convention the file's path relative to ``root`` in POSIX form.
    """

    name: str
    root: Path
    images: Mapping[str, Path] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))
        object.__setattr__(self, "images", {str(k): Path(v) for k, v in self.images.items()})

    @classmethod
    def from_folder(cls, folder: str | os.PathLike[str], name: str | None = None) -> ImageCollection:
        """Every photo under ``folder``, recursively (hidden files and folders skipped), sorted by id.

        Photos are files with a suffix of :func:`photo_extensions` (.jpg, .jpeg, .png, .webp, .bmp,
        .gif, .tif, .tiff, and .heic/.heif/.avif when Pillow reads them), in any letter case. The name
        defaults to the folder's name.
        """
        root = Path(folder).expanduser()
        if not root.exists():
            raise CorpusError(f"{root}: photo folder does not exist")
        if not root.is_dir():
            raise CorpusError(f"{root}: not a folder")
        found: dict[str, Path] = {}
        extensions = photo_extensions()
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for filename in filenames:
                if filename.startswith(".") or Path(filename).suffix.lower() not in extensions:
                    continue
                path = Path(dirpath) / filename
                found[path.relative_to(root).as_posix()] = path
        images = {image_id: found[image_id] for image_id in sorted(found)}
        return cls(name=name or root.resolve().name or "photos", root=root, images=images)

    @classmethod
    def from_paths(cls, paths: Iterable[str | os.PathLike[str]], name: str = "files") -> ImageCollection:
        """Loose image files as a collection rooted at their common folder (ids: relative paths)."""
        files = [_absolute(p) for p in paths]
        if not files:
            return cls(name=name, root=Path.cwd(), images={})
        root = Path(os.path.commonpath([str(f.parent) for f in files]))
        return cls(name=name, root=root, images={f.relative_to(root).as_posix(): f for f in files})

    def id_of(self, path: str | os.PathLike[str]) -> str:
        """The id :meth:`from_paths` gives ``path``: its path relative to ``root``, in POSIX form."""
        return _absolute(path).relative_to(self.root.absolute()).as_posix()

    def image_ids(self) -> list[str]:
        """The ids in the collection's order."""
        return list(self.images)

    def subset(self, image_ids: Iterable[str]) -> ImageCollection:
        """The given images (in that order, duplicates dropped) as a collection of the same name and root."""
        ids = list(dict.fromkeys(image_ids))
        unknown = [i for i in ids if i not in self.images]
        if unknown:
            raise CorpusError(
                f"{self.root}: {len(unknown)} image(s) not in collection {self.name!r}, e.g. {unknown[0]!r}"
            )
        return ImageCollection(name=self.name, root=self.root, images={i: self.images[i] for i in ids})

    def missing(self) -> list[str]:
        """Ids whose file is not on disk now."""
        return [image_id for image_id, path in self.images.items() if not path.is_file()]

    def __len__(self) -> int:
        return len(self.images)

    def __repr__(self) -> str:
        return f"ImageCollection(name={self.name!r}, images={len(self.images)}, root={str(self.root)!r})"


def _absolute(path: str | os.PathLike[str]) -> Path:
    """``path`` made absolute without resolving symlinks (the file the user named)."""
    return Path(os.path.abspath(Path(path).expanduser()))
