"""Reading scan tasks: each partition table at its pinned version, projected, filtered and
reconciled to the namespace schema, as one stream."""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import datafusion as dfn
import lance
import pyarrow as pa

from .arrow_json import strip_field_ids
from .conform import column_sources, conform_for_read
from .errors import (
    FilterError,
    PartitionReadError,
    SchemaError,
    clean_message,
    is_storage_failure,
    storage_error,
)
from .filters import to_lance_sql
from .partition_constants import fill_constants
from .planning import ScanPlan, ScanTask

PREFETCH_TASKS = 4  # partition tables read concurrently ahead of the consumer


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
    fragment_ids: Sequence[int] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Batches of one task (or of the fragments ``fragment_ids`` of its table), projected,
    filtered and reconciled to the namespace schema.

    ``schema`` is the namespace schema, preferably with its field ids: the table's columns are
    then matched by id (a renamed column is found under its old name), else by name.
    ``translated_filter`` is ``filter_sql`` in Lance's dialect (see :func:`lance_filter`); it is
    pushed to Lance only when the table has every namespace column under the same name and type.
    Otherwise the table is reconciled first and the filter applied by DataFusion.

    A raw Lance / Arrow failure (a missing or corrupt data file) raises
    :class:`PartitionReadError` naming the partition and the file."""
    try:
        yield from _task_batches(
            task,
            schema,
            columns,
            filter_sql,
            storage_options,
            batch_size,
            translated_filter,
            fragment_ids,
        )
    except Exception as e:
        if is_storage_failure(e):
            root = task.uri[: -len(task.location)].rstrip("/") or task.uri
            raise storage_error(
                e, root, "reading partition", task.object_id, PartitionReadError
            ) from None
        raise


def _task_batches(
    task: ScanTask,
    schema: pa.Schema,
    columns: Sequence[str] | None,
    filter_sql: str | None,
    storage_options: dict[str, str] | None,
    batch_size: int | None,
    translated_filter: str | None,
    fragment_ids: Sequence[int] | None,
) -> Iterator[pa.RecordBatch]:
    plain = strip_field_ids(schema)
    target = read_schema(plain, columns)
    try:
        ds = open_table(task, storage_options)
    except (ValueError, OSError, FileNotFoundError) as e:
        raise PartitionReadError(
            f"partition {task.object_id}: cannot open its table {task.uri} at version "
            f"{task.read_version if task.read_version is not None else 'latest'}: "
            f"{clean_message(e)}",
            object_id=task.object_id,
            path=task.uri,
        ) from None
    table_schema = ds.schema
    where = f"partition {task.object_id} (version {ds.version})"
    sources = column_sources(table_schema, schema)
    same = all(
        sources[f.name] == f.name and table_schema.field(f.name).type == f.type for f in plain
    )
    if same and (translated_filter is not None or not filter_sql):
        kwargs: dict[str, Any] = {"columns": list(target.names), "filter": translated_filter}
        if batch_size:
            kwargs["batch_size"] = batch_size
        try:
            if fragment_ids is not None:
                kwargs["fragments"] = [ds.get_fragment(i) for i in fragment_ids]
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
    wanted = plain if filter_sql else target
    table = conform_for_read(
        _read_sources(ds, wanted, sources, fragment_ids), wanted, where, sources
    )
    table = fill_constants(table, task.constants, wanted)  # identity keys a table lacks
    if filter_sql:
        ctx = dfn.SessionContext()
        ctx.register_record_batches("t", [table.to_batches() or [_empty(plain)]])
        table = ctx.sql(f"SELECT * FROM t WHERE {filter_sql}").to_arrow_table()
        table = conform_for_read(table, plain, where)
    yield from table.select(list(target.names)).to_batches(max_chunksize=batch_size)


def _fragment(ds: lance.LanceDataset, fragment_id: int) -> lance.LanceFragment:
    fragment = ds.get_fragment(fragment_id)
    if fragment is None:
        raise PartitionReadError(f"{ds.uri}: version {ds.version} has no fragment {fragment_id}")
    return fragment


def _read_sources(
    ds: lance.LanceDataset,
    wanted: pa.Schema,
    sources: dict[str, str | None],
    fragment_ids: Sequence[int] | None = None,
) -> pa.Table:
    """The table's columns holding ``wanted``'s columns (all its rows, or those of
    ``fragment_ids``, even when it holds none of the columns)."""
    fragments = None if fragment_ids is None else [_fragment(ds, i) for i in fragment_ids]
    present = [src for f in wanted if (src := sources.get(f.name)) is not None]
    if present:
        return ds.scanner(columns=present, fragments=fragments).to_table()
    rows = sum(int(f.count_rows()) for f in fragments) if fragments is not None else ds.count_rows()
    return pa.table({"__rows": pa.nulls(rows, pa.null())})


def count_matching(
    task: ScanTask, schema: pa.Schema, sql: str, storage_options: dict[str, str] | None
) -> int:
    """How many rows of ``task``'s table ``sql`` selects (reading one column)."""
    plain = strip_field_ids(schema)
    batches = iter_task_batches(
        task,
        schema,
        plain.names[:1],
        sql,
        storage_options,
        translated_filter=lance_filter(sql, plain),
    )
    return sum(b.num_rows for b in batches)


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
    """A reader over every task of ``plan`` in order, reading up to ``prefetch`` tasks ahead.

    ``schema`` is the namespace schema, with field ids (columns matched by id) or without (by
    name); the batches have it without ids."""
    plain = strip_field_ids(schema)
    target = read_schema(plain, columns)
    translated = lance_filter(plan.residual_filter, plain)

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
