"""Reading partitioned namespaces through the ``lance_partitioned`` Spark data source (real
Spark, local[2]): every column type, pushdown pruning input partitions, one manifest version per
DataFrame, time travel, column narrowing, fragment splitting."""

from __future__ import annotations

import datetime as dt
import decimal

import pyarrow as pa
import pytest
from helpers.data import SCHEMA, sample_table, sorted_rows
from helpers.spark import every_type_table, rows_of
from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    GreaterThan,
    In,
    IsNull,
    LessThan,
    Not,
    StringContains,
    StringStartsWith,
)

from dagster_lance_partitioned import PartitionedNamespace, PartitionField
from dagster_lance_partitioned.spark import FORMAT, read_dataframe
from dagster_lance_partitioned.spark import options as opt
from dagster_lance_partitioned.spark.filters import translate
from dagster_lance_partitioned.spark.types import spark_schema

UTC = dt.UTC


def spark_filters(df) -> bool:
    """Whether Spark evaluates a Filter node in the physical plan of ``df``."""
    return "Filter (" in df._jdf.queryExecution().executedPlan().toString()


@pytest.fixture
def events(tmp_path):
    """3 countries x 3 dates = 9 partition tables, written twice (2 fragments each)."""
    ns = PartitionedNamespace.create(
        tmp_path / "events",
        SCHEMA,
        [PartitionField.identity("country"), PartitionField.identity("event_date")],
    )
    ns.write(sample_table(36))
    ns.write(sample_table(36, start=100))
    return ns


def test_every_column_type_round_trips(spark, tmp_path):
    table = every_type_table()
    ns = PartitionedNamespace.create(
        tmp_path / "types",
        table.schema,
        [
            PartitionField.identity("country"),
            PartitionField.day("ts_utc"),
            PartitionField.bucket("id", 2),
        ],
    )
    ns.write(table)
    df = spark.read.format(FORMAT).option("rowsPerPartition", "1").load(ns.uri)
    assert df.schema == spark_schema(ns.schema)
    assert [f.name for f in df.schema] == table.column_names
    assert df.rdd.getNumPartitions() == len(ns.inspect.partitions()) == 4
    got = df.toArrow()
    assert rows_of(got) == rows_of(ns.to_table()) == rows_of(table)
    packed = spark.read.format(FORMAT).load(ns.uri)  # small tables share one input partition
    assert packed.rdd.getNumPartitions() == 1
    assert rows_of(packed.toArrow()) == rows_of(table)
    # the row path too (Spark's Python Row conversion)
    rows = sorted(df.select("id", "country", "ts_ny", "dec", "m").collect(), key=lambda r: r.id)
    assert [r.country for r in rows] == ["US", None, "FR", None]
    assert rows[0].ts_ny == dt.datetime(2025, 12, 10, 1, 2, 3, 456000)  # session zone UTC
    assert rows[0].dec == decimal.Decimal("12.34")
    assert rows[0].m == {"a": 1, "b": None}


def one_per_table(spark):
    """A reader giving every partition table its own input partition."""
    return spark.read.format(FORMAT).options(rowsPerPartition="1", splitFragments="false")


def test_pushdown_prunes_input_partitions(spark, events):
    df = one_per_table(spark).load(events.uri)
    assert df.rdd.getNumPartitions() == 9
    q = df.where("event_date = '2025-12-10' AND country = 'US'").select("id", "value")
    assert q.rdd.getNumPartitions() == 1
    assert len(events.plan_scan("event_date = '2025-12-10' AND country = 'US'").tasks) == 1
    expected = [
        r["id"]
        for r in sorted_rows(events.to_table())
        if r["country"] == "US" and r["event_date"] == dt.date(2025, 12, 10)
    ]
    assert sorted(r.id for r in q.collect()) == expected and expected
    # exact filters are not evaluated again by Spark
    assert not spark_filters(q)
    # IN and ranges prune too
    q2 = df.where("country IN ('FR', 'DE') AND event_date > DATE '2025-12-10'")
    assert q2.rdd.getNumPartitions() == 4
    assert q2.count() == sum(
        1
        for r in events.to_table().to_pylist()
        if r["country"] in ("FR", "DE") and r["event_date"] > dt.date(2025, 12, 10)
    )


def test_filters_spark_keeps_are_still_applied(spark, events):
    df = one_per_table(spark).load(events.uri)
    rows = events.to_table().to_pylist()
    # a float comparison is not pushed: Spark filters, every partition is read
    q = df.where("value > 120.5 AND country = 'DE'")
    assert q.rdd.getNumPartitions() == 3
    assert spark_filters(q)
    assert sorted(r.id for r in q.collect()) == sorted(
        r["id"] for r in rows if r["value"] > 120.5 and r["country"] == "DE"
    )
    # OR is not pushed by Spark at all; NOT IN and LIKE prefix are
    q = df.where("(country = 'US' OR id < 3) AND NOT country IN ('FR') AND country LIKE 'U%'")
    assert sorted(r.id for r in q.collect()) == sorted(
        r["id"] for r in rows if r["country"] == "US"
    )
    assert q.rdd.getNumPartitions() == 3


def test_null_partition_values_are_pruned_and_read(spark, tmp_path):
    table = sample_table(12).set_column(1, "country", pa.array([None, "US", "FR"] * 4, pa.utf8()))
    ns = PartitionedNamespace.create(
        tmp_path / "nulls", SCHEMA, [PartitionField.identity("country")]
    )
    ns.write(table)
    df = spark.read.format(FORMAT).load(ns.uri)
    nulls = df.where("country IS NULL")
    assert nulls.rdd.getNumPartitions() == 1
    assert sorted(r.id for r in nulls.collect()) == [0, 3, 6, 9]
    not_us = df.where("NOT (country <=> 'US')")  # keeps the NULL partition, as Spark does
    assert sorted(r.id for r in not_us.collect()) == [0, 2, 3, 5, 6, 8, 9, 11]


def test_zoned_timestamp_filters_prune_and_match_spark(spark, tmp_path):
    schema = pa.schema([("id", pa.int64()), ("ts", pa.timestamp("us", tz="America/New_York"))])
    base = dt.datetime(2025, 12, 9, 20, tzinfo=UTC)
    values = [base + dt.timedelta(hours=7 * i) for i in range(12)]
    table = pa.table({"id": range(12), "ts": pa.array(values, schema.field("ts").type)})
    ns = PartitionedNamespace.create(
        tmp_path / "zoned",
        schema,
        [PartitionField.year("ts"), PartitionField.month("ts"), PartitionField.day("ts")],
    )
    ns.write(table)
    df = one_per_table(spark).load(ns.uri)
    lo, hi = dt.datetime(2025, 12, 10, 10, tzinfo=UTC), dt.datetime(2025, 12, 11, 5, tzinfo=UTC)
    q = df.where(f"ts >= TIMESTAMP '{lo.isoformat()}' AND ts < TIMESTAMP '{hi.isoformat()}'")
    assert sorted(r.id for r in q.collect()) == [i for i, v in enumerate(values) if lo <= v < hi]
    assert q.rdd.getNumPartitions() < len(ns.inspect.partitions())


def test_one_manifest_version_per_dataframe(spark, events):
    df = spark.read.format(FORMAT).load(events.uri)
    before = df.count()
    pinned = events.version
    events.write(sample_table(9, countries=("JP",), start=1000))  # new partition tables
    assert df.count() == before  # the DataFrame keeps reading the version it was created on
    assert df.where("country = 'JP'").count() == 0
    fresh = spark.read.format(FORMAT).load(events.uri)
    assert fresh.count() == before + 9
    old = spark.read.format(FORMAT).option("version", str(pinned)).load(events.uri)
    assert old.count() == before
    assert sorted_rows(old.toArrow()) == sorted_rows(
        PartitionedNamespace.open(events.uri, version=pinned).to_table()
    )


def test_columns_option_and_user_schema_narrow_the_read(spark, events):
    df = spark.read.format(FORMAT).option("columns", "id,country").load(events.uri)
    assert df.columns == ["id", "country"]
    assert df.where("country = 'US'").count() == 24
    narrowed = spark.read.format(FORMAT).schema("value double, id bigint").load(events.uri)
    got = narrowed.toArrow()
    assert got.column_names == ["value", "id"]
    assert sorted(got["id"].to_pylist()) == sorted(events.to_table()["id"].to_pylist())


def test_tables_packed_and_fragments_split_into_input_partitions(spark, events):
    whole = one_per_table(spark).load(events.uri)
    split = spark.read.format(FORMAT).option("rowsPerPartition", "1").load(events.uri)
    assert whole.rdd.getNumPartitions() == 9
    assert split.rdd.getNumPartitions() == 18  # two fragments per partition table
    # 8 rows per table: two tables per input partition of 16 rows
    paired = spark.read.format(FORMAT).option("rowsPerPartition", "16").load(events.uri)
    assert paired.rdd.getNumPartitions() == 5
    assert spark.read.format(FORMAT).load(events.uri).rdd.getNumPartitions() == 1
    assert sorted_rows(paired.toArrow()) == sorted_rows(events.to_table())
    expected = sorted_rows(events.to_table())
    assert sorted_rows(split.toArrow()) == expected
    assert sorted_rows(split.where("country = 'FR'").toArrow()) == [
        r for r in expected if r["country"] == "FR"
    ]


def test_renamed_column_reads_by_field_id(spark, events):
    events.rename_column("value", "amount")
    df = spark.read.format(FORMAT).option("rowsPerPartition", "1").load(events.uri)
    assert df.columns == ["id", "country", "event_date", "amount"]
    assert sorted_rows(df.toArrow()) == sorted_rows(events.to_table())
    assert df.where("country = 'US' AND amount > 30").count() == events.count_rows(
        "country = 'US' AND amount > 30"
    )


def test_read_dataframe_helper(spark, events):
    df = read_dataframe(
        spark,
        events.uri,
        filter=[("country", "=", "FR")],
        columns=["id"],
        options={"rowsPerPartition": "1", "splitFragments": "false"},
    )
    assert df.columns == ["id"]
    assert df.rdd.getNumPartitions() == 3
    assert sorted(r.id for r in df.collect()) == sorted(
        events.to_table(filter="country = 'FR'")["id"].to_pylist()
    )
    v = events.version
    events.write(sample_table(3, start=500))
    sql = read_dataframe(spark, events.uri, filter="id >= 100", version=v)
    assert sql.count() == 36


def test_each_query_on_its_own_load_is_correct(spark, events):
    """Spark 4.3 keeps a loaded DataFrame's last pushdown for later queries that push nothing
    (see ``source``): a fresh load per query, or ``pushFilters=false``, reads correctly."""
    total = events.count_rows()
    fr = one_per_table(spark).load(events.uri).where("country = 'FR'")
    assert fr.count() == events.count_rows("country = 'FR'")
    assert spark.read.format(FORMAT).load(events.uri).count() == total
    assert read_dataframe(spark, events.uri).count() == total
    unpushed = spark.read.format(FORMAT).option("pushFilters", "false").load(events.uri)
    us = unpushed.where("country = 'US'")
    assert us.count() == events.count_rows("country = 'US'")
    assert spark_filters(us)  # Spark filtered, nothing was pushed
    assert unpushed.count() == total


def test_translate_spark_filters():
    schema = SCHEMA
    filters = [
        EqualTo(("country",), "US"),
        In(("id",), [1, 2]),
        GreaterThan(("value",), 1.0),  # float: left to Spark
        LessThan(("event_date",), dt.date(2025, 12, 11)),
        Not(EqualNullSafe(("country",), "FR")),
        IsNull(("country",)),
        StringStartsWith(("country",), "U"),
        StringStartsWith(("country",), "5%"),  # a LIKE wildcard: left to Spark
        StringContains(("country",), "S"),
        EqualTo(("st", "a"), 1),  # nested: left to Spark
    ]
    out = translate(filters, schema)
    assert out.conjuncts == (
        "`country` = 'US'",
        "`id` IN (1, 2)",
        "`event_date` < DATE '2025-12-11'",
        "NOT (`country` IS NOT NULL AND `country` = 'FR')",
        "`country` IS NULL",
        "`country` LIKE 'U%'",
    )
    assert out.returned == (filters[2], filters[7], filters[8], filters[9])


def test_storage_and_filter_options():
    options = {
        "path": "s3://b/ns",
        "storageoptions": '{"AWS_REGION": "eu-west-1"}',
        "storage.aws_endpoint": "http://localhost:9000",
        "filter": '[["country", "=", "US"], ["id", "in", [1, 2]]]',
        "columns": '["id"]',
    }
    assert opt.storage_options(options) == {
        "AWS_REGION": "eu-west-1",
        "aws_endpoint": "http://localhost:9000",
    }
    assert opt.filter_sql(options) == "`country` = 'US' AND `id` IN (1, 2)"
    assert opt.columns(options) == ["id"]
    with pytest.raises(opt.SparkOptionError, match="version"):
        opt.version({"version": "latest"})


def test_register_twice_is_a_no_op(spark, tmp_path):
    """Registering again in a session changes nothing (Spark would log a replacement warning)."""
    from dagster_lance_partitioned.spark import register

    uri = str(tmp_path / "ns")
    ns = PartitionedNamespace.create(uri, SCHEMA, [PartitionField.identity("country")])
    ns.write(sample_table())
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "false")
    register(spark)
    register(spark)
    assert spark.conf.get("spark.sql.python.filterPushdown.enabled") == "true"
    assert spark.read.format(FORMAT).load(uri).count() == ns.count_rows()


def test_reads_default_to_the_sessions_parallelism_when_the_data_allows(spark, tmp_path):
    """400,000 rows in one partition table of four fragments: formerly one input partition
    (about 1M rows each); now at least the session's defaultParallelism, split by fragments,
    with options minPartitions and rowsPerPartition still deciding when given."""
    ns = PartitionedNamespace.create(tmp_path / "big", SCHEMA, [PartitionField.identity("country")])
    for k in range(4):
        ns.write(sample_table(100_000, countries=("US",), start=k * 100_000))
    parallelism = spark.sparkContext.defaultParallelism
    assert parallelism == 2

    def inputs(**options) -> int:
        return spark.read.format(FORMAT).options(**options).load(ns.uri).rdd.getNumPartitions()

    assert inputs() == parallelism
    assert read_dataframe(spark, ns.uri).rdd.getNumPartitions() == parallelism
    assert inputs(minPartitions="4") == 4
    assert inputs(minPartitions="16") == 4  # the data allows four (one per fragment)
    assert inputs(minPartitions="1") == 1  # the former default
    assert inputs(rowsPerPartition="100000", minPartitions="1") == 4
    df = spark.read.format(FORMAT).options(minPartitions="4").load(ns.uri)
    assert df.count() == 400_000
    assert df.selectExpr("spark_partition_id() AS p").distinct().count() == 4
    # small reads are not split for it (tens of milliseconds per Python data source task)
    small = PartitionedNamespace.create(tmp_path / "small", SCHEMA, [PartitionField.identity("id")])
    small.write(sample_table(40))
    assert spark.read.format(FORMAT).load(small.uri).rdd.getNumPartitions() == 1


def test_split_target():
    from dagster_lance_partitioned.spark.reader import split_target

    mib = 1 << 20
    assert split_target(2_000_000, mib, 1, 65536) == mib  # no minimum: the cap
    assert split_target(2_000_000, mib, 8, 65536) == 250_000
    assert split_target(2_000_000, mib, 2, 65536) == 1_000_000
    assert split_target(100_000, mib, 8, 65536) == 65536  # not below the floor
    assert split_target(100_000, 10, 8, 65536) == 10  # an explicit smaller cap stays
