"""Indexes in the format before the store (``index.json`` + ``embeddings-<digest>.npy``): opened
read-only as a one-segment snapshot, and converted by the next build or update without re-embedding
(their vectors become the store's first segment; the old files are then deleted, as files the store's
database lists)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from vsekit.errors import VsekitError
from vsekit.retrieval.segments import Segment, Snapshot
from vsekit.retrieval.store import (
    LEGACY_MANIFEST,
    STORE_FORMAT,
    STORE_VERSION,
    NewSegment,
    PhotoRecord,
    Store,
    StoreChange,
    legacy_database,
    map_npy,
)

__all__ = ["FORMAT", "FORMAT_VERSION", "legacy_snapshot", "migrate", "read_manifest"]

FORMAT, FORMAT_VERSION = "vsekit.photo-index", 1


def read_manifest(out: Path) -> dict[str, Any] | None:
    """The legacy manifest of ``out``, or None when there is none."""
    path = out / LEGACY_MANIFEST
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise VsekitError(f"{path}: unreadable index manifest ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise VsekitError(f"{path}: not a vsekit photo index (no '{FORMAT}' format field)")
    if int(manifest.get("format_version", 0)) > FORMAT_VERSION:
        raise VsekitError(f"{path}: index format {manifest['format_version']} is newer than this vsekit")
    return manifest


def settings_of(manifest: dict[str, Any]) -> dict[str, Any]:
    return {
        "format": STORE_FORMAT,
        "format_version": STORE_VERSION,
        "photos": manifest["photos"],
        "model": manifest["model"],
        "dtype": manifest["dtype"],
        "engine": manifest["engine"],
    }


def _vectors(out: Path, manifest: dict[str, Any]) -> np.ndarray:
    path = out / manifest["embeddings"]
    try:
        vectors = map_npy(path)
    except (OSError, ValueError) as exc:
        raise VsekitError(f"{path}: cannot read the index's embeddings ({exc})") from None
    expected = (len(manifest["entries"]), int(manifest["model"]["embed_dim"]))
    if vectors.shape != expected:
        raise VsekitError(f"{path}: embeddings have shape {vectors.shape}, the manifest says {expected}")
    return vectors


def _photos(manifest: dict[str, Any]) -> list[PhotoRecord]:
    return [PhotoRecord(i, s, m, h) for i, s, m, h in manifest["entries"]]


def legacy_snapshot(out: Path, manifest: dict[str, Any]) -> Snapshot:
    """A read-only snapshot of a legacy index (its records in an in-memory database)."""
    try:
        return _legacy_snapshot(out, manifest)
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise VsekitError(f"{out / LEGACY_MANIFEST}: unreadable index manifest ({exc!r})") from None


def _legacy_snapshot(out: Path, manifest: dict[str, Any]) -> Snapshot:
    vectors = _vectors(out, manifest)
    settings = settings_of(manifest)
    conn = legacy_database(settings, _photos(manifest))
    ann = None
    if manifest.get("ann"):
        engine = manifest["ann"].split("-")[1]
        ann = (engine, manifest["ann"], dict(manifest.get("ann_params") or {}))
    return Snapshot(out, conn, 0, settings, [Segment(0, vectors, np.zeros(0, dtype=np.int64), ann)])


def migrate(store: Store, manifest: dict[str, Any]) -> None:
    """Convert a legacy index into ``store`` (one commit); the legacy files are deleted after it."""
    out = store.out
    vectors = _vectors(out, manifest)
    store.set_settings(settings_of(manifest))
    rows, dim = vectors.shape
    blocks = (vectors[i : i + 65536] for i in range(0, rows, 65536))
    n, sha = store.write_segment(blocks, rows, dim, manifest["dtype"])
    photos = _photos(manifest)
    legacy = [LEGACY_MANIFEST, manifest["embeddings"]] + ([manifest["ann"]] if manifest.get("ann") else [])
    store.commit(
        StoreChange(
            segments=[NewSegment(n, photos, sha)], failed=dict(manifest.get("failed", {})), dead_files=legacy
        )
    )
