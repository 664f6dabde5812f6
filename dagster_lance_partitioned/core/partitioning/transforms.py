"""Partition transforms: value objects that own what is known about them. Each knows its JSON
form, the DataFusion SQL it stands for, the source types it applies to, its result type, whether
it preserves order, its calendar granularity, and how a condition on its source column projects
onto its partition value.

An expression field is a transform too. :func:`parse_expression` reads an expression's SQL once.
When the SQL is exactly what a well-known transform stands for over its source types (draft
specs spell identity ``col0``), the field is that transform. Otherwise it is an
:class:`ExpressionTransform`: evaluated as written, with no capability claimed (the counterpart of
pyiceberg's ``UnknownTransform``). A stored spec naming a transform *type* this package does not
know is refused with :class:`UnknownTransformError`, because its partition values could not be
computed."""

from __future__ import annotations

import enum
import functools
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import pyarrow as pa

from ..errors import SpecError, UnknownTransformError
from ..expr.predicates import FALSE, TRUE, Cmp, InSet, IsNull, Leaf, Like, Pred, disj

# maps literal source values to the partition values a transform gives them
Evaluate = Callable[[list[Any]], list[Any]]


class Granularity(enum.IntEnum):
    """The calendar unit a date-part transform extracts. Members are listed coarsest first, and
    a coarser unit compares greater (as pyiceberg's ``TimeResolution`` does)."""

    YEAR = 4
    MONTH = 3
    DAY = 2
    HOUR = 1

    @property
    def unit(self) -> str:
        """The unit's name in ``date_part('<unit>', ...)`` and in the transform's JSON."""
        return self.name.lower()


def _is_temporal(t: pa.DataType) -> bool:
    return bool(pa.types.is_date(t) or pa.types.is_timestamp(t))


def _is_string(t: pa.DataType) -> bool:
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t))


@dataclass(frozen=True)
class Transform(ABC):
    """A partition transform: what it computes (:meth:`expression`, :meth:`result_type`), what it
    applies to (:meth:`can_transform`), what it preserves (:attr:`preserves_order`,
    :attr:`granularity`, :attr:`is_identity`) and how pruning maps conditions through it
    (:meth:`project`)."""

    type_name: ClassVar[str]
    arity: ClassVar[int | None] = 1  # None: one or more source columns

    # -- capabilities ---------------------------------------------------------------------------
    @property
    @abstractmethod
    def preserves_order(self) -> bool:
        """Whether the partition value never decreases as the source value grows, so that a
        range on the source maps to a range of partition values."""

    @property
    @abstractmethod
    def granularity(self) -> Granularity | None:
        """The calendar unit of a date-part transform; None for every other transform."""

    @property
    @abstractmethod
    def is_identity(self) -> bool:
        """Whether the partition value is the source value itself, so that every row of a
        partition holds it in the source column."""

    @property
    @abstractmethod
    def field_id_suffix(self) -> str:
        """What a default field id adds to its source names (``_year``, ``_bucket_16``)."""

    # -- sources and results --------------------------------------------------------------------
    def source_problem(self, source_types: Sequence[pa.DataType]) -> str | None:
        """Why the transform cannot apply to these source types; None when it can."""
        if self.arity is None and not source_types:
            return f"{self.type_name!r} needs sources"
        if self.arity is not None and len(source_types) != self.arity:
            return (
                f"transform {self.type_name!r} takes {self.arity} source column(s), "
                f"got {len(source_types)}"
            )
        return self._type_problem(source_types)

    @abstractmethod
    def _type_problem(self, source_types: Sequence[pa.DataType]) -> str | None:
        """Why the transform cannot apply to sources of these types (their number is right)."""

    def can_transform(self, source_types: Sequence[pa.DataType]) -> bool:
        """Whether the transform applies to sources of these types."""
        return self.source_problem(source_types) is None

    def check_sources(self, source_types: Sequence[pa.DataType], field_id: str) -> None:
        """Raise :class:`SpecError` when the transform cannot apply to these source types."""
        problem = self.source_problem(source_types)
        if problem is not None:
            raise SpecError(f"partition field {field_id!r}: {problem}")

    @abstractmethod
    def expression(self, source_types: Sequence[pa.DataType]) -> str:
        """DataFusion SQL over ``col0, col1, ...`` that this transform stands for."""

    @abstractmethod
    def result_type(self, source_types: Sequence[pa.DataType]) -> pa.DataType:
        """The partition value's Arrow type for these source types."""

    # -- JSON -----------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """The transform's JSON object, as stored in a partition spec."""
        return {"type": self.type_name}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Transform:
        """The transform of this class that ``obj`` describes (its ``type`` already matched)."""
        return cls()

    # -- pruning --------------------------------------------------------------------------------
    def project(self, leaf: Leaf, column: str, evaluate: Evaluate) -> Pred:
        """A predicate on the partition column ``column`` true for every partition that may hold
        a row satisfying ``leaf`` (a condition on the source column); TRUE when unsure.

        Equality, IN and NULL tests map through the transform; ranges map to ranges when it
        preserves order."""
        if self.preserves_order and isinstance(leaf, Cmp) and leaf.op in ("<", "<=", ">", ">="):
            (value,) = evaluate([leaf.value])
            if value is None:
                return TRUE
            return Cmp(column, "<=" if leaf.op in ("<", "<=") else ">=", value)
        if isinstance(leaf, Cmp) and leaf.op == "=":
            (value,) = evaluate([leaf.value])
            return IsNull(column) if value is None else Cmp(column, "=", value)
        if isinstance(leaf, InSet) and not leaf.negated:
            values = evaluate(list(leaf.values))
            return InSet(column, tuple(dict.fromkeys(v for v in values if v is not None)))
        if isinstance(leaf, IsNull):
            return IsNull(column, leaf.negated)  # transforms are NULL for NULL and only then
        return TRUE


@dataclass(frozen=True)
class Identity(Transform):
    """The source value, unmodified."""

    type_name: ClassVar[str] = "identity"

    @property
    def preserves_order(self) -> bool:
        return True

    @property
    def granularity(self) -> Granularity | None:
        return None

    @property
    def is_identity(self) -> bool:
        return True

    @property
    def field_id_suffix(self) -> str:
        return ""

    def _type_problem(self, source_types: Sequence[pa.DataType]) -> str | None:
        return None

    def expression(self, source_types: Sequence[pa.DataType]) -> str:
        return "col0"

    def result_type(self, source_types: Sequence[pa.DataType]) -> pa.DataType:
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
class DatePart(Transform):
    """``date_part('<unit>', col0)`` of a date or timestamp, as int32.

    Only the year never decreases as time goes on; month, day and hour repeat (ranges over them
    are combined with the coarser fields of the same column by the planner)."""

    unit: ClassVar[Granularity]
    sources_wanted: ClassVar[str] = "date or timestamp"

    @property
    def preserves_order(self) -> bool:
        return self.unit is Granularity.YEAR

    @property
    def granularity(self) -> Granularity | None:
        return self.unit

    @property
    def is_identity(self) -> bool:
        return False

    @property
    def field_id_suffix(self) -> str:
        return f"_{self.type_name}"

    def _accepts(self, t: pa.DataType) -> bool:
        return _is_temporal(t)

    def _type_problem(self, source_types: Sequence[pa.DataType]) -> str | None:
        if self._accepts(source_types[0]):
            return None
        return (
            f"transform {self.type_name!r} needs a {self.sources_wanted} column, "
            f"got {source_types[0]}"
        )

    def expression(self, source_types: Sequence[pa.DataType]) -> str:
        return f"date_part('{self.unit.unit}', col0)"

    def result_type(self, source_types: Sequence[pa.DataType]) -> pa.DataType:
        return pa.int32()


@dataclass(frozen=True)
class Year(DatePart):
    """Calendar year of a date or timestamp."""

    type_name: ClassVar[str] = "year"
    unit: ClassVar[Granularity] = Granularity.YEAR


@dataclass(frozen=True)
class Month(DatePart):
    """Month of the year (1-12) of a date or timestamp."""

    type_name: ClassVar[str] = "month"
    unit: ClassVar[Granularity] = Granularity.MONTH


@dataclass(frozen=True)
class Day(DatePart):
    """Day of the month (1-31) of a date or timestamp."""

    type_name: ClassVar[str] = "day"
    unit: ClassVar[Granularity] = Granularity.DAY


@dataclass(frozen=True)
class Hour(DatePart):
    """Hour of the day (0-23) of a timestamp."""

    type_name: ClassVar[str] = "hour"
    unit: ClassVar[Granularity] = Granularity.HOUR
    sources_wanted: ClassVar[str] = "timestamp"

    def _accepts(self, t: pa.DataType) -> bool:
        return bool(pa.types.is_timestamp(t))


@dataclass(frozen=True)
class Bucket(Transform):
    """``abs(murmur3(col0)) % num_buckets`` with the absolute value taken in 64 bits."""

    num_buckets: int
    type_name: ClassVar[str] = "bucket"

    def __post_init__(self) -> None:
        if not isinstance(self.num_buckets, int) or self.num_buckets <= 0:
            raise SpecError(f"bucket: num_buckets must be a positive int, got {self.num_buckets}")

    @property
    def preserves_order(self) -> bool:
        return False

    @property
    def granularity(self) -> Granularity | None:
        return None

    @property
    def is_identity(self) -> bool:
        return False

    @property
    def field_id_suffix(self) -> str:
        return f"_bucket_{self.num_buckets}"

    def _type_problem(self, source_types: Sequence[pa.DataType]) -> str | None:
        return None  # every type hashes (hashing refuses what it cannot encode)

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type_name, "num_buckets": self.num_buckets}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Transform:
        return cls(int(obj["num_buckets"]))

    def expression(self, source_types: Sequence[pa.DataType]) -> str:
        return f"CAST(abs(CAST(murmur3(col0) AS BIGINT)) % {self.num_buckets} AS INT)"

    def result_type(self, source_types: Sequence[pa.DataType]) -> pa.DataType:
        return pa.int32()


@dataclass(frozen=True)
class MultiBucket(Bucket):
    """``abs(murmur3_multi(col0, col1, ...)) % num_buckets`` over several columns."""

    type_name: ClassVar[str] = "multi_bucket"
    arity: ClassVar[int | None] = None

    def expression(self, source_types: Sequence[pa.DataType]) -> str:
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

    @property
    def preserves_order(self) -> bool:
        return True

    @property
    def granularity(self) -> Granularity | None:
        return None

    @property
    def is_identity(self) -> bool:
        return False

    @property
    def field_id_suffix(self) -> str:
        return f"_trunc_{self.width}"

    def _type_problem(self, source_types: Sequence[pa.DataType]) -> str | None:
        t = source_types[0]
        if _is_string(t) or pa.types.is_integer(t) or pa.types.is_decimal(t):
            return None
        return f"truncate needs a string, integer or decimal column, got {t}"

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type_name, "width": self.width}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Transform:
        return cls(int(obj["width"]))

    def expression(self, source_types: Sequence[pa.DataType]) -> str:
        if _is_string(source_types[0]):
            return f"left(col0, {self.width})"
        return f"col0 - (col0 % {self.width})"

    def result_type(self, source_types: Sequence[pa.DataType]) -> pa.DataType:
        return source_types[0]

    def project(self, leaf: Leaf, column: str, evaluate: Evaluate) -> Pred:
        """Order-preserving projection, and ``LIKE 'prefix%'`` maps to the truncated prefix."""
        if isinstance(leaf, Like) and not leaf.negated:
            prefix = _like_prefix(leaf.pattern)
            if prefix is None:
                return TRUE
            if len(prefix) >= self.width:
                return Cmp(column, "=", prefix[: self.width])
            return Like(column, prefix + "%")
        return super().project(leaf, column, evaluate)


def _like_prefix(pattern: str) -> str | None:
    """``abc`` for ``abc%``; None unless the pattern is a plain prefix followed by ``%``."""
    if not pattern.endswith("%"):
        return None
    prefix = pattern[:-1]
    if any(ch in prefix for ch in "%_\\"):
        return None
    return prefix


@dataclass(frozen=True)
class ExpressionTransform(Transform):
    """An expression field's SQL that is no well-known transform: evaluated as written, with no
    capability claimed (neither order nor granularity), pruned by evaluating the literals of a
    condition. Stored as the field's ``expression``, never as a ``transform`` object."""

    sql: str
    declared_type: pa.DataType  # the field's result_type
    type_name: ClassVar[str] = "expression"
    arity: ClassVar[int | None] = None

    @property
    def preserves_order(self) -> bool:
        return False

    @property
    def granularity(self) -> Granularity | None:
        return None

    @property
    def is_identity(self) -> bool:
        return False

    @property
    def field_id_suffix(self) -> str:
        raise SpecError("an expression partition field needs an explicit field_id")

    def _type_problem(self, source_types: Sequence[pa.DataType]) -> str | None:
        return None  # found out when the SQL is compiled

    def to_json(self) -> dict[str, Any]:
        raise SpecError(f"expression {self.sql!r} is stored as an expression, not a transform")

    def expression(self, source_types: Sequence[pa.DataType]) -> str:
        return self.sql

    def result_type(self, source_types: Sequence[pa.DataType]) -> pa.DataType:
        return self.declared_type

    def project(self, leaf: Leaf, column: str, evaluate: Evaluate) -> Pred:
        """The partition values the expression gives the condition's literals (an expression
        may map NULL to a value, and values to NULL); TRUE for anything else."""
        if isinstance(leaf, Cmp) and leaf.op == "=":
            return value_set(column, evaluate([leaf.value]))
        if isinstance(leaf, InSet) and not leaf.negated:
            return value_set(column, evaluate(list(leaf.values)))
        if isinstance(leaf, IsNull) and not leaf.negated:
            return value_set(column, evaluate([None]))
        return TRUE


def value_set(column: str, values: list[Any]) -> Pred:
    """``column`` holds one of ``values`` (None: is NULL); FALSE for no values."""
    distinct = list(dict.fromkeys(values))
    parts: list[Pred] = []
    non_null = tuple(v for v in distinct if v is not None)
    if non_null:
        parts.append(
            InSet(column, non_null) if len(non_null) > 1 else Cmp(column, "=", non_null[0])
        )
    if len(non_null) != len(distinct):
        parts.append(IsNull(column))
    return disj(parts) if parts else FALSE


# -- reading transforms -----------------------------------------------------------------------
_BY_NAME: dict[str, type[Transform]] = {
    cls.type_name: cls for cls in (Identity, Year, Month, Day, Hour, Bucket, MultiBucket, Truncate)
}
_DATE_PARTS: dict[str, type[Transform]] = {cls.unit.unit: cls for cls in (Year, Month, Day, Hour)}


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
        return cls.from_json(obj)
    except KeyError as e:
        raise SpecError(f"partition field {field_id!r}: transform {name!r} needs {e}") from None


# the shapes of the well-known transforms' SQL, compared without whitespace and in lower case
_DATE_PART_RE = re.compile(r"date_part\('(year|month|day|hour)',col0\)")
_TRUNCATE_RE = re.compile(r"left\(col0,(\d+)\)|col0-\(col0%(\d+)\)")


def _sql_key(sql: str) -> str:
    return re.sub(r"\s+", "", sql).lower()


def _spelled(key: str) -> Transform | None:
    """The well-known transform whose SQL has the shape of ``key``, if any."""
    if key == "col0":
        return Identity()
    if m := _DATE_PART_RE.fullmatch(key):
        return _DATE_PARTS[m.group(1)]()
    if m := _TRUNCATE_RE.fullmatch(key):
        width = int(m.group(1) or m.group(2))
        return Truncate(width) if width > 0 else None
    return None


def parse_expression(
    sql: str, source_types: Sequence[pa.DataType], result_type: pa.DataType
) -> Transform:
    """What an expression field computes, as a transform: the well-known transform whose SQL over
    these source types ``sql`` is (whitespace and letter case aside), else an
    :class:`ExpressionTransform`. A source no longer in the schema (null type) confirms nothing.
    Parsed once per SQL and source types."""
    return _parse(sql, tuple(source_types), result_type)


@functools.lru_cache(maxsize=1024)
def _parse(sql: str, source_types: tuple[pa.DataType, ...], result_type: pa.DataType) -> Transform:
    key = _sql_key(sql)
    candidate = _spelled(key)
    if (
        candidate is not None
        and not any(pa.types.is_null(t) for t in source_types)
        and candidate.can_transform(source_types)
        and _sql_key(candidate.expression(source_types)) == key
    ):
        return candidate
    return ExpressionTransform(sql, result_type)
