"""The read path's fixed costs (issue 21): what a process keeps of a manifest version it read,
partition tables read concurrently (in plan order, within a read-ahead bound), and partitions
read without the filter when their identity partition values imply it. Results never change."""

from __future__ import annotations

import datetime as dt
import os
import shutil
from pathlib import Path

import datafusion as dfn
import lance
import pyarrow as pa
import pytest
from helpers.data import SCHEMA, sample_table, sorted_rows

from dagster_lance_partitioned import PartitionedNamespace, PartitionField
from dagster_lance_partitioned.core.errors import ManifestError, PathEscapeError
from dagster_lance_partitioned.core.read import scan


def matching(table: pa.Table, flt: str) -> list[dict]:
    ctx = dfn.SessionContext()
    ctx.register_record_batches("t", [table.to_batches()])
    return sorted_rows(ctx.sql(f"SELECT * FROM t WHERE {flt}").to_arrow_table())


@pytest.fixture
def two_level(tmp_path: Path) -> tuple[PartitionedNamespace, pa.Table]:
    """Identity country x identity event_date, with a NULL country partition."""
    data = sample_table(24)
    nulls = pa.table(
        {
            "id": pa.array([900, 901], pa.int64()),
            "country": pa.array([None, None], pa.utf8()),
            "event_date": [dt.date(2025, 12, 10), dt.date(2025, 12, 11)],
            "value": [1.5, 2.5],
        },
        schema=SCHEMA,
    )
    data = pa.concat_tables([data, nulls])
    ns = PartitionedNamespace.create(
        tmp_path / "ns",
        SCHEMA,
        [PartitionField.identity("country"), PartitionField.identity("event_date")],
    )
    ns.write(data)
    return ns, data


IMPLIED = [
    "country = 'US'",
    "country = 'US' AND event_date = DATE '2025-12-10'",
    "country IN ('US', 'FR')",
    "country = 'US' OR country = 'DE'",
    "event_date BETWEEN DATE '2025-12-10' AND DATE '2025-12-11'",
    "event_date > DATE '2025-12-10' AND country <> 'FR'",
    "country IS NULL",
    "country IS NOT NULL AND event_date = '2025-12-11'",
]
NOT_IMPLIED = [
    "country = 'US' AND value > 3",
    "country = 'US' OR event_date = DATE '2026-01-01'",
    "lower(country) = 'us'",
    "value >= 0",
    "id < 5",
]
EITHER = ["country NOT IN ('US')", "country NOT IN ('US', 'FR', 'XX')"]  # as DataFusion rewrites


@pytest.mark.parametrize("flt", IMPLIED + NOT_IMPLIED + EITHER)
def test_filters_implied_by_partition_values_read_the_same_rows(two_level, flt: str) -> None:
    ns, data = two_level
    plan = ns.plan_scan(flt)
    implied = {t.filter_implied for t in plan.tasks}
    if flt in IMPLIED:
        assert plan.tasks and implied == {True}, plan.tasks
    elif flt in NOT_IMPLIED:
        assert implied <= {False}
    assert sorted_rows(ns.to_table(flt)) == matching(data, flt)
    assert ns.count_rows(flt) == len(matching(data, flt))


@pytest.mark.parametrize("concurrency", [1, 2, 3, 16])
def test_concurrent_reads_keep_plan_order(two_level, concurrency: int) -> None:
    ns, data = two_level
    plan = ns.plan_scan()
    expected = pa.concat_tables(
        [
            pa.Table.from_batches(
                list(scan.iter_task_batches(t, ns.schema_with_ids, None, None, None)),
                schema=ns.schema,
            )
            for t in plan.tasks
        ]
    )
    got = ns.to_table(concurrency=concurrency)
    assert got.equals(expected)
    # a read-ahead bound below any table still reads every table, one at a time, in order
    reader = scan.scan_reader(plan, ns.schema_with_ids, None, None, None, concurrency, 1)
    assert reader.read_all().equals(expected)
    assert sorted_rows(got) == sorted_rows(data)


def test_a_scan_stopped_early_returns(two_level) -> None:
    ns, _ = two_level
    reader = ns.scan(concurrency=4, batch_size=1)
    first = reader.read_next_batch()
    assert first.num_rows == 1
    reader.close()  # the tables still being read are dropped, nothing waits for them


def test_scan_concurrency_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(scan.CONCURRENCY_ENV, raising=False)
    assert scan.scan_concurrency(str(tmp_path)) == scan.LOCAL_CONCURRENCY
    assert scan.scan_concurrency("s3://bucket/ns/t") == scan.REMOTE_CONCURRENCY
    assert scan.scan_concurrency("s3://bucket/ns/t", 3) == 3
    monkeypatch.setenv(scan.CONCURRENCY_ENV, "5")
    assert scan.scan_concurrency("s3://bucket/ns/t") == 5
    for bad in (0, -1, True, 2.5):
        with pytest.raises(ValueError):
            scan.scan_concurrency(str(tmp_path), bad)  # type: ignore[arg-type]


def _count_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record the URIs of every full Lance read (``to_table``) of a ``__manifest``."""
    seen: list[str] = []
    original = lance.LanceDataset.to_table

    def counted(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        if str(self.uri).rstrip("/").endswith("__manifest"):
            seen.append(str(self.uri))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(lance.LanceDataset, "to_table", counted)
    return seen


def test_opening_a_version_read_already_reads_nothing_more(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ns = PartitionedNamespace.create(tmp_path / "ns", SCHEMA, [PartitionField.identity("country")])
    ns.write(sample_table(12))
    flt = "country = 'FR'"
    first = PartitionedNamespace.open(ns.uri)
    expected = first.to_table(flt)
    reads = _count_reads(monkeypatch)
    again = PartitionedNamespace.open(ns.uri)
    assert again.to_table(flt).equals(expected)
    assert reads == []  # verified, rows and plan taken from what the first open read
    # a version opened by number is read again (a cleanup may have removed its files)
    PartitionedNamespace.open(ns.uri, version=ns.version).to_table(flt)
    assert len(reads) == 1
    scan.clear_caches()
    PartitionedNamespace.open(ns.uri).to_table(flt)
    assert len(reads) == 2


@pytest.mark.parametrize("large", [False, True], ids=["small", "large"])
def test_a_namespace_recreated_at_the_same_path_is_never_read_from_memory(
    tmp_path: Path, tune, large: bool
) -> None:
    if large:  # planned through Lance's scanner, memoized per version
        tune(small_manifest_rows=0)
    root = tmp_path / "ns"
    fields = [PartitionField.identity("country")]
    ns = PartitionedNamespace.create(root, SCHEMA, fields)
    ns.write(sample_table(6, countries=("US", "FR")))
    version = ns.version
    before = ns.to_table("country = 'US'")
    assert PartitionedNamespace.open(root).count_rows() == 6
    shutil.rmtree(root)
    ns = PartitionedNamespace.create(root, SCHEMA, fields)
    ns.write(sample_table(9, countries=("US", "DE", "FR"), start=50))
    assert ns.version == version  # the same path and version number, other data
    again = PartitionedNamespace.open(root)
    got = again.to_table("country = 'US'")
    assert sorted(got["id"].to_pylist()) == [50, 53, 56] != sorted(before["id"].to_pylist())
    assert again.count_rows() == 9


def test_a_memoized_plan_still_checks_table_locations(tmp_path: Path) -> None:
    ns = PartitionedNamespace.create(tmp_path / "ns", SCHEMA, [PartitionField.identity("country")])
    ns.write(sample_table(6))
    flt = "country = 'US'"
    assert ns.count_rows(flt) == 2
    (task,) = ns.plan_scan(flt).tasks
    here = Path(task.uri)
    outside = tmp_path / "outside"
    shutil.move(str(here), str(outside))
    os.symlink(outside, here, target_is_directory=True)
    with pytest.raises(PathEscapeError):
        PartitionedNamespace.open(ns.uri).plan_scan(flt)
    with pytest.raises(PathEscapeError):
        ns.to_table(flt)


def test_a_new_version_with_a_duplicate_id_is_refused_after_an_old_one_was_read(
    tmp_path: Path,
) -> None:
    ns = PartitionedNamespace.create(tmp_path / "ns", SCHEMA, [PartitionField.identity("country")])
    ns.write(sample_table(6))
    assert PartitionedNamespace.open(ns.uri).count_rows() == 6
    uri = os.path.join(ns.uri, "__manifest")
    rows = lance.dataset(uri).to_table()
    tables = rows.filter(pa.compute.equal(rows["object_type"], "table"))
    lance.write_dataset(tables.slice(0, 1), uri, mode="append")
    with pytest.raises(ManifestError):
        PartitionedNamespace.open(ns.uri)


def test_a_nanosecond_timestamp_filter_keeps_its_nanoseconds(tmp_path) -> None:
    """Lance reads a timestamp literal to the microsecond: a filter on a nanosecond column
    with a value below the microsecond is applied by DataFusion instead (it matched nothing)."""
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("tn", pa.timestamp("ns"))])
    ns = PartitionedNamespace.create(tmp_path / "ns", schema, [PartitionField.identity("id")])
    ns.write(pa.table({"id": [1, 2], "tn": pa.array([2, 3000], pa.timestamp("ns"))}))
    for flt, ids in [
        ("tn = arrow_cast(2, 'Timestamp(Nanosecond, None)')", [1]),
        ("tn < arrow_cast(3, 'Timestamp(Nanosecond, None)')", [1]),
        ("tn = arrow_cast(3000, 'Timestamp(Nanosecond, None)')", [2]),
    ]:
        assert sorted(ns.to_table(flt).column("id").to_pylist()) == ids, flt
