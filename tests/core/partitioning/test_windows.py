"""Calendar time windows (``core/partitioning/windows.py``) checked against Dagster's own
partitions.

* Round trip: for hourly, daily, weekly and monthly Dagster definitions (zones UTC,
  America/New_York, Asia/Kolkata, Australia/Lord_Howe; hour/minute/day offsets; date, naive and
  zoned source columns; key ranges over DST changes) the first and the last instant of every
  key's window give the key's partition value, values increase with the keys, the value is the
  window start Dagster reports, and ``Dimension.key_of`` maps it back to the key. A naive column
  cannot tell the repeated hour of a fall-back apart and must be refused.
* Pruning: on a real namespace partitioned by a window, range filters (``Dimension.row_filter``
  and hand-written ISO literals) and equality filters return exactly the matching rows and plan
  exactly the partitions holding them.
* ``parse_window`` recognises exactly the SQL ``TimeWindow.expression`` writes; bad windows and
  non-calendar cron cadences are refused.
* Property (Hypothesis): the partition value of any instant of 2020-2026 is the value of the
  Dagster window holding it.

Expected values are derived from Dagster (``time_window_for_partition_key``,
``get_partition_key_for_timestamp``, ``get_partition_keys``) and plain Python, never from the
package itself."""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
import zoneinfo
from typing import Any

import dagster as dg
import lance
import pyarrow as pa
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from dagster_lance_partitioned import PartitionedNamespace, PartitionField
from dagster_lance_partitioned.core.errors import SpecError
from dagster_lance_partitioned.core.partitioning.windows import (
    TimeWindow,
    parse_window,
    window_values,
)
from dagster_lance_partitioned.core.tuning import tuning
from dagster_lance_partitioned.orchestration.layout import (
    Dimension,
    PartitionLayoutError,
    time_window,
)

UTC = dt.UTC
NY = "America/New_York"
KOLKATA = "Asia/Kolkata"  # +05:30, no DST
LORD_HOWE = "Australia/Lord_Howe"  # +10:30 / +11: DST moves the clock by 30 minutes
ZONES = ("UTC", NY, KOLKATA, LORD_HOWE)

DATE = pa.date32()
NAIVE = pa.timestamp("us")
MS_UTC = pa.timestamp("ms", tz="UTC")
US_NY = pa.timestamp("us", tz=NY)
ZONED = (MS_UTC, US_NY)

# local days with a DST change (or, without DST, an ordinary day)
DST_DAYS = {
    "UTC": ("2024-03-10",),
    NY: ("2024-03-10", "2024-11-03"),  # spring forward 02:00 -> 03:00, fall back 02:00 -> 01:00
    KOLKATA: ("2024-03-10",),
    LORD_HOWE: ("2024-04-07", "2024-10-06"),  # fall back 02:00 -> 01:30, spring 02:00 -> 02:30
}


# -- helpers -------------------------------------------------------------------------------------
def zone_of(name: str) -> dt.tzinfo:
    return UTC if name == "UTC" else zoneinfo.ZoneInfo(name)


def day(text: str, shift: int = 0) -> str:
    return (dt.date.fromisoformat(text) + dt.timedelta(days=shift)).isoformat()


def dagster_def(
    unit: str,
    zone: str,
    minute: int = 0,
    hour: int = 0,
    day_offset: int = 0,
    start: str = "2024-01-01",
    end: str = "2025-01-01",
) -> dg.TimeWindowPartitionsDefinition:
    """A Dagster definition of ``unit`` windows (``day_offset``: weekday or day of the month)."""
    common: dict[str, Any] = {"minute_offset": minute, "timezone": zone}
    if unit == "hour":
        return dg.HourlyPartitionsDefinition(
            start_date=f"{start}-00:00", end_date=f"{end}-00:00", **common
        )
    common.update(start_date=start, end_date=end, hour_offset=hour)
    if unit == "day":
        return dg.DailyPartitionsDefinition(**common)
    if unit == "week":
        return dg.WeeklyPartitionsDefinition(day_offset=day_offset, **common)
    return dg.MonthlyPartitionsDefinition(day_offset=day_offset or 1, **common)


def tick(source: pa.DataType) -> dt.timedelta:
    """The smallest step of a source column."""
    if pa.types.is_timestamp(source) and source.unit == "ms":
        return dt.timedelta(milliseconds=1)
    return dt.timedelta(microseconds=1)


def last_instant(w: dg.TimeWindow, source: pa.DataType) -> dt.datetime:
    """The last instant of a Dagster window a column of ``source`` can hold (stepping back in
    UTC: wall-clock arithmetic on an aware datetime would cross a DST fold the wrong way)."""
    return (w.end.astimezone(UTC) - tick(source)).astimezone(w.end.tzinfo)


def as_source(instant: dt.datetime, source: pa.DataType, zone: str, *, last: bool = False) -> Any:
    """An instant of a window as a value of ``source``: zoned columns hold the instant, naive
    ones the local wall clock, date ones a local midnight in the window (the first one at or
    after ``instant``, or with ``last`` the last one at or before it)."""
    local = instant.astimezone(zone_of(zone))
    if pa.types.is_date(source):
        if last or local.time() == dt.time(0):
            return local.date()
        return local.date() + dt.timedelta(days=1)
    if source.tz is None:
        return local.replace(tzinfo=None)
    return instant


def in_fold(instant: dt.datetime) -> bool:
    """Whether the local wall-clock time of ``instant`` occurs twice (a DST fall-back)."""
    return instant.replace(fold=0).utcoffset() != instant.replace(fold=1).utcoffset()


def expected_value(w: dg.TimeWindow, unit: str, source: pa.DataType, zone: str) -> Any:
    """The documented partition value of a Dagster window: its local start date for days, weeks
    and months; for hours its start instant (zoned source) or start wall clock (naive)."""
    local = w.start.astimezone(zone_of(zone))
    if unit != "hour":
        return local.date()
    return local if source.tz is not None else local.replace(tzinfo=None)


def norm(value: Any) -> Any:
    """Aware datetimes in UTC: aware datetimes of one zone that differ only by ``fold`` (the two
    01:30 of a fall-back) compare equal in Python, instants in UTC do not."""
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(UTC)
    return value


def keys_around(pdef: dg.TimeWindowPartitionsDefinition, days: tuple[str, ...], spread: int):
    """Keys of ``pdef`` whose window starts within ``spread`` days of one of ``days``."""
    zone = zone_of(pdef.timezone or "UTC")
    out = []
    for key in pdef.get_partition_keys():
        start = pdef.time_window_for_partition_key(key).start.astimezone(zone).date()
        if any(abs((start - dt.date.fromisoformat(d)).days) <= spread for d in days):
            out.append(key)
    return out


def checked_values(pdef: dg.TimeWindowPartitionsDefinition, source, keys) -> list[Any]:
    """``Dimension.values`` of ``keys`` (in UTC), after checking that every key's window maps to
    one value: its first and its last instant give the documented value (the window start), the
    one ``Dimension.values`` gives; and that values increase with the keys."""
    assert keys, "no keys to check"
    zone = pdef.timezone or "UTC"
    window = time_window(pdef)
    schema = pa.schema([("ts", source)])
    try:
        values = [norm(v) for v in Dimension(None, "ts", pdef).values(keys, schema, "asset")]
    except PartitionLayoutError as e:
        raise AssertionError(f"Dimension.values refused distinct Dagster keys: {e}") from None
    spans = [pdef.time_window_for_partition_key(k) for k in keys]
    firsts = window_values(window, source, [as_source(w.start, source, zone) for w in spans])
    lasts = window_values(
        window, source, [as_source(last_instant(w, source), source, zone, last=True) for w in spans]
    )
    for key, w, value, first, last in zip(keys, spans, values, firsts, lasts, strict=True):
        want = norm(expected_value(w, window.unit, source, zone))
        got = {"Dimension.values": value}
        for name, instant, v in (
            ("first", w.start, first),
            ("last", last_instant(w, source), last),
        ):
            # a naive column holds the wall clock, which cannot say which of two windows an
            # instant in a repeated (fall-back) wall-clock time belongs to
            if pa.types.is_date(source) or source.tz is not None or not in_fold(instant):
                got[f"{name} instant"] = norm(v)
        wrong = {name: v for name, v in got.items() if v != want}
        assert not wrong, (
            f"key {key!r} (window {w.start} .. {w.end}, {source}): {want!r}, not {wrong}"
        )
    for (k1, v1), (k2, v2) in itertools.pairwise(zip(keys, values, strict=True)):
        assert v1 < v2, f"{k1!r} -> {v1!r} is not before {k2!r} -> {v2!r}"
    return values


def assert_key_of_inverts(pdef: dg.TimeWindowPartitionsDefinition, keys, values) -> None:
    dim = Dimension(None, "ts", pdef)
    wrong = {k: dim.key_of(v) for k, v in zip(keys, values, strict=True) if dim.key_of(v) != k}
    assert not wrong, f"Dimension.key_of(value of key) gave another key: {wrong}"


# -- 1. keys <-> values --------------------------------------------------------------------------
def ambiguous_wall_time(zone: str, hour: int, minute: int) -> bool:
    """Whether ``hour:minute`` is skipped or repeated on some day of 2024 in ``zone``."""
    tz = zone_of(zone)
    for n in range(366):
        t = dt.datetime.combine(dt.date(2024, 1, 1) + dt.timedelta(days=n), dt.time(hour, minute))
        t = t.replace(tzinfo=tz)
        if t.utcoffset() != t.replace(fold=1).utcoffset():
            return True
    return False


def _calendar_shapes(*, refused: bool) -> list[Any]:
    """Daily, weekly and monthly definitions in every zone, with offsets Dagster allows; those
    starting at a wall time the zone skips or repeats (``refused``) kept apart."""
    cases = []
    for zone in ZONES:
        shapes = [
            ("day", 0, 0, 0, 2),
            ("day", 30, 1, 0, 2),  # 01:30: inside New York's repeated hour
            ("day", 30, 2, 0, 2),  # 02:30: inside New York's spring-forward gap
            ("week", 0, 0, 0, 21),
            ("week", 30, 1, 3, 21),
            ("week", 0, 0, 3, 21),
            ("week", 30, 1, 0, 21),
            ("month", 0, 0, 1, 366),
            ("month", 45, 23, 1, 366),
            ("month", 0, 0, 15, 366),
            ("month", 45, 23, 15, 366),
        ]
        for unit, minute, hour, day_offset, spread in shapes:
            if ambiguous_wall_time(zone, hour, minute) != refused:
                continue
            shape = (unit, zone, minute, hour, day_offset)
            if refused:
                cases.append(pytest.param(*shape, id=f"{unit}-{zone}-{hour:02d}:{minute:02d}"))
                continue
            for source in (DATE, NAIVE, MS_UTC, US_NY):
                cases.append(
                    pytest.param(
                        *shape,
                        spread,
                        source,
                        id=f"{unit}-{zone}-d{day_offset}-{hour:02d}:{minute:02d}-{source}",
                    )
                )
    return cases


CALENDAR_CASES = _calendar_shapes(refused=False)
REFUSED_CALENDAR_CASES = _calendar_shapes(refused=True)


@pytest.mark.parametrize(
    ("unit", "zone", "minute", "hour", "day_offset", "spread", "source"), CALENDAR_CASES
)
def test_calendar_key_windows_have_one_value(unit, zone, minute, hour, day_offset, spread, source):
    pdef = dagster_def(unit, zone, minute, hour, day_offset)
    checked_values(pdef, source, keys_around(pdef, DST_DAYS[zone], spread))


@pytest.mark.parametrize(
    ("unit", "zone", "minute", "hour", "day_offset", "spread"),
    [
        pytest.param(*p.values[:-1], id=p.id.rsplit("-", 1)[0])
        for p in CALENDAR_CASES
        if p.values[-1] == DATE
    ],
)
def test_calendar_key_of_inverts_values(unit, zone, minute, hour, day_offset, spread):
    """Daily, weekly and monthly values are dates whatever the column: one check per cadence."""
    pdef = dagster_def(unit, zone, minute, hour, day_offset)
    keys = keys_around(pdef, DST_DAYS[zone], spread)
    assert_key_of_inverts(pdef, keys, checked_values(pdef, DATE, keys))


@pytest.mark.parametrize(("unit", "zone", "minute", "hour", "day_offset"), REFUSED_CALENDAR_CASES)
def test_calendar_windows_starting_at_an_ambiguous_wall_time_are_refused(
    unit, zone, minute, hour, day_offset
):
    """A window starting inside a DST gap or fold has no single start instant on those days
    (rows there could belong to either neighbouring window): the definition is refused."""
    pdef = dagster_def(unit, zone, minute, hour, day_offset)
    with pytest.raises(PartitionLayoutError, match=f"{hour:02d}:{minute:02d} in {zone}"):
        time_window(pdef)
    with pytest.raises(SpecError, match="skipped or repeated"):
        TimeWindow(unit, zone, minute, hour, day_offset or None)


def test_refused_calendar_cases_cover_gap_and_fold():
    names = {p.id for p in REFUSED_CALENDAR_CASES}
    assert "day-America/New_York-01:30" in names  # repeated on 2024-11-03
    assert "day-America/New_York-02:30" in names  # skipped on 2024-03-10
    assert "day-Australia/Lord_Howe-01:30" in names  # repeated (02:00 -> 01:30) on 2024-04-07
    assert not any(zone in name for name in names for zone in ("UTC", KOLKATA))


def _hourly_cases() -> list[Any]:
    """Hourly definitions over DST days. Not Lord Howe, whose half-hour DST shifts make hourly
    windows refused (see test_hourly_lord_howe_is_refused); naive columns with a minute offset
    only in zones without DST (see test_naive_hourly_minute_offset_in_a_dst_zone_is_refused)."""
    cases = []
    days = {z: d for z, d in DST_DAYS.items() if z != LORD_HOWE}
    for zone, zone_days in days.items():
        for d in zone_days:
            for minute in (0, 30, 45):
                for source in (NAIVE, MS_UTC, US_NY):
                    if source == NAIVE and (zone, d) == (NY, "2024-11-03"):
                        continue  # refused, see test_naive_hourly_refuses_the_repeated_hour
                    if source == NAIVE and minute and zone == NY:
                        continue  # refused, see below
                    cases.append(
                        pytest.param(zone, d, minute, source, id=f"{zone}-{d}-:{minute}-{source}")
                    )
    return cases


@pytest.mark.parametrize(("zone", "local_day", "minute", "source"), _hourly_cases())
def test_hourly_keys_round_trip(zone, local_day, minute, source):
    pdef = dagster_def("hour", zone, minute, start=local_day, end=day(local_day, 1))
    keys = pdef.get_partition_keys()
    if (zone, local_day) == (NY, "2024-11-03"):
        assert f"2024-11-03-01:{minute:02d}-0500" in keys  # Dagster's key of the repeated hour
        assert len(keys) == 25 - (minute > 0)
    assert_key_of_inverts(pdef, keys, checked_values(pdef, source, keys))


def test_naive_hourly_refuses_the_repeated_hour():
    pdef = dagster_def("hour", NY, start="2024-11-03", end="2024-11-04")
    keys = pdef.get_partition_keys()
    schema = pa.schema([("ts", NAIVE)])
    with pytest.raises(PartitionLayoutError) as info:
        Dimension(None, "ts", pdef).values(keys, schema, "asset")
    assert "'2024-11-03-01:00'" in str(info.value)
    assert "'2024-11-03-01:00-0500'" in str(info.value)
    # the same keys without the repeated one are fine on a naive column
    ok = [k for k in keys if k != "2024-11-03-01:00-0500"]
    assert len(Dimension(None, "ts", pdef).values(ok, schema, "asset")) == len(ok)


@pytest.mark.parametrize("minute", [0, 30])
def test_hourly_lord_howe_is_refused(minute):
    """Dagster steps hourly windows in absolute hours, so in Lord Howe (30-minute DST) its
    windows start at :30 after the 2024-04-07 fall-back ('2024-04-07-01:30+1030' is 15:00Z ..
    16:00Z). Wall-clock hourly bins cannot hold those windows, so the definition is refused."""
    pdef = dagster_def("hour", LORD_HOWE, minute, start="2024-04-07", end="2024-04-08")
    starts = [pdef.time_window_for_partition_key(k).start for k in pdef.get_partition_keys()]
    minutes = {s.astimezone(zone_of(LORD_HOWE)).minute for s in starts}
    assert len(minutes) == 2  # Dagster's own windows drift by half an hour that day
    with pytest.raises(PartitionLayoutError, match=r"Lord_Howe.*not a whole hour"):
        time_window(pdef)


def test_naive_hourly_minute_offset_in_a_dst_zone_is_refused():
    """A wall clock cannot place rows in a window at :30 around a DST change in New York; the
    same column without the offset, or in a zone without DST, is accepted."""
    schema = pa.schema([("ts", NAIVE)])
    pdef = dagster_def("hour", NY, 30, start="2024-06-01", end="2024-06-02")
    keys = pdef.get_partition_keys()
    with pytest.raises((PartitionLayoutError, SpecError), match="zoned timestamp column"):
        Dimension(None, "ts", pdef).values(keys, schema, "asset")
    for ok in (
        dagster_def("hour", NY, 0, start="2024-06-01", end="2024-06-02"),
        dagster_def("hour", KOLKATA, 30, start="2024-06-01", end="2024-06-02"),
    ):
        keys = ok.get_partition_keys()
        assert len(set(Dimension(None, "ts", ok).values(keys, schema, "asset"))) == len(keys)


# -- 2. pruning on a namespace -------------------------------------------------------------------
PRUNE_SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("ts", US_NY)])
PADDING = 1100  # partitions before the rows under test: 2 manifest rows each


def ny(*args: int, fold: int = 0) -> dt.datetime:
    return dt.datetime(*args, tzinfo=zone_of(NY), fold=fold)


def iso_ny(t: dt.datetime) -> str:
    return t.astimezone(zone_of(NY)).isoformat()


def iso_utc(t: dt.datetime) -> str:
    return t.astimezone(UTC).isoformat()


def pruning_instants() -> list[dt.datetime]:
    """A row every 5 hours (at :07) over ten days around each New York DST change, plus both
    01:30 of the fall-back and the last microsecond before the spring-forward."""
    out = []
    for first in (
        dt.datetime(2024, 3, 5, 1, 7, tzinfo=UTC),
        dt.datetime(2024, 10, 29, 1, 7, tzinfo=UTC),
    ):
        out += [first + dt.timedelta(hours=5 * i) for i in range(48)]
    out += [
        ny(2024, 11, 3, 1, 30, fold=0).astimezone(UTC),  # 05:30Z
        ny(2024, 11, 3, 1, 30, fold=1).astimezone(UTC),  # 06:30Z
        dt.datetime(2024, 3, 10, 6, 59, 59, 999999, tzinfo=UTC),  # 01:59:59.999999 EST
    ]
    return sorted(out)


def padding_instants(unit: str) -> list[dt.datetime]:
    """One row in each of PADDING windows before 2024 (none in the ranges queried)."""
    step = {"hour": dt.timedelta(hours=1), "day": dt.timedelta(days=1)}.get(unit)
    step = step or dt.timedelta(days=7)
    noon = dt.datetime(2024, 1, 1, 17, tzinfo=UTC)  # 12:00 in New York
    return [noon - step * i for i in range(PADDING, 0, -1)]


@dataclasses.dataclass(frozen=True)
class Pruned:
    uri: str
    pdef: dg.TimeWindowPartitionsDefinition
    rows: list[tuple[int, dt.datetime, str]]  # (id, instant in UTC, Dagster key)

    def ns(self) -> PartitionedNamespace:
        """The namespace as a new reader opens it (manifest not yet read into memory)."""
        return PartitionedNamespace.open(self.uri)


@pytest.fixture(
    scope="module",
    params=[(u, pad) for u in ("hour", "day", "week3") for pad in (False, True)],
    ids=lambda p: f"{p[0]}-{'indexed' if p[1] else 'small'}-manifest",
)
def pruned(request, tmp_path_factory) -> Pruned:
    """A namespace partitioned by a window (all monotone on its New York zoned column, so
    pruning must be exact). With padding the manifest has more than Tuning.small_manifest_rows rows,
    so plans query it with Lance's scanner instead of evaluating predicates in Python."""
    name, padded = request.param
    unit = name.rstrip("3")
    pdef = dagster_def(unit, NY, day_offset=3 if name == "week3" else 0, start="2000-01-01")
    window = time_window(pdef)
    assert window.monotone(US_NY)
    instants = pruning_instants() + (padding_instants(unit) if padded else [])
    table = pa.table({"id": range(len(instants)), "ts": pa.array(instants, US_NY)}, PRUNE_SCHEMA)
    uri = str(tmp_path_factory.mktemp(name) / "ns")
    ns = PartitionedNamespace.create(
        uri, PRUNE_SCHEMA, [PartitionField.window("ts", window, US_NY)]
    )
    ns.write(table)
    manifest_rows = lance.dataset(f"{uri}/__manifest").count_rows()
    assert (manifest_rows > tuning().small_manifest_rows) == padded
    rows = [
        (i, t, pdef.get_partition_key_for_timestamp(t.timestamp())) for i, t in enumerate(instants)
    ]
    return Pruned(uri, pdef, rows)


def assert_pruned(p: Pruned, flt: str, matching) -> None:
    """``flt`` returns the ``matching`` rows, and plans exactly the partitions holding them."""
    got = sorted(p.ns().to_table(flt)["id"].to_pylist())
    assert got == sorted(r[0] for r in matching), f"rows of {flt}"
    tasks = p.ns().plan_scan(flt).tasks
    keys = {r[2] for r in matching}
    unit = time_window(p.pdef).unit
    want = {
        norm(expected_value(p.pdef.time_window_for_partition_key(k), unit, US_NY, NY)) for k in keys
    }
    planned = sorted(norm(v) for t in tasks for v in t.partition_values.values())
    assert planned == sorted(want), f"partitions planned for {flt}"
    assert len(tasks) == len(keys)  # one partition per Dagster key of the matching rows


def key_run(pdef, first: dt.datetime, last: dt.datetime) -> list[str]:
    """The keys from the one holding ``first`` to the one holding ``last``."""
    key = pdef.get_partition_key_for_timestamp(first.timestamp())
    end = pdef.get_partition_key_for_timestamp(last.timestamp())
    keys = [key]
    while key != end:
        key = pdef.get_next_partition_key(key)
        keys.append(key)
    return keys


def test_row_filter_of_keys_prunes_exactly(pruned):
    dim = Dimension(None, "ts", pruned.pdef)
    repeated = ny(2024, 11, 3, 1, 30, fold=1)
    key_sets = {
        "repeated hour": key_run(pruned.pdef, repeated, repeated),
        "over fall-back": key_run(pruned.pdef, ny(2024, 11, 2, 12), ny(2024, 11, 4, 12)),
        "over spring-forward": key_run(pruned.pdef, ny(2024, 3, 9, 12), ny(2024, 3, 11, 6)),
        "two runs": key_run(pruned.pdef, ny(2024, 3, 9, 20), ny(2024, 3, 10, 4))
        + key_run(pruned.pdef, ny(2024, 11, 3, 0), ny(2024, 11, 3, 3)),
    }
    for name, keys in key_sets.items():
        flt = dim.row_filter(keys, PRUNE_SCHEMA, "asset")
        matching = [r for r in pruned.rows if r[2] in set(keys)]
        assert matching, name
        assert_pruned(pruned, flt, matching)


def test_iso_range_filters_prune_exactly(pruned):
    instants = [r[1] for r in pruned.rows]
    second = dt.timedelta(seconds=1)
    # bounds on rows (or a second beside them), so the windows at both ends hold matching rows
    for lo_near, hi_near in [
        (ny(2024, 11, 2, 22), ny(2024, 11, 4, 3)),
        (ny(2024, 11, 3, 0), ny(2024, 11, 3, 2)),
        (ny(2024, 3, 9, 12), ny(2024, 3, 10, 12)),
        (ny(2024, 3, 6), ny(2024, 11, 1)),
    ]:
        lo = min(t for t in instants if t >= lo_near)
        hi = max(t for t in instants if t <= hi_near)
        closed = {
            f"ts >= '{iso_ny(lo)}' AND ts <= '{iso_ny(hi)}'",
            f"ts > '{iso_utc(lo - second)}' AND ts < '{iso_utc(hi + second)}'",
            f"ts < '{iso_ny(hi + second)}' AND ts > '{iso_ny(lo - second)}'",
        }
        for flt in closed:
            assert_pruned(pruned, flt, [r for r in pruned.rows if lo <= r[1] <= hi])
        assert_pruned(pruned, f"ts >= '{iso_ny(lo)}'", [r for r in pruned.rows if r[1] >= lo])


def test_equality_filters_prune_to_one_partition(pruned):
    for t in (
        ny(2024, 11, 3, 1, 30, fold=0),
        ny(2024, 11, 3, 1, 30, fold=1),
        dt.datetime(2024, 3, 10, 6, 59, 59, 999999, tzinfo=UTC),
        pruned.rows[10][1],
    ):
        # instants compared in UTC: aware datetimes in a fold never equal one of another zone
        matching = [r for r in pruned.rows if r[1] == t.astimezone(UTC)]
        assert len(matching) == 1, t
        for literal in (iso_ny(t), iso_utc(t)):
            assert_pruned(pruned, f"ts = '{literal}'", matching)


# -- 3. parse_window and refusals ----------------------------------------------------------------
WINDOWS = [
    TimeWindow("hour", NY),
    TimeWindow("hour", KOLKATA, minute_offset=30),
    TimeWindow("hour", "UTC", minute_offset=45),
    TimeWindow("day"),
    TimeWindow("day", NY, minute_offset=30, hour_offset=4),
    TimeWindow("week", KOLKATA, day_offset=3),
    TimeWindow("week", LORD_HOWE, minute_offset=15, hour_offset=23, day_offset=6),
    TimeWindow("month", NY),
    TimeWindow("month", "UTC", minute_offset=59, hour_offset=23, day_offset=28),
    TimeWindow("month", LORD_HOWE, day_offset=15),
]


@pytest.mark.parametrize("window", WINDOWS, ids=str)
@pytest.mark.parametrize("source", ZONED, ids=str)
def test_parse_window_recognises_its_own_sql(window, source):
    sql = window.expression(source)
    assert parse_window(sql, source) == window
    # naive and date columns do not carry the zone: it reads back as UTC
    for plain in (NAIVE, DATE) if window.unit != "hour" else (NAIVE,):
        assert parse_window(window.expression(plain), plain) == dataclasses.replace(
            window, timezone="UTC"
        )


@pytest.mark.parametrize("window", WINDOWS, ids=str)
def test_parse_window_rejects_edited_sql(window):
    sql = window.expression(US_NY)
    edits = [
        sql.replace("'1 hour'", "'2 hours'").replace("'1 day'", "'2 days'"),
        sql.replace("'7 days'", "'14 days'").replace(" 0 hours ", " 0 hours 1 seconds "),
        sql.replace(":00'", ":01'", 1),
        sql.replace("date_trunc('month'", "date_trunc('year'"),
        sql.replace("CAST(", "CAST(1 + ", 1),
        # one zone of several (a window with a single zone in its SQL is another valid one)
        sql.replace(f'"{window.timezone}"', '"Europe/Paris"', 1)
        if sql.count(f'"{window.timezone}"') > 1
        else sql,
        sql + " + INTERVAL '1 hour'",
        sql.replace("-", "+"),
    ]
    edited = [e for e in edits if e != sql]
    assert len(edited) >= 4
    for e in edited:
        assert parse_window(e, US_NY) is None, e


@pytest.mark.parametrize(
    "sql",
    [
        "col0",
        "CAST(col0 AS DATE)",
        "date_trunc('day', col0)",
        "date_part('hour', col0)",
        "date_bin(INTERVAL '1 day', col0, TIMESTAMP '1970-01-01 00:00:00')",
        "CASE WHEN col0 < TIMESTAMP '2024-01-01 00:00:00' THEN 'old' ELSE 'new' END",
        "",
    ],
)
def test_parse_window_ignores_unrelated_sql(sql):
    assert parse_window(sql, US_NY) is None


@pytest.mark.parametrize(
    "kwargs",
    [
        {"unit": "day", "timezone": "Mars/Olympus_Mons"},
        {"unit": "year"},
        {"unit": "hour", "minute_offset": 60},
        {"unit": "day", "minute_offset": -1},
        {"unit": "day", "hour_offset": 24},
        {"unit": "week", "day_offset": 7},
        {"unit": "month", "day_offset": 0},
        {"unit": "month", "day_offset": 29},
        {"unit": "day", "day_offset": 2},
        {"unit": "hour", "hour_offset": 1},
    ],
    ids=str,
)
def test_time_window_rejects_bad_arguments(kwargs):
    with pytest.raises(SpecError):
        TimeWindow(**kwargs)


def test_time_window_rejects_non_temporal_and_hourly_date_columns():
    with pytest.raises(SpecError):
        TimeWindow("day").expression(pa.int64())
    with pytest.raises(SpecError):
        TimeWindow("hour").expression(DATE)
    with pytest.raises(SpecError):
        TimeWindow("hour").result_type(DATE)


def test_custom_cron_definition_is_refused():
    pdef = dg.TimeWindowPartitionsDefinition(
        cron_schedule="0 */6 * * *", start="2024-01-01-00:00", fmt="%Y-%m-%d-%H:%M"
    )
    with pytest.raises(PartitionLayoutError, match=r"0 \*/6 \* \* \*"):
        time_window(pdef)


def test_time_window_of_dagster_definitions_keeps_every_offset():
    pdef = dagster_def("week", LORD_HOWE, minute=15, hour=23, day_offset=6)
    assert time_window(pdef) == TimeWindow("week", LORD_HOWE, 15, 23, 6)
    pdef = dagster_def("month", KOLKATA, minute=45, hour=1, day_offset=15)
    assert time_window(pdef) == TimeWindow("month", KOLKATA, 45, 1, 15)
    pdef = dagster_def("hour", NY, minute=30)
    assert time_window(pdef) == TimeWindow("hour", NY, 30)


# -- 4. property: an instant's value is the value of its Dagster window -------------------------
LOW = dt.datetime(2020, 1, 1, tzinfo=UTC)
HIGH = dt.datetime(2027, 1, 1, tzinfo=UTC)
SPAN_US = (HIGH - LOW) // dt.timedelta(microseconds=1) - 1


def micros(t: dt.datetime) -> int:
    return (t - LOW) // dt.timedelta(microseconds=1)


@st.composite
def cadences(draw) -> tuple[str, str, int, int, int]:
    """(unit, zone, minute, hour, day offset) as Dagster allows them. Hourly Lord Howe is left
    out: Dagster's hourly windows there drift by 30 minutes at each DST change, depending on the
    definition's start date (see test_hourly_lord_howe_dst_matches_dagster_or_is_refused)."""
    unit = draw(st.sampled_from(("hour", "day", "week", "month")))
    zone = draw(st.sampled_from([z for z in ZONES if (unit, z) != ("hour", LORD_HOWE)]))
    minute = draw(st.integers(0, 59))
    hour = 0 if unit == "hour" else draw(st.integers(0, 23))
    day_offset = {"week": st.integers(0, 6), "month": st.integers(1, 28)}.get(unit, st.just(0))
    return unit, zone, minute, hour, draw(day_offset)


@settings(derandomize=True, max_examples=100, deadline=None)
@given(offset=st.integers(0, SPAN_US), cadence=cadences(), source=st.sampled_from(ZONED))
@example(micros(ny(2024, 11, 3, 1, 30, fold=1)), ("hour", NY, 0, 0, 0), US_NY)
@example(micros(ny(2024, 11, 3, 1, 59, fold=0)), ("hour", NY, 30, 0, 0), MS_UTC)
@example(micros(ny(2024, 3, 10, 3, 0)), ("day", NY, 0, 0, 0), US_NY)
@example(micros(ny(2024, 11, 3, 23, 59)), ("week", NY, 0, 0, 0), MS_UTC)
@example(micros(dt.datetime(2024, 4, 6, 15, 10, tzinfo=UTC)), ("day", LORD_HOWE, 0, 0, 0), US_NY)
def test_value_of_an_instant_is_the_value_of_its_dagster_window(offset, cadence, source):
    unit, zone, minute, hour, day_offset = cadence
    try:
        window = TimeWindow(unit, zone, minute, hour, day_offset)
    except SpecError:
        # refused: a start at a wall time the zone skips or repeats (tested above)
        window = TimeWindow(unit, zone, 0, 0, day_offset)
    if not window.monotone(source):
        # Windows are binned on the local wall clock, which runs backwards at a DST fall-back.
        # A window starting in the small hours can start inside the repeated wall-clock time:
        # daily at 01:30 in New York, 01:30-01:59 EDT of 2024-11-03 is binned to 2024-11-03
        # while Dagster's window of that day only starts at 01:30 EST, an hour later. Such
        # windows are not monotone on the instant and differ from Dagster's inside the fold
        # (where a window's last instant falls in it, the round-trip tests above catch it);
        # monotone ones (any offset in fixed-offset zones, midnight in DST zones) must agree
        # with Dagster everywhere, so a non-monotone draw falls back to the zone's midnight.
        window = dataclasses.replace(window, minute_offset=0, hour_offset=0)
    pdef = dagster_def(
        unit,
        zone,
        window.minute_offset,
        window.hour_offset,
        window.day,
        start="2019-11-01",
        end="2027-02-01",
    )
    assert time_window(pdef) == window
    instant = LOW + dt.timedelta(microseconds=offset)
    instant -= dt.timedelta(microseconds=instant.microsecond % tick(source).microseconds)
    w = pdef.time_window_for_partition_key(
        pdef.get_partition_key_for_timestamp(instant.timestamp())
    )
    assert w.start <= instant < w.end  # Dagster's own window holds the instant
    [value] = window_values(window, source, [instant])
    assert norm(value) == norm(expected_value(w, unit, source, zone))
