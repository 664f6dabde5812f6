"""One write into a partitioned namespace: split rows by the current spec (ingest), write each
partition's rows as a new version of its partition table (table commit), then register
everything in one ``__manifest`` commit of the write's mode, until which readers see the
previous state."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa

from .. import storage
from ..concurrency import parallel_map, table_threads
from ..manifest.naming import Naming
from ..manifest.snapshot import ManifestSnapshot
from ..manifest.store import ManifestStore
from ..partitioning.partition_spec import PartitionSpec
from ..schema.conform import table_write_schema
from ..search.build import index_version
from ..search.declaration import declarations
from .ahead import MAX_AHEAD_ROWS, AheadFile
from .append import AppendCommit
from .commit import WriteCommit
from .ingest import PartitionIngest
from .mode import WriteMode, check_mode
from .overwrite import OverwriteCommit, OverwritePartitionsCommit
from .pending import Key, PendingPartition
from .result import WriteResult
from .table import TableWriter, for_each_table

COMMITS: dict[WriteMode, type[WriteCommit]] = {
    c.mode: c for c in (AppendCommit, OverwritePartitionsCommit, OverwriteCommit)
}


class PartitionWriter:
    """One write into a partitioned namespace, from a base manifest snapshot.

    ``schema`` is the namespace schema with field ids, ``spec`` the spec rows are partitioned
    by. ``partitions`` names the only partitions the write may touch; ``naming`` names the
    namespaces and tables it creates (default: random)."""

    def __init__(
        self,
        store: ManifestStore,
        base: ManifestSnapshot,
        schema: pa.Schema,
        spec: PartitionSpec,
        mode: str,
        commit_properties: dict[str, str] | None = None,
        partitions: Iterable[Mapping[str, Any]] | None = None,
        naming: Naming | None = None,
    ) -> None:
        self.mode: WriteMode = check_mode(mode)
        self.store = store
        self.base = base
        self.schema = schema
        self.spec = spec
        # no field-level ids (Lance drops them); dlp:field_ids in the schema metadata instead
        self.write_schema = table_write_schema(schema)
        commit_type = COMMITS[self.mode]
        self.tables = TableWriter(store, spec, schema, self.write_schema)
        self.ingest = PartitionIngest(
            base, spec, schema, self.tables, commit_type.replaces, partitions, naming
        )
        self.manifest_commit = commit_type(
            store, base, spec, schema, self.tables, self.ingest.lookup, commit_properties
        )
        self._ahead: list[tuple[PendingPartition, AheadFile]] = []
        # the declared indexes every table version this write registers carries
        self.indexes = [d.with_column(schema) for d in declarations(base.metadata)]

    def check_schema(self, schema: pa.Schema) -> None:
        """Raise :class:`SchemaMismatchError` naming the column when rows of ``schema`` cannot
        be written."""
        self.ingest.check_schema(schema)

    def new_partition(self, key: Key) -> PendingPartition:
        """Where the rows of partition ``key`` go (its registered table, else a new one)."""
        return self.ingest.new_partition(key)

    def write(self, data: Any) -> WriteResult:
        """Write ``data`` and commit; nothing is visible unless this returns."""
        self.route(data)
        return self.finish()

    def route(self, data: Any) -> None:
        """Split ``data`` by partition (buffers past a size are written as fragments)."""
        self.ingest.ingest(data)
        if self.manifest_commit.fills_named_partitions:
            self.ingest.add_named_empty()

    def open_tables(self) -> None:
        """Open the registered tables the routed rows go to, at their registered versions
        (reads only; the table commits then read nothing again)."""
        existing = [p.existing for p in self.ingest.pending.values() if p.existing is not None]
        parallel_map(self.tables.open, existing, table_threads(self.store.root))

    def prepare_ahead(self) -> None:
        """Prepare the routed rows of registered tables to be written as data files of those
        tables without opening them (nothing is sent yet; see :meth:`write_ahead`)."""
        todo = [
            (p, self.ingest.take_rows(p))
            for p in self.ingest.pending.values()
            if p.existing is not None
            and p.batches
            and not p.fragments
            and 0 < p.rows <= MAX_AHEAD_ROWS
        ]
        replace = self.manifest_commit.replaces

        def prepare(item: tuple[PendingPartition, pa.Table]) -> tuple[PendingPartition, AheadFile]:
            return item[0], self.tables.prepare_ahead(item[0], item[1], replace)

        self._ahead = parallel_map(prepare, todo, table_threads(self.store.root))

    def write_ahead(self) -> None:
        """Upload the files :meth:`prepare_ahead` prepared (while :meth:`open_tables` opens
        their tables: on an object store the uploads then overlap the reads; see
        :mod:`.ahead`)."""
        prepared, self._ahead = self._ahead, []

        def write(item: tuple[PendingPartition, AheadFile]) -> None:
            self.tables.write_ahead(*item)

        parallel_map(write, prepared, table_threads(self.store.root))

    def finish(self) -> WriteResult:
        """Write the routed rows as new table versions and make them visible in one manifest
        commit."""
        pending = list(self.ingest.pending.values())
        if not self.manifest_commit.needs_commit(pending):
            # nothing to write and nothing to deregister: no commit
            return WriteResult(self.base.version, self.spec.spec_id, self.mode, (), (), False)
        for_each_table(pending, self._finish_table, table_threads(self.store.root))
        return self.manifest_commit.commit(pending)

    def stage(self, data: Any) -> list[PendingPartition]:
        """Write ``data`` as fragments of its partition tables and commit nothing (a worker of
        a staged write); the partitions are for :meth:`commit_staged` on the driver."""
        self.ingest.ingest(data)
        for pending in self.ingest.pending.values():
            self.ingest.flush(pending)
        return list(self.ingest.pending.values())

    def commit_staged(self, partitions: Iterable[PendingPartition]) -> WriteResult:
        """Commit every partition table of ``partitions`` (staged by workers) once, then the
        manifest commit."""
        self.ingest.adopt(partitions)
        if self.manifest_commit.fills_named_partitions:
            self.ingest.add_named_empty()
        pending = list(self.ingest.pending.values())
        for_each_table(pending, self._finish_table, table_threads(self.store.root))
        return self.manifest_commit.commit(pending)

    def _finish_table(self, pending: PendingPartition) -> None:
        """Flush what is buffered and commit ``pending``'s table version."""
        if pending.existing is None and not pending.fragments:
            self.tables.create(pending, self.ingest.take_rows(pending))
        else:
            self.ingest.flush(pending)
            self.tables.commit_written(pending, self.manifest_commit.replaces)
        self._index(pending)

    def _index(self, pending: PendingPartition) -> None:
        """Build the declared indexes ``pending``'s new table version needs, before the
        manifest commit registers it."""
        if not self.indexes or pending.version is None:
            return
        existing = pending.existing
        uri = (
            storage.table_uri(self.store.root, existing.location, existing.object_id)
            if existing is not None
            else self.tables.uri(pending)
        )
        pending.version = index_version(
            uri,
            pending.version,
            self.indexes,
            self.schema,
            self.store.storage_options,
            object_id=pending.object_id,
            dataset=self.tables.dataset(uri, pending.version),
        ).version
