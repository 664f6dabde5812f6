"""A process-wide, thread-safe cache of the most recently used entries, bounded in count or in
a weight of its entries (bytes): what this process learned of immutable things (a table
version, a manifest version) kept for its next use."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class Lru(Generic[V]):
    """Entries weighing at most ``size`` together (``weight``: of one entry, default 1: a
    count); the least recently used go first, and an entry heavier than ``size`` is not
    kept."""

    def __init__(self, size: int, weight: Callable[[V], int] | None = None) -> None:
        self.size = size
        self.used = 0
        self._weight = weight
        self._items: OrderedDict[Hashable, tuple[V, int]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> V | None:
        """The entry of ``key`` (now the most recently used), or None."""
        with self._lock:
            hit = self._items.get(key)
            if hit is None:
                return None
            self._items.move_to_end(key)
            return hit[0]

    def put(self, key: Hashable, value: V) -> None:
        """Keep ``value`` for ``key``, dropping the least recently used beyond the bound."""
        weight = self._weight(value) if self._weight is not None else 1
        if weight > self.size:
            return
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self.used -= old[1]
            self._items[key] = (value, weight)
            self.used += weight
            while self.used > self.size:
                _, (_, dropped) = self._items.popitem(last=False)
                self.used -= dropped

    def clear(self) -> None:
        """Forget every entry."""
        with self._lock:
            self._items.clear()
            self.used = 0


class Sightings(Lru[bool]):
    """The keys met so far (at most ``size``, the least recently met forgotten first): for
    work a cache does only for what it meets a second time."""

    def again(self, key: Hashable) -> bool:
        """Whether ``key`` was met before; it is met from now on."""
        if self.get(key) is not None:
            return True
        self.put(key, True)
        return False
