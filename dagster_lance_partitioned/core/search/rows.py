"""The rows a search returns, read by row id from their partition tables.

A search's best rows often lie in many small tables (one per tenant, say), and Lance's take of
a few rows costs a fixed quarter of a millisecond per table however small the table: for a
query whose answers come from ten tables, more than its search. So the columns a search
returns of a small table are kept in memory per table version once it has been read from
twice (a one-off search does not pay for reading whole tables), bounded in bytes; other rows of
one fragment without deletions are read through the fragment, in half the time of a take by
row id."""

from __future__ import annotations

from collections.abc import Sequence

import lance
import numpy as np
import pyarrow as pa

from ..lru import Lru, Sightings
from .build import describe
from .memory import share

ROWS_CACHE_ROWS = 65_536  # tables up to this many rows
ROWS_CACHE_BYTES = share(0.25)  # columns kept per process at most (256 MiB by default)


# (table version, columns) -> those columns of every row, sorted by row id (column _rowid)
_kept: Lru[pa.Table] = Lru(ROWS_CACHE_BYTES, weight=lambda t: t.nbytes)
_read_before = Sightings(16_384)


def take_rows(
    ds: lance.LanceDataset, ids: Sequence[int], columns: list[str], keep: bool = True
) -> pa.Table:
    """The rows of ``ds`` with row ids ``ids`` (each once), in that order, in ``columns``
    (``keep``: these columns of a small table may be kept in memory, see above; not for
    columns too wide to be worth it, such as vectors)."""
    kept = _kept_columns(ds, columns) if keep else None
    if kept is not None:
        row_ids = kept.column("_rowid").to_numpy()
        wanted = np.asarray(ids, dtype=np.uint64)
        at = np.minimum(np.searchsorted(row_ids, wanted), len(row_ids) - 1)
        if len(row_ids) and bool(np.all(row_ids[at] == wanted)):
            return kept.take(pa.array(at)).drop_columns(["_rowid"])
    fragments = {i >> 32 for i in ids}
    if not ds.has_stable_row_ids and len(fragments) == 1 and len(set(ids)) == len(ids):
        fragment = ds.get_fragment(fragments.pop())
        if fragment is not None and fragment.metadata.deletion_file is None:
            # a row id is (fragment id, position in the fragment) without stable row ids
            offsets = np.array([i & 0xFFFFFFFF for i in ids], dtype=np.int64)
            order = np.argsort(offsets)
            found = fragment.take(offsets[order].tolist(), columns=columns)
            return found.take(pa.array(np.argsort(order)))
    return ds._take_rows(list(ids), columns=columns)


def _kept_columns(ds: lance.LanceDataset, columns: list[str]) -> pa.Table | None:
    """``columns`` of every row of a small table read from before (else None)."""
    key = (ds.uri, ds.version, tuple(columns))
    hit = _kept.get(key)
    if hit is not None:
        return hit
    if _kept.size <= 0:
        return None  # nothing can be kept
    if not _read_before.again(key):
        return None
    if describe(ds)[0] > ROWS_CACHE_ROWS:
        return None
    table = ds.to_table(columns=columns, with_row_id=True)
    table = table.sort_by("_rowid")
    _kept.put(key, table)
    return table


def clear() -> None:
    """Forget the columns kept (and which tables were read from)."""
    _kept.clear()
    _read_before.clear()
