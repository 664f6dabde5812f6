"""Reconciling data with a target schema: strictly for writes (name the column at fault), leniently
for reads (missing columns become NULL, narrower types are cast, extra columns are dropped)."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc

from .arrow_json import normalize_type
from .errors import NullabilityError, SchemaError, SchemaMismatchError

_FAMILIES: list[Callable[[pa.DataType], bool]] = [
    lambda t: pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t),
    lambda t: pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t),
    lambda t: (
        pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_binary_view(t)
        or pa.types.is_fixed_size_binary(t)
    ),
    pa.types.is_date,
    pa.types.is_time,
    pa.types.is_duration,
    pa.types.is_boolean,
]


def castable(src: pa.DataType, dst: pa.DataType) -> bool:
    """Whether values of ``src`` may be written into a column of ``dst`` (checked per value)."""
    src = normalize_type(src)
    if src == dst or pa.types.is_null(src):
        return True
    if pa.types.is_timestamp(src) and pa.types.is_timestamp(dst):
        return (src.tz is None) == (dst.tz is None)
    if pa.types.is_struct(src) and pa.types.is_struct(dst):
        names = {dst.field(i).name: dst.field(i).type for i in range(dst.num_fields)}
        return all(
            src.field(i).name in names and castable(src.field(i).type, names[src.field(i).name])
            for i in range(src.num_fields)
        )
    if _is_list(src) and _is_list(dst):
        return castable(src.value_type, dst.value_type)
    if pa.types.is_map(src) and pa.types.is_map(dst):
        return castable(src.key_type, dst.key_type) and castable(src.item_type, dst.item_type)
    return any(fam(src) and fam(dst) for fam in _FAMILIES)


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def check_write_schema(data: pa.Schema, target: pa.Schema) -> None:
    """Raise :class:`SchemaMismatchError` naming the first column of ``data`` that cannot be
    written to ``target``, or the first non-nullable target column the data lacks."""
    names = set(target.names)
    for f in data:
        if f.name not in names:
            raise SchemaMismatchError(
                f"column {f.name!r} is not in the namespace schema "
                f"(columns: {', '.join(target.names)})",
                column=f.name,
            )
        dst = target.field(f.name).type
        if not castable(f.type, dst):
            raise SchemaMismatchError(
                f"column {f.name!r} has type {f.type}, which cannot be written as {dst}",
                column=f.name,
            )
    for f in target:
        if f.name not in data.names and not f.nullable:
            raise NullabilityError(
                f"column {f.name!r} is not nullable but the data has no such column",
                column=f.name,
            )


def conform_for_write(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """``batch`` as ``target`` (column order and types); raises naming the column at fault."""
    arrays = []
    for f in target:
        idx = batch.schema.get_field_index(f.name)
        if idx < 0:
            arr = pa.nulls(batch.num_rows, f.type)
        else:
            arr = _cast_column(batch.column(idx), f.type, f.name)
        if not f.nullable and arr.null_count:
            raise NullabilityError(
                f"column {f.name!r} is not nullable but {arr.null_count} row(s) are NULL",
                column=f.name,
            )
        arrays.append(arr)
    return pa.RecordBatch.from_arrays(arrays, schema=target)


def _cast_column(arr: pa.Array, dst: pa.DataType, name: str) -> pa.Array:
    if isinstance(arr, pa.DictionaryArray):
        arr = arr.dictionary_decode()
    if arr.type == dst:
        return arr
    try:
        return pc.cast(arr, dst, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
        raise SchemaMismatchError(
            f"column {name!r}: values of {arr.type} cannot be written as {dst}: {e}", column=name
        ) from None


def conform_for_read(table: pa.Table, target: pa.Schema, where: str = "") -> pa.Table:
    """``table`` as ``target``: missing columns NULL, other types cast, extra columns dropped."""
    columns = []
    for f in target:
        idx = table.schema.get_field_index(f.name)
        if idx < 0:
            columns.append(pa.nulls(table.num_rows, f.type))
            continue
        col = table.column(idx)
        if col.type != f.type:
            try:
                col = pc.cast(col, f.type, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
                raise SchemaError(
                    f"{where}: column {f.name!r} of type {col.type} cannot be read as {f.type}: {e}"
                ) from None
        columns.append(col)
    return pa.Table.from_arrays(columns, schema=target)
