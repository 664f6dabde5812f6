"""Spark Connect subprocess for ``test_spark_connect.py`` (a Connect server cannot share a
process with the classic sessions of the other tests).

Usage: ``python connect_proc.py ROOT OUT.json [sc://HOST:PORT]``. Starts a local Spark Connect
server (or connects to the given one), runs a daily-partitioned asset returning a Connect
DataFrame for two keys (one run each) and a downstream asset loading one key as a DataFrame, all
through ``LancePartitionedIOManager``; writes what the runs reported to ``OUT.json``. With a
server URL, every metadata entry is reported, and a direct ``write_dataframe`` call too."""

import datetime as dt
import json
import os
import sys

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

import dagster as dg
from pyspark.sql import DataFrame, SparkSession

from dagster_lance_partitioned.orchestration import LancePartitionedIOManager

DAILY = dg.DailyPartitionsDefinition(start_date="2024-03-01", end_date="2024-03-10")


REMOTE = sys.argv[3] if len(sys.argv) > 3 else None


def session() -> SparkSession:
    return SparkSession.builder.remote(REMOTE or "local[2]").getOrCreate()


@dg.asset(partitions_def=DAILY, metadata={"partition_expr": "day"})
def readings(context: dg.AssetExecutionContext) -> DataFrame:
    day = dt.date.fromisoformat(context.partition_key)
    rows = [(day, i, f"s{i % 3}") for i in range(10 + day.day)]
    return session().createDataFrame(rows, "day date, n long, sensor string")


@dg.asset(partitions_def=DAILY, metadata={"partition_expr": "day"})
def per_sensor(readings: DataFrame) -> DataFrame:
    return readings.groupBy("day", "sensor").count()


def main() -> None:
    root, out = sys.argv[1], sys.argv[2]
    spark = session()
    io = LancePartitionedIOManager(root=root)
    instance = dg.DagsterInstance.ephemeral()
    report: dict = {"session": type(spark).__module__, "runs": []}
    for key in ("2024-03-02", "2024-03-03"):
        result = dg.materialize(
            [readings, per_sensor],
            partition_key=key,
            instance=instance,
            resources={"io_manager": io},
        )
        metas = {
            e.asset_key.to_user_string(): {
                k: _plain(v.value)
                for k, v in e.materialization.metadata.items()
                if REMOTE or k.startswith("lance/e")
            }
            | {"rows": e.materialization.metadata["dagster/partition_row_count"].value}
            for e in result.get_asset_materialization_events()
        }
        report["runs"].append({"key": key, "success": result.success, "events": metas})
    if REMOTE:
        report["direct"] = direct_write(spark, os.path.join(root, "direct"))
    with open(out, "w") as f:
        json.dump(report, f)
    spark.stop()


def _plain(value: object) -> object:
    """A metadata value as JSON (schemas and other objects as their repr)."""
    return value if isinstance(value, str | int | float | bool | dict | list) else repr(value)


def direct_write(spark: SparkSession, uri: str) -> dict:
    """What ``write_dataframe`` returns for a write through the server, and the manifest."""
    from dagster_lance_partitioned import PartitionedNamespace
    from dagster_lance_partitioned.spark import register, write_dataframe

    register(spark)
    df = spark.range(0, 1000).selectExpr("id", "CAST(id % 4 AS INT) AS part")
    result = write_dataframe(df, uri, "append", partition_by="part")
    ns = PartitionedNamespace.open(uri)
    return {
        "result": None
        if result is None
        else {
            "manifest_version": result.manifest_version,
            "rows": result.rows_written,
            "bytes": result.bytes_written,
            "read_versions": result.read_versions,
        },
        "manifest_version": ns.version,
        "read_versions": {p["object_id"]: p["read_version"] for p in ns.inspect.partitions()},
    }


if __name__ == "__main__":
    main()
