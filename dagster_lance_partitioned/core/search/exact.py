"""The reference vector search: every row each searched table's filter keeps is read in the
namespace's columns and measured (:func:`.distances.distance`), and the k nearest of all of
them are returned, ties by plan order then row order. It keeps nothing and reads every table
whatever its layout, filter or indexes; it answers ``use_index=False`` and tables Lance cannot
search as they are (an older layout, a filter only DataFusion evaluates), and every faster
strategy of :mod:`.nearest` is tested against it."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..manifest.state import NamespaceState
from ..read.scan import iter_task_batches, read_schema
from ..schema.arrow_json import strip_field_ids
from .distances import distance, matrix_of
from .tables import DISTANCE, SearchTable, for_each_table


def table_nearest(
    table: SearchTable,
    schema: pa.Schema,
    target: pa.Schema,
    column: str,
    vector: np.ndarray,
    k: int,
    metric: str,
    opts: dict[str, str] | None,
) -> pa.Table:
    """The ``k`` rows of one table nearest ``vector`` among those its filter keeps, in
    ``target``'s columns with ``_distance`` (ties by row order)."""
    names = list(dict.fromkeys([*target.names, column]))
    batches = list(
        iter_task_batches(
            table.task, schema, names, table.sql, opts, translated_filter=table.lance_sql
        )
    )
    plain = strip_field_ids(schema)
    rows = pa.Table.from_batches(batches, schema=read_schema(plain, names))
    rows = rows.filter(pc.is_valid(rows.column(column)))
    out_schema = target.append(pa.field(DISTANCE, pa.float32()))
    if rows.num_rows == 0:
        return out_schema.empty_table()
    distances = distance(matrix_of(rows.column(column), vector.shape[0]), vector, metric)
    top = np.argsort(distances, kind="stable")[:k]
    picked = rows.take(pa.array(top)).select(list(target.names))
    return picked.append_column(DISTANCE, pa.array(distances[top], pa.float32()))


def nearest(
    state: NamespaceState,
    tables: Sequence[SearchTable],
    schema: pa.Schema,
    target: pa.Schema,
    column: str,
    vector: np.ndarray,
    k: int,
    metric: str,
) -> pa.Table:
    """The ``k`` rows of ``tables`` nearest ``vector`` (see the module doc)."""
    opts = state.storage_options
    found = for_each_table(
        state,
        tables,
        lambda t: table_nearest(t, schema, target, column, vector, k, metric, opts),
    )
    return merged(found, target, k)


def merged(found: Sequence[pa.Table], target: pa.Schema, k: int) -> pa.Table:
    """The ``k`` nearest rows of several tables' results (ties: earlier table first)."""
    found = [f for f in found if f.num_rows]
    if not found:
        return target.append(pa.field(DISTANCE, pa.float32())).empty_table()
    together = pa.concat_tables(found)
    order = np.argsort(together.column(DISTANCE).to_numpy(), kind="stable")[:k]
    return together.take(pa.array(order))
