"""What a row-level change is: the change of one partition table (:class:`TableEdit`), what
applying it made (:class:`Applied`), and what a whole merge, delete or update did
(:class:`RowChangeResult`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from ..manifest.stats import TableStats


@dataclass(frozen=True)
class RowChangeResult:
    """What a merge, delete or update did.

    ``rows_updated`` counts input rows (merge) or stored rows (update) that replaced a stored
    row (``rows_moved`` stored rows were deleted from another partition than their new row's),
    ``rows_deleted`` rows removed, ``rows_inserted`` rows added. ``partitions`` are the object
    ids of every partition table changed, created or deregistered; ``committed`` is False when
    nothing changed (no manifest commit made, and ``manifest_version`` is the current
    version)."""

    operation: str
    manifest_version: int
    rows_inserted: int = 0
    rows_updated: int = 0
    rows_deleted: int = 0
    rows_moved: int = 0
    partitions: tuple[str, ...] = ()
    partitions_created: tuple[str, ...] = ()
    partitions_removed: tuple[str, ...] = ()
    committed: bool = True


@dataclass
class TableEdit:
    """What happens to one existing partition table, decided against its stored rows as they
    are at its pinned version:

    - stored rows matching ``delete_filter`` (SQL) are removed;
    - stored rows whose ``on`` key is among ``delete_keys`` are removed;
    - ``upsert`` (unique ``on`` keys) is merged: an input row whose key is stored (and not
      removed above) is *matched here*; ``elsewhere`` marks input rows whose key is stored in
      another partition (they count as matched too). Matched rows are written when
      ``update`` (replacing each stored copy here), unmatched ones when ``insert``;
    - ``appends`` are added.

    Everything becomes one new detached version of the table."""

    on: tuple[str, ...] = ()
    delete_filter: str | None = None
    delete_keys: list[pa.Table] = field(default_factory=list)
    upsert: pa.Table | None = None
    update: bool = True
    insert: bool = True
    elsewhere: np.ndarray | None = None
    appends: list[pa.Table] = field(default_factory=list)
    counted: bool = False  # the upsert's rows are counted by the executor (see Applied)

    def same(self, other: TableEdit) -> bool:
        """Whether ``other`` is the same change (so its result can be reused)."""
        return (
            self.on == other.on
            and self.delete_filter == other.delete_filter
            and (self.update, self.insert) == (other.update, other.insert)
            and _same_mask(self.elsewhere, other.elsewhere)
            and _same_tables(self.delete_keys, other.delete_keys)
            and _same_tables(_listed(self.upsert), _listed(other.upsert))
            and _same_tables(self.appends, other.appends)
        )


def _listed(table: pa.Table | None) -> list[pa.Table]:
    return [] if table is None else [table]


def _same_tables(a: list[pa.Table], b: list[pa.Table]) -> bool:
    return len(a) == len(b) and all(x.equals(y) for x, y in zip(a, b, strict=True))


def _same_mask(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return bool(np.array_equal(a, b))


@dataclass(frozen=True)
class Applied:
    """The detached version holding a table's content after a change (``version`` is the base
    version itself when the change changed nothing).

    ``updated`` / ``inserted``: upsert input rows written that matched (here or elsewhere) /
    did not; ``deleted``: stored rows removed by ``delete_filter`` or ``delete_keys``;
    ``stats``: what is known of the version's rows (None: nothing)."""

    version: int
    rows: int
    updated: int = 0
    inserted: int = 0
    deleted: int = 0
    changed: bool = True
    stats: TableStats | None = None  # what is known of the version's rows
