"""How much memory searches keep per process between queries: small tables' vectors, the terms
of small tables' text and the columns searches return (``DLP_SEARCH_CACHE_MB``, default
1,024 MiB, shared half, a quarter and a quarter; 0 keeps nothing). Read once, when the search
modules are imported."""

from __future__ import annotations

import os

SEARCH_CACHE_ENV = "DLP_SEARCH_CACHE_MB"
DEFAULT_SEARCH_CACHE_MB = 1024


def search_cache_bytes() -> int:
    """The bytes all search caches keep at most (a value that is not a non-negative integer
    is ignored)."""
    configured = os.environ.get(SEARCH_CACHE_ENV, "").strip()
    try:
        mb = int(configured)
    except ValueError:
        mb = DEFAULT_SEARCH_CACHE_MB
    if mb < 0:
        mb = DEFAULT_SEARCH_CACHE_MB
    return mb * 1024 * 1024


def share(fraction: float) -> int:
    """The bytes of a cache taking ``fraction`` of the budget."""
    return int(search_cache_bytes() * fraction)
