"""What searches keep between queries, owned by one object: a :class:`SearchSession`.

A session is created with a memory budget, passed to a search (``ns.search(...,
session=...)``, or to the namespace) or left to the process's default session, reports
what it keeps (:meth:`SearchSession.size_bytes`, :meth:`SearchSession.report`) and forgets it
on :meth:`SearchSession.clear`. Everything it keeps describes an immutable thing (a pinned
table version, a set of them) and is counted against the one budget, least recently used
first out; a budget of 0 keeps nothing and every query starts cold. Lance's own caches
(the shared Lance session of :mod:`..read.scan`) are not part of it.

Nothing in this package's search modules keeps state at module level: the one default
session is created on first use with the budget ``DLP_SEARCH_CACHE_MB`` gives then."""

from __future__ import annotations

import os
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, TypeVar

SEARCH_CACHE_ENV = "DLP_SEARCH_CACHE_MB"
DEFAULT_SEARCH_CACHE_MB = 1024
# what a kept entry weighs beyond the arrays it reports (its key, the Python objects)
ENTRY_OVERHEAD = 256

V = TypeVar("V")


def budget_from_env() -> int:
    """The bytes ``DLP_SEARCH_CACHE_MB`` gives (default 1,024 MiB; a value that is not a
    non-negative integer gives the default)."""
    configured = os.environ.get(SEARCH_CACHE_ENV, "").strip()
    try:
        mb = int(configured) if configured else DEFAULT_SEARCH_CACHE_MB
    except ValueError:
        mb = DEFAULT_SEARCH_CACHE_MB
    if mb < 0:
        mb = DEFAULT_SEARCH_CACHE_MB
    return mb * 1024 * 1024


@dataclass(frozen=True)
class KindReport:
    """What a session keeps of one kind: entries and bytes."""

    entries: int
    bytes: int


class SearchSession:
    """The state searches keep between queries, within ``budget_bytes`` (None: from
    ``DLP_SEARCH_CACHE_MB``, default 1,024 MiB). Thread-safe."""

    def __init__(self, budget_bytes: int | None = None) -> None:
        if budget_bytes is None:
            budget_bytes = budget_from_env()
        if isinstance(budget_bytes, bool) or not isinstance(budget_bytes, int) or budget_bytes < 0:
            raise ValueError(f"budget_bytes must be a non-negative integer, got {budget_bytes!r}")
        self.budget_bytes = budget_bytes
        self._items: OrderedDict[tuple[str, Hashable], tuple[Any, int]] = OrderedDict()
        self._used = 0
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"SearchSession(budget_bytes={self.budget_bytes}, size_bytes={self.size_bytes()})"

    def get(self, kind: str, key: Hashable) -> Any | None:
        """The entry kept of ``kind`` under ``key`` (now the most recently used), or None."""
        with self._lock:
            hit = self._items.get((kind, key))
            if hit is None:
                return None
            self._items.move_to_end((kind, key))
            return hit[0]

    def values(self, kind: str) -> list[Any]:
        """Every entry kept of ``kind``, least recently used first (none of them is used:
        their order stays)."""
        with self._lock:
            return [value for (k, _), (value, _) in self._items.items() if k == kind]

    def put(self, kind: str, key: Hashable, value: Any, nbytes: int) -> None:
        """Keep ``value`` (weighing ``nbytes``) unless it alone exceeds the budget; the least
        recently used entries go to make room."""
        weight = int(nbytes) + ENTRY_OVERHEAD
        if weight > self.budget_bytes:
            return
        with self._lock:
            old = self._items.pop((kind, key), None)
            if old is not None:
                self._used -= old[1]
            self._items[(kind, key)] = (value, weight)
            self._used += weight
            while self._used > self.budget_bytes:
                _, (_, dropped) = self._items.popitem(last=False)
                self._used -= dropped

    def keep(
        self, kind: str, key: Hashable, make: Callable[[], V], nbytes: Callable[[V], int]
    ) -> V:
        """The entry of ``kind`` under ``key``, made (and kept when it fits) if absent."""
        hit = self.get(kind, key)
        if hit is not None:
            return hit  # type: ignore[no-any-return]
        value = make()
        self.put(kind, key, value, nbytes(value))
        return value

    def fits(self, nbytes: int) -> bool:
        """Whether an entry of ``nbytes`` could be kept at all."""
        return nbytes + ENTRY_OVERHEAD <= self.budget_bytes

    def clear(self) -> None:
        """Forget everything kept."""
        with self._lock:
            self._items.clear()
            self._used = 0

    def size_bytes(self) -> int:
        """Bytes kept now (as counted against the budget)."""
        with self._lock:
            return self._used

    def report(self) -> dict[str, KindReport]:
        """Per kind of entry, how many are kept and their bytes."""
        out: dict[str, list[int]] = {}
        with self._lock:
            for (kind, _), (_, weight) in self._items.items():
                entry = out.setdefault(kind, [0, 0])
                entry[0] += 1
                entry[1] += weight
        return {kind: KindReport(n, b) for kind, (n, b) in sorted(out.items())}


class _Default:
    """The process's default session, made on first use."""

    def __init__(self) -> None:
        self.session: SearchSession | None = None
        self.lock = threading.Lock()


_DEFAULT = _Default()


def default_session() -> SearchSession:
    """The session a search uses when none is given (one per process, its budget from
    ``DLP_SEARCH_CACHE_MB`` when first used)."""
    with _DEFAULT.lock:
        if _DEFAULT.session is None:
            _DEFAULT.session = SearchSession()
        return _DEFAULT.session


def approx_bytes(value: object) -> int:
    """About what a small Python object weighs (for entries without arrays)."""
    return sys.getsizeof(value)
