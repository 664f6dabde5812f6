"""Range and list partitioning as partition *expressions* (``CASE WHEN`` over ``col0``), so
they stay inside the partitioning spec: any reader that evaluates DataFusion SQL understands them.

Range: ``bounds`` are exclusive upper bounds; ``n`` bounds make ``n + 1`` partitions labelled
``p0 .. pn`` (zero-padded so labels sort in range order)::

    CASE WHEN col0 IS NULL THEN NULL
         WHEN col0 < DATE '2017-01-01' THEN 'p0'
         WHEN col0 < DATE '2018-01-01' THEN 'p1'
         ELSE 'p2' END

List: each group's label for its values, a default label (or NULL) for the rest::

    CASE WHEN col0 IS NULL THEN NULL
         WHEN col0 IN ('China', 'India') THEN 'asia'
         ELSE 'other' END

NULL source values go to the NULL partition, unless a list group lists ``None``.
"""

from __future__ import annotations

import datetime as dt
import decimal
import itertools
import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from ..errors import SpecError

DEFAULT_LABEL = "default"


def _kind(value: Any) -> str:
    """The literal family of a bound / list value (values of one field must share it)."""
    if isinstance(value, pa.Scalar):
        value = value.as_py()
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, numbers.Real) and not isinstance(value, decimal.Decimal):
        return "number"
    if isinstance(value, decimal.Decimal):
        return "number"
    if isinstance(value, dt.datetime):
        return "timestamp" if value.tzinfo is None else "timestamptz"
    if isinstance(value, dt.date):
        return "date"
    if isinstance(value, str):
        return "string"
    raise SpecError(
        f"cannot partition by {value!r} ({type(value).__name__}): use int, float, Decimal, "
        "date, datetime, str or bool values"
    )


def sql_literal(value: Any) -> str:
    """A DataFusion SQL literal of ``value``, typed (``DATE '...'``, ``TIMESTAMP '...'``, ...)."""
    if isinstance(value, pa.Scalar):
        value = value.as_py()
    kind = _kind(value)
    if kind == "bool":
        return "TRUE" if value else "FALSE"
    if isinstance(value, decimal.Decimal):
        if not value.is_finite():
            raise SpecError(f"cannot partition by the non-finite decimal {value}")
        text = format(value, "f")
        digits = text.lstrip("-").replace(".", "").lstrip("0") or "0"
        scale = len(text.split(".", 1)[1]) if "." in text else 0
        precision = max(len(digits), scale, 1)
        if precision > 38:
            raise SpecError(f"decimal bound {value} has more than 38 digits")
        return f"CAST('{text}' AS DECIMAL({precision}, {scale}))"
    if kind == "number":
        if isinstance(value, numbers.Integral):
            return str(int(value))
        number = float(value)
        if not math.isfinite(number):
            raise SpecError(f"cannot partition by the non-finite number {value}")
        return repr(number)
    if kind == "timestamptz":
        utc = value.astimezone(dt.UTC).replace(tzinfo=None)
        return f"TIMESTAMP '{utc.isoformat(sep='T')}+00:00'"
    if kind == "timestamp":
        return f"TIMESTAMP '{value.isoformat(sep='T')}'"
    if kind == "date":
        return f"DATE '{value.isoformat()}'"
    return _string(value)


def _string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _check_labels(labels: Sequence[str], what: str) -> None:
    for label in labels:
        if not isinstance(label, str) or not label:
            raise SpecError(f"{what}: partition labels must be non-empty strings, got {label!r}")


def _same_kind(values: Sequence[Any], what: str) -> str:
    kinds = {_kind(v) for v in values}
    if len(kinds) > 1:
        raise SpecError(f"{what}: values mix {' and '.join(sorted(kinds))} literals")
    return kinds.pop()


def range_labels(count: int) -> list[str]:
    """Default labels of ``count`` range partitions: ``p0 .. p<count-1>``, zero-padded."""
    width = len(str(count - 1))
    return [f"p{i:0{width}d}" for i in range(count)]


def range_expression(bounds: Sequence[Any], labels: Sequence[str] | None = None) -> str:
    """The ``CASE WHEN`` expression over ``col0`` for exclusive upper ``bounds``."""
    what = "range partitioning"
    bounds = [b.as_py() if isinstance(b, pa.Scalar) else b for b in bounds]
    if not bounds:
        raise SpecError(f"{what}: needs at least one bound")
    if any(b is None for b in bounds):
        raise SpecError(f"{what}: a bound cannot be None")
    _same_kind(bounds, what)
    for lo, hi in itertools.pairwise(bounds):
        try:
            increasing = lo < hi
        except TypeError as e:
            raise SpecError(f"{what}: cannot compare bounds {lo!r} and {hi!r}: {e}") from None
        if not increasing:
            raise SpecError(f"{what}: bounds must be strictly increasing, got {lo!r} then {hi!r}")
    labels = list(labels) if labels is not None else range_labels(len(bounds) + 1)
    if len(labels) != len(bounds) + 1:
        raise SpecError(
            f"{what}: {len(bounds)} bound(s) make {len(bounds) + 1} partitions, "
            f"got {len(labels)} label(s)"
        )
    _check_labels(labels, what)
    if len(set(labels)) != len(labels):
        raise SpecError(f"{what}: labels repeat: {labels}")
    whens = " ".join(
        f"WHEN col0 < {sql_literal(b)} THEN {_string(label)}"
        for b, label in zip(bounds, labels, strict=False)
    )
    return f"CASE WHEN col0 IS NULL THEN NULL {whens} ELSE {_string(labels[-1])} END"


def list_expression(
    groups: Mapping[str, Sequence[Any]], default: str | None = DEFAULT_LABEL
) -> str:
    """The ``CASE WHEN`` expression over ``col0`` mapping each group's values to its label."""
    what = "list partitioning"
    if not groups:
        raise SpecError(f"{what}: needs at least one group")
    _check_labels(list(groups), what)
    if default is not None:
        _check_labels([default], what)
    owner: dict[Any, str] = {}
    null_label: str | None = None
    listed: list[tuple[str, list[Any]]] = []
    for label, values in groups.items():
        if isinstance(values, str | bytes) or not isinstance(values, Sequence | set | frozenset):
            raise SpecError(f"{what}: group {label!r} must be a sequence of values, got {values!r}")
        values = [v.as_py() if isinstance(v, pa.Scalar) else v for v in values]
        if not values:
            raise SpecError(f"{what}: group {label!r} is empty")
        plain = []
        for v in values:
            if v is None:
                if null_label is not None and null_label != label:
                    raise SpecError(
                        f"{what}: groups must be disjoint; None is in {null_label!r} and {label!r}"
                    )
                null_label = label
                continue
            key = (_kind(v), v)
            if key in owner and owner[key] != label:
                raise SpecError(
                    f"{what}: groups must be disjoint; {v!r} is in {owner[key]!r} and {label!r}"
                )
            if key not in owner:
                owner[key] = label
                plain.append(v)
        listed.append((label, plain))
    _same_kind([v for _, vs in listed for v in vs], what)
    null_then = "NULL" if null_label is None else _string(null_label)
    parts = [f"CASE WHEN col0 IS NULL THEN {null_then}"]
    for label, values in listed:
        if values:
            parts.append(
                f"WHEN col0 IN ({', '.join(sql_literal(v) for v in values)}) THEN {_string(label)}"
            )
    parts.append(f"ELSE {'NULL' if default is None else _string(default)} END")
    return " ".join(parts)
