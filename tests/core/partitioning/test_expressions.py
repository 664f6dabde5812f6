"""Partition expressions in DataFusion: hash UDFs, transforms' derived expressions, result types."""

from __future__ import annotations

import datetime as dt
import decimal

import mmh3
import pyarrow as pa
import pytest
import xxhash

from dagster_lance_partitioned.core.errors import ExpressionError, ResultTypeMismatchError
from dagster_lance_partitioned.core.partitioning.expressions import (
    CompiledExpression,
    coerce_result,
)
from dagster_lance_partitioned.core.partitioning.transforms import Bucket, MultiBucket, Truncate


def ev(sql: str, *cols: pa.Array) -> list:
    return CompiledExpression(sql, [c.type for c in cols]).evaluate(list(cols)).to_pylist()


@pytest.mark.parametrize(
    ("array", "expected"),
    [
        (pa.array([34], pa.int32()), 2017239379),
        (pa.array([34], pa.int64()), 2017239379),
        (pa.array([dt.date(2017, 11, 16)]), -653330422),
        (pa.array([dt.time(22, 31, 8)], pa.time64("us")), -662762989),
        (pa.array([dt.datetime(2017, 11, 16, 22, 31, 8)], pa.timestamp("us")), -2047944441),
        (
            pa.array([dt.datetime(2017, 11, 16, 22, 31, 8)], pa.timestamp("ns", tz="UTC")),
            -2047944441,
        ),
        (pa.array(["iceberg"]), 1210000089),
        (pa.array([b"\x00\x01\x02\x03"]), -188683207),
        (pa.array([decimal.Decimal("14.20")], pa.decimal128(4, 2)), -500754589),
    ],
)
def test_murmur3_udf_test_vectors_in_sql(array, expected):
    assert ev("murmur3(col0)", array) == [expected]


def test_hash_udfs_null_and_multi():
    a = pa.array([1, None, None], pa.int64())
    b = pa.array(["x", "y", None])
    assert ev("murmur3(col0)", a) == [mmh3.hash((1).to_bytes(8, "little", signed=True)), None, None]
    multi = ev("murmur3_multi(col0, col1)", a, b)
    one = (1).to_bytes(8, "little", signed=True)
    assert multi == [mmh3.hash(one + b"x"), mmh3.hash(b"y"), None]
    h = ev("hash(col0)", pa.array(["iceberg"]))
    digest = xxhash.xxh64_intdigest(b"iceberg")
    assert h == [digest - (1 << 64) if digest >= 1 << 63 else digest]


def test_call_sites_with_different_types_and_nesting():
    a = pa.array([34], pa.int32())
    s = pa.array(["iceberg"])
    got = ev("CAST(murmur3(col0) AS BIGINT) + CAST(murmur3(col1) AS BIGINT)", a, s)
    assert got == [2017239379 + 1210000089]
    nested = ev("murmur3(concat(col1, CAST(murmur3(col0) AS VARCHAR)))", a, s)
    assert nested == [mmh3.hash(b"iceberg" + b"2017239379")]
    # a string literal that looks like a call is not rewritten
    assert ev("concat('murmur3(', col0)", s) == ["murmur3(iceberg"]
    assert ev("MURMUR3 ( col0 )", a) == [2017239379]


def test_bucket_abs_is_64_bit_and_in_range():
    values = pa.array([*range(-5000, 5000), 2**31 - 1, -(2**31)], pa.int64())
    sql = Bucket(7).expression([pa.int64()])
    got = CompiledExpression(sql, [pa.int64()]).evaluate([values])
    assert got.type == pa.int32()
    ref = [abs(mmh3.hash(v.to_bytes(8, "little", signed=True))) % 7 for v in values.to_pylist()]
    assert got.to_pylist() == ref
    # the value whose hash is INT32_MIN would overflow a 32-bit abs; 64-bit abs gives 2**31 % N
    assert CompiledExpression("CAST(abs(CAST(col0 AS BIGINT)) % 7 AS INT)", [pa.int32()]).evaluate(
        [pa.array([-(2**31)], pa.int32())]
    ).to_pylist() == [2**31 % 7]


def test_multi_bucket_and_truncate_expressions():
    a, b = pa.array([1, 2], pa.int64()), pa.array(["p", None])
    sql = MultiBucket(5).expression([pa.int64(), pa.utf8()])
    got = CompiledExpression(sql, [pa.int64(), pa.utf8()]).evaluate([a, b]).to_pylist()
    enc = [(v).to_bytes(8, "little", signed=True) for v in (1, 2)]
    assert got == [abs(mmh3.hash(enc[0] + b"p")) % 5, abs(mmh3.hash(enc[1])) % 5]
    assert ev(Truncate(3).expression([pa.utf8()]), pa.array(["abcdef", "ab", None])) == [
        "abc",
        "ab",
        None,
    ]
    assert ev(Truncate(10).expression([pa.int32()]), pa.array([123, 7, -1], pa.int32())) == [
        120,
        0,
        0,
    ]


def test_date_part_on_zoned_timestamps_uses_local_time():
    ts = pa.array([dt.datetime(2025, 3, 9, 7, 30)], pa.timestamp("us", tz="America/New_York"))
    assert ev("date_part('hour', col0)", ts) == [3]  # 07:30 UTC is 03:30 EDT
    assert ev("date_part('day', col0)", ts) == [9]


def test_result_type_checks():
    assert coerce_result(pa.array([1, 2], pa.int64()), pa.int32(), "f").type == pa.int32()
    with pytest.raises(ResultTypeMismatchError, match=r"'f'.*int64.*utf8|'f'.*int64.*string"):
        coerce_result(pa.array([1], pa.int64()), pa.utf8(), "f")
    with pytest.raises(ResultTypeMismatchError, match="do not fit"):
        coerce_result(pa.array([2**40], pa.int64()), pa.int32(), "f")


def test_bad_expressions_raise_expression_error():
    with pytest.raises(ExpressionError, match="nope"):
        CompiledExpression("nope(col0)", [pa.int64()], label="nope_field")
    with pytest.raises(ExpressionError, match="cannot hash"):
        CompiledExpression("murmur3(col0)", [pa.list_(pa.int64())])
    with pytest.raises(ExpressionError, match="exactly one argument"):
        CompiledExpression("murmur3(col0, col1)", [pa.int64(), pa.int64()])
