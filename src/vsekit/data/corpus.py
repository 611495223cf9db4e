"""Image-caption corpora: one `Corpus` type and readers for the four formats people actually have.

Supported formats (see `load_corpus` for auto-detection):

* ``flickr8k``: the standard Flickr8K download (``Images/``, ``Flickr8k_text/Flickr8k.token.txt`` and the
  ``Flickr_8k.{train,dev,test}Images.txt`` split files).
* ``csv``: a one-file ``image,caption[,split]`` CSV (the popular Kaggle form of Flickr8K/Flickr30K).
* ``karpathy``: Karpathy's ``dataset_{flickr8k,flickr30k,coco}.json`` split files. Their splits are kept as
  written (``train``, ``val``, ``test``, ``restval``); the usual COCO "Karpathy split" training set is
  ``train`` + ``restval``, reachable as ``corpus.split("train+restval")``.
* ``coco``: the official ``annotations/captions_<split><year>.json`` files with ``<split><year>/`` image
  folders. The split is named after the file with the year stripped (``captions_train2014.json`` ->
  ``"train"``, ``captions_val2017.json`` -> ``"val"``) so that recipes can say "train"/"val" for any year.

Loading never opens an image: existence is checked with one directory listing per image folder, so the
full Flickr8K loads in well under a second. Every problem a user can fix is a `CorpusError` whose message
names the file and line (``path:LINE: what is wrong``), the JSON entry, or the split at fault.
"""

from __future__ import annotations

import csv
import json
import os
import re
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vsekit.data import jsonstream
from vsekit.data.images import ImageCollection
from vsekit.errors import CorpusError

__all__ = [
    "Caption",
    "Corpus",
    "IMAGE_EXTENSIONS",
    "load_coco",
    "load_coco_dir",
    "load_corpus",
    "load_csv",
    "load_flickr8k",
    "load_karpathy",
]

IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff"})

# "dev", "val" and "validation" name the same thing in different datasets; recipes may use any of them.
_SPLIT_ALIASES: tuple[frozenset[str], ...] = (frozenset({"dev", "val", "validation"}),)
# Order in which splits are listed (unknown names follow, in order of first appearance).
_SPLIT_ORDER = ("train", "restval", "dev", "val", "validation", "test")

_FLICKR8K_TOKEN = "Flickr8k.token.txt"
_FLICKR8K_TEXT_DIR = "Flickr8k_text"
# "Flicker8k_Dataset" is the (misspelled) folder name inside the official Flickr8K zip.
_FLICKR8K_IMAGE_DIRS = ("Images", "images", "Flicker8k_Dataset", "Flickr8k_Dataset")
_FLICKR8K_SPLIT_FILES = (
    ("train", "Flickr_8k.trainImages.txt"),
    ("dev", "Flickr_8k.devImages.txt"),
    ("test", "Flickr_8k.testImages.txt"),
)
_CSV_NAMES = ("captions.csv", "captions.txt")
_COCO_CAPTIONS_RE = re.compile(r"^captions_([A-Za-z]+?)(\d{4})?$")


@dataclass(frozen=True)
class Caption:
    """One caption; `source` ("file:line" or "file:images[12]") lets later errors point at its origin."""

    image_id: str
    text: str
    source: str


class Corpus:
    """Images, their captions and named splits, loaded from any supported format.

    `images` maps an image id (the file name relative to the image folder, e.g.
    ``"1000268201_693b08cb0e.jpg"``) to its path. `captions` keeps file order. `splits` maps a split name
    to its ordered image ids; images that belong to no split (Flickr8K has 91) stay in `images`.
    """

    def __init__(
        self,
        *,
        root: Path,
        name: str,
        format: str,
        images: dict[str, Path],
        captions: list[Caption],
        splits: dict[str, list[str]],
    ) -> None:
        self.root = Path(root)
        self.name = name
        self.format = format
        self.images = images
        self.captions = captions
        self.splits = splits
        for split_name, ids in splits.items():
            missing = [i for i in ids if i not in images]
            if missing:
                raise CorpusError(
                    f"{self.root}: split '{split_name}' names {len(missing)} image(s) not in the corpus "
                    f"(first: {missing[0]})"
                )

    # -- splits --------------------------------------------------------------------------------------

    def _resolve_split(self, name: str) -> str:
        if name in self.splits:
            return name
        for group in _SPLIT_ALIASES:
            if name in group:
                for alias in _SPLIT_ORDER:
                    if alias in group and alias in self.splits:
                        return alias
        available = ", ".join(self.splits) if self.splits else "none"
        raise CorpusError(f"{self.root}: no split '{name}' in corpus '{self.name}' (available: {available})")

    def default_split(self, preferred: str = "test") -> str:
        """The split a command uses when none is asked for: ``preferred`` when the corpus has it, else its
        only split (a CSV without a split column has just ``all``); several others are an error that lists
        them and says how to choose."""
        try:
            return self._resolve_split(preferred)
        except CorpusError:
            pass
        if len(self.splits) == 1:
            return next(iter(self.splits))
        available = ", ".join(self.splits) if self.splits else "none"
        raise CorpusError(
            f"{self.root}: corpus '{self.name}' has no '{preferred}' split; choose one with --split "
            f"(available: {available}; join several with '+', e.g. --split {'+'.join(list(self.splits)[:2])})"
        )

    def split(self, name: str) -> Corpus:
        """The images and captions of one split (aliases dev/val/validation; "a+b" joins splits).

        Captions come grouped by image in split order (file order within an image), so with 5 captions per
        image caption ``k`` belongs to image ``k // 5``: what retrieval evaluation wants.
        """
        parts = [self._resolve_split(part.strip()) for part in name.split("+")]
        return self.subset(
            (image_id for part in parts for image_id in self.splits[part]), split="+".join(parts)
        )

    def subset(self, image_ids: Iterable[str], split: str = "subset") -> Corpus:
        """The given images (in that order) and their captions, as a one-split corpus named ``split``."""
        ids = list(dict.fromkeys(image_ids))
        unknown = [i for i in ids if i not in self.images]
        if unknown:
            raise CorpusError(
                f"{self.root}: {len(unknown)} image id(s) not in this corpus, e.g. {unknown[0]!r}"
            )
        position = {image_id: k for k, image_id in enumerate(ids)}
        captions = sorted(
            (c for c in self.captions if c.image_id in position), key=lambda c: position[c.image_id]
        )
        return Corpus(
            root=self.root,
            name=self.name,
            format=self.format,
            images={image_id: self.images[image_id] for image_id in ids},
            captions=captions,
            splits={split: ids},
        )

    # -- views ---------------------------------------------------------------------------------------

    def image_ids(self) -> list[str]:
        """Image ids in a stable order: split order for a single-split corpus, else sorted."""
        if len(self.splits) == 1:
            (ordered,) = self.splits.values()
            in_split = set(ordered)
            return list(ordered) + sorted(i for i in self.images if i not in in_split)
        return sorted(self.images)

    def captions_by_image(self) -> dict[str, list[str]]:
        """Caption texts per image, keyed in `image_ids()` order (an image without captions maps to [])."""
        grouped: dict[str, list[str]] = {image_id: [] for image_id in self.image_ids()}
        for caption in self.captions:
            grouped.setdefault(caption.image_id, []).append(caption.text)
        return grouped

    def caption_texts(self) -> list[str]:
        """Caption texts, parallel to `captions` and `caption_image_ids()`."""
        return [c.text for c in self.captions]

    def caption_image_ids(self) -> list[str]:
        """The image id of each caption, parallel to `captions` (the ground truth for retrieval)."""
        return [c.image_id for c in self.captions]

    def image_collection(self) -> ImageCollection:
        """The corpus's images as an :class:`ImageCollection` (same name, root and ids; no captions)."""
        return ImageCollection(name=self.name, root=self.root, images=self.images)

    def verify_images(self) -> list[str]:
        """Ids whose file is missing on disk now (load only checked once; files can go away later)."""
        return [image_id for image_id, path in self.images.items() if not path.is_file()]

    def __len__(self) -> int:
        return len(self.images)

    def __repr__(self) -> str:
        splits = ", ".join(f"{k}={len(v)}" for k, v in self.splits.items())
        return (
            f"Corpus(name={self.name!r}, format={self.format!r}, images={len(self.images)}, "
            f"captions={len(self.captions)}, splits={{{splits}}}, root={str(self.root)!r})"
        )


# -- shared helpers ----------------------------------------------------------------------------------


def _ordered_splits(splits: dict[str, list[str]]) -> dict[str, list[str]]:
    known = [s for s in _SPLIT_ORDER if s in splits]
    return {s: splits[s] for s in known + [s for s in splits if s not in known]}


def _list_dir(directory: Path) -> set[str]:
    """File names in `directory` (one listing: far cheaper than a stat per image)."""
    try:
        with os.scandir(directory) as entries:
            return {e.name for e in entries if not e.is_dir()}
    except FileNotFoundError:
        raise CorpusError(f"{directory}: image folder does not exist") from None
    except NotADirectoryError:
        raise CorpusError(f"{directory}: image folder is not a directory") from None
    except ValueError:  # a NUL byte in the name
        raise CorpusError(f"{str(directory)!r}: not a valid folder name") from None


def _disk_images(directory: Path) -> dict[str, Path]:
    """Every image file in `directory`, by name (hidden files and non-images are skipped)."""
    return {
        name: directory / name
        for name in sorted(_list_dir(directory))
        if not name.startswith(".") and Path(name).suffix.lower() in IMAGE_EXTENSIONS
    }


def _find_dir(base: Path, names: Iterable[str]) -> Path | None:
    for name in names:
        if (base / name).is_dir():
            return base / name
    return None


def _default_images_dir(anchor: Path) -> Path:
    """`Images/` or `images/` next to a captions file, else its own folder."""
    return _find_dir(anchor.parent, ("Images", "images")) or anchor.parent


def _read_lines(path: Path) -> list[str]:
    """Lines without their line ends; CRLF files (some Flickr8K copies) read like LF files.

    Only \\n, \\r\\n and \\r end a line (universal newlines), as in an editor: ``str.splitlines`` would
    also split a caption at \\x1c, \\x0c or U+2028 and shift every later line number.
    """
    try:
        with open(path, encoding="utf-8-sig") as f:
            lines = f.read().split("\n")
    except FileNotFoundError:
        raise CorpusError(f"{path}: file does not exist") from None
    except UnicodeDecodeError as e:
        raise CorpusError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    if lines[-1] == "":
        lines.pop()
    return lines


def _read_json(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8-sig") as f:
            return json.load(f)
    except FileNotFoundError:
        raise CorpusError(f"{path}: file does not exist") from None
    except json.JSONDecodeError as e:
        raise CorpusError(f"{path}:{e.lineno}: invalid JSON: {e.msg}") from None
    except UnicodeDecodeError as e:
        raise CorpusError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except RecursionError:
        raise CorpusError(f"{path}: invalid JSON: nested too deeply") from None


def _read_split_file(path: Path, split: str, on_disk: set[str], images_dir: Path) -> list[str]:
    """Image ids listed in a Flickr8K split file; each must exist on disk (error names the line)."""
    ids: list[str] = []
    seen: set[str] = set()
    for lineno, line in enumerate(_read_lines(path), 1):
        image_id = line.strip()
        if not image_id or image_id in seen:
            continue
        if image_id not in on_disk:
            raise CorpusError(
                f"{path}:{lineno}: image '{image_id}' of split '{split}' is not in {images_dir}"
            )
        seen.add(image_id)
        ids.append(image_id)
    return ids


def _check_disjoint(splits: dict[str, list[str]], where: dict[str, str]) -> None:
    """An image in two splits would leak test data into training: refuse it."""
    owner: dict[str, str] = {}
    for split, ids in splits.items():
        for image_id in ids:
            other = owner.setdefault(image_id, split)
            if other != split:
                raise CorpusError(
                    f"image '{image_id}' is in split '{other}' ({where[other]}) "
                    f"and in split '{split}' ({where[split]})"
                )


def _keep_captions(captions: list[Caption], images: dict[str, Path], what: Path) -> list[Caption]:
    """Drop (with a warning) captions of images that are neither on disk nor in a split.

    Split membership was checked before this, so what is left are strays such as the original Flickr8K
    line naming ``2258277193_586949ec62.jpg.1``: not worth failing a run for, worth a visible warning.
    """
    kept = [c for c in captions if c.image_id in images]
    dropped = [c for c in captions if c.image_id not in images]
    if dropped:
        n_images = len({c.image_id for c in dropped})
        warnings.warn(
            f"{what}: dropped {len(dropped)} caption(s) of {n_images} image(s) that are not on disk and "
            f"in no split (first: {dropped[0].source}: '{dropped[0].image_id}')",
            stacklevel=3,
        )
    return kept


def _warn_uncaptioned(corpus: Corpus) -> None:
    captioned = {c.image_id for c in corpus.captions}
    for split, ids in corpus.splits.items():
        bare = [i for i in ids if i not in captioned]
        if bare:
            warnings.warn(
                f"{corpus.root}: {len(bare)} image(s) of split '{split}' have no caption "
                f"(first: '{bare[0]}')",
                stacklevel=3,
            )


def _flickr8k_split_files(directory: Path) -> list[tuple[str, Path]]:
    """Flickr8K split files in `directory` or its `Flickr8k_text/` folder, in train/dev/test order."""
    found = []
    for split, file_name in _FLICKR8K_SPLIT_FILES:
        for candidate in (directory / _FLICKR8K_TEXT_DIR / file_name, directory / file_name):
            if candidate.is_file():
                found.append((split, candidate))
                break
    return found


def _read_flickr8k_splits(
    directory: Path, on_disk: set[str], images_dir: Path
) -> tuple[dict[str, list[str]], dict[str, str]]:
    splits: dict[str, list[str]] = {}
    where: dict[str, str] = {}
    for split, path in _flickr8k_split_files(directory):
        splits[split] = _read_split_file(path, split, on_disk, images_dir)
        where[split] = str(path)
    _check_disjoint(splits, where)
    return splits, where


# -- Flickr8K ----------------------------------------------------------------------------------------


def _find_flickr8k_token(root: Path) -> Path | None:
    for candidate in (root / _FLICKR8K_TEXT_DIR / _FLICKR8K_TOKEN, root / _FLICKR8K_TOKEN):
        if candidate.is_file():
            return candidate
    return None


def _parse_flickr8k_tokens(path: Path) -> list[Caption]:
    captions = []
    for lineno, line in enumerate(_read_lines(path), 1):
        if not line.strip():
            continue
        key, tab, text = line.partition("\t")
        image_id, hash_, number = key.strip().rpartition("#")
        if not tab or not hash_ or not image_id or not number.isdigit():
            raise CorpusError(f"{path}:{lineno}: expected 'IMAGE.jpg#N<TAB>caption', found {line[:80]!r}")
        text = text.strip()
        if not text:
            raise CorpusError(f"{path}:{lineno}: empty caption")
        captions.append(Caption(image_id, text, f"{path}:{lineno}"))
    return captions


def _load_flickr8k(root: Path, token_path: Path | None = None) -> Corpus:
    root = Path(root)
    if not root.is_dir():
        raise CorpusError(f"{root}: Flickr8K folder does not exist")
    token_path = token_path or _find_flickr8k_token(root)
    if token_path is None:
        raise CorpusError(
            f"{root}: no {_FLICKR8K_TEXT_DIR}/{_FLICKR8K_TOKEN} (the standard Flickr8K caption file)"
        )
    images_dir = _find_dir(root, _FLICKR8K_IMAGE_DIRS)
    if images_dir is None:
        raise CorpusError(f"{root}: no image folder (looked for {', '.join(_FLICKR8K_IMAGE_DIRS)})")
    images = _disk_images(images_dir)
    splits, _ = _read_flickr8k_splits(root, _list_dir(images_dir), images_dir)
    captions = _keep_captions(_parse_flickr8k_tokens(token_path), images, token_path)
    corpus = Corpus(
        root=root,
        name=root.resolve().name or "flickr8k",
        format="flickr8k",
        images=images,
        captions=captions,
        splits=splits,
    )
    _warn_uncaptioned(corpus)
    return corpus


def load_flickr8k(root: str | os.PathLike[str]) -> Corpus:
    """Read the standard Flickr8K layout: `Images/`, `Flickr8k_text/Flickr8k.token.txt`, split files.

    Splits are "train", "dev", "test" for whichever split files are present (the test split may be held
    back). Images on disk in no split are kept in `images` but in no split.
    """
    return _load_flickr8k(Path(root))


# -- CSV ---------------------------------------------------------------------------------------------


def load_csv(path: str | os.PathLike[str], images_dir: str | os.PathLike[str] | None = None) -> Corpus:
    """Read an ``image,caption[,split]`` CSV (csv module quoting, so captions may contain commas).

    The image folder defaults to `Images/` or `images/` next to the CSV, else the CSV's folder. Without a
    split column the splits come from Flickr8K split files next to the CSV, else one split "all" made of
    the images the CSV names (those missing on disk are dropped with a warning, since no split file says
    they must exist; if none is on disk the image folder is wrong and that is an error).
    """
    path = Path(path)
    img_dir = Path(images_dir) if images_dir is not None else _default_images_dir(path)
    images = _disk_images(img_dir)
    on_disk = _list_dir(img_dir)
    expected = "expected header 'image,caption' (optional third column 'split')"
    try:
        f = open(path, encoding="utf-8-sig", newline="")
    except FileNotFoundError:
        raise CorpusError(f"{path}: file does not exist") from None
    captions: list[Caption] = []
    row_splits: dict[str, list[str]] = {}
    split_of: dict[str, tuple[str, int]] = {}
    with f:
        reader = csv.reader(f)
        try:
            header = next(reader, None)
            if header is None:
                raise CorpusError(f"{path}: empty file; {expected}")
            columns = [h.strip().lower() for h in header]
            if columns not in (["image", "caption"], ["image", "caption", "split"]):
                raise CorpusError(f"{path}:1: {expected}, found {','.join(header)!r}")
            has_split = len(columns) == 3
            for row in reader:
                lineno = reader.line_num
                if not row or not any(field.strip() for field in row):
                    continue
                if len(row) != len(columns):
                    raise CorpusError(
                        f"{path}:{lineno}: expected {len(columns)} fields ({','.join(columns)}), "
                        f"found {len(row)} (quote captions that contain commas)"
                    )
                image_id, text = row[0].strip(), row[1].strip()
                if not image_id:
                    raise CorpusError(f"{path}:{lineno}: empty image name")
                if not text:
                    raise CorpusError(f"{path}:{lineno}: empty caption")
                captions.append(Caption(image_id, text, f"{path}:{lineno}"))
                split = row[2].strip() if has_split else ""
                if not split:
                    continue
                if image_id not in on_disk:
                    raise CorpusError(
                        f"{path}:{lineno}: image '{image_id}' of split '{split}' is not in {img_dir}"
                    )
                previous = split_of.get(image_id)
                if previous is None:
                    split_of[image_id] = (split, lineno)
                    row_splits.setdefault(split, []).append(image_id)
                elif previous[0] != split:
                    raise CorpusError(
                        f"{path}:{lineno}: image '{image_id}' is in split '{split}' here but in split "
                        f"'{previous[0]}' on line {previous[1]}"
                    )
        except csv.Error as e:
            raise CorpusError(f"{path}:{reader.line_num}: malformed CSV: {e}") from None
        except UnicodeDecodeError as e:
            raise CorpusError(
                f"{path}: not UTF-8 text ({e.reason} near line {reader.line_num + 1})"
            ) from None

    if has_split:
        splits = _ordered_splits(row_splits)
    else:
        splits, _ = _read_flickr8k_splits(path.parent, on_disk, img_dir)
        if not splits:
            named = list(dict.fromkeys(c.image_id for c in captions))
            present = [i for i in named if i in images]
            if named and not present:
                raise CorpusError(
                    f"{path}: none of the {len(named)} images it names is in {img_dir} "
                    "(pass images_dir= to point at the image folder)"
                )
            splits = {"all": present}
    captions = _keep_captions(captions, images, path)
    corpus = Corpus(
        root=path.parent,
        name=path.parent.resolve().name or path.stem,
        format="csv",
        images=images,
        captions=captions,
        splits=splits,
    )
    _warn_uncaptioned(corpus)
    return corpus


# -- Karpathy JSON -----------------------------------------------------------------------------------


def _read_streamed(stream: Callable[[], Corpus], whole: Callable[[], Corpus]) -> Corpus:
    """``stream()`` (one entry at a time: :mod:`vsekit.data.jsonstream`), else ``whole()`` (the reader
    over the parsed file): without ijson, for a file the stream does not handle, and for any error,
    which the whole-file reader then reports as it always has (naming the file, entry and line)."""
    if not jsonstream.available():
        return whole()
    try:
        return stream()
    except (*jsonstream.STREAM_ERRORS, OSError, CorpusError):
        return whole()


def _karpathy_from_data(path: Path, data: Any, images_dir: Path) -> Corpus:
    if not isinstance(data, dict) or not isinstance(data.get("images"), list):
        raise CorpusError(f"{path}: not a Karpathy split file (expected an object with an 'images' list)")
    return _karpathy_from_entries(path, data["images"], data.get("dataset"), images_dir)


def _karpathy_streamed(path: Path, images_dir: Path) -> Corpus:
    if jsonstream.top_level_kinds(path, ["images"]).get("images") != "array":
        raise jsonstream.NotStreamable
    name = jsonstream.top_level_value(path, "dataset")
    return _karpathy_from_entries(path, jsonstream.stream_items(path, "images"), name, images_dir)


def _karpathy_from_entries(path: Path, entries: Iterable[Any], name: Any, images_dir: Path) -> Corpus:
    listings: dict[Path, set[str]] = {}
    images: dict[str, Path] = {}
    captions: list[Caption] = []
    splits: dict[str, list[str]] = {}
    for k, entry in enumerate(entries):
        where = f"{path}:images[{k}]"
        if not isinstance(entry, dict):
            raise CorpusError(f"{where}: expected an object, found {type(entry).__name__}")
        filename, filepath, split = entry.get("filename"), entry.get("filepath", ""), entry.get("split")
        if not isinstance(filename, str) or not filename:
            raise CorpusError(f"{where}: missing 'filename'")
        if not isinstance(filepath, str):
            raise CorpusError(f"{where}: 'filepath' must be a string")
        if not isinstance(split, str) or not split:
            raise CorpusError(f"{where}: missing 'split' (image '{filename}')")
        image_id = f"{filepath.strip('/')}/{filename}" if filepath else filename
        if image_id in images:
            raise CorpusError(f"{where}: image '{image_id}' is listed twice")
        folder = images_dir / filepath if filepath else images_dir
        listing = listings.get(folder)
        if listing is None:
            try:
                listing = listings[folder] = _list_dir(folder)
            except CorpusError as exc:  # name the entry too: its 'filepath' is what points there
                raise CorpusError(f"{where}: {exc}") from None
        if filename not in listing:
            raise CorpusError(f"{where}: image '{image_id}' of split '{split}' is not in {images_dir}")
        images[image_id] = folder / filename
        splits.setdefault(split, []).append(image_id)
        sentences = entry.get("sentences", [])
        if not isinstance(sentences, list):
            raise CorpusError(f"{where}: 'sentences' must be a list")
        for j, sentence in enumerate(sentences):
            raw = sentence.get("raw") if isinstance(sentence, dict) else None
            if raw is None and isinstance(sentence, dict) and isinstance(sentence.get("tokens"), list):
                raw = " ".join(str(t) for t in sentence["tokens"])
            if not isinstance(raw, str) or not raw.strip():
                raise CorpusError(f"{where}.sentences[{j}]: empty caption")
            captions.append(Caption(image_id, raw.strip(), where))
    corpus = Corpus(
        root=path.parent,
        name=name if isinstance(name, str) and name else path.stem,
        format="karpathy",
        images=images,
        captions=captions,
        splits=_ordered_splits(splits),
    )
    _warn_uncaptioned(corpus)
    return corpus


def load_karpathy(
    json_path: str | os.PathLike[str], images_dir: str | os.PathLike[str] | None = None
) -> Corpus:
    """Read Karpathy's ``dataset_*.json``; image path = images_dir / filepath / filename.

    Image ids include the filepath when there is one (``val2014/COCO_val2014_...jpg``). Split names stay
    as written: "val" (reachable as "dev"), "test", "train" and COCO's "restval", kept apart because the
    standard COCO recipe trains on ``split("train+restval")`` while others train on "train" alone.
    """
    path = Path(json_path)
    img_dir = Path(images_dir) if images_dir is not None else _default_images_dir(path)
    return _read_streamed(
        lambda: _karpathy_streamed(path, img_dir),
        lambda: _karpathy_from_data(path, _read_json(path), img_dir),
    )


# -- COCO --------------------------------------------------------------------------------------------


def _coco_split_name(path: Path) -> tuple[str, str]:
    """(split, folder) from a captions file name: captions_train2014.json -> ("train", "train2014")."""
    match = _COCO_CAPTIONS_RE.match(path.stem)
    if match is None:
        return "all", path.stem
    return match.group(1).lower(), match.group(1) + (match.group(2) or "")


def _coco_from_data(path: Path, data: Any, images_dir: Path, split: str) -> Corpus:
    if not isinstance(data, dict) or not isinstance(data.get("images"), list):
        raise CorpusError(f"{path}: not a COCO captions file (expected 'images' and 'annotations' lists)")
    annotations = data.get("annotations")
    if not isinstance(annotations, list):
        raise CorpusError(f"{path}: not a COCO captions file (no 'annotations' list)")
    return _coco_from_lists(path, data["images"], annotations, images_dir, split)


def _coco_streamed(path: Path, images_dir: Path, split: str) -> Corpus:
    kinds = jsonstream.top_level_kinds(path, ["images", "annotations"])
    if kinds.get("images") != "array" or kinds.get("annotations") != "array":
        raise jsonstream.NotStreamable
    images, annotations = (jsonstream.stream_items(path, key) for key in ("images", "annotations"))
    return _coco_from_lists(path, images, annotations, images_dir, split)


def _read_coco(path: Path, images_dir: Path, split: str) -> Corpus:
    return _read_streamed(
        lambda: _coco_streamed(path, images_dir, split),
        lambda: _coco_from_data(path, _read_json(path), images_dir, split),
    )


def _coco_from_lists(
    path: Path, image_entries: Iterable[Any], annotations: Iterable[Any], images_dir: Path, split: str
) -> Corpus:
    on_disk = _list_dir(images_dir)
    file_of: dict[Any, str] = {}
    images: dict[str, Path] = {}
    for k, entry in enumerate(image_entries):
        where = f"{path}:images[{k}]"
        if not isinstance(entry, dict) or "id" not in entry or not isinstance(entry.get("file_name"), str):
            raise CorpusError(f"{where}: expected an object with 'id' and 'file_name'")
        file_name = entry["file_name"]
        if not isinstance(entry["id"], int | str):
            raise CorpusError(f"{where}: 'id' must be a number or a string")
        if entry["id"] in file_of:
            raise CorpusError(f"{where}: image id {entry['id']} is listed twice")
        if file_name not in on_disk:
            raise CorpusError(f"{where}: image '{file_name}' of split '{split}' is not in {images_dir}")
        file_of[entry["id"]] = file_name
        images[file_name] = images_dir / file_name
    captions: list[Caption] = []
    for k, ann in enumerate(annotations):
        where = f"{path}:annotations[{k}]"
        if not isinstance(ann, dict) or "image_id" not in ann:
            raise CorpusError(f"{where}: expected an object with 'image_id' and 'caption'")
        if not isinstance(ann["image_id"], int | str):
            raise CorpusError(f"{where}: 'image_id' must be a number or a string")
        image_id = file_of.get(ann["image_id"])
        if image_id is None:
            raise CorpusError(f"{where}: image_id {ann['image_id']} is not in 'images'")
        text = ann.get("caption")
        if not isinstance(text, str) or not text.strip():
            raise CorpusError(f"{where}: empty caption")
        captions.append(Caption(image_id, text.strip(), where))
    corpus = Corpus(
        root=images_dir.parent,
        name="coco",
        format="coco",
        images=images,
        captions=captions,
        splits={split: list(images)},
    )
    _warn_uncaptioned(corpus)
    return corpus


def load_coco(captions_json: str | os.PathLike[str], images_dir: str | os.PathLike[str]) -> Corpus:
    """Read one COCO captions file; its one split is named after the file with the year stripped.

    ``captions_train2014.json`` -> "train", ``captions_val2017.json`` -> "val" (any other name -> "all"),
    so recipes say "train"/"val" whatever the release. Image ids are the COCO ``file_name``s.
    """
    path = Path(captions_json)
    split, _ = _coco_split_name(path)
    return _read_coco(path, Path(images_dir), split)


def _coco_images_dir(root: Path, path: Path) -> Path:
    split, folder = _coco_split_name(path)
    found = _find_dir(root, (folder, split, "images"))
    if found is None:
        raise CorpusError(
            f"{path}: no image folder for split '{split}' (looked for {folder}/, images/ in {root})"
        )
    return found


def _merge(root: Path, corpora: list[Corpus], files: list[Path]) -> Corpus:
    images: dict[str, Path] = {}
    captions: list[Caption] = []
    splits: dict[str, list[str]] = {}
    for corpus, path in zip(corpora, files, strict=True):
        for image_id, image_path in corpus.images.items():
            if image_id in images:
                raise CorpusError(f"{path}: image '{image_id}' is also in another captions file")
            images[image_id] = image_path
        captions.extend(corpus.captions)
        for split, ids in corpus.splits.items():
            if split in splits:
                raise CorpusError(f"{path}: split '{split}' comes from two captions files")
            splits[split] = ids
    return Corpus(
        root=root,
        name="coco",
        format="coco",
        images=images,
        captions=captions,
        splits=_ordered_splits(splits),
    )


def load_coco_dir(root: str | os.PathLike[str]) -> Corpus:
    """Read a COCO folder: ``annotations/captions_*.json`` plus one image folder per split.

    Each file's images are looked up in the folder named like the file (``captions_val2014.json`` ->
    ``root/val2014``), else ``root/<split>``, else ``root/images``.
    """
    root = Path(root)
    files = sorted((root / "annotations").glob("captions_*.json"))
    if not files:
        raise CorpusError(f"{root}: no annotations/captions_*.json (the COCO captions files)")
    corpora = []
    for path in files:
        split, _ = _coco_split_name(path)
        corpora.append(_read_coco(path, _coco_images_dir(root, path), split))
    return _merge(root, corpora, files)


# -- auto-detection ----------------------------------------------------------------------------------


def _load_json_file(path: Path) -> Corpus:
    """A .json file: Karpathy ('images' and no 'annotations') or COCO ('images' and 'annotations'),
    streamed when it is well-formed (the kinds of its top-level values are read first)."""
    if not jsonstream.available():
        return _load_json_whole(path)
    try:
        images = jsonstream.top_level_kinds(path, ["images"]).get("images")
        annotations = images == "array" and jsonstream.has_key(path, "annotations")
    except (*jsonstream.STREAM_ERRORS, OSError):
        return _load_json_whole(path)
    if images == "array" and not annotations:
        return _read_streamed(
            lambda: _karpathy_streamed(path, _default_images_dir(path)), lambda: _load_json_whole(path)
        )
    if images == "array":
        root = path.parent.parent if path.parent.name == "annotations" else path.parent
        split, _ = _coco_split_name(path)
        return _read_streamed(
            lambda: _coco_streamed(path, _coco_images_dir(root, path), split), lambda: _load_json_whole(path)
        )
    return _load_json_whole(path)


def _load_json_whole(path: Path) -> Corpus:
    data = _read_json(path)
    images = data.get("images") if isinstance(data, dict) else None
    if isinstance(images, list) and "annotations" not in data:
        return _karpathy_from_data(path, data, _default_images_dir(path))
    if isinstance(images, list) and isinstance(data.get("annotations"), list):
        root = path.parent.parent if path.parent.name == "annotations" else path.parent
        split, _ = _coco_split_name(path)
        return _coco_from_data(path, data, _coco_images_dir(root, path), split)
    raise CorpusError(
        f"{path}: JSON is neither a Karpathy split file ('images' with 'sentences') "
        "nor a COCO captions file ('images' and 'annotations')"
    )


def _looks_like_csv_header(path: Path) -> bool:
    try:
        with open(path, encoding="utf-8-sig", newline="") as f:
            first = f.readline()
    except (OSError, UnicodeDecodeError):
        return False
    return first.strip().lower().replace(" ", "").startswith("image,caption")


def _load_file(path: Path) -> Corpus:
    suffix = path.suffix.lower()
    if suffix == ".json":
        return _load_json_file(path)
    if suffix in (".csv", ".txt", ".tsv") and _looks_like_csv_header(path):
        return load_csv(path)
    if suffix == ".txt":
        for root in (path.parent, path.parent.parent):
            if _find_dir(root, _FLICKR8K_IMAGE_DIRS) is not None:
                return _load_flickr8k(root, token_path=path)
    raise CorpusError(
        f"{path}: unknown corpus file (looked for a .json Karpathy/COCO file, a CSV with header "
        "'image,caption', or a Flickr8K token .txt next to an Images/ folder)"
    )


def load_corpus(path: str | os.PathLike[str]) -> Corpus:
    """Load a corpus from a folder or file, detecting its format.

    A folder is tried as: the standard Flickr8K layout, then one ``dataset_*.json`` (Karpathy), then
    ``annotations/captions_*.json`` (COCO), then ``captions.csv``/``captions.txt`` (CSV). A file is read by
    its extension and first line.
    """
    path = Path(path)
    if path.is_file():
        return _load_file(path)
    if not path.is_dir():
        raise CorpusError(f"{path}: no such file or folder")
    if _find_flickr8k_token(path) is not None and _find_dir(path, _FLICKR8K_IMAGE_DIRS) is not None:
        return _load_flickr8k(path)
    karpathy = sorted(path.glob("dataset_*.json"))
    if len(karpathy) > 1:
        names = ", ".join(p.name for p in karpathy)
        raise CorpusError(f"{path}: several Karpathy split files ({names}); pass the one to load")
    if karpathy:
        return load_karpathy(karpathy[0])
    if any((path / "annotations").glob("captions_*.json")):
        return load_coco_dir(path)
    for name in _CSV_NAMES:
        if (path / name).is_file():
            return load_csv(path / name)
    raise CorpusError(
        f"{path}: no corpus found (looked for {_FLICKR8K_TEXT_DIR}/{_FLICKR8K_TOKEN} with an Images/ folder, "
        "dataset_*.json, annotations/captions_*.json, captions.csv, captions.txt)"
    )
