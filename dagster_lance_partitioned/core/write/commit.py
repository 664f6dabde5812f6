"""The ``__manifest`` commit of a write: one :class:`WriteCommit` per write mode (see
:mod:`.append`, :mod:`.overwrite`) registers the partition tables the write committed, in one
commit through :meth:`ManifestStore.commit`.

A commit is planned against the latest manifest version, which may be newer than the version
the write started from (its base) when other commits landed meanwhile. Each mode decides what
those concurrent commits may have done for the write to be rebased onto them, and when it gives
up with :class:`CommitConflictError` instead: :meth:`WriteCommit.validate` for the commit as a
whole, :meth:`WriteCommit.place` for each partition."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import lance
import pyarrow as pa

from ..errors import CommitConflictError
from ..manifest import retire
from ..manifest.commit_summary import WRITER_ID as WRITER_ID  # re-exported by .write
from ..manifest.commit_summary import CommitSummary, Operation
from ..manifest.edit import ManifestEdit
from ..manifest.layout import partition_field_columns
from ..manifest.registration import add_table, pin_version, table_object_id
from ..manifest.snapshot import ManifestSnapshot, TableEntry
from ..manifest.stats import union
from ..manifest.store import ManifestStore, overwritten_ids
from ..partitioning.partition_spec import PartitionSpec
from .mode import WriteMode
from .pending import BaseIndex, Key, PendingPartition
from .result import PartitionWrite, WriteResult
from .table import TableWriter


@dataclass
class Attempt:
    """One planning of a write's manifest commit against the latest manifest version ``snap``:
    what ``snap`` registers for the write's keys, and the edit being built."""

    snap: ManifestSnapshot
    tables: dict[Key, TableEntry]
    namespaces: dict[tuple[int, Key], str]  # (spec id, key prefix) -> namespace object id
    edit: ManifestEdit


class WriteCommit(ABC):
    """The manifest commit of one write in mode :attr:`mode`, from manifest version ``base``."""

    mode: ClassVar[WriteMode]
    replaces: ClassVar[bool] = False  # the write replaces the partitions it touches
    fills_named_partitions: ClassVar[bool] = False  # named partitions without rows get emptied

    def __init__(
        self,
        store: ManifestStore,
        base: ManifestSnapshot,
        spec: PartitionSpec,
        schema: pa.Schema,
        tables: TableWriter,
        lookup: BaseIndex,
        commit_properties: dict[str, str] | None = None,
    ) -> None:
        self.store = store
        self.base = base
        self.spec = spec
        self.schema = schema
        self.tables = tables
        self.lookup = lookup
        self.commit_properties = dict(commit_properties or {})
        self._overwritten: dict[int, set[str] | None] = {}
        self.committed: ManifestSnapshot | None = None  # the manifest version the commit made

    # -- what a mode decides --------------------------------------------------------------------
    def needs_commit(self, pending: Sequence[PendingPartition]) -> bool:
        """Whether a write of ``pending`` changes anything (else no commit is made)."""
        return bool(pending)

    def validate(self, snap: ManifestSnapshot) -> None:
        """Raise :class:`CommitConflictError` when the commits since the base version make this
        write impossible as a whole (they are in ``snap``, the latest version)."""
        return None  # by default, each partition is validated by place()

    @abstractmethod
    def place(
        self, pending: PendingPartition, current: TableEntry | None, attempt: Attempt
    ) -> PartitionWrite:
        """Register ``pending`` in ``attempt.edit``, rebasing it onto ``current`` (the table the
        latest version registers for its key) when concurrent commits changed the partition,
        or raising :class:`CommitConflictError` when this mode cannot."""

    def deregister(self, attempt: Attempt, pending: Sequence[PendingPartition]) -> list[str]:
        """Tables the write removes besides registering ``pending`` (added to the edit)."""
        return []

    def overwritten(self, results: Sequence[PartitionWrite]) -> tuple[str, ...] | None:
        """The table ids the commit replaced (commit property ``overwritten``; None: every
        table)."""
        return tuple(p.object_id for p in results if p.replaced)

    # -- the commit -----------------------------------------------------------------------------
    def commit(self, pending: Sequence[PendingPartition]) -> WriteResult:
        """Register ``pending`` (every table committed) in one manifest commit."""
        results: list[PartitionWrite] = []
        removed: list[str] = []

        made_at = retire.epoch(self.base)
        uses = [
            retire.Use(
                p.location,
                p.version,
                p.existing.read_version if p.existing is not None else None,
                made_at,
            )
            for p in pending
        ]

        def plan(snap: ManifestSnapshot) -> ManifestEdit:
            results.clear()
            removed.clear()
            # before anything reads our tables again: a maintenance run may be deleting them
            retire.check(self.store, snap, uses)
            self.validate(snap)
            if snap.metadata.get(self.spec.key) != self.base.metadata.get(self.spec.key):
                raise CommitConflictError(
                    f"{self.store.root}: partition spec v{self.spec.spec_id} changed while this "
                    "write was running (e.g. an upgrade); retry the write"
                )
            if snap is self.base:
                tables, namespaces = self.lookup.tables, dict(self.lookup.namespaces)
            else:
                keys = {p.key for p in pending}
                tables = snap.find_tables(self.spec, keys)
                prefixes = {k[:n] for k in keys for n in range(1, len(k) + 1)}
                namespaces = dict(snap.find_namespaces(self.spec, prefixes))
            # the spec's manifest columns and v<N> namespace come with its first write
            edit = ManifestEdit(new_columns=partition_field_columns([self.spec]), uses=uses)
            edit.upserts[self.spec.namespace] = {"object_type": "namespace"}
            attempt = Attempt(snap, tables, namespaces, edit)
            for p in pending:
                results.append(self.place(p, tables.get(p.key), attempt))
            removed.extend(self.deregister(attempt, pending))
            edit.properties = CommitSummary(
                Operation.WRITE,
                overwritten=self.overwritten(results),
                mode=self.mode,
                writer=WRITER_ID,
                user=self.commit_properties,
            ).to_properties()
            return edit

        def load(ds: lance.LanceDataset) -> ManifestSnapshot:
            # a manifest version never changes: without a concurrent commit, reuse the base
            if ds.version == self.base.version:
                return self.base
            return ManifestSnapshot(ds, list(self.base.specs.values()))

        snap = self.committed = self.store.commit(load, plan, known=self.base)
        if self.spec.draft and snap.metadata.get(self.spec.key) != self.base.metadata.get(
            self.spec.key
        ):
            # an upgrade switched the draft specs while this commit was in flight, and Lance
            # merged the two: give this write's rows their current-shape columns too
            from ..manifest.upgrade import refill_after_switch

            refill_after_switch(self.store, self.base.specs, self.schema)
        return WriteResult(
            manifest_version=snap.version,
            spec_id=self.spec.spec_id,
            mode=self.mode,
            partitions=tuple(results),
            removed=tuple(removed),
        )

    # -- helpers of the modes -------------------------------------------------------------------
    def overwritten_since(self, snap: ManifestSnapshot) -> set[str] | None:
        """Table ids replaced by the commits after the base version up to ``snap`` (None:
        unknown, treat every table as replaced)."""
        if snap.version not in self._overwritten:
            self._overwritten[snap.version] = self._replaced_between(snap)
        return self._overwritten[snap.version]

    def _replaced_between(self, snap: ManifestSnapshot) -> set[str] | None:
        out: set[str] = set()
        for version in range(self.base.version + 1, snap.version + 1):
            try:
                props = self.store.commit_properties(version, via=snap.dataset)
            except (OSError, ValueError):
                return None  # a cleanup removed that version: unknown, assume the worst
            ids = overwritten_ids(props)
            if ids is None:
                return None
            out |= ids
        return out

    def conflict(self, pending: PendingPartition, what: str, oid: str) -> CommitConflictError:
        """The error of a partition this write replaced that a concurrent commit ``what``."""
        return CommitConflictError(
            f"partition {pending.values(self.spec)} {what} by a concurrent commit while this "
            "write replaced it; nothing of this write is visible, retry it",
            [oid],
        )

    def register_existing(
        self, pending: PendingPartition, target: TableEntry, version: int, attempt: Attempt
    ) -> PartitionWrite:
        """Register ``version`` of the registered table ``target`` for ``pending`` (its rows
        replace, or are appended to, those of ``target``'s registered version)."""
        made = pending.written_stats(self.schema)
        found = made if self.replaces else union(target.stats, made)
        pin_version(attempt.edit, target.object_id, version, found, target.location)
        return PartitionWrite(
            target.object_id,
            target.location,
            pending.values(self.spec),
            pending.rows,
            version,
            created=False,
            replaced=self.replaces,
            bytes_written=pending.bytes_written,
        )

    def register_new(
        self, pending: PendingPartition, attempt: Attempt, copy: bool
    ) -> PartitionWrite:
        """Register namespaces and a table for a partition the latest manifest does not have
        (``copy``: our rows must move out of the table they were committed to)."""

        def name_of(prefix: Key) -> str:
            return pending.path[len(prefix)]

        oid = table_object_id(self.spec, pending.key, attempt.namespaces, name_of)
        location, version = pending.location, pending.version
        if copy or oid != pending.object_id:
            # the rows must live in a table directory named after the registered object id
            location, version = self.tables.relocated(pending, oid)
        assert version is not None
        add_table(
            attempt.edit,
            self.spec,
            pending.key,
            location,
            version,
            attempt.namespaces,
            name_of,
            pending.written_stats(self.schema),
        )
        return PartitionWrite(
            oid,
            location,
            pending.values(self.spec),
            pending.rows,
            version,
            created=True,
            replaced=self.replaces,
            bytes_written=pending.bytes_written,
        )
