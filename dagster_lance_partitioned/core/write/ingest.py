"""Ingest: routing a write's rows to the partitions of the current spec, buffering them per
partition and rolling buffers over into fragments past a size (bounded memory for streamed
input). Nothing is committed here.

A row's partition is the key the spec computes for it; the first row of a key decides where its
table is: the table the base manifest version registers for it, else a new table whose partition
namespaces and directory are named by a :class:`~.manifest.naming.Naming` (namespaces by the
namespace's naming key, directories at random or from a staged write's id)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa

from .. import storage
from ..concurrency import parallel_map
from ..errors import SchemaError, UnnamedPartitionError, WriteError
from ..manifest.layout import SEP, TABLE_NAME
from ..manifest.naming import NamespaceNaming, Naming
from ..manifest.snapshot import ManifestSnapshot
from ..partitioning.partition_constants import identity_constants
from ..partitioning.partition_spec import PartitionSpec
from ..partitioning.partitioner import Rows, SpecEvaluator
from ..schema.conform import check_write_schema, conform_for_write
from ..schema.namespace_schema import dropped_names, full_schema
from ..tuning import tuning
from .pending import BaseIndex, Key, PendingPartition
from .table import TableWriter

SPLIT_CHUNK_ROWS = 1 << 20  # large batches are split in chunks of this many rows ...
SPLIT_THREADS = 4  # ... on up to this many threads (bounded by the CPU count)


def as_reader(data: Any) -> pa.RecordBatchReader:
    """A RecordBatchReader over a Table, RecordBatch, reader or Arrow C stream object."""
    if isinstance(data, pa.RecordBatchReader):
        return data
    if isinstance(data, pa.Table):
        return data.to_reader()
    if isinstance(data, pa.RecordBatch):
        return pa.RecordBatchReader.from_batches(data.schema, [data])
    if hasattr(data, "__arrow_c_stream__"):
        return pa.RecordBatchReader.from_stream(data)
    raise TypeError(
        f"cannot write {type(data).__name__}: pass a pyarrow Table, RecordBatch, "
        "RecordBatchReader or an object with __arrow_c_stream__"
    )


class PartitionIngest:
    """The partitions one write routes its rows to, from its base manifest version.

    ``partitions`` (mappings of the current spec's field ids to values) names the only
    partitions the write may touch; ``replaces``: whether the write replaces the partitions it
    touches (its fragments then take the write schema, not an existing table's layout)."""

    def __init__(
        self,
        base: ManifestSnapshot,
        spec: PartitionSpec,
        schema: pa.Schema,
        tables: TableWriter,
        replaces: bool,
        partitions: Iterable[Mapping[str, Any]] | None = None,
        naming: Naming | None = None,
    ) -> None:
        self.spec = spec
        self.schema = schema
        self.tables = tables
        self.write_schema = tables.write_schema
        self.replaces = replaces
        self.naming: Naming = naming or NamespaceNaming.of(base, spec.spec_id)
        self.dropped = _dropped(base)
        self.lookup = BaseIndex(base, spec)
        self.allowed = None if partitions is None else self._keys(partitions)
        self.pending: dict[Key, PendingPartition] = {}
        self._buffered = 0

    def _keys(self, partitions: Iterable[Mapping[str, Any]]) -> set[Key]:
        """Partition keys (values in spec order, typed like the manifest) of ``partitions``,
        each a mapping of field id -> value of the current spec."""
        ids = [f.field_id for f in self.spec.fields]
        keys = set()
        for values in partitions:
            unknown = sorted(set(values) - set(ids))
            missing = [fid for fid in ids if fid not in values]
            if unknown or missing:
                raise WriteError(
                    f"partition {dict(values)} does not name the fields of spec "
                    f"v{self.spec.spec_id} ({', '.join(ids)}): "
                    f"unknown {unknown}, missing {missing}"
                )
            key = []
            for f in self.spec.fields:
                value = values[f.field_id]
                if value is not None:
                    try:
                        value = pa.scalar(value).cast(f.result_type).as_py()
                    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
                        raise WriteError(
                            f"partition value {value!r} of field {f.field_id!r} is not a "
                            f"{f.result_type}"
                        ) from None
                key.append(value)
            keys.add(tuple(key))
        return keys

    # -- routing --------------------------------------------------------------------------------
    def check_schema(self, schema: pa.Schema) -> None:
        """Raise :class:`SchemaMismatchError` naming the column when rows of ``schema`` cannot
        be written."""
        check_write_schema(schema, self.write_schema, self.dropped)

    def ingest(self, data: Any) -> None:
        """Split ``data`` by partition into buffers (large ones flushed to fragments)."""
        reader = as_reader(data)
        self.check_schema(reader.schema)
        evaluator = SpecEvaluator(self.spec, self.schema)
        workers = max(1, min(SPLIT_THREADS, os.cpu_count() or 1))
        for batch in reader:
            # rows of the previous batch are gathered now, so buffers never keep more than one
            # input batch alive
            self._gather_lazy(workers)
            batch = conform_for_write(batch, self.write_schema)
            chunks = [
                batch.slice(start, SPLIT_CHUNK_ROWS)
                for start in range(0, batch.num_rows, SPLIT_CHUNK_ROWS)
            ]
            # (one chunk is split in this thread)
            for parts in parallel_map(lambda c: list(evaluator.split(c)), chunks, workers):
                self.lookup.resolve({key for key, _ in parts if key not in self.pending})
                for key, part in parts:
                    self._add(key, part)

    def add_named_empty(self) -> None:
        """Give every named partition that got no rows an empty entry (a write replacing named
        partitions leaves each of them, emptied when it had no rows)."""
        if self.allowed is None:
            return
        self.lookup.resolve(self.allowed - set(self.pending))
        for key in sorted(self.allowed - set(self.pending), key=repr):
            self.pending[key] = self.new_partition(key)

    def adopt(self, partitions: Iterable[PendingPartition]) -> None:
        """Take ``partitions`` (written elsewhere, e.g. by the workers of a staged write) as
        this write's partitions."""
        self.pending = {p.key: p for p in partitions}

    def new_partition(self, key: Key) -> PendingPartition:
        """An empty entry for the partition of ``key``: its registered table, else the names
        of the namespaces and table this write creates for it."""
        existing = self.lookup.table(key)
        if existing is not None:
            # refused before anything is written: a location outside the root, or (local
            # roots) through a symbolic link
            storage.table_uri(self.tables.store.root, existing.location, existing.object_id)
            path = existing.object_id.split(SEP)[:-1]
            if existing.read_branch is not None:
                raise WriteError(
                    f"partition {existing.object_id} reads branch {existing.read_branch!r}; "
                    "writing to branch-pinned partitions is not supported"
                )
            return PendingPartition(key, existing, path, existing.location)
        path = [self.spec.namespace]
        for level in range(1, len(key) + 1):
            known = self.lookup.namespaces.get((self.spec.spec_id, key[:level]))
            if known is not None:
                path.append(known.split(SEP)[-1])
            else:
                path.append(self.naming.namespace_name(key[:level]))
        oid = SEP.join([*path, TABLE_NAME])
        return PendingPartition(key, None, path, self.naming.table_location(oid, key))

    def _add(self, key: Key, part: Rows) -> None:
        if self.allowed is not None and key not in self.allowed:
            values = dict(zip((f.field_id for f in self.spec.fields), key, strict=True))
            sample = part.materialize().slice(0, 1).to_pylist()[0]
            raise UnnamedPartitionError(
                f"a row belongs to partition {values}, which this write may not touch "
                f"(it names {len(self.allowed)} partition(s)); nothing was committed. "
                f"Sample row: {sample}",
                values,
                sample,
            )
        pending = self.pending.get(key)
        if pending is None:
            pending = self.new_partition(key)
            self.pending[key] = pending
        pending.batches.append(part)
        pending.rows += part.num_rows
        pending.buffered_bytes += part.nbytes
        self._buffered += part.nbytes
        if pending.buffered_bytes >= tuning().partition_flush_bytes:
            self.flush(pending)
        while self._buffered >= tuning().total_flush_bytes:
            self.flush(max(self.pending.values(), key=lambda p: p.buffered_bytes))

    def _gather_lazy(self, threads: int) -> None:
        """Replace buffered row selections by gathered batches of their own."""

        def gather(pending: PendingPartition) -> None:
            pending.batches = [Rows(rows.materialize()) for rows in pending.batches]

        lazy = [p for p in self.pending.values() if any(r.indices is not None for r in p.batches)]
        parallel_map(gather, lazy, threads)

    # -- buffers --------------------------------------------------------------------------------
    def flush(self, pending: PendingPartition) -> None:
        """Write ``pending``'s buffered rows as fragments of its table (not committed)."""
        if pending.batches:
            self.tables.write_rows(pending, self.take_rows(pending), self.replaces)

    def take_rows(self, pending: PendingPartition) -> pa.Table:
        """``pending``'s buffered rows as one table, emptying its buffer."""
        table = pa.Table.from_batches(
            [rows.materialize() for rows in pending.batches], schema=self.write_schema
        )
        constants = identity_constants(self.spec, self.tables.schema, pending.values(self.spec))
        pending.note_rows(table, self.tables.schema, constants)
        self._buffered -= pending.buffered_bytes
        pending.batches.clear()
        pending.buffered_bytes = 0
        return table


def _dropped(base: ManifestSnapshot) -> set[str]:
    """Columns dropped from the namespace schema of ``base`` (writing them is an error)."""
    try:
        return dropped_names(full_schema(base.metadata))
    except SchemaError:
        return set()
