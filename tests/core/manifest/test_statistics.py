"""Table statistics in the manifest: every producer of table versions records, in the same
manifest commit, statistics that hold for the rows the version has (row count exact; null and
NaN counts exact or upper bounds; value bounds containing every value), checked against the
rows read back with plain pylance; a pin moved by another writer loses them; counts are
answered from them without opening a table; statistics follow renames and promotions by field
id; ``collect_statistics`` fills them in for tables written without them."""

from __future__ import annotations

import datetime as dt
import os
import shutil
from pathlib import Path

import lance
import pyarrow as pa
import pytest
from helpers.data import SCHEMA, sample_table
from helpers.stats import assert_statistics_hold

from dagster_lance_partitioned import PartitionedNamespace, PartitionField
from dagster_lance_partitioned.core.manifest.snapshot import ManifestSnapshot
from dagster_lance_partitioned.core.manifest.stats import STATS_COLUMN
from dagster_lance_partitioned.core.manifest.store import ManifestEdit
from dagster_lance_partitioned.core.schema.arrow_json import field_id

FIELDS = [PartitionField.identity("country")]


@pytest.fixture
def ns(tmp_path: Path) -> PartitionedNamespace:
    ns = PartitionedNamespace.create(tmp_path / "ns", SCHEMA, FIELDS)
    ns.write(sample_table(9))
    return ns


def test_every_producer_records_statistics_that_hold(ns: PartitionedNamespace) -> None:
    steps = {
        "append": lambda: ns.write(sample_table(6, start=100)),
        "overwrite_partitions": lambda: ns.write(
            sample_table(3, countries=("US",), start=200), mode="overwrite_partitions"
        ),
        "merge": lambda: ns.merge_insert(sample_table(6, start=100), on="id"),
        "update": lambda: ns.update("country = 'FR'", {"value": "value * 10"}),
        "delete": lambda: ns.delete("id = 101"),
        "new partition by merge": lambda: ns.merge_insert(
            sample_table(2, countries=("JP",), start=300), on="id"
        ),
        "compact": lambda: ns.maintenance.compact(),
        "index": lambda: ns.create_index("value", "BTREE"),
        "optimize": lambda: (
            ns.write(sample_table(3, start=400)),
            ns.maintenance.optimize_indexes(),
        ),
        "transaction": lambda: _transaction(ns),
        "overwrite": lambda: ns.write(sample_table(4, start=500), mode="overwrite"),
    }
    for name, step in steps.items():
        step()
        assert assert_statistics_hold(ns) == len(ns.inspect.partitions()), name


def _transaction(ns: PartitionedNamespace) -> None:
    with ns.transaction() as tx:
        tx.add_columns(pa.field("extra", pa.int64()))
        tx.write(sample_table(3, start=600).append_column("extra", pa.array([1, 2, 3])))


def test_a_delete_leaves_counts_as_bounds_and_they_still_prune(ns: PartitionedNamespace) -> None:
    ns.write(
        pa.table(
            {"id": [50], "country": ["US"], "event_date": [None], "value": [None]}, schema=SCHEMA
        )
    )
    ns.delete("id = 50")  # the only row with NULLs: the counts are bounds now
    stats = next(t for t in ns.plan_scan("country = 'US'").tasks).stats
    assert stats is not None
    value = stats.columns[field_id(ns.schema_with_ids.field("value"))]
    assert value.nulls == 1 and not value.nulls_exact
    assert ns.count_rows("value IS NULL") == 0  # read: not provable from a bound
    assert ns.plan_scan("value > 1000").pruned_by_stats  # the value bounds still prune
    assert_statistics_hold(ns)


def test_a_pin_moved_by_another_writer_has_no_statistics(ns: PartitionedNamespace) -> None:
    """Another writer (here: a manifest commit setting only ``read_version``, as a writer that
    does not know this package's extension would) moves a pin to a version holding rows the
    statistics do not describe: they are ignored, the table is read, no row is lost."""
    us = next(p for p in ns.inspect.partitions() if p["values"]["country"] == "US")
    table = lance.dataset(os.path.join(ns.uri, us["location"]), version=us["read_version"])
    big = pa.table(
        {"id": [999], "country": ["US"], "event_date": [dt.date(2030, 1, 1)], "value": [1e9]},
        schema=SCHEMA,
    )
    moved = lance.write_dataset(big, table.uri, mode="append")
    ns.state.store.commit(
        lambda ds: ManifestSnapshot(ds, ns.specs),
        lambda snap: ManifestEdit(upserts={us["object_id"]: {"read_version": moved.version}}),
    )
    ns.refresh()
    assert ns.count_rows("value > 1e8") == 1
    assert ns.count_rows() == 10  # that table counted by opening it
    assert assert_statistics_hold(ns, required=False) == len(ns.inspect.partitions()) - 1


def test_counts_come_from_the_manifest_without_opening_a_table(ns: PartitionedNamespace):
    """With every table's data files gone, counting (all rows, or partitions by their values,
    also named by partition field id) still answers; reading fails."""
    ns.write(sample_table(6, start=100))
    expected = {"all": 15, "US": ns.count_rows("country = 'US'")}
    for p in ns.inspect.partitions():
        shutil.rmtree(os.path.join(ns.uri, p["location"], "data"))
    fresh = PartitionedNamespace.open(ns.uri)
    assert fresh.count_rows() == expected["all"]
    assert fresh.count_rows("country = 'US'") == expected["US"]
    assert fresh.count_rows(("country", "=", "US")) == expected["US"]
    with pytest.raises(Exception):  # noqa: B017 (any package error: the files are gone)
        fresh.to_table()


def test_statistics_follow_renames_and_promotions(tmp_path: Path) -> None:
    schema = pa.schema([("id", pa.int32()), ("part", pa.utf8()), ("v", pa.int32())])
    ns = PartitionedNamespace.create(tmp_path / "ns", schema, [PartitionField.identity("part")])
    ns.write(pa.table({"id": [1, 2], "part": ["a", "b"], "v": [10, 20]}, schema=schema))
    ns.rename_column("v", "w")
    ns.promote_column("w", pa.int64())
    plan = ns.plan_scan("w > 15")
    assert len(plan.pruned_by_stats) == 1 and ns.count_rows("w > 15") == 1
    ns.add_columns(pa.field("z", pa.int64()))
    assert ns.plan_scan("z = 1").pruned_by_stats == ()  # no statistics for it in old tables


def test_explain_shows_what_statistics_pruned(ns: PartitionedNamespace) -> None:
    plan = ns.plan_scan("value > 1000")
    text = plan.explain()
    assert "by statistics: 3" in text and "pruned by partition values: 0" in text
    assert plan.to_dict()["pruned_by_stats"] == 3 and plan.tasks == ()
    assert len(ns.plan_scan("value > 1000", by_stats=False).tasks) == 3


def test_collect_statistics_fills_in_tables_written_without_them(ns: PartitionedNamespace):
    """Tables whose rows carry no statistics (as an earlier version of this package wrote
    them) are read once and registered, their pins unchanged; reads then prune by them."""
    ns.state.store.commit(
        lambda ds: ManifestSnapshot(ds, ns.specs),
        lambda snap: ManifestEdit(
            upserts={t.object_id: {STATS_COLUMN: None} for t in snap.tables()}
        ),
    )
    ns.refresh()
    pins = {p["object_id"]: p["read_version"] for p in ns.inspect.partitions()}
    assert ns.plan_scan("value > 1000").pruned_by_stats == ()
    result = ns.maintenance.collect_statistics()
    assert sorted(result.partitions) == sorted(pins)
    assert {p["object_id"]: p["read_version"] for p in ns.inspect.partitions()} == pins
    assert len(ns.plan_scan("value > 1000").pruned_by_stats) == 3
    assert assert_statistics_hold(ns) == 3
    assert ns.maintenance.collect_statistics().partitions == ()  # nothing left to do


def test_durations_and_empty_floats_get_statistics_that_hold(tmp_path: Path) -> None:
    """Arrow has no min_max of durations and an empty float column can have no chunks: a write
    of either records statistics (bounds of the durations' ticks; none for no rows)."""
    schema = pa.schema([("k", pa.string()), ("d", pa.duration("us")), ("x", pa.float64())])
    ns = PartitionedNamespace.create(tmp_path / "ns", schema, [PartitionField.identity("k")])
    rows = pa.table(
        {
            "k": ["a", "a", "b"],
            "d": pa.array([5, None, -3], pa.duration("us")),
            "x": [1.5, 2.5, -1.0],
        },
        schema=schema,
    )
    ns.write(rows)
    ns.write(pa.Table.from_batches([], schema), mode="append")
    assert_statistics_hold(ns)
    assert ns.to_table().sort_by("x").equals(rows.sort_by("x"))
