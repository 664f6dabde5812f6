"""Asset keys that nest one namespace inside another (``["sales"]`` at ``<root>/sales`` and
``["sales", "eu", "data"]`` at ``<root>/sales/eu/data``): the IO manager refuses to create the
second one, whichever is materialized first, before anything is written; the Dagster
maintenance job, with its default configuration and files older than its grace, never
touches a namespace nested below the one it maintains (layouts made before the refusal)."""

from __future__ import annotations

import datetime as dt
import os
import time
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pytest
from helpers.data import SCHEMA, file_hashes, sample_table, sorted_rows

from dagster_lance_partitioned import PartitionedNamespace, PartitionField
from dagster_lance_partitioned.orchestration import (
    LancePartitionedIOManager,
    LancePartitionedResource,
)
from dagster_lance_partitioned.orchestration.errors import NestedAssetError
from dagster_lance_partitioned.orchestration.maintenance import build_lance_maintenance_job

DAILY = dg.DailyPartitionsDefinition(start_date="2025-01-01")


def asset_at(key: list[str]) -> dg.AssetsDefinition:
    @dg.asset(key=key, partitions_def=DAILY, metadata={"partition_expr": "day"})
    def made(context) -> pa.Table:
        day = dt.date.fromisoformat(context.partition_key)
        return pa.table({"day": [day] * 3, "n": [1, 2, 3]})

    return made


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (["sales"], ["sales", "eu", "data"]),
        (["sales", "eu", "data"], ["sales"]),
        (["sales", "eu"], ["sales", "eu", "data"]),
    ],
)
def test_the_io_manager_refuses_a_namespace_inside_another(
    tmp_path: Path, first: list[str], second: list[str]
) -> None:
    io = LancePartitionedIOManager(root=str(tmp_path / "lake"))
    outer, inner = (first, second) if len(first) < len(second) else (second, first)
    assert dg.materialize(
        [asset_at(first)], partition_key="2025-01-01", resources={"io_manager": io}
    ).success
    before = file_hashes(tmp_path / "lake")
    with pytest.raises(NestedAssetError) as info:
        dg.materialize([asset_at(second)], partition_key="2025-01-01", resources={"io_manager": io})
    message = str(info.value)
    assert repr("/".join(outer)) in message and repr("/".join(inner)) in message, message
    assert info.value.asset_key == dg.AssetKey(second).to_user_string()
    assert file_hashes(tmp_path / "lake") == before  # nothing created, nothing written


def test_sibling_keys_with_a_shared_prefix_are_not_nested(tmp_path: Path) -> None:
    io = LancePartitionedIOManager(root=str(tmp_path / "lake"))
    for key in (["sales", "eu"], ["sales", "us"], ["sales", "eu2", "x"]):
        assert dg.materialize(
            [asset_at(key)], partition_key="2025-01-01", resources={"io_manager": io}
        ).success


def test_the_maintenance_job_leaves_a_nested_namespace_alone(tmp_path: Path) -> None:
    """A layout made before the refusal (or by hand): the maintenance job of the outer asset,
    at its default configuration, once every file is older than the grace."""
    lake = tmp_path / "lake"
    fields = [PartitionField.identity("country")]
    outer = PartitionedNamespace.create(lake / "sales", SCHEMA, fields)
    inner = PartitionedNamespace.create(lake / "sales" / "eu" / "data", SCHEMA, fields)
    for i in range(3):
        outer.write(sample_table(6, start=100 * i))
        inner.write(sample_table(9, start=1000 + 100 * i))
    when = time.time() - 90 * 24 * 3600
    for dirpath, dirs, names in os.walk(lake):
        for name in [*dirs, *names]:
            os.utime(os.path.join(dirpath, name), (when, when), follow_symlinks=False)
    inner_files = file_hashes(inner.uri)
    inner_rows = sorted_rows(inner.to_table())

    @dg.asset(key=["sales"])
    def sales() -> None: ...

    job = build_lance_maintenance_job([sales], LancePartitionedResource(root=str(lake)))
    assert job.execute_in_process(instance=dg.DagsterInstance.ephemeral()).success
    assert file_hashes(inner.uri) == inner_files
    assert sorted_rows(PartitionedNamespace.open(inner.uri).to_table()) == inner_rows
