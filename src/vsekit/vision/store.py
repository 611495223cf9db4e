"""The on-disk feature store: one cache directory holds one feature matrix for one image collection under
one configuration, and a lock lets processes sharing it take turns.

A configuration (:class:`FeatureConfig`: backbone, weights file by content hash, layer set, preprocessing,
precision) names the directory; a directory made with another configuration is refused. Rows are keyed
by image file (relative id, size and modification time), so an edited or added photo is recomputed and
nothing else is. Rows live in a float16 memory map and a ``done`` mask is committed atomically, which is
what makes an interrupted extraction resumable without recomputing finished images; a finished
extraction records the matrix's sha256, checked once per process when the store is opened. Processes
sharing a cache take turns: each holds ``<dir>.lock`` (an exclusive ``flock``) while it fills the
directory and copies its rows out. Filling a store through the CNN is :mod:`vsekit.vision.extract`.

Layout of a cache directory::

    meta.json         configuration, image ids and file identities (size, mtime; a content digest for
                      files whose times move), dims, failed images, generation
    raw.f16           float16 memmap [n_images, dim] (one-layer: pooled_dim; full: sum of tap dims;
                      grid: cells x pooled_dim, the last conv map's cells row-major, channels last;
                      pre-head: cells x pre_head_dim, the same for the last block's map)
    done.npy          bool [n_images]: rows that hold finished features
                      (generation g > 0, after the image set changed: raw.g.f16 and done.g.npy; the new
                      generation's files are written beside the old ones and meta.json swaps them in)
    fne.safetensors   fitted FullNetworkEmbedding statistics (full only, after ``fit_fne``)
    fne_codes.npy     int8 {-1,0,1} [n_images, dim] (full only): the FNE, one byte per value
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import threading
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from vsekit.data.corpus import Corpus
from vsekit.data.images import ImageCollection
from vsekit.errors import ConfigMismatchError, VsekitError, command
from vsekit.fileio import atomic_save_npy, atomic_write_bytes, new_memmap
from vsekit.resources import default_cache_root
from vsekit.vision.backbones import BACKBONES, resolve_weights, weights_fingerprint
from vsekit.vision.engine import precision_of
from vsekit.vision.fne import DEFAULT_THRESHOLDS, FullNetworkEmbedding
from vsekit.vision.spec import FeatureSpec

__all__ = [
    "DamagedMatrixError",
    "FeatureConfig",
    "FeatureStore",
    "LAYER_SETS",
    "cache_config",
    "cache_dir_for",
    "cache_lock",
    "feature_config",
]

FORMAT_VERSION = 1

LAYER_SETS = ("one-layer", "full", "grid", "pre-head")


@dataclass(frozen=True)
class FeatureConfig:
    """Everything that changes the numbers in a feature matrix; its hash names the cache directory."""

    backbone: str
    weights_sha: str
    layers: str
    preprocessing: str
    format_version: int = FORMAT_VERSION
    #: "int8" for rows of the int8 engine (another cache); float rows keep the key they always had.
    precision: str = "fp32"

    def key(self) -> str:
        fields = asdict(self)
        if fields["precision"] == "fp32":
            del fields["precision"]
        blob = json.dumps(fields, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:12]

    def describe(self) -> str:
        return (
            f"backbone={self.backbone}, weights={self.weights_sha}, layers={self.layers}, "
            f"preprocessing={self.preprocessing}"
            + (f", precision={self.precision}" if self.precision != "fp32" else "")
        )


def feature_config(
    backbone: str, layers: str = "one-layer", weights: str | Path | None = None, engine: str | None = None
) -> FeatureConfig:
    """The cache key of ``backbone``'s ``layers`` activations with ``weights`` (None: the installed ones)
    as ``engine`` computes them (see :func:`cache_config`)."""
    return cache_config(_spec_for_layers(backbone, layers, weights), engine)


def _spec_for_layers(backbone: str, layers: str, weights: str | Path | None) -> FeatureSpec:
    if backbone not in BACKBONES:
        raise VsekitError(f"unknown backbone {backbone!r}; known: {', '.join(sorted(BACKBONES))}")
    if layers not in LAYER_SETS:
        raise VsekitError(f"unknown layer set {layers!r}; known: {', '.join(LAYER_SETS)}")
    kind = {"one-layer": "one-layer", "full": "fne", "grid": "grid", "pre-head": "pre-head"}[layers]
    return FeatureSpec(backbone, kind, weights=weights)


def cache_config(spec: FeatureSpec, engine: str | None = None) -> FeatureConfig:
    """The cache key of ``spec``'s activations (``layers="full"`` for FNE: the codes are derived data) as
    ``engine`` (None: the default engine) computes them: the int8 engine's rows are cached apart."""
    path = resolve_weights(spec.backbone, spec.weights)
    assert spec.preprocessing is not None  # FeatureSpec.__post_init__ fills it in
    return FeatureConfig(
        backbone=spec.backbone,
        weights_sha=weights_fingerprint(path),
        layers=spec.layers,
        preprocessing=spec.preprocessing.key(),
        precision=precision_of(engine),
    )


_held_locks = threading.local()


@contextlib.contextmanager
def cache_lock(path: str | Path) -> Iterator[None]:
    """Hold the exclusive lock of the cache directory ``path`` (a ``<dir>.lock`` file beside it).

    Two processes filling one cache (say two trainings started side by side) would otherwise both
    rewrite ``raw.f16`` and ``meta.json`` and read each other's half-written files. The lock is
    re-entrant within a thread, so ``image_features`` can hold it across the ``extract_features`` and
    ``fit_fne`` it calls; a waiting process simply blocks until the other one has finished.
    """
    key = str(Path(path).resolve())
    held = getattr(_held_locks, "paths", None)
    if held is None:
        held = _held_locks.paths = {}
    if key in held:
        held[key] += 1
        try:
            yield
        finally:
            held[key] -= 1
        return
    lock_path = Path(key + ".lock")
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        held[key] = 1
        try:
            yield
        finally:
            del held[key]
            fcntl.flock(handle, fcntl.LOCK_UN)


def _file_identity(path: Path) -> list[int]:
    st = path.stat()
    return [st.st_size, st.st_mtime_ns]


class DamagedMatrixError(VsekitError):
    """A feature matrix whose bytes no longer match the checksum its extraction recorded."""


#: Matrices verified in this process: (file, size, mtime_ns, checksum); each is hashed at most once.
_VERIFIED: set[tuple[str, int, int, str]] = set()


def _matrix_digest(raw_path: Path, done: np.ndarray) -> str:
    """sha256 of the raw matrix file's bytes, then of the done mask."""
    digest = hashlib.sha256()
    with open(raw_path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            digest.update(block)
    digest.update(np.ascontiguousarray(done, dtype=np.bool_).tobytes())
    return digest.hexdigest()


class FeatureStore:
    """One cache directory: a feature matrix for a set of image files under one configuration.

    A finished extraction records a sha256 of the matrix (and done mask) of its generation in
    ``meta.json``; :meth:`open` checks it once per process per file version, so bits flipped on disk
    under an intact header are a :class:`DamagedMatrixError` naming the file, never features.
    """

    def __init__(self, path: Path, meta: dict) -> None:
        self.path = Path(path)
        self.meta = meta
        self.config = FeatureConfig(**meta["config"])
        self.image_ids: list[str] = list(meta["image_ids"])
        self.dim: int = int(meta["dim"])
        self._row = {image_id: i for i, image_id in enumerate(self.image_ids)}

    # ----------------------------------------------------------------- opening
    @classmethod
    def open(cls, path: str | Path, expect: FeatureConfig | None = None, verify: bool = True) -> FeatureStore:
        """Open an existing cache; refuse it if it was made with a configuration other than ``expect``,
        or (``verify``) if its matrix fails its checksum (:meth:`verify`)."""
        path = Path(path)
        meta_path = path / "meta.json"
        if not meta_path.is_file():
            extract = command("extract", "--data", "CORPUS", "--cache-dir", path)
            raise VsekitError(f"{path}: not a vsekit feature cache (no meta.json); {extract} fills it")
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
            store = cls(path, meta)
            if not all(isinstance(i, str) for i in store.image_ids) or store.dim <= 0:
                raise ValueError("bad 'image_ids' or 'dim'")
        except (ValueError, KeyError, TypeError, RecursionError) as exc:  # JSON and Unicode errors too
            raise VsekitError(
                f"{meta_path}: unreadable feature-cache metadata ({type(exc).__name__}: {exc}); "
                f"delete {path} and extract again"
            ) from exc
        store._check_files()
        if verify:
            store.verify()
        if expect is not None and store.config != expect:
            raise ConfigMismatchError(
                f"{path}: this feature cache was made with {store.config.describe()}; "
                f"this run needs {expect.describe()}. Use another --cache-dir or delete that directory."
            )
        return store

    @property
    def layers(self) -> str:
        return self.config.layers

    @property
    def tap_names(self) -> list[str] | None:
        return self.meta.get("tap_names")

    @property
    def tap_dims(self) -> list[int] | None:
        return self.meta.get("tap_dims")

    @property
    def failed(self) -> dict[str, str]:
        return dict(self.meta.get("failed", {}))

    @property
    def generation(self) -> int:
        """Which ``raw``/``done`` files ``meta.json`` names: a new generation each time the rows change."""
        return int(self.meta.get("generation", 0))

    def _raw_path(self) -> Path:
        g = self.generation
        return self.path / ("raw.f16" if g == 0 else f"raw.{g}.f16")

    def _done_path(self) -> Path:
        g = self.generation
        return self.path / ("done.npy" if g == 0 else f"done.{g}.npy")

    def _check_files(self) -> None:
        """The done mask and raw matrix fit ``meta.json``; a truncated or garbage file is a VsekitError.

        Without a done mask nothing counts as finished and the raw matrix is never read, so it is not
        checked then.
        """
        done_path = self._done_path()
        if not done_path.is_file():
            return
        fix = f"delete {self.path} and extract again"
        try:
            done = np.load(done_path, allow_pickle=False)
        except Exception as exc:  # numpy parses the header with ast: SyntaxError, TokenError, ValueError...
            why = (str(exc).splitlines() or [type(exc).__name__])[0]
            raise VsekitError(f"{done_path}: damaged feature-cache file ({why}); {fix}") from None
        if done.dtype != np.bool_ or done.shape != (len(self.image_ids),):
            raise VsekitError(
                f"{done_path}: damaged feature-cache file ({done.dtype} {done.shape}, expected bool "
                f"({len(self.image_ids)},) as meta.json says); {fix}"
            )
        if done.any() and not self._raw_fits():
            raw_path = self._raw_path()
            size = raw_path.stat().st_size if raw_path.is_file() else "no"
            raise VsekitError(
                f"{raw_path}: damaged feature-cache file ({size} bytes, expected "
                f"{len(self.image_ids) * self.dim * 2} for {len(self.image_ids)} x {self.dim} float16); {fix}"
            )

    def verify(self) -> None:
        """Check the matrix against the checksum of the generation's last finished extraction (if any),
        at most once per process per file version; a mismatch is a :class:`DamagedMatrixError`."""
        recorded = self.meta.get("checksum")
        if not isinstance(recorded, dict) or recorded.get("generation") != self.generation:
            return  # an extraction still running, or a cache from before checksums
        raw_path = self._raw_path()
        st = raw_path.stat()
        key = (str(raw_path.resolve()), st.st_size, st.st_mtime_ns, str(recorded.get("sha256")))
        if key in _VERIFIED:
            return
        if _matrix_digest(raw_path, self.done_mask()) != recorded.get("sha256"):
            raise DamagedMatrixError(
                f"{raw_path}: damaged feature matrix (its bytes no longer match the checksum in meta.json); "
                f"{self.extract_command()} extracts it again"
            )
        _VERIFIED.add(key)

    def forget_rows(self) -> None:
        """Mark every row unfinished (a damaged matrix): the next extraction recomputes them all."""
        self.meta.pop("checksum", None)
        atomic_save_npy(self._done_path(), np.zeros(len(self.image_ids), dtype=bool))
        self._write_meta()

    def _raw_fits(self) -> bool:
        raw_path = self._raw_path()
        return raw_path.is_file() and raw_path.stat().st_size == len(self.image_ids) * self.dim * 2

    def done_mask(self) -> np.ndarray:
        done_path = self._done_path()
        if not done_path.is_file():
            return np.zeros(len(self.image_ids), dtype=bool)
        return np.load(done_path)

    def _raw(self, mode: Literal["r", "r+"] = "r") -> np.memmap:
        return np.memmap(self._raw_path(), dtype=np.float16, mode=mode, shape=(len(self.image_ids), self.dim))

    def rows(self, image_ids: Sequence[str]) -> np.ndarray:
        missing = [i for i in image_ids if i not in self._row]
        if missing:
            raise VsekitError(
                f"{self.path}: {len(missing)} image(s) have no features in this cache, e.g. {missing[0]!r}; "
                f"{self.extract_command()} adds them"
            )
        rows = np.fromiter((self._row[i] for i in image_ids), dtype=np.int64, count=len(image_ids))
        done = self.done_mask()
        if not done[rows].all():
            bad = [image_ids[int(k)] for k in np.flatnonzero(~done[rows])]
            why = self.failed.get(bad[0], "extraction did not finish")
            raise VsekitError(
                f"{self.path}: {len(bad)} image(s) have no finished features, e.g. {bad[0]!r} ({why}); "
                f"{self.extract_command()} resumes, or leave those images out"
            )
        return rows

    def raw(self, image_ids: Sequence[str] | None = None) -> np.ndarray:
        """Raw pooled activations as float32 [n, dim], in the order of ``image_ids`` (default: all)."""
        ids = self.image_ids if image_ids is None else list(image_ids)
        rows = self.rows(ids)
        return np.asarray(self._raw()[rows], dtype=np.float32)

    def extract_command(self, fne: bool = False) -> str:
        """The ``vsekit extract`` command that fills this cache, as a hint prints it (CORPUS: the corpus of
        its images; the backbone, the feature kind (``fne``: the FNE) and the int8 engine as this cache
        holds them)."""
        words = ["extract", "--data", "CORPUS", "--backbone", self.config.backbone]
        layers = "full" if fne else self.config.layers
        words += ["--fne"] if layers == "full" else []
        words += ["--features", layers] if layers in ("pre-head", "grid") else []
        words += ["--engine", "onnxruntime-int8"] if self.config.precision == "int8" else []
        return command(*words, "--cache-dir", self.path)

    # --------------------------------------------------------------------- FNE
    def fne(self) -> FullNetworkEmbedding:
        path = self.path / "fne.safetensors"
        if not path.is_file():
            fit = self.extract_command(fne=True)
            raise VsekitError(f"{self.path}: no fitted Full-Network Embedding here; {fit} fits it")
        return FullNetworkEmbedding.load(path)

    def fne_codes(self, image_ids: Sequence[str] | None = None) -> np.ndarray:
        """FNE ternary codes int8 [n, dim] in the order of ``image_ids`` (default: all)."""
        ids = self.image_ids if image_ids is None else list(image_ids)
        rows = self.rows(ids)
        codes = np.load(self.path / "fne_codes.npy", mmap_mode="r")
        return np.asarray(codes[rows])

    def fit_fne(
        self,
        train_ids: Sequence[str],
        thresholds: tuple[float, float] = DEFAULT_THRESHOLDS,
        chunk: int = 512,
    ) -> FullNetworkEmbedding:
        """Fit the FNE statistics on the training images only, then write codes for every finished image."""
        if self.layers != "full":
            raise VsekitError(f"{self.path}: the Full-Network Embedding needs layers='full' features")
        if len(train_ids) == 0:
            raise VsekitError("cannot fit the Full-Network Embedding on an empty training split")
        fne = FullNetworkEmbedding(
            thresholds=thresholds, layer_names=self.tap_names, layer_dims=self.tap_dims
        )
        rows = self.rows(list(train_ids))
        raw = self._raw()
        for start in range(0, len(rows), chunk):
            fne.partial_fit(np.asarray(raw[np.sort(rows[start : start + chunk])], dtype=np.float32))
        done = self.done_mask()
        codes = np.zeros((len(self.image_ids), self.dim), dtype=np.int8)
        for start in range(0, len(self.image_ids), chunk):
            block = slice(start, start + chunk)
            codes[block] = fne.transform(np.asarray(raw[block], dtype=np.float32))
        codes[~done] = 0
        atomic_save_npy(self.path / "fne_codes.npy", codes)
        fne.save(self.path / "fne.safetensors")
        self.meta["fne_fit_images"] = int(len(rows))
        self._write_meta()
        return fne

    def commit(self, done: np.ndarray, finished: bool = False) -> None:
        """Save the done mask and ``meta.json`` (the rows themselves are flushed by the writer first).

        ``finished``: the matrix as this extraction leaves it, so record its checksum, checked when the
        cache is opened (:meth:`verify`); just hashed, this process need not hash it again.
        """
        atomic_save_npy(self._done_path(), done)
        if finished:
            digest = _matrix_digest(self._raw_path(), done)
            self.meta["checksum"] = {"generation": self.generation, "sha256": digest}
            st = self._raw_path().stat()
            _VERIFIED.add((str(self._raw_path().resolve()), st.st_size, st.st_mtime_ns, digest))
        self._write_meta()

    def _write_meta(self) -> None:
        atomic_write_bytes(self.path / "meta.json", json.dumps(self.meta, indent=1).encode())


# -------------------------------------------------------------------- a collection in the store
def cache_dir_for(
    images: ImageCollection | Corpus, config: FeatureConfig, cache_root: str | Path | None = None
) -> Path:
    """``<root>/features/{name}-{sha256(resolved root)[:8]}-{backbone}-{layers}-{config.key()}``."""
    root = Path(cache_root) if cache_root is not None else default_cache_root()
    tag = hashlib.sha256(str(Path(images.root).resolve()).encode()).hexdigest()[:8]
    return root / "features" / f"{images.name}-{tag}-{config.backbone}-{config.layers}-{config.key()}"


def _store_path(
    images: ImageCollection | Corpus,
    config: FeatureConfig,
    cache_dir: str | Path | None,
    cache_root: str | Path | None,
) -> Path:
    return Path(cache_dir) if cache_dir is not None else cache_dir_for(images, config, cache_root)


def _requested(collection: ImageCollection, ids: list[str]) -> dict[str, tuple[str, list[int]]]:
    return {i: (str(Path(collection.images[i]).resolve()), _file_identity(collection.images[i])) for i in ids}


def _reconcile(
    path: Path, config: FeatureConfig, requested: dict[str, tuple[str, list[int]]]
) -> tuple[FeatureStore | None, dict[str, tuple[str, list[int]]], bool]:
    """``(existing store or None, its rows whose file is unchanged, whether it already fits the request)``."""
    if not (path / "meta.json").is_file():
        return None, {}, False
    old = FeatureStore.open(path, expect=config, verify=False)
    try:
        old.verify()
    except DamagedMatrixError as exc:  # one line, then this generation's rows are extracted again
        warnings.warn(f"{exc}: extracting its {len(old.image_ids)} rows again", stacklevel=4)
        old.forget_rows()
    kept = _unchanged_files(old)
    fits = all(kept.get(i) == requested[i] for i in requested) and len(kept) == len(old.image_ids)
    return old, kept, fits


def _unchanged_files(store: FeatureStore) -> dict[str, tuple[str, list[int]]]:
    """The store's rows whose file is unchanged: the same size and modification time, or the same size
    and the same bytes as when its content digest was recorded (a folder restored or copied back in place
    gets new times, not new photos: its rows are kept, not extracted again). Digests are recorded, and
    times moved on, in ``meta.json`` (the caller holds the cache lock)."""
    identities, digests = store.meta["identities"], store.meta.setdefault("digests", {})
    kept: dict[str, tuple[str, list[int]]] = {}
    changed = False
    for image_id, file_path in store.meta.get("paths", {}).items():
        path = Path(file_path)
        if not path.is_file():
            continue
        now, then = _file_identity(path), identities[image_id]
        if now != then and now[0] != then[0]:
            continue  # another size: another photo
        if now != then or image_id not in digests:  # times moved (same bytes?), or no digest yet
            digest = _content_digest(path)
            if now != then and digests.get(image_id) != digest:
                continue
            identities[image_id], digests[image_id], changed = now, digest, True
        kept[image_id] = (file_path, now)
    if changed:
        store._write_meta()
    return kept


def _digests(
    entries: dict[str, tuple[str, list[int]]], known: dict[str, str], kept: dict[str, tuple[str, list[int]]]
) -> dict[str, str]:
    """Each entry's content digest: the recorded one while its file is unchanged, else read now."""
    return {
        i: known[i] if i in kept and i in known else _content_digest(Path(p)) for i, (p, _) in entries.items()
    }


def _content_digest(path: Path) -> str:
    """sha256 of a file's bytes (128 bits, hex): whether a file with new times holds the same photo."""
    return hashlib.sha256(path.read_bytes()).hexdigest()[:32]


def _prepare_store(
    path: Path,
    config: FeatureConfig,
    requested: dict[str, tuple[str, list[int]]],
    dims: dict,
    reconciled: tuple[FeatureStore | None, dict[str, tuple[str, list[int]]], bool],
) -> FeatureStore:
    """Create the cache, or reconcile an existing one with the requested image files.

    The store keeps the union of what it had and what is asked for: a row survives while its file is
    unchanged (same size and modification time, or same bytes: :func:`_unchanged_files`), so extracting
    one split and then the whole corpus recomputes nothing twice. A row whose file changed or vanished
    is dropped.
    """
    dim = dims["dim"]
    old, kept, fits = reconciled
    if old is not None:
        if old.dim != dim:
            raise ConfigMismatchError(f"{path}: cached features have dimension {old.dim}, expected {dim}")
        if fits and old._raw_fits():
            return old
    entries = {**kept, **requested}
    all_ids = sorted(entries)
    path.mkdir(parents=True, exist_ok=True)
    for stale in ("fne.safetensors", "fne_codes.npy"):  # rows are about to move: old codes no longer align
        (path / stale).unlink(missing_ok=True)
    meta = {
        "config": asdict(config),
        "image_ids": all_ids,
        "paths": {i: entries[i][0] for i in all_ids},
        "identities": {i: entries[i][1] for i in all_ids},
        "digests": _digests(entries, old.meta.get("digests", {}) if old is not None else {}, kept),
        "dim": dim,
        "tap_names": dims.get("tap_names"),
        "tap_dims": dims.get("tap_dims"),
        "failed": {},
        "generation": old.generation + 1 if old is not None else 0,
        "engines": list(old.meta.get("engines", [])) if old is not None else [],  # rows carried over
    }
    store = FeatureStore(path, meta)
    done = np.zeros(len(all_ids), dtype=bool)
    tmp_raw = store._raw_path().with_name(store._raw_path().name + ".new")
    new_raw = new_memmap(tmp_raw, np.float16, (len(all_ids), dim), name=store._raw_path())
    old_done = old.done_mask() if old is not None else np.zeros(0, dtype=bool)
    if old_done.any():  # carry over finished rows whose file is unchanged
        assert old is not None  # (old_done is empty without an old store)
        old_raw = old._raw()
        for new_row, image_id in enumerate(all_ids):
            old_row = old._row.get(image_id)
            if old_row is not None and old_done[old_row] and kept.get(image_id) == entries[image_id]:
                new_raw[new_row] = old_raw[old_row]
                done[new_row] = True
        del old_raw
    new_raw.flush()
    del new_raw
    # The new generation's files go beside the old ones; meta.json, written last and atomically, is the
    # commit. A kill or a full disk before it leaves the old cache whole; after it, the old files are
    # only removed.
    tmp_raw.replace(store._raw_path())
    atomic_save_npy(store._done_path(), done)
    store._write_meta()
    _remove_other_generations(path, keep={store._raw_path().name, store._done_path().name})
    return store


def _remove_other_generations(path: Path, keep: set[str]) -> None:
    for stale in [*path.glob("raw*.f16"), *path.glob("done*.npy"), *path.glob("raw*.f16.new")]:
        if stale.name not in keep:
            stale.unlink(missing_ok=True)
