"""Well-known partition transforms: small value objects that know their JSON form, the DataFusion
expression they stand for, and their result type."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import pyarrow as pa

from .errors import SpecError, UnknownTransformError
from .predicates import TRUE, Cmp, InSet, IsNull, Leaf, Like, Pred

# maps literal source values to the partition values a transform gives them
Evaluate = Callable[[list[Any]], list[Any]]

_TEMPORAL_UNITS = ("year", "month", "day", "hour")


def _is_temporal(t: pa.DataType) -> bool:
    return pa.types.is_date(t) or pa.types.is_timestamp(t)


def _is_string(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)


@dataclass(frozen=True)
class Transform:
    """Base of all transforms; subclasses define ``type_name`` and the expression they stand for."""

    type_name: ClassVar[str] = ""
    arity: ClassVar[int | None] = 1  # None: one or more source columns

    def to_json(self) -> dict[str, Any]:
        """The transform's JSON object, as stored in a partition spec."""
        return {"type": self.type_name}

    def check_sources(self, source_types: list[pa.DataType], field_id: str) -> None:
        """Raise :class:`SpecError` when the transform cannot apply to these source types."""
        if self.arity is not None and len(source_types) != self.arity:
            raise SpecError(
                f"partition field {field_id!r}: transform {self.type_name!r} takes "
                f"{self.arity} source column(s), got {len(source_types)}"
            )
        if self.arity is None and not source_types:
            raise SpecError(f"partition field {field_id!r}: {self.type_name!r} needs sources")

    def expression(self, source_types: list[pa.DataType]) -> str:
        """DataFusion SQL over ``col0, col1, ...`` that this transform stands for."""
        raise NotImplementedError

    def result_type(self, source_types: list[pa.DataType]) -> pa.DataType:
        """The partition value's Arrow type for these source types."""
        raise NotImplementedError

    def project(self, leaf: Leaf, column: str, evaluate: Evaluate) -> Pred:
        """A predicate on the partition column ``column`` true for every partition that may hold
        a row satisfying ``leaf`` (a condition on the source column); TRUE when unsure."""
        return _project_points(leaf, column, evaluate)


def _project_points(leaf: Leaf, column: str, evaluate: Evaluate) -> Pred:
    """Equality, IN and NULL tests map through the transform; anything else keeps all."""
    if isinstance(leaf, Cmp) and leaf.op == "=":
        (value,) = evaluate([leaf.value])
        return IsNull(column) if value is None else Cmp(column, "=", value)
    if isinstance(leaf, InSet) and not leaf.negated:
        values = evaluate(list(leaf.values))
        return InSet(column, tuple(dict.fromkeys(v for v in values if v is not None)))
    if isinstance(leaf, IsNull):
        return IsNull(column, leaf.negated)  # transforms are NULL for NULL and only then
    return TRUE


def _project_monotone(leaf: Leaf, column: str, evaluate: Evaluate) -> Pred:
    """For transforms that never decrease as the source grows: ranges map to ranges."""
    if isinstance(leaf, Cmp) and leaf.op in ("<", "<=", ">", ">="):
        (value,) = evaluate([leaf.value])
        if value is None:
            return TRUE
        return Cmp(column, "<=" if leaf.op in ("<", "<=") else ">=", value)
    return _project_points(leaf, column, evaluate)


@dataclass(frozen=True)
class Identity(Transform):
    """The source value, unmodified."""

    type_name: ClassVar[str] = "identity"

    def expression(self, source_types: list[pa.DataType]) -> str:
        return "col0"

    def result_type(self, source_types: list[pa.DataType]) -> pa.DataType:
        return source_types[0]

    def project(self, leaf: Leaf, column: str, evaluate: Evaluate) -> Pred:
        """Exact: the same condition on the partition column."""
        if isinstance(leaf, Cmp):
            return Cmp(column, leaf.op, leaf.value)
        if isinstance(leaf, InSet):
            return InSet(column, leaf.values, leaf.negated)
        if isinstance(leaf, IsNull):
            return IsNull(column, leaf.negated)
        return Like(column, leaf.pattern, leaf.negated)


@dataclass(frozen=True)
class _DatePart(Transform):
    def check_sources(self, source_types: list[pa.DataType], field_id: str) -> None:
        super().check_sources(source_types, field_id)
        ok = _is_temporal(source_types[0])
        if self.type_name == "hour":
            ok = pa.types.is_timestamp(source_types[0])
        if not ok:
            raise SpecError(
                f"partition field {field_id!r}: transform {self.type_name!r} needs a "
                f"{'timestamp' if self.type_name == 'hour' else 'date or timestamp'} column, "
                f"got {source_types[0]}"
            )

    def expression(self, source_types: list[pa.DataType]) -> str:
        return f"date_part('{self.type_name}', col0)"

    def result_type(self, source_types: list[pa.DataType]) -> pa.DataType:
        return pa.int32()


@dataclass(frozen=True)
class Year(_DatePart):
    """Calendar year of a date or timestamp."""

    type_name: ClassVar[str] = "year"

    def project(self, leaf: Leaf, column: str, evaluate: Evaluate) -> Pred:
        """The year never decreases as time goes on: ranges map to year ranges.

        (Month, day and hour alone repeat; ranges over them are combined with the coarser
        fields of the same column by the planner.)"""
        return _project_monotone(leaf, column, evaluate)


@dataclass(frozen=True)
class Month(_DatePart):
    """Month of the year (1-12) of a date or timestamp."""

    type_name: ClassVar[str] = "month"


@dataclass(frozen=True)
class Day(_DatePart):
    """Day of the month (1-31) of a date or timestamp."""

    type_name: ClassVar[str] = "day"


@dataclass(frozen=True)
class Hour(_DatePart):
    """Hour of the day (0-23) of a timestamp."""

    type_name: ClassVar[str] = "hour"


@dataclass(frozen=True)
class Bucket(Transform):
    """``abs(murmur3(col0)) % num_buckets`` with the absolute value taken in 64 bits."""

    num_buckets: int
    type_name: ClassVar[str] = "bucket"

    def __post_init__(self) -> None:
        if not isinstance(self.num_buckets, int) or self.num_buckets <= 0:
            raise SpecError(f"bucket: num_buckets must be a positive int, got {self.num_buckets}")

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type_name, "num_buckets": self.num_buckets}

    def expression(self, source_types: list[pa.DataType]) -> str:
        return f"CAST(abs(CAST(murmur3(col0) AS BIGINT)) % {self.num_buckets} AS INT)"

    def result_type(self, source_types: list[pa.DataType]) -> pa.DataType:
        return pa.int32()


@dataclass(frozen=True)
class MultiBucket(Bucket):
    """``abs(murmur3_multi(col0, col1, ...)) % num_buckets`` over several columns."""

    type_name: ClassVar[str] = "multi_bucket"
    arity: ClassVar[int | None] = None

    def expression(self, source_types: list[pa.DataType]) -> str:
        cols = ", ".join(f"col{i}" for i in range(len(source_types)))
        return f"CAST(abs(CAST(murmur3_multi({cols}) AS BIGINT)) % {self.num_buckets} AS INT)"


@dataclass(frozen=True)
class Truncate(Transform):
    """``left(col0, width)`` for strings, ``col0 - (col0 % width)`` for integers and decimals."""

    width: int
    type_name: ClassVar[str] = "truncate"

    def __post_init__(self) -> None:
        if not isinstance(self.width, int) or self.width <= 0:
            raise SpecError(f"truncate: width must be a positive int, got {self.width}")

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type_name, "width": self.width}

    def check_sources(self, source_types: list[pa.DataType], field_id: str) -> None:
        super().check_sources(source_types, field_id)
        t = source_types[0]
        if not (_is_string(t) or pa.types.is_integer(t) or pa.types.is_decimal(t)):
            raise SpecError(
                f"partition field {field_id!r}: truncate needs a string, integer or decimal "
                f"column, got {t}"
            )

    def expression(self, source_types: list[pa.DataType]) -> str:
        if _is_string(source_types[0]):
            return f"left(col0, {self.width})"
        return f"col0 - (col0 % {self.width})"

    def project(self, leaf: Leaf, column: str, evaluate: Evaluate) -> Pred:
        """Truncation never decreases as the source grows; ``LIKE 'prefix%'`` maps to the
        truncated prefix."""
        if isinstance(leaf, Like) and not leaf.negated:
            prefix = _like_prefix(leaf.pattern)
            if prefix is None:
                return TRUE
            if len(prefix) >= self.width:
                return Cmp(column, "=", prefix[: self.width])
            return Like(column, prefix + "%")
        return _project_monotone(leaf, column, evaluate)

    def result_type(self, source_types: list[pa.DataType]) -> pa.DataType:
        return source_types[0]


def _like_prefix(pattern: str) -> str | None:
    """``abc`` for ``abc%``; None unless the pattern is a plain prefix followed by ``%``."""
    if not pattern.endswith("%"):
        return None
    prefix = pattern[:-1]
    if any(ch in prefix for ch in "%_\\"):
        return None
    return prefix


_BY_NAME: dict[str, type[Transform]] = {
    cls.type_name: cls for cls in (Identity, Year, Month, Day, Hour, Bucket, MultiBucket, Truncate)
}


def transform_from_json(obj: dict[str, Any], field_id: str = "?") -> Transform:
    """Parse a transform JSON object; unknown types raise :class:`UnknownTransformError`."""
    if not isinstance(obj, dict) or "type" not in obj:
        raise SpecError(f"partition field {field_id!r}: transform must be an object with 'type'")
    name = obj["type"]
    cls = _BY_NAME.get(name)
    if cls is None:
        raise UnknownTransformError(
            f"partition field {field_id!r}: unknown transform {name!r} "
            f"(known: {', '.join(sorted(_BY_NAME))})"
        )
    try:
        if cls in (Bucket, MultiBucket):
            return cls(int(obj["num_buckets"]))
        if cls is Truncate:
            return cls(int(obj["width"]))
    except KeyError as e:
        raise SpecError(f"partition field {field_id!r}: transform {name!r} needs {e}") from None
    return cls()


TEMPORAL_UNITS = _TEMPORAL_UNITS
