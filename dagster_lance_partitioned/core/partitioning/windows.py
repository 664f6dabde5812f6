"""Calendar time windows (hourly, daily, weekly, monthly, in any time zone, with offsets) as
partition *expressions*: each row's partition value is the start of the window holding it.

Values: for daily, weekly and monthly windows the local calendar date the window starts on
(``date32``); for hourly windows on a zoned timestamp the start instant (``timestamp[us, tz]``,
so the repeated hour of a DST fall-back is two partitions); for hourly windows on a naive
timestamp the local wall-clock start (``timestamp[us]``). Naive timestamps and dates are read
as wall-clock time in the window's zone.

The expressions are plain DataFusion SQL (``to_local_time``, ``date_bin``, ``date_trunc``), so
any reader evaluates them; :func:`parse_window` recognises exactly the SQL :meth:`expression`
produces, which lets pruning map ranges on the source column through the window.

This module is the one home of the package's calendar and time-zone arithmetic: besides the
windows themselves, a window start as a value of the source column (:func:`as_source`, for the
Dagster layer's partition keys), and the source range of one window or calendar year
(:func:`window_span`, :func:`year_span`, for filters naming a partition field)."""

from __future__ import annotations

import datetime as dt
import functools
import re
import zoneinfo
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from ..errors import SpecError

UNITS = ("hour", "day", "week", "month")
_FIRST_SUNDAY = 4  # 1970-01-04 was a Sunday: weekly bins are aligned on it
_BIN = {"hour": "1 hour", "day": "1 day", "week": "7 days"}
Span = tuple[Any, Any]  # [lo, hi) on a source column


@dataclass(frozen=True)
class TimeWindow:
    """A calendar cadence: windows of one ``unit`` in ``timezone``, starting at the given offsets
    (``day_offset``: weekday for weeks, 0 = Sunday; day of the month for months, default 1)."""

    unit: str
    timezone: str = "UTC"
    minute_offset: int = 0
    hour_offset: int = 0
    day_offset: int | None = None

    def __post_init__(self) -> None:
        if self.unit not in UNITS:
            raise SpecError(f"time window unit must be one of {UNITS}, got {self.unit!r}")
        try:
            zoneinfo.ZoneInfo(self.timezone)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError):
            raise SpecError(f"unknown time zone {self.timezone!r}") from None
        if not 0 <= self.minute_offset < 60:
            raise SpecError(f"minute_offset must be in 0..59, got {self.minute_offset}")
        if not 0 <= self.hour_offset < 24 or (self.unit == "hour" and self.hour_offset):
            raise SpecError(f"hour_offset {self.hour_offset} does not fit {self.unit}ly windows")
        if self.day_offset is None:  # normalised, so equal windows compare equal
            object.__setattr__(self, "day_offset", 1 if self.unit == "month" else 0)
        day = self.day
        if (self.unit == "week" and not 0 <= day <= 6) or (
            self.unit == "month" and not 1 <= day <= 28
        ):
            raise SpecError(f"day_offset {day} does not fit {self.unit}ly windows")
        if self.unit in ("hour", "day") and day != 0:
            raise SpecError(f"day_offset does not apply to {self.unit}ly windows")
        self._check_zone()

    def _check_zone(self) -> None:
        problem = _zone_problem(self.unit, self.timezone, self.hour_offset, self.minute_offset)
        if problem:
            raise SpecError(problem)

    @property
    def day(self) -> int:
        """The day offset (0 for hours, days and default weeks; 1 for default months)."""
        assert self.day_offset is not None
        return self.day_offset

    @property
    def tzinfo(self) -> dt.tzinfo:
        """The window's time zone (:data:`datetime.UTC` for UTC)."""
        return dt.UTC if _fixed_offset(self.timezone) else zoneinfo.ZoneInfo(self.timezone)

    # -- the partition expression -------------------------------------------------------------
    def result_type(self, source: pa.DataType) -> pa.DataType:
        """The partition value type for a source column of type ``source``."""
        _check_source(source, self.unit)
        if self.unit != "hour":
            return pa.date32()
        if is_zoned(source):
            return pa.timestamp("us", tz="UTC")  # an instant: the fall-back hour is two values
        return pa.timestamp("us")

    def expression(self, source: pa.DataType) -> str:
        """DataFusion SQL over ``col0`` (of type ``source``) giving the window start value."""
        _check_source(source, self.unit)
        zoned = is_zoned(source)
        at_zone = f"arrow_cast(col0, 'Timestamp(Microsecond, Some(\"{self.timezone}\"))')"
        naive = "arrow_cast(col0, 'Timestamp(Microsecond, None)')"
        local = f"to_local_time({at_zone})" if zoned else naive
        if self.unit == "month":
            d, h, m = self.day - 1, self.hour_offset, self.minute_offset
            shift = f"INTERVAL '{d} days {h} hours {m} minutes'"
            start = f"date_trunc('month', {local} - {shift}) + {shift}"
        else:
            day = 1 + (_FIRST_SUNDAY - 1 + self.day if self.unit == "week" else 0)
            origin = f"1970-01-{day:02d} {self.hour_offset:02d}:{self.minute_offset:02d}:00"
            start = f"date_bin(INTERVAL '{_BIN[self.unit]}', {local}, TIMESTAMP '{origin}')"
        if self.unit != "hour":
            return f"CAST({start} AS DATE)"
        if zoned:  # the instant: step back from the row by the wall time elapsed in its hour
            instant = f"{at_zone} - ({local} - {start})"
            return f"arrow_cast({instant}, 'Timestamp(Microsecond, Some(\"UTC\"))')"
        if self.minute_offset and not _steady(self.timezone):
            raise SpecError(
                f"hourly windows at minute {self.minute_offset} in {self.timezone} need a zoned "
                "timestamp column: wall-clock times cannot place rows around DST changes"
            )
        return start

    def monotone(self, source: pa.DataType) -> bool:
        """Whether the window start never decreases as the source value grows (then a range on
        the source maps to a range of partition values)."""
        zoned = is_zoned(source)
        if not zoned or self.unit == "hour" or _steady(self.timezone):
            return True
        # local wall time runs backwards at a DST fall-back; windows starting at midnight never
        # straddle one, windows starting in the small hours might
        return self.hour_offset == 0 and self.minute_offset == 0

    def nests_in(self, other: TimeWindow) -> bool:
        """Whether every window of ``self`` lies wholly inside one window of ``other`` (so a
        partition of ``self`` belongs to exactly one partition of ``other``)."""
        order = {u: i for i, u in enumerate(UNITS)}
        if self.timezone != other.timezone or order[self.unit] > order[other.unit]:
            return False
        if self == other:
            return True
        if self.unit == "week" and other.unit == "month":
            return False  # weeks straddle months
        if self.minute_offset != other.minute_offset:
            return False
        if self.unit == "hour":
            return True
        if self.hour_offset != other.hour_offset:
            return False
        return self.unit == "day" or self.day_offset == other.day_offset

    def start_value(self, value: Any, source: pa.DataType) -> Any:
        """The start of the window whose partition value is ``value``, as a value of the
        source type (so another window's expression can be evaluated on it)."""
        if isinstance(value, dt.datetime):  # hourly: the start itself (zoned or wall clock)
            return value
        zone = self.tzinfo
        start = dt.datetime.combine(value, dt.time(self.hour_offset, self.minute_offset))
        if pa.types.is_date(source):
            return value if start.time() == dt.time(0) else value + dt.timedelta(days=1)
        if pa.types.is_timestamp(source) and source.tz is None:
            return start
        return start.replace(tzinfo=zone)


@functools.lru_cache(maxsize=256)
def _zone_problem(unit: str, timezone: str, hour: int, minute: int) -> str | None:
    """Why the zone's clock changes make these windows ambiguous, if they do: hourly windows
    where a DST shift is not a whole hour, and longer windows starting at a wall time the zone
    skips or repeats (their rows could not be told apart from the neighbouring window's)."""
    if _fixed_offset(timezone):
        return None
    zone = zoneinfo.ZoneInfo(timezone)
    for day, shift in _transitions(timezone):
        if unit == "hour" and shift % dt.timedelta(hours=1):
            return (
                f"hourly windows in {timezone}: its clocks shift by "
                f"{shift.total_seconds() / 60:+.0f} minutes around {day}, not a whole hour"
            )
        if unit != "hour" and (hour, minute) != (0, 0):
            t = dt.datetime.combine(day, dt.time(hour, minute), zone)
            if t.utcoffset() != t.replace(fold=1).utcoffset():
                return (
                    f"{unit}ly windows starting at {t:%H:%M} in {timezone}: that wall time is "
                    f"skipped or repeated on {day}; choose another offset"
                )
    return None


@functools.lru_cache(maxsize=64)
def _transitions(timezone: str) -> tuple[tuple[dt.date, dt.timedelta], ...]:
    """The days (1990-2050) on which ``timezone``'s UTC offset changes, with the change."""
    zone = zoneinfo.ZoneInfo(timezone)
    out = []
    day = dt.date(1990, 1, 1)
    before = dt.datetime.combine(day, dt.time(12), zone).utcoffset()
    while day < dt.date(2050, 1, 1):
        day += dt.timedelta(days=1)
        offset = dt.datetime.combine(day, dt.time(12), zone).utcoffset()
        if offset != before and offset is not None and before is not None:
            # the change happened since yesterday's noon: today's small hours, or yesterday's
            out.append((day, offset - before))
            out.append((day - dt.timedelta(days=1), offset - before))
        before = offset
    return tuple(out)


def _check_source(source: pa.DataType, unit: str) -> None:
    if pa.types.is_date(source):
        if unit == "hour":
            raise SpecError(f"hourly windows need a timestamp column, not {source}")
        return
    if not pa.types.is_timestamp(source):
        raise SpecError(f"time windows need a date or timestamp column, not {source}")


def _steady(timezone: str) -> bool:
    """Whether ``timezone``'s offset from UTC never changes (1990-2050)."""
    return _fixed_offset(timezone) or not _transitions(timezone)


def _fixed_offset(timezone: str) -> bool:
    return timezone.upper() in ("UTC", "Z", "ETC/UTC", "GMT") or bool(
        re.fullmatch(r"[+-]\d\d:\d\d", timezone)
    )


_ZONE = r"arrow_cast\(col0, 'Timestamp\(Microsecond, Some\(\"(?P<tz>[^\"]+)\"\)\)'\)"
_BIN_RE = re.compile(
    r"date_bin\(INTERVAL '(?P<bin>1 hour|1 day|7 days)', .*?, "
    r"TIMESTAMP '1970-01-(?P<d>\d\d) (?P<h>\d\d):(?P<m>\d\d):00'\)"
)
_MONTH_RE = re.compile(r"INTERVAL '(?P<d>\d+) days (?P<h>\d+) hours (?P<m>\d+) minutes'")


@functools.lru_cache(maxsize=256)
def parse_window(sql: str, source: pa.DataType) -> TimeWindow | None:
    """The window whose :meth:`TimeWindow.expression` over ``source`` is exactly ``sql`` (for a
    naive or date source the zone is not part of the SQL and reads as UTC)."""
    zone = re.search(_ZONE, sql)
    timezone = zone.group("tz") if zone else "UTC"
    try:
        if (m := _BIN_RE.search(sql)) is not None:
            unit = {"1 hour": "hour", "1 day": "day", "7 days": "week"}[m.group("bin")]
            day = int(m.group("d")) - _FIRST_SUNDAY if unit == "week" else None
        elif (m := _MONTH_RE.search(sql)) is not None:
            unit, day = "month", int(m.group("d")) + 1
        else:
            return None
        window = TimeWindow(unit, timezone, int(m.group("m")), int(m.group("h")), day)
        return window if window.expression(source) == sql else None
    except SpecError:
        return None


def window_values(window: TimeWindow, source: pa.DataType, starts: list[Any]) -> list[Any]:
    """Partition values of windows given by their starts (values of the source type)."""
    from .expressions import coerce_result, compiled

    expression = compiled(window.expression(source), [source], label=window.unit)
    result = expression.evaluate([pa.array(starts, type=source)])
    return list(coerce_result(result, window.result_type(source), window.unit).to_pylist())


# -- source values and ranges -------------------------------------------------------------------
def is_zoned(t: pa.DataType) -> bool:
    """Whether ``t`` is a timestamp with a time zone (instants, not wall-clock times)."""
    return pa.types.is_timestamp(t) and t.tz is not None


def column_zone(name: str) -> dt.tzinfo | None:
    """The zone an Arrow timestamp type's ``tz`` names (a ``+05:30`` offset or an IANA name;
    None when it names none)."""
    m = re.fullmatch(r"([+-])(\d\d):?(\d\d)", name)
    if m:
        minutes = int(m.group(2)) * 60 + int(m.group(3))
        return dt.timezone(dt.timedelta(minutes=-minutes if m.group(1) == "-" else minutes))
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        return None


def ceil_date(t: dt.datetime) -> dt.date:
    """The first date whose local midnight is at or after ``t``."""
    return t.date() if t.time() == dt.time(0) else t.date() + dt.timedelta(days=1)


def as_source(start: dt.datetime, source: pa.DataType) -> Any:
    """A window start (zoned, in the window's zone) as a value of the source column: the first
    date at or after it, its local wall-clock time for a naive timestamp, else the instant."""
    if pa.types.is_date(source):
        return ceil_date(start)
    if pa.types.is_timestamp(source) and source.tz is None:
        return start.replace(tzinfo=None)  # naive timestamps hold local wall-clock time
    return start


def window_span(window: TimeWindow, source: pa.DataType) -> Callable[[Any], Span | None]:
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


def year_span(source: pa.DataType) -> Callable[[Any], Span | None]:
    """year -> the source range of that calendar year (in the column's zone when zoned)."""
    zone: dt.tzinfo | None = None
    if is_zoned(source):
        zone = column_zone(source.tz)
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
