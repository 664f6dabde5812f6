"""Pruning by table statistics: whether any row of a table version can satisfy a filter, judged
from what the manifest records of its rows (:mod:`..manifest.stats`) alone.

The filter is the planner's predicate tree over source columns (negation normal form; what it
cannot read is already dropped, keeping every table). A table is skipped only when the
statistics prove that no row matches; anything unknown keeps it. Comparisons follow the
engines that read the rows (DataFusion and Lance alike): NULL matches no comparison, NaN is
greater than every number and equal to itself, ``-0.0`` equals ``0.0``."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from ..expr.predicates import And, Cmp, Const, InSet, IsNan, IsNull, Like, Or, Pred
from ..manifest.stats import ColumnStats, TableStats, family, key_of


@dataclass(frozen=True)
class StatsPruner:
    """Judges tables by their statistics for one predicate over a namespace schema (with
    field ids): which columns it names and the comparable keys of its literals are worked
    out once."""

    pred: Pred
    ids: Mapping[str, int]  # column name -> field id
    types: Mapping[str, pa.DataType]

    @classmethod
    def of(cls, pred: Pred, schema: pa.Schema) -> StatsPruner | None:
        """The pruner of ``pred`` (None when it names no column: statistics cannot help)."""
        from ..schema.arrow_json import field_id

        ids = {f.name: fid for f in schema if (fid := field_id(f)) is not None}
        types = {f.name: f.type for f in schema}
        if not _columns(pred):
            return None
        return cls(pred, ids, types)

    def may_match(self, stats: TableStats | None) -> bool:
        """Whether a row of the table these statistics describe may satisfy the predicate
        (True when they are None)."""
        if stats is None:
            return True
        if stats.rows == 0:
            return False
        try:
            return self._may(self.pred, stats)
        except (TypeError, ValueError, ArithmeticError, pa.ArrowException):
            return True  # a comparison that cannot be made proves nothing

    def _may(self, pred: Pred, stats: TableStats) -> bool:
        if isinstance(pred, Const):
            return pred.value
        if isinstance(pred, And):
            return all(self._may(p, stats) for p in pred.parts)
        if isinstance(pred, Or):
            return any(self._may(p, stats) for p in pred.parts)
        if not isinstance(pred, Cmp | InSet | IsNull | IsNan | Like):
            return True  # a condition pruning cannot read
        fid = self.ids.get(pred.column)
        column = None if fid is None else stats.columns.get(fid)
        if column is None:
            return True
        t = self.types[pred.column]
        if isinstance(pred, IsNull):
            return _may_be_null(column, stats.rows, pred.negated)
        if isinstance(pred, IsNan):
            return _may_be_nan(column, stats.rows, pred.negated)
        if _all_null(column, stats.rows):
            return False  # NULL matches no comparison, IN or LIKE
        rows = stats.rows
        if isinstance(pred, Cmp):
            return _may_compare(column, rows, pred.op, key_of(pred.value, t), t)
        if isinstance(pred, InSet):
            keys = [key_of(v, t) for v in pred.values]
            if pred.negated:
                return all(_may_compare(column, rows, "!=", k, t) for k in keys)
            return any(_may_compare(column, rows, "=", k, t) for k in keys)
        return _may_be_like(column, pred, t)


def _columns(pred: Pred) -> set[str]:
    if isinstance(pred, And | Or):
        return set().union(*(_columns(p) for p in pred.parts))
    column = getattr(pred, "column", None)
    return {column} if isinstance(column, str) else set()


def _all_null(column: ColumnStats, rows: int) -> bool:
    return column.nulls_exact and column.nulls == rows


def _no_nan(column: ColumnStats) -> bool:
    """Whether the column certainly holds no NaN (a count of at most 0 says so too)."""
    return column.nans == 0


def _may_be_null(column: ColumnStats, rows: int, negated: bool) -> bool:
    if negated:  # IS NOT NULL: some row is not NULL
        return not _all_null(column, rows)
    return column.nulls != 0


def _may_be_nan(column: ColumnStats, rows: int, negated: bool) -> bool:
    if not negated:  # isnan(col)
        return not _no_nan(column)
    # NOT isnan(col): some row neither NULL nor NaN
    if column.nulls is None or column.nans is None:
        return True
    exact = column.nulls_exact and column.nans_exact
    return not (exact and column.nulls + column.nans == rows)


def _may_compare(column: ColumnStats, rows: int, op: str, key: Any, t: pa.DataType) -> bool:
    """Whether a value of the column (of a table of ``rows`` rows) may satisfy
    ``value op key``."""
    floating = family(t) == "float"
    if floating and isinstance(key, float) and math.isnan(key):
        # NaN is above every number and equal to itself
        if op in ("=", ">="):
            return not _no_nan(column)
        return op != ">"
    if floating and not _no_nan(column) and op in (">", ">=", "!="):
        return True  # a NaN row is greater than (and not equal to) any number
    if not column.bounded:
        # no bounds: unknown, or no value but NULLs and NaNs (then nothing else compares)
        return not column.values_known(rows)
    lower, upper = column.lower, column.upper
    if lower is None:
        return True
    if op == "=":
        return not (key < lower or (upper is not None and key > upper))
    if op == "!=":
        return not (upper is not None and lower == upper == key)
    if op == "<":
        return bool(lower < key)
    if op == "<=":
        return bool(lower <= key)
    if upper is None:
        return True
    if op == ">":
        return bool(upper > key)
    return bool(upper >= key)  # >=


def _may_be_like(column: ColumnStats, pred: Like, t: pa.DataType) -> bool:
    """``col LIKE 'prefix%...'``: the values must start with the prefix."""
    if pred.negated or family(t) != "string" or not column.bounded or column.lower is None:
        return True
    prefix = _like_prefix(pred.pattern)
    if not prefix:
        return True
    if column.upper is not None and column.upper < prefix:
        return False  # every value sorts before the prefix
    past = _successor(prefix)
    return past is None or column.lower < past  # else every value sorts after them all


_WILDCARD = re.compile(r"[%_\\]")


def _like_prefix(pattern: str) -> str:
    """The literal characters a LIKE pattern starts with (up to its first wildcard)."""
    found = _WILDCARD.search(pattern)
    return pattern if found is None else pattern[: found.start()]


def _successor(prefix: str) -> str | None:
    """The smallest string greater than every string starting with ``prefix`` (None when
    there is none)."""
    for i in range(len(prefix) - 1, -1, -1):
        code = ord(prefix[i]) + 1
        if 0xD800 <= code <= 0xDFFF:
            code = 0xE000
        if code <= 0x10FFFF:
            return prefix[:i] + chr(code)
    return None


__all__ = ["StatsPruner"]
