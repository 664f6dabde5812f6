"""Each key's materialization carries its own numbers: the partition tables it wrote and their
bytes (as an integer and as readable text), next to its own row count; a run of several keys
names its totals ``lance/run_*`` and logs them in the run, and emits its per-key events in
partition order, so the newest materialization of the asset is the run's last key. Real
Dagster runs on real Lance tables in temporary directories."""

import datetime as dt
import os
import re
from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow as pa
import pytest
from helpers.dagster_runs import range_tags

from dagster_lance_partitioned import PartitionedNamespace
from dagster_lance_partitioned.orchestration import LancePartitionedIOManager

# backfill policies are beta in Dagster 1.13
pytestmark = pytest.mark.filterwarnings("ignore::dagster.BetaWarning")

DAILY = dg.DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-02-01")
ORIGINS = dg.StaticPartitionsDefinition(["EWR", "JFK", "LGA"])
BOX = dg.MultiPartitionsDefinition({"date": DAILY, "origin": ORIGINS})
SINGLE_RUN = dg.BackfillPolicy.single_run()
SIZE = re.compile(r"^(\d+ B|\d+\.\d (KiB|MiB|GiB|TiB))$")


def day_rows(day: str, n: int, origin: str = "EWR") -> pa.Table:
    """``n`` rows of one day (the row count differs per day, so do the bytes)."""
    date = dt.date.fromisoformat(day)
    return pa.table(
        {
            "day": pa.array([date] * n, pa.date32()),
            "origin": pa.array([origin] * n, pa.utf8()),
            "id": pa.array(range(n), pa.int64()),
            "payload": pa.array([f"{day}-{origin}-{i}" * 8 for i in range(n)], pa.utf8()),
        }
    )


def rows_for(key: Any) -> pa.Table:
    if isinstance(key, dg.MultiPartitionKey):
        parts = key.keys_by_dimension
        return day_rows(parts["date"], 5 + int(parts["date"][-2:]), parts["origin"])
    return day_rows(str(key), 10 * int(str(key)[-2:]))


@dg.asset(partitions_def=DAILY, metadata={"partition_expr": "day"}, backfill_policy=SINGLE_RUN)
def daily_events(context: dg.AssetExecutionContext) -> pa.Table:
    return pa.concat_tables([rows_for(k) for k in context.partition_keys])


@dg.asset(
    partitions_def=BOX,
    metadata={"partition_expr": {"date": "day", "origin": "origin"}},
    backfill_policy=SINGLE_RUN,
)
def box_events(context: dg.AssetExecutionContext) -> pa.Table:
    return pa.concat_tables([rows_for(k) for k in context.partition_keys])


def run(
    assets: list[Any],
    root: Path,
    instance: dg.DagsterInstance,
    *,
    key: str | None = None,
    range_: tuple[str, str] | None = None,
) -> dg.ExecuteInProcessResult:
    tags = range_tags(range_)
    result = dg.materialize(
        assets,
        instance=instance,
        partition_key=key,
        tags=tags,
        resources={"io_manager": LancePartitionedIOManager(root=str(root))},
    )
    assert result.success
    return result


def events_of(result: dg.ExecuteInProcessResult, node: str) -> list[tuple[str, dict[str, Any]]]:
    """(partition key, plain metadata) of each materialization, in the order they were made."""
    return [
        (str(m.partition), {k: v.value for k, v in m.metadata.items()})
        for m in result.asset_materializations_for_node(node)
    ]


def data_bytes(ns: PartitionedNamespace, key_of) -> dict[str, int]:
    """Bytes of the data files under each partition table (of tables written once: all of
    them belong to the version the manifest pins), by the Dagster key of the table."""
    out: dict[str, int] = {}
    for p in ns.inspect.partitions():
        data = os.path.join(ns.uri, p["location"], "data")
        size = sum(os.path.getsize(os.path.join(data, f)) for f in os.listdir(data))
        key = key_of(p["values"])
        out[key] = out.get(key, 0) + size
    return out


def test_each_key_of_a_range_run_carries_its_own_tables_and_bytes(tmp_path):
    instance = dg.DagsterInstance.ephemeral()
    result = run([daily_events], tmp_path, instance, range_=("2024-01-02", "2024-01-06"))

    ns = PartitionedNamespace.open(str(tmp_path / "daily_events"))
    on_disk = data_bytes(ns, lambda v: v["day_day"].isoformat())
    events = dict(events_of(result, "daily_events"))
    keys = ["2024-01-02", "2024-01-03", "2024-01-04", "2024-01-05", "2024-01-06"]
    assert sorted(events) == keys
    for key in keys:
        meta = events[key]
        assert meta["dagster/partition_row_count"] == rows_for(key).num_rows
        assert meta["lance/partitions_written"] == 1  # its own table, not the run's 5
        assert meta["lance/bytes_written"] == on_disk[key] > 0  # its own table's files
        assert SIZE.match(meta["lance/size_written"]), meta["lance/size_written"]
        assert list(meta["lance/read_versions"]) == [key]
    # the byte counts differ per key: they are not a copied total
    assert len({events[k]["lance/bytes_written"] for k in keys}) == len(keys)

    # the run's totals are named as such, identical on every event
    for meta in events.values():
        assert meta["lance/run_partition_keys"] == 5
        assert meta["lance/run_partitions_written"] == 5
        assert meta["lance/run_bytes_written"] == sum(on_disk.values())
        assert meta["lance/run_rows_written"] == ns.count_rows()
        assert "lance/rows_written" not in meta

    # and logged in the run, where run-level facts are read
    messages = [e.user_message for e in instance.all_logs(result.run_id)]
    summary = [m for m in messages if "partition keys" in m and "manifest version" in m]
    assert len(summary) == 1, messages
    assert f"manifest version {ns.version}: 5 partition keys" in summary[0]
    assert f"{ns.count_rows()} rows" in summary[0]


def test_a_single_key_run_reports_its_numbers_without_run_totals(tmp_path):
    result = run([daily_events], tmp_path, dg.DagsterInstance.ephemeral(), key="2024-01-20")
    [(key, meta)] = events_of(result, "daily_events")
    ns = PartitionedNamespace.open(str(tmp_path / "daily_events"))
    on_disk = data_bytes(ns, lambda v: v["day_day"].isoformat())
    assert key == "2024-01-20"
    assert meta["lance/partitions_written"] == 1
    assert meta["lance/bytes_written"] == on_disk["2024-01-20"]
    assert meta["dagster/partition_row_count"] == 200
    assert not [k for k in meta if k.startswith("lance/run_")]


def test_size_written_is_readable_text_of_the_bytes(tmp_path):
    result = run([daily_events], tmp_path, dg.DagsterInstance.ephemeral(), key="2024-01-31")
    [(_, meta)] = events_of(result, "daily_events")
    n = meta["lance/bytes_written"]
    text = meta["lance/size_written"]
    assert n > 1024  # 310 rows of ~100 bytes
    number, unit = text.split()
    scale = {"KiB": 1024, "MiB": 1024**2}[unit]
    assert abs(float(number) * scale - n) <= 0.05 * scale  # one decimal of that unit


def test_a_multi_partition_box_emits_its_events_in_partition_order(tmp_path):
    instance = dg.DagsterInstance.ephemeral()
    # 5 days x 3 airports: 15 keys, which Dagster holds in a set (any order)
    result = run([box_events], tmp_path, instance, range_=("2024-01-03|EWR", "2024-01-07|LGA"))
    got = [key for key, _ in events_of(result, "box_events")]
    expected = [k for k in BOX.get_partition_keys() if "2024-01-03" <= k[:10] <= "2024-01-07"]
    assert len(expected) == 15
    assert got == expected  # date by date, then airport: the partitions definition's order

    # the newest materialization of the asset (the UI's "latest") is the run's last key
    latest = instance.fetch_materializations(dg.AssetKey("box_events"), limit=1).records[0]
    assert latest.partition_key == "2024-01-07|LGA"

    # each key's numbers are its own here too
    ns = PartitionedNamespace.open(str(tmp_path / "box_events"))
    on_disk = data_bytes(ns, lambda v: f"{v['day_day'].isoformat()}|{v['origin']}")
    for key, meta in events_of(result, "box_events"):
        assert meta["lance/partitions_written"] == 1
        assert meta["lance/bytes_written"] == on_disk[key]
        assert meta["dagster/partition_row_count"] == 5 + int(key[8:10])


def test_dynamic_keys_are_emitted_in_the_order_they_were_added(tmp_path):
    teams = dg.DynamicPartitionsDefinition(name="teams")

    @dg.asset(partitions_def=teams, metadata={"partition_expr": "team"}, backfill_policy=SINGLE_RUN)
    def team_events(context: dg.AssetExecutionContext) -> pa.Table:
        keys = list(context.partition_keys)
        return pa.table({"team": keys, "n": list(range(len(keys)))})

    instance = dg.DagsterInstance.ephemeral()
    added = ["zeta", "alpha", "mu", "beta", "omega", "kappa"]  # not alphabetical
    instance.add_dynamic_partitions("teams", added)
    result = run([team_events], tmp_path, instance, range_=("zeta", "kappa"))
    assert [key for key, _ in events_of(result, "team_events")] == added


def test_a_merge_of_several_keys_names_its_row_totals_as_the_runs(tmp_path):
    @dg.asset(
        partitions_def=DAILY,
        metadata={
            "partition_expr": "day",
            "lance/write_mode": "merge",
            "lance/merge_on": ["day", "id"],
        },
        backfill_policy=SINGLE_RUN,
        name="merged",
    )
    def merged(context: dg.AssetExecutionContext) -> pa.Table:
        return pa.concat_tables([rows_for(k) for k in context.partition_keys])

    instance = dg.DagsterInstance.ephemeral()
    run([merged], tmp_path, instance, key="2024-01-02")  # 20 rows of 01-02 first
    result = run([merged], tmp_path, instance, range_=("2024-01-02", "2024-01-04"))

    events = dict(events_of(result, "merged"))
    assert list(events) == ["2024-01-02", "2024-01-03", "2024-01-04"]
    for key, meta in events.items():
        assert meta["dagster/partition_row_count"] == rows_for(key).num_rows
        assert meta["lance/partitions_written"] == 1  # the key's own table changed
        assert meta["lance/run_partitions_written"] == 3
        # 20 rows of 01-02 updated, 30 + 40 of the other days inserted: the run's totals
        assert (meta["lance/run_rows_updated"], meta["lance/run_rows_inserted"]) == (20, 70)
        assert "lance/rows_inserted" not in meta and "lance/rows_updated" not in meta
