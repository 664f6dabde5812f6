"""The namespace schema as ``__manifest`` metadata records it: reading it (with field ids),
dropped (deprecated) fields, the names and types a schema may declare, and the type widenings
schema evolution allows."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Protocol

import pyarrow as pa

from ..errors import SchemaError
from . import arrow_json

SCHEMA_KEY = "schema"

DEPRECATED_KEY = "lance:deprecated"
"""Field metadata key marking a dropped field (value ``"true"``)."""

_DEPRECATED_BKEY = DEPRECATED_KEY.encode()

_SIGNED = [pa.int8(), pa.int16(), pa.int32(), pa.int64()]
_UNSIGNED = [pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64()]
_FLOATS = [pa.float16(), pa.float32(), pa.float64()]


# --------------------------------------------------------------------------------------------
# Deprecated fields


def is_deprecated(f: pa.Field) -> bool:
    """Whether ``f`` carries ``lance:deprecated: true`` (a dropped column)."""
    return bool((f.metadata or {}).get(_DEPRECATED_BKEY, b"").lower() == b"true")


def live_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` without its deprecated (dropped) top-level fields."""
    if not any(is_deprecated(f) for f in schema):
        return schema
    return pa.schema([f for f in schema if not is_deprecated(f)], metadata=schema.metadata)


def dropped_names(schema: pa.Schema) -> set[str]:
    """Names of dropped top-level fields that no live field has taken since."""
    live = {f.name for f in schema if not is_deprecated(f)}
    return {f.name for f in schema if is_deprecated(f)} - live


def full_schema(metadata: dict[str, str]) -> pa.Schema:
    """The namespace schema stored in ``__manifest`` metadata, dropped fields included."""
    raw = metadata.get(SCHEMA_KEY)
    if raw is None:
        raise SchemaError("__manifest metadata has no 'schema'")
    return arrow_json.schema_from_json(raw)


# --------------------------------------------------------------------------------------------
# What a namespace schema may declare

RESERVED_NAMES = frozenset(
    {"_rowid", "_rowaddr", "_rowoffset", "_row_created_at_version", "_row_last_updated_at_version"}
)
"""Column names Lance keeps for the row-id / row-address columns it adds to scans itself (its
writer refuses a column of that name; case-sensitive)."""


def check_columns(fields: Iterable[pa.Field], verb: str) -> None:
    """Raise :class:`SchemaError` naming the first field (at any depth) that a namespace cannot
    declare: a name Lance cannot write or read back (see :func:`check_column_name`) or a
    dictionary type. ``verb``: what was asked (``create``, ``add``), for the message."""
    for f in fields:
        check_column_name(f.name, verb)
        check_type(f.type, f.name, verb)


def check_column_name(name: object, verb: str, parent: str | None = None) -> None:
    """Raise :class:`SchemaError` unless ``name`` is a name Lance writes and reads back as a
    top-level column (``parent`` None) or as a field of the nested field ``parent``.

    Refused at any depth: the empty name and names holding NUL (Lance reads no column back
    under them, or cuts the name at NUL), a ``.`` (Lance's separator of nested field paths: its
    writer refuses such a top-level column) or a backtick (Lance's quote of field names: it
    reads no such column back). Refused as top-level names: ``*`` (a projection of it reads
    every column) and :data:`RESERVED_NAMES`. Any other text is a valid name (spaces, quotes,
    SQL keywords and operators, unicode, ...): filters quote it (see ``filters.quote_ident``)."""
    if parent is None:
        what = f"cannot {verb} column {name!r}"
    else:
        what = f"cannot {verb} nested field {name!r} in {parent!r}"
    if not isinstance(name, str):
        raise SchemaError(f"{what}: a field name must be a string")
    reason = None
    if not name:
        reason = "the empty name cannot be read back from Lance"
    elif "\x00" in name:
        reason = "a name cannot hold a NUL character (Lance cuts the name at it)"
    elif "." in name:
        reason = (
            "a name cannot contain '.' (Lance reads a dotted name as the path of a nested "
            "field: its writer refuses such a column)"
        )
    elif "`" in name:
        reason = (
            "a name cannot contain a backtick (Lance's quote character of field names: it "
            "reads no such column back)"
        )
    elif parent is None and name == "*":
        reason = "'*' is the wildcard of Lance projections (a read of it reads every column)"
    elif parent is None and name in RESERVED_NAMES:
        reason = f"{name!r} is reserved by Lance for a row-id / row-address column it adds itself"
    if reason is not None:
        raise SchemaError(f"{what}: {reason}")


def check_type(t: pa.DataType, path: str, verb: str) -> None:
    """Raise :class:`SchemaError` for a dictionary type, or a nested field name Lance cannot
    write or read back, in ``t`` (the type of the field ``path``)."""
    if pa.types.is_dictionary(t):
        raise SchemaError(
            f"cannot {verb} column {path!r}: dictionary type {t} is not supported (the "
            "namespace schema, Lance Namespace JSON, has no dictionary type: it would be read "
            f"back as {t.value_type}); declare {t.value_type} instead: dictionary-encoded data "
            "is still written into it"
        )
    if pa.types.is_struct(t):
        for i in range(t.num_fields):
            child = t.field(i)
            check_column_name(child.name, verb, parent=path)
            check_type(child.type, f"{path}.{child.name}", verb)
    elif pa.types.is_map(t):
        check_type(t.key_type, f"{path}.key", verb)
        check_type(t.item_type, f"{path}.value", verb)
    elif arrow_json.is_list_like(t):
        check_type(t.value_type, f"{path}[]", verb)


# --------------------------------------------------------------------------------------------
# Type promotion


def is_widening(src: pa.DataType, dst: pa.DataType) -> bool:
    """Whether every ``src`` value is exactly a ``dst`` value and hashes to the same bucket.

    Allowed: a wider signed integer; a wider unsigned integer, or a signed integer wider than
    the unsigned one; float16 -> float32 -> float64; a decimal with more precision and the same
    scale; utf8 -> large_utf8; binary -> large_binary. Integers never become floats (integers
    and floats hash differently, so bucket partition values would move) and dates, times and
    timestamps keep their type."""
    if src == dst:
        return False
    if src in _SIGNED and dst in _SIGNED:
        return _SIGNED.index(dst) > _SIGNED.index(src)
    if src in _UNSIGNED and dst in _UNSIGNED:
        return _UNSIGNED.index(dst) > _UNSIGNED.index(src)
    if src in _UNSIGNED and dst in _SIGNED:
        return bool(dst.bit_width > src.bit_width)
    if src in _FLOATS and dst in _FLOATS:
        return _FLOATS.index(dst) > _FLOATS.index(src)
    if pa.types.is_decimal(src) and pa.types.is_decimal(dst):
        return bool(
            src.scale == dst.scale
            and dst.precision >= src.precision
            and dst.bit_width >= src.bit_width
        )
    return (src, dst) in ((pa.utf8(), pa.large_utf8()), (pa.binary(), pa.large_binary()))


class _HasMetadata(Protocol):
    @property
    def metadata(self) -> Mapping[str, str]: ...


def snapshot_schema(snap: _HasMetadata, where: str) -> pa.Schema:
    """The namespace schema of a manifest version (anything with its ``metadata``, e.g. a
    ``ManifestSnapshot``), with field ids, without dropped columns."""
    try:
        return live_schema(arrow_json.schema_from_json(snap.metadata[SCHEMA_KEY]))
    except (ValueError, json.JSONDecodeError) as e:
        raise SchemaError(f"{where}: namespace schema is not valid JSON: {e}") from None
