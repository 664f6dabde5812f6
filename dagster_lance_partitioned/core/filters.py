"""Row filters: parsing a DataFusion SQL predicate (or ``(column, op, value)`` tuples) into
DataFusion's expression tree, and extracting the value constraints pruning can use."""

from __future__ import annotations

import datetime as dt
import decimal
import functools
from collections.abc import Sequence
from typing import Any

import datafusion as dfn
import datafusion.unparser as dfn_unparser
import pyarrow as pa

from .errors import PartitionedNamespaceError

FilterLike = str | Sequence[tuple[str, str, Any]] | None
_OPS = {"=", "==", "!=", "<>", "<", "<=", ">", ">=", "in", "not in", "is null", "is not null"}
_TABLE = "__dlp_filter"


class FilterError(PartitionedNamespaceError):
    """A filter does not parse, or names a column the namespace does not have."""


def sql_literal(value: Any) -> str:
    """``value`` as a DataFusion SQL literal (zoned datetimes as ISO strings, cast by the
    column they are compared with)."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int | float | decimal.Decimal):
        return repr(value) if not isinstance(value, decimal.Decimal) else str(value)
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            # a string DataFusion casts to the column's type: the instant survives any zone
            return "'" + value.isoformat() + "'"
        return f"TIMESTAMP '{value.isoformat()}'"
    if isinstance(value, dt.date):
        return f"DATE '{value.isoformat()}'"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    raise FilterError(f"cannot use {value!r} ({type(value).__name__}) in a filter")


def quote_ident(name: str) -> str:
    """An identifier quoted for DataFusion (and Lance) SQL."""
    return "`" + name.replace("`", "``") + "`"


def to_sql(filter: FilterLike) -> str | None:
    """The filter as one DataFusion SQL predicate string (None when there is no filter)."""
    if filter is None:
        return None
    if isinstance(filter, str):
        return filter.strip() or None
    parts = []
    for item in filter:
        if len(item) != 3:
            raise FilterError(f"filter tuples are (column, op, value), got {item!r}")
        col, op, value = item
        op_l = str(op).lower().strip()
        if op_l not in _OPS:
            raise FilterError(f"unknown filter operator {op!r} for column {col!r}")
        ident = quote_ident(col)
        if op_l in ("in", "not in"):
            values = ", ".join(sql_literal(v) for v in value)
            parts.append(f"{ident} {op_l.upper()} ({values})")
        elif op_l in ("is null", "is not null"):
            parts.append(f"{ident} {op_l.upper()}")
        else:
            sql_op = {"==": "=", "<>": "!="}.get(op_l, op_l)
            parts.append(f"{ident} {sql_op} {sql_literal(value)}")
    return " AND ".join(parts) if parts else None


def _plan(sql: str, schema: pa.Schema, optimized: bool = False) -> Any:
    ctx = dfn.SessionContext()
    empty = pa.RecordBatch.from_arrays([pa.array([], f.type) for f in schema], schema=schema)
    ctx.register_record_batches(_TABLE, [[empty]])
    try:
        df = ctx.sql(f"SELECT 1 FROM {_TABLE} WHERE {sql}")
        return df.optimized_logical_plan() if optimized else df.logical_plan()
    except Exception as e:
        raise FilterError(f"invalid filter {sql!r}: {_first_line(e)}") from None


@functools.lru_cache(maxsize=256)
def parse(sql: str, schema: pa.Schema) -> dfn.Expr:
    """Parse ``sql`` as a predicate over ``schema`` with DataFusion; raises :class:`FilterError`."""
    pred = _find_filter(_plan(sql, schema, optimized=True))  # literals typed by DataFusion
    if pred is None:
        # the optimiser removes a filter that is constant (always true, or never)
        pred = _find_filter(_plan(sql, schema))
        if pred is None:
            raise FilterError(f"invalid filter {sql!r}")
    return pred


@functools.lru_cache(maxsize=256)
def to_lance_sql(sql: str, schema: pa.Schema) -> str:
    """The predicate re-emitted by DataFusion in the dialect Lance's scanner reads (identifiers
    in backticks, since Lance takes double quotes as string literals)."""
    text = dfn_unparser.Unparser(dfn_unparser.Dialect.mysql()).plan_to_sql(
        _plan(sql, schema, optimized=True)
    )
    marker = f"FROM `{_TABLE}` WHERE "
    at = text.find(marker)
    if at < 0:
        raise FilterError(f"cannot translate filter {sql!r} for the Lance scanner")
    text = text[at + len(marker) :].replace(f"`{_TABLE}`.", "")
    zoned = [f.name for f in schema if pa.types.is_timestamp(f.type) and f.type.tz]
    if any(f"`{name}`" in text for name in zoned):
        # Lance's scanner misreads zoned timestamp literals (it drops the offset): such
        # filters are applied by DataFusion after reading instead
        raise FilterError(f"filter {sql!r} compares zoned timestamps; not pushed to Lance")
    return text


def _first_line(e: Exception) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


def _find_filter(plan: Any) -> dfn.Expr | None:
    variant = plan.to_variant()
    if type(variant).__name__ == "Filter":
        return variant.predicate()
    for child in plan.inputs():
        found = _find_filter(child)
        if found is not None:
            return found
    return None


def literal_value(expr: dfn.Expr, target: pa.DataType) -> tuple[bool, Any]:
    """(ok, value cast to ``target``) for a literal expression, else (False, None)."""
    if type(expr.to_variant()).__name__ == "Cast":
        return literal_value(expr.to_variant().expr(), target)
    if type(expr.to_variant()).__name__ != "Literal":
        return False, None
    try:
        value = expr.python_value()
    except Exception:
        return False, None
    if value is None:
        return True, None
    try:
        return True, pa.scalar(value).cast(target).as_py()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return False, None
