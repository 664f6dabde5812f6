"""Merging a Spark DataFrame into a namespace (driver-side merge, one manifest commit)."""

from __future__ import annotations

import datetime as dt

import pytest
from conftest import SCHEMA, sample_table
from spark_fixtures import spark_session  # noqa: F401  (fixture)

from dagster_lance_partitioned import PartitionedNamespace, PartitionField
from dagster_lance_partitioned.core.errors import DuplicateKeyError
from dagster_lance_partitioned.spark.merge import merge_dataframe


def test_merge_dataframe_upserts_and_moves_keys(tmp_path, spark):
    ns = PartitionedNamespace.create(
        tmp_path / "ns", schema=SCHEMA, partition_fields=[PartitionField.identity("country")]
    )
    ns.write(sample_table())
    version = ns.version
    df = spark.createDataFrame(
        [(0, "FR", dt.date(2025, 12, 10), -1.0), (99, "IT", dt.date(2025, 12, 11), 9.9)],
        "id long, country string, event_date date, value double",
    )
    result = merge_dataframe(df, ns.uri, on="id")
    assert result.manifest_version == version + 1
    assert (result.rows_updated, result.rows_moved, result.rows_inserted) == (1, 1, 1)
    ns.refresh()
    assert ns.count_rows() == 13
    assert ns.to_table(filter="id = 0").to_pylist()[0]["country"] == "FR"
    props = ns.state.store.commit_properties(result.manifest_version)
    assert props["source"] == "spark" and props["operation"] == "merge"
    with pytest.raises(DuplicateKeyError):
        merge_dataframe(df.union(df), ns.uri, on="id")
