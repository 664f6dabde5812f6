"""Range and list partitioning: CASE WHEN expressions built by helpers, written and read back."""

from __future__ import annotations

import datetime as dt
import decimal

import lance
import pyarrow as pa
import pytest
from helpers.data import sorted_rows

from dagster_lance_partitioned import PartitionedNamespace, PartitionField
from dagster_lance_partitioned.core.errors import SpecError
from dagster_lance_partitioned.core.partitioning.range_list import (
    list_expression,
    range_expression,
    range_labels,
    sql_literal,
)

D = decimal.Decimal


def _partition_rows(ns: PartitionedNamespace) -> dict[str | None, list[dict]]:
    """Each partition table's rows (read directly with pylance), by its label."""
    out: dict[str | None, list[dict]] = {}
    for task in ns.plan_scan().tasks:
        (label,) = task.partition_values.values()
        assert label not in out  # one table per label
        out[label] = lance.dataset(task.uri, version=task.read_version).to_table().to_pylist()
    return out


def _range_label(value, bounds, labels):
    if value is None:
        return None
    for b, label in zip(bounds, labels, strict=False):
        if value < b:
            return label
    return labels[-1]


# -- expressions --------------------------------------------------------------------------------


def test_range_expression_text():
    bounds = [dt.date(2017, 1, 1), dt.date(2018, 1, 1)]
    assert range_expression(bounds) == (
        "CASE WHEN col0 IS NULL THEN NULL WHEN col0 < DATE '2017-01-01' THEN 'p0' "
        "WHEN col0 < DATE '2018-01-01' THEN 'p1' ELSE 'p2' END"
    )
    assert range_expression([10], ["low", "it's high"]) == (
        "CASE WHEN col0 IS NULL THEN NULL WHEN col0 < 10 THEN 'low' ELSE 'it''s high' END"
    )


def test_range_labels_sort_in_range_order():
    assert range_labels(3) == ["p0", "p1", "p2"]
    labels = range_labels(11)
    assert labels[0] == "p00" and labels[-1] == "p10"
    assert sorted(labels) == labels
    assert sorted(range_labels(101)) == range_labels(101)


@pytest.mark.parametrize(
    ("value", "literal"),
    [
        (5, "5"),
        (-3, "-3"),
        (2.5, "2.5"),
        (D("12.340"), "CAST('12.340' AS DECIMAL(5, 3))"),
        (D("-0.05"), "CAST('-0.05' AS DECIMAL(2, 2))"),
        (D("1E+2"), "CAST('100' AS DECIMAL(3, 0))"),
        (dt.date(2017, 1, 1), "DATE '2017-01-01'"),
        (dt.datetime(2017, 1, 1, 12, 30), "TIMESTAMP '2017-01-01T12:30:00'"),
        (
            dt.datetime(2017, 1, 1, 1, 0, tzinfo=dt.timezone(dt.timedelta(hours=1))),
            "TIMESTAMP '2017-01-01T00:00:00+00:00'",
        ),
        ("O'Brien", "'O''Brien'"),
        (True, "TRUE"),
        (pa.scalar(7, pa.int16()), "7"),
    ],
)
def test_literals(value, literal):
    assert sql_literal(value) == literal


def test_list_expression_text():
    expr = list_expression({"asia": ["China", "India"], "na": ["Canada"]}, default="other")
    assert expr == (
        "CASE WHEN col0 IS NULL THEN NULL WHEN col0 IN ('China', 'India') THEN 'asia' "
        "WHEN col0 IN ('Canada') THEN 'na' ELSE 'other' END"
    )
    assert list_expression({"a": [1, None]}, default=None) == (
        "CASE WHEN col0 IS NULL THEN 'a' WHEN col0 IN (1) THEN 'a' ELSE NULL END"
    )


@pytest.mark.parametrize(
    ("bounds", "labels", "match"),
    [
        ([], None, "at least one bound"),
        ([3, 2], None, "strictly increasing"),
        ([1, 1], None, "strictly increasing"),
        ([1, "a"], None, "mix"),
        ([dt.date(2020, 1, 1), None], None, "cannot be None"),
        ([1, 2], ["a", "b"], "3 partitions, got 2"),
        ([1], ["a", "a"], "repeat"),
        ([1], ["a", ""], "non-empty"),
        ([float("nan")], None, "non-finite"),
        ([b"x"], None, "cannot partition by"),
        (
            [dt.datetime(2020, 1, 1), dt.datetime(2021, 1, 1, tzinfo=dt.UTC)],
            None,
            "mix",
        ),
    ],
)
def test_range_validation(bounds, labels, match):
    with pytest.raises(SpecError, match=match):
        PartitionField.range("x", bounds, field_id="x_range", labels=labels)


@pytest.mark.parametrize(
    ("groups", "default", "match"),
    [
        ({}, "d", "at least one group"),
        ({"a": []}, "d", "empty"),
        ({"a": [1, 2], "b": [2, 3]}, "d", "disjoint; 2 is in 'a' and 'b'"),
        ({"a": [1], "b": [1.0]}, "d", "disjoint"),
        ({"a": [None], "b": [None]}, "d", "disjoint; None"),
        ({"a": [1, "x"]}, "d", "mix"),
        ({"a": "abc"}, "d", "sequence of values"),
        ({"": [1]}, "d", "non-empty"),
        ({"a": [1]}, "", "non-empty"),
    ],
)
def test_list_validation(groups, default, match):
    with pytest.raises(SpecError, match=match):
        PartitionField.list("x", groups, default=default, field_id="x_list")


def test_field_id_is_validated():
    with pytest.raises(SpecError, match="field id"):
        PartitionField.range("x", [1], field_id="bad id")


# -- written and read back ----------------------------------------------------------------------


def _ns(tmp_path, schema, field, name="ns"):
    return PartitionedNamespace.create(tmp_path / name, schema, [field])


def test_date_ranges_put_rows_in_the_right_partitions(tmp_path):
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("logdate", pa.date32())])
    bounds = [dt.date(2016, 1, 1), dt.date(2017, 1, 1), dt.date(2017, 2, 1)]
    ns = _ns(tmp_path, schema, PartitionField.range("logdate", bounds, field_id="logdate_range"))
    days = [
        dt.date(2015, 6, 1), dt.date(2015, 12, 31), dt.date(2016, 1, 1), dt.date(2016, 12, 31),
        dt.date(2017, 1, 1), dt.date(2017, 1, 31), dt.date(2017, 2, 1), dt.date(2030, 1, 1), None,
    ]  # fmt: skip
    data = pa.table({"id": range(len(days)), "logdate": pa.array(days, pa.date32())}, schema=schema)
    ns.write(data)
    labels = range_labels(4)
    parts = _partition_rows(ns)
    assert set(parts) == {"p0", "p1", "p2", "p3", None}
    for label, rows in parts.items():
        assert rows and all(_range_label(r["logdate"], bounds, labels) == label for r in rows)
    assert sorted_rows(ns.to_table()) == sorted_rows(data)
    got = ns.to_table("logdate >= DATE '2016-01-01' AND logdate < DATE '2017-01-01'")
    assert sorted(got["id"].to_pylist()) == [2, 3]
    assert ns.to_table("logdate IS NULL")["id"].to_pylist() == [8]
    spec_field = ns.current_spec.fields[0]
    assert spec_field.field_id == "logdate_range" and spec_field.result_type == pa.utf8()
    assert spec_field.expression.startswith("CASE WHEN col0 IS NULL THEN NULL")


@pytest.mark.parametrize(
    ("arrow_type", "bounds", "values"),
    [
        (pa.int32(), [0, 100, 1000], [-5, 0, 99, 100, 999, 1000, 5000, None]),
        (pa.int64(), [2**40], [-(2**62), 2**40 - 1, 2**40, 2**62]),
        (pa.float64(), [-1.5, 0.0, 2.25], [-10.0, -1.5, -0.1, 0.0, 2.2, 2.25, 99.0, None]),
        (
            pa.decimal128(10, 2),
            [D("-1.50"), D("0"), D("12.34")],
            [D("-2.00"), D("-1.50"), D("-0.01"), D("0.00"), D("12.33"), D("12.34"), None],
        ),
        (
            pa.timestamp("us"),
            [dt.datetime(2020, 1, 1), dt.datetime(2020, 1, 1, 0, 0, 1)],
            [
                dt.datetime(2019, 12, 31, 23, 59, 59),
                dt.datetime(2020, 1, 1),
                dt.datetime(2020, 1, 1, 0, 0, 0, 999999),
                dt.datetime(2020, 1, 1, 0, 0, 1),
                None,
            ],
        ),
        (
            pa.timestamp("us", tz="UTC"),
            [dt.datetime(2020, 1, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=1)))],
            [
                dt.datetime(2019, 12, 31, 23, 59, tzinfo=dt.UTC),
                dt.datetime(2020, 1, 1, 0, 0, tzinfo=dt.UTC),
            ],
        ),
        (pa.utf8(), ["b", "it's", "m"], ["a", "b", "ba", "it", "it's", "its", "m", "z", None]),
    ],
)
def test_ranges_over_every_literal_type(tmp_path, arrow_type, bounds, values):
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("v", arrow_type)])
    ns = _ns(tmp_path, schema, PartitionField.range("v", bounds, field_id="v_range"))
    data = pa.table({"id": range(len(values)), "v": pa.array(values, arrow_type)}, schema=schema)
    ns.write(data)
    labels = range_labels(len(bounds) + 1)
    parts = _partition_rows(ns)
    expected = {_range_label(v, bounds, labels) for v in values}
    assert set(parts) == expected
    for label, rows in parts.items():
        assert all(_range_label(r["v"], bounds, labels) == label for r in rows)
    assert sorted_rows(ns.to_table()) == sorted_rows(data)
    first = bounds[0]
    below = [r["id"] for r in data.to_pylist() if r["v"] is not None and r["v"] < first]
    assert sorted(ns.to_table([("v", "<", first)])["id"].to_pylist()) == below


def test_custom_labels(tmp_path):
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("age", pa.int32())])
    field = PartitionField.range(
        "age", [18, 65], field_id="age_band", labels=["minor", "adult", "senior"]
    )
    ns = _ns(tmp_path, schema, field)
    data = pa.table({"id": [1, 2, 3, 4], "age": pa.array([5, 18, 64, 90], pa.int32())})
    ns.write(data)
    parts = _partition_rows(ns)
    assert {k: sorted(r["id"] for r in v) for k, v in parts.items()} == {
        "minor": [1],
        "adult": [2, 3],
        "senior": [4],
    }
    assert ns.to_table("age >= 65")["id"].to_pylist() == [4]


def test_lists_put_rows_in_the_right_partitions(tmp_path):
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("country", pa.utf8())])
    groups = {"asia": ["China", "India"], "america": ["Canada", "America"], "au": ["Australia"]}
    ns = _ns(
        tmp_path, schema, PartitionField.list("country", groups, default="rest", field_id="area")
    )
    countries = [
        "China",
        "India",
        "Canada",
        "Australia",
        "France",
        "America",
        None,
        "Côte d'Ivoire",
    ]
    data = pa.table({"id": range(len(countries)), "country": countries}, schema=schema)
    ns.write(data)
    owner = {c: label for label, cs in groups.items() for c in cs}
    parts = _partition_rows(ns)
    assert set(parts) == {"asia", "america", "au", "rest", None}
    for label, rows in parts.items():
        for r in rows:
            expected = None if r["country"] is None else owner.get(r["country"], "rest")
            assert expected == label
    assert sorted_rows(ns.to_table()) == sorted_rows(data)
    assert sorted(ns.to_table("country IN ('India', 'France')")["id"].to_pylist()) == [1, 4]
    assert ns.to_table("country = 'Côte d''Ivoire'")["id"].to_pylist() == [7]


def test_list_with_null_group_and_null_default(tmp_path):
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("code", pa.int64())])
    field = PartitionField.list(
        "code", {"small": [1, 2, None], "big": [100]}, default=None, field_id="c"
    )
    ns = _ns(tmp_path, schema, field)
    data = pa.table({"id": [0, 1, 2, 3, 4], "code": [1, None, 100, 7, 2]}, schema=schema)
    ns.write(data)
    parts = {k: sorted(r["id"] for r in v) for k, v in _partition_rows(ns).items()}
    assert parts == {"small": [0, 1, 4], "big": [2], None: [3]}
    assert sorted_rows(ns.to_table()) == sorted_rows(data)
    assert ns.to_table("code = 7")["id"].to_pylist() == [3]


def test_list_over_dates_and_bools(tmp_path):
    schema = pa.schema(
        [pa.field("id", pa.int64()), pa.field("d", pa.date32()), pa.field("flag", pa.bool_())]
    )
    holidays = {"xmas": [dt.date(2025, 12, 25), dt.date(2024, 12, 25)]}
    ns = _ns(tmp_path, schema, PartitionField.list("d", holidays, field_id="holiday"))
    data = pa.table(
        {
            "id": [0, 1, 2],
            "d": pa.array([dt.date(2025, 12, 25), dt.date(2025, 12, 24), dt.date(2024, 12, 25)]),
            "flag": [True, False, None],
        },
        schema=schema,
    )
    ns.write(data)
    parts = {k: sorted(r["id"] for r in v) for k, v in _partition_rows(ns).items()}
    assert parts == {"xmas": [0, 2], "default": [1]}
    ns2 = _ns(tmp_path, schema, PartitionField.list("flag", {"yes": [True]}, field_id="f"), "ns2")
    ns2.write(data)
    parts = {k: sorted(r["id"] for r in v) for k, v in _partition_rows(ns2).items()}
    assert parts == {"yes": [0], "default": [1], None: [2]}


def test_range_over_a_column_of_another_type_is_refused_at_create(tmp_path):
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("d", pa.date32())])
    with pytest.raises(Exception, match="d_range"):
        _ns(tmp_path, schema, PartitionField.range("d", [True], field_id="d_range"))
    assert not (tmp_path / "ns" / "__manifest").exists()
