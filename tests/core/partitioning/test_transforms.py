"""Partition transforms own their capabilities: order, granularity, identity, the source types
they apply to, their result type, their pruning projection, and what an expression's SQL is."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from dagster_lance_partitioned import PartitionField, SpecField
from dagster_lance_partitioned.core.errors import SpecError, UnknownTransformError
from dagster_lance_partitioned.core.expr.predicates import TRUE, Cmp, InSet, IsNull, Like, Or
from dagster_lance_partitioned.core.partitioning.transforms import (
    Bucket,
    Day,
    ExpressionTransform,
    Granularity,
    Hour,
    Identity,
    Month,
    MultiBucket,
    Transform,
    Truncate,
    Year,
    parse_expression,
    transform_from_json,
)
from dagster_lance_partitioned.core.partitioning.windows import TimeWindow

DATE = pa.date32()
TS = pa.timestamp("us", tz="UTC")
STR = pa.utf8()
I64 = pa.int64()

# transform, preserves order, granularity, identity, default field id suffix
CAPABILITIES = [
    (Identity(), True, None, True, ""),
    (Year(), True, Granularity.YEAR, False, "_year"),
    (Month(), False, Granularity.MONTH, False, "_month"),
    (Day(), False, Granularity.DAY, False, "_day"),
    (Hour(), False, Granularity.HOUR, False, "_hour"),
    (Bucket(16), False, None, False, "_bucket_16"),
    (MultiBucket(8), False, None, False, "_bucket_8"),
    (Truncate(3), True, None, False, "_trunc_3"),
    (ExpressionTransform("upper(col0)", STR), False, None, False, None),
]


@pytest.mark.parametrize(
    ("transform", "order", "granularity", "identity", "suffix"),
    CAPABILITIES,
    ids=lambda v: type(v).__name__ if isinstance(v, Transform) else None,
)
def test_capabilities(transform, order, granularity, identity, suffix):
    assert transform.preserves_order is order
    assert transform.granularity is granularity
    assert transform.is_identity is identity
    if suffix is None:
        with pytest.raises(SpecError, match="explicit field_id"):
            transform.field_id_suffix  # noqa: B018
    else:
        assert transform.field_id_suffix == suffix


def test_transform_is_abstract():
    with pytest.raises(TypeError):
        Transform()  # type: ignore[abstract]


def test_granularity_lists_coarsest_first_and_coarser_compares_greater():
    assert list(Granularity) == [
        Granularity.YEAR,
        Granularity.MONTH,
        Granularity.DAY,
        Granularity.HOUR,
    ]
    assert Granularity.YEAR > Granularity.MONTH > Granularity.DAY > Granularity.HOUR
    assert [g.unit for g in Granularity] == ["year", "month", "day", "hour"]


@pytest.mark.parametrize(
    ("transform", "sources", "result"),
    [
        (Identity(), [STR], STR),
        (Identity(), [DATE], DATE),
        (Year(), [DATE], pa.int32()),
        (Month(), [TS], pa.int32()),
        (Day(), [pa.timestamp("ns")], pa.int32()),
        (Hour(), [TS], pa.int32()),
        (Bucket(4), [STR], pa.int32()),
        (MultiBucket(4), [STR, I64], pa.int32()),
        (Truncate(2), [STR], STR),
        (Truncate(10), [I64], I64),
        (Truncate(10), [pa.decimal128(10, 2)], pa.decimal128(10, 2)),
        (ExpressionTransform("CAST(col0 AS DATE)", DATE), [TS], DATE),
    ],
)
def test_result_type(transform, sources, result):
    assert transform.can_transform(sources)
    assert transform.result_type(sources) == result


@pytest.mark.parametrize(
    ("transform", "sources", "problem"),
    [
        (Year(), [STR], "'year' needs a date or timestamp column, got string"),
        (Month(), [I64], "'month' needs a date or timestamp column"),
        (Hour(), [DATE], "'hour' needs a timestamp column, got date32"),
        (Truncate(3), [pa.float64()], "truncate needs a string, integer or decimal column"),
        (Identity(), [STR, STR], "takes 1 source column(s), got 2"),
        (Bucket(4), [], "takes 1 source column(s), got 0"),
        (MultiBucket(4), [], "'multi_bucket' needs sources"),
    ],
)
def test_sources_a_transform_refuses(transform, sources, problem):
    assert not transform.can_transform(sources)
    assert problem in transform.source_problem(sources)
    with pytest.raises(SpecError, match=r"partition field 'f': .*") as e:
        transform.check_sources(sources, "f")
    assert problem in str(e.value)


@pytest.mark.parametrize(
    "transform",
    [Identity(), Year(), Month(), Day(), Hour(), Bucket(3), MultiBucket(5), Truncate(7)],
)
def test_json_round_trip(transform):
    assert transform_from_json(transform.to_json()) == transform


def test_unknown_transform_type_is_refused():
    with pytest.raises(UnknownTransformError, match=r"'zorder' \(known: bucket, day"):
        transform_from_json({"type": "zorder"}, "f")
    with pytest.raises(SpecError, match="needs 'width'"):
        transform_from_json({"type": "truncate"}, "f")
    with pytest.raises(SpecError, match="positive"):
        Bucket(0)


def test_an_expression_is_stored_as_an_expression():
    t = ExpressionTransform("upper(col0)", STR)
    assert t.expression([STR]) == "upper(col0)"
    with pytest.raises(SpecError, match="stored as an expression"):
        t.to_json()


# -- reading expressions ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("sql", "sources", "expected"),
    [
        ("col0", [STR], Identity()),
        (" COL0 ", [I64], Identity()),
        ("date_part('year', col0)", [DATE], Year()),
        ("DATE_PART( 'Month' , col0 )", [TS], Month()),
        ("date_part('day',col0)", [TS], Day()),
        ("date_part('hour', col0)", [TS], Hour()),
        ("left(col0, 3)", [STR], Truncate(3)),
        ("col0 - (col0 % 10)", [I64], Truncate(10)),
        # the SQL must be what the transform stands for over these sources
        ("date_part('hour', col0)", [DATE], None),  # hour needs a timestamp
        ("date_part('year', col0)", [STR], None),
        ("left(col0, 3)", [I64], None),  # truncate of an integer is arithmetic
        ("col0 - (col0 % 10)", [STR], None),
        ("left(col0, 0)", [STR], None),
        ("col0", [pa.null()], None),  # a dropped source confirms nothing
        ("col0", [STR, STR], None),
        ("col1", [STR, STR], None),
        ("abs(hash(col0)) % 16", [STR], None),  # the draft's xxhash64, not bucket
        ("CAST(col0 AS DATE)", [TS], None),
    ],
)
def test_parse_expression(sql, sources, expected):
    got = parse_expression(sql, sources, pa.int64())
    if expected is None:
        assert got == ExpressionTransform(sql, pa.int64())
    else:
        assert got == expected


def test_an_expression_is_parsed_once():
    first = parse_expression("date_part('year', col0)", [DATE], pa.int32())
    assert parse_expression("date_part('year', col0)", [DATE], pa.int32()) is first
    other = parse_expression("upper(col0)", [STR], STR)
    assert parse_expression("upper(col0)", [STR], STR) is other


def test_spec_field_asks_its_transform():
    stored = SpecField("y", (1,), pa.int32(), Year())
    assert stored.transform_for([DATE]) is stored.transform
    draft = SpecField("y", (1,), pa.int64(), expression="date_part('year', col0)", column="y")
    assert draft.transform_for([DATE]) == Year()  # declared int64: still a year, evaluated as SQL
    # a calendar window is an expression this package generates: no transform's SQL
    daily = SpecField("w", (1,), DATE, expression=TimeWindow("day").expression(TS))
    assert isinstance(daily.transform_for([TS]), ExpressionTransform)
    custom = SpecField("c", (1,), STR, expression="upper(col0)")
    assert isinstance(custom.transform_for([STR]), ExpressionTransform)


def test_default_field_ids_come_from_the_transform():
    assert PartitionField.identity("country").default_field_id() == "country"
    assert PartitionField.year("event date").default_field_id() == "event_date_year"
    assert PartitionField.bucket("u", 16).default_field_id() == "u_bucket_16"
    assert PartitionField.multi_bucket(["a", "b"], 8).default_field_id() == "a_b_bucket_8"
    assert PartitionField.truncate("name", 3).default_field_id() == "name_trunc_3"
    expr = PartitionField(("a",), None, "upper(col0)", STR)
    with pytest.raises(SpecError, match="explicit field_id"):
        expr.default_field_id()


# -- projection ---------------------------------------------------------------------------------
def _years(values):
    return [None if v is None else v.year for v in values]


def _months(values):
    return [None if v is None else v.month for v in values]


def test_order_preserving_transforms_map_ranges():
    d = dt.date(2024, 5, 17)
    assert Year().project(Cmp("d", ">=", d), "p", _years) == Cmp("p", ">=", 2024)
    assert Year().project(Cmp("d", "<", d), "p", _years) == Cmp("p", "<=", 2024)
    # month repeats every year: a range on the date says nothing about it alone
    assert Month().project(Cmp("d", ">=", d), "p", _months) == TRUE
    assert Month().project(Cmp("d", "=", d), "p", _months) == Cmp("p", "=", 5)


def test_point_projection_and_nulls():
    evaluate = _months
    leaf = InSet("d", (dt.date(2024, 1, 1), dt.date(2023, 1, 9), dt.date(2024, 2, 1)))
    assert Month().project(leaf, "p", evaluate) == InSet("p", (1, 2))
    assert Month().project(IsNull("d", True), "p", evaluate) == IsNull("p", True)
    assert Bucket(4).project(Cmp("d", "!=", 3), "p", evaluate) == TRUE
    assert Bucket(4).project(Like("d", "a%"), "p", evaluate) == TRUE


def test_identity_projects_exactly():
    for leaf in (Cmp("c", "!=", "x"), InSet("c", ("a",), True), Like("c", "a%", True)):
        projected = Identity().project(leaf, "p", lambda vs: vs)
        assert projected == type(leaf)(**{**vars(leaf), "column": "p"})


def test_truncate_projects_prefixes_and_ranges():
    def evaluate(vs):
        return [None if v is None else v[:3] for v in vs]

    t = Truncate(3)
    assert t.project(Like("s", "abcd%"), "p", evaluate) == Cmp("p", "=", "abc")
    assert t.project(Like("s", "ab%"), "p", evaluate) == Like("p", "ab%")
    assert t.project(Like("s", "a_c%"), "p", evaluate) == TRUE
    assert t.project(Cmp("s", ">", "abcz"), "p", evaluate) == Cmp("p", ">=", "abc")


def test_expression_projection_evaluates_literals():
    # an expression may give NULL a value and a value NULL
    def evaluate(vs):
        return [{None: "none", 1: None}.get(v, "other") for v in vs]

    t = ExpressionTransform("f(col0)", STR)
    assert t.project(IsNull("x"), "p", evaluate) == Cmp("p", "=", "none")
    assert t.project(InSet("x", (1, 2)), "p", evaluate) == Or((Cmp("p", "=", "other"), IsNull("p")))
    assert t.project(Cmp("x", "<", 3), "p", evaluate) == TRUE  # nothing known about order
    assert t.project(Cmp("x", "=", 1), "p", evaluate) == IsNull("p")
