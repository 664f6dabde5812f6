"""Partition specs: the user-facing :class:`PartitionField` builder, the stored :class:`SpecField`
and :class:`PartitionSpec`, their JSON forms (current and draft shape), and field-id reuse."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ..errors import SpecError
from ..schema import arrow_json
from .range_list import list_expression, range_expression
from .transforms import (
    Bucket,
    Day,
    Hour,
    Identity,
    Month,
    MultiBucket,
    Transform,
    Truncate,
    Year,
    parse_expression,
    transform_from_json,
)

if TYPE_CHECKING:
    from .windows import TimeWindow

PARTITION_COLUMN_PREFIX = "partition_field_"
SPEC_KEY_PREFIX = "partition_spec_v"
_FIELD_ID_RE = re.compile(r"^[A-Za-z0-9_]+$")


def canonical_value(value: Any) -> Any:
    """A partition value as partition keys hold it: every NaN as the one object ``math.nan``
    (a NaN equals only itself, so keys holding other NaN objects would never match)."""
    if isinstance(value, float) and math.isnan(value):
        return math.nan
    return value


@dataclass(frozen=True)
class SpecField:
    """One stored partition field: sources by field id, a transform or an expression, a type."""

    field_id: str
    source_ids: tuple[int, ...]
    result_type: pa.DataType
    transform: Transform | None = None
    expression: str | None = None
    column: str = ""  # manifest column; partition_field_<field_id> unless read from a draft spec

    def __post_init__(self) -> None:
        if (self.transform is None) == (self.expression is None):
            raise SpecError(
                f"partition field {self.field_id!r}: exactly one of transform / expression"
            )
        if not self.column:
            object.__setattr__(self, "column", PARTITION_COLUMN_PREFIX + self.field_id)

    def sql(self, source_types: Sequence[pa.DataType]) -> str:
        """The DataFusion SQL (over ``col0, col1, ...``) that computes this field."""
        if self.transform is not None:
            return self.transform.expression(source_types)
        assert self.expression is not None
        return self.expression

    def transform_for(self, source_types: Sequence[pa.DataType]) -> Transform:
        """What the field computes over sources of these types, as a transform: the stored
        transform, or the one its expression is exactly (a draft's ``col0`` is identity), or an
        :class:`~.transforms.ExpressionTransform` claiming no capability. Ask it whether the
        field is identity, preserves order, its granularity."""
        if self.transform is not None:
            return self.transform
        assert self.expression is not None
        return parse_expression(self.expression, source_types, self.result_type)

    def same_definition(self, other: SpecField) -> bool:
        """Whether ``other`` has the same sources and transform/expression (field-id reuse rule)."""
        return (
            self.source_ids == other.source_ids
            and self.transform == other.transform
            and self.expression == other.expression
        )

    def to_json(self) -> dict[str, Any]:
        """The field's JSON object in the current spec shape."""
        out: dict[str, Any] = {"field_id": self.field_id, "source_ids": list(self.source_ids)}
        if self.transform is not None:
            out["transform"] = self.transform.to_json()
        else:
            out["expression"] = self.expression
        out["result_type"] = arrow_json.type_to_json(self.result_type)
        return out

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> SpecField:
        """Parse a field object of the current spec shape."""
        try:
            fid = obj["field_id"]
            source_ids = tuple(int(s) for s in obj["source_ids"])
            rtype = arrow_json.type_from_json(obj["result_type"])
        except (KeyError, TypeError, ValueError) as e:
            raise SpecError(f"malformed partition field {obj!r}: {e}") from None
        if not isinstance(fid, str) or not fid:
            raise SpecError(f"partition field id must be a non-empty string, got {fid!r}")
        has_t, has_e = "transform" in obj, "expression" in obj
        if has_t == has_e:
            raise SpecError(f"partition field {fid!r}: exactly one of transform / expression")
        transform = transform_from_json(obj["transform"], fid) if has_t else None
        return cls(fid, source_ids, rtype, transform, obj.get("expression"))


@dataclass(frozen=True)
class PartitionSpec:
    """A versioned partition spec: ``id`` is the N of ``partition_spec_v<N>`` and of ``v<N>``."""

    spec_id: int
    fields: tuple[SpecField, ...]
    draft: bool = False  # read from the Jan-2026 draft shape

    @property
    def key(self) -> str:
        """The ``__manifest`` table-metadata key holding this spec."""
        return f"{SPEC_KEY_PREFIX}{self.spec_id}"

    @property
    def namespace(self) -> str:
        """The spec-version namespace name, ``v<N>``."""
        return f"v{self.spec_id}"

    def to_json(self) -> dict[str, Any]:
        """The spec's JSON object (current shape)."""
        return {"id": self.spec_id, "fields": [f.to_json() for f in self.fields]}

    def to_json_str(self) -> str:
        """The spec as the JSON string stored in table metadata."""
        return json.dumps(self.to_json(), separators=(",", ":"))

    @classmethod
    def from_json(cls, obj: Any, spec_id: int | None = None) -> PartitionSpec:
        """Parse a spec from its JSON (string or object), current or draft shape."""
        if isinstance(obj, str | bytes):
            try:
                obj = json.loads(obj)
            except json.JSONDecodeError as e:
                raise SpecError(f"partition spec v{spec_id} is not valid JSON: {e}") from None
        if isinstance(obj, list):
            if spec_id is None:
                raise SpecError("a draft-shaped partition spec needs its version from the key")
            return cls(spec_id, tuple(_draft_field(f) for f in obj), draft=True)
        if not isinstance(obj, dict) or "fields" not in obj:
            raise SpecError(f"partition spec v{spec_id}: expected an object with 'fields'")
        sid = int(obj.get("id", spec_id if spec_id is not None else -1))
        if spec_id is not None and sid != spec_id:
            raise SpecError(f"partition spec under key v{spec_id} says id {sid}")
        fields = tuple(SpecField.from_json(f) for f in obj["fields"])
        ids = [f.field_id for f in fields]
        if len(set(ids)) != len(ids):
            raise SpecError(f"partition spec v{sid} repeats a field id: {ids}")
        return cls(sid, fields)


def _draft_field(obj: dict[str, Any]) -> SpecField:
    """Normalise a draft field: field id := name, ``col`` := ``col0``, manifest column := name."""
    try:
        name = obj["name"]
        source_id = int(obj["source_id"])
        expr = obj["expression"]
        rtype = arrow_json.type_from_json(obj["result_type"])
    except (KeyError, TypeError, ValueError) as e:
        raise SpecError(f"malformed draft partition field {obj!r}: {e}") from None
    expr = re.sub(r"(?<![\w.'\"])col(?![\w])", "col0", expr)
    return SpecField(str(name), (source_id,), rtype, None, expr, column=str(name))


@dataclass(frozen=True)
class PartitionField:
    """A partition field as a user asks for it: source columns by name plus a transform or an
    expression. Resolved into a :class:`SpecField` against the namespace schema."""

    source_columns: tuple[str, ...]
    transform: Transform | None = None
    sql: str | None = None  # the expression, for expression fields
    result_type: pa.DataType | None = None
    field_id: str | None = None

    def __post_init__(self) -> None:
        if (self.transform is None) == (self.sql is None):
            raise SpecError("a partition field needs exactly one of transform / expression")
        if self.sql is not None and self.result_type is None:
            raise SpecError(f"expression field {self.sql!r} needs a result_type")
        if self.field_id is not None and not _FIELD_ID_RE.match(self.field_id):
            raise SpecError(f"partition field id {self.field_id!r}: use letters, digits and _")

    # -- builders ---------------------------------------------------------------------------
    @classmethod
    def identity(cls, column: str, field_id: str | None = None) -> PartitionField:
        """Partition by the column's value."""
        return cls((column,), Identity(), field_id=field_id)

    @classmethod
    def year(cls, column: str, field_id: str | None = None) -> PartitionField:
        """Partition by the year of a date/timestamp column."""
        return cls((column,), Year(), field_id=field_id)

    @classmethod
    def month(cls, column: str, field_id: str | None = None) -> PartitionField:
        """Partition by the month of the year (1-12) of a date/timestamp column: without
        :meth:`year` of the column one partition holds that month of every year (a warning
        says so); one partition per calendar month is :meth:`window` with
        ``TimeWindow("month")``."""
        return cls((column,), Month(), field_id=field_id)

    @classmethod
    def day(cls, column: str, field_id: str | None = None) -> PartitionField:
        """Partition by the day of the month (1-31) of a date/timestamp column, not its date:
        without :meth:`year` and :meth:`month` of the column one partition holds that day of
        every month (a warning says so); one partition per day is :meth:`window` with
        ``TimeWindow("day")``."""
        return cls((column,), Day(), field_id=field_id)

    @classmethod
    def hour(cls, column: str, field_id: str | None = None) -> PartitionField:
        """Partition by the hour of the day (0-23) of a timestamp column: without the date
        (:meth:`year`, :meth:`month`, :meth:`day` of the column) one partition holds that
        hour of every day (a warning says so); one partition per hour is :meth:`window` with
        ``TimeWindow("hour")``."""
        return cls((column,), Hour(), field_id=field_id)

    @classmethod
    def bucket(cls, column: str, num_buckets: int, field_id: str | None = None) -> PartitionField:
        """Partition by ``abs(murmur3(column)) % num_buckets``."""
        return cls((column,), Bucket(num_buckets), field_id=field_id)

    @classmethod
    def multi_bucket(
        cls, columns: Sequence[str], num_buckets: int, field_id: str | None = None
    ) -> PartitionField:
        """Partition by ``abs(murmur3_multi(columns...)) % num_buckets``."""
        return cls(tuple(columns), MultiBucket(num_buckets), field_id=field_id)

    @classmethod
    def truncate(cls, column: str, width: int, field_id: str | None = None) -> PartitionField:
        """Partition by the first ``width`` characters, or the value rounded down to ``width``."""
        return cls((column,), Truncate(width), field_id=field_id)

    @classmethod
    def expression(
        cls,
        columns: Sequence[str],
        sql: str,
        *,
        result_type: pa.DataType,
        field_id: str,
    ) -> PartitionField:
        """Partition by a DataFusion SQL expression over ``col0, col1, ...`` (= ``columns``)."""
        return cls(tuple(columns), None, sql, result_type, field_id)

    @classmethod
    def window(
        cls,
        column: str,
        window: TimeWindow,
        source_type: pa.DataType,
        field_id: str | None = None,
    ) -> PartitionField:
        """Partition by the start of the calendar window (``core.partitioning.windows``)
        holding ``column`` (of type ``source_type``); field id default ``<column>_<unit>``."""
        return cls.expression(
            [column],
            window.expression(source_type),
            result_type=window.result_type(source_type),
            field_id=field_id or re.sub(r"\W", "_", column) + "_" + window.unit,
        )

    @classmethod
    def range(
        cls,
        column: str,
        bounds: Sequence[Any],
        *,
        field_id: str | None = None,
        labels: Sequence[str] | None = None,
    ) -> PartitionField:
        """Range partitioning: exclusive upper ``bounds`` give ``len(bounds) + 1`` partitions
        (a ``CASE WHEN`` expression whose value is the label; pruned for equality and ranges)."""
        return cls.expression(
            [column],
            range_expression(bounds, labels),
            result_type=pa.utf8(),
            field_id=field_id or f"{column}_range",
        )

    @classmethod
    def list(
        cls,
        column: str,
        groups: Mapping[str, Sequence[Any]],
        *,
        default: str | None = "default",
        field_id: str | None = None,
    ) -> PartitionField:
        """List partitioning: ``groups`` maps a label to its values; other values go to
        ``default`` (None: the NULL partition)."""
        return cls.expression(
            [column],
            list_expression(groups, default),
            result_type=pa.utf8(),
            field_id=field_id or f"{column}_list",
        )

    def default_field_id(self) -> str:
        """The field id used when none is given, e.g. ``event_date_year``."""
        if self.field_id:
            return self.field_id
        if self.transform is None:
            raise SpecError("an expression partition field needs an explicit field_id")
        base = "_".join(re.sub(r"\W", "_", c) for c in self.source_columns)
        return base + self.transform.field_id_suffix


@dataclass
class _IdAllocator:
    taken: set[str] = field(default_factory=set)

    def take(self, wanted: str) -> str:
        fid, n = wanted, 2
        while fid in self.taken:
            fid, n = f"{wanted}_{n}", n + 1
        self.taken.add(fid)
        return fid


def resolve_fields(
    requested: Iterable[PartitionField | SpecField],
    schema: pa.Schema,
    existing_specs: Sequence[PartitionSpec] = (),
) -> tuple[SpecField, ...]:
    """Turn requested fields into stored fields against ``schema``, reusing field ids of
    existing specs for identical definitions and never reusing an id for a different one (no
    fields: a spec without partitioning, whose one table holds every row)."""
    by_name = _top_level_ids(schema)
    types_by_id = _types_by_id(schema)
    previous = [f for s in existing_specs for f in s.fields]
    alloc = _IdAllocator({f.field_id for f in previous})
    out: list[SpecField] = []
    for req in requested:
        if isinstance(req, SpecField):
            sf = req
        else:
            src_ids: list[int] = []
            for col in req.source_columns:
                if col not in by_name:
                    raise SpecError(
                        f"partition source column {col!r} is not in the schema "
                        f"(columns: {', '.join(by_name)})"
                    )
                src_ids.append(by_name[col])
            src_types = [types_by_id[i] for i in src_ids]
            if req.transform is not None:
                req.transform.check_sources(src_types, req.default_field_id())
                rtype = req.transform.result_type(src_types)
            else:
                assert req.result_type is not None
                rtype = req.result_type
            candidate = SpecField("_", tuple(src_ids), rtype, req.transform, req.sql)
            reused = next((p for p in previous if p.same_definition(candidate)), None)
            if reused is not None and (req.field_id is None or req.field_id == reused.field_id):
                sf = reused
            else:
                if req.field_id is not None and req.field_id in alloc.taken:
                    raise SpecError(
                        f"partition field id {req.field_id!r} already names a different "
                        "partition field; field ids are never reused"
                    )
                fid = alloc.take(req.default_field_id())
                sf = SpecField(fid, tuple(src_ids), rtype, req.transform, req.sql)
        if any(o.field_id == sf.field_id or o.same_definition(sf) for o in out):
            raise SpecError(f"partition field {sf.field_id!r} appears twice in one spec")
        for sid in sf.source_ids:
            if sid not in types_by_id:
                raise SpecError(f"partition field {sf.field_id!r}: source id {sid} not in schema")
        out.append(sf)
    return tuple(out)


def _top_level_ids(schema: pa.Schema) -> dict[str, int]:
    out: dict[str, int] = {}
    for f in schema:
        fid = arrow_json.field_id(f)
        if fid is None:
            raise SpecError(f"schema field {f.name!r} has no lance:field_id")
        out[f.name] = fid
    return out


def _types_by_id(schema: pa.Schema) -> dict[int, pa.DataType]:
    out: dict[int, pa.DataType] = {}
    for f in schema:
        fid = arrow_json.field_id(f)
        if fid is not None:
            out[fid] = f.type
    return out


def source_types(spec_field: SpecField, schema: pa.Schema) -> list[pa.DataType]:
    """Arrow types of the field's sources in ``schema`` (null type for ids no longer present)."""
    types = _types_by_id(schema)
    return [types.get(i, pa.null()) for i in spec_field.source_ids]


def source_names(spec_field: SpecField, schema: pa.Schema) -> list[str | None]:
    """Column names of the field's sources in ``schema`` (None for ids no longer present)."""
    names = {arrow_json.field_id(f): f.name for f in schema}
    return [names.get(i) for i in spec_field.source_ids]


def specs_from_metadata(metadata: dict[str, str]) -> list[PartitionSpec]:
    """All partition specs stored in ``__manifest`` table metadata, by ascending version."""
    specs = []
    for k, v in metadata.items():
        if k.startswith(SPEC_KEY_PREFIX) and k[len(SPEC_KEY_PREFIX) :].isdigit():
            specs.append(PartitionSpec.from_json(v, int(k[len(SPEC_KEY_PREFIX) :])))
    return sorted(specs, key=lambda s: s.spec_id)
