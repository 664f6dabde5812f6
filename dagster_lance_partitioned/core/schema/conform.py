"""Reconciling data with a target schema: strictly for writes (name the column at fault), leniently
for reads (missing columns become NULL, narrower types are cast, extra columns are dropped).

Partition tables record which namespace field each of their columns holds in the Arrow schema
metadata ``dlp:field_ids`` (a JSON object ``{column name: field id}``; Lance keeps schema
metadata but not field-level ``lance:field_id``). Columns are matched by that id, so a renamed
column is still found in tables written before the rename; tables without the key are matched
by name."""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import NullabilityError, SchemaError, SchemaMismatchError
from .arrow_json import field_id, normalize_type, strip_field_ids
from .namespace_schema import is_widening

FIELD_IDS_KEY = "dlp:field_ids"
"""Schema metadata key of a partition table: JSON ``{column name: namespace field id}``."""

_FIELD_IDS_BKEY = FIELD_IDS_KEY.encode()

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
    return bool(pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t))


def check_write_schema(data: pa.Schema, target: pa.Schema, dropped: Collection[str] = ()) -> None:
    """Raise :class:`SchemaMismatchError` naming the first column of ``data`` that cannot be
    written to ``target`` (``dropped`` names columns dropped from the namespace), or the first
    non-nullable target column the data lacks."""
    names = set(target.names)
    for f in data:
        if f.name not in names and f.name in dropped:
            raise SchemaMismatchError(
                f"column {f.name!r} was dropped from the namespace schema; it cannot be written",
                column=f.name,
            )
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


def conform_for_read(
    table: pa.Table,
    target: pa.Schema,
    where: str = "",
    sources: Mapping[str, str | None] | None = None,
) -> pa.Table:
    """``table`` as ``target``: missing columns NULL, other types cast, extra columns dropped.

    ``sources`` maps each target column to the column of ``table`` holding it (see
    :func:`column_sources`); without it columns are matched by name."""
    columns = []
    for f in target:
        name = f.name if sources is None else sources.get(f.name)
        idx = -1 if name is None else table.schema.get_field_index(name)
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


# --------------------------------------------------------------------------------------------
# Field ids of partition-table columns


def column_ids(schema: pa.Schema) -> dict[str, int] | None:
    """Column name -> namespace field id, from ``dlp:field_ids`` schema metadata or from
    ``lance:field_id`` field metadata; None when the schema records no ids."""
    raw = (schema.metadata or {}).get(_FIELD_IDS_BKEY)
    if raw is not None:
        try:
            parsed = json.loads(raw)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict) and all(
            isinstance(v, int) and not isinstance(v, bool) for v in parsed.values()
        ):
            return {str(k): v for k, v in parsed.items()}
    ids = {f.name: fid for f in schema if (fid := _safe_field_id(f)) is not None}
    return ids or None


def _safe_field_id(f: pa.Field) -> int | None:
    """The field's ``lance:field_id``, or None when it has none or an invalid one."""
    try:
        return field_id(f)
    except SchemaError:
        return None


def with_field_ids(schema: pa.Schema, ids: Mapping[str, int]) -> pa.Schema:
    """``schema`` with ``dlp:field_ids`` = ``ids`` in its schema metadata."""
    md = dict(schema.metadata or {})
    md[_FIELD_IDS_BKEY] = json.dumps(dict(ids), separators=(",", ":")).encode()
    return schema.with_metadata(md)


def table_write_schema(schema_with_ids: pa.Schema) -> pa.Schema:
    """The schema partition tables are written with: no field-level ids, ``dlp:field_ids``
    recording them instead."""
    return with_field_ids(strip_field_ids(schema_with_ids), column_ids(schema_with_ids) or {})


def column_sources(source: pa.Schema, target: pa.Schema) -> dict[str, str | None]:
    """Target column name -> the ``source`` column holding it (None: absent).

    Matched by field id when both schemas record ids (a source column with another id never
    stands for a target column of the same name), else by name."""
    src_ids, tgt_ids = column_ids(source), column_ids(target)
    names = set(source.names)
    by_id: dict[int, str] = {}
    if src_ids is not None:
        by_id = {fid: name for name, fid in src_ids.items() if name in names}
    out: dict[str, str | None] = {}
    for f in target:
        if src_ids is not None and tgt_ids is not None and f.name in tgt_ids:
            out[f.name] = by_id.get(tgt_ids[f.name])
        else:
            out[f.name] = f.name if f.name in names else None
    return out


def conform_to(
    data: pa.Table | pa.RecordBatch,
    target: pa.Schema,
    sources: Mapping[str, str | None] | None = None,
) -> pa.Table:
    """``data`` as ``target`` for writing: columns found through ``sources`` (default: by id or
    name, see :func:`column_sources`), missing ones NULL, values cast safely (raising
    :class:`SchemaMismatchError` naming the column)."""
    table = data if isinstance(data, pa.Table) else pa.Table.from_batches([data])
    if sources is None:
        sources = column_sources(table.schema, target)
    columns = []
    for f in target:
        name = sources.get(f.name)
        if name is None:
            columns.append(pa.nulls(table.num_rows, f.type))
            continue
        col = table.column(name)
        if col.type != f.type:
            try:
                col = pc.cast(col, f.type, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
                raise SchemaMismatchError(
                    f"column {f.name!r}: values of {col.type} cannot be written as {f.type}: {e}",
                    column=f.name,
                ) from None
        columns.append(col)
    return pa.Table.from_arrays(columns, schema=target)


def append_layout(table: pa.Schema, write: pa.Schema) -> pa.Schema:
    """The schema a partition table shaped ``table`` takes so that rows shaped ``write`` can be
    appended to it: the table's columns in their order (renamed to ``write``'s names, widened
    to ``write``'s types, nullable where either is), then the columns of ``write`` the table
    lacks (nullable). Columns only the table has (dropped ones, or written by a newer schema)
    are kept nullable and written as NULL; ``dlp:field_ids`` records every id."""
    sources = column_sources(table, write)
    holder = {src: name for name, src in sources.items() if src is not None}
    table_ids = column_ids(table) or {}
    write_ids = column_ids(write) or {}
    fields: list[pa.Field] = []
    ids: dict[str, int] = {}
    for t in table:
        name = holder.get(t.name)
        if name is None:
            if t.name in write.names:
                continue  # the name now belongs to another column: leave this one out
            fields.append(t.with_nullable(True))
            if t.name in table_ids:
                ids[t.name] = table_ids[t.name]
            continue
        w = write.field(name)
        kind = t.type if is_widening(w.type, t.type) else w.type
        fields.append(pa.field(w.name, kind, t.nullable or w.nullable, w.metadata))
        if name in write_ids:
            ids[name] = write_ids[name]
    for w in write:
        if sources[w.name] is None:
            fields.append(w.with_nullable(True))
            if w.name in write_ids:
                ids[w.name] = write_ids[w.name]
    md = {k: v for k, v in (write.metadata or {}).items() if k != _FIELD_IDS_BKEY}
    return with_field_ids(pa.schema(fields, metadata=md or None), ids)


def same_layout(a: pa.Schema, b: pa.Schema) -> bool:
    """Whether two table schemas have the same columns (names, types, nullability, in order)
    and the same ``dlp:field_ids``."""
    cols = [(f.name, f.type, f.nullable) for f in a] == [(f.name, f.type, f.nullable) for f in b]
    return cols and column_ids(a) == column_ids(b)
