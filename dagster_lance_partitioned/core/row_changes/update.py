"""Updating the rows that match a filter with SQL expressions, in one manifest commit (rows
whose partition changes move)."""

from __future__ import annotations

import json
from collections.abc import Mapping

import datafusion as dfn
import pyarrow as pa
import pyarrow.compute as pc

from ..concurrency import parallel_map, table_threads
from ..errors import UpdateExpressionError
from ..expr.filters import FilterLike, check_row_expression, quote_ident
from ..expr.filters import check as check_filter
from ..manifest.commit_summary import PROP_FILTER, PROP_SET, Operation
from ..manifest.state import HasState, NamespaceState, state_of
from ..read.field_filters import namespace_row_filter
from ..read.planning import ScanTask
from ..read.scan import iter_task_batches, lance_filter
from ..schema import arrow_json
from .change import RowChangeResult
from .commit import run
from .executor import TableExecutor
from .plan import ChangePlan, first_unknown, stays


def compile_set(assignments: Mapping[str, str], schema: pa.Schema) -> str:
    """The SELECT list applying ``assignments`` (column -> DataFusion SQL expression over the
    row's columns); every column keeps its name."""
    plain = arrow_json.strip_field_ids(schema)
    if not assignments:
        raise UpdateExpressionError("update needs at least one column to set", None)
    if (name := first_unknown(plain, assignments)) is not None:
        raise UpdateExpressionError(
            f"update sets column {name!r}, which the namespace schema does not have "
            f"(columns: {', '.join(plain.names)})",
            name,
        )
    parts = []
    for f in plain:
        expr = assignments.get(f.name)
        parts.append(f"({expr}) AS {quote_ident(f.name)}" if expr else quote_ident(f.name))
    return ", ".join(parts)


def apply_set(rows: pa.Table, select: str, assignments: Mapping[str, str]) -> pa.Table:
    """``rows`` with the assigned columns recomputed, cast to their column types."""
    ctx = dfn.SessionContext()
    batches = rows.to_batches() or [
        pa.RecordBatch.from_pylist([], schema=rows.schema)  # an empty input still type-checks
    ]
    ctx.register_record_batches("t", [batches])
    try:
        out = ctx.sql(f"SELECT {select} FROM t").to_arrow_table()
    except Exception as e:  # DataFusion raises plain exceptions for bad SQL
        column = next(iter(assignments)) if len(assignments) == 1 else None
        raise UpdateExpressionError(
            f"update expressions {dict(assignments)} cannot be evaluated: {e}", column
        ) from None
    arrays = []
    for f in rows.schema:
        col = out.column(f.name)
        if col.type != f.type:
            try:
                col = pc.cast(col, f.type, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
                raise UpdateExpressionError(
                    f"update of column {f.name!r}: {assignments.get(f.name)!r} gives "
                    f"{col.type}, which cannot be stored as {f.type}: {e}",
                    f.name,
                ) from None
        if not f.nullable and col.null_count:
            raise UpdateExpressionError(
                f"update of column {f.name!r}: {assignments.get(f.name)!r} gives NULL for "
                f"{col.null_count} row(s), but the column is not nullable",
                f.name,
            )
        arrays.append(col)
    return pa.Table.from_arrays(arrays, schema=rows.schema)


def update_rows(
    ns: NamespaceState | HasState,
    filter: FilterLike,
    set: Mapping[str, str],
    *,
    commit_properties: Mapping[str, str] | None = None,
) -> RowChangeResult:
    """Set ``set``'s columns (DataFusion SQL expressions over the row) on the rows matching
    ``filter``, in one manifest commit. An expression that is not a scalar row expression
    (subquery, aggregate or window function, UNNEST, another table) raises
    :class:`FilterError` before anything is read.

    Rows stay in their partition table when their partition values (under that table's spec)
    do not change; otherwise they move: removed from it and written to the partition of the
    current spec they now belong to, in the same commit. ``filter`` None updates every row."""
    ns = state_of(ns)
    ns.require_unpinned("update rows")
    sql = namespace_row_filter(ns.refresh(), filter)
    select = compile_set(set, ns.schema_with_ids)
    for column, expr in set.items():
        if expr:  # scalar row expressions only: each row's values from its own row
            label = f"update of column {column!r}: expression"
            check_row_expression(str(expr), ns.schema_with_ids, label)
    if sql is not None:
        check_filter(sql, ns.schema_with_ids)  # a bad filter fails here
    apply_set(
        pa.Table.from_pylist([], schema=arrow_json.strip_field_ids(ns.schema_with_ids)),
        select,
        set,
    )
    where = sql or "TRUE"
    matched: dict[tuple[str, int | None, str | None, str], pa.Table] = {}

    def read(task: ScanTask, schema: pa.Schema) -> pa.Table:
        """The rows of ``task``'s table matching the filter (read once per schema)."""
        shape = schema.to_string(show_schema_metadata=True, show_field_metadata=True)
        key = (task.location, task.read_version, task.read_tag, shape)
        if key not in matched or task.read_version is None:
            plain = arrow_json.strip_field_ids(schema)
            batches = list(
                iter_task_batches(
                    task,
                    schema,
                    None,
                    where,
                    ns.storage_options,
                    translated_filter=lance_filter(where, plain),
                )
            )
            matched[key] = pa.Table.from_batches(batches, schema=plain)
        return matched[key]

    def build(p: ChangePlan) -> None:
        select_now = compile_set(set, p.schema)
        tasks = p.tasks(sql)
        found = parallel_map(lambda t: read(t, p.schema), tasks, table_threads(ns.uri))
        moving: list[pa.Table] = []
        for task, rows in zip(tasks, found, strict=True):
            if rows.num_rows == 0:
                continue
            new = apply_set(rows, select_now, set)
            p.updated += new.num_rows
            here = stays(p.snap.specs[task.spec_id], p.schema, new, task)
            change = p.change(task)
            change.delete_filter = where
            if here.all():
                change.appends.append(new)
                continue
            if here.any():
                change.appends.append(new.filter(pa.array(here)))
            gone = new.filter(pa.array(~here))
            p.moved += gone.num_rows
            moving.append(gone)
        if moving:
            p.place(pa.concat_tables(moving))

    props = {PROP_FILTER: where, PROP_SET: json.dumps(dict(set)), **(commit_properties or {})}
    executor = TableExecutor(ns.uri, ns.storage_options)
    return run(ns, Operation.UPDATE, build, props, executor)
