"""The Spark source against an S3-compatible object store (moto's server on 127.0.0.1): the
Python workers of the executors write fragments to and read partition tables from the bucket,
the driver commits there; writes, pruned reads, dynamic and static overwrites, and results
found through the namespace on the bucket."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from helpers.data import sample_table, sorted_rows
from helpers.s3 import S3Server, s3_server, storage_options

from dagster_lance_partitioned import PartitionedNamespace
from dagster_lance_partitioned.spark import FORMAT, read_dataframe, write_dataframe

pytestmark = [pytest.mark.object_store, pytest.mark.spark]


@pytest.fixture(scope="module")
def server() -> Iterator[S3Server]:
    with s3_server() as srv:
        yield srv


@pytest.fixture
def lake(server: S3Server) -> tuple[str, dict[str, str], S3Server]:
    """A fresh bucket: (namespace URI in it, storage options, server)."""
    bucket = server.create_bucket()
    return f"s3://{bucket}/events", storage_options(server.endpoint), server


def test_spark_write_read_and_overwrite_on_s3(spark, lake):
    uri, so, server = lake
    table = sample_table(60)
    df = spark.createDataFrame(table).repartition(3)
    result = write_dataframe(df, uri, partition_by="country,event_date", storage_options=so)
    assert result is not None and result.rows_written == 60 and len(result.partitions) == 9
    ns = PartitionedNamespace.open(uri, so)
    assert result.manifest_version == ns.version
    assert sorted_rows(ns.to_table()) == sorted_rows(table)
    bucket = uri.split("/")[2]
    keys = server.keys(bucket, "events/")
    assert any(k.endswith(".lance") for k in keys) and any("__manifest" in k for k in keys)

    # pruned read: only the US tables, through the executors
    us = read_dataframe(spark, uri, filter="country = 'US'", storage_options=so)
    assert us.rdd.getNumPartitions() <= 3
    assert sorted(r.id for r in us.select("id").collect()) == [i for i in range(60) if i % 3 == 0]
    plain = (
        spark.read.format(FORMAT)
        .option("storageOptions", json.dumps(so))
        .load(uri)
        .where("country = 'FR' AND event_date = DATE '2025-12-11'")
    )
    assert plain.count() == len([i for i in range(60) if i % 3 == 1 and (i // 3) % 3 == 1])

    # dynamic overwrite of the US partitions, with the options as storage.<key>
    fresh = sample_table(6, countries=("US",), start=1000)
    writer = spark.createDataFrame(fresh).repartition(2).write.format(FORMAT).mode("overwrite")
    for key, value in so.items():
        writer = writer.option(f"storage.{key}", value)
    writer.option("partitionOverwriteMode", "dynamic").save(uri)
    ns = PartitionedNamespace.open(uri, so)
    assert len(ns.inspect.partitions()) == 9
    us_ids = sorted(ns.to_table(filter="country = 'US'")["id"].to_pylist())
    assert us_ids == list(range(1000, 1006))
    assert ns.count_rows() == 60 - 20 + 6

    # static overwrite: the whole table
    result = write_dataframe(spark.createDataFrame(fresh), uri, "overwrite", storage_options=so)
    assert result is not None and len(result.removed) == 9 - len(result.partitions)
    ns = PartitionedNamespace.open(uri, so)
    assert sorted_rows(ns.to_table()) == sorted_rows(fresh)
