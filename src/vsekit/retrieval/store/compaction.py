"""The compaction policy: which segments a compaction merges (the merge itself is
:func:`vsekit.retrieval.build.compact`; see ``docs/index-store.md``, "Compaction")."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["MAX_SEGMENTS", "TOMBSTONE_SHARE", "plan_compaction"]

#: Automatic compaction: more live segments than this, or a segment whose tombstoned rows pass this
#: share of its rows (docs/index-store.md, "Compaction").
MAX_SEGMENTS, TOMBSTONE_SHARE = 10, 0.25


def plan_compaction(segments: Sequence[tuple[int, int, int]], everything: bool = False) -> list[int]:
    """Which segments to merge, from ``(n, rows, tombstoned rows)`` each: every segment whose
    tombstones pass :data:`TOMBSTONE_SHARE` of its rows, and, while more than :data:`MAX_SEGMENTS`
    would remain, the smallest ones (by live rows); ``everything``: all of them (``index compact``)."""
    if everything:
        return [n for n, rows, dead in segments] if len(segments) > 1 or any(d for *_, d in segments) else []
    chosen = {n for n, rows, dead in segments if rows and dead / rows > TOMBSTONE_SHARE}
    rest = sorted((rows - dead, n) for n, rows, dead in segments if n not in chosen)
    remaining = len(rest) + (1 if chosen else 0)
    i = 0
    while remaining > MAX_SEGMENTS and i < len(rest):
        chosen.add(rest[i][1])
        i += 1
        remaining = len(rest) - i + 1
    if len(chosen) == 1:  # one clean small segment merges with nothing: leave it
        (n,) = chosen
        if not any(m == n and dead for m, _, dead in segments):
            return []
    return sorted(chosen)
