"""Partition evolution: new spec versions, old data readable and pruned by its own spec."""

from __future__ import annotations

import datetime as dt
import json
import os

import lance
import pyarrow as pa
import pytest
from helpers.data import fingerprint

from dagster_lance_partitioned import CommitConflictError, PartitionedNamespace, PartitionField
from dagster_lance_partitioned.core.errors import SpecError

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("country", pa.utf8()),
    ]
)
DAILY = [PartitionField.year("ts"), PartitionField.month("ts"), PartitionField.day("ts")]
MONTHLY = [PartitionField.year("ts"), PartitionField.month("ts")]


def rows(start_id: int, days: list[dt.date], countries=("US", "FR")) -> pa.Table:
    out = []
    for i, d in enumerate(days):
        for j, c in enumerate(countries):
            ts = dt.datetime(d.year, d.month, d.day, 6 + j, tzinfo=dt.UTC)
            out.append({"id": start_id + 2 * i + j, "ts": ts, "country": c})
    return pa.Table.from_pylist(out, schema=SCHEMA)


def manifest_metadata(ns) -> dict:
    return dict(lance.dataset(os.path.join(ns.uri, "__manifest")).metadata)


@pytest.fixture
def daily(tmp_path):
    ns = PartitionedNamespace.create(tmp_path / "ev", SCHEMA, DAILY)
    ns.write(
        rows(
            0,
            [
                dt.date(2025, 11, 29),
                dt.date(2025, 11, 30),
                dt.date(2025, 12, 1),
                dt.date(2025, 12, 2),
            ],
        )
    )
    return ns


def test_daily_to_monthly(daily):
    ns = daily
    before_rows = ns.to_table().num_rows
    v = ns.update_spec(MONTHLY)
    assert ns.current_spec.spec_id == 2 and ns.version == v
    md = manifest_metadata(ns)
    v2 = json.loads(md["partition_spec_v2"])
    # identical fields keep their field ids
    assert [f["field_id"] for f in v2["fields"]] == ["ts_year", "ts_month"]
    assert json.loads(md["partition_spec_v1"])["fields"][0]["field_id"] == "ts_year"
    assert ns.to_table().num_rows == before_rows  # old data still reads
    res = ns.write(rows(100, [dt.date(2025, 12, 3), dt.date(2026, 1, 5)]))
    assert {p.object_id.split("$")[0] for p in res.partitions} == {"v2"}
    assert {tuple(p.values.values()) for p in res.partitions} == {(2025, 12), (2026, 1)}
    assert ns.to_table().num_rows == before_rows + 4
    # pruning uses each version's own spec
    plan = ns.plan_scan("ts >= '2025-12-01' AND ts < '2025-12-02'", by_stats=False)
    got = {(t.spec_id, tuple(t.partition_values.values())) for t in plan.tasks}
    assert got == {(1, (2025, 12, 1)), (2, (2025, 12))}
    ids = sorted(ns.to_table("ts >= '2025-12-01' AND ts < '2025-12-02'")["id"].to_pylist())
    assert ids == [4, 5]
    # the manifest got the v2 namespace in the first write under v2
    m = lance.dataset(os.path.join(ns.uri, "__manifest")).to_table().to_pylist()
    assert any(r["object_id"] == "v2" and r["object_type"] == "namespace" for r in m)


def test_overwrite_under_new_spec_replaces_old_partitions_it_covers(daily):
    ns = daily
    ns.update_spec(MONTHLY)
    res = ns.write(rows(200, [dt.date(2025, 12, 15)]), mode="overwrite_partitions")
    # December (v2) replaced: the v1 days of December are deregistered in the same commit
    dec = ns.to_table("ts >= '2025-12-01' AND ts < '2026-01-01'")
    assert sorted(dec["id"].to_pylist()) == [200, 201]
    assert len(res.removed) == 2  # 2025-12-01 and 2025-12-02 (v1)
    nov = ns.to_table("ts < '2025-12-01'")
    assert sorted(nov["id"].to_pylist()) == [0, 1, 2, 3]  # November untouched


def test_adding_and_dropping_a_dimension(daily):
    ns = daily
    ns.update_spec([*MONTHLY, PartitionField.identity("country")])
    ns.write(rows(300, [dt.date(2026, 2, 1)]))
    assert {(t.spec_id, len(t.partition_values)) for t in ns.plan_scan().tasks} >= {(1, 3), (2, 3)}
    assert {
        tuple(t.partition_values.values())
        for t in ns.plan_scan("country = 'FR'").tasks
        if t.spec_id == 2
    } == {(2026, 2, "FR")}
    ns.update_spec([PartitionField.identity("country")])  # drop the time dimensions
    assert ns.current_spec.spec_id == 3
    assert [f.field_id for f in ns.current_spec.fields] == ["country"]  # reused from v2
    ns.write(rows(400, [dt.date(2026, 3, 1)]))
    got = sorted(ns.to_table("country = 'US'")["id"].to_pylist())
    assert got == [0, 2, 4, 6, 300, 400]
    plan = ns.plan_scan("country = 'US'")
    assert {t.spec_id for t in plan.tasks} == {1, 2, 3}
    assert all(t.partition_values.get("country") in (None, "US") for t in plan.tasks)


def test_same_fields_is_a_no_op_and_bad_specs_change_nothing(daily):
    ns = daily
    before = fingerprint(ns.uri)
    assert ns.update_spec(DAILY) == ns.version
    with pytest.raises(SpecError, match="'nope'"):
        ns.update_spec([PartitionField.identity("nope")])
    with pytest.raises(SpecError):
        ns.update_spec(
            [PartitionField.expression(["id"], "col0 * 2", result_type=pa.utf8(), field_id="bad")]
        )
    assert fingerprint(ns.uri) == before


def test_concurrent_spec_updates_both_land_as_separate_versions(daily):
    a = PartitionedNamespace.open(daily.uri)
    b = PartitionedNamespace.open(daily.uri)
    a.update_spec(MONTHLY)
    assert b.version < a.version  # b still reads the version before a's spec
    b.update_spec([PartitionField.identity("country")])  # resolved on the latest: becomes v3
    specs = PartitionedNamespace.open(daily.uri).specs
    assert [s.spec_id for s in specs] == [1, 2, 3]
    assert [f.field_id for f in specs[2].fields] == ["country"]
    assert CommitConflictError  # imported for the retry contract documented on update_spec


def test_filters_plan_before_the_first_write_under_a_new_spec(tmp_path):
    """A new spec's manifest columns arrive with its first write; until then a filter still
    plans (the new spec has no partitions) instead of failing on the missing column."""
    schema = pa.schema([("k", pa.int64()), ("v", pa.int64())])
    ns = PartitionedNamespace.create(tmp_path / "n", schema, [PartitionField.identity("k")])
    ns.write(pa.table({"k": [1, 2], "v": [1, 2]}, schema=schema))
    ns.update_spec([PartitionField.bucket("k", 3)])
    assert ns.to_table(filter="k = 1").column("v").to_pylist() == [1]
    assert len(ns.plan_scan("k = 1").tasks) == 1
