"""A process-wide, thread-safe cache of the most recently used entries, bounded in count: what
this process learned of immutable things (a table version, a manifest version) kept for its
next use."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class Lru(Generic[V]):
    """At most ``size`` entries; the least recently used one goes first."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[Hashable, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> V | None:
        """The entry of ``key`` (now the most recently used), or None."""
        with self._lock:
            hit = self._items.get(key)
            if hit is not None:
                self._items.move_to_end(key)
            return hit

    def put(self, key: Hashable, value: V) -> None:
        """Keep ``value`` for ``key``, dropping the least recently used beyond the bound."""
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)
