"""Indexes of assets stored by the IO manager: asset metadata ``lance/indexes`` declares them
on the namespace (once, before the run's write, so the write's own manifest commit registers
indexed tables), a changed or malformed declaration fails the run naming the asset and the
entry and leaves the namespace as it was, materializations record the coverage of the run's
partitions, the ``lance_index_coverage`` check (only on assets declaring indexes) fails for a
partition lacking an index or too many unindexed rows, the maintenance job optimizes indexes
after compacting, the external change sensor ignores index commits, and asset code searches
through the resource. Real Dagster runs on real Lance tables in temporary directories."""

import datetime as dt
import os
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import dagster as dg
import lance
import numpy as np
import pyarrow as pa
import pytest
import yaml
from dagster.components.testing import create_defs_folder_sandbox
from helpers.dagster_runs import range_tags
from helpers.interrupted import Interrupted, after_index_declared, interrupt

from dagster_lance_partitioned import PartitionedNamespace
from dagster_lance_partitioned.core.errors import IndexBuildError
from dagster_lance_partitioned.core.manifest.snapshot import ManifestSnapshot
from dagster_lance_partitioned.core.manifest.store import ManifestEdit, ManifestStore
from dagster_lance_partitioned.core.ops.history import commits
from dagster_lance_partitioned.orchestration import (
    LancePartitionedIOManager,
    LancePartitionedResource,
)
from dagster_lance_partitioned.orchestration.checks import build_lance_partitioned_checks
from dagster_lance_partitioned.orchestration.component import LancePartitionedComponent
from dagster_lance_partitioned.orchestration.errors import (
    IndexDeclarationConflictError,
    IndexMetadataError,
)
from dagster_lance_partitioned.orchestration.indexes import COVERAGE_COLUMNS
from dagster_lance_partitioned.orchestration.maintenance import build_lance_maintenance_job
from dagster_lance_partitioned.orchestration.sensors import build_lance_external_change_sensor

# backfill policies are beta in Dagster 1.13, as are the component loader's APIs
pytestmark = pytest.mark.filterwarnings("ignore::dagster.BetaWarning")

DIM = 8
DAILY = dg.DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-02-01")
SINGLE_RUN = dg.BackfillPolicy.single_run()
# day 01 has 100 rows (below the vector index's min_rows: searched flat), 02 200, 03 300, ...
VECTOR = {"column": "v", "index_type": "IVF_FLAT", "min_rows": 150, "num_partitions": 2}
SCALAR = {"column": "id", "index_type": "BTREE"}
TEXT = {"column": "txt", "index_type": "FTS", "name": "words"}
ALL = ["v_ivf_flat", "id_btree", "words"]


class Extra(dg.Config):
    """Rows a run adds to each of its keys (new ids), for merges."""

    extra: int = 0


def day_rows(day: str, n: int, start: int = 0) -> pa.Table:
    """``n`` rows of ``day`` with ids from ``start``: a vector, a text."""
    rng = np.random.default_rng(int(day.replace("-", "")) + start)
    matrix = rng.normal(size=(n, DIM)).astype(np.float32)
    return pa.table(
        {
            "day": pa.array([dt.date.fromisoformat(day)] * n, pa.date32()),
            "id": pa.array(range(start, start + n), pa.int64()),
            "v": pa.FixedSizeListArray.from_arrays(pa.array(matrix.ravel()), DIM),
            "txt": pa.array([f"w{i % 7} x{i % 3} {day}" for i in range(n)], pa.utf8()),
        }
    )


def rows_for(key: str, extra: int = 0) -> pa.Table:
    n = 100 * int(key[-2:])
    base = day_rows(key, n)
    return pa.concat_tables([base, day_rows(key, extra, 100_000)]) if extra else base


def make_asset(indexes: Any = None, *, merge: bool = False, name: str = "events") -> Any:
    """A daily asset (single-run backfills) declaring ``indexes`` (None: no metadata)."""
    metadata: dict[str, Any] = {"partition_expr": "day"}
    if indexes is not None:
        metadata["lance/indexes"] = indexes
    if merge:
        metadata.update(
            {
                "lance/write_mode": "merge",
                "lance/merge_on": ["day", "id"],
                "lance/merge_when_matched": "ignore",  # a rerun inserts only its new rows
            }
        )

    @dg.asset(name=name, partitions_def=DAILY, metadata=metadata, backfill_policy=SINGLE_RUN)
    def _asset(context: dg.AssetExecutionContext, config: Extra) -> pa.Table:
        return pa.concat_tables([rows_for(k, config.extra) for k in context.partition_keys])

    return _asset


class Lake:
    """An IO manager, its resource and one instance, with runs of a key or a key range."""

    def __init__(self, root: Path) -> None:
        self.io = LancePartitionedIOManager(root=str(root))
        self.lance = LancePartitionedResource(root=str(root))
        self.instance = dg.DagsterInstance.ephemeral()

    def run(
        self,
        assets: Sequence[Any],
        key: str | None = None,
        range_: tuple[str, str] | None = None,
        *,
        extra: int = 0,
        selection: Any = None,
        raise_on_error: bool = True,
    ) -> dg.ExecuteInProcessResult:
        tags = range_tags(range_)
        config = None
        if extra:
            name = next(a for a in assets if isinstance(a, dg.AssetsDefinition)).op.name
            config = {"ops": {name: {"config": {"extra": extra}}}}
        return dg.materialize(
            list(assets),
            partition_key=key,
            tags=tags,
            instance=self.instance,
            resources={"io_manager": self.io, "lance": self.lance},
            run_config=config,
            selection=selection,
            raise_on_error=raise_on_error,
        )

    def checks(self, assets: Sequence[Any], checks: Sequence[Any]) -> dict[str, Any]:
        result = dg.materialize(
            [*assets, *checks],
            selection=dg.AssetSelection.checks_for_assets(*assets),
            instance=self.instance,
            resources={"io_manager": self.io},
        )
        return {e.check_name: e for e in result.get_asset_check_evaluations()}

    @property
    def ns(self) -> PartitionedNamespace:
        return self.lance.namespace("events")

    def table(self, key: str) -> dict[str, Any]:
        return next(
            p for p in self.ns.inspect.partitions() if p["values"]["day_day"].isoformat() == key
        )

    def table_indexes(self, key: str) -> set[str]:
        """The index names the registered version of ``key``'s table carries."""
        p = self.table(key)
        ds = lance.dataset(os.path.join(self.ns.uri, p["location"]), version=p["read_version"])
        return {d.name for d in ds.describe_indices()}

    def unindex(self, key: str) -> None:
        """Rewrite ``key``'s table with plain pylance (same rows, no index) and point the
        manifest at that version, as a foreign tool would."""
        p = self.table(key)
        uri = os.path.join(self.ns.uri, p["location"])
        data = lance.dataset(uri, version=p["read_version"]).to_table()
        version = lance.write_dataset(data, uri, mode="overwrite").version
        ns = self.ns

        def plan(snap: ManifestSnapshot) -> ManifestEdit:
            edit = ManifestEdit()
            edit.upserts[p["object_id"]] = {"read_version": version}
            return edit

        ManifestStore(ns.uri).commit(lambda ds: ManifestSnapshot(ds, ns.specs), plan)
        assert self.table_indexes(key) == set()

    def history(self, since: int = 0) -> list[tuple[str | None, int]]:
        """(operation, tables changed) of each manifest commit after version ``since``."""
        found = commits(self.ns.uri, since, self.ns.version, None)
        return [(c.operation, len(c.changes)) for c in found if c.operation != "create"]


@pytest.fixture
def lake(tmp_path: Path) -> Lake:
    return Lake(tmp_path / "lake")


def records(meta: Any) -> dict[str, dict[str, Any]]:
    """The coverage table of a metadata value, by index name."""
    return {r.data["name"]: dict(r.data) for r in meta.records}


def value(meta: Any) -> Any:
    return getattr(meta, "value", meta)


def materializations(result: dg.ExecuteInProcessResult) -> dict[str | None, Any]:
    return {m.partition: m for m in result.asset_materializations_for_node("events")}


# -- declaring: before the write, once --------------------------------------------------------
def test_the_first_run_declares_and_its_own_write_commit_registers_indexed_tables(lake):
    events = make_asset([VECTOR, SCALAR, TEXT])
    result = lake.run([events], "2024-01-02")
    # three declarations (table metadata only), then the write: one commit, its table indexed
    assert lake.history() == [("create_index", 0)] * 3 + [("write", 1)]
    assert lake.table_indexes("2024-01-02") == set(ALL)
    mat = materializations(result)["2024-01-02"]
    assert value(mat.metadata["lance/indexes_declared"]) == ALL
    got = records(mat.metadata["lance/indexes"])
    assert sorted(got) == sorted(ALL)
    for cov in lake.ns.indexes(filter="day = DATE '2024-01-02'"):  # the core's own numbers
        assert got[cov.name] == {c: getattr(cov, c) for c in COVERAGE_COLUMNS}
        assert (cov.partitions_indexed, cov.indexed_rows, cov.unindexed_rows) == (1, 200, 0)
    assert value(mat.metadata["lance/index_partitions_needing"]) == 0
    assert value(mat.metadata["lance/index_unindexed_rows"]) == 0


def test_later_runs_declare_nothing_and_cover_only_their_own_partitions(lake):
    lake.run([make_asset([VECTOR, SCALAR, TEXT])], "2024-01-02")
    before = lake.ns.version
    # the same declarations spelled otherwise: INVERTED for FTS, the default metric given
    same = make_asset([{**VECTOR, "metric": "L2"}, SCALAR, {**TEXT, "index_type": "INVERTED"}])
    result = lake.run([same], "2024-01-03")
    assert lake.history(before) == [("write", 1)]  # no declaration commit, one write
    assert lake.table_indexes("2024-01-03") == set(ALL)
    mat = materializations(result)["2024-01-03"]
    assert "lance/indexes_declared" not in mat.metadata
    got = records(mat.metadata["lance/indexes"])
    assert {n: (r["partitions_total"], r["indexed_rows"]) for n, r in got.items()} == {
        n: (1, 300) for n in ALL
    }  # the run's key only, not the namespace's two partitions
    assert all(c.partitions_total == 2 and c.complete for c in lake.ns.indexes())


def test_a_single_run_backfill_writes_one_commit_and_each_key_records_its_coverage(lake):
    result = lake.run([make_asset([VECTOR, SCALAR])], range_=("2024-01-01", "2024-01-03"))
    assert lake.history() == [("create_index", 0)] * 2 + [("write", 3)]
    for key in ("2024-01-01", "2024-01-02", "2024-01-03"):
        assert lake.table_indexes(key) == (
            {"id_btree"} if key == "2024-01-01" else {"v_ivf_flat", "id_btree"}
        )
    mats = materializations(result)
    assert [m.partition for m in result.asset_materializations_for_node("events")] == sorted(mats)
    flat = records(mats["2024-01-01"].metadata["lance/indexes"])["v_ivf_flat"]
    assert (flat["partitions_flat"], flat["partitions_indexed"], flat["indexed_rows"]) == (1, 0, 0)
    third = records(mats["2024-01-03"].metadata["lance/indexes"])
    assert third["v_ivf_flat"]["indexed_rows"] == 300 and third["id_btree"]["indexed_rows"] == 300
    run = records(mats["2024-01-03"].metadata["lance/run_indexes"])
    assert run["v_ivf_flat"] == {
        "name": "v_ivf_flat",
        "column": "v",
        "index_type": "IVF_FLAT",
        "partitions_indexed": 2,
        "partitions_needing": 0,
        "partitions_flat": 1,
        "partitions_total": 3,
        "indexed_rows": 500,
        "unindexed_rows": 0,
    }
    assert run["id_btree"]["indexed_rows"] == 600
    assert value(mats["2024-01-01"].metadata["lance/run_index_unindexed_rows"]) == 0


def test_declaring_on_an_existing_namespace_indexes_its_tables_in_one_commit_first(lake):
    lake.run([make_asset()], range_=("2024-01-01", "2024-01-03"))
    before = lake.ns.version
    result = lake.run([make_asset([SCALAR])], "2024-01-04")
    # the declaration, the three existing tables indexed in one commit, then the write
    assert lake.history(before) == [("create_index", 0), ("create_index", 3), ("write", 1)]
    for key in ("2024-01-01", "2024-01-02", "2024-01-03", "2024-01-04"):
        assert lake.table_indexes(key) == {"id_btree"}
    (cov,) = lake.ns.indexes()
    assert cov.complete and cov.partitions_indexed == 4 and cov.indexed_rows == 1000
    mat = materializations(result)["2024-01-04"]
    assert value(mat.metadata["lance/indexes_declared"]) == ["id_btree"]
    assert records(mat.metadata["lance/indexes"])["id_btree"]["partitions_total"] == 1


# -- refused declarations ---------------------------------------------------------------------
def test_a_changed_declaration_fails_the_run_and_changes_nothing(lake):
    lake.run([make_asset([VECTOR])], "2024-01-02")
    before = lake.ns.version
    changed = make_asset([{**VECTOR, "num_partitions": 4}])
    with pytest.raises(IndexDeclarationConflictError) as raised:
        lake.run([changed], "2024-01-03")
    e = raised.value
    assert (e.asset, e.entry, e.name) == ("events", 0, "v_ivf_flat")
    assert e.stored["params"] == {"num_partitions": 2}
    assert e.wanted["params"] == {"num_partitions": 4}
    assert "asset events" in str(e) and "drop_index('v_ivf_flat')" in str(e)
    assert lake.ns.version == before  # nothing declared, nothing written
    assert [p["values"]["day_day"].isoformat() for p in lake.ns.inspect.partitions()] == [
        "2024-01-02"
    ]
    assert lake.ns.indexes()[0].params == {"num_partitions": 2}
    # the run shows it: the step failed with that message
    failed = lake.run([changed], "2024-01-03", raise_on_error=False)
    assert not failed.success
    step = next(ev for ev in failed.all_events if ev.is_step_failure)
    error = step.event_specific_data.error
    messages = []
    while error is not None:
        messages.append(error.message)
        error = error.cause
    assert any("already declares it" in m and "num_partitions" in m for m in messages)


BAD = [
    pytest.param(SCALAR, None, "must be a list", True, id="a-mapping"),
    pytest.param(["id"], 0, "must be a mapping", True, id="not-a-mapping"),
    pytest.param([{"index_type": "BTREE"}], 0, "'column'", True, id="no-column"),
    pytest.param([{"column": "id"}], 0, "'index_type'", True, id="no-type"),
    pytest.param(
        [{"column": "id", "index_type": "HNSW"}], 0, "unknown index type", True, id="type"
    ),
    pytest.param([{**SCALAR, "min_rows": 0}], 0, "'min_rows'", True, id="min-rows"),
    pytest.param([{**SCALAR, "name": 7}], 0, "'name'", True, id="name"),
    pytest.param([VECTOR, SCALAR, {**SCALAR}], 2, "both declare", True, id="twice"),
    pytest.param([VECTOR, {"column": "nope", "index_type": "BTREE"}], 1, "'nope'", False, id="col"),
    pytest.param([{"column": "txt", "index_type": "IVF_PQ"}], 0, "'txt'", False, id="column-type"),
    pytest.param([{**VECTOR, "metric": "manhattan"}], 0, "metric", False, id="metric"),
    pytest.param([{**SCALAR, "name": "a b"}], 0, "index name", False, id="name-chars"),
]


@pytest.mark.parametrize(("indexes", "entry", "says", "at_definition"), BAD)
def test_malformed_lance_indexes_fail_naming_the_asset_and_entry_before_anything_is_written(
    lake, indexes, entry, says, at_definition
):
    events = make_asset(indexes)
    with pytest.raises(IndexMetadataError) as raised:
        lake.run([events], "2024-01-02")
    e = raised.value
    assert (e.asset, e.entry) == ("events", entry)
    assert "asset events" in str(e) and says in str(e)
    assert "lance/indexes" in str(e) and "Nothing was written" in str(e)
    assert not lake.lance.exists("events")  # not even created
    if at_definition:  # the shape is refused when the checks / sensors are built, too
        with pytest.raises(IndexMetadataError, match="asset events"):
            build_lance_partitioned_checks([events], lake.lance)


def test_an_unpartitioned_asset_records_coverage_of_the_tables_the_run_wrote(lake):
    class Tenants(dg.Config):
        tenants: list[str]

    @dg.asset(
        name="events",
        metadata={"lance/partition_by": ["tenant"], "lance/indexes": [SCALAR]},
    )
    def by_tenant(config: Tenants) -> pa.Table:
        parts = []
        for i, t in enumerate(config.tenants):
            n = 10 * (i + 1)
            parts.append(pa.table({"tenant": [t] * n, "id": list(range(n))}))
        return pa.concat_tables(parts)

    def run(tenants: list[str]) -> dict[str, Any]:
        result = dg.materialize(
            [by_tenant],
            instance=lake.instance,
            resources={"io_manager": lake.io},
            run_config={"ops": {"events": {"config": {"tenants": tenants}}}},
        )
        (mat,) = result.asset_materializations_for_node("events")
        return records(mat.metadata["lance/indexes"])["id_btree"]

    first = run(["a", "b"])
    assert (first["partitions_total"], first["indexed_rows"]) == (2, 30)
    third = run(["c"])
    assert (third["partitions_total"], third["indexed_rows"]) == (1, 10)  # only c's table
    (cov,) = lake.ns.indexes()
    assert cov.partitions_total == 3 and cov.complete


# -- the coverage check ------------------------------------------------------------------------
def test_the_coverage_check_is_built_only_for_assets_declaring_indexes_and_passes(lake):
    events, plain = make_asset([VECTOR, SCALAR, TEXT]), make_asset(name="plain")
    checks = build_lance_partitioned_checks([events, plain], lake.lance)
    keys = {(k.asset_key.to_user_string(), k.name) for c in checks for k in c.check_keys}
    assert ("events", "lance_index_coverage") in keys
    assert ("plain", "lance_index_coverage") not in keys
    assert ("plain", "lance_schema_consistency") in keys
    only = build_lance_partitioned_checks([events, plain], lake.lance, checks=["indexes"])
    assert [k.asset_key.to_user_string() for c in only for k in c.check_keys] == ["events"]

    lake.run([events], range_=("2024-01-01", "2024-01-03"))
    got = lake.checks([events], checks)["lance_index_coverage"]
    assert got.passed, got.description
    meta = {k: value(v) for k, v in got.metadata.items()}
    assert meta["indexes_declared"] == 3 and meta["partitions_needing"] == 0
    assert meta["unindexed_rows"] == 0 and meta["undeclared"] == []
    by_name = {i["name"]: i for i in meta["indexes"]}
    assert by_name["v_ivf_flat"]["partitions_flat"] == 1  # day 01: below min_rows, not needing


def test_the_coverage_check_fails_on_unindexed_rows_over_its_bound(lake):
    events = make_asset([SCALAR], merge=True)
    lake.run([events], "2024-01-02")  # 200 rows, indexed
    result = lake.run([events], "2024-01-02", extra=50)  # 50 rows merged in: not indexed yet
    mat = materializations(result)["2024-01-02"]
    assert value(mat.metadata["lance/index_unindexed_rows"]) == 50
    assert records(mat.metadata["lance/indexes"])["id_btree"]["indexed_rows"] == 200

    default = lake.checks([events], build_lance_partitioned_checks([events], lake.lance))
    got = default["lance_index_coverage"]
    assert not got.passed
    assert "50 unindexed row(s), more than 20" in got.description  # 10% of 200
    assert value(got.metadata["unindexed_rows"]) == 50
    assert value(got.metadata["indexes"])[0]["unindexed_rows_allowed"] == 20
    lenient = build_lance_partitioned_checks([events], lake.lance, index_unindexed_fraction=0.5)
    assert lake.checks([events], lenient)["lance_index_coverage"].passed
    absolute = build_lance_partitioned_checks(
        [events], lake.lance, index_unindexed_fraction=None, index_unindexed_rows=49
    )
    got = lake.checks([events], absolute)["lance_index_coverage"]
    assert not got.passed and "more than 49" in got.description

    job = build_lance_maintenance_job([events], lake.lance)
    assert job.execute_in_process(instance=lake.instance).success
    assert lake.checks([events], build_lance_partitioned_checks([events], lake.lance))[
        "lance_index_coverage"
    ].passed


def test_the_coverage_check_fails_for_a_partition_lacking_an_index_or_a_declaration(lake):
    events = make_asset([SCALAR])
    lake.run([events], range_=("2024-01-02", "2024-01-03"))
    lake.unindex("2024-01-03")
    got = lake.checks([events], build_lance_partitioned_checks([events], lake.lance))
    coverage = got["lance_index_coverage"]
    assert not coverage.passed
    assert "1 partition(s) lack an index" in coverage.description
    assert "2024-01-03" in coverage.description
    assert value(coverage.metadata["needing"]) == [{"index": "id_btree", "partition": "2024-01-03"}]
    assert value(coverage.metadata["partitions_needing"]) == 1

    # the asset's definition gains an index the namespace does not declare yet
    more = make_asset([SCALAR, TEXT])
    got = lake.checks([more], build_lance_partitioned_checks([more], lake.lance))
    coverage = got["lance_index_coverage"]
    assert not coverage.passed and "not declared on the namespace yet" in coverage.description
    assert value(coverage.metadata["undeclared"]) == ["words"]


def test_the_coverage_check_reports_an_interrupted_declaration_as_pending(lake):
    lake.run([make_asset(None)], range_=("2024-01-02", "2024-01-03"))
    # the declaration SCALAR asks for, killed between its declaration and its tables' commit
    with after_index_declared(interrupt), pytest.raises(Interrupted):
        lake.ns.create_index("id", "BTREE")
    events = make_asset([SCALAR])
    checks = build_lance_partitioned_checks([events], lake.lance)
    coverage = lake.checks([events], checks)["lance_index_coverage"]
    assert not coverage.passed
    assert "not declared" not in coverage.description  # declared: pending, not missing
    assert "2 partition(s) lack an index their size calls for, not built yet" in (
        coverage.description
    )
    assert "2024-01-02, 2024-01-03" in coverage.description
    assert "results stay exact" in coverage.description
    assert "more than" not in coverage.description  # their rows are not "appended" rows too
    assert "optimize_indexes()" in coverage.description and "a run writing" in coverage.description
    needing = sorted(value(coverage.metadata["needing"]), key=lambda n: n["partition"])
    assert needing == [
        {"index": "id_btree", "partition": "2024-01-02"},
        {"index": "id_btree", "partition": "2024-01-03"},
    ]
    (row,) = value(coverage.metadata["indexes"])
    assert (row["status"], row["partitions_indexed"], row["partitions_needing"]) == (
        "pending",
        0,
        2,
    )

    # a run writing one of them builds its index (the declaration stands: no new one)
    before = lake.ns.version
    lake.run([events], "2024-01-03")
    assert [op for op, _ in lake.history(before)] == ["write"]
    assert lake.table_indexes("2024-01-03") == {"id_btree"}
    coverage = lake.checks([events], checks)["lance_index_coverage"]
    assert not coverage.passed
    assert value(coverage.metadata["needing"]) == [{"index": "id_btree", "partition": "2024-01-02"}]

    # the maintenance job builds the rest
    job = build_lance_maintenance_job([events], lake.lance)
    assert job.execute_in_process(instance=lake.instance).success
    assert lake.table_indexes("2024-01-02") == {"id_btree"}
    coverage = lake.checks([events], checks)["lance_index_coverage"]
    assert coverage.passed
    (row,) = value(coverage.metadata["indexes"])
    assert (row["status"], row["partitions_indexed"], row["partitions_needing"]) == (
        "complete",
        2,
        0,
    )


# -- maintenance, the sensor, the resource, the component --------------------------------------
def test_the_maintenance_job_optimizes_indexes_after_compacting(lake):
    events = make_asset([SCALAR], merge=True)
    lake.run([events], range_=("2024-01-02", "2024-01-03"))
    lake.run([events], "2024-01-02", extra=50)  # 02: two fragments, 50 rows unindexed
    lake.unindex("2024-01-03")  # 03: one fragment, lacking its index
    before = lake.ns.version
    job = build_lance_maintenance_job([events], lake.lance)
    result = job.execute_in_process(instance=lake.instance)
    assert result.success
    ops = [op for op, _ in lake.history(before)]
    assert ops.index("compact") < ops.index("optimize_indexes")
    (observation,) = [
        e.event_specific_data.asset_observation
        for e in result.all_events
        if e.event_type_value == "ASSET_OBSERVATION"
    ]
    done = value(observation.metadata["lance/maintenance"])
    assert len(done["compact"]["partitions"]) == 1  # 02, its index rebuilt over all rows
    # only 03 is left to index: optimizing before compacting would have indexed 02 twice
    assert done["optimize_indexes"]["partitions_reindexed"] == 1
    assert value(observation.metadata["lance/index_partitions_needing"]) == 0
    assert value(observation.metadata["lance/index_unindexed_rows"]) == 0
    assert records(observation.metadata["lance/indexes"])["id_btree"]["indexed_rows"] == 550
    assert lake.table_indexes("2024-01-03") == {"id_btree"}
    (cov,) = lake.ns.indexes()
    assert cov.complete and cov.unindexed_rows == 0


def test_the_external_change_sensor_ignores_index_commits(lake):
    events = make_asset()
    lake.run([events], "2024-01-02")
    sensor = build_lance_external_change_sensor([events], lake.lance)
    defs = dg.Definitions(assets=[events], sensors=[sensor], resources={"io_manager": lake.io})

    def tick(cursor: str | None) -> dg.SensorResult:
        return sensor(
            dg.build_sensor_context(instance=lake.instance, definitions=defs, cursor=cursor)
        )

    cursor = tick(None).cursor  # starts watching
    ns = lake.ns
    ns.create_index("id", "BTREE")  # by hand: re-registers the table, indexed
    ns.write(rows_for("2024-01-02", 5).slice(200), mode="append")  # 5 rows, outside Dagster
    ns.maintenance.optimize_indexes()
    result = tick(cursor)
    # only the append is a change of data: one runless materialization, of its key
    assert [e.partition for e in result.asset_events] == ["2024-01-02"]
    assert {op for op, _ in lake.history()} >= {"create_index", "optimize_indexes"}


def test_asset_code_searches_through_the_resource(lake):
    events = make_asset([VECTOR])
    lake.run([events], range_=("2024-01-01", "2024-01-03"))
    query = np.linspace(-1, 1, DIM).astype(np.float32)

    @dg.asset(deps=[events])
    def nearest(lance: LancePartitionedResource) -> dg.MaterializeResult:
        found = lance.search(
            "events",
            query,
            k=5,
            filter="day >= DATE '2024-01-02'",
            columns=["day", "id"],
            nprobes=2,  # every IVF partition: exact
        )
        return dg.MaterializeResult(
            metadata={
                "hits": dg.MetadataValue.json(
                    [
                        [d.isoformat(), i]
                        for d, i in zip(
                            found["day"].to_pylist(), found["id"].to_pylist(), strict=True
                        )
                    ]
                ),
                "indexes": dg.MetadataValue.json([c.name for c in lance.indexes("events")]),
            }
        )

    result = lake.run([nearest])
    (mat,) = result.asset_materializations_for_node("nearest")
    rows = pa.concat_tables([rows_for("2024-01-02"), rows_for("2024-01-03")])
    matrix = np.asarray(rows["v"].to_pylist(), dtype=np.float32)
    best = np.argsort(((matrix - query) ** 2).sum(axis=1), kind="stable")[:5]
    expected = [[rows["day"][int(i)].as_py().isoformat(), rows["id"][int(i)].as_py()] for i in best]
    assert value(mat.metadata["hits"]) == expected
    assert value(mat.metadata["indexes"]) == ["v_ivf_flat"]


COMPONENT_ASSETS = """
import datetime as dt

import dagster as dg
import pyarrow as pa

daily = dg.DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-02-01")


@dg.asset(
    partitions_def=daily,
    metadata={"partition_expr": "day", "lance/indexes": [{"column": "n", "index_type": "BTREE"}]},
)
def indexed(context: dg.AssetExecutionContext) -> pa.Table:
    return pa.table({"day": [dt.date.fromisoformat(context.partition_key)] * 3, "n": [1, 2, 3]})


@dg.asset(partitions_def=daily, metadata={"partition_expr": "day"})
def plain(context: dg.AssetExecutionContext) -> pa.Table:
    return pa.table({"day": [dt.date.fromisoformat(context.partition_key)] * 3, "n": [1, 2, 3]})
"""


def test_the_component_adds_the_coverage_check_to_indexed_assets_only(tmp_path):
    root = tmp_path / "lake"
    with create_defs_folder_sandbox() as sandbox:
        src = sandbox.project_root / "src" / sandbox.project_name
        (src / "lake_assets.py").write_text(textwrap.dedent(COMPONENT_ASSETS))
        path = sandbox.scaffold_component(component_cls=LancePartitionedComponent)
        scaffolded = yaml.safe_load((path / "defs.yaml").read_text())
        assert "indexes" in scaffolded["attributes"]["checks"]
        attributes = {
            **scaffolded["attributes"],
            "root": str(root),
            "assets_module": f"{sandbox.project_name}.lake_assets",
            "index_unindexed_rows": 0,
        }
        (path / "defs.yaml").write_text(
            yaml.safe_dump({"type": scaffolded["type"], "attributes": attributes})
        )
        with sandbox.load_component_and_build_defs(defs_path=path) as (component, defs):
            assert component.index_unindexed_rows == 0
            graph = defs.resolve_asset_graph()
            names = {(k.asset_key.to_user_string(), k.name) for k in graph.asset_check_keys}
            assert ("indexed", "lance_index_coverage") in names
            assert ("plain", "lance_index_coverage") not in names
            with dg.DagsterInstance.ephemeral() as instance:
                job = defs.resolve_implicit_global_asset_job_def()
                result = job.execute_in_process(
                    instance=instance,
                    partition_key="2024-01-05",
                    asset_selection=[dg.AssetKey("indexed")],
                )
                assert result.success
                got = {e.check_name: e for e in result.get_asset_check_evaluations()}
                assert got["lance_index_coverage"].passed
    ns = PartitionedNamespace.open(root / "indexed")
    assert [c.name for c in ns.indexes()] == ["n_btree"]


def test_an_index_the_existing_tables_cannot_get_fails_the_run_naming_the_asset(lake):
    lake.run([make_asset()], "2024-01-03")  # 300 rows of 8-dimensional vectors
    before = lake.ns.version
    bad = make_asset([{"column": "v", "index_type": "IVF_PQ", "num_sub_vectors": 3, "min_rows": 1}])
    with pytest.raises(IndexBuildError) as raised:
        lake.run([bad], "2024-01-04")
    assert "asset events" in str(raised.value) and "v_ivf_pq" in str(raised.value)
    assert "lance/indexes[0]" in str(raised.value)
    assert lake.ns.version == before and lake.ns.indexes() == []  # nothing declared or written
