"""Arrow schemas <-> the JsonArrowSchema JSON of the Lance Namespace spec, and Lance field ids.

The namespace schema of a partitioned namespace is stored as a JSON string in the
``JsonArrowSchema`` form of the Lance Namespace client models::

    {"fields": [{"name": "id", "nullable": false, "type": {"type": "int64"},
                 "metadata": {"lance:field_id": "0"}}, ...],
     "metadata": {...}}

A ``JsonArrowDataType`` is ``{"type": <name>, "length": <int>?, "fields": [<JsonArrowField>]?}``.
Partition specs store their ``result_type`` in the same form. Empty ``metadata`` is omitted,
as Lance does.

Type strings
------------
The names and layouts are those of Lance's own converter (``arrow_type_to_json`` /
``convert_json_arrow_type`` in ``lance-format/lance`` ``rust/lance-namespace/src/schema.rs``,
which is also what pylance's ``DirectoryNamespace.describe_table`` returns). Lance's form is
lossy for time units, time zones and sorted maps; for those, marked *ext* below, this module
writes the Lance *logical type* string (the ``LogicalType`` Lance prints in ``lance_schema``,
e.g. ``timestamp:ms:UTC``), which Lance's namespace reader rejects rather than misreads.

=============================  ===============================================================
Arrow type                     JsonArrowDataType
=============================  ===============================================================
null                           ``{"type": "null"}``
bool                           ``{"type": "bool"}`` (``"boolean"`` is read too)
int8 .. int64, uint8 .. uint64 ``{"type": "int8"}`` .. ``{"type": "uint64"}``
float16 / float32 / float64    ``{"type": "float16"}`` / ``"float32"`` / ``"float64"``
utf8 / large_utf8              ``{"type": "utf8"}`` / ``{"type": "large_utf8"}``
binary / large_binary          ``{"type": "binary"}`` / ``{"type": "large_binary"}``
fixed_size_binary(n)           ``{"type": "fixed_size_binary", "length": n}``
date32 / date64                ``{"type": "date32"}`` / ``{"type": "date64"}``
decimal{32,64,128,256}(p, s)   ``{"type": "decimal128", "length": p * 1000 + s}`` (Lance's
                               encoding; a negative scale decodes as p = (length + 128) // 1000)
timestamp(us) without zone     ``{"type": "timestamp"}`` (Lance's form)
timestamp(unit, tz) otherwise  ext: ``{"type": "timestamp:<unit>:<tz>"}``, ``-`` for no zone,
                               e.g. ``timestamp:ns:-``, ``timestamp:ms:UTC``,
                               ``timestamp:s:+05:30``
duration(us)                   ``{"type": "duration"}`` (Lance's form)
duration(s / ms / ns)          ext: ``{"type": "duration:ms"}`` etc.
time32(s / ms)                 ext: ``{"type": "time32:s"}`` / ``{"type": "time32:ms"}``
time64(us / ns)                ext: ``{"type": "time64:us"}`` / ``{"type": "time64:ns"}``
struct                         ``{"type": "struct", "fields": [<field>, ...]}``
list / large_list              ``{"type": "list", "fields": [<item field>]}`` / ``"large_list"``
fixed_size_list(n)             ``{"type": "fixed_size_list", "length": n, "fields": [<item>]}``
map (keys unsorted)            ``{"type": "map", "fields": [{"name": "entries", "nullable":
                               false, "type": {"type": "struct", "fields": [<key>, <value>]}}]}``
map (keys_sorted=True)         ext: as above with ``{"type": "map:sorted", ...}`` (Lance refuses
                               sorted maps)
dictionary<K, V>               written as V (Lance does the same); never read back
=============================  ===============================================================

Reading is case-insensitive in the type name (as Lance's reader) but keeps the case of a time
zone; it also accepts ``timestamp:<unit>`` (no zone) and Lance's bare ``"time32"`` /
``"time64"`` (which Lance writes whatever the unit) as ``time32("ms")`` / ``time64("us")``. A
missing ``nullable`` reads as true. List item, map key and map value field names are kept as
written; a map's entries field is always ``entries`` and non-nullable in Arrow, and of its
metadata only ``lance:field_id`` is kept (see below). Any other type string, and any Arrow type
not listed (views, unions, intervals, run-end encoded, extension types), raises
:class:`SchemaError`.

Field ids
---------
Every field carries its Lance field id in metadata under ``lance:field_id``; ids follow Lance's
numbering of a new dataset: depth-first pre-order (a field, then its children), where the
children are struct fields, the item of a list / large_list, the item of a fixed_size_list *only
when that item is a struct* (Lance gives no id to a primitive fixed_size_list item), and for a
map its ``entries`` struct followed by the key and value fields. pyarrow cannot attach metadata
to a map's ``entries`` field, so in Arrow schemas its id is kept on the map field under
:data:`MAP_ENTRIES_FIELD_ID_KEY`; in JSON it sits on the entries field as ``lance:field_id``,
as everywhere else.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from ..errors import SchemaError
from ..lru import Lru

FIELD_ID_KEY = "lance:field_id"
"""Field metadata key holding a field's Lance field id (decimal string)."""

MAP_ENTRIES_FIELD_ID_KEY = "dagster_lance_partitioned:map_entries_field_id"
"""Arrow-side metadata key on a map field holding the field id of its ``entries`` struct."""

_FIELD_ID_BKEY = FIELD_ID_KEY.encode()
_ENTRIES_BKEY = MAP_ENTRIES_FIELD_ID_KEY.encode()

_PRIMITIVE_NAMES: dict[pa.DataType, str] = {
    pa.null(): "null",
    pa.bool_(): "bool",
    pa.int8(): "int8",
    pa.int16(): "int16",
    pa.int32(): "int32",
    pa.int64(): "int64",
    pa.uint8(): "uint8",
    pa.uint16(): "uint16",
    pa.uint32(): "uint32",
    pa.uint64(): "uint64",
    pa.float16(): "float16",
    pa.float32(): "float32",
    pa.float64(): "float64",
    pa.utf8(): "utf8",
    pa.large_utf8(): "large_utf8",
    pa.binary(): "binary",
    pa.large_binary(): "large_binary",
    pa.date32(): "date32",
    pa.date64(): "date64",
}
_PRIMITIVES_BY_NAME: dict[str, pa.DataType] = {v: k for k, v in _PRIMITIVE_NAMES.items()}
_PRIMITIVES_BY_NAME["boolean"] = pa.bool_()

_DECIMALS: dict[str, Callable[[int, int], pa.DataType]] = {
    "decimal128": pa.decimal128,
    "decimal256": pa.decimal256,
}
if hasattr(pa, "decimal32"):
    _DECIMALS["decimal32"] = pa.decimal32
if hasattr(pa, "decimal64"):
    _DECIMALS["decimal64"] = pa.decimal64

_TIME_UNITS = ("s", "ms", "us", "ns")


# --------------------------------------------------------------------------------------------
# Arrow -> JSON


def _loc(path: str) -> str:
    return f"field {path!r}" if path else "type"


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _decode_metadata(md: dict[bytes, bytes] | None, where: str) -> dict[str, str]:
    if not md:
        return {}
    try:
        return {k.decode(): v.decode() for k, v in md.items()}
    except UnicodeDecodeError as e:
        raise SchemaError(f"{where}: metadata is not valid UTF-8") from e


def _type_to_json(t: pa.DataType, path: str, entries_md: dict[str, str] | None) -> dict[str, Any]:
    if pa.types.is_dictionary(t):
        return _type_to_json(t.value_type, path, entries_md)
    if isinstance(t, pa.ExtensionType):
        raise SchemaError(f"{_loc(path)}: unsupported Arrow type {t}")
    name = _PRIMITIVE_NAMES.get(t)
    if name is not None:
        return {"type": name}
    if pa.types.is_decimal(t):
        kind = f"decimal{t.bit_width}"
        if kind not in _DECIMALS:
            raise SchemaError(f"{_loc(path)}: unsupported Arrow type {t}")
        return {"type": kind, "length": t.precision * 1000 + t.scale}
    if pa.types.is_fixed_size_binary(t):
        return {"type": "fixed_size_binary", "length": t.byte_width}
    if pa.types.is_timestamp(t):
        if t.unit == "us" and t.tz is None:
            return {"type": "timestamp"}
        return {"type": f"timestamp:{t.unit}:{t.tz if t.tz is not None else '-'}"}
    if pa.types.is_duration(t):
        return {"type": "duration" if t.unit == "us" else f"duration:{t.unit}"}
    if pa.types.is_time32(t):
        return {"type": f"time32:{t.unit}"}
    if pa.types.is_time64(t):
        return {"type": f"time64:{t.unit}"}
    if pa.types.is_struct(t):
        return {"type": "struct", "fields": [_field_to_json(c, path) for c in _children(t)]}
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        kind = "list" if pa.types.is_list(t) else "large_list"
        return {"type": kind, "fields": [_field_to_json(t.value_field, path)]}
    if pa.types.is_fixed_size_list(t):
        return {
            "type": "fixed_size_list",
            "length": t.list_size,
            "fields": [_field_to_json(t.value_field, path)],
        }
    if pa.types.is_map(t):
        entries_path = _join(path, "entries")
        entries: dict[str, Any] = {
            "name": "entries",
            "nullable": False,
            "type": {
                "type": "struct",
                "fields": [
                    _field_to_json(t.key_field, entries_path),
                    _field_to_json(t.item_field, entries_path),
                ],
            },
        }
        if entries_md:
            entries["metadata"] = entries_md
        return {"type": "map:sorted" if t.keys_sorted else "map", "fields": [entries]}
    raise SchemaError(f"{_loc(path)}: unsupported Arrow type {t}")


def _field_to_json(f: pa.Field, parent: str) -> dict[str, Any]:
    path = _join(parent, f.name)
    md = _decode_metadata(f.metadata, _loc(path))
    entries_md: dict[str, str] | None = None
    t = f.type
    while pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_map(t) and MAP_ENTRIES_FIELD_ID_KEY in md:
        entries_md = {FIELD_ID_KEY: md.pop(MAP_ENTRIES_FIELD_ID_KEY)}
    out: dict[str, Any] = {
        "name": f.name,
        "nullable": f.nullable,
        "type": _type_to_json(f.type, path, entries_md),
    }
    if md:
        out["metadata"] = md
    return out


def type_to_json(t: pa.DataType) -> dict[str, Any]:
    """The JsonArrowDataType of an Arrow type (dictionaries as their value type)."""
    return _type_to_json(t, "", None)


def field_to_json(f: pa.Field) -> dict[str, Any]:
    """The JsonArrowField of an Arrow field, metadata included as a str->str dict."""
    return _field_to_json(f, "")


def schema_to_json(schema: pa.Schema) -> dict[str, Any]:
    """The JsonArrowSchema of an Arrow schema."""
    out: dict[str, Any] = {"fields": [field_to_json(f) for f in schema]}
    md = _decode_metadata(schema.metadata, "schema")
    if md:
        out["metadata"] = md
    return out


# --------------------------------------------------------------------------------------------
# JSON -> Arrow


def _require_length(obj: dict[str, Any], raw: str, path: str) -> int:
    length = obj.get("length")
    if isinstance(length, bool) or not isinstance(length, int) or length < 0:
        raise SchemaError(f"{_loc(path)}: type {raw!r} needs a non-negative integer 'length'")
    return length


def _child_fields(
    obj: dict[str, Any], raw: str, path: str, count: int | None
) -> list[dict[str, Any]]:
    fields = obj.get("fields")
    if not isinstance(fields, list) or not all(isinstance(x, dict) for x in fields):
        raise SchemaError(f"{_loc(path)}: type {raw!r} needs a 'fields' list of JsonArrowField")
    if count is not None and len(fields) != count:
        raise SchemaError(f"{_loc(path)}: type {raw!r} needs exactly {count} field(s)")
    return fields


def _unit(unit: str, allowed: tuple[str, ...], raw: str, path: str) -> str:
    if unit not in allowed:
        raise SchemaError(
            f"{_loc(path)}: unknown JsonArrowDataType type string {raw!r} (unit {unit!r})"
        )
    return unit


def _metadata_from_json(obj: dict[str, Any], where: str) -> dict[str, str]:
    md = obj.get("metadata")
    if md is None:
        return {}
    if not isinstance(md, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in md.items()
    ):
        raise SchemaError(f"{where}: 'metadata' must be an object of string to string")
    return dict(md)


def _type_from_json(obj: Any, path: str) -> tuple[pa.DataType, str | None]:
    """The type and, for a map, its entries field's lance:field_id (or None)."""
    if not isinstance(obj, dict) or not isinstance(obj.get("type"), str):
        raise SchemaError(
            f"{_loc(path)}: a JsonArrowDataType must be an object with a string 'type'"
        )
    raw: str = obj["type"]
    base, _, rest = raw.partition(":")
    base = base.lower()
    try:
        if not rest:
            prim = _PRIMITIVES_BY_NAME.get(base)
            if prim is not None:
                return prim, None
            if base == "fixed_size_binary":
                return pa.binary(_require_length(obj, raw, path)), None
            if base in _DECIMALS:
                encoded = _require_length(obj, raw, path)
                precision = (encoded + 128) // 1000
                return _DECIMALS[base](precision, encoded - precision * 1000), None
            if base == "struct":
                children = _child_fields(obj, raw, path, None)
                return pa.struct([_field_from_json(c, path) for c in children]), None
            if base in ("list", "large_list"):
                (item,) = _child_fields(obj, raw, path, 1)
                ctor = pa.list_ if base == "list" else pa.large_list
                return ctor(_field_from_json(item, path)), None
            if base == "fixed_size_list":
                size = _require_length(obj, raw, path)
                (item,) = _child_fields(obj, raw, path, 1)
                return pa.list_(_field_from_json(item, path), size), None
        if base == "timestamp":
            if not rest:
                return pa.timestamp("us"), None
            unit, _, tz = rest.partition(":")
            unit = _unit(unit.lower(), _TIME_UNITS, raw, path)
            return pa.timestamp(unit, tz=None if tz in ("", "-") else tz), None
        if base == "duration":
            return pa.duration(_unit(rest.lower(), _TIME_UNITS, raw, path) if rest else "us"), None
        if base == "time32":
            return pa.time32(_unit(rest.lower(), ("s", "ms"), raw, path) if rest else "ms"), None
        if base == "time64":
            return pa.time64(_unit(rest.lower(), ("us", "ns"), raw, path) if rest else "us"), None
        if base == "map" and rest.lower() in ("", "sorted"):
            return _map_from_json(obj, raw, path, keys_sorted=bool(rest))
    except SchemaError:
        raise
    except (pa.ArrowException, TypeError, ValueError) as e:
        raise SchemaError(f"{_loc(path)}: invalid JsonArrowDataType {raw!r}: {e}") from e
    raise SchemaError(f"{_loc(path)}: unknown JsonArrowDataType type string {raw!r}")


def _map_from_json(
    obj: dict[str, Any], raw: str, path: str, keys_sorted: bool
) -> tuple[pa.DataType, str | None]:
    (entries,) = _child_fields(obj, raw, path, 1)
    entries_path = _join(path, "entries")
    etype = entries.get("type")
    if not isinstance(etype, dict) or str(etype.get("type", "")).lower() != "struct":
        raise SchemaError(f"{_loc(entries_path)}: the entries of a map must be a struct")
    key, value = _child_fields(etype, "struct", entries_path, 2)
    entries_md = _metadata_from_json(entries, _loc(entries_path))
    key_field = _field_from_json(key, entries_path)
    value_field = _field_from_json(value, entries_path)
    map_type = pa.map_(key_field, value_field, keys_sorted=keys_sorted)
    return map_type, entries_md.get(FIELD_ID_KEY)


def _field_from_json(obj: Any, parent: str) -> pa.Field:
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        raise SchemaError(
            f"{_loc(parent)}: a JsonArrowField must be an object with a string 'name'"
        )
    name: str = obj["name"]
    path = _join(parent, name)
    nullable = obj.get("nullable", True)
    if not isinstance(nullable, bool):
        raise SchemaError(f"{_loc(path)}: 'nullable' must be a boolean")
    if "type" not in obj:
        raise SchemaError(f"{_loc(path)}: missing 'type'")
    md = _metadata_from_json(obj, _loc(path))
    t, entries_id = _type_from_json(obj["type"], path)
    if entries_id is not None:
        md[MAP_ENTRIES_FIELD_ID_KEY] = entries_id
    try:
        return pa.field(name, t, nullable=nullable, metadata=md or None)
    except (pa.ArrowException, TypeError, ValueError) as e:
        raise SchemaError(f"{_loc(path)}: {e}") from e


def type_from_json(obj: dict[str, Any]) -> pa.DataType:
    """The Arrow type of a JsonArrowDataType."""
    return _type_from_json(obj, "")[0]


def field_from_json(obj: dict[str, Any]) -> pa.Field:
    """The Arrow field of a JsonArrowField."""
    return _field_from_json(obj, "")


def schema_from_json(obj: dict[str, Any] | str | bytes) -> pa.Schema:
    """The Arrow schema of a JsonArrowSchema, given as a dict or as its JSON text."""
    if isinstance(obj, str | bytes | bytearray):
        try:
            obj = json.loads(obj)
        except ValueError as e:
            raise SchemaError(f"schema is not valid JSON: {e}") from e
    if not isinstance(obj, dict) or not isinstance(obj.get("fields"), list):
        raise SchemaError("a JsonArrowSchema must be an object with a 'fields' list")
    fields = [_field_from_json(f, "") for f in obj["fields"]]
    md = _metadata_from_json(obj, "schema")
    return pa.schema(fields, metadata=md or None)


# --------------------------------------------------------------------------------------------
# Structure helpers


def is_list_like(t: pa.DataType) -> bool:
    """Whether ``t`` is a list type of any kind (list, large, fixed-size, view)."""
    return bool(
        pa.types.is_list(t)
        or pa.types.is_large_list(t)
        or pa.types.is_fixed_size_list(t)
        or pa.types.is_list_view(t)
        or pa.types.is_large_list_view(t)
    )


def _children(t: pa.DataType) -> list[pa.Field]:
    """Child fields pyarrow can hold: struct fields, list items, map key and value."""
    if pa.types.is_struct(t):
        return [t.field(i) for i in range(t.num_fields)]
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return [t.value_field]
    if pa.types.is_map(t):
        return [t.key_field, t.item_field]
    return []


def _with_children(t: pa.DataType, children: list[pa.Field]) -> pa.DataType:
    if pa.types.is_struct(t):
        return pa.struct(children)
    if pa.types.is_list(t):
        return pa.list_(children[0])
    if pa.types.is_large_list(t):
        return pa.large_list(children[0])
    if pa.types.is_fixed_size_list(t):
        return pa.list_(children[0], t.list_size)
    if pa.types.is_map(t):
        return pa.map_(children[0], children[1], keys_sorted=t.keys_sorted)
    return t


def _lance_children(t: pa.DataType) -> list[pa.Field]:
    """Child fields Lance numbers (a fixed_size_list item only when it is a struct)."""
    if pa.types.is_fixed_size_list(t) and not pa.types.is_struct(t.value_field.type):
        return []
    return _children(t)


def _replace_field(f: pa.Field, t: pa.DataType, md: dict[bytes, bytes] | None) -> pa.Field:
    return pa.field(f.name, t, nullable=f.nullable, metadata=md or None)


# --------------------------------------------------------------------------------------------
# Normalisation


def normalize_type(t: pa.DataType) -> pa.DataType:
    """The type with every dictionary<K, V> replaced by V, at any depth."""
    if pa.types.is_dictionary(t):
        return normalize_type(t.value_type)
    children = _children(t)
    if not children:
        return t
    new = [_normalize_field(c) for c in children]
    if all(a is b for a, b in zip(new, children, strict=True)):
        return t
    return _with_children(t, new)


def _normalize_field(f: pa.Field) -> pa.Field:
    original = f.type
    t = normalize_type(original)
    return f if t is original else f.with_type(t)


def normalize_schema(schema: pa.Schema) -> pa.Schema:
    """The schema with every dictionary<K, V> replaced by V, at any depth."""
    return pa.schema([_normalize_field(f) for f in schema], metadata=schema.metadata)


# --------------------------------------------------------------------------------------------
# Field ids


def _parse_id(raw: bytes, where: str) -> int:
    try:
        value = int(raw.decode())
    except (UnicodeDecodeError, ValueError) as e:
        raise SchemaError(f"field {where!r}: invalid {FIELD_ID_KEY} {raw!r}") from e
    if value < 0:
        raise SchemaError(f"field {where!r}: negative {FIELD_ID_KEY} {value}")
    return value


def field_id(f: pa.Field) -> int | None:
    """The Lance field id in the field's metadata, or None."""
    md = f.metadata or {}
    raw = md.get(_FIELD_ID_BKEY)
    return None if raw is None else _parse_id(raw, f.name)


def _iter_ids(f: pa.Field, path: tuple[str, ...]) -> Iterator[tuple[int, tuple[str, ...]]]:
    path = (*path, f.name)
    md = f.metadata or {}
    if _FIELD_ID_BKEY in md:
        yield _parse_id(md[_FIELD_ID_BKEY], ".".join(path)), path
    t = f.type
    children = _children(t)
    if pa.types.is_map(t):
        path = (*path, "entries")
        if _ENTRIES_BKEY in md:
            yield _parse_id(md[_ENTRIES_BKEY], ".".join(path)), path
    for c in children:
        yield from _iter_ids(c, path)


def fields_by_id(schema: pa.Schema) -> dict[int, tuple[str, ...]]:
    """Each field id in the schema mapped to the path of names leading to its field."""
    out: dict[int, tuple[str, ...]] = {}
    for f in schema:
        for fid, path in _iter_ids(f, ()):
            if fid in out:
                raise SchemaError(
                    f"duplicate {FIELD_ID_KEY} {fid} on {'.'.join(out[fid])!r} "
                    f"and {'.'.join(path)!r}"
                )
            out[fid] = path
    return out


def max_field_id(schema: pa.Schema) -> int:
    """The largest field id in the schema, or -1 when there is none."""
    return max((fid for f in schema for fid, _ in _iter_ids(f, ())), default=-1)


def assign_field_ids(schema: pa.Schema, next_id: int = 0) -> tuple[pa.Schema, int]:
    """The schema with an id on every field lacking one, and the next free id.

    New ids are handed out in Lance's order (see the module docstring) starting at the larger of
    ``next_id`` and one past the largest id already present, so no id is ever reused.
    """
    fields_by_id(schema)  # rejects duplicate ids
    counter = [max(next_id, max_field_id(schema) + 1)]

    def take() -> bytes:
        value = counter[0]
        counter[0] += 1
        return str(value).encode()

    def visit(f: pa.Field) -> pa.Field:
        md = dict(f.metadata or {})
        if _FIELD_ID_BKEY not in md:
            md[_FIELD_ID_BKEY] = take()
        t = f.type
        if pa.types.is_map(t) and _ENTRIES_BKEY not in md:
            md[_ENTRIES_BKEY] = take()
        numbered = _lance_children(t)
        if numbered:
            t = _with_children(t, [visit(c) for c in numbered])
        return _replace_field(f, t, md)

    new_schema = pa.schema([visit(f) for f in schema], metadata=schema.metadata)
    return new_schema, counter[0]


# id(schema) -> (that schema, it stripped): searches strip the same schema once per table
_stripped: Lru[tuple[pa.Schema, pa.Schema]] = Lru(64)


def strip_field_ids(schema: pa.Schema) -> pa.Schema:
    """The schema without any field-id metadata; other metadata is kept."""
    hit = _stripped.get(id(schema))
    if hit is not None and hit[0] is schema:
        return hit[1]
    stripped = _strip(schema)
    _stripped.put(id(schema), (schema, stripped))
    return stripped


def _strip(schema: pa.Schema) -> pa.Schema:
    def visit(f: pa.Field) -> pa.Field:
        md = {
            k: v for k, v in (f.metadata or {}).items() if k not in (_FIELD_ID_BKEY, _ENTRIES_BKEY)
        }
        t = f.type
        children = _children(t)
        if children:
            t = _with_children(t, [visit(c) for c in children])
        return _replace_field(f, t, md)

    return pa.schema([visit(f) for f in schema], metadata=schema.metadata)


__all__ = [
    "FIELD_ID_KEY",
    "MAP_ENTRIES_FIELD_ID_KEY",
    "assign_field_ids",
    "field_from_json",
    "field_id",
    "field_to_json",
    "fields_by_id",
    "max_field_id",
    "normalize_schema",
    "normalize_type",
    "schema_from_json",
    "schema_to_json",
    "strip_field_ids",
    "type_from_json",
    "type_to_json",
]
