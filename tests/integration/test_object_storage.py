"""Partitioned namespaces on an S3-compatible object store: moto's S3 server on 127.0.0.1, real
Lance, real Dagster. Create, write, filtered and pruned reads, time travel, maintenance listing
and deleting on S3, concurrent writer processes (no row lost), and an IO-manager run."""

import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from helpers.data import SCHEMA, sample_table, sorted_rows
from helpers.faults import CommitHooks
from helpers.s3 import (
    ROWS,
    WRITERS,
    WRITES,
    S3Server,
    count_losses,
    create_race_namespace,
    run_writers,
    s3_server,
    storage_options,
)

from dagster_lance_partitioned import PartitionedNamespace, PartitionField
from dagster_lance_partitioned.core.errors import PartitionedNamespaceError, TableLocationError
from dagster_lance_partitioned.core.manifest.snapshot import ManifestSnapshot
from dagster_lance_partitioned.core.manifest.store import ManifestEdit, ManifestStore
from dagster_lance_partitioned.orchestration import LancePartitionedIOManager

pytestmark = pytest.mark.object_store

FIELDS = [PartitionField.identity("country"), PartitionField.year("event_date")]


@dataclass
class S3Lake:
    """A fresh bucket on the test S3 server and the Lance storage options reaching it."""

    server: S3Server
    bucket: str
    storage_options: dict[str, str]

    def uri(self, path: str) -> str:
        return f"s3://{self.bucket}/{path}"

    def keys(self, prefix: str = "") -> list[str]:
        return self.server.keys(self.bucket, prefix)


@pytest.fixture(scope="module")
def server() -> Iterator[S3Server]:
    with s3_server() as srv:
        yield srv


@pytest.fixture
def s3(server: S3Server) -> S3Lake:
    bucket = server.create_bucket()
    return S3Lake(server, bucket, storage_options(server.endpoint))


def make_ns(s3: S3Lake, path: str = "ns") -> PartitionedNamespace:
    ns = PartitionedNamespace.create(
        s3.uri(path), SCHEMA, FIELDS, storage_options=s3.storage_options
    )
    ns.write(sample_table(12))
    return ns


def rows_at(s3: S3Lake, uri: str, version: int | None = None) -> list[dict]:
    ns = PartitionedNamespace.open(uri, s3.storage_options, version=version)
    return sorted_rows(ns.to_table())


# -- core API ----------------------------------------------------------------------------------
def test_create_write_read_prune_and_time_travel_on_s3(s3: S3Lake) -> None:
    ns = make_ns(s3)
    assert ns.uri == s3.uri("ns")
    v1 = ns.version
    assert sorted_rows(ns.to_table()) == sorted_rows(sample_table(12))
    keys = s3.keys("ns/")
    assert any(k.startswith("ns/__manifest/_versions/") for k in keys)
    assert len({p["location"] for p in ns.inspect.partitions()}) == 6  # 3 countries x 2 years
    for p in ns.inspect.partitions():
        assert any(k.startswith(f"ns/{p['location']}/_versions/") for k in keys)

    more = sample_table(6, countries=("US",), start=100)
    ns.write(more, mode="append")
    replacement = sample_table(3, countries=("FR",), start=200)
    result = ns.write(replacement, mode="overwrite_partitions")
    assert [p.replaced for p in result.partitions] == [True, True]  # FR 2025 and FR 2026

    us_2025 = "country = 'US' AND event_date < DATE '2026-01-01'"
    plan = ns.plan_scan(us_2025)
    assert [t.partition_values for t in plan.tasks] == [{"country": "US", "event_date_year": 2025}]
    assert plan.total_partitions == 6
    got = sorted_rows(ns.to_table(filter=us_2025))
    everything = pa.concat_tables([sample_table(12), more])
    expected = [
        r
        for r in sorted_rows(everything)
        if r["country"] == "US" and r["event_date"] < dt.date(2026, 1, 1)
    ]
    assert got == expected and len(got) == 7

    fr_now = sorted_rows(ns.to_table(filter="country = 'FR'"))
    assert fr_now == sorted_rows(replacement)
    # time travel: the first version still reads exactly the first write
    assert rows_at(s3, ns.uri, v1) == sorted_rows(sample_table(12))
    old = PartitionedNamespace.open(ns.uri, s3.storage_options, version=v1)
    assert old.version == v1 and len(old.plan_scan("country = 'FR'").tasks) == 2
    not_fr = [r for r in everything.to_pylist() if r["country"] != "FR"]
    assert sorted_rows(ns.to_table()) == sorted_rows(
        pa.Table.from_pylist([*not_fr, *replacement.to_pylist()], SCHEMA)
    )


def test_maintenance_lists_and_deletes_on_s3(s3: S3Lake, before_commit: CommitHooks) -> None:
    ns = make_ns(s3)
    for i in range(2):
        ns.write(sample_table(12, start=100 * (i + 1)))
    rows = rows_at(s3, ns.uri)

    # an orphan: a write whose tables were written but whose manifest commit never happened
    def boom(pending: list) -> None:
        raise RuntimeError("injected failure before the manifest commit")

    registered = {p["location"] for p in ns.inspect.partitions()}
    before_commit(ns, boom)
    with pytest.raises(RuntimeError, match="injected"):
        ns.write(sample_table(2, countries=("JP",), start=700))
    before_commit(ns, None)
    top = {k.split("/")[1] for k in s3.keys("ns/")}
    (orphan,) = top - registered - {"__manifest"}

    before_compact = ns.version
    compacted = ns.maintenance.compact()
    assert compacted.manifest_version == before_compact + 1 == ns.version
    assert {(before, after) for _, before, after in compacted.partitions} == {(3, 1)}
    assert rows_at(s3, ns.uri) == rows
    assert rows_at(s3, ns.uri, before_compact) == rows  # time travel across the compaction

    versions_before = [k for k in s3.keys("ns/") if "/_versions/" in k]
    cleaned = ns.maintenance.cleanup(older_than=dt.timedelta(0), keep_manifest_versions=2)
    assert cleaned.manifest_versions_removed == before_compact + 1 - 2
    assert cleaned.manifest_versions_kept == 2
    assert cleaned.table_versions_removed > 0 and cleaned.files_removed > 0
    versions_after = [k for k in s3.keys("ns/") if "/_versions/" in k]
    assert len(versions_after) < len(versions_before)
    assert rows_at(s3, ns.uri, before_compact) == rows  # retained: still readable
    with pytest.raises(PartitionedNamespaceError):
        PartitionedNamespace.open(ns.uri, s3.storage_options, version=1).to_table()

    vacuumed = ns.maintenance.vacuum(grace=dt.timedelta(0))
    assert vacuumed.orphans_removed == (orphan,)
    assert s3.keys(f"ns/{orphan}/") == []
    assert rows_at(s3, ns.uri) == rows
    # pyarrow's S3 delete_dir leaves an empty "ns/" directory marker object behind
    left = {k.split("/")[1] for k in s3.keys("ns/")}
    assert left - {""} == registered | {"__manifest"}


@pytest.mark.parametrize("nested", ["eu/data", "x/_versions", "0123abcd_x/c"])
def test_maintenance_never_touches_a_namespace_nested_below_on_s3(s3: S3Lake, nested: str):
    """Dagster asset keys ``sales`` and ``sales/eu/data`` (or names that look like a table's
    insides or a table directory): maintenance of ``sales`` at zero bounds lists and deletes
    nothing of the nested namespace, and a manifest row pointing into it is refused."""
    outer = make_ns(s3, "sales")
    inner = make_ns(s3, f"sales/{nested}")
    for i in range(2):
        outer.write(sample_table(12, start=100 * (i + 1)))
        inner.write(sample_table(12, start=1000 + 100 * (i + 1)))
    inner_keys = s3.keys(f"sales/{nested}/")
    inner_rows = rows_at(s3, inner.uri)

    assert outer.inspect.find_orphans() == []
    assert outer.maintenance.vacuum(grace=dt.timedelta(0)).orphans_removed == ()
    outer.maintenance.cleanup(older_than=dt.timedelta(0), keep_manifest_versions=1)
    outer.maintenance.vacuum(grace=dt.timedelta(0))
    assert s3.keys(f"sales/{nested}/") == inner_keys
    assert rows_at(s3, inner.uri) == inner_rows

    # a row of the outer manifest naming one of the nested namespace's tables
    table = inner.inspect.partitions()[0]["location"]
    store = ManifestStore(outer.uri, s3.storage_options)
    victim = outer.inspect.partitions()[0]["object_id"]
    store.commit(
        lambda ds: ManifestSnapshot(ds, outer.specs),
        lambda snap: ManifestEdit(upserts={victim: {"location": f"{nested}/{table}"}}),
    )
    outer.refresh()
    for run in (
        outer.to_table,
        lambda: outer.maintenance.cleanup(older_than=dt.timedelta(0), keep_manifest_versions=1),
        lambda: outer.maintenance.vacuum(grace=dt.timedelta(0)),
    ):
        with pytest.raises(TableLocationError) as info:
            run()
        assert victim in str(info.value) and nested in str(info.value)
    assert s3.keys(f"sales/{nested}/") == inner_keys


# -- concurrent writer processes ---------------------------------------------------------------
def test_concurrent_writer_processes_lose_no_rows_on_s3(s3: S3Lake, tmp_path: Path) -> None:
    uri = s3.uri("race")
    create_race_namespace(uri, s3.storage_options)
    created = PartitionedNamespace.open(uri, s3.storage_options).version
    results = run_writers(tmp_path, uri, s3.storage_options)
    assert len(results) == WRITERS * WRITES
    assert all(r["ok"] for r in results), [r for r in results if not r["ok"]]
    ns = PartitionedNamespace.open(uri, s3.storage_options)
    counts = count_losses(ns, results)
    assert counts == {
        "acknowledged": WRITERS * WRITES * ROWS,
        "unreadable_partitions": 0,
        "found": WRITERS * WRITES * ROWS,
        "lost": 0,
        "duplicates": 0,
        "misplaced": 0,
    }
    # disjoint partitions: each writer's own; the same partition: "shared"
    assert sorted(p["values"]["country"] for p in ns.inspect.partitions()) == sorted(
        ["shared", *(f"C{w}" for w in range(WRITERS))]
    )
    assert ns.count_rows("country = 'shared'") == WRITERS * WRITES * ROWS // 2
    # every write was its own manifest commit; any other version is the manifest's own
    # compaction (no write of ours in it)
    versions = sorted(r["manifest_version"] for r in results)
    assert len(set(versions)) == WRITERS * WRITES and versions[0] > created
    manifest = ns.state.snapshot.dataset
    for v in set(range(created + 1, ns.version + 1)) - set(versions):
        props = manifest.read_transaction(v).transaction_properties or {}
        assert not any(k.startswith("dlp.") for k in props), v


# -- Dagster -----------------------------------------------------------------------------------
COUNTRIES = dg.StaticPartitionsDefinition(["US", "FR", "DE"])


@dg.asset(partitions_def=COUNTRIES, metadata={"partition_expr": "country"})
def events(context: dg.AssetExecutionContext) -> pa.Table:
    table = sample_table(12)
    return table.filter(pc.equal(table["country"], context.partition_key))


@dg.asset(partitions_def=COUNTRIES, metadata={"partition_expr": "country"})
def event_totals(context: dg.AssetExecutionContext, events: pa.Table) -> pa.Table:
    return pa.table(
        {
            "country": [context.partition_key],
            "rows": pa.array([events.num_rows], pa.int64()),
            "value": [float(pc.sum(events["value"]).as_py())],
        }
    )


def test_io_manager_materializes_and_loads_on_s3(s3: S3Lake) -> None:
    io_manager = LancePartitionedIOManager(root=s3.uri("lake"), storage_options=s3.storage_options)
    instance = dg.DagsterInstance.ephemeral()
    for key in ("US", "FR"):
        result = dg.materialize(
            [events, event_totals],
            instance=instance,
            partition_key=key,
            resources={"io_manager": io_manager},
        )
        assert result.success
    stored = PartitionedNamespace.open(s3.uri("lake/events"), s3.storage_options)
    table = sample_table(12)
    expected = [r for r in sorted_rows(table) if r["country"] in ("US", "FR")]
    assert sorted_rows(stored.to_table()) == expected
    assert sorted(p["values"]["country"] for p in stored.inspect.partitions()) == ["FR", "US"]
    totals = PartitionedNamespace.open(s3.uri("lake/event_totals"), s3.storage_options)
    got = sorted(totals.to_table().to_pylist(), key=lambda r: r["country"])
    assert got == [
        {"country": c, "rows": 4, "value": sum(r["value"] for r in expected if r["country"] == c)}
        for c in ("FR", "US")
    ]
    assert any(k.startswith("lake/events/__manifest/") for k in s3.keys("lake/"))
