"""Spark's pushed filters as the core's SQL filter.

Spark hands a Python data source the conjuncts of a ``WHERE`` it may push (``EqualTo``, ``In``,
``GreaterThan``, ... on column paths). Each one on a top-level column of a type whose semantics
agree between Spark and DataFusion becomes a SQL predicate: the core uses their conjunction to
prune partition tables and applies it inside every partition scan.

A pushed filter is *exact* when DataFusion and Spark agree on it for every value (integers,
strings, booleans, dates); Spark does not evaluate exact filters again. Filters on timestamps
and decimals are pushed (pruning) but also returned to Spark, which evaluates them again.
Filters on floating point columns (NaN and -0.0 compare differently), binary, nested columns
and anything unrecognised are left to Spark alone."""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringStartsWith,
)

from ..core.engine import quote_ident

_COMPARISONS: dict[type, str] = {
    EqualTo: "=",
    GreaterThan: ">",
    GreaterThanOrEqual: ">=",
    LessThan: "<",
    LessThanOrEqual: "<=",
}


@dataclass(frozen=True)
class Translated:
    """The pushed filters: SQL conjuncts for the core, and the filters Spark must still apply."""

    conjuncts: tuple[str, ...]
    returned: tuple[Filter, ...]

    @property
    def sql(self) -> str | None:
        """The conjunction of the pushed predicates (None when nothing was pushed)."""
        return " AND ".join(f"({c})" for c in self.conjuncts) if self.conjuncts else None


def translate(filters: Sequence[Filter], schema: pa.Schema) -> Translated:
    """Split Spark's pushed ``filters`` (a conjunction) into SQL the core applies, and the
    filters handed back to Spark (unsupported ones, and supported but inexact ones)."""
    conjuncts: list[str] = []
    returned: list[Filter] = []
    for f in filters:
        out = to_sql(f, schema)
        if out is None:
            returned.append(f)
            continue
        sql, exact = out
        conjuncts.append(sql)
        if not exact:
            returned.append(f)
    return Translated(tuple(conjuncts), tuple(returned))


def to_sql(f: Filter, schema: pa.Schema) -> tuple[str, bool] | None:
    """``(sql, exact)`` for one Spark filter, or None when it is not pushed."""
    if isinstance(f, Not):
        inner = to_sql(f.child, schema)
        return None if inner is None else (f"NOT ({inner[0]})", inner[1])
    attribute = getattr(f, "attribute", None)
    if attribute is None or len(attribute) != 1:
        return None  # nested field paths are left to Spark
    name = attribute[0]
    idx = schema.get_field_index(name)
    if idx < 0:
        return None
    t = schema.field(idx).type
    kind = _kind(t)
    if kind is None:
        return None
    exact = kind == "exact"
    col = quote_ident(name)
    if isinstance(f, IsNull):
        return f"{col} IS NULL", True
    if isinstance(f, IsNotNull):
        return f"{col} IS NOT NULL", True
    if isinstance(f, EqualNullSafe):
        if f.value is None:
            return f"{col} IS NULL", True
        lit = literal(f.value, t)
        # NULL <=> v is false, not NULL: under NOT the row is kept, as here
        return None if lit is None else (f"{col} IS NOT NULL AND {col} = {lit}", exact)
    if type(f) in _COMPARISONS:
        value = getattr(f, "value", None)  # every comparison filter has one
        if value is None:
            return None
        lit = literal(value, t)
        return None if lit is None else (f"{col} {_COMPARISONS[type(f)]} {lit}", exact)
    if isinstance(f, In):
        values = list(f.value)
        if not values:
            return None
        lits = [literal(v, t) for v in values]
        if any(lit is None for lit in lits):
            return None
        return f"{col} IN ({', '.join(lits)})", exact  # type: ignore[arg-type]
    if isinstance(f, StringStartsWith) and _is_string(t) and isinstance(f.value, str):
        if any(c in f.value for c in "%_\\"):
            return None  # LIKE wildcards in the prefix: leave it to Spark
        return f"{col} LIKE {_string(f.value + '%')}", exact
    return None


def _is_string(t: pa.DataType) -> bool:
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t))


def _kind(t: pa.DataType) -> str | None:
    """ "exact", "inexact" (pushed, and re-checked by Spark) or None (not pushed)."""
    if pa.types.is_dictionary(t):
        return _kind(t.value_type)
    if pa.types.is_integer(t) or pa.types.is_boolean(t) or pa.types.is_date(t) or _is_string(t):
        return "exact"
    if pa.types.is_timestamp(t) or pa.types.is_decimal(t):
        return "inexact"
    return None


def literal(value: Any, t: pa.DataType) -> str | None:
    """``value`` as a SQL literal comparable with a column of type ``t`` (None: not renderable)."""
    if pa.types.is_dictionary(t):
        return literal(value, t.value_type)
    if value is None:
        return "NULL"
    if pa.types.is_boolean(t):
        return ("TRUE" if value else "FALSE") if isinstance(value, bool) else None
    if pa.types.is_integer(t):
        if isinstance(value, bool) or not isinstance(value, int):
            return None
        return str(value)
    if _is_string(t):
        return _string(value) if isinstance(value, str) else None
    if pa.types.is_date(t):
        if isinstance(value, dt.datetime) or not isinstance(value, dt.date):
            return None
        return f"DATE '{value.isoformat()}'"
    if pa.types.is_timestamp(t):
        return _timestamp(value, t)
    if pa.types.is_decimal(t):
        if not isinstance(value, decimal.Decimal | int) or isinstance(value, bool):
            return None
        dec = decimal.Decimal(value)
        if not dec.is_finite():
            return None
        return f"CAST({_string(str(dec))} AS DECIMAL({t.precision}, {t.scale}))"
    return None


def _timestamp(value: Any, t: pa.TimestampType) -> str | None:
    """A string literal DataFusion casts to the column's type: an instant (``Z``) for zoned
    columns, a wall-clock time for columns without a zone."""
    if not isinstance(value, dt.datetime):
        return None
    if t.tz is not None:
        if value.tzinfo is None:
            return None  # Spark always sends zoned instants for TIMESTAMP columns
        utc = value.astimezone(dt.UTC).replace(tzinfo=None)
        return _string(utc.isoformat() + "Z")
    if value.tzinfo is not None:
        return None  # an instant compared with a wall-clock column: let Spark do it
    return f"CAST({_string(value.isoformat())} AS TIMESTAMP)"


def _string(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"
