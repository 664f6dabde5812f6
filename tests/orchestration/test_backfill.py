"""Backfills launched the way the Dagster UI launches them: the GraphQL mutation
``launchPartitionBackfill`` (asset selection + partition names) on a real instance in a temporary
``DAGSTER_HOME``, then Dagster's own asset-backfill daemon iteration, which splits the selection
into runs by the assets' backfill policies; the runs execute in subprocesses launched through the
code server (``DefaultRunLauncher``), as in production.

Dagster 1.13 (``build_run_requests_with_backfill_policies``): a single-run backfill becomes one run
per contiguous partition key range; for a multi-partitioned asset the selection is grouped by the
dimension with fewer distinct keys (ties: the time dimension) and each group's contiguous keys
become one run. Every run is one manifest commit carrying ``dlp.dagster.run_id``."""

from __future__ import annotations

import json
import logging
import os
import textwrap
import time
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.execution.backfill import BulkActionStatus
from dagster._daemon.backfill import execute_backfill_iteration
from dagster._daemon.run_coordinator.queued_run_coordinator_daemon import (
    QueuedRunCoordinatorDaemon,
)
from dagster_graphql.client.query import LAUNCH_PARTITION_BACKFILL_MUTATION
from dagster_graphql.test.utils import (
    define_out_of_process_workspace,
    execute_dagster_graphql,
)

from dagster_lance_partitioned import PartitionedNamespace
from dagster_lance_partitioned.cli import main as cli_main
from dagster_lance_partitioned.core.ops.history import commits

pytestmark = [
    pytest.mark.multiprocess,
    pytest.mark.filterwarnings("ignore::dagster.BetaWarning"),
    # Dagster's own backfill code calls its deprecated AssetSelection.sources
    pytest.mark.filterwarnings("ignore:Function `AssetSelection.sources`:DeprecationWarning"),
]

DEFS = """
import datetime as dt
import os

import dagster as dg
import pyarrow as pa

from dagster_lance_partitioned.orchestration import LancePartitionedIOManager

daily = dg.DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-02-01")
kinds = dg.StaticPartitionsDefinition(["a", "b", "c"])
by_kind = dg.MultiPartitionsDefinition({"day": daily, "kind": kinds})
ROWS_PER_KEY = 4


@dg.asset(
    partitions_def=by_kind,
    backfill_policy=dg.BackfillPolicy.single_run(),
    metadata={"partition_expr": {"day": "day", "kind": "kind"}},
)
def events(context: dg.AssetExecutionContext) -> pa.Table:
    keys = [by_kind.get_partition_key_from_str(str(k)) for k in context.partition_keys]
    rows = [
        (dt.date.fromisoformat(k.keys_by_dimension["day"]), k.keys_by_dimension["kind"], i)
        for k in keys
        for i in range(ROWS_PER_KEY)
    ]
    return pa.table(
        {
            "day": pa.array([r[0] for r in rows], pa.date32()),
            "kind": [r[1] for r in rows],
            "n": pa.array([r[2] for r in rows], pa.int64()),
        }
    )


@dg.asset(
    partitions_def=daily,
    backfill_policy=dg.BackfillPolicy.single_run(),
    metadata={"partition_expr": "day"},
)
def totals(context: dg.AssetExecutionContext) -> pa.Table:
    days = [dt.date.fromisoformat(k) for k in context.partition_keys]
    return pa.table({"day": pa.array(days, pa.date32()), "n": pa.array([len(days)] * len(days))})


defs = dg.Definitions(
    assets=[events, totals],
    resources={"io_manager": LancePartitionedIOManager(root=os.environ["DLP_TEST_ROOT"])},
)
"""


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """A Dagster home with the default run launcher, the workspace (a code server subprocess)
    and the storage root."""
    tmp = tmp_path_factory.mktemp("backfill")
    home, root = tmp / "home", tmp / "lake"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    (tmp / "defs.py").write_text(textwrap.dedent(DEFS))
    mp = pytest.MonkeyPatch()
    mp.setenv("DLP_TEST_ROOT", str(root))  # the code server and the runs inherit it
    mp.setenv("DAGSTER_HOME", str(home))
    with (
        dg.DagsterInstance.get() as instance,
        define_out_of_process_workspace(str(tmp / "defs.py"), "defs", instance) as process,
    ):
        yield instance, process, root
    mp.undo()


def backfill(env, asset: str, partition_names: list[str]) -> list[dg.DagsterRun]:
    """Launch a backfill as the UI does, iterate the backfill daemon until it completes; its
    runs."""
    instance, process, _ = env
    request = process.create_request_context()
    result = execute_dagster_graphql(
        request,
        LAUNCH_PARTITION_BACKFILL_MUTATION,
        variables={
            "backfillParams": {
                "assetSelection": [{"path": [asset]}],
                "partitionNames": partition_names,
            }
        },
    )
    launched = result.data["launchPartitionBackfill"]
    assert launched["__typename"] == "LaunchBackfillSuccess", launched
    backfill_id = launched["backfillId"]
    logger = logging.getLogger("test_backfill")
    dequeue = QueuedRunCoordinatorDaemon(interval_seconds=1)  # the queued runs' daemon
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        list(execute_backfill_iteration(process, logger))
        list(dequeue.run_iteration(process))
        status = instance.get_backfill(backfill_id).status
        if status in (BulkActionStatus.COMPLETED_SUCCESS, BulkActionStatus.COMPLETED):
            break
        assert status in (BulkActionStatus.REQUESTED,), status
        time.sleep(0.2)
    else:
        raise AssertionError(f"backfill {backfill_id} did not complete")
    runs = instance.get_runs(filters=dg.RunsFilter(tags={"dagster/backfill": backfill_id}))
    assert runs and all(r.status == dg.DagsterRunStatus.SUCCESS for r in runs), [
        r.status for r in runs
    ]
    return list(runs)


def io_commits(root: Path, asset: str, run_ids: set[str]) -> list:
    """The manifest commits made by the given runs."""
    uri = str(root / asset)
    latest = PartitionedNamespace.open(uri).version
    return [
        c for c in commits(uri, 0, latest) if (c.properties or {}).get("dagster.run_id") in run_ids
    ]


def _keys(days: list[str], kinds: list[str]) -> list[str]:
    return [f"{d}|{k}" for d in days for k in kinds]


def _run_keys(run: dg.DagsterRun) -> tuple[str, str]:
    return run.tags["dagster/asset_partition_range_start"], run.tags[
        "dagster/asset_partition_range_end"
    ]


def test_multi_partitioned_backfill_runs_and_commits(env):
    """days x kinds: one run per key of the dimension with fewer keys (ties: the time
    dimension); each run one commit of exactly its keys; one day or one kind: one run."""
    instance, _, root = env
    days = ["2024-01-01", "2024-01-02", "2024-01-03", "2024-01-04", "2024-01-05"]
    # 5 days x 3 kinds: grouped by kind (3 < 5), each run = one kind over the 5 days
    runs = backfill(env, "events", _keys(days, ["a", "b", "c"]))
    assert len(runs) == 3
    assert sorted(_run_keys(r) for r in runs) == [
        (f"2024-01-01|{k}", f"2024-01-05|{k}") for k in ["a", "b", "c"]
    ]
    made = io_commits(root, "events", {r.run_id for r in runs})
    assert len(made) == 3  # one manifest commit per run
    for c in made:
        keys = json.loads(c.properties["dagster.partition_keys"])
        assert len(keys) == 5 and len(c.changes) == 5
    ns = PartitionedNamespace.open(root / "events")
    assert ns.count_rows() == 15 * 4
    assert len(ns.inspect.partitions()) == 15
    # the three runs ran side by side, creating the same day namespaces: each registered its
    # tables where it wrote them (no copies, no orphans), and the health check is clean
    directories = {d for d in os.listdir(root / "events") if d != "__manifest"}
    assert directories == {p["location"] for p in ns.inspect.partitions()}
    assert len({p["object_id"].split("$")[1] for p in ns.inspect.partitions()}) == 5  # one per day
    assert ns.inspect.find_orphans() == []
    assert cli_main(["check", str(root / "events")]) == 0
    materialized = instance.get_materialized_partitions(dg.AssetKey("events"))
    assert materialized == set(_keys(days, ["a", "b", "c"]))
    # each key's event: its own table version, keyed by the key, as text; the commit's version
    pinned = {"|".join(str(v) for v in p["values"].values()): p for p in ns.inspect.partitions()}
    for key in ["2024-01-02|b", "2024-01-05|c"]:
        record = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey("events"), asset_partitions=[key]), 1
        ).records[0]
        meta = record.asset_materialization.metadata
        assert meta["lance/read_versions"].value == {key: str(pinned[key]["read_version"])}
        commit = next(c for c in made if c.properties["dagster.run_id"] == record.run_id)
        assert meta["lance/manifest_version"].value == commit.version

    # one day, three kinds (grouped by the day): one run, one commit
    runs = backfill(env, "events", _keys(["2024-01-10"], ["a", "b", "c"]))
    assert [_run_keys(r) for r in runs] == [("2024-01-10|a", "2024-01-10|c")]
    assert len(io_commits(root, "events", {runs[0].run_id})) == 1
    assert PartitionedNamespace.open(root / "events").count_rows() == (15 + 3) * 4


def test_time_partitioned_backfill_is_one_run_per_contiguous_range(env):
    instance, _, root = env
    days = [f"2024-01-{d:02d}" for d in range(1, 11)]
    runs = backfill(env, "totals", days)
    assert [_run_keys(r) for r in runs] == [("2024-01-01", "2024-01-10")]
    made = io_commits(root, "totals", {runs[0].run_id})
    assert len(made) == 1 and len(made[0].changes) == 10
    table = PartitionedNamespace.open(root / "totals").to_table()
    assert sorted(table["n"].to_pylist()) == [10] * 10  # one run computed all ten days
    # a gap: two ranges, two runs, two commits
    runs = backfill(env, "totals", ["2024-01-20", "2024-01-21", "2024-01-25"])
    assert sorted(_run_keys(r) for r in runs) == [
        ("2024-01-20", "2024-01-21"),
        ("2024-01-25", "2024-01-25"),
    ]
    assert len(io_commits(root, "totals", {r.run_id for r in runs})) == 2
    record = instance.get_latest_materialization_event(dg.AssetKey("totals"))
    assert record is not None
