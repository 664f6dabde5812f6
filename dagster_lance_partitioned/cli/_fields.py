"""Partition fields as people name them: how each is described (time windows as windows, not
as their SQL), and filters naming a partition field id, rewritten over the source columns."""

from __future__ import annotations

import dataclasses
import datetime as dt
import re
import zoneinfo
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from ..core.errors import FilterError
from ..core.filters import parse, quote_ident
from ..core.namespace import PartitionedNamespace
from ..core.predicates import (
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
from ..core.spec import PartitionSpec, SpecField, source_names, source_types
from ..core.transforms import ExpressionTransform, Granularity
from ..core.windows import TimeWindow, parse_window, window_values
from ._output import first_line
from .errors import CliError

_WEEKDAYS = ("Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")


# -- descriptions -----------------------------------------------------------------------------
def window_of(f: SpecField, schema: pa.Schema) -> TimeWindow | None:
    """The calendar window a field's expression computes, when it is one."""
    if f.expression is None or len(f.source_ids) != 1:
        return None
    (source,) = source_types(f, schema)
    if pa.types.is_null(source):
        return None
    return parse_window(f.expression, source)


def _zoned(t: pa.DataType) -> bool:
    return pa.types.is_timestamp(t) and t.tz is not None


def window_text(window: TimeWindow, source: pa.DataType) -> str:
    """``day, America/New_York``; ``hour, UTC, starting at :30``; ``week, starting Monday``
    (a window over dates or naive timestamps reads them as wall-clock time: no zone shown)."""
    parts = [window.unit] + ([window.timezone] if _zoned(source) else [])
    start: list[str] = []
    if window.unit == "week" and window.day != 0:
        start.append(_WEEKDAYS[window.day])
    if window.unit == "month" and window.day != 1:
        start.append(f"day {window.day}")
    if window.unit == "hour" and window.minute_offset:
        start.append(f"at :{window.minute_offset:02d}")
    elif window.hour_offset or window.minute_offset:
        start.append(f"{window.hour_offset:02d}:{window.minute_offset:02d}")
    if start:
        parts.append("starting " + " ".join(start))
    return ", ".join(parts)


def transform_text(f: SpecField, schema: pa.Schema) -> str:
    """``identity``, ``bucket[16]``, ``window[day, America/New_York]`` or ``expression: <sql>``."""
    if f.transform is None:
        window = window_of(f, schema)
        if window is None:
            return f"expression: {f.expression}"
        return f"window[{window_text(window, source_types(f, schema)[0])}]"
    obj = f.transform.to_json()
    params = [str(v) for k, v in obj.items() if k != "type"]
    return str(obj["type"]) + (f"[{', '.join(params)}]" if params else "")


def source_labels(f: SpecField, schema: pa.Schema) -> list[str]:
    """The field's source columns by name (``#<id> (dropped)`` for ids no longer present)."""
    names = source_names(f, schema)
    return [
        n if n is not None else f"#{sid} (dropped)"
        for n, sid in zip(names, f.source_ids, strict=True)
    ]


def field_text(f: SpecField, schema: pa.Schema) -> str:
    """``year(event_date)``, ``window[day, UTC](time_hour)``, ``(<sql> over a, b)``."""
    sources = ", ".join(source_labels(f, schema))
    text = transform_text(f, schema)
    if text.startswith("expression: "):
        return f"({f.expression} over {sources})"
    return f"{text}({sources})"


def field_summary(f: SpecField, schema: pa.Schema) -> str:
    """``event_date_year=year(event_date)``, ``time_hour_day=window[day, UTC](time_hour)``."""
    return f"{f.field_id}={field_text(f, schema)}"


def field_doc(f: SpecField, schema: pa.Schema) -> dict[str, Any]:
    """A spec field as JSON: its stored form plus source names, type name, manifest column, a
    description and, for time windows, the window."""
    doc = f.to_json()
    doc["source_columns"] = source_names(f, schema)
    doc["result_type_name"] = str(f.result_type)
    doc["column"] = f.column
    doc["description"] = field_summary(f, schema)
    window = window_of(f, schema)
    doc["window"] = None if window is None else dataclasses.asdict(window)
    return doc


def spec_doc(spec: PartitionSpec, schema: pa.Schema, current: bool) -> dict[str, Any]:
    """A spec version as JSON."""
    return {
        "spec_id": spec.spec_id,
        "current": current,
        "draft": spec.draft,
        "fields": [field_doc(f, schema) for f in spec.fields],
    }


# -- filters on partition field ids -----------------------------------------------------------
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

    def keeps(self, values: dict[str, Any]) -> bool:
        """Whether a partition with these values may hold rows matching the filter (False
        only when its values of the named fields rule it out)."""
        if self.partition_pred == TRUE or any(fid not in values for fid, _ in self.fields):
            return True
        return holds(self.partition_pred, values) is True

    def row_filter(self) -> str | None:
        """The filter selecting exactly the matching rows (raises :class:`CliError` when a
        named field's expression cannot be written as a filter)."""
        if self.rows_problem is not None:
            raise CliError(self.rows_problem)
        return self.sql


def resolve_filter(ns: PartitionedNamespace, given: str | None) -> ResolvedFilter:
    """``given`` with every partition field id it names (that is not also a column) rewritten:
    the field's own expression over its source columns (so rows are selected exactly), and,
    for identity, time-window and year fields, the matching range of the source column ahead
    of it (so the scan prunes partitions of every spec version)."""
    sql = given.strip() if given else None
    if not sql:
        return ResolvedFilter(None, None)
    schema = ns.schema_with_ids
    named = _nameable_fields(ns, schema)
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


def _nameable_fields(ns: PartitionedNamespace, schema: pa.Schema) -> dict[str, _Named]:
    """Field id -> field, for the ids of every spec version (the current one first) that are
    not column names and whose sources are all still columns."""
    out: dict[str, _Named] = {}
    specs = [ns.current_spec] + [s for s in reversed(ns.specs) if s is not ns.current_spec]
    for spec in specs:
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
    window = _window_of_named(n)
    if isinstance(transform, ExpressionTransform) and window is None:
        return TRUE  # an expression: NULL in need not mean NULL out
    if isinstance(leaf, IsNull):
        return IsNull(source, leaf.negated)
    if transform.is_identity:
        return dataclasses.replace(leaf, column=source)
    if window is not None and window.monotone(source_type):
        span = _window_span(window, source_type)
    elif transform.granularity is Granularity.YEAR:
        span = _year_span(source_type)
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


def _window_of_named(n: _Named) -> TimeWindow | None:
    if n.field.expression is None or len(n.types) != 1:
        return None
    return parse_window(n.field.expression, n.types[0])


Span = tuple[Any, Any]  # [lo, hi) on the source column


def _in_span(column: str, span: Span, negated: bool) -> Pred:
    lo, hi = span
    if negated:
        return disj([Cmp(column, "<", lo), Cmp(column, ">=", hi)])
    return conj([Cmp(column, ">=", lo), Cmp(column, "<", hi)])


def _window_span(window: TimeWindow, source: pa.DataType) -> Callable[[Any], Any]:
    """value -> the source range of the window starting at ``value`` (None: no window does)."""

    def span(value: Any) -> Span | None:
        if window.unit == "hour":
            if not isinstance(value, dt.datetime):
                return None
            following: Any = value + dt.timedelta(hours=1)
        elif isinstance(value, dt.date) and not isinstance(value, dt.datetime):
            following = _next_day(value, window.unit)
        else:
            return None
        lo = window.start_value(value, source)
        if window_values(window, source, [lo]) != [value]:
            return None  # not the start of a window
        return lo, window.start_value(following, source)

    return span


def _next_day(day: dt.date, unit: str) -> dt.date:
    if unit == "day":
        return day + dt.timedelta(days=1)
    if unit == "week":
        return day + dt.timedelta(days=7)
    year, month = divmod(day.month, 12)  # the same day of the next month
    return day.replace(year=day.year + year, month=month + 1)


def _year_span(source: pa.DataType) -> Callable[[Any], Any]:
    """year -> the source range of that calendar year (in the column's zone when zoned)."""
    zone: dt.tzinfo | None = None
    if _zoned(source):
        zone = _tzinfo(source.tz)
        if zone is None:
            return lambda value: None

    def start(year: int) -> Any:
        if pa.types.is_date(source):
            return dt.date(year, 1, 1)
        if pa.types.is_timestamp(source):
            return dt.datetime(year, 1, 1, tzinfo=zone)
        raise TypeError(str(source))

    def span(value: Any) -> Span | None:
        if not isinstance(value, int) or not 1 <= value < 9999:
            return None
        return start(value), start(value + 1)

    return span


def _tzinfo(name: str) -> dt.tzinfo | None:
    m = re.fullmatch(r"([+-])(\d\d):?(\d\d)", name)
    if m:
        minutes = int(m.group(2)) * 60 + int(m.group(3))
        return dt.timezone(dt.timedelta(minutes=-minutes if m.group(1) == "-" else minutes))
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return None
