"""A bounded least-recently-used cache for the text encoders' per-sentence results.

The MiniLM encoders keep the frozen transformer's output of each sentence, and the Tree-LSTM each
sentence's dependency parse, so that a training run computes them once, not once per epoch. Each encoder
owns one :class:`LRUCache` with a stated size: a long-lived model (``vsekit serve``, a captioner scoring
its candidates) keeps at most that many sentences, whatever it is asked, and nobody outside the encoder
has to clear it. A trainer that names its corpus up front (``TextEncoder.precompute``) makes room for all
of it with :meth:`LRUCache.reserve`, so an epoch never evicts a caption the next epoch needs.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Generic, TypeVar

__all__ = ["LRUCache"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LRUCache(Generic[K, V]):
    """At most ``maxsize`` entries; adding past that drops the least recently used. ``maxsize`` 0 keeps
    nothing (every lookup computes)."""

    def __init__(self, maxsize: int) -> None:
        if maxsize < 0:
            raise ValueError(f"maxsize must be >= 0, got {maxsize}")
        self.maxsize = int(maxsize)
        self._data: OrderedDict[K, V] = OrderedDict()

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def clear(self) -> None:
        self._data.clear()

    def as_dict(self) -> dict[K, V]:
        """A copy of the entries, least recently used first."""
        return dict(self._data)

    def reserve(self, n: int) -> None:
        """Room for at least ``n`` entries (a size only grows here; a cache that keeps nothing stays so)."""
        if self.maxsize:
            self.maxsize = max(self.maxsize, int(n))

    def update(self, items: Mapping[K, V]) -> None:
        """Add or refresh ``items`` (now the most recently used), then drop the oldest past ``maxsize``."""
        for key, value in items.items():
            self._data[key] = value
            self._data.move_to_end(key)
        while len(self._data) > self.maxsize:
            self._data.popitem(last=False)

    def lookup(self, keys: Iterable[K], compute: Callable[[list[K]], Mapping[K, V]]) -> list[V]:
        """The value of every key, in order: kept ones from here (now most recently used), the others from
        one call ``compute(distinct missing keys)``, which are then kept. Right even when the keys outnumber
        ``maxsize`` (the answer is assembled before anything is dropped)."""
        keys = list(keys)
        found: dict[K, V] = {}
        for key in dict.fromkeys(keys):
            if key in self._data:
                self._data.move_to_end(key)
                found[key] = self._data[key]
        missing = [key for key in dict.fromkeys(keys) if key not in found]
        if missing:
            fresh = compute(missing)
            found.update(fresh)
            self.update(fresh)
        return [found[key] for key in keys]
