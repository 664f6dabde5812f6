"""Identity partition values as column constants: every row of an identity partition holds its
value, so a partition table that does not store the column (an imported Hive tree) or stores
NULLs for it is filled with the value on read and on rewrite."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..schema import arrow_json
from .partition_spec import PartitionSpec


def identity_constants(
    spec: PartitionSpec, schema: pa.Schema, values: Mapping[str, Any]
) -> dict[str, Any]:
    """Column name -> value for each identity field of ``spec`` (``schema`` with field ids)."""
    return {name: values[fid] for fid, name in identity_columns(spec, schema) if fid in values}


_MEMO_SIZE = 64
_memo: dict[tuple[int, int], tuple[PartitionSpec, pa.Schema, list[tuple[str, str]]]] = {}


def identity_columns(spec: PartitionSpec, schema: pa.Schema) -> list[tuple[str, str]]:
    """(field id, source column name) of each identity field of ``spec`` over ``schema``.

    Remembered per spec and schema object: planning asks once per partition."""
    key = (id(spec), id(schema))
    hit = _memo.get(key)
    if hit is not None and hit[0] is spec and hit[1] is schema:
        return hit[2]
    by_id = {arrow_json.field_id(f): f for f in schema}
    out: list[tuple[str, str]] = []
    for f in spec.fields:
        source = by_id.get(f.source_ids[0]) if len(f.source_ids) == 1 else None
        if source is not None and f.transform_for([source.type]).is_identity:
            out.append((f.field_id, source.name))
    if len(_memo) >= _MEMO_SIZE:
        _memo.clear()
    _memo[key] = (spec, schema, out)
    return out


def fill_constants(table: pa.Table, constants: Mapping[str, Any], schema: pa.Schema) -> pa.Table:
    """``table`` with each column of ``constants`` holding its value where the table has no
    value: added when the table lacks the column, NULLs replaced when it has it.

    Only for identity partition columns, whose every row holds the partition value: a NULL there
    in a non-NULL partition can only be a column the table did not store."""
    for name, value in constants.items():
        idx = schema.get_field_index(name)
        if idx < 0:
            continue
        t = schema.field(idx).type
        if name not in table.column_names:
            column = (
                pa.nulls(table.num_rows, t)
                if value is None
                else pa.repeat(pa.scalar(value, t), table.num_rows)
            )
            table = table.append_column(pa.field(name, t), column)
        elif value is not None:
            at = table.column_names.index(name)
            column = table.column(at)
            if column.null_count:
                filled = pc.fill_null(column, pa.scalar(value, t).cast(column.type))
                table = table.set_column(at, table.schema.field(at), filled)
    return table
