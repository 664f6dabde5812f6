"""How many partition tables one operation works on at once.

On local disk a table's work is CPU-bound, so a few threads suffice; on an object store it is
latency-bound (each request waits tens of milliseconds), so dozens of tables are in flight at
once. ``DLP_TABLE_CONCURRENCY`` (environment) sets the number for every store."""

from __future__ import annotations

import os

from .storage import local_path

LOCAL_TABLE_THREADS = 8
REMOTE_TABLE_THREADS = 32
CONCURRENCY_ENV = "DLP_TABLE_CONCURRENCY"


def table_threads(root: str) -> int:
    """Partition tables worked on at once under ``root``."""
    configured = os.environ.get(CONCURRENCY_ENV)
    if configured:
        try:
            return max(1, int(configured))
        except ValueError:
            raise ValueError(
                f"{CONCURRENCY_ENV}={configured!r}: expected a positive integer"
            ) from None
    return LOCAL_TABLE_THREADS if local_path(root) is not None else REMOTE_TABLE_THREADS
