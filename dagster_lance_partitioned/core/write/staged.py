"""Staged writes for distributed engines: workers write fragments into partition tables, the
driver commits every partition table once and then makes the single ``__manifest`` commit.

Workers of one write agree on the directory of each new partition table without talking to each
other: directories are derived from the write's id and the partition values (namespace names
from the namespace's naming key, see :mod:`.manifest.naming`), so two workers holding rows of the
same new partition write into the same table."""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from lance.fragment import FragmentMetadata

from ..errors import WriteError
from ..manifest.changes import Changes, ChangesFirstStore, apply_to
from ..manifest.commit_summary import PROP_WRITE_ID
from ..manifest.naming import NamespaceNaming, ensure_naming_key
from ..manifest.state import HasState, NamespaceState, load_snapshot, state_of
from ..manifest.stats import TableStats, union
from ..manifest.store import ManifestStore
from .mode import WriteMode, check_mode
from .pending import PendingPartition
from .result import WriteResult
from .writer import PartitionWriter


@dataclass(frozen=True)
class StagedPartition:
    """What one worker wrote for one partition: fragments not yet committed anywhere."""

    key: tuple[Any, ...]
    existing: str | None  # object id of the registered table appended to / replaced, if any
    location: str
    path: tuple[str, ...]
    rows: int
    fragments: tuple[FragmentMetadata, ...]
    layout: pa.Schema | None = None
    storage_version: str | None = None
    stats: str | None = None  # what the worker knows of the rows (TableStats.dumps())


@dataclass(frozen=True)
class StageResult:
    """A worker's commit message: the partitions it wrote."""

    partitions: tuple[StagedPartition, ...] = ()

    @property
    def rows(self) -> int:
        """Rows staged by the worker."""
        return sum(p.rows for p in self.partitions)


@dataclass(frozen=True)
class StagedWrite:
    """One distributed write, planned on the driver against one manifest version; picklable."""

    root: str
    storage_options: dict[str, str] | None
    manifest_version: int
    mode: WriteMode
    write_id: str
    commit_properties: dict[str, str] = field(default_factory=dict)
    partitions: tuple[dict[str, Any], ...] | None = None  # the only partitions it may touch
    # a transaction's schema / spec changes (JSON of :class:`.Changes`): the rows are written
    # under them, and the driver commits them just before the data
    changes: str | None = None

    @classmethod
    def begin(
        cls,
        ns: NamespaceState | HasState,
        mode: WriteMode = "append",
        commit_properties: dict[str, str] | None = None,
        partitions: Sequence[Mapping[str, Any]] | None = None,
        *,
        changes: Changes | None = None,
    ) -> StagedWrite:
        """Plan a write into ``ns`` at its latest manifest version (driver side); see
        :meth:`PartitionedNamespace.write` for ``partitions``. With ``changes`` (a
        transaction's, see :meth:`.Transaction.detach_changes`), the rows are written under
        the schema and spec they make, and they are committed together with the data."""
        mode = check_mode(mode)
        ns = state_of(ns)
        ns.refresh()
        if ns.pinned:
            raise WriteError(f"{ns.uri} was opened at manifest version {ns.version}")
        if ensure_naming_key(ns.store, ns.snapshot):
            ns.refresh()
        return cls(
            ns.uri,
            ns.storage_options,
            ns.version,
            mode,
            secrets.token_hex(8),
            dict(commit_properties or {}),
            None if partitions is None else tuple(dict(p) for p in partitions),
            None if changes is None or not changes.updates else changes.to_json(),
        )

    def writer(self) -> PartitionWriter:
        """The partition writer of this write at its manifest version (the same in the driver
        and every worker: new partitions are named from the write id)."""
        store = ManifestStore(self.root, self.storage_options)
        snap = load_snapshot(store.dataset(self.manifest_version))
        props = {**self.commit_properties, PROP_WRITE_ID: self.write_id}
        if self.changes is not None:
            changes = Changes.from_json(self.changes)
            snap = apply_to(snap, changes.updates)
            store = ChangesFirstStore(store, changes)
            props.update(changes.properties())
        ns = NamespaceState(store, snap, True)
        return PartitionWriter(
            store,
            ns.snapshot,
            ns.schema_with_ids,
            ns.current_spec,
            self.mode,
            commit_properties=props,
            partitions=self.partitions,
            naming=NamespaceNaming.of(ns.snapshot, ns.current_spec.spec_id, self.write_id),
        )

    @property
    def schema(self) -> pa.Schema:
        """The Arrow schema rows are written with (the namespace schema, no field ids)."""
        return self.writer().write_schema

    def check_schema(self, schema: pa.Schema) -> None:
        """Raise :class:`SchemaMismatchError` naming the column when ``schema`` cannot be
        written (before any data is)."""
        self.writer().check_schema(schema)

    def stage(self, batches: Iterable[pa.RecordBatch]) -> StageResult:
        """Write ``batches`` as fragments of their partition tables (worker side); nothing
        becomes visible. Returns the message to hand to :meth:`commit`."""
        it: Iterator[pa.RecordBatch] = iter(batches)
        first = next(it, None)
        if first is None:
            return StageResult()
        reader = pa.RecordBatchReader.from_batches(first.schema, _chain(first, it))
        return StageResult(
            tuple(
                StagedPartition(
                    pending.key,
                    pending.existing.object_id if pending.existing else None,
                    pending.location,
                    tuple(pending.path),
                    pending.rows,
                    tuple(pending.fragments),
                    pending.layout,
                    pending.storage_version,
                    None if pending.stats is None else pending.stats.dumps(),
                )
                for pending in self.writer().stage(reader)
            )
        )

    def commit(self, messages: Sequence[StageResult | None]) -> WriteResult:
        """Commit every staged partition table once, then one ``__manifest`` commit (driver
        side). Partitions of the data not staged by any worker are untouched."""
        writer = self.writer()
        lookup = writer.ingest.lookup
        lookup.resolve({part.key for message in messages if message for part in message.partitions})
        merged: dict[tuple[Any, ...], PendingPartition] = {}
        for message in messages:
            for part in message.partitions if message else ():
                pending = merged.get(part.key)
                if pending is None:
                    existing = lookup.tables.get(part.key)
                    if (existing.object_id if existing else None) != part.existing:
                        raise WriteError(
                            f"staged partition {part.key} does not match manifest version "
                            f"{self.manifest_version}; was it staged by another write?"
                        )
                    pending = PendingPartition(part.key, existing, list(part.path), part.location)
                    pending.layout, pending.storage_version = part.layout, part.storage_version
                    pending.stats = staged_stats(part)
                    merged[part.key] = pending
                else:
                    pending.stats = union(pending.stats, staged_stats(part))
                pending.fragments.extend(part.fragments)
                pending.rows += part.rows
        return writer.commit_staged(merged.values())

    def abort(self, messages: Sequence[StageResult | None]) -> None:
        """Give the write up: nothing was made visible; the staged fragments are orphans that
        a vacuum removes."""
        del messages


def staged_stats(part: StagedPartition) -> TableStats | None:
    """What a worker knew of the rows it staged for one partition."""
    return None if part.stats is None else TableStats.loads(part.stats)


def _chain(first: pa.RecordBatch, rest: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield first
    yield from rest
