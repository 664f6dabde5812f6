"""``append``: add the write's rows to their partitions.

Concurrent commits never make an append fail (as pyiceberg's fast append, it validates nothing
against them): when one moved a partition the write appends to, the append is rebased onto the
newly registered version; when one registered another table for the partition (the same new
partition created concurrently, or the table replaced by a new one), the write's rows are copied
into that table; when one deregistered it, the partition is registered again, holding the rows
of this write."""

from __future__ import annotations

from ..manifest.snapshot import TableEntry
from .commit import Attempt, WriteCommit
from .pending import PendingPartition
from .result import PartitionWrite


class AppendCommit(WriteCommit):
    """The manifest commit of an ``append``."""

    mode = "append"
    replaces = False

    def place(
        self, pending: PendingPartition, current: TableEntry | None, attempt: Attempt
    ) -> PartitionWrite:
        existing = pending.existing
        if existing is not None and current is not None and current.object_id == existing.object_id:
            version = pending.version
            assert version is not None
            if current.read_version != existing.read_version:
                # rebase the append onto the concurrently committed version
                version = self.tables.commit(pending, current, replace=False)
            return self.register_existing(pending, current, version, attempt)
        if current is not None:  # another table registered for the partition meanwhile
            version = self.tables.copy_into(pending, current, replace=False)
            return self.register_existing(pending, current, version, attempt)
        # new, or our table was deregistered meanwhile (then our rows move out of it)
        return self.register_new(pending, attempt, copy=existing is not None)
