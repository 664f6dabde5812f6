"""The sizes and thresholds core works with, in one value: how much a write buffers before it
flushes a fragment, how many rows a data file holds, how small a manifest is read whole, when
the manifest is compacted and indexed, how often a row change re-plans, how many keys one
delete request carries, how many documents one tokenizer call takes, when search measures a
table's filtered rows exactly.

:func:`tuning` is the value in effect (the defaults, :class:`Tuning`'s); :func:`tuned` changes
it for a block -- what tests and benchmarks do to reach a threshold with few rows, and what a
deployment with unusual tables may do. The value is process-wide (threads of core's pools see
it), so change it only where nothing else of the process is writing."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace
from typing import Any

MIB = 1024 * 1024


@dataclass(frozen=True)
class Tuning:
    """Sizes and thresholds (their defaults are the package's)."""

    partition_flush_bytes: int = 128 * MIB
    """A partition's buffered rows are written as a fragment past this size."""
    total_flush_bytes: int = 512 * MIB
    """All buffered rows of a write: the largest partition's are flushed past this size."""
    max_rows_per_file: int = 1024 * 1024
    """Rows of one Lance data file."""
    small_manifest_rows: int = 2_000
    """Manifests of at most this many rows are read whole for lookups and planned in Arrow."""
    compact_min_fragments: int = 8
    """The manifest is compacted once it has this many fragments."""
    index_min_rows: int = 5_000
    """The manifest gets its scalar indexes from this many rows."""
    max_redo: int = 8
    """Re-plans of a row change in which a touched partition had moved, before it gives up."""
    delete_batch: int = 1_000
    """Keys per delete request on object storage (S3's DeleteObjects limit)."""
    text_chunk: int = 4_096
    """Documents tokenized in one call when full-text scores are computed."""
    few_match_bytes: int = 16 * MIB
    """An indexed table whose search filter keeps vectors of at most this many bytes has them
    measured exactly from memory instead of searched through its index (the lightest tables
    first, while together they weigh at most a quarter of the search session's budget):
    exact costs grow with those bytes, a Lance index search costs milliseconds whatever they
    are (even at about 45 MiB of 128-dimension vectors; docs/explanation/search.md)."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"Tuning.{f.name} must be an int >= 0, got {value!r}")


_current = Tuning()


def tuning() -> Tuning:
    """The sizes and thresholds in effect."""
    return _current


@contextmanager
def tuned(**changes: Any) -> Iterator[Tuning]:
    """Within the block, :func:`tuning` is the current value with ``changes`` (fields of
    :class:`Tuning`); restored after it, also when it raises."""
    global _current
    before = _current
    _current = replace(before, **changes)
    try:
        yield _current
    finally:
        _current = before
