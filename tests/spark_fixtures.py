"""The Spark session shared by the Spark tests (local[2], one per test session), and a table
with a column of every type.

Test modules import the fixture (``from spark_fixtures import spark_session``); it is
named ``spark``, and every module importing it shares the one SparkSession."""

from __future__ import annotations

import datetime as dt
import decimal
import math
import os
import sys
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pytest
from conftest import sorted_rows
from pyspark.sql import SparkSession

from dagster_lance_partitioned.spark import register


@pytest.fixture(scope="session", name="spark")
def spark_session() -> Iterator[SparkSession]:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    session = (
        SparkSession.builder.master("local[2]")
        .appName("dagster-lance-partitioned-tests")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


UTC = dt.UTC


def every_type_table() -> pa.Table:
    """One column of every type the core supports, with NULLs (also in partition columns)."""
    ts = [dt.datetime(2025, 12, 10, 1, 2, 3, 456789), None, dt.datetime(1960, 1, 1)]
    ts += [dt.datetime(2025, 1, 1)]
    utc = [dt.datetime(2025, 12, 10, 1, 2, 3, tzinfo=UTC), None]
    utc += [dt.datetime(2025, 12, 11, tzinfo=UTC), dt.datetime(2025, 12, 10, 23, 59, tzinfo=UTC)]
    ny = [dt.datetime(2025, 12, 10, 1, 2, 3, 456000, tzinfo=UTC), None]
    ny += [dt.datetime(1960, 1, 1, tzinfo=UTC), dt.datetime(2025, 7, 1, tzinfo=UTC)]
    nested = pa.struct(
        [("a", pa.int32()), ("b", pa.list_(pa.utf8())), ("c", pa.struct([("x", pa.float64())]))]
    )
    d = decimal.Decimal
    columns = {
        "id": pa.array([1, 2, 3, 4], pa.int64()),
        "country": pa.array(["US", None, "FR", None], pa.utf8()),
        "i8": pa.array([-1, None, 127, 0], pa.int8()),
        "i16": pa.array([1, 2, None, -32768], pa.int16()),
        "i32": pa.array([1, 2, 3, None], pa.int32()),
        "u8": pa.array([255, 0, None, 1], pa.uint8()),
        "u16": pa.array([65535, 0, None, 1], pa.uint16()),
        "u32": pa.array([4294967295, 0, None, 1], pa.uint32()),
        "u64": pa.array([18446744073709551615, 0, None, 1], pa.uint64()),
        "f16": pa.array(np.array([1.5, 2.0, 0, 3], dtype=np.float16), pa.float16()),
        "f32": pa.array([1.5, None, float("nan"), -0.0], pa.float32()),
        "f64": pa.array([1.5, None, float("inf"), 2.25], pa.float64()),
        "b": pa.array([True, False, None, True], pa.bool_()),
        "s": pa.array(["é", "", None, "x'y"], pa.large_utf8()),
        "bin": pa.array([b"\x00\x01", b"", None, b"z"], pa.binary()),
        "lbin": pa.array([b"a", None, b"", b"b"], pa.large_binary()),
        "fbin": pa.array([b"abc", None, b"xyz", b"\x00\x00\x00"], pa.binary(3)),
        "d32": pa.array([dt.date(2025, 12, 10), None, dt.date(1969, 12, 31), None], pa.date32()),
        "d64": pa.array([dt.date(2025, 12, 10), None, dt.date(1970, 1, 1), None], pa.date64()),
        "ts": pa.array(ts, pa.timestamp("us")),
        "ts_ns": pa.array(ts, pa.timestamp("ns")),
        "ts_ny": pa.array(ny, pa.timestamp("ms", tz="America/New_York")),
        "ts_utc": pa.array(utc, pa.timestamp("us", tz="UTC")),
        "dec": pa.array([d("12.34"), None, d("-0.01"), d("99999999.99")], pa.decimal128(10, 2)),
        "dec38": pa.array(
            [d("1234567890123456789012345678.0123456789"), None, d("0"), d("-1.5")],
            pa.decimal128(38, 10),
        ),
        "t64": pa.array([dt.time(1, 2, 3, 4), None, dt.time(23, 59, 59, 999999), None]),
        "t32": pa.array([dt.time(1, 2, 3, 4000), None, dt.time(0), dt.time(12)], pa.time32("ms")),
        "dur": pa.array([dt.timedelta(days=1, microseconds=5), None, dt.timedelta(0), None]),
        "st": pa.array(
            [
                {"a": 1, "b": ["x", None], "c": {"x": 1.0}},
                None,
                {"a": None, "b": None, "c": None},
                {"a": 3, "b": [], "c": {"x": None}},
            ],
            nested,
        ),
        "li": pa.array([[1, 2], None, [], [None]], pa.list_(pa.int64())),
        "lli": pa.array(
            [[{"k": "a", "v": 1}], None, [], [None]],
            pa.large_list(pa.struct([("k", pa.utf8()), ("v", pa.int16())])),
        ),
        "fsl": pa.array([[1.0, 2.0], None, [None, 3.0], [0.0, 0.0]], pa.list_(pa.float32(), 2)),
        "m": pa.array(
            [[("a", 1), ("b", None)], None, [], [("z", 3)]], pa.map_(pa.utf8(), pa.int64())
        ),
    }
    return pa.table(columns)


def norm(v):
    """A value comparable across Arrow and Spark representations (NaN, float16, decimals that
    hold integers such as uint64)."""
    if isinstance(v, np.floating):
        v = float(v)
    if isinstance(v, float) and math.isnan(v):
        return "NaN"
    if isinstance(v, decimal.Decimal) and v == v.to_integral_value():
        return int(v)
    if isinstance(v, dict):
        return {k: norm(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [norm(x) for x in v]
    return v


def rows_of(table: pa.Table) -> list[dict]:
    return [norm(r) for r in sorted_rows(table)]
