"""The namespace schema as ``__manifest`` metadata records it: reading it (with field ids),
dropped (deprecated) fields, and the type widenings schema evolution allows."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Protocol

import pyarrow as pa

from . import arrow_json
from .errors import SchemaError

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
