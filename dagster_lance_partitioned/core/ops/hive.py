"""Importing a Hive-style tree of Lance tables (``key=value/.../<name>.lance``, the older draft's
layout) as a partitioned namespace, registering every table where it is, without copying data.

Layout rules:

- each directory level below the root is ``key=value`` with URL-style escaping (``%2F`` ...);
  ``__HIVE_DEFAULT_PARTITION__`` stands for NULL;
- a directory named ``*.lance`` is a leaf table; when its stem is itself ``key=value`` (the older
  draft's ``country=US.lance``) it is the last level too;
- every leaf has the same keys in the same order; names starting with ``.`` or ``_`` are ignored.

The older draft's ``lance.partitioning.partition_columns`` / ``lance.partitioning.schema``
properties, when a leaf table carries them (Lance table metadata or Arrow schema metadata), give
the key order and types. Key types come, first to last, from ``types``, those properties, a column
of the same name stored in the leaves, or the values (int64, float64, date32, bool, else utf8).

Hive leaves usually do not store their key columns; readers fill such a column of an identity
partition field with the partition value (:func:`fill_partition_columns`).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import lance
import pyarrow as pa
import pyarrow.compute as pc

from .. import storage
from ..errors import HiveImportError, NamespaceExistsError, SchemaError
from ..manifest.layout import (
    SEP,
    TABLE_NAME,
    WRITER_FLAG_KEY,
    WRITER_FLAG_VALUE,
    base_manifest_schema,
    partition_field_columns,
)
from ..manifest.naming import NAMING_KEY, NamespaceNaming, new_naming_key
from ..manifest.stats import stats_field
from ..manifest.store import SCHEMA_KEY, ManifestStore
from ..partitioning.partition_constants import fill_constants, identity_constants
from ..partitioning.partition_spec import PartitionField, PartitionSpec, resolve_fields
from ..partitioning.partitioner import SpecEvaluator
from ..schema import arrow_json

if TYPE_CHECKING:
    from ..read.planning import ScanTask

HIVE_NULL = "__HIVE_DEFAULT_PARTITION__"
LEAF_SUFFIX = ".lance"
PROP_COLUMNS = "lance.partitioning.partition_columns"
PROP_SCHEMA = "lance.partitioning.schema"

_INT_RE = re.compile(r"^[+-]?\d+$")
_FLOAT_RE = re.compile(r"^[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?$")
_DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


@dataclass(frozen=True)
class HiveLeaf:
    """One ``*.lance`` table of the tree: where it is, its keys and raw values, its state."""

    location: str  # relative to the root, as on disk (escaped)
    keys: tuple[str, ...]
    raw_values: tuple[str | None, ...]  # decoded; None for the Hive NULL partition
    version: int
    schema: pa.Schema
    properties: dict[str, str]


# -- walking the tree ---------------------------------------------------------------------------
def _level(name: str, where: str) -> tuple[str, str | None]:
    key, _, value = name.partition("=")
    key = unquote(key)
    if not key:
        raise HiveImportError(f"{where}: directory {name!r} has an empty partition key")
    return key, None if value == HIVE_NULL else unquote(value)


def _walk(
    root: str,
    storage_options: dict[str, str] | None,
    rel: tuple[str, ...],
    levels: tuple[tuple[str, str | None], ...],
) -> list[tuple[str, tuple[tuple[str, str | None], ...]]]:
    """(relative location, (key, value) levels) of every leaf under ``root/rel``, listed
    through the store Lance uses, with the same ``storage_options`` (local links to
    directories are listed, and refused when their tables are opened)."""
    path = storage.join(root, "/".join(rel)) if rel else root
    out = []
    for name in storage.list_dirs(path, storage_options, links=True):
        if name.startswith((".", "_")):
            continue
        where = "/".join([*rel, name])
        if name.endswith(LEAF_SUFFIX):
            stem = name[: -len(LEAF_SUFFIX)]
            leaf_levels = (*levels, _level(stem, where)) if "=" in stem else levels
            out.append((where, leaf_levels))
        elif "=" in name:
            out.extend(_walk(root, storage_options, (*rel, name), (*levels, _level(name, where))))
        else:
            raise HiveImportError(
                f"{where}: unexpected directory; expected key=value levels and *.lance tables"
            )
    return out


def discover(
    uri: str | os.PathLike[str], storage_options: dict[str, str] | None = None
) -> list[HiveLeaf]:
    """Every leaf table of the tree at ``uri`` with its keys, values, version and schema."""
    root = storage.normalize_root(uri)
    found = _walk(root, storage_options, (), ())
    if not found and not storage.is_dir(root, storage_options):
        raise HiveImportError(f"{root}: no such directory")
    if not found:
        raise HiveImportError(f"{root}: no key=value/.../*.lance tables found")
    leaves = []
    for location, levels in found:
        keys = tuple(k for k, _ in levels)
        if len(set(keys)) != len(keys):
            raise HiveImportError(f"{location}: partition key repeated in the path")
        try:
            uri = storage.table_uri(root, location)  # a leaf through a link: PathEscapeError
            ds = lance.dataset(uri, storage_options=storage_options)
        except (ValueError, OSError) as e:
            raise HiveImportError(f"{location}: not a readable Lance table: {e}") from None
        props = {**_decode(ds.schema.metadata), **dict(ds.metadata)}
        leaves.append(
            HiveLeaf(
                location,
                keys,
                tuple(v for _, v in levels),
                ds.version,
                arrow_json.normalize_schema(ds.schema),
                {k: v for k, v in props.items() if k.startswith("lance.partitioning.")},
            )
        )
    first = leaves[0]
    if not first.keys:
        raise HiveImportError(f"{first.location}: a table outside any key=value directory")
    for leaf in leaves[1:]:
        if leaf.keys != first.keys:
            raise HiveImportError(
                f"{leaf.location}: partition keys {list(leaf.keys)} differ from "
                f"{list(first.keys)} of {first.location}"
            )
    seen: dict[tuple[str | None, ...], str] = {}
    for leaf in leaves:
        other = seen.setdefault(leaf.raw_values, leaf.location)
        if other != leaf.location:
            raise HiveImportError(
                f"{leaf.location} and {other} hold the same partition "
                f"{dict(zip(leaf.keys, leaf.raw_values, strict=True))}"
            )
    return leaves


def _decode(md: Mapping[bytes, bytes] | None) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in (md or {}).items()}


# -- the older draft's properties -----------------------------------------------------------------
_IPC_FLOATS = {"HALF": pa.float16(), "SINGLE": pa.float32(), "DOUBLE": pa.float64()}


def _ipc_type(obj: dict[str, Any]) -> pa.DataType:
    """An Arrow IPC JSON (integration format) primitive type."""
    name = str(obj.get("name", "")).lower()
    if name == "int":
        bits, signed = int(obj["bitWidth"]), bool(obj.get("isSigned", True))
        return {
            (8, True): pa.int8(), (16, True): pa.int16(), (32, True): pa.int32(),
            (64, True): pa.int64(), (8, False): pa.uint8(), (16, False): pa.uint16(),
            (32, False): pa.uint32(), (64, False): pa.uint64(),
        }[(bits, signed)]  # fmt: skip
    if name == "floatingpoint":
        return _IPC_FLOATS[str(obj["precision"]).upper()]
    if name in ("utf8", "largeutf8"):
        return pa.utf8() if name == "utf8" else pa.large_utf8()
    if name in ("binary", "largebinary"):
        return pa.binary() if name == "binary" else pa.large_binary()
    if name == "bool":
        return pa.bool_()
    if name == "date":
        return pa.date32() if str(obj.get("unit", "DAY")).upper() == "DAY" else pa.date64()
    if name == "timestamp":
        unit = {"SECOND": "s", "MILLISECOND": "ms", "MICROSECOND": "us", "NANOSECOND": "ns"}
        return pa.timestamp(unit[str(obj["unit"]).upper()], tz=obj.get("timezone"))
    if name == "decimal":
        return pa.decimal128(int(obj["precision"]), int(obj.get("scale", 0)))
    raise KeyError(name)


def _properties_schema(text: str, where: str) -> pa.Schema:
    """``lance.partitioning.schema``: JsonArrowSchema, or Arrow IPC JSON with primitive types."""
    try:
        return arrow_json.strip_field_ids(arrow_json.schema_from_json(text))
    except SchemaError:
        pass
    try:
        obj = json.loads(text)
        obj = obj.get("schema", obj)
        return pa.schema(
            [
                pa.field(f["name"], _ipc_type(f["type"]), nullable=f.get("nullable", True))
                for f in obj["fields"]
            ]
        )
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise HiveImportError(f"{where}: cannot read {PROP_SCHEMA}: {e!r}") from None


def _read_properties(leaves: list[HiveLeaf]) -> pa.Schema | None:
    """Check the leaves' ``lance.partitioning.*`` properties against the tree; their schema."""
    schema: pa.Schema | None = None
    for leaf in leaves:
        props = leaf.properties
        if PROP_COLUMNS in props:
            try:
                cols = json.loads(props[PROP_COLUMNS])
                names = tuple(c["name"] if isinstance(c, dict) else str(c) for c in cols)
                functions = {
                    c.get("function", "identity") for c in cols if isinstance(c, dict)
                } or {"identity"}
            except (ValueError, KeyError, TypeError) as e:
                raise HiveImportError(f"{leaf.location}: malformed {PROP_COLUMNS}: {e!r}") from None
            if functions != {"identity"}:
                raise HiveImportError(
                    f"{leaf.location}: {PROP_COLUMNS} uses {sorted(functions - {'identity'})}; "
                    "only identity partition columns can be imported"
                )
            if names != leaf.keys:
                raise HiveImportError(
                    f"{leaf.location}: {PROP_COLUMNS} names {list(names)} but the path has "
                    f"keys {list(leaf.keys)}"
                )
        if PROP_SCHEMA in props:
            found = _properties_schema(props[PROP_SCHEMA], leaf.location)
            if schema is not None and not found.equals(schema):
                raise HiveImportError(f"{leaf.location}: {PROP_SCHEMA} differs between tables")
            schema = found
    return schema


# -- schema --------------------------------------------------------------------------------------
def widen(a: pa.DataType, b: pa.DataType) -> pa.DataType | None:
    """The type both ``a`` and ``b`` read safely as, or None when they are incompatible."""
    if a == b:
        return a
    if pa.types.is_null(a) or pa.types.is_null(b):
        return b if pa.types.is_null(a) else a
    ints = pa.types.is_integer
    if ints(a) and ints(b):
        sa, sb = pa.types.is_signed_integer(a), pa.types.is_signed_integer(b)
        if sa == sb:
            return a if a.bit_width >= b.bit_width else b
        signed, unsigned = (a, b) if sa else (b, a)
        if signed.bit_width > unsigned.bit_width:
            return signed
        return pa.int64() if unsigned.bit_width < 64 else None
    if pa.types.is_floating(a) and pa.types.is_floating(b):
        return a if a.bit_width >= b.bit_width else b
    if (ints(a) and pa.types.is_floating(b)) or (pa.types.is_floating(a) and ints(b)):
        return pa.float64()
    strings = (pa.utf8(), pa.large_utf8())
    if a in strings and b in strings:
        return pa.large_utf8()
    binaries = (pa.binary(), pa.large_binary())
    if a in binaries and b in binaries:
        return pa.large_binary()
    return None


def _union_schema(
    leaves: list[HiveLeaf], declared: pa.Schema | None
) -> tuple[dict[str, pa.Field], set[str]]:
    """Every data column by name (types widened across leaves), and the columns some leaf lacks."""
    fields: dict[str, pa.Field] = {f.name: f for f in declared or []}
    sources: dict[str, str] = {f.name: PROP_SCHEMA for f in declared or []}
    partial: set[str] = set()
    for leaf in leaves:
        for f in leaf.schema:
            prev = fields.get(f.name)
            if prev is None:
                fields[f.name] = f
                sources[f.name] = leaf.location
                continue
            wide = widen(prev.type, f.type)
            if wide is None or (sources[f.name] == PROP_SCHEMA and wide != prev.type):
                raise SchemaError(
                    f"{leaf.location}: column {f.name!r} has type {f.type}, incompatible with "
                    f"{prev.type} in {sources[f.name]}"
                )
            declared_here = sources[f.name] == PROP_SCHEMA  # the declaration decides nullability
            nullable = prev.nullable if declared_here else prev.nullable or f.nullable
            fields[f.name] = pa.field(f.name, wide, nullable=nullable)
    for leaf in leaves:
        partial |= {name for name in fields if leaf.schema.get_field_index(name) < 0}
    return fields, partial


def infer_type(values: list[str | None]) -> pa.DataType:
    """The narrowest of int64, float64, date32, bool that parses every value, else utf8."""
    present = [v for v in values if v is not None]
    if not present:
        return pa.utf8()
    if all(_INT_RE.match(v) and -(2**63) <= int(v) < 2**63 for v in present):
        return pa.int64()
    if all(_FLOAT_RE.match(v) for v in present):
        return pa.float64()
    if all(_DATE_RE.match(v) and _is_date(v) for v in present):
        return pa.date32()
    if all(v.lower() in ("true", "false") for v in present):
        return pa.bool_()
    return pa.utf8()


def _is_date(text: str) -> bool:
    try:
        dt.date.fromisoformat(text)
    except ValueError:
        return False
    return True


def _parse_values(leaves: list[HiveLeaf], index: int, key: str, t: pa.DataType) -> list[Any]:
    """Each leaf's value of key number ``index`` as a Python value of type ``t``."""
    out: list[Any] = []
    for leaf in leaves:
        raw = leaf.raw_values[index]
        if raw is None:
            out.append(None)
            continue
        text = raw.lower() if pa.types.is_boolean(t) else raw
        try:
            out.append(pc.cast(pa.array([text], pa.utf8()), t, safe=True)[0].as_py())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
            raise HiveImportError(
                f"{leaf.location}: partition value {raw!r} of key {key!r} is not a {t}: {e}"
            ) from None
    return out


# -- import --------------------------------------------------------------------------------------
def import_hive(
    uri: str | os.PathLike[str],
    *,
    types: dict[str, pa.DataType] | None = None,
    storage_options: dict[str, str] | None = None,
) -> str:
    """Register the ``key=value/.../*.lance`` tables under ``uri`` as a partitioned namespace
    there (spec v1: one identity field per key), without copying or rewriting any table;
    returns the namespace root."""
    root = storage.normalize_root(uri)
    store = ManifestStore(root, storage_options)
    if store.exists():
        raise NamespaceExistsError(f"{root}: a __manifest table already exists here")
    leaves = discover(root, storage_options)
    keys = leaves[0].keys
    types = dict(types or {})
    unknown = set(types) - set(keys)
    if unknown:
        raise HiveImportError(f"types given for {sorted(unknown)}, which are not keys {list(keys)}")
    declared = _read_properties(leaves)
    fields, partial = _union_schema(leaves, declared)
    key_values: list[list[Any]] = []
    for i, key in enumerate(keys):
        present = fields.get(key)
        if key in types:
            t = types[key]
            if present is not None and widen(present.type, t) != t:
                raise SchemaError(
                    f"key {key!r}: the tables store it as {present.type}, which does not read "
                    f"as the given type {t}"
                )
        elif present is not None:
            t = present.type
        else:
            t = infer_type([leaf.raw_values[i] for leaf in leaves])
        values = _parse_values(leaves, i, key, t)
        key_values.append(values)
        nullable = present is None or present.nullable or key in partial or None in values
        fields[key] = pa.field(key, t, nullable=nullable)
    for name in partial:
        if name not in keys:
            fields[name] = fields[name].with_nullable(True)
    schema = pa.schema(list(fields.values()))
    ns_schema, _ = arrow_json.assign_field_ids(arrow_json.normalize_schema(schema), 0)
    spec = PartitionSpec(1, resolve_fields([PartitionField.identity(k) for k in keys], ns_schema))
    SpecEvaluator(spec, ns_schema)
    key = new_naming_key()
    naming = NamespaceNaming(key, spec.spec_id)
    rows = _manifest_rows(leaves, spec, key_values, naming)
    manifest_schema = base_manifest_schema()
    for f in partition_field_columns([spec]):
        manifest_schema = manifest_schema.append(f)
    manifest_schema = manifest_schema.append(stats_field())
    table = pa.Table.from_pylist(rows, schema=manifest_schema)
    metadata = {
        SCHEMA_KEY: json.dumps(arrow_json.schema_to_json(ns_schema), separators=(",", ":")),
        spec.key: spec.to_json_str(),
        WRITER_FLAG_KEY: WRITER_FLAG_VALUE,
        NAMING_KEY: key,
    }
    if store.exists():
        raise NamespaceExistsError(f"{root}: a __manifest table already exists here")
    store.create(table, metadata)
    return root


def _manifest_rows(
    leaves: list[HiveLeaf],
    spec: PartitionSpec,
    key_values: list[list[Any]],
    naming: NamespaceNaming,
) -> list[dict[str, Any]]:
    """Manifest rows as the writer makes them: ``v1``, one namespace per distinct prefix of
    values (named by ``naming``), one table row per leaf pointing at its existing directory."""
    rows: list[dict[str, Any]] = [
        {"object_id": spec.namespace, "object_type": "namespace", "metadata": "{}"}
    ]
    ns_ids: dict[tuple[Any, ...], str] = {}
    for n, leaf in enumerate(leaves):
        values = tuple(col[n] for col in key_values)
        path = spec.namespace
        row_values: dict[str, Any] = {}
        for level, f in enumerate(spec.fields, start=1):
            row_values[f.column] = values[level - 1]
            prefix = values[:level]
            if prefix not in ns_ids:
                ns_ids[prefix] = SEP.join([path, naming.namespace_name(prefix)])
                rows.append(
                    {
                        "object_id": ns_ids[prefix],
                        "object_type": "namespace",
                        "metadata": "{}",
                        **row_values,
                    }
                )
            path = ns_ids[prefix]
        rows.append(
            {
                "object_id": SEP.join([path, TABLE_NAME]),
                "object_type": "table",
                "location": leaf.location,
                "metadata": "{}",
                "read_version": leaf.version,
                **row_values,
            }
        )
    return rows


# -- reading -------------------------------------------------------------------------------------
def fill_partition_columns(
    table: pa.Table, task: ScanTask, spec: PartitionSpec, schema: pa.Schema
) -> pa.Table:
    """``table`` with the identity partition columns of ``task`` holding the partition value
    where the partition table stores none (see :func:`fill_constants`).

    ``schema`` is the namespace schema with field ids. Works on a table as read (columns it lacks
    are added) and on one already reconciled to the namespace schema (its NULLs are filled)."""
    constants = identity_constants(spec, schema, task.partition_values)
    return fill_constants(table, constants, schema)
