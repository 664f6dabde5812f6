"""A small predicate tree used for pruning: built from DataFusion's parsed filter (over source
columns), projected onto partition columns, and rendered as SQL for the ``__manifest`` query."""

from __future__ import annotations

import datetime as dt
import decimal
import functools
import math
import re
from dataclasses import dataclass
from typing import Any

import datafusion as dfn
import pyarrow as pa
import pyarrow.compute as pc

from .filters import literal_value, quote_ident

CMP_OPS = ("=", "!=", "<", "<=", ">", ">=")
_FLIP = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_NEGATE = {"=": "!=", "!=": "=", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}


class Pred:
    """Base of predicate nodes."""


@dataclass(frozen=True)
class Const(Pred):
    """TRUE (keep everything) or FALSE (keep nothing)."""

    value: bool


TRUE, FALSE = Const(True), Const(False)


@dataclass(frozen=True)
class And(Pred):
    parts: tuple[Pred, ...]


@dataclass(frozen=True)
class Or(Pred):
    parts: tuple[Pred, ...]


@dataclass(frozen=True)
class Cmp(Pred):
    """``column op value`` with a non-NULL value."""

    column: str
    op: str
    value: Any


@dataclass(frozen=True)
class InSet(Pred):
    """``column [NOT] IN (values)``; NULL values are dropped (they never match)."""

    column: str
    values: tuple[Any, ...]
    negated: bool = False


@dataclass(frozen=True)
class IsNull(Pred):
    column: str
    negated: bool = False


@dataclass(frozen=True)
class Like(Pred):
    column: str
    pattern: str
    negated: bool = False


@dataclass(frozen=True)
class IsNan(Pred):
    """``isnan(column)`` (``NOT isnan(column)`` when negated; NULL matches neither)."""

    column: str
    negated: bool = False


Leaf = Cmp | InSet | IsNull | Like  # what partition values can be projected from


def conj(parts: list[Pred]) -> Pred:
    """AND of ``parts`` with constants folded."""
    out: list[Pred] = []
    for p in parts:
        if p == FALSE:
            return FALSE
        if p == TRUE:
            continue
        out.extend(p.parts if isinstance(p, And) else (p,))
    if not out:
        return TRUE
    return out[0] if len(out) == 1 else And(tuple(dict.fromkeys(out)))


def disj(parts: list[Pred]) -> Pred:
    """OR of ``parts`` with constants folded."""
    out: list[Pred] = []
    for p in parts:
        if p == TRUE:
            return TRUE
        if p == FALSE:
            continue
        out.extend(p.parts if isinstance(p, Or) else (p,))
    if not out:
        return FALSE
    return out[0] if len(out) == 1 else Or(tuple(dict.fromkeys(out)))


# -- from DataFusion --------------------------------------------------------------------------
class _Unknown(Pred):
    """A condition pruning cannot use (projects to TRUE under any negation)."""


UNKNOWN = _Unknown()


def from_datafusion(expr: dfn.Expr, schema: pa.Schema) -> Pred:
    """The predicate tree of a parsed filter, in negation normal form, over ``schema``'s columns;
    literals are cast to their column's type."""
    return _convert(expr, schema, negate=False)


# the expression kinds pruning reads (others, e.g. function calls, DataFusion's Python binding
# cannot always convert, and pruning keeps every partition for them)
_CONVERTED = frozenset(
    (
        "Alias",
        "Not",
        "BinaryExpr",
        "IsNull",
        "IsNotNull",
        "InList",
        "Between",
        "Like",
        "Literal",
        "ScalarFunction",
    )
)
# isnan of one column, as DataFusion names the call (the binding cannot convert function calls)
_ISNAN = re.compile(r"isnan\((?:__dlp_filter\.)?(.+)\)", re.DOTALL)


def _name(expr: dfn.Expr) -> str | None:
    kind = expr.variant_name()
    if kind == "Column":
        return str(expr.to_variant().name())
    if kind == "Alias":
        return _name(expr.to_variant().expr())
    return None


def _ilike(expr: dfn.Expr, like: Any) -> bool:
    """Whether the ``Like`` node ``expr`` is ILIKE (the binding's Like does not say)."""
    operator = expr.canonical_name()[len(like.expr().canonical_name()) :].lstrip()
    return operator.startswith(("ILIKE", "NOT ILIKE"))


def _convert(expr: dfn.Expr, schema: pa.Schema, negate: bool) -> Pred:
    kind = expr.variant_name()
    if kind not in _CONVERTED:
        return UNKNOWN
    if kind == "ScalarFunction":
        return _function(expr, schema, negate)
    v = expr.to_variant()
    if kind == "Alias":
        return _convert(v.expr(), schema, negate)
    if kind == "Not":
        return _convert(v.expr(), schema, not negate)
    if kind == "BinaryExpr":
        op = v.op().upper()
        if op in ("AND", "OR"):
            parts = [_convert(v.left(), schema, negate), _convert(v.right(), schema, negate)]
            is_and = (op == "AND") != negate
            return _fold(parts, is_and)
        if op in CMP_OPS or op == "<>":
            op = "!=" if op == "<>" else op
            col, lit = _name(v.left()), v.right()
            if col is None:
                col, lit, op = _name(v.right()), v.left(), _FLIP[op]
            if col is None or schema.get_field_index(col) < 0:
                return UNKNOWN
            ok, value = literal_value(lit, schema.field(col).type)
            if not ok:
                return UNKNOWN
            if value is None:  # comparing with NULL is never true
                return FALSE
            return Cmp(col, _NEGATE[op] if negate else op, value)
        return UNKNOWN
    if kind in ("IsNull", "IsNotNull"):
        col = _name(v.expr())
        if col is None or schema.get_field_index(col) < 0:
            return UNKNOWN
        return IsNull(col, negated=(kind == "IsNotNull") != negate)
    if kind == "InList":
        col = _name(v.expr())
        if col is None or schema.get_field_index(col) < 0:
            return UNKNOWN
        values = []
        for item in v.list():
            ok, value = literal_value(item, schema.field(col).type)
            if not ok:
                return UNKNOWN
            values.append(value)
        if any(x is None for x in values) and (v.negated() != negate):
            return FALSE  # NOT IN with a NULL in the list is never true
        return InSet(col, tuple(x for x in values if x is not None), v.negated() != negate)
    if kind == "Between":
        col = _name(v.expr())
        if col is None or schema.get_field_index(col) < 0:
            return UNKNOWN
        t = schema.field(col).type
        ok_lo, lo = literal_value(v.low(), t)
        ok_hi, hi = literal_value(v.high(), t)
        if not (ok_lo and ok_hi) or lo is None or hi is None:
            return UNKNOWN
        if v.negated() != negate:
            return _fold([Cmp(col, "<", lo), Cmp(col, ">", hi)], is_and=False)
        return _fold([Cmp(col, ">=", lo), Cmp(col, "<=", hi)], is_and=True)
    if kind == "Like":
        col = _name(v.expr())
        if col is None or schema.get_field_index(col) < 0 or v.escape_char() is not None:
            return UNKNOWN
        if _ilike(expr, v):
            return UNKNOWN  # case-insensitive: no pruning
        ok, pattern = literal_value(v.pattern(), pa.utf8())
        if not ok or not isinstance(pattern, str):
            return UNKNOWN
        return Like(col, pattern, v.negated() != negate)
    if kind == "Literal":
        try:
            value = expr.python_value()
        except Exception:
            return UNKNOWN
        if isinstance(value, bool):
            return Const(value != negate)
        return UNKNOWN
    return UNKNOWN


def _function(expr: dfn.Expr, schema: pa.Schema, negate: bool) -> Pred:
    """``isnan(column)`` of a floating-point column; other calls prune nothing."""
    found = _ISNAN.fullmatch(expr.canonical_name())
    if found is None:
        return UNKNOWN
    col = found.group(1)
    if schema.get_field_index(col) < 0 or not pa.types.is_floating(schema.field(col).type):
        return UNKNOWN
    return IsNan(col, negated=negate)


def _fold(parts: list[Pred], is_and: bool) -> Pred:
    if is_and:
        known = [p for p in parts if p is not UNKNOWN]
        return conj(known) if known else UNKNOWN
    if any(p is UNKNOWN for p in parts):
        return UNKNOWN
    return disj(parts)


# -- evaluated in memory ------------------------------------------------------------------------
def holds(pred: Pred, row: dict[str, Any]) -> bool | None:
    """SQL three-valued truth of ``pred`` for one row (``None``: unknown, i.e. not selected)."""
    if isinstance(pred, Const):
        return pred.value
    if isinstance(pred, And):
        out: bool | None = True
        for p in pred.parts:
            v = holds(p, row)
            if v is False:
                return False
            if v is None:
                out = None
        return out
    if isinstance(pred, Or):
        out = False
        for p in pred.parts:
            v = holds(p, row)
            if v is True:
                return True
            if v is None:
                out = None
        return out
    if isinstance(pred, IsNull):
        return (row.get(pred.column) is None) != pred.negated
    if isinstance(pred, IsNan):
        value = row.get(pred.column)
        if value is None:
            return None
        return (isinstance(value, float) and math.isnan(value)) != pred.negated
    if not isinstance(pred, Cmp | InSet | Like):
        return True  # an unknown node: keep the partition
    value = row.get(pred.column)
    if value is None:
        return None
    try:
        if isinstance(pred, Cmp):
            return _compare(value, pred.op, pred.value)
        if isinstance(pred, InSet):
            return (value in pred.values) != pred.negated
        if isinstance(pred, Like):
            return bool(_like_regex(pred.pattern).fullmatch(str(value))) != pred.negated
    except TypeError:
        return True  # incomparable values: keep the partition
    return True


def _compare(a: Any, op: str, b: Any) -> bool:
    if op == "=":
        return bool(a == b)
    if op == "!=":
        return bool(a != b)
    if op == "<":
        return bool(a < b)
    if op == "<=":
        return bool(a <= b)
    if op == ">":
        return bool(a > b)
    return bool(a >= b)


@functools.lru_cache(maxsize=256)
def _like_regex(pattern: str) -> re.Pattern[str]:
    parts = []
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\" and i + 1 < len(pattern):
            parts.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        parts.append(".*" if ch == "%" else "." if ch == "_" else re.escape(ch))
        i += 1
    return re.compile("".join(parts), re.DOTALL)


# -- as an Arrow expression -----------------------------------------------------------------------
def to_expression(pred: Pred, types: dict[str, pa.DataType]) -> pc.Expression:
    """``pred`` as an Arrow compute expression over columns whose types are ``types``, keeping
    exactly the rows :func:`holds` is True for (NULL and NaN compare as there); raises
    :class:`NotRenderable` for what it cannot express (the caller evaluates row by row)."""
    if isinstance(pred, Const):
        return pc.scalar(pred.value)
    if isinstance(pred, And | Or):
        parts = [to_expression(p, types) for p in pred.parts]
        out = parts[0]
        for p in parts[1:]:
            out = (out & p) if isinstance(pred, And) else (out | p)
        return out
    if isinstance(pred, IsNull):
        field = pc.field(pred.column)
        return field.is_valid() if pred.negated else field.is_null()
    if not isinstance(pred, Cmp | InSet) or pred.column not in types:
        raise NotRenderable(type(pred).__name__)
    t = types[pred.column]
    field = pc.field(pred.column)
    try:
        if isinstance(pred, InSet):
            if any(isinstance(v, float) and math.isnan(v) for v in pred.values):
                raise NotRenderable("NaN")
            test = field.isin(pa.array(list(pred.values), t))
            # NOT IN keeps only rows with a value, as SQL does
            return (~test & field.is_valid()) if pred.negated else test
        value = pa.scalar(pred.value, t)
    except (pa.ArrowException, TypeError, ValueError, OverflowError) as e:
        raise NotRenderable(str(e)) from None
    if pa.types.is_floating(t) and isinstance(pred.value, float) and math.isnan(pred.value):
        raise NotRenderable("NaN")  # holds() never matches NaN; keep the row-by-row path
    ops = {
        "=": field == value,
        "!=": field != value,
        "<": field < value,
        "<=": field <= value,
        ">": field > value,
        ">=": field >= value,
    }
    return ops[pred.op]


# -- to SQL -----------------------------------------------------------------------------------
class NotRenderable(Exception):
    """A literal has no form in the requested SQL dialect."""


def sql_literal(value: Any, t: pa.DataType, dialect: str = "datafusion") -> str:
    """``value`` as a SQL literal of Arrow type ``t`` (dialect ``datafusion`` or ``lance``)."""
    if dialect == "lance" and (
        pa.types.is_timestamp(t)
        or pa.types.is_floating(t)
        or pa.types.is_decimal(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_fixed_size_binary(t)
    ):
        raise NotRenderable(str(t))
    if value is None:
        return "NULL"
    if pa.types.is_boolean(t):
        return "TRUE" if value else "FALSE"
    if pa.types.is_integer(t):
        return str(int(value))
    if pa.types.is_floating(t):
        f = float(value)
        if math.isnan(f) or math.isinf(f):
            return f"CAST('{'NaN' if math.isnan(f) else ('inf' if f > 0 else '-inf')}' AS DOUBLE)"
        return repr(f)
    if pa.types.is_decimal(t):
        return f"CAST('{decimal.Decimal(value)}' AS DECIMAL({t.precision}, {t.scale}))"
    if pa.types.is_date(t):
        return f"DATE '{value.isoformat()}'"
    if pa.types.is_timestamp(t):
        text = value.isoformat() if isinstance(value, dt.datetime) else str(value)
        unit = {"s": "Second", "ms": "Millisecond", "us": "Microsecond", "ns": "Nanosecond"}[t.unit]
        zone = f'Some("{t.tz}")' if t.tz else "None"
        return f"arrow_cast('{text}', 'Timestamp({unit}, {zone})')"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return "X'" + bytes(value).hex() + "'"
    return "'" + str(value).replace("'", "''") + "'"


def to_sql(pred: Pred, types: dict[str, pa.DataType], dialect: str = "datafusion") -> str:
    """``pred`` as SQL over columns whose types are ``types``; raises :class:`NotRenderable`
    when a literal has no form in ``dialect``."""
    if isinstance(pred, Const):
        return "TRUE" if pred.value else "FALSE"
    if isinstance(pred, And | Or):
        sep = " AND " if isinstance(pred, And) else " OR "
        return "(" + sep.join(to_sql(p, types, dialect) for p in pred.parts) + ")"
    if isinstance(pred, Cmp):
        value = sql_literal(pred.value, types[pred.column], dialect)
        return f"{quote_ident(pred.column)} {pred.op} {value}"
    if isinstance(pred, InSet):
        if not pred.values:
            return "TRUE" if pred.negated else "FALSE"
        items = ", ".join(sql_literal(v, types[pred.column], dialect) for v in pred.values)
        return f"{quote_ident(pred.column)} {'NOT IN' if pred.negated else 'IN'} ({items})"
    if isinstance(pred, IsNull):
        return f"{quote_ident(pred.column)} IS {'NOT NULL' if pred.negated else 'NULL'}"
    if isinstance(pred, Like):
        pattern = "'" + pred.pattern.replace("'", "''") + "'"
        return f"{quote_ident(pred.column)} {'NOT LIKE' if pred.negated else 'LIKE'} {pattern}"
    if isinstance(pred, IsNan):
        return f"{'NOT ' if pred.negated else ''}isnan({quote_ident(pred.column)})"
    return "TRUE"  # unknown conditions never prune
