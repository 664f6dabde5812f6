"""Schema evolution of a partitioned namespace: add, rename, drop and promote columns.

Each operation is a :class:`.MetadataStep` rewriting the ``schema`` table metadata, committed
alone (one ``__manifest`` commit) or with others in a :class:`.Transaction`; no partition table
is rewritten. Readers reconcile old partition tables with the new schema by
field id (see :mod:`.conform`), and the first append into an old partition table brings that
table up to date (see :mod:`.writer`).

Rules (FORMAT.md "Namespace schema", draft spec "Schema Evolution Rules"):

- add: nullable columns only; every new field (nested ones too) gets an id greater than any id
  ever assigned (dropped fields stay in the JSON, so their ids are never handed out again).
- rename: the field keeps its id, so partition specs (which reference ids) keep working.
- drop: refused while the current spec uses the column; otherwise the field stays in the JSON,
  nullable, with ``"lance:deprecated": "true"``, and disappears from the visible schema.
- promote: widening only, see :func:`is_widening`.
- add and rename take only names Lance writes and reads back, and add / promote no dictionary
  types (see :func:`.namespace_schema.check_columns`).
- a change already in place is no change (no error, nothing committed), so that code whose
  changes landed without its data (a transaction interrupted between its two commits) can
  simply run again: a column added alike (same name, type, nullable), a rename whose column
  (by field id) had the old name (:data:`FORMER_NAMES_KEY`), a column dropped already, a type
  the column has, a spec equal to the current one. A change that only looks alike (another
  type, a column that never had the old name) is refused as before.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence

import pyarrow as pa

from .errors import SchemaError
from .manifest.changes import MetadataStep, commit_steps
from .manifest.commit_summary import Operation
from .manifest.state import HasState, NamespaceState, state_of
from .partitioning.partition_spec import (
    PartitionField,
    PartitionSpec,
    SpecField,
    resolve_fields,
    specs_from_metadata,
)
from .schema import arrow_json
from .schema.namespace_schema import (
    DEPRECATED_KEY,
    SCHEMA_KEY,
    check_column_name,
    check_columns,
    check_type,
    dropped_names,
    full_schema,
    is_deprecated,
    is_widening,
    live_schema,
)

FORMER_NAMES_KEY = "dlp.former_names"
"""``__manifest`` table metadata (this package's extension): JSON object, field id (a decimal
string) -> the names that top-level column had before each of its renames, oldest first.
Written with the schema by every rename; tells a rename in place from a column that only has
the new name (docs/reference/format.md)."""

# --------------------------------------------------------------------------------------------
# Operations


def add_columns(
    ns: NamespaceState | HasState, fields: pa.Field | Sequence[pa.Field] | pa.Schema
) -> int:
    """Add nullable columns with new field ids in one manifest commit; returns its version."""
    return _evolve(ns, add_columns_step(fields))


def add_columns_step(fields: pa.Field | Sequence[pa.Field] | pa.Schema) -> MetadataStep:
    """The change of :func:`add_columns`, for a transaction (arguments checked now)."""
    new_fields = _as_fields(fields)
    check_columns(new_fields, "add")  # names Lance reads back, no dictionary types

    def change(full: pa.Schema, specs: list[PartitionSpec]) -> pa.Schema:
        """``full`` with the new fields appended, numbered past every id ever assigned (those
        it has alike already left out)."""
        live = {f.name: f for f in arrow_json.strip_field_ids(live_schema(full))}
        seen: set[str] = set()
        adding: list[pa.Field] = []
        for f in new_fields:
            if f.name in seen:
                raise SchemaError(f"cannot add column {f.name!r}: already given in this call")
            seen.add(f.name)
            has = live.get(f.name)
            wanted = arrow_json.normalize_schema(pa.schema([f])).field(0)
            if has is not None:
                if has.nullable and wanted.nullable and has.type.equals(wanted.type):
                    continue  # added alike already
                raise SchemaError(
                    f"cannot add column {f.name!r}: the schema already has it, as "
                    f"{has.type}{'' if has.nullable else ' NOT NULL'}"
                )
            if not f.nullable:
                raise SchemaError(
                    f"cannot add column {f.name!r}: added columns must be nullable "
                    "(partition tables written before have no values for it)"
                )
            adding.append(wanted)
        if not adding:
            return full
        plain = arrow_json.strip_field_ids(pa.schema(adding))
        numbered, _ = arrow_json.assign_field_ids(plain, _next_field_id(full, specs))
        out = full
        for f in numbered:
            out = out.append(f)
        return out

    return schema_step(Operation.ADD_COLUMNS, change)


def rename_column(ns: NamespaceState | HasState, old: str, new: str) -> int:
    """Rename a column, keeping its field id, in one manifest commit; returns its version."""
    return _evolve(ns, rename_column_step(old, new))


def rename_column_step(old: str, new: str) -> MetadataStep:
    """The change of :func:`rename_column`, for a transaction (arguments checked now). In
    place already (no change) when there is no column ``old`` and the column ``new`` is one
    that had the name ``old`` (its field id recorded under :data:`FORMER_NAMES_KEY`)."""
    check_column_name(new, f"rename column {old!r} to")  # a name Lance reads back

    def apply(metadata: Mapping[str, str]) -> dict[str, str]:
        full = full_schema(dict(metadata))
        specs = specs_from_metadata(dict(metadata))
        former = former_names(metadata)
        live = live_schema(full).names
        if old not in live:
            if new in live:
                fid = arrow_json.field_id(full.field(_live_index(full, new, "rename")))
                if fid is not None and old in former.get(fid, ()):
                    return {}  # renamed already
            raise SchemaError(
                f"cannot rename column {old!r} to {new!r}: no such column {old!r} (columns: "
                f"{', '.join(live)})"
            )
        idx = _live_index(full, old, "rename")
        if new in live:
            raise SchemaError(f"cannot rename column {old!r} to {new!r}: {new!r} already exists")
        renamed = full.set(idx, full.field(idx).with_name(new))
        _check_specs(renamed, specs)
        fid = arrow_json.field_id(full.field(idx))
        if fid is not None:
            former[fid] = [*former.get(fid, ()), old]
        return {
            SCHEMA_KEY: _schema_json(renamed),
            FORMER_NAMES_KEY: json.dumps(
                {str(k): v for k, v in sorted(former.items())}, separators=(",", ":")
            ),
        }

    return MetadataStep(Operation.RENAME_COLUMN, apply)


def former_names(metadata: Mapping[str, str]) -> dict[int, list[str]]:
    """Field id -> the names its column had before the renames recorded under
    :data:`FORMER_NAMES_KEY` (oldest first); an entry that is not a list of names is left
    out (it proves no rename)."""
    try:
        raw = json.loads(metadata.get(FORMER_NAMES_KEY) or "{}")
    except ValueError:
        return {}
    if not isinstance(raw, dict):
        return {}
    out: dict[int, list[str]] = {}
    for key, names in raw.items():
        if (
            isinstance(key, str)
            and key.isdigit()
            and isinstance(names, list)
            and all(isinstance(n, str) for n in names)
        ):
            out[int(key)] = list(names)
    return out


def drop_column(ns: NamespaceState | HasState, name: str) -> int:
    """Mark a column deprecated (kept in the schema JSON, hidden from readers and writers) in
    one manifest commit; returns its version. Refused while the current spec uses it."""
    return _evolve(ns, drop_column_step(name))


def drop_column_step(name: str) -> MetadataStep:
    """The change of :func:`drop_column`, for a transaction."""

    def change(full: pa.Schema, specs: list[PartitionSpec]) -> pa.Schema:
        """``full`` with the column marked deprecated and nullable (unchanged when it is
        dropped already)."""
        if name in dropped_names(full):
            return full
        idx = _live_index(full, name, "drop")
        fid = arrow_json.field_id(full.field(idx))
        current = specs[-1]
        users = [f.field_id for f in current.fields if fid is not None and fid in f.source_ids]
        if users:
            raise SchemaError(
                f"cannot drop column {name!r}: partition field(s) {', '.join(map(repr, users))} "
                f"of the current partition spec v{current.spec_id} use it; create a partition "
                "spec without it first"
            )
        if len(live_schema(full)) == 1:
            raise SchemaError(f"cannot drop column {name!r}: it is the last column")
        f = full.field(idx)
        md = dict(f.metadata or {})
        md[DEPRECATED_KEY.encode()] = b"true"
        return full.set(idx, f.with_nullable(True).with_metadata(md))

    return schema_step(Operation.DROP_COLUMN, change)


def promote_column(ns: NamespaceState | HasState, name: str, wider_type: pa.DataType) -> int:
    """Widen a column's type (see :func:`is_widening`) in one manifest commit; returns its
    version."""
    return _evolve(ns, promote_column_step(name, wider_type))


def promote_column_step(name: str, wider_type: pa.DataType) -> MetadataStep:
    """The change of :func:`promote_column`, for a transaction (arguments checked now)."""
    if not isinstance(wider_type, pa.DataType):
        raise SchemaError(f"cannot promote column {name!r}: {wider_type!r} is not an Arrow type")
    check_type(wider_type, name, "promote")  # no dictionary types
    target = arrow_json.normalize_type(wider_type)

    def change(full: pa.Schema, specs: list[PartitionSpec]) -> pa.Schema:
        """``full`` with the column's type widened."""
        idx = _live_index(full, name, "promote")
        f = full.field(idx)
        if arrow_json.strip_field_ids(pa.schema([f])).field(0).type.equals(target):
            return full  # of that type already
        if not is_widening(f.type, target):
            raise SchemaError(
                f"cannot promote column {name!r} from {f.type} to {target}: only widening "
                "promotions are allowed (e.g. int32 -> int64, float32 -> float64)"
            )
        return full.set(idx, f.with_type(target))

    return schema_step(Operation.PROMOTE_COLUMN, change)


def update_spec_step(partition_fields: Sequence[PartitionField | SpecField]) -> MetadataStep:
    """A new partition spec version N+1 of ``partition_fields`` (field ids of identical fields
    reused; nothing when they equal the current spec's), for a transaction or alone."""
    from .manifest.layout import partition_field_columns
    from .partitioning.calendar_fields import warn_mixed_periods
    from .partitioning.partitioner import SpecEvaluator

    warned = False  # the step is applied again when its commit is retried: one warning

    def apply(metadata: Mapping[str, str]) -> dict[str, str]:
        nonlocal warned
        specs = specs_from_metadata(dict(metadata))
        schema = live_schema(full_schema(dict(metadata)))
        fields = resolve_fields(partition_fields, schema, specs)
        if fields == specs[-1].fields:
            return {}
        spec = PartitionSpec(specs[-1].spec_id + 1, fields)
        SpecEvaluator(spec, schema)  # compiles every expression and checks result types
        partition_field_columns([*specs, spec])  # a reused column keeps its type
        if not warned:
            warned = True
            warn_mixed_periods(spec.fields, schema)
        return {spec.key: spec.to_json_str()}

    return MetadataStep(Operation.UPDATE_SPEC, apply)


# --------------------------------------------------------------------------------------------
# Helpers


def _as_fields(fields: pa.Field | Sequence[pa.Field] | pa.Schema) -> list[pa.Field]:
    """The fields to add as a list (a single field, a sequence of fields, or a schema)."""
    if isinstance(fields, pa.Field):
        out = [fields]
    elif isinstance(fields, pa.Schema):
        out = list(fields)
    else:
        out = list(fields)
    if not out:
        raise SchemaError("add_columns needs at least one field")
    for f in out:
        if not isinstance(f, pa.Field):
            raise SchemaError(f"add_columns takes pyarrow fields, got {f!r}")
    return out


def _live_index(full: pa.Schema, name: str, verb: str) -> int:
    """Index in ``full`` of the live (not dropped) column ``name``; raises naming it."""
    for i, f in enumerate(full):
        if f.name == name and not is_deprecated(f):
            return i
    live = live_schema(full).names
    raise SchemaError(f"cannot {verb} column {name!r}: no such column (columns: {', '.join(live)})")


def _next_field_id(full: pa.Schema, specs: list[PartitionSpec]) -> int:
    """One past every field id the schema (dropped fields included) or any spec references."""
    referenced = [sid for s in specs for f in s.fields for sid in f.source_ids]
    return max([arrow_json.max_field_id(full), *referenced]) + 1


def _check_specs(schema: pa.Schema, specs: list[PartitionSpec]) -> None:
    """Raise when the current spec no longer compiles against the new visible schema."""
    from .partitioning.partitioner import SpecEvaluator

    SpecEvaluator(specs[-1], live_schema(schema))


def schema_step(
    operation: str, change: Callable[[pa.Schema, list[PartitionSpec]], pa.Schema]
) -> MetadataStep:
    """A metadata step rewriting the ``schema`` key with ``change(full schema, specs)``,
    refused when the current spec no longer compiles against the result; no change when
    ``change`` returns the schema it was given."""

    def apply(metadata: Mapping[str, str]) -> dict[str, str]:
        specs = specs_from_metadata(dict(metadata))
        full = full_schema(dict(metadata))
        new = change(full, specs)
        if new is full:
            return {}  # in place already
        _check_specs(new, specs)
        return {SCHEMA_KEY: _schema_json(new)}

    return MetadataStep(operation, apply)


def _schema_json(schema: pa.Schema) -> str:
    """The ``schema`` metadata value of ``schema``."""
    return json.dumps(arrow_json.schema_to_json(schema), separators=(",", ":"))


def _evolve(ns: NamespaceState | HasState, step: MetadataStep) -> int:
    """Apply ``step`` to the latest namespace schema in one manifest commit (re-validated on
    the latest version when a concurrent commit wins); returns the new manifest version."""
    state = state_of(ns)
    state.require_unpinned("change its schema")
    return commit_steps(state.store, [step]).version


__all__ = [
    "DEPRECATED_KEY",
    "FORMER_NAMES_KEY",
    "add_columns",
    "add_columns_step",
    "drop_column",
    "drop_column_step",
    "dropped_names",
    "former_names",
    "full_schema",
    "is_deprecated",
    "is_widening",
    "live_schema",
    "promote_column",
    "promote_column_step",
    "rename_column",
    "rename_column_step",
    "schema_step",
    "update_spec_step",
]
