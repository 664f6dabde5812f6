"""The executor side of a distributed Spark merge: what runs in Spark's Python workers.

A :class:`MergeJob` is planned on the driver against one pinned manifest snapshot and pickled
into the tasks. It is small: the merge options, the namespace schema and current spec, and
per registered partition table its scan task (location, pinned version), keyed by the table's
**route** -- the canonical text of its partition key for tables of the current spec, ``@`` and
its object id for tables of older specs.

- :meth:`MergeJob.route` (``mapInArrow``) adds to every input row the route of its partition
  under the current spec, and refuses NULL keys.
- :meth:`MergeJob.stored` (``mapInArrow`` over table numbers) reads the key columns of the
  tables searched for keys stored elsewhere than their new row's partition, with the table's
  route (``__dlp_home``).
- :meth:`MergeJob.apply_rows` (``mapInArrow`` after a repartition by route, so each route's
  rows are in one task) takes per route the input rows (``__dlp_away`` marks keys stored in
  another partition) and the keys that moved out of it, and merges them into the table's
  pinned version as one detached Lance version (or creates the new partition's table) with
  the core's :class:`~dagster_lance_partitioned.core.engine.TableExecutor`, the task's
  tables in threads. It returns one small message per table (a pickled :class:`TableVersion`
  and counts); the driver commits them in one manifest commit."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..core import MergeOptions, PartitionSpec, ScanTask
from ..core.engine import (
    Counts,
    IndexDeclaration,
    SpecEvaluator,
    TableEdit,
    TableExecutor,
    TableVersion,
    anti_join_keys,
    check_keys,
    check_null_keys,
    confined_error,
    conform_for_write,
    derived_name,
    distinct_keys,
    keyed_name,
    new_table_location,
    parallel_map,
    strip_field_ids,
    table_statistics,
    table_threads,
    table_write_schema,
)
from .result import carried, key_text
from .types import conform_batch

ROUTE = "__dlp_route"  # the route of a row's partition (input) or of a table (stored keys)
AWAY = "__dlp_away"  # the input row's key is stored in another partition than its own
HOME = "__dlp_home"  # the route of the table a stored key was read from
KIND = "__dlp_kind"  # 0: an input row, 1: a key to delete from the route's table, or a marker
ROUTE_COLUMNS = (ROUTE, AWAY, HOME, KIND)
STORED_THREADS = 8  # tables whose keys one task reads concurrently

Message = tuple[TableVersion, Counts]


@dataclass(frozen=True)
class MergeJob:
    """One distributed merge, planned on the driver (picklable; see the module doc)."""

    root: str
    storage_options: dict[str, str] | None
    manifest_version: int
    schema: pa.Schema  # the namespace schema with field ids
    spec: PartitionSpec  # the current spec
    options: MergeOptions
    merge_id: str
    tables: dict[str, ScanTask] = field(default_factory=dict)  # route -> registered table
    search: tuple[str, ...] = ()  # routes of the tables searched for keys stored elsewhere
    scoped: frozenset[str] = frozenset()  # routes of the tables ``scope`` selects
    confined: frozenset[str] | None = None  # routes of the tables ``confine`` selects
    naming_key: str | None = None  # of the namespace (see core.manifest.naming)
    indexes: tuple[IndexDeclaration, ...] = ()  # declared: built on every version made

    # -- naming ----------------------------------------------------------------------------
    def name_of(self, prefix: tuple[Any, ...]) -> str:
        """The name of the partition namespace of a new partition at ``prefix`` (the same in
        every task and on the driver)."""
        if self.naming_key is not None:
            return keyed_name(self.naming_key, self.spec.spec_id, prefix)
        return derived_name(self.merge_id, (self.spec.spec_id, *prefix))

    @staticmethod
    def route_of(task: ScanTask, spec: PartitionSpec) -> str:
        """A registered table's route."""
        if task.spec_id != spec.spec_id:
            return "@" + task.object_id
        return key_text(task.partition_values[f.field_id] for f in spec.fields)

    # -- tasks -----------------------------------------------------------------------------
    def route(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """The input batches with column ``__dlp_route`` (``mapInArrow``)."""
        return _carried_iter(self._route(batches))

    def _route(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        write_schema = table_write_schema(self.schema)
        evaluator = SpecEvaluator(self.spec, self.schema)
        for batch in batches:
            if batch.num_rows == 0:
                continue
            check_null_keys(batch, self.options.on)
            data = conform_for_write(batch, write_schema)
            routes = np.empty(batch.num_rows, dtype=object)
            for key, rows in evaluator.split(data):
                idx = slice(None) if rows.indices is None else np.asarray(rows.indices)
                routes[idx] = key_text(key)
            yield batch.append_column(ROUTE, pa.array(routes, pa.string()))

    def stored(
        self, batches: Iterator[pa.RecordBatch], target: pa.Schema
    ) -> Iterator[pa.RecordBatch]:
        """The key columns of the searched tables whose numbers (in :attr:`search`) the
        batches hold, with ``__dlp_home`` (``mapInArrow`` over ``spark.range``); ``target``
        is the Arrow layout Spark expects."""
        return _carried_iter(self._stored(batches, target))

    def _stored(
        self, batches: Iterator[pa.RecordBatch], target: pa.Schema
    ) -> Iterator[pa.RecordBatch]:
        on = self.options.on
        executor = TableExecutor(self.root, self.storage_options)
        for batch in batches:
            routes = [self.search[i] for i in batch.column(0).to_pylist()]

            def read(route: str) -> pa.Table:
                keys = executor.stored_keys(self.tables[route], self.schema, on).select(on)
                home = pa.array(np.full(keys.num_rows, route, dtype=object), pa.string())
                return keys.append_column(HOME, home)

            for table in parallel_map(read, routes, STORED_THREADS):
                for part in table.to_batches():
                    yield conform_batch(part, target)

    def apply_rows(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """The messages of the routes whose rows the batches hold (``mapInArrow`` after a
        repartition by route): input rows (``__dlp_kind`` 0) and moved-out keys or scope
        markers (1) of each route, merged into its table; the tables in threads."""
        return _carried_iter(self._apply_rows(batches))

    def _apply_rows(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        parts = [b for b in batches if b.num_rows]
        if not parts:
            return
        rows = pa.Table.from_batches(parts)
        routes = np.asarray(rows.column(ROUTE).to_numpy(zero_copy_only=False), dtype=object)
        kinds = np.asarray(pc.fill_null(rows.column(KIND), 0).to_numpy(zero_copy_only=False))
        names, codes = np.unique(routes.astype(str), return_inverse=True)
        order = np.argsort(codes, kind="stable")
        bounds = np.searchsorted(codes[order], np.arange(len(names) + 1))
        data = rows.drop_columns([KIND])
        groups = []
        for i, route in enumerate(names.tolist()):
            idx = order[bounds[i] : bounds[i + 1]]
            left, right = idx[kinds[idx] == 0], idx[kinds[idx] != 0]
            groups.append((route, data.take(pa.array(left)), data.take(pa.array(right))))
        messages = parallel_map(lambda g: self._apply(*g), groups, table_threads(self.root))
        payloads = [b"" if m is None else pickle.dumps(m, protocol=5) for m in messages]
        yield pa.RecordBatch.from_pydict(
            {"route": [g[0] for g in groups], "message": payloads},
            schema=pa.schema([("route", pa.string()), ("message", pa.binary())]),
        )

    def _apply(self, route: str, left: pa.Table, right: pa.Table) -> Message | None:
        """One route's input rows (``left``) and keys to delete (``right``) applied to its
        table (None: nothing to do)."""
        opts = self.options
        on = list(opts.on)
        write_schema = table_write_schema(self.schema)
        data = _input_rows(left, write_schema)
        check_keys(data, on)  # every input row of a key is here when the driver did not check
        away = _flags(left)
        moved_in = _stored_keys(right, on, write_schema)
        executor = TableExecutor(self.root, self.storage_options)
        executor.index_with(list(self.indexes), self.schema)
        task = self.tables.get(route)
        if task is None:  # a new partition of the current spec
            write = (away & opts.update) | (~away & opts.insert)
            if not write.any():
                return None
            rows = data.filter(pa.array(write))
            key = next(SpecEvaluator(self.spec, self.schema).split(rows.to_batches()[0]))[0]
            location = new_table_location(self.spec, key, self.name_of)
            version = executor.create(location, rows)
            counts = Counts(int((write & ~away).sum()), int((write & away).sum()))
            found = table_statistics(rows, self.schema)
            return TableVersion.new_table(key, location, version, rows.num_rows, found), counts
        change = TableEdit(on=tuple(on))
        moved = 0
        confined = self.confined
        if opts.update and moved_in.num_rows and confined is not None and route not in confined:
            key = moved_in.slice(0, 1).to_pylist()[0]  # it would move out of a partition
            raise confined_error(task, key, key, opts.confine or "")  # the merge may not touch
        if opts.update and moved_in.num_rows:  # keys whose new rows go to other partitions
            change.delete_keys.append(moved_in)
            moved = moved_in.num_rows
        if data.num_rows:
            change.upsert, change.elsewhere, change.counted = data, away, True
            change.update, change.insert = opts.update, opts.insert
        deleted = 0
        scoped = route in self.scoped if opts.scope is not None else data.num_rows > 0
        if opts.by_source and scoped:
            stored = executor.stored_keys(task, self.schema, on, opts.scope).select(on)
            gone = anti_join_keys(anti_join_keys(stored, data.select(on), on), moved_in, on)
            if gone.num_rows:
                change.delete_keys.append(distinct_keys(gone, on))
                deleted = gone.num_rows
        applied = executor.apply(task, change, self.schema)
        outcome = TableVersion.of_task(
            task, applied.version, applied.rows, applied.changed, applied.stats
        )
        return outcome, Counts(applied.inserted, applied.updated, deleted, moved)


def _carried_iter(items: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``items``, a package error raised while producing one marked for the driver (see
    :func:`~.result.carried`)."""
    step = carried(next)
    while True:
        try:
            item = step(items)
        except StopIteration:
            return
        yield item


def _input_rows(left: pa.Table, write_schema: pa.Schema) -> pa.Table:
    """The input rows of a group in the namespace's write schema."""
    if left.num_rows == 0:
        return write_schema.empty_table()
    data = left.drop_columns([c for c in ROUTE_COLUMNS if c in left.column_names])
    batches = [conform_for_write(b, write_schema) for b in data.to_batches() if b.num_rows]
    return pa.Table.from_batches(batches, schema=write_schema)


def _flags(left: pa.Table) -> np.ndarray:
    """Per input row of a group: whether its key is stored in another partition."""
    if AWAY not in left.column_names:
        return np.zeros(left.num_rows, dtype=bool)
    column = pc.fill_null(left.column(AWAY), False)
    return np.asarray(column.to_numpy(zero_copy_only=False), dtype=bool)


def _stored_keys(right: pa.Table, on: list[str], write_schema: pa.Schema) -> pa.Table:
    """The distinct non-NULL keys of a group's moved-out rows, in the key columns' types."""
    plain = strip_field_ids(write_schema)
    key_schema = pa.schema([plain.field(k).with_nullable(True) for k in on])
    if right.num_rows == 0 or not set(on) <= set(right.column_names):
        return key_schema.empty_table()
    keys = right.select(on)
    valid = pc.is_valid(keys.column(on[0]))
    for name in on[1:]:
        valid = pc.and_(valid, pc.is_valid(keys.column(name)))
    keys = keys.filter(valid)
    keys = pa.table([pc.cast(keys.column(f.name), f.type) for f in key_schema], schema=key_schema)
    return distinct_keys(keys, on) if keys.num_rows else keys
