"""Partition specs whose calendar fields mix periods.

The date-part transforms are the spec's ``date_part``: ``month`` is the month of the year
(1-12), ``day`` the day of the month (1-31), ``hour`` the hour of the day (0-23). Alone they
group rows of many periods into one partition (``day(col)`` puts every 5th of every month
together), unlike the ``day`` of Iceberg and Delta, which is a date. A spec is checked when it
is created or a new spec version is made (:func:`warn_mixed_periods`); a spec whose calendar
fields name one period each (``year`` + ``month`` + ``day``, a window, an identity on the
column) passes, and specs read from storage are never checked."""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from types import FrameType

import pyarrow as pa

from ..errors import MixedCalendarPeriodsWarning
from .partition_spec import SpecField, source_names, source_types
from .transforms import ExpressionTransform, Granularity
from .windows import parse_window

# how fine the absolute period a column's fields determine is: smaller is finer
_YEAR, _MONTH, _WEEK, _DAY, _HOUR = 5, 4, 3, 2, 1
_UNKNOWN = 6
_WINDOW_RANK = {"month": _MONTH, "week": _WEEK, "day": _DAY, "hour": _HOUR}
# a date part and the absolute period its column must determine for it to name one period
_NEEDS = {Granularity.MONTH: _YEAR, Granularity.DAY: _MONTH, Granularity.HOUR: _DAY}
_MEANS = {
    Granularity.MONTH: ("the month of the year (1-12)", "that month of every year", "month"),
    Granularity.DAY: ("the day of the month (1-31)", "that day of every month", "day"),
    Granularity.HOUR: ("the hour of the day (0-23)", "that hour of every day", "hour"),
}
_WITHOUT = {
    Granularity.MONTH: "year({c})",
    Granularity.DAY: "year({c}) and month({c})",
    Granularity.HOUR: "year({c}), month({c}) and day({c})",
}
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@dataclass(frozen=True)
class MixedPeriods:
    """A date-part field that groups rows of many periods: ``field_id`` computes
    ``granularity`` of ``column`` (of type ``source_type``) without the coarser periods."""

    field_id: str
    column: str
    source_type: pa.DataType
    granularity: Granularity

    def message(self) -> str:
        """What the field does and the window field that gives one partition per period."""
        means, mixes, unit = _MEANS[self.granularity]
        c = self.column
        return (
            f"partition field {self.field_id!r}: {unit}({c}) is {means}, not a date; without "
            f"{_WITHOUT[self.granularity].format(c=c)} one partition holds {mixes}. For one "
            f"partition per {unit} use PartitionField.window({c!r}, TimeWindow({unit!r}), "
            f"{_type_text(self.source_type)})"
        )


def mixed_periods(fields: Sequence[SpecField], schema: pa.Schema) -> list[MixedPeriods]:
    """The date-part fields of a spec (resolved against ``schema``) whose column's other fields
    do not name the coarser periods, in spec order. A column that also has an identity field,
    or an expression that is no calendar window, is not judged."""
    by_column: dict[int, list[tuple[SpecField, pa.DataType]]] = {}
    for f in fields:
        if len(f.source_ids) == 1:
            by_column.setdefault(f.source_ids[0], []).append((f, source_types(f, schema)[0]))
    found: list[MixedPeriods] = []
    for column_fields in by_column.values():
        found += _column_problems(column_fields, schema)
    order = {f.field_id: i for i, f in enumerate(fields)}
    return sorted(found, key=lambda m: order[m.field_id])


def _column_problems(
    column_fields: list[tuple[SpecField, pa.DataType]], schema: pa.Schema
) -> list[MixedPeriods]:
    known = _UNKNOWN
    parts: dict[Granularity, SpecField] = {}
    for f, source in column_fields:
        if pa.types.is_null(source):
            return []  # a dropped column: nothing to judge
        transform = f.transform_for([source])
        if transform.is_identity:
            return []  # the value itself: every period is named
        if transform.granularity is not None:
            parts.setdefault(transform.granularity, f)
        elif isinstance(transform, ExpressionTransform):
            window = parse_window(transform.sql, source)
            if window is None:
                return []  # an expression this module cannot read
            known = min(known, _WINDOW_RANK[window.unit])
    if Granularity.YEAR in parts:
        known = min(known, _YEAR)
    found = []
    for granularity, reached in (
        (Granularity.MONTH, _MONTH),
        (Granularity.DAY, _DAY),
        (Granularity.HOUR, _HOUR),
    ):
        part = parts.get(granularity)
        if part is None:
            continue
        if known > _NEEDS[granularity]:
            name = source_names(part, schema)[0] or str(part.source_ids[0])
            found.append(
                MixedPeriods(part.field_id, name, source_types(part, schema)[0], granularity)
            )
        else:
            known = min(known, reached)
    return found


def warn_mixed_periods(fields: Sequence[SpecField], schema: pa.Schema) -> None:
    """Warn (:class:`MixedCalendarPeriodsWarning`, once for the spec) when date-part fields of
    the spec group rows of many periods, naming each and the window field to use instead."""
    found = mixed_periods(fields, schema)
    if found:
        warnings.warn(
            MixedCalendarPeriodsWarning("; ".join(m.message() for m in found)),
            stacklevel=_caller_level(),
        )


def _caller_level() -> int:
    """The ``stacklevel`` of the nearest frame outside this package (the caller's code)."""
    frame: FrameType | None = sys._getframe(1)
    level = 1
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(
        _PACKAGE_DIR + os.sep
    ):
        frame = frame.f_back
        level += 1
    return level


def _type_text(t: pa.DataType) -> str:
    """A pyarrow expression making the type ``t`` (``pa.timestamp('us', tz='UTC')``)."""
    if pa.types.is_timestamp(t):
        tz = f", tz={t.tz!r}" if t.tz else ""
        return f"pa.timestamp({t.unit!r}{tz})"
    if pa.types.is_date32(t):
        return "pa.date32()"
    if pa.types.is_date64(t):
        return "pa.date64()"
    return f"pa.{t}()"
