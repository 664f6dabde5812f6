"""Row filters: parsing a DataFusion SQL predicate (or ``(column, op, value)`` tuples) into
DataFusion's expression tree, and extracting the value constraints pruning can use."""

from __future__ import annotations

import datetime as dt
import decimal
import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import datafusion as dfn
import datafusion.unparser as dfn_unparser
import pyarrow as pa
from datafusion.common import RexType

from ..errors import FilterError, clean_message

FilterLike = str | tuple[str, str, Any] | Sequence[tuple[str, str, Any]] | None
_OPS = {"=", "==", "!=", "<>", "<", "<=", ">", ">=", "in", "not in", "is null", "is not null"}
_TABLE = "__dlp_filter"


def error_text(error: BaseException | str) -> str:
    """An error's message as people are shown it: without Lance's Rust source locations or the
    name of the internal table filters are parsed over (which DataFusion puts in its messages)."""
    text = clean_message(error).replace(f"{_TABLE}.", "")
    return text or (type(error).__name__ if isinstance(error, BaseException) else "")


def first_line(error: BaseException) -> str:
    """The first line of an error's message as people are shown it (:func:`error_text`)."""
    return (error_text(error).splitlines() or [type(error).__name__])[0]


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


def _one_tuple(filter: object) -> bool:
    """Whether ``filter`` is one ``(column, op, value)`` tuple rather than a list of them."""
    return (
        isinstance(filter, tuple)
        and len(filter) == 3
        and isinstance(filter[0], str)
        and isinstance(filter[1], str)
        and filter[1].lower().strip() in _OPS
    )


def to_sql(filter: FilterLike) -> str | None:
    """The filter as one DataFusion SQL predicate string (None when there is no filter)."""
    if filter is None:
        return None
    if isinstance(filter, str):
        return filter.strip() or None
    if _one_tuple(filter):
        filter = [filter]  # type: ignore[list-item]
    if not isinstance(filter, Sequence):
        raise FilterError(
            f"a filter is a SQL string or a list of (column, op, value) tuples, got {filter!r}"
        )
    parts = []
    for item in filter:
        if not isinstance(item, tuple | list) or len(item) != 3:
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


@dataclass(frozen=True)
class _Planned:
    """DataFusion's plans of ``SELECT 1 FROM <table> WHERE (<filter>)`` for a checked filter."""

    logical: Any
    optimized: Any


def _planned(sql: str, schema: pa.Schema) -> _Planned:
    """The plans of ``sql`` as the one predicate of a query over ``schema``; raises
    :class:`FilterError` for anything else (statement clauses, comments, several statements,
    subqueries, aggregate or window functions, placeholders, unbalanced text)."""
    try:
        words = _lex(sql)
    except _Refusal as r:
        raise _refused(sql, r.what) from None
    ctx = _context(schema)
    try:
        # in parentheses the grammar takes one expression, so a trailing clause cannot parse
        df = ctx.sql(f"SELECT 1 FROM {_TABLE} WHERE ({sql})")
        logical = df.logical_plan()
    except Exception as e:
        clause = _clause(words) or _aggregate(ctx, sql, schema)
        if clause:
            raise _refused(sql, f"{clause} is not allowed") from None
        raise FilterError(f"invalid filter {sql!r}: {_planning_problem(sql, e)}") from None
    _check_shape(sql, logical)
    try:
        optimized = df.optimized_logical_plan()
    except Exception as e:
        raise FilterError(f"invalid filter {sql!r}: {_first_line(e)}") from None
    _check_nodes(sql, optimized)
    return _Planned(logical, optimized)


# what _planned puts before the filter (DataFusion's parser positions count it on line 1)
_WRAPPED = f"SELECT 1 FROM {_TABLE} WHERE ("
_PARSER_AT = re.compile(r'ParserError\("(.*) at Line: (\d+), Column: (\d+)"\)')
_NO_FIELD = re.compile(r"No field named (\"[^\"]+\"|[^\s.\"]+)\.(?:\s|$)")
_VALUE_BEFORE = re.compile(r"(?:[=<>]|\bLIKE|\bILIKE|\bBETWEEN|\bIN\s*\([^()]*)\s*$", re.IGNORECASE)


def _planning_problem(sql: str, e: Exception) -> str:
    """DataFusion's complaint about the filter ``sql``, in terms of the text the caller wrote: a
    parser position counted in ``sql`` (not in the query wrapped around it), and an unknown
    name written where a value goes (``origin = JFK``) explained as an unquoted string."""
    text = _first_line(e)
    parsed = _PARSER_AT.search(text)
    if parsed is not None:
        what, line, column = parsed.group(1), int(parsed.group(2)), int(parsed.group(3))
        lines = sql.split("\n")
        if line == 1:
            column -= len(_WRAPPED)
        expected = re.fullmatch(r"Expected: (.*), found: (.*)", what)
        if expected is not None:
            token = f"`{expected.group(2)}`"
            if line >= len(lines) and column > len(lines[-1]):  # the parenthesis of the wrap
                token = "the end of the filter"
            what = f"expected {expected.group(1)}, found {token}"
        where = f"column {column}" if len(lines) == 1 else f"line {line}, column {column}"
        return f"syntax error at {where}: {what}"
    unknown = _NO_FIELD.search(text)
    if unknown is None or "Did you mean" in text:
        return text
    name = unknown.group(1)
    quoted = name.startswith('"')
    pattern = re.escape(name) if quoted else rf"(?<![\w\"'`]){re.escape(name)}(?![\w\"'`])"
    found = re.search(pattern, sql, 0 if quoted else re.IGNORECASE)
    if found is None or _VALUE_BEFORE.search(sql[: found.start()]) is None:
        return text
    written = found.group(0)
    value = written.strip('"').replace("'", "''")
    how = "double quotes name a column" if quoted else "an unquoted word names a column"
    return f"no column named {written} ({how}; write a string value in single quotes: '{value}')"


@functools.lru_cache(maxsize=256)
def _checked(sql: str, schema: pa.Schema) -> _Planned:
    return _planned(sql, schema)


def check(sql: str, schema: pa.Schema) -> None:
    """Raise :class:`FilterError` unless ``sql`` is a single predicate over ``schema``."""
    _checked(sql, schema)


@functools.lru_cache(maxsize=256)
def filter_columns(sql: str, schema: pa.Schema) -> tuple[str, ...]:
    """The columns of ``schema`` that the filter ``sql`` reads, in schema order (none for a
    filter DataFusion finds constant); raises :class:`FilterError` as :func:`check` does."""
    for node in _nodes(_checked(sql, schema).optimized):
        variant = node.to_variant()
        if type(variant).__name__ == "TableScan":
            read = {name for _, name in variant.projection()}
            return tuple(f.name for f in schema if f.name in read)
    return ()


_OTHER_TABLE = re.compile(r'No field named ("[^"]+"|[^\s."]+)\.(?=\S)')


@functools.lru_cache(maxsize=256)
def check_row_expression(sql: str, schema: pa.Schema, label: str) -> None:
    """Raise :class:`FilterError` unless ``sql`` is one scalar expression over a single row of
    ``schema`` (what ``update`` sets a column to; ``label`` names it in the message).

    Refused, as in filters: subqueries (they would read the table the expression is evaluated
    on: one partition table), aggregate and window functions (computed over one partition's
    rows, not the namespace's), UNNEST (it changes the number of rows), references to other
    tables, statement clauses, comments, several statements. An expression that does not plan
    for another reason (an unknown column, a type error) is not refused here: the caller
    evaluates it and names the error."""

    def refused(what: str) -> FilterError:
        return FilterError(
            f"{label} {sql!r} is not a scalar row expression: {what} (an update computes "
            "each row's new value from the columns of that row only)"
        )

    try:
        words = _lex(sql)
    except _Refusal as r:
        raise refused(r.what) from None
    ctx = _context(schema)
    try:
        df = ctx.sql(f"SELECT ({sql}) AS __dlp_value FROM {_TABLE}")
        plan = df.logical_plan()
    except Exception as e:
        other = _OTHER_TABLE.search(str(e))
        what = _clause(words) or _aggregate(ctx, sql, schema)
        if what is None and other is not None:
            what = f"a reference to table {other.group(1).strip(chr(34))!r}"
        if what:
            raise refused(f"{what} is not allowed") from None
        return
    kinds = [type(node.to_variant()).__name__ for node in _nodes(plan)]
    if kinds != ["Projection", "TableScan"]:
        node = next((k for k in kinds if k in _REFUSED_NODES), None)
        what = _REFUSED_NODES[node] if node else "plan " + " / ".join(kinds)
        raise refused(f"{what} is not allowed")
    for expr in plan.to_variant().projections():
        found = _refused_expr(expr)
        if found:
            raise refused(f"{found} is not allowed")
    try:
        optimized = df.optimized_logical_plan()
    except Exception:
        return
    for node in _nodes(optimized):
        kind = type(node.to_variant()).__name__
        if kind in _REFUSED_NODES:
            raise refused(f"{_REFUSED_NODES[kind]} is not allowed")


@functools.lru_cache(maxsize=256)
def parse(sql: str, schema: pa.Schema) -> dfn.Expr:
    """Parse ``sql`` as a predicate over ``schema`` with DataFusion; raises :class:`FilterError`."""
    plans = _checked(sql, schema)
    pred = _find_filter(plans.optimized)  # literals typed by DataFusion
    if pred is None:
        # the optimiser removes a filter that is constant (always true, or never)
        pred = _find_filter(plans.logical)
        if pred is None:
            raise FilterError(f"invalid filter {sql!r}")
    return pred


@functools.lru_cache(maxsize=256)
def to_lance_sql(sql: str, schema: pa.Schema) -> str:
    """The predicate re-emitted by DataFusion in the dialect Lance's scanner reads (identifiers
    in backticks, since Lance takes double quotes as string literals)."""
    plan = _checked(sql, schema).optimized
    try:
        text = dfn_unparser.Unparser(dfn_unparser.Dialect.mysql()).plan_to_sql(plan)
    except Exception as e:  # e.g. binary literals, which the unparser cannot write
        raise FilterError(f"cannot translate filter {sql!r} for the Lance scanner: {e}") from None
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
    if _SUB_MICROSECOND.search(text):
        # Lance reads a DATETIME literal to the microsecond: nanoseconds would be dropped
        raise FilterError(f"filter {sql!r} has a nanosecond timestamp; not pushed to Lance")
    return text


# a timestamp literal with a non-zero digit below the microsecond
_SUB_MICROSECOND = re.compile(r"'\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d\.\d{6}\d*[1-9]\d*'")


# -- what a filter may not be -----------------------------------------------------------------
# words that, outside literals and parentheses, start a statement clause (named in the error)
_CLAUSES = {
    "SELECT": "a SELECT statement",
    "WHERE": "the WHERE keyword",
    "GROUP": "a GROUP BY clause",
    "HAVING": "a HAVING clause",
    "ORDER": "an ORDER BY clause",
    "LIMIT": "a LIMIT clause",
    "OFFSET": "an OFFSET clause",
    "FETCH": "a FETCH clause",
    "UNION": "a UNION set operation",
    "INTERSECT": "an INTERSECT set operation",
    "EXCEPT": "an EXCEPT set operation",
    "MINUS": "a MINUS set operation",
    "JOIN": "a JOIN",
    "WINDOW": "a WINDOW clause",
    "QUALIFY": "a QUALIFY clause",
    "INTO": "an INTO clause",
}
# expressions that read other rows or other relations, or are not values
_REFUSED_EXPRS = {
    "InSubquery": "a subquery",
    "Exists": "a subquery",
    "ScalarSubquery": "a subquery",
    "SetComparison": "a subquery",
    "OuterReferenceColumn": "a subquery",
    "AggregateFunction": "an aggregate function",
    "WindowFunction": "a window function",
    "GroupingSet": "a grouping set",
    "Unnest": "UNNEST",
    "Wildcard": "a wildcard",
    "Placeholder": "a placeholder",
}
# plan nodes besides Projection / Filter / TableScan / EmptyRelation that change the row set
_REFUSED_NODES = {
    "Aggregate": "an aggregate function",
    "Window": "a window function",
    "Limit": "a LIMIT clause",
    "Sort": "an ORDER BY clause",
    "Union": "a UNION set operation",
    "Distinct": "a set operation",
    "Join": "a subquery",
    "CrossJoin": "a subquery",
    "Subquery": "a subquery",
    "SubqueryAlias": "a subquery",
    "Unnest": "UNNEST",
    "WindowExpr": "a window function",
    "RecursiveQuery": "a recursive query",
    "Values": "a VALUES list",
}


def _refused(sql: str, what: str) -> FilterError:
    return FilterError(
        f"filter {sql!r} is not a single predicate: {what} (a filter is one boolean SQL "
        "expression over the namespace's columns)"
    )


class _Refusal(Exception):
    """What makes a text no single SQL expression (raised by :func:`_lex`, worded by the
    caller)."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


def _context(schema: pa.Schema) -> dfn.SessionContext:
    """A DataFusion session holding one empty table of ``schema``, named ``_TABLE``."""
    ctx = dfn.SessionContext()
    empty = pa.RecordBatch.from_arrays([pa.array([], f.type) for f in schema], schema=schema)
    ctx.register_record_batches(_TABLE, [[empty]])
    return ctx


def _lex(sql: str) -> list[tuple[str, int]]:
    """The words of ``sql`` outside literals and quoted identifiers, upper-cased, with their
    parenthesis depth; raises :class:`_Refusal` for comments, semicolons, unterminated
    literals or identifiers and unbalanced parentheses (DataFusion's generic SQL dialect)."""
    words: list[tuple[str, int]] = []
    depth, i, n = 0, 0, len(sql)
    while i < n:
        ch = sql[i]
        if ch in "'\"`":
            i = _close(sql, i + 1, ch, backslash=False)
        elif ch == "$":
            i = _dollar(sql, i)
        elif ch.isalpha() or ch == "_":
            j = i + 1
            while j < n and (sql[j].isalnum() or sql[j] in "_$@#"):
                j += 1
            word = sql[i:j]
            if word in ("E", "e") and j < n and sql[j] == "'":
                i = _close(sql, j + 1, "'", backslash=True)  # E'...': backslash escapes
                continue
            words.append((word.upper(), depth))
            i = j
        elif sql.startswith("--", i):
            raise _Refusal("a comment (--) is not allowed")
        elif sql.startswith("/*", i):
            raise _Refusal("a comment (/* */) is not allowed")
        elif ch == ";":
            raise _Refusal("a semicolon (more than one statement) is not allowed")
        elif ch == "(":
            depth, i = depth + 1, i + 1
        elif ch == ")":
            depth, i = depth - 1, i + 1
            if depth < 0:
                raise _Refusal("unbalanced parentheses (a ')' closes nothing)")
        else:
            i += 1
    if depth:
        raise _Refusal(f"unbalanced parentheses ({depth} '(' not closed)")
    return words


def _close(sql: str, i: int, quote: str, backslash: bool) -> int:
    """The index after the ``quote`` closing the literal or identifier whose text starts at
    ``i`` (a doubled quote is one quote character)."""
    n = len(sql)
    while i < n:
        ch = sql[i]
        if backslash and ch == "\\":
            i += 2
        elif ch != quote:
            i += 1
        elif i + 1 < n and sql[i + 1] == quote:
            i += 2
        else:
            return i + 1
    kind = "string literal" if quote == "'" else "quoted identifier"
    raise _Refusal(f"unterminated {kind} ({quote} not closed)")


def _dollar(sql: str, i: int) -> int:
    """The index after a ``$tag$...$tag$`` string or a ``$name`` placeholder starting at ``i``."""
    j = i + 1
    while j < len(sql) and (sql[j].isalnum() or sql[j] == "_"):
        j += 1
    if j >= len(sql) or sql[j] != "$":
        return j  # a placeholder: refused once planned
    tag = sql[i : j + 1]
    end = sql.find(tag, j + 1)
    if end < 0:
        raise _Refusal(f"unterminated dollar-quoted string ({tag} not closed)")
    return end + len(tag)


def _clause(words: list[tuple[str, int]]) -> str | None:
    """The statement clause ``words`` hold outside parentheses (else a subquery), if any."""
    for word, depth in words:
        if depth == 0 and word in _CLAUSES:
            return _CLAUSES[word]
    if any(word == "SELECT" for word, _ in words):
        return "a subquery"
    return None


def _aggregate(ctx: dfn.SessionContext, sql: str, schema: pa.Schema) -> str | None:
    """The aggregate or window function ``sql`` calls (which DataFusion refuses in WHERE)."""
    # grouped by every column, a select list may mix aggregates with plain column references
    group_by = ", ".join(quote_ident(name) for name in schema.names)
    try:
        plan = ctx.sql(f"SELECT ({sql}) FROM {_TABLE} GROUP BY {group_by}").logical_plan()
    except Exception:
        return None
    for node in _nodes(plan):
        variant = node.to_variant()
        kind = type(variant).__name__
        if kind == "Aggregate" and variant.aggregate_exprs():
            names = sorted({e.schema_name().split("(")[0] for e in variant.aggregate_exprs()})
            return f"an aggregate function ({', '.join(names)})"
        if kind in ("Window", "WindowExpr"):
            return "a window function"
    return None


def _nodes(plan: Any) -> list[Any]:
    out = [plan]
    for child in plan.inputs():
        out.extend(_nodes(child))
    return out


def _check_shape(sql: str, plan: Any) -> None:
    """Refuse a plan other than Projection over Filter over the table scan, or a predicate
    with subqueries, aggregate or window functions, or placeholders."""
    kinds = [type(node.to_variant()).__name__ for node in _nodes(plan)]
    if kinds != ["Projection", "Filter", "TableScan"]:
        other = next((k for k in kinds if k in _REFUSED_NODES), None)
        what = _REFUSED_NODES[other] if other else "plan " + " / ".join(kinds)
        raise _refused(sql, f"{what} is not allowed")
    refused = _refused_expr(plan.inputs()[0].to_variant().predicate())
    if refused:
        raise _refused(sql, f"{refused} is not allowed")


def _refused_expr(expr: dfn.Expr) -> str | None:
    """What in ``expr`` a filter may not hold, if anything."""
    name = expr.variant_name()
    if name in _REFUSED_EXPRS:
        return _REFUSED_EXPRS[name]
    rex = expr.rex_type()
    if rex == RexType.Alias:
        return _refused_expr(expr.to_variant().expr())
    if rex != RexType.Call:
        return None if rex in (RexType.Literal, RexType.Reference) else f"expression {name}"
    try:
        operands = expr.rex_call_operands()
    except Exception:
        return f"expression {name}"
    for operand in operands:
        found = _refused_expr(operand)
        if found:
            return found
    return None


def _check_nodes(sql: str, plan: Any) -> None:
    """Refuse an optimised plan that joins, aggregates, sorts or limits (a decorrelated
    subquery, say): the filter then is not a predicate on each row alone."""
    for node in _nodes(plan):
        kind = type(node.to_variant()).__name__
        if kind in _REFUSED_NODES:
            raise _refused(sql, f"{_REFUSED_NODES[kind]} is not allowed")


def _first_line(e: Exception) -> str:
    return first_line(e)


def _find_filter(plan: Any) -> dfn.Expr | None:
    variant = plan.to_variant()
    if type(variant).__name__ == "Filter":
        return cast(dfn.Expr, variant.predicate())
    for child in plan.inputs():
        found = _find_filter(child)
        if found is not None:
            return found
    return None


def literal_value(expr: dfn.Expr, target: pa.DataType) -> tuple[bool, Any]:
    """(ok, value cast to ``target``) for a literal expression, else (False, None)."""
    kind = expr.variant_name()  # not every kind converts with to_variant (function calls)
    if kind == "Cast":
        return literal_value(expr.to_variant().expr(), target)
    if kind != "Literal":
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
