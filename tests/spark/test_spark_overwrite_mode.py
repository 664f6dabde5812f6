"""Which overwrite a Spark ``mode("overwrite")`` write is (real Spark, local[2], and a Spark
Connect server in a subprocess): option ``partitionOverwriteMode`` wins, else the session's
``spark.sql.sources.partitionOverwriteMode`` at the time of the write, else static."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator

import pyarrow as pa
import pytest
from helpers.data import sorted_rows

from dagster_lance_partitioned import PartitionedNamespace, PartitionField, WriteError
from dagster_lance_partitioned.spark import FORMAT, write_dataframe
from dagster_lance_partitioned.spark.types import spark_schema
from dagster_lance_partitioned.spark.writer import SESSION_OVERWRITE_CONF, make_writer

SCHEMA = pa.schema([("id", pa.int64()), ("part", pa.utf8()), ("value", pa.float64())])
FIELDS = [PartitionField.identity("part")]
ROWS_PER_PART = 5


def parts(n: int) -> list[str]:
    return [f"p{i:02d}" for i in range(n)]


def rows(names: list[str], start: int) -> pa.Table:
    """``ROWS_PER_PART`` rows in each partition of ``names``, ids from ``start``."""
    ids = list(range(start, start + ROWS_PER_PART * len(names)))
    return pa.table(
        {
            "id": ids,
            "part": [names[(i - start) // ROWS_PER_PART] for i in ids],
            "value": [i / 2 for i in ids],
        },
        schema=SCHEMA,
    )


def seeded(path, n: int) -> PartitionedNamespace:
    """A namespace with ``n`` partitions (``p00``...) of ``ROWS_PER_PART`` rows each."""
    ns = PartitionedNamespace.create(path, SCHEMA, FIELDS)
    ns.write(rows(parts(n), 0))
    return ns


def by_part(uri: str) -> dict[str, list[dict]]:
    """What readers see, per partition value."""
    out: dict[str, list[dict]] = {}
    for row in sorted_rows(PartitionedNamespace.open(uri).to_table()):
        out.setdefault(row["part"], []).append(row)
    return out


@pytest.fixture
def session_mode(spark) -> Iterator[Callable[[str | None], None]]:
    """Set (a value) or unset (None) the session's partition overwrite mode; unset afterwards,
    since the session is shared."""

    def set_mode(value: str | None) -> None:
        if value is None:
            spark.conf.unset(SESSION_OVERWRITE_CONF)
        else:
            spark.conf.set(SESSION_OVERWRITE_CONF, value)

    yield set_mode
    spark.conf.unset(SESSION_OVERWRITE_CONF)


def overwrite(spark, data: pa.Table, uri: str, option: str | None = None) -> None:
    writer = spark.createDataFrame(data).repartition(2).write.format(FORMAT).mode("overwrite")
    if option is not None:
        writer = writer.option("partitionOverwriteMode", option)
    writer.save(uri)


def test_session_dynamic_overwrite_keeps_the_partitions_not_written(spark, session_mode, tmp_path):
    ns = seeded(tmp_path / "ns", 20)
    before = by_part(ns.uri)
    session_mode("dynamic")
    new = rows(["p03", "p17"], 1000)
    overwrite(spark, new, ns.uri)
    after = by_part(ns.uri)
    assert sorted(after) == parts(20)  # nothing deregistered
    for name in set(parts(20)) - {"p03", "p17"}:
        assert after[name] == before[name], name
    assert after["p03"] + after["p17"] == sorted_rows(new)


def test_write_option_wins_then_session_then_static(spark, session_mode, tmp_path):
    # (option, session conf, whether only the written partitions are replaced)
    cases = [
        (None, "dynamic", True),
        (None, "DYNAMIC", True),
        ("static", "dynamic", False),
        ("dynamic", "static", True),
        ("Dynamic", None, True),
        (None, "static", False),
        (None, None, False),
    ]
    for i, (option, session, dynamic) in enumerate(cases):
        ns = seeded(tmp_path / f"ns{i}", 4)
        before = by_part(ns.uri)
        session_mode(session)
        new = rows(["p01"], 1000)
        overwrite(spark, new, ns.uri, option)
        expected = {**before, "p01": sorted_rows(new)} if dynamic else {"p01": sorted_rows(new)}
        assert by_part(ns.uri) == expected, f"option={option!r} session={session!r}"


def test_session_mode_set_after_registration_applies_to_each_later_write(
    spark, session_mode, tmp_path
):
    # register() ran when the session was created; the conf changes between writes
    ns = seeded(tmp_path / "ns", 6)
    before = by_part(ns.uri)
    session_mode("dynamic")
    overwrite(spark, rows(["p02"], 1000), ns.uri)
    assert by_part(ns.uri) == {**before, "p02": sorted_rows(rows(["p02"], 1000))}
    session_mode(None)
    overwrite(spark, rows(["p04"], 2000), ns.uri)
    assert by_part(ns.uri) == {"p04": sorted_rows(rows(["p04"], 2000))}
    # write_dataframe's modes are its own: "overwrite" replaces the whole table under a
    # dynamic session, "overwrite_partitions" only the partitions written under a static one
    seeded(tmp_path / "helper", 6)
    helper = str(tmp_path / "helper")
    session_mode("dynamic")
    write_dataframe(spark.createDataFrame(rows(["p00"], 3000)), helper, "overwrite")
    assert by_part(helper) == {"p00": sorted_rows(rows(["p00"], 3000))}
    session_mode("static")
    write_dataframe(spark.createDataFrame(rows(["p05"], 4000)), helper, "overwrite_partitions")
    assert by_part(helper) == {
        "p00": sorted_rows(rows(["p00"], 3000)),
        "p05": sorted_rows(rows(["p05"], 4000)),
    }


def test_overwrite_is_refused_when_no_task_reports_the_session_mode(tmp_path):
    # a commit whose tasks said nothing about the session (here: no task at all) cannot tell a
    # whole-table replace from a dynamic one, so it commits nothing
    ns = seeded(tmp_path / "ns", 3)
    before, version = by_part(ns.uri), ns.version
    writer = make_writer({"path": ns.uri}, spark_schema(SCHEMA), overwrite=True)
    with pytest.raises(WriteError, match="partitionOverwriteMode"):
        writer.commit([])
    assert PartitionedNamespace.open(ns.uri).version == version
    assert by_part(ns.uri) == before


CONNECT_WRITE = """
import json, sys
from pyspark.sql import SparkSession
from dagster_lance_partitioned.spark import FORMAT, register

uri, out = sys.argv[1], sys.argv[2]
spark = SparkSession.builder.remote("local[2]").getOrCreate()
register(spark)
spark.conf.set("spark.sql.sources.partitionOverwriteMode", "dynamic")  # after registration
rows = [(1000 + i, "p03" if i < 5 else "p17", float(i)) for i in range(10)]
df = spark.createDataFrame(rows, "id long, part string, value double").repartition(2)
df.write.format(FORMAT).mode("overwrite").save(uri)
with open(out, "w") as fh:
    json.dump({"session": type(spark).__module__}, fh)
spark.stop()
"""


def test_connect_session_dynamic_overwrite_keeps_the_partitions_not_written(tmp_path):
    ns = seeded(tmp_path / "ns", 20)
    before = by_part(ns.uri)
    script, out = tmp_path / "connect_write.py", tmp_path / "out.json"
    script.write_text(textwrap.dedent(CONNECT_WRITE))
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    proc = subprocess.run(
        [sys.executable, str(script), ns.uri, str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    assert json.loads(out.read_text())["session"].startswith("pyspark.sql.connect")
    after = by_part(ns.uri)
    assert sorted(after) == parts(20)
    for name in set(parts(20)) - {"p03", "p17"}:
        assert after[name] == before[name], name
    assert [r["id"] for r in after["p03"] + after["p17"]] == list(range(1000, 1010))
