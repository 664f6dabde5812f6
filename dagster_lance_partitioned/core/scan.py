"""Planning and reading scans: which partition tables (at which versions) a filter needs, and
reading them as one stream reconciled to the namespace schema."""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import datafusion as dfn
import lance
import pyarrow as pa

from . import storage
from .conform import conform_for_read
from .errors import SchemaError
from .filters import FilterError, FilterLike, equality_constraints, parse, to_lance_sql, to_sql
from .manifest import ManifestSnapshot, TableEntry
from .spec import PartitionSpec, source_names

PREFETCH_TASKS = 4  # partition tables read concurrently ahead of the consumer


@dataclass(frozen=True)
class ScanTask:
    """One partition table to read, pinned to the version the manifest registered."""

    object_id: str
    location: str
    uri: str
    read_version: int | None
    read_branch: str | None
    read_tag: str | None
    spec_id: int
    partition_values: dict[str, Any]


@dataclass(frozen=True)
class ScanPlan:
    """The tasks a scan reads, the filter applied inside each, and the manifest version used."""

    tasks: tuple[ScanTask, ...]
    residual_filter: str | None
    manifest_version: int
    total_partitions: int

    @property
    def pruned(self) -> int:
        """How many registered partition tables the plan skips."""
        return self.total_partitions - len(self.tasks)


def plan_scan(
    snapshot: ManifestSnapshot,
    schema: pa.Schema,
    root: str,
    filter: FilterLike = None,
) -> ScanPlan:
    """Tasks for the partition tables that may hold rows matching ``filter``."""
    sql = to_sql(filter)
    constraints = equality_constraints(parse(sql, schema), schema) if sql else {}
    tables = snapshot.tables()
    checks = {
        spec_id: _identity_checks(spec, schema, constraints)
        for spec_id, spec in snapshot.specs.items()
    }
    tasks = [
        _task(t, snapshot.specs[t.spec_id], root)
        for t in tables
        if all(t.values[i] in allowed for i, allowed in checks[t.spec_id])
    ]
    return ScanPlan(tuple(tasks), sql, snapshot.version, len(tables))


def _identity_checks(
    spec: PartitionSpec, schema: pa.Schema, constraints: dict[str, Any]
) -> list[tuple[int, tuple[Any, ...]]]:
    """(position in the spec, allowed values) for each identity field the filter pins."""
    checks = []
    for i, f in enumerate(spec.fields):
        if f.transform is None or f.transform.type_name != "identity":
            continue
        (name,) = source_names(f, schema)
        allowed = constraints.get(name) if name else None
        if allowed is not None:
            checks.append((i, allowed.values))
    return checks


def _task(entry: TableEntry, spec: PartitionSpec, root: str) -> ScanTask:
    return ScanTask(
        entry.object_id,
        entry.location,
        storage.join(root, entry.location),
        None if entry.read_version is None else int(entry.read_version),
        entry.read_branch,
        entry.read_tag,
        entry.spec_id,
        entry.partition_values(spec),
    )


def open_table(task: ScanTask, storage_options: dict[str, str] | None) -> lance.LanceDataset:
    """The partition table at the version its manifest row pins."""
    options = tuple(sorted((storage_options or {}).items()))
    if task.read_version is None and task.read_tag is None:
        return _open(task.uri, None, None, None, options)  # latest of main: never cached
    return _open_pinned(task.uri, task.read_version, task.read_branch, task.read_tag, options)


def _open(
    uri: str,
    version: int | None,
    branch: str | None,
    tag: str | None,
    options: tuple[tuple[str, str], ...],
) -> lance.LanceDataset:
    storage_options = dict(options) or None
    if branch is not None:
        ds = lance.dataset(uri, storage_options=storage_options)
        return ds.checkout_version((branch, version))
    pinned: int | str | None = version if version is not None else tag
    return lance.dataset(uri, version=pinned, storage_options=storage_options)


# a table at a pinned version never changes, so opened handles can be reused across scans
_open_pinned = functools.lru_cache(maxsize=256)(_open)


def read_schema(schema: pa.Schema, columns: Sequence[str] | None) -> pa.Schema:
    """The schema a scan returns: the namespace schema, projected to ``columns``."""
    if columns is None:
        return schema
    missing = [c for c in columns if schema.get_field_index(c) < 0]
    if missing:
        raise SchemaError(
            f"column(s) {missing} not in the namespace schema (columns: {', '.join(schema.names)})"
        )
    return pa.schema([schema.field(c) for c in columns])


def iter_task_batches(
    task: ScanTask,
    schema: pa.Schema,
    columns: Sequence[str] | None,
    filter_sql: str | None,
    storage_options: dict[str, str] | None,
    batch_size: int | None = None,
    translated_filter: str | None = None,
) -> Iterator[pa.RecordBatch]:
    """Batches of one task, projected, filtered and reconciled to the namespace schema.

    ``translated_filter`` is ``filter_sql`` in Lance's dialect (see :func:`lance_filter`); without
    it the filter is applied by DataFusion after reading."""
    target = read_schema(schema, columns)
    ds = open_table(task, storage_options)
    table_schema = ds.schema
    where = f"partition {task.object_id} (version {ds.version})"
    same = all(
        table_schema.get_field_index(f.name) >= 0 and table_schema.field(f.name).type == f.type
        for f in schema
    )
    if same and (translated_filter is not None or not filter_sql):
        kwargs: dict[str, Any] = {"columns": list(target.names), "filter": translated_filter}
        if batch_size:
            kwargs["batch_size"] = batch_size
        try:
            reader = ds.scanner(**kwargs).to_reader()
        except (ValueError, OSError):
            reader = None  # Lance cannot evaluate this filter: DataFusion does it below
        if reader is not None:
            for batch in reader:
                yield from conform_for_read(
                    pa.Table.from_batches([batch]), target, where
                ).to_batches()
            return
    # schemas differ (or Lance cannot take the filter): reconcile, then filter with DataFusion
    present = [f.name for f in schema if table_schema.get_field_index(f.name) >= 0]
    table = conform_for_read(ds.to_table(columns=present), schema, where)
    if filter_sql:
        ctx = dfn.SessionContext()
        ctx.register_record_batches("t", [table.to_batches() or [_empty(schema)]])
        table = ctx.sql(f"SELECT * FROM t WHERE {filter_sql}").to_arrow_table()
        table = conform_for_read(table, schema, where)
    yield from table.select(list(target.names)).to_batches(max_chunksize=batch_size)


def lance_filter(filter_sql: str | None, schema: pa.Schema) -> str | None:
    """``filter_sql`` as Lance's scanner reads it, or None when it must be applied by DataFusion."""
    if not filter_sql:
        return None
    try:
        return to_lance_sql(filter_sql, schema)
    except FilterError:
        return None


def _empty(schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in schema], schema=schema)


def scan_reader(
    plan: ScanPlan,
    schema: pa.Schema,
    columns: Sequence[str] | None,
    storage_options: dict[str, str] | None,
    batch_size: int | None = None,
    prefetch: int = PREFETCH_TASKS,
) -> pa.RecordBatchReader:
    """A reader over every task of ``plan`` in order, reading up to ``prefetch`` tasks ahead."""
    target = read_schema(schema, columns)
    translated = lance_filter(plan.residual_filter, schema)

    def read(task: ScanTask) -> list[pa.RecordBatch]:
        return list(
            iter_task_batches(
                task,
                schema,
                columns,
                plan.residual_filter,
                storage_options,
                batch_size,
                translated,
            )
        )

    def gen() -> Iterator[pa.RecordBatch]:
        if prefetch <= 1 or len(plan.tasks) <= 1:
            for task in plan.tasks:
                yield from read(task)
            return
        with ThreadPoolExecutor(max_workers=prefetch) as pool:
            window: deque[Future[list[pa.RecordBatch]]] = deque()
            tasks = iter(plan.tasks)
            for task in tasks:
                window.append(pool.submit(read, task))
                if len(window) >= prefetch:
                    break
            while window:
                batches = window.popleft().result()
                nxt = next(tasks, None)
                if nxt is not None:
                    window.append(pool.submit(read, nxt))
                yield from batches

    return pa.RecordBatchReader.from_batches(target, gen())
