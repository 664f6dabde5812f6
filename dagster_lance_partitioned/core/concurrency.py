"""How many partition tables one operation works on at once.

On local disk a table's work is CPU-bound, so a few threads suffice; on an object store it is
latency-bound (each request waits tens of milliseconds), so dozens of tables are in flight at
once. ``DLP_TABLE_CONCURRENCY`` (environment) sets the number for every store.
:func:`parallel_map` runs one function over tables (or manifest versions) a few at a time;
:func:`serial_while_fast` runs it in the calling thread for as long as each call is quick."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any, TypeVar

from .storage import local_path

LOCAL_TABLE_THREADS = 8
REMOTE_TABLE_THREADS = 32
CONCURRENCY_ENV = "DLP_TABLE_CONCURRENCY"
INSPECT_THREADS = 8  # partition tables / manifest versions read concurrently

T = TypeVar("T")
R = TypeVar("R")


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


# parallel_map's workers: threads kept for the process (starting a pool costs about half a
# millisecond, as much as a search of a small table); a call made from one of them (nested)
# gets threads of its own, so that no worker ever waits for a task queued behind it
_SHARED_THREADS = 64
_shared: ThreadPoolExecutor | None = None
_shared_lock = threading.Lock()
_local = threading.local()


def _forget_shared() -> None:
    """In a forked child: the parent's workers are not there."""
    global _shared, _shared_lock
    _shared, _shared_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_shared)


def _shared_pool() -> ThreadPoolExecutor:
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = ThreadPoolExecutor(_SHARED_THREADS, thread_name_prefix="dlp")
        return _shared


def parallel_map(
    fn: Callable[[T], R], items: Sequence[T], threads: int = INSPECT_THREADS
) -> list[R]:
    """``[fn(x) for x in items]``, at most ``threads`` at a time, in order (the first error
    raised once every started call has returned)."""
    if len(items) <= 1 or threads <= 1:
        return [fn(x) for x in items]
    out: list[Any] = [None] * len(items)
    claim = iter(range(len(items)))
    lock = threading.Lock()

    def lane() -> None:
        _local.nested = True
        while True:
            with lock:
                i = next(claim, None)
            if i is None:
                return
            out[i] = fn(items[i])

    lanes = min(threads, len(items))
    if getattr(_local, "nested", False):
        with ThreadPoolExecutor(max_workers=lanes) as pool:
            futures = [pool.submit(lane) for _ in range(lanes)]
    else:
        futures = [_shared_pool().submit(lane) for _ in range(lanes)]
    wait(futures)
    for future in futures:
        future.result()
    return out


def in_background(fn: Callable[[], R]) -> Future[R]:
    """``fn()`` started on one of the shared workers (from one of them: on a thread of its
    own); its result, or its error, from ``.result()``."""
    if getattr(_local, "nested", False):
        pool = ThreadPoolExecutor(max_workers=1)
        future = pool.submit(fn)
        pool.shutdown(wait=False)
        return future
    return _shared_pool().submit(fn)


def decided_by(
    check: Future[Any], expected: object, work: Callable[[], R]
) -> tuple[bool, R | None]:
    """``work()`` run while ``check`` (started before) is answered: ``(True, its result)`` when
    ``check`` gives ``expected`` (its error raised then), ``(False, None)`` when it does not
    (what ``work`` did, or raised, is dropped: it was done on a premise that no longer holds)."""
    failed: Exception | None = None
    result: R | None = None
    try:
        result = work()
    except Exception as e:
        failed = e
    if check.result() != expected:
        return False, None
    if failed is not None:
        raise failed
    return True, result


# a call quicker than this is CPU work on cached state (threads would only contend for it)
FAST_CALL_SECONDS = 0.004


def serial_while_fast(
    fn: Callable[[T], R], items: Sequence[T], threads: int, fast: float = FAST_CALL_SECONDS
) -> list[R]:
    """``[fn(x) for x in items]``: in the calling thread while each call takes under ``fast``
    seconds (tables already opened, searches of small tables on local disk), the rest
    :func:`parallel_map`-ped from the first slow call on (a store's round trips)."""
    out: list[R] = []
    for i, x in enumerate(items):
        start = time.perf_counter()
        out.append(fn(x))
        if time.perf_counter() - start >= fast:
            return out + parallel_map(fn, items[i + 1 :], threads)
    return out
