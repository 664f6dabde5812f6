"""Planning and reading scans: which partition tables (at which versions) a filter needs, and
reading them as one stream reconciled to the namespace schema."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
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
    tasks = [
        _task(t, snapshot.specs[t.spec_id], root)
        for t in tables
        if _may_match(t, snapshot.specs[t.spec_id], schema, constraints)
    ]
    return ScanPlan(tuple(tasks), sql, snapshot.version, len(tables))


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


def _may_match(
    entry: TableEntry, spec: PartitionSpec, schema: pa.Schema, constraints: dict[str, Any]
) -> bool:
    """False only when an identity field's value is outside a column's constrained values."""
    if not constraints:
        return True
    for f, value in zip(spec.fields, entry.values, strict=True):
        if f.transform is None or f.transform.type_name != "identity":
            continue
        (name,) = source_names(f, schema)
        allowed = constraints.get(name) if name else None
        if allowed is not None and value not in allowed.values:
            return False
    return True


def open_table(task: ScanTask, storage_options: dict[str, str] | None) -> lance.LanceDataset:
    """The partition table at the version its manifest row pins."""
    if task.read_branch is not None:
        ds = lance.dataset(task.uri, storage_options=storage_options)
        return ds.checkout_version((task.read_branch, task.read_version))
    version: int | str | None = (
        task.read_version if task.read_version is not None else task.read_tag
    )
    return lance.dataset(task.uri, version=version, storage_options=storage_options)


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
) -> Iterator[pa.RecordBatch]:
    """Batches of one task, projected, filtered and reconciled to the namespace schema."""
    target = read_schema(schema, columns)
    ds = open_table(task, storage_options)
    table_schema = ds.schema
    where = f"partition {task.object_id} (version {ds.version})"
    lance_filter = _lance_filter(filter_sql, schema)
    same = all(
        table_schema.get_field_index(f.name) >= 0 and table_schema.field(f.name).type == f.type
        for f in schema
    )
    if (same and lance_filter is not None) or (same and not filter_sql):
        kwargs: dict[str, Any] = {"columns": list(target.names), "filter": lance_filter}
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


def _lance_filter(filter_sql: str | None, schema: pa.Schema) -> str | None:
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
) -> pa.RecordBatchReader:
    """A reader over every task of ``plan``, one after another."""
    target = read_schema(schema, columns)

    def gen() -> Iterator[pa.RecordBatch]:
        for task in plan.tasks:
            yield from iter_task_batches(
                task, schema, columns, plan.residual_filter, storage_options, batch_size
            )

    return pa.RecordBatchReader.from_batches(target, gen())
