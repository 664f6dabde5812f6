"""The replacing modes: ``overwrite_partitions`` (replace the partitions the write has rows for,
or names; Spark's dynamic overwrite) and ``overwrite`` (replace the whole table).

Both replace a partition only if no concurrent commit since the write's base version replaced
it (also by creating it in a replacing write) or deregistered the table the write replaced: a
concurrent ``append`` to the partition, or one creating it, is superseded by the replacement
(the replaced state never included it); anything else raises :class:`CommitConflictError` with
nothing visible. ``overwrite`` also refuses when any concurrent commit replaced any partition,
since it deregisters every partition it does not write."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from ..errors import CommitConflictError
from ..manifest.layout import SEP, TABLE_NAME
from ..manifest.snapshot import ManifestSnapshot, TableEntry
from ..manifest.store import delete_empty_namespaces
from ..partitioning.partition_spec import PartitionSpec, source_types
from ..partitioning.transforms import ExpressionTransform
from ..partitioning.windows import parse_window, window_values
from .commit import Attempt, WriteCommit
from .pending import Key, PendingPartition
from .result import PartitionWrite


class _ReplaceCommit(WriteCommit):
    """A commit replacing the partitions the write touches."""

    replaces = True

    def place(
        self, pending: PendingPartition, current: TableEntry | None, attempt: Attempt
    ) -> PartitionWrite:
        existing = pending.existing
        if existing is not None and current is not None and current.object_id == existing.object_id:
            if current.read_version != existing.read_version and self._replaced_by_them(
                current, attempt
            ):
                raise self.conflict(pending, "was replaced", current.object_id)
            assert pending.version is not None
            return self.register_existing(pending, current, pending.version, attempt)
        if existing is not None:  # our table was deregistered or replaced concurrently
            raise self.conflict(pending, "was deregistered or replaced", existing.object_id)
        if current is not None:  # the same new partition was created concurrently
            if self._replaced_by_them(current, attempt):
                raise self.conflict(pending, "was created", current.object_id)
            version = self.tables.copy_into(pending, current, replace=True)
            return self.register_existing(pending, current, version, attempt)
        return self.register_new(pending, attempt, copy=False)

    def _replaced_by_them(self, current: TableEntry, attempt: Attempt) -> bool:
        """Whether a commit since the base version replaced ``current`` (or might have)."""
        theirs = self.overwritten_since(attempt.snap)
        return theirs is None or current.object_id in theirs


class OverwritePartitionsCommit(_ReplaceCommit):
    """The manifest commit of an ``overwrite_partitions`` write: the partitions written (and
    the named ones, emptied when they got no rows) are replaced, partitions of older spec
    versions lying wholly inside one of them are deregistered, every other one is kept."""

    mode = "overwrite_partitions"
    fills_named_partitions = True

    def deregister(self, attempt: Attempt, pending: Sequence[PendingPartition]) -> list[str]:
        """Partitions of older spec versions that lie wholly inside a replaced partition (see
        :func:`covering_keys`) are deregistered in the same commit; others are kept."""
        snap, edit = attempt.snap, attempt.edit
        replaced = {p.key for p in pending}
        removed = []
        for spec_id, spec in snap.specs.items():
            if spec_id == self.spec.spec_id:
                continue
            tables = [t for t in snap.tables() if t.spec_id == spec_id]
            keys = covering_keys(self.spec, spec, self.schema, [t.values for t in tables])
            if keys is not None:
                removed += [t.object_id for t, k in zip(tables, keys, strict=True) if k in replaced]
        if removed:
            edit.deletes.update(removed)
            delete_empty_namespaces(snap, edit)
        return removed


class OverwriteCommit(_ReplaceCommit):
    """The manifest commit of an ``overwrite``: the write's partitions replace every table of
    every spec version (a write without rows leaves the namespace empty)."""

    mode = "overwrite"

    def needs_commit(self, pending: Sequence[PendingPartition]) -> bool:
        return bool(pending) or bool(sum(self.base.table_counts().values()))

    def validate(self, snap: ManifestSnapshot) -> None:
        if snap.version == self.base.version:
            return
        theirs = self.overwritten_since(snap)
        if theirs is None or theirs:
            raise CommitConflictError(
                f"{self.store.root}: a concurrent commit replaced partitions while this "
                "write was replacing the whole table; retry the write"
            )

    def deregister(self, attempt: Attempt, pending: Sequence[PendingPartition]) -> list[str]:
        """Every table (of any spec) this write did not write, and partition namespaces left
        with no table."""
        snap, edit = attempt.snap, attempt.edit
        kept = {oid for oid, cols in edit.upserts.items() if cols.get("object_type") == "table"}
        kept |= {oid for oid in edit.upserts if oid.endswith(SEP + TABLE_NAME)}
        removed = [t.object_id for t in snap.tables() if t.object_id not in kept]
        edit.deletes.update(removed)
        delete_empty_namespaces(snap, edit)
        return removed

    def overwritten(self, results: Sequence[PartitionWrite]) -> tuple[str, ...] | None:
        return None  # every table: concurrent writers of any partition must not rebase


def covering_keys(
    spec: PartitionSpec, old: PartitionSpec, schema: pa.Schema, rows: list[tuple[Any, ...]]
) -> list[Key] | None:
    """For partitions of ``old`` (their values), the key of the partition of ``spec`` each lies
    wholly inside; None when ``old`` partitions need not nest in ``spec`` partitions. A field
    nests when ``old`` has it with the same id, or has a finer time window of the same source
    that nests in it (daily inside monthly)."""
    old_ids = [f.field_id for f in old.fields]
    columns: list[list[Any]] = []
    for f in spec.fields:
        if f.field_id in old_ids:
            i = old_ids.index(f.field_id)
            columns.append([r[i] for r in rows])
            continue
        types = source_types(f, schema)
        if len(types) != 1 or (window := parse_window(f.sql(types), types[0])) is None:
            return None
        for i, g in enumerate(old.fields):
            inner = None
            if g.source_ids == f.source_ids and isinstance(
                g.transform_for(types), ExpressionTransform
            ):
                inner = parse_window(g.sql(types), types[0])
            if inner is not None and inner.nests_in(window):
                starts = [None if r[i] is None else inner.start_value(r[i], types[0]) for r in rows]
                columns.append(window_values(window, types[0], starts) if rows else [])
                break
        else:
            return None
    return list(zip(*columns, strict=True)) if rows else []
