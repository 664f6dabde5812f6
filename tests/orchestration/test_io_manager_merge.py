"""The IO manager's merge mode (``lance/write_mode: merge``, ``lance/merge_on``) through real
Dagster runs on real pylance tables: upserts into a partitioned asset scoped to the run's keys
(rows and stored keys of other keys refused, ``delete`` of unmatched rows limited to the run's
keys), upserts into an unpartitioned asset (moves across its data partitions), metadata counts
checked against the table itself, idempotent reruns, and bad merge keys refused with a specific
error leaving the namespace as it was."""

import datetime as dt
import os
from collections.abc import Sequence
from typing import Any

import dagster as dg
import pyarrow as pa
import pytest
from helpers.dagster_runs import range_tags
from helpers.data import fingerprint, sorted_rows

from dagster_lance_partitioned import PartitionedNamespace
from dagster_lance_partitioned.core.ops.history import commits
from dagster_lance_partitioned.orchestration import (
    ArrowTableHandler,
    LancePartitionedIOManager,
    TypeHandler,
    default_type_handlers,
)

DAILY = dg.DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-02-01")
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64()),
        pa.field("day", pa.date32()),
        pa.field("country", pa.utf8()),
        pa.field("value", pa.float64()),
    ]
)
pytestmark = pytest.mark.filterwarnings("ignore::dagster.BetaWarning")


def rows(day: str, ids: Sequence[int], value: float = 0.0, country: str = "US") -> pa.Table:
    """Rows ``ids`` of ``day`` (value: ``value`` + id, so a write is recognisable)."""
    return pa.table(
        {
            "id": list(ids),
            "day": [dt.date.fromisoformat(day)] * len(ids),
            "country": [country] * len(ids),
            "value": [value + i for i in ids],
        },
        schema=SCHEMA,
    )


def run(
    assets: Sequence[Any],
    root: Any,
    instance: dg.DagsterInstance,
    *,
    partition_key: str | None = None,
    range_: tuple[str, str] | None = None,
) -> dg.ExecuteInProcessResult:
    tags = range_tags(range_)
    return dg.materialize(
        assets,
        instance=instance,
        partition_key=partition_key,
        tags=tags,
        raise_on_error=False,
        resources={"io_manager": LancePartitionedIOManager(root=str(root))},
    )


def metadata(result: dg.ExecuteInProcessResult, node: str) -> list[dict[str, Any]]:
    assert result.success, failure(result)
    return [
        {k: v.value for k, v in mat.metadata.items()}
        for mat in result.asset_materializations_for_node(node)
    ]


def failure(result: dg.ExecuteInProcessResult) -> list[tuple[str, str]]:
    """(class name, message) of every step failure's error and its causes."""
    out = []
    for event in result.get_step_failure_events():
        err = event.step_failure_data.error
        while err is not None:
            out.append((err.cls_name or "", err.message))
            err = err.cause
    return out


def error_classes(result: dg.ExecuteInProcessResult) -> list[str]:
    return [cls for cls, _ in failure(result)]


def table(root: Any, asset: str) -> list[dict]:
    return sorted_rows(PartitionedNamespace.open(os.path.join(str(root), asset)).to_table())


def daily_merge_asset(data: dict[str, pa.Table], **meta: Any):
    """A daily asset merging ``data[key]`` on ``id`` (``meta`` overrides its metadata; a None
    value removes the entry)."""
    md = {"partition_expr": "day", "lance/write_mode": "merge", "lance/merge_on": ["id"], **meta}

    @dg.asset(
        name="events",
        partitions_def=DAILY,
        backfill_policy=dg.BackfillPolicy.single_run(),
        metadata={k: v for k, v in md.items() if v is not None},
    )
    def events(context: dg.AssetExecutionContext) -> pa.Table:
        parts = [data[k] for k in context.partition_keys if k in data]
        return pa.concat_tables(parts) if parts else SCHEMA.empty_table()

    return events


# -- partitioned -----------------------------------------------------------------------------------
def test_partitioned_merge_upserts_the_runs_key_and_counts_what_happened(tmp_path):
    data: dict[str, pa.Table] = {"2024-01-01": rows("2024-01-01", range(5))}
    events = daily_merge_asset(data)
    instance = dg.DagsterInstance.ephemeral()

    [first] = metadata(run([events], tmp_path, instance, partition_key="2024-01-01"), "events")
    assert (first["lance/rows_inserted"], first["lance/rows_updated"]) == (5, 0)
    assert first["lance/rows_deleted"] == 0 and first["dagster/partition_row_count"] == 5
    assert first["lance/write_mode"] == "merge" and first["lance/merge_on"] == ["id"]
    assert set(first["lance/read_versions"]) == {"2024-01-01"}

    # ids 3 and 4 change, 5 and 6 are new
    data["2024-01-01"] = rows("2024-01-01", [3, 4, 5, 6], value=100.0)
    result = run([events], tmp_path, instance, partition_key="2024-01-01")
    [second] = metadata(result, "events")
    assert (second["lance/rows_inserted"], second["lance/rows_updated"]) == (2, 2)
    assert second["lance/rows_deleted"] == 0 and second["lance/rows_moved"] == 0
    assert second["dagster/partition_row_count"] == 7
    stored = table(tmp_path, "events")
    assert [r["id"] for r in stored] == [0, 1, 2, 3, 4, 5, 6]
    assert {r["id"]: r["value"] for r in stored} == {
        0: 0.0, 1: 1.0, 2: 2.0, 3: 103.0, 4: 104.0, 5: 105.0, 6: 106.0
    }  # fmt: skip
    ns = PartitionedNamespace.open(str(tmp_path / "events"))
    assert second["lance/manifest_version"] == ns.version
    [p] = ns.inspect.partitions()
    assert second["lance/read_versions"] == {"2024-01-01": str(p["read_version"])}
    [last] = commits(ns.uri, ns.version - 1)
    assert last.source == "dagster-lance-partitioned/io-manager" and last.operation == "merge"

    # the same merge again: nothing new, the table as it was
    [third] = metadata(run([events], tmp_path, instance, partition_key="2024-01-01"), "events")
    assert third["lance/rows_inserted"] == 0 and third["lance/rows_deleted"] == 0
    assert third["dagster/partition_row_count"] == 7
    assert table(tmp_path, "events") == stored

    # another key's merge leaves this one's rows alone
    data["2024-01-02"] = rows("2024-01-02", [10, 11])
    [other] = metadata(run([events], tmp_path, instance, partition_key="2024-01-02"), "events")
    assert other["lance/rows_inserted"] == 2 and other["dagster/partition_row_count"] == 2
    assert [r["id"] for r in table(tmp_path, "events")] == [0, 1, 2, 3, 4, 5, 6, 10, 11]


def test_partitioned_delete_of_unmatched_rows_is_scoped_to_the_runs_keys(tmp_path):
    data = {
        "2024-01-01": rows("2024-01-01", range(5)),
        "2024-01-02": rows("2024-01-02", range(10, 15)),
        "2024-01-03": rows("2024-01-03", range(20, 23)),
    }
    instance = dg.DagsterInstance.ephemeral()
    run([daily_merge_asset(data)], tmp_path, instance, range_=("2024-01-01", "2024-01-03"))

    # a run of two keys: 01-01 keeps ids 0 and 1 (2, 3, 4 go), 01-02 has no rows at all now
    # (all of its rows go); 01-03 is not the run's and keeps everything
    events = daily_merge_asset(
        {"2024-01-01": rows("2024-01-01", [0, 1], value=50.0)},
        **{"lance/merge_when_not_matched_by_source": "delete"},
    )
    result = run([events], tmp_path, instance, range_=("2024-01-01", "2024-01-02"))
    mats = metadata(result, "events")
    assert len(mats) == 2
    assert {m["lance/run_rows_deleted"] for m in mats} == {8}  # the run's total, on each event
    assert {m["lance/run_rows_updated"] for m in mats} == {2}
    counts = {
        str(m.partition): m.metadata["dagster/partition_row_count"].value
        for m in result.asset_materializations_for_node("events")
    }
    assert counts == {"2024-01-01": 2, "2024-01-02": 0}
    stored = table(tmp_path, "events")
    assert [r["id"] for r in stored] == [0, 1, 20, 21, 22]
    assert [r["value"] for r in stored[:2]] == [50.0, 51.0]


def test_partitioned_merge_refuses_rows_of_keys_the_run_does_not_target(tmp_path):
    data = {"2024-01-01": rows("2024-01-01", range(3))}
    events = daily_merge_asset(data)
    instance = dg.DagsterInstance.ephemeral()
    run([events], tmp_path, instance, partition_key="2024-01-01")
    before = fingerprint(tmp_path / "events")

    data["2024-01-01"] = pa.concat_tables([rows("2024-01-01", [7]), rows("2024-01-05", [8])])
    result = run([events], tmp_path, instance, partition_key="2024-01-01")
    assert not result.success
    assert "PartitionKeyMismatchError" in error_classes(result)
    assert any("'2024-01-05'" in message for _, message in failure(result))
    assert fingerprint(tmp_path / "events") == before


def test_partitioned_merge_refuses_to_move_a_key_out_of_another_key(tmp_path):
    data = {"2024-01-01": rows("2024-01-01", range(3))}
    instance = dg.DagsterInstance.ephemeral()
    run([daily_merge_asset(data)], tmp_path, instance, partition_key="2024-01-01")
    before = fingerprint(tmp_path / "events")

    # id 2 is stored under 2024-01-01: merging it into 2024-01-02 would delete it there
    data["2024-01-02"] = rows("2024-01-02", [2, 3])
    result = run([daily_merge_asset(data)], tmp_path, instance, partition_key="2024-01-02")
    assert not result.success
    assert "PartitionKeyMismatchError" in error_classes(result)
    [message] = [m for c, m in failure(result) if c == "PartitionKeyMismatchError"]
    assert "{'id': 2}" in message and "'2024-01-01'" in message and "lance/merge_on" in message
    assert fingerprint(tmp_path / "events") == before

    # keyed on (id, day) the row of 2024-01-02 is another row: nothing moves
    keyed = daily_merge_asset(data, **{"lance/merge_on": ["id", "day"]})
    [mat] = metadata(run([keyed], tmp_path, instance, partition_key="2024-01-02"), "events")
    assert (mat["lance/rows_inserted"], mat["lance/rows_moved"]) == (2, 0)
    assert [(r["id"], str(r["day"])) for r in table(tmp_path, "events")] == [
        (0, "2024-01-01"), (1, "2024-01-01"), (2, "2024-01-01"), (2, "2024-01-02"),
        (3, "2024-01-02"),
    ]  # fmt: skip


def test_partitioned_merge_refuses_a_key_written_elsewhere_just_before_it(tmp_path):
    """Another run stores the output's key under another partition key after this run
    prepared its output and just before the merge: the merge refuses it where it commits."""
    data = {"2024-01-01": rows("2024-01-01", range(3))}
    instance = dg.DagsterInstance.ephemeral()
    run([daily_merge_asset(data)], tmp_path, instance, partition_key="2024-01-01")

    class RacedHandler(ArrowTableHandler):
        def merge(self, obj, ns, options, commit_properties):  # type: ignore[no-untyped-def]
            other = PartitionedNamespace.open(ns.uri)  # another run writes id 7 on 01-01
            other.write(rows("2024-01-01", [7], value=70.0))
            return super().merge(obj, ns, options, commit_properties)

    class RacedIOManager(LancePartitionedIOManager):
        @staticmethod
        def type_handlers() -> list[TypeHandler[Any]]:
            return [RacedHandler(), *default_type_handlers()]

    data["2024-01-02"] = rows("2024-01-02", [7])
    result = dg.materialize(
        [daily_merge_asset(data)],
        instance=instance,
        partition_key="2024-01-02",
        raise_on_error=False,
        resources={"io_manager": RacedIOManager(root=str(tmp_path))},
    )
    assert not result.success
    [message] = [m for c, m in failure(result) if c == "PartitionKeyMismatchError"]
    assert "'2024-01-01'" in message and "may not touch" in message  # where it commits
    assert [(r["id"], str(r["day"]), r["value"]) for r in table(tmp_path, "events")] == [
        (0, "2024-01-01", 0.0), (1, "2024-01-01", 1.0), (2, "2024-01-01", 2.0),
        (7, "2024-01-01", 77.0),
    ]  # fmt: skip


# -- unpartitioned ---------------------------------------------------------------------------------
def test_unpartitioned_merge_upserts_across_its_data_partitions(tmp_path):
    state = {"rows": rows("2024-01-01", range(4), country="US")}

    @dg.asset(
        metadata={
            "lance/partition_by": ["country"],
            "lance/write_mode": "merge",
            "lance/merge_on": "id",
        }
    )
    def customers() -> pa.Table:
        return state["rows"]

    instance = dg.DagsterInstance.ephemeral()
    [first] = metadata(run([customers], tmp_path, instance), "customers")
    assert first["lance/rows_inserted"] == 4 and first["dagster/row_count"] == 4

    # id 1 moves to FR (another partition of the data), id 9 is new
    state["rows"] = pa.concat_tables(
        [rows("2024-01-02", [1], value=10.0, country="FR"), rows("2024-01-02", [9])]
    )
    [second] = metadata(run([customers], tmp_path, instance), "customers")
    assert (second["lance/rows_inserted"], second["lance/rows_updated"]) == (1, 1)
    assert second["lance/rows_moved"] == 1
    assert second["dagster/row_count"] == 5
    stored = table(tmp_path, "customers")
    assert [(r["id"], r["country"]) for r in stored] == [
        (0, "US"), (1, "FR"), (2, "US"), (3, "US"), (9, "US"),
    ]  # fmt: skip
    assert second["lance/partitions_written"] == 2  # US (one row gone, one new) and FR
    assert set(second["lance/read_versions"]) == {"country=US", "country=FR"}

    [third] = metadata(run([customers], tmp_path, instance), "customers")  # idempotent
    assert third["lance/rows_inserted"] == 0 and third["dagster/row_count"] == 5
    assert table(tmp_path, "customers") == stored


# -- bad merge keys --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("merge_meta", "rows_of_run", "error", "named"),
    [
        ({"lance/merge_on": ["id", "customer_id"]}, [5], "MergeKeyError", "'customer_id'"),
        ({"lance/merge_on": None}, [5], "MergeKeyError", "lance/merge_on"),
        ({"lance/merge_on": ["id", "id"]}, [5], "MergeKeyError", "'id'"),
        ({}, [5, 6, 5], "DuplicateKeyError", "5"),
    ],
    ids=["unknown-column", "missing", "column-twice", "duplicate-key"],
)
def test_bad_merge_keys_are_refused_by_name_and_change_nothing(
    tmp_path, merge_meta, rows_of_run, error, named
):
    data = {"2024-01-01": rows("2024-01-01", range(3))}
    instance = dg.DagsterInstance.ephemeral()
    run([daily_merge_asset(data)], tmp_path, instance, partition_key="2024-01-01")
    before = fingerprint(tmp_path / "events")

    data["2024-01-01"] = rows("2024-01-01", rows_of_run)
    events = daily_merge_asset(data, **merge_meta)
    result = run([events], tmp_path, instance, partition_key="2024-01-01")
    assert not result.success
    assert error in error_classes(result)
    [message] = [m for c, m in failure(result) if c == error]
    assert named in message
    assert fingerprint(tmp_path / "events") == before


def test_merge_options_are_checked_before_anything_is_written(tmp_path):
    data = {"2024-01-01": rows("2024-01-01", range(3))}
    events = daily_merge_asset(data, **{"lance/merge_when_matched": "replace"})
    result = run([events], tmp_path, dg.DagsterInstance.ephemeral(), partition_key="2024-01-01")
    assert not result.success
    assert "WriteError" in error_classes(result)
    assert any("lance/merge_when_matched" in m for _, m in failure(result))
    assert not (tmp_path / "events").exists()  # not even created
