"""Filters naming partition field ids, rewritten over the source columns.

A filter such as ``time_hour_day = DATE '2013-01-01'`` names a partition field (here a daily
window over ``time_hour``), not a column. :func:`resolve_filter` replaces each such id by the
field's own expression over its source columns, so the filter selects exactly the rows of the
matching partitions; and, for identity, time-window and year fields, it puts the matching range
of the source column ahead of it, so the scan prunes partitions of every spec version."""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import pyarrow as pa

from ..errors import FilterError
from ..expr import filters
from ..expr.filters import FilterLike, first_line, parse, quote_ident
from ..expr.predicates import (
    TRUE,
    And,
    Cmp,
    Const,
    InSet,
    IsNull,
    Leaf,
    Like,
    NotRenderable,
    Or,
    Pred,
    conj,
    disj,
    from_datafusion,
    holds,
    to_sql,
)
from ..partitioning.describe import field_text, window_of
from ..partitioning.partition_spec import PartitionSpec, SpecField, source_names, source_types
from ..partitioning.transforms import ExpressionTransform, Granularity
from ..partitioning.windows import Span, window_span, year_span


class Namespace(Protocol):
    """What a filter is resolved against (a ``PartitionedNamespace``): its schema with field
    ids and every spec version."""

    @property
    def schema_with_ids(self) -> pa.Schema: ...

    @property
    def specs(self) -> list[PartitionSpec]: ...


@dataclasses.dataclass(frozen=True)
class _Named:
    """A partition field a filter may name, with its source columns."""

    field: SpecField
    names: list[str]
    types: list[pa.DataType]


@dataclasses.dataclass(frozen=True)
class ResolvedFilter:
    """A filter as given and as the core reads it (partition field ids replaced by what they
    stand for over the source columns)."""

    given: str | None
    sql: str | None  # selects (a superset of) the partitions holding matching rows
    fields: tuple[tuple[str, str], ...] = ()  # (field id, description) of the ids named
    partition_pred: Pred = TRUE  # the filter's conditions on field ids, over partition values
    rows_problem: str | None = None  # why ``sql`` does not select the matching rows exactly
    fields_only: bool = False  # every condition of the filter is on a field id

    def implied(self, values: dict[str, Any]) -> bool:
        """Whether every row of a partition with these values matches the filter: it names
        only partition fields, and these values satisfy it."""
        if not self.fields_only or any(fid not in values for fid, _ in self.fields):
            return False
        return holds(self.partition_pred, values) is True

    def keeps(self, values: dict[str, Any]) -> bool:
        """Whether a partition with these values may hold rows matching the filter (False
        only when its values of the named fields rule it out)."""
        if self.partition_pred == TRUE or any(fid not in values for fid, _ in self.fields):
            return True
        return holds(self.partition_pred, values) is True

    def row_filter(self) -> str | None:
        """The filter selecting exactly the matching rows (raises :class:`FilterError` when a
        named field's expression cannot be written as a filter)."""
        if self.rows_problem is not None:
            raise FilterError(self.rows_problem)
        return self.sql


def resolve_filter(ns: Namespace, given: str | None) -> ResolvedFilter:
    """``given`` with every partition field id it names (that is not also a column) rewritten
    (see :func:`resolved`), over ``ns``'s schema and spec versions."""
    return resolved(given, ns.schema_with_ids, tuple(ns.specs))


def row_filter(given: str | None, schema: pa.Schema, specs: Sequence[PartitionSpec]) -> str | None:
    """The filter ``given`` selecting exactly its rows over ``schema`` (with field ids) and the
    spec versions ``specs``: partition field ids it names read as what they stand for (see
    :func:`resolved`); raises :class:`FilterError` when a named field's expression cannot be
    written as a filter."""
    if not given or not given.strip():
        return None
    return resolved(given, schema, tuple(specs)).row_filter()


def namespace_row_filter(ns: Namespace, filter: FilterLike) -> str | None:
    """``filter`` (any filter the API takes) as SQL selecting exactly its rows in ``ns`` at the
    manifest version it reads (see :func:`row_filter`)."""
    return row_filter(filters.to_sql(filter), ns.schema_with_ids, ns.specs)


@functools.lru_cache(maxsize=256)
def resolved(
    given: str | None, schema: pa.Schema, specs: tuple[PartitionSpec, ...]
) -> ResolvedFilter:
    """``given`` with every partition field id it names (that is not also a column) rewritten:
    the field's own expression over its source columns (so rows are selected exactly), and,
    for identity, time-window and year fields, the matching range of the source column ahead
    of it (so the scan prunes partitions of every spec version). ``specs``: every spec
    version, oldest first."""
    sql = given.strip() if given else None
    if not sql:
        return ResolvedFilter(None, None)
    named = _nameable_fields(specs, schema)
    refs = [r for r in _identifiers(sql) if _reference(sql, r, named) is not None]
    if not refs:
        return ResolvedFilter(sql, sql)
    used: dict[str, _Named] = {}
    pieces, at = [], 0
    for start, end, name, quoted in refs:
        fid = _reference(sql, (start, end, name, quoted), named)
        assert fid is not None
        used.setdefault(fid, named[fid])
        pieces += [sql[at:start], "(" + _expression_sql(named[fid]) + ")"]
        at = end
    rows_sql = "".join(pieces) + sql[at:]
    extended = pa.schema(
        list(schema) + [pa.field(fid, n.field.result_type) for fid, n in used.items()]
    )
    pred = from_datafusion(parse(sql, extended), extended)  # raises FilterError when invalid
    hint = _source_hint(pred, used)
    try:
        hint_sql = None if hint == TRUE else to_sql(hint, {f.name: f.type for f in schema})
    except NotRenderable:
        hint_sql = None
    problem = _unfilterable(used, schema)
    if problem is None:
        rows_sql = f"({hint_sql}) AND ({rows_sql})" if hint_sql else rows_sql
    return ResolvedFilter(
        sql,
        hint_sql if problem else rows_sql,
        tuple((fid, field_text(n.field, schema)) for fid, n in used.items()),
        _on_fields(pred, set(used)),
        problem,
        _fields_only(pred, set(used)),
    )


def _unfilterable(used: dict[str, _Named], schema: pa.Schema) -> str | None:
    """Why a named field's expression cannot stand in a filter (e.g. a bucket's hash function,
    which only partitioning evaluates), if one cannot."""
    for fid, n in used.items():
        try:
            parse(f"({_expression_sql(n)}) IS NULL", schema)
        except FilterError as e:
            return (
                f"partition field {fid} ({field_text(n.field, schema)}) cannot select rows: "
                f"a filter cannot compute it ({first_line(e)}); filter on "
                f"{', '.join(n.names)} instead (`partitions --filter` can still list its "
                "partitions)"
            )
    return None


def _nameable_fields(specs: Sequence[PartitionSpec], schema: pa.Schema) -> dict[str, _Named]:
    """Field id -> field, for the ids of every spec version (the newest first) that are not
    column names and whose sources are all still columns."""
    out: dict[str, _Named] = {}
    for spec in sorted(specs, key=lambda s: s.spec_id, reverse=True):
        for f in spec.fields:
            if f.field_id in out or schema.get_field_index(f.field_id) >= 0:
                continue
            names = source_names(f, schema)
            if all(n is not None for n in names):
                out[f.field_id] = _Named(f, [n for n in names if n], source_types(f, schema))
    return out


Token = tuple[int, int, str, bool]  # start, end, identifier, whether quoted
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*")
_NUMBER = re.compile(r"[0-9][0-9A-Za-z_.]*")


def _identifiers(sql: str) -> list[Token]:
    """The identifiers of ``sql`` (bare words and quoted names) outside literals and comments."""
    out: list[Token] = []
    i, n = 0, len(sql)
    while i < n:
        c = sql[i]
        if c == "'":
            i = _close(sql, i, "'")
        elif c in '"`':
            end = _close(sql, i, c)
            out.append((i, end, sql[i + 1 : end - 1].replace(c * 2, c), True))
            i = end
        elif sql.startswith("--", i):
            j = sql.find("\n", i)
            i = n if j < 0 else j
        elif sql.startswith("/*", i):
            j = sql.find("*/", i + 2)
            i = n if j < 0 else j + 2
        elif (m := _WORD.match(sql, i)) is not None:
            out.append((i, m.end(), m.group(0), False))
            i = m.end()
        elif (m := _NUMBER.match(sql, i)) is not None:
            i = m.end()
        else:
            i += 1
    return out


def _close(sql: str, i: int, quote: str) -> int:
    """The index after the quoted text starting at ``i`` (a doubled quote stays inside)."""
    j = i + 1
    while j < len(sql):
        if sql[j] == quote:
            if sql.startswith(quote * 2, j):
                j += 2
                continue
            return j + 1
        j += 1
    return len(sql)


def _reference(sql: str, token: Token, named: dict[str, Any]) -> str | None:
    """The field id ``token`` names as a column of the filter, if it names one."""
    start, end, name, quoted = token
    fid = name if quoted else name.lower()  # SQL folds bare identifiers to lower case
    if fid not in named:
        return None
    before, after = sql[:start].rstrip(), sql[end:].lstrip()
    if before.endswith(".") or after.startswith(("(", ".")):
        return None  # a qualified name or a function
    if not quoted and after.startswith("'"):
        return None  # a typed literal such as DATE '...'
    return fid


def _expression_sql(n: _Named) -> str:
    """The field's SQL with ``col0, col1, ...`` replaced by its source column names."""
    sql = n.field.sql(n.types)
    out, at = [], 0
    for start, end, name, quoted in _identifiers(sql):
        m = re.fullmatch(r"col(\d+)", name)
        if not quoted and m and int(m.group(1)) < len(n.names):
            out += [sql[at:start], quote_ident(n.names[int(m.group(1))])]
            at = end
    return "".join(out) + sql[at:]


def _on_fields(pred: Pred, fields: set[str]) -> Pred:
    """``pred`` with every condition not on one of ``fields`` taken as possibly true."""
    if isinstance(pred, Const):
        return pred
    if isinstance(pred, And):
        return conj([_on_fields(p, fields) for p in pred.parts])
    if isinstance(pred, Or):
        return disj([_on_fields(p, fields) for p in pred.parts])
    return pred if getattr(pred, "column", None) in fields else TRUE


def _fields_only(pred: Pred, fields: set[str]) -> bool:
    """Whether every condition of ``pred`` is on one of ``fields`` (a condition the tree could
    not read is not)."""
    if isinstance(pred, Const):
        return True
    if isinstance(pred, And | Or):
        return all(_fields_only(p, fields) for p in pred.parts)
    return getattr(pred, "column", None) in fields


def _source_hint(pred: Pred, used: dict[str, _Named]) -> Pred:
    """A condition on source columns that every row matching ``pred`` meets: conditions on
    field ids become ranges of their source column where the field allows, else TRUE."""
    if isinstance(pred, Const):
        return pred
    if isinstance(pred, And):
        return conj([_source_hint(p, used) for p in pred.parts])
    if isinstance(pred, Or):
        return disj([_source_hint(p, used) for p in pred.parts])
    if not isinstance(pred, Cmp | InSet | IsNull | Like):
        return TRUE  # a condition pruning cannot read
    n = used.get(pred.column)
    if n is None:
        return pred
    try:
        return _leaf_hint(pred, n)
    except (ValueError, TypeError, OverflowError, ArithmeticError, pa.ArrowException):
        return TRUE


def _leaf_hint(leaf: Leaf, n: _Named) -> Pred:
    if len(n.names) != 1:
        return TRUE
    source, source_type = n.names[0], n.types[0]
    transform = n.field.transform_for(n.types)
    window = window_of(n.field, n.types)
    if isinstance(transform, ExpressionTransform) and window is None:
        return TRUE  # an expression: NULL in need not mean NULL out
    if isinstance(leaf, IsNull):
        return IsNull(source, leaf.negated)
    if transform.is_identity:
        return dataclasses.replace(leaf, column=source)
    span: Callable[[Any], Span | None]
    if window is not None and window.monotone(source_type):
        span = window_span(window, source_type)
    elif transform.granularity is Granularity.YEAR:
        span = year_span(source_type)
    else:
        return TRUE
    if isinstance(leaf, InSet):
        spans = [span(v) for v in leaf.values]
        if any(s is None for s in spans):
            return TRUE
        eq = [_in_span(source, s, leaf.negated) for s in spans if s is not None]
        return conj(eq) if leaf.negated else disj(eq)
    if not isinstance(leaf, Cmp):
        return TRUE
    s = span(leaf.value)
    if s is None:
        return TRUE
    lo, hi = s
    bounds: dict[str, Callable[[], Pred]] = {
        "=": lambda: _in_span(source, s, False),
        "!=": lambda: _in_span(source, s, True),
        "<": lambda: Cmp(source, "<", lo),
        "<=": lambda: Cmp(source, "<", hi),
        ">": lambda: Cmp(source, ">=", hi),
        ">=": lambda: Cmp(source, ">=", lo),
    }
    return bounds[leaf.op]()


def _in_span(column: str, span: Span, negated: bool) -> Pred:
    lo, hi = span
    if negated:
        return disj([Cmp(column, "<", lo), Cmp(column, ">=", hi)])
    return conj([Cmp(column, ">=", lo), Cmp(column, "<", hi)])
