"""``day``, ``month`` and ``hour`` are the spec's ``date_part`` (day of the month, month of the
year, hour of the day), not dates: a spec whose calendar fields group rows of many periods into
one partition warns with :class:`MixedCalendarPeriodsWarning` once when it is created or added
(``create``, ``update_spec``, a transaction's ``update_spec``, the IO manager's
``lance/partition_by``), naming the window field that gives one partition per period; specs
naming one period per partition, and specs read back from storage, never warn. Real namespaces
on local disk."""

from __future__ import annotations

import datetime as dt
import warnings

import dagster as dg
import pyarrow as pa
import pytest

from dagster_lance_partitioned import (
    MixedCalendarPeriodsWarning,
    PartitionedNamespace,
    PartitionField,
    TimeWindow,
)
from dagster_lance_partitioned.orchestration import LancePartitionedIOManager

TS = pa.timestamp("us", tz="UTC")
SCHEMA = pa.schema([("id", pa.int64()), ("d", pa.date32()), ("ts", TS), ("country", pa.utf8())])


def two_years() -> pa.Table:
    """One row per day of 2024 and 2025 (730 days), at noon UTC."""
    days = [dt.date(2024, 1, 1) + dt.timedelta(days=i) for i in range(730)]
    return pa.table(
        {
            "id": list(range(730)),
            "d": days,
            "ts": [dt.datetime(x.year, x.month, x.day, 12, tzinfo=dt.UTC) for x in days],
            "country": ["US"] * 730,
        },
        schema=SCHEMA,
    )


def create(tmp_path, fields, name="ns"):
    return PartitionedNamespace.create(str(tmp_path / name), SCHEMA, fields)


@pytest.mark.parametrize(
    ("fields", "field_id", "window"),
    [
        ([PartitionField.day("d")], "d_day", "TimeWindow('day')"),
        ([PartitionField.year("d"), PartitionField.day("d")], "d_day", "TimeWindow('day')"),
        ([PartitionField.month("d"), PartitionField.day("d")], "d_day", "TimeWindow('day')"),
        ([PartitionField.month("d")], "d_month", "TimeWindow('month')"),
        ([PartitionField.identity("country"), PartitionField.month("ts")], "ts_month", "month"),
        ([PartitionField.hour("ts")], "ts_hour", "TimeWindow('hour')"),
        (
            [PartitionField.year("ts"), PartitionField.month("ts"), PartitionField.hour("ts")],
            "ts_hour",
            "TimeWindow('hour')",
        ),
        (  # a monthly window names the month, not the day an hour belongs to
            [PartitionField.window("ts", TimeWindow("month"), TS), PartitionField.hour("ts")],
            "ts_hour",
            "TimeWindow('hour')",
        ),
        (  # the year of another column names no period of this one
            [PartitionField.year("d"), PartitionField.month("ts")],
            "ts_month",
            "TimeWindow('month')",
        ),
    ],
)
def test_a_spec_mixing_periods_warns_once_naming_the_field_and_the_window(
    tmp_path, fields, field_id, window
):
    with pytest.warns(MixedCalendarPeriodsWarning) as record:
        create(tmp_path, fields)
    [warning] = [w for w in record if w.category is MixedCalendarPeriodsWarning]
    text = str(warning.message)
    assert f"partition field {field_id!r}" in text
    assert "PartitionField.window(" in text and window in text
    assert warning.filename == __file__  # points at the caller's line, not the package


def test_day_alone_groups_730_days_into_31_partitions_and_says_so(tmp_path):
    """What the issue saw: ``day(col)`` of two years is 31 partitions, each mixing months; the
    warning says so, and the window it names gives one partition per day."""
    with pytest.warns(MixedCalendarPeriodsWarning, match=r"day of the month \(1-31\)"):
        ns = create(tmp_path, [PartitionField.day("d")], "by_day_of_month")
    ns.write(two_years())
    assert len(ns.inspect.partitions()) == 31
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        daily = create(tmp_path, [PartitionField.window("d", TimeWindow("day"), pa.date32())])
    daily.write(two_years())
    assert len(daily.inspect.partitions()) == 730


@pytest.mark.parametrize(
    "fields",
    [
        [PartitionField.year("d"), PartitionField.month("d"), PartitionField.day("d")],
        [PartitionField.year("d"), PartitionField.month("d")],
        [PartitionField.year("d")],
        [
            PartitionField.year("ts"),
            PartitionField.month("ts"),
            PartitionField.day("ts"),
            PartitionField.hour("ts"),
        ],
        [PartitionField.window("ts", TimeWindow("day"), TS), PartitionField.hour("ts")],
        [PartitionField.window("d", TimeWindow("month"), pa.date32()), PartitionField.day("d")],
        [PartitionField.window("d", TimeWindow("week"), pa.date32()), PartitionField.day("d")],
        [PartitionField.window("ts", TimeWindow("hour", "America/New_York"), TS)],
        [PartitionField.identity("d"), PartitionField.day("d")],
        [PartitionField.identity("country"), PartitionField.bucket("id", 4)],
        [  # an expression this package cannot read: not judged
            PartitionField.expression(
                ["ts"], "CAST(col0 AS DATE)", result_type=pa.date32(), field_id="ts_date"
            ),
            PartitionField.hour("ts"),
        ],
    ],
)
def test_specs_naming_one_period_per_partition_do_not_warn(tmp_path, fields):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        create(tmp_path, fields)


def test_specs_read_back_from_storage_do_not_warn(tmp_path):
    with pytest.warns(MixedCalendarPeriodsWarning):
        ns = create(tmp_path, [PartitionField.day("d")])
    ns.write(two_years().slice(0, 40))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = PartitionedNamespace.open(ns.uri)
        again.to_table(filter="d = DATE '2024-01-05'")
        again.write(two_years().slice(40, 40))  # a write under the stored spec
        again.inspect.check_integrity()


def test_update_spec_warns_once_and_only_when_it_adds_a_mixing_spec(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ns = create(tmp_path, [PartitionField.year("d")])
    with pytest.warns(MixedCalendarPeriodsWarning, match="'d_day'") as record:
        ns.update_spec([PartitionField.year("d"), PartitionField.day("d")])
    assert sum(w.category is MixedCalendarPeriodsWarning for w in record) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ns.update_spec(list(ns.current_spec.fields))  # the same spec: no new version, no warning
        ns.update_spec(
            [PartitionField.year("d"), PartitionField.month("d"), PartitionField.day("d")]
        )
    assert ns.current_spec.spec_id == 3


def test_a_transactions_spec_change_warns_once(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ns = create(tmp_path, [PartitionField.identity("country")])
    extra = pa.field("at", TS)
    rows = two_years().slice(0, 10)
    rows = rows.append_column(extra, rows["ts"])
    warns = pytest.warns(MixedCalendarPeriodsWarning, match="'at_hour'")
    with warns as record, ns.transaction() as tx:
        tx.add_columns([extra])  # the hour's column exists only inside the transaction
        tx.update_spec([PartitionField.identity("country"), PartitionField.hour("at")])
        tx.write(rows)
    assert sum(w.category is MixedCalendarPeriodsWarning for w in record) == 1
    assert ns.refresh().count_rows() == 10


def test_the_io_managers_partition_by_warns_in_the_run(tmp_path):
    """``lance/partition_by: ['day(d)']`` of an unpartitioned asset: the namespace is created
    with the spec it names, and the run's warning says what the field does."""

    @dg.asset(metadata={"lance/partition_by": ["day(d)"]})
    def by_day() -> pa.Table:
        return two_years().slice(0, 60)

    with pytest.warns(MixedCalendarPeriodsWarning, match="PartitionField.window"):
        result = dg.materialize(
            [by_day], resources={"io_manager": LancePartitionedIOManager(root=str(tmp_path))}
        )
    assert result.success
    assert len(PartitionedNamespace.open(str(tmp_path / "by_day")).inspect.partitions()) == 31
