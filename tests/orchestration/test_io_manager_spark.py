"""The IO manager with PySpark assets (real Dagster runs, real local[2] Spark session): Spark
DataFrames are written by the executors through the ``lance_partitioned`` data source in one
manifest commit per run, and loaded back as DataFrames with pruning and pushdown."""

from __future__ import annotations

import datetime as dt

import dagster as dg
import pytest
from dagster._core.storage.tags import (
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
)
from helpers.data import fingerprint
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession

from dagster_lance_partitioned import PartitionedNamespace
from dagster_lance_partitioned.core.errors import UnnamedPartitionError
from dagster_lance_partitioned.orchestration import (
    LancePartitionedIOManager,
    SparkHandler,
    WriteRequest,
)

TZ = "America/New_York"
daily = dg.DailyPartitionsDefinition(start_date="2024-03-01", end_date="2024-04-01", timezone=TZ)
by_origin = dg.MultiPartitionsDefinition(
    {"date": daily, "origin": dg.StaticPartitionsDefinition(["EWR", "JFK", "LGA"])}
)
ORIGINS = ("EWR", "JFK", "LGA")


def _rows(day: str, origin: str) -> list[tuple]:
    """Six rows of one New York day: every four hours from local midnight (DST aware)."""
    start = daily.time_window_for_partition_key(day).start
    return [
        (start.astimezone(dt.UTC) + dt.timedelta(hours=4 * i), origin, i, float(i) + 0.5)
        for i in range(6)
    ]


SCHEMA = "ts timestamp, origin string, seq int, delay double"


def _keys(context) -> list[tuple[str, str]]:
    out = []
    for k in context.partition_keys:
        mk = k if isinstance(k, dg.MultiPartitionKey) else by_origin.get_partition_key_from_str(k)
        out.append((mk.keys_by_dimension["date"], mk.keys_by_dimension["origin"]))
    return out


def _defs(spark: SparkSession, extra_day: str | None = None):
    @dg.asset(
        partitions_def=by_origin,
        metadata={"partition_expr": {"date": "ts", "origin": "origin"}},
        backfill_policy=dg.BackfillPolicy.single_run(),
        kinds={"spark", "lance"},
    )
    def flights(context) -> DataFrame:
        rows = [r for day, origin in _keys(context) for r in _rows(day, origin)]
        if extra_day is not None:
            rows += _rows(extra_day, "EWR")[:1]
        return spark.createDataFrame(rows, SCHEMA)

    @dg.asset(
        partitions_def=daily,
        metadata={"partition_expr": "day"},
        ins={
            "flights": dg.AssetIn(
                partition_mapping=dg.MultiToSingleDimensionPartitionMapping(
                    partition_dimension_name="date"
                ),
                # the box backfilled below leaves LGA out: that airport loads as no rows
                metadata={
                    "columns": ["origin", "delay"],
                    "filter": "seq >= 3",
                    "lance/allow_missing_partitions": True,
                },
            )
        },
    )
    def daily_delay(context, flights: DataFrame) -> DataFrame:
        assert flights.columns == ["origin", "delay"]
        day = context.partition_key
        return (
            flights.groupBy("origin")
            .agg({"delay": "sum", "*": "count"})
            .selectExpr(
                f"DATE '{day}' AS day", "origin", "`sum(delay)` AS delay", "`count(1)` AS n"
            )
        )

    return flights, daily_delay


def _range(first: str, last: str) -> dict[str, str]:
    return {ASSET_PARTITION_RANGE_START_TAG: first, ASSET_PARTITION_RANGE_END_TAG: last}


@pytest.fixture
def io(tmp_path) -> LancePartitionedIOManager:
    return LancePartitionedIOManager(root=str(tmp_path / "lake"))


def test_spark_backfill_is_one_commit_and_downstream_loads_one_day(spark, io, tmp_path):
    flights, daily_delay = _defs(spark)
    instance = dg.DagsterInstance.ephemeral()
    # a box of (date, origin) keys: 2024-03-09..2024-03-11 (DST on the 10th) x EWR..JFK
    result = dg.materialize(
        [flights],
        instance=instance,
        resources={"io_manager": io},
        tags=_range("2024-03-09|EWR", "2024-03-11|JFK"),
    )
    assert result.success
    uri = io.uri_for(dg.AssetKey("flights"))
    ns = PartitionedNamespace.open(uri)
    assert ns.version == 3  # create (2 commits) + the one commit of the whole run
    got = sorted(
        (p["values"]["ts_day"].isoformat(), p["values"]["origin"]) for p in ns.inspect.partitions()
    )
    assert got == [(d, o) for d in ("2024-03-09", "2024-03-10", "2024-03-11") for o in ORIGINS[:2]]
    assert ns.count_rows() == 6 * 6
    events = result.get_asset_materialization_events()
    assert len(events) == 6
    meta = events[0].materialization.metadata
    assert meta["lance/engine"].value == "spark"
    assert meta["lance/manifest_version"].value == 3
    assert meta["lance/run_rows_written"].value == 36
    counts = {
        str(e.materialization.partition): e.materialization.metadata[
            "dagster/partition_row_count"
        ].value
        for e in events
    }
    assert counts["2024-03-10|JFK"] == 6 and sum(counts.values()) == 36

    result = dg.materialize(
        [flights, daily_delay],
        selection=[daily_delay],
        instance=instance,
        resources={"io_manager": io},
        partition_key="2024-03-10",
    )
    assert result.success
    out = PartitionedNamespace.open(io.uri_for(dg.AssetKey("daily_delay"))).to_table()
    rows = sorted(out.to_pylist(), key=lambda r: r["origin"])
    # seq 3, 4, 5 of each origin on that day only: delays 3.5 + 4.5 + 5.5
    assert [(r["origin"], r["n"], r["delay"]) for r in rows] == [
        ("EWR", 3, 13.5),
        ("JFK", 3, 13.5),
    ]
    assert all(r["day"] == dt.date(2024, 3, 10) for r in rows)


KEY = "2024-03-20|LGA"


def test_spark_rerun_replaces_and_stray_rows_change_nothing(spark, io):
    flights, _ = _defs(spark)
    instance = dg.DagsterInstance.ephemeral()
    for _ in range(2):  # the second run replaces, never duplicates
        assert dg.materialize(
            [flights],
            instance=instance,
            resources={"io_manager": io},
            partition_key="2024-03-20|LGA",
        ).success
    uri = io.uri_for(dg.AssetKey("flights"))
    assert PartitionedNamespace.open(uri).count_rows() == 6

    before = fingerprint(uri)
    bad, _ = _defs(spark, extra_day="2024-03-22")
    result = dg.materialize(
        [bad],
        instance=instance,
        resources={"io_manager": io},
        partition_key=KEY,
        raise_on_error=False,
    )
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "STEP_FAILURE")
    text = str(failure.event_specific_data.error.to_string())
    assert "PartitionKeyMismatchError" in text
    assert "'2024-03-22|EWR'" in text and "Sample row" in text
    assert fingerprint(uri) == before


def test_spark_output_without_rows_empties_the_targeted_partition(spark, io):
    instance = dg.DagsterInstance.ephemeral()
    flights, _ = _defs(spark)
    assert dg.materialize(
        [flights], instance=instance, resources={"io_manager": io}, partition_key="2024-03-05|JFK"
    ).success

    @dg.asset(
        name="flights",
        partitions_def=by_origin,
        metadata={"partition_expr": {"date": "ts", "origin": "origin"}},
    )
    def nothing(context) -> DataFrame:
        return spark.createDataFrame([], SCHEMA)

    result = dg.materialize(
        [nothing], instance=instance, resources={"io_manager": io}, partition_key="2024-03-05|JFK"
    )
    assert result.success
    ns = PartitionedNamespace.open(io.uri_for(dg.AssetKey("flights")))
    assert ns.count_rows() == 0
    assert len(ns.inspect.partitions()) == 1  # still registered, now empty
    assert (
        result.get_asset_materialization_events()[0]
        .materialization.metadata["dagster/partition_row_count"]
        .value
        == 0
    )


def test_spark_input_is_distributed_and_pruned(spark, io):
    flights, _ = _defs(spark)
    instance = dg.DagsterInstance.ephemeral()
    assert dg.materialize(
        [flights],
        instance=instance,
        resources={"io_manager": io},
        tags=_range("2024-03-01|EWR", "2024-03-31|LGA"),
    ).success
    seen: dict[str, int] = {}

    @dg.asset(
        partitions_def=daily,
        metadata={"partition_expr": "day"},
        ins={
            "flights": dg.AssetIn(
                partition_mapping=dg.MultiToSingleDimensionPartitionMapping(
                    partition_dimension_name="date"
                )
            )
        },
    )
    def per_day(context, flights: DataFrame) -> DataFrame:
        seen["rows"] = flights.count()
        seen["input_partitions"] = flights.rdd.getNumPartitions()
        return flights.selectExpr(f"DATE '{context.partition_key}' AS day", "seq").limit(1)

    assert dg.materialize(
        [flights, per_day],
        selection=[per_day],
        instance=instance,
        resources={"io_manager": io},
        partition_key="2024-03-31",
    ).success
    assert seen["rows"] == 18  # three airports of one day, out of 31 x 3 partitions
    assert 1 <= seen["input_partitions"] <= 3  # only the three partition tables were planned


# -- package errors keep their class across Spark -------------------------------------------------
def test_spark_out_of_partition_row_keeps_its_error_class(spark, io, tmp_path):
    """A row outside the allowed partitions is refused in a Spark executor with the core's
    UnnamedPartitionError; the driver raises that class (values and sample row intact), not
    Spark's PythonException, and the IO manager turns it into PartitionKeyMismatchError."""
    flights, _ = _defs(spark)
    instance = dg.DagsterInstance.ephemeral()
    assert dg.materialize(
        [flights], instance=instance, resources={"io_manager": io}, partition_key=KEY
    ).success
    uri = io.uri_for(dg.AssetKey("flights"))
    ns = PartitionedNamespace.open(uri)
    before = fingerprint(uri)
    allowed = [dict(p["values"]) for p in ns.inspect.partitions()]  # 2024-03-20 | LGA only
    df = spark.createDataFrame(_rows("2024-03-20", "LGA") + _rows("2024-03-22", "EWR")[:1], SCHEMA)

    request = WriteRequest("overwrite_partitions", allowed, {"source": "test"})
    with pytest.raises(UnnamedPartitionError) as raised:
        SparkHandler().write(df, ns, request)
    error = raised.value
    assert type(error) is UnnamedPartitionError
    assert list(error.values.values()) == [dt.date(2024, 3, 22), "EWR"]
    assert error.sample["origin"] == "EWR" and error.sample["seq"] == 0
    assert "may not touch" in str(error)
    assert isinstance(error.__cause__, PySparkException)  # what Spark raised, kept as the cause
    assert fingerprint(uri) == before

    bad, _ = _defs(spark, extra_day="2024-03-22")
    result = dg.materialize(
        [bad], instance=instance, resources={"io_manager": io}, partition_key=KEY,
        raise_on_error=False,
    )  # fmt: skip
    assert not result.success
    classes = []
    for event in result.get_step_failure_events():
        err = event.step_failure_data.error
        while err is not None:
            classes.append(err.cls_name)
            err = err.cause
    assert "PartitionKeyMismatchError" in classes and "UnnamedPartitionError" in classes
    assert fingerprint(uri) == before


def test_spark_merge_through_the_handler_scoped_to_the_run(spark, io):
    """``lance/write_mode: merge`` with a Spark DataFrame: merged through the Spark handler,
    counts in the metadata match the table; a rerun inserts nothing."""
    state = {"extra": False}

    @dg.asset(
        name="flights",
        partitions_def=by_origin,
        metadata={
            "partition_expr": {"date": "ts", "origin": "origin"},
            "lance/write_mode": "merge",
            "lance/merge_on": ["ts", "origin"],
        },
    )
    def merged(context) -> DataFrame:
        day, origin = _keys(context)[0]
        rows = _rows(day, origin)
        if state["extra"]:  # a later version of the day: delays changed, one more flight
            rows = [(ts, o, seq, delay + 10) for ts, o, seq, delay in rows]
            rows.append((rows[-1][0] + dt.timedelta(hours=1), origin, 6, 1.0))
        return spark.createDataFrame(rows, SCHEMA)

    instance = dg.DagsterInstance.ephemeral()

    def run() -> dict:
        result = dg.materialize(
            [merged], instance=instance, resources={"io_manager": io}, partition_key=KEY
        )
        [event] = result.get_asset_materialization_events()
        return {k: v.value for k, v in event.materialization.metadata.items()}

    first = run()
    assert (first["lance/rows_inserted"], first["lance/rows_updated"]) == (6, 0)
    assert first["lance/engine"] == "spark"
    state["extra"] = True
    second = run()
    assert (second["lance/rows_inserted"], second["lance/rows_updated"]) == (1, 6)
    assert second["dagster/partition_row_count"] == 7
    third = run()
    assert third["lance/rows_inserted"] == 0 and third["dagster/partition_row_count"] == 7
    table = PartitionedNamespace.open(io.uri_for(dg.AssetKey("flights"))).to_table()
    assert sorted(table["seq"].to_pylist()) == [0, 1, 2, 3, 4, 5, 6]
    assert sorted(table["delay"].to_pylist())[:2] == [1.0, 10.5]


def test_spark_merge_refuses_moving_a_key_out_of_another_runs_key_in_the_tasks(spark, io):
    """Keyed on ``(ts, seq)`` alone, an output row whose key is stored under another origin
    would move out of that key: refused in the Spark tasks (no keys collected on the driver),
    as ``PartitionKeyMismatchError``, with nothing visible."""
    origin = {"value": "JFK"}

    @dg.asset(
        name="flights",
        partitions_def=by_origin,
        metadata={
            "partition_expr": {"date": "ts", "origin": "origin"},
            "lance/write_mode": "merge",
            "lance/merge_on": ["ts", "seq"],
        },
    )
    def merged(context) -> DataFrame:
        day, _ = _keys(context)[0]
        return spark.createDataFrame(_rows(day, origin["value"]), SCHEMA)

    instance = dg.DagsterInstance.ephemeral()
    key = "2024-03-20|JFK"
    assert dg.materialize(
        [merged], instance=instance, resources={"io_manager": io}, partition_key=key
    ).success
    ns = PartitionedNamespace.open(io.uri_for(dg.AssetKey("flights")))
    before = (ns.version, sorted(ns.to_table().to_pylist(), key=lambda r: r["seq"]))
    origin["value"] = "LGA"  # the same (ts, seq) keys, now under LGA
    result = dg.materialize(
        [merged],
        instance=instance,
        resources={"io_manager": io},
        partition_key=KEY,
        raise_on_error=False,
    )
    assert not result.success
    messages = []
    for event in result.get_step_failure_events():
        err = event.step_failure_data.error
        while err is not None:
            messages.append((err.cls_name, err.message))
            err = err.cause
    [message] = [m for c, m in messages if c == "PartitionKeyMismatchError"]
    assert "'2024-03-20|JFK'" in message and "may not touch" in message
    ns.refresh()
    assert (ns.version, sorted(ns.to_table().to_pylist(), key=lambda r: r["seq"])) == before


def _evolved_flights(spark: SparkSession, bad_type: bool = False) -> dg.AssetsDefinition:
    """``flights`` partitioned by date only, with a new column ``gate`` (``bad_type``: its
    ``seq`` column as text, which the namespace's int column cannot take)."""

    @dg.asset(
        name="flights",
        partitions_def=daily,
        metadata={"partition_expr": "ts"},
        kinds={"spark", "lance"},
    )
    def flights(context) -> DataFrame:
        rows = [(*r, "A1") for o in ORIGINS for r in _rows(context.partition_key, o)]
        if bad_type:
            rows = [(ts, o, f"x{seq}", d, g) for ts, o, seq, d, g in rows]
            return spark.createDataFrame(
                rows, "ts timestamp, origin string, seq string, delay double, gate string"
            )
        return spark.createDataFrame(rows, SCHEMA + ", gate string")

    return flights


def test_spark_run_evolving_the_namespace_is_one_transaction(spark, io):
    """A Spark output that adds a column and changes the partitioning: the Spark driver commits
    the changes just before the data (one transaction id); a refused one changes nothing."""
    instance = dg.DagsterInstance.ephemeral()
    flights, _ = _defs(spark)
    assert dg.materialize(
        [flights], instance=instance, resources={"io_manager": io}, partition_key=KEY
    ).success
    uri = io.uri_for(dg.AssetKey("flights"))
    before = fingerprint(uri)

    refused = dg.materialize(
        [_evolved_flights(spark, bad_type=True)],
        instance=instance,
        resources={"io_manager": io},
        partition_key="2024-03-21",
        raise_on_error=False,
    )
    assert not refused.success
    failure = next(e for e in refused.all_events if e.event_type_value == "STEP_FAILURE")
    assert "seq" in str(failure.event_specific_data.error.to_string())
    after = fingerprint(uri)
    assert after["metadata"] == before["metadata"]
    assert after["manifest_version"] == before["manifest_version"]

    assert dg.materialize(
        [_evolved_flights(spark)],
        instance=instance,
        resources={"io_manager": io},
        partition_key="2024-03-21",
    ).success
    ns = PartitionedNamespace.open(uri)
    assert ns.version == before["manifest_version"] + 2
    props = [c.properties for c in ns.inspect.history(since=before["manifest_version"])]
    assert [p["operation"] for p in props] == ["evolve", "write"]
    assert props[0]["transaction"] == props[1]["transaction"]
    assert props[1]["engine"] == "spark"
    assert [f.field_id for f in ns.current_spec.fields] == ["ts_day"]
    day = ns.to_table("ts >= TIMESTAMP '2024-03-21 04:00:00'")
    assert day.num_rows == 18 and set(day["gate"].to_pylist()) == {"A1"}


def test_spark_unpartitioned_asset_is_replaced_whole_and_loads_downstream(spark, io):
    """A plain Spark asset, no metadata: a namespace without partition fields, each run's
    DataFrame (written by the executors) replacing the whole asset in one manifest commit; a
    downstream Spark asset loads it."""
    state = {"n": 6}

    @dg.asset
    def airports() -> DataFrame:
        return spark.createDataFrame(
            [(i, f"A{i}") for i in range(state["n"])], "id long, code string"
        ).repartition(3)

    @dg.asset
    def airport_count(airports: DataFrame) -> DataFrame:
        return airports.selectExpr("count(*) AS n")

    instance = dg.DagsterInstance.ephemeral()
    for n in (6, 2):
        state["n"] = n
        result = dg.materialize(
            [airports, airport_count], instance=instance, resources={"io_manager": io}
        )
        assert result.success
        [event] = result.asset_materializations_for_node("airports")
        assert event.metadata["lance/engine"].value == "spark"
    ns = PartitionedNamespace.open(io.uri_for(dg.AssetKey("airports")))
    assert ns.current_spec.fields == ()
    [table] = ns.inspect.partitions()
    assert table["object_id"] == "v1$dataset"
    assert sorted(ns.to_table()["id"].to_pylist()) == [0, 1]
    writes = [c for c in ns.inspect.history() if c.operation == "write"]
    assert len(writes) == 2  # one manifest commit per run
    count = PartitionedNamespace.open(io.uri_for(dg.AssetKey("airport_count"))).to_table()
    assert count["n"].to_pylist() == [2]
