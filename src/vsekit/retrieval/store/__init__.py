"""The photo index store: per-photo records in SQLite, vectors in immutable segment files. This package
owns the database: its schema and every SQL statement; no other module writes SQL.

An index directory ``INDEX`` holds::

    store.sqlite (+ -wal, -shm)   settings, photos, failed, segments, tombstones, generations, files, ann,
                                  chunks, concepts (SQLite in WAL mode; every commit is one transaction)
    segments/<n>.npy              immutable unit vectors [rows, K] (float32 or float16), never rewritten
    segments/ann-<engine>-<n>.faiss  an HNSW / IVF / IVF-PQ structure over segment n (when the engine
                                  needs one), never rewritten
    .lock                         the writers' lock (holds the pid of the writer)

A **generation** is the set of live segments and tombstones after one committed transaction. A writer
writes new segment files first (temp file, fsync, rename), then commits one transaction that names
them, tombstones the rows they replace and records a generation; a kill at any moment leaves the old
generation or the new one. Every file the store creates is first recorded in ``files`` (state
``pending``), so a killed writer's leftovers are known and removed by the next writer; a file is
deleted only when ``files`` lists it as ``dead`` (never by name pattern). Each file's checksum (a
CRC-32 per block, :mod:`.blocks`) is in ``files``; a reader checks a block when it first reads it
(:mod:`vsekit.retrieval.segments`), writers and ``vsekit index check`` whole files.

Deletion or change of a photo is a tombstone on its old (segment, row) plus, for a change, a row in a
new segment. :func:`plan_compaction` decides when segments are merged (see ``docs/index-store.md``).

The modules, by job: :mod:`.layout` (the directory: file names, generation mark, lock), :mod:`.rows`
(named rows and their checksums), :mod:`.settings` (the settings table), :mod:`.damage` (the damaged-index
error and its checks), :mod:`.schema` (tables, connections, version ladder), :mod:`.reader` (every read),
:mod:`.ledger` (the file ledger and a build's chunks), :mod:`.compaction` (the policy), :mod:`.writer`
(:class:`Store`: writes and the commit), :mod:`.blocks` (file checksums; no SQL).
"""

from vsekit.retrieval.store.compaction import MAX_SEGMENTS, TOMBSTONE_SHARE, plan_compaction
from vsekit.retrieval.store.damage import build_command, check_generation, check_row, damaged, is_damage
from vsekit.retrieval.store.layout import (
    DB,
    GENERATION_MARK,
    LEGACY_LEDGER,
    LEGACY_MANIFEST,
    LOCK,
    SEGMENTS,
    check_out_dir,
    committed_mark,
    is_remnant,
    map_npy,
    segment_name,
    write_generation_mark,
    writer_lock,
)
from vsekit.retrieval.store.reader import ann_records, read_anns, read_settings
from vsekit.retrieval.store.rows import (
    ANN_COLUMNS,
    PHOTO_COLUMNS,
    NewSegment,
    PhotoRecord,
    StoreChange,
    ann_crc,
    concepts_crc,
    folder_of,
    id_bytes,
    id_text,
    pack_concepts,
    row_crc,
    settings_check,
    unpack_concepts,
)
from vsekit.retrieval.store.schema import SCHEMA, connect
from vsekit.retrieval.store.settings import STORE_FORMAT, STORE_VERSION, recorded_source
from vsekit.retrieval.store.writer import Store, legacy_database

__all__ = [
    "ANN_COLUMNS",
    "DB",
    "GENERATION_MARK",
    "LEGACY_LEDGER",
    "LEGACY_MANIFEST",
    "LOCK",
    "MAX_SEGMENTS",
    "PHOTO_COLUMNS",
    "SCHEMA",
    "SEGMENTS",
    "STORE_FORMAT",
    "STORE_VERSION",
    "TOMBSTONE_SHARE",
    "NewSegment",
    "PhotoRecord",
    "Store",
    "StoreChange",
    "ann_crc",
    "ann_records",
    "build_command",
    "check_generation",
    "check_out_dir",
    "check_row",
    "committed_mark",
    "concepts_crc",
    "connect",
    "damaged",
    "folder_of",
    "id_bytes",
    "id_text",
    "is_damage",
    "is_remnant",
    "legacy_database",
    "map_npy",
    "pack_concepts",
    "plan_compaction",
    "read_anns",
    "read_settings",
    "recorded_source",
    "row_crc",
    "segment_name",
    "settings_check",
    "unpack_concepts",
    "write_generation_mark",
    "writer_lock",
]
