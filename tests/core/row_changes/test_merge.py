"""Row-level changes across partitions: merge_insert, delete and update, each one manifest
commit; moved keys, older spec versions, bad input, concurrency and kill -9 atomicity."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import pickle
import random
import signal
import subprocess
import sys
import time

import lance
import pyarrow as pa
import pytest
from helpers.data import SCHEMA, fingerprint, sample_table, sorted_rows
from helpers.faults import before_row_change_commit

from dagster_lance_partitioned import MergeOptions, PartitionedNamespace, PartitionField
from dagster_lance_partitioned.core.errors import (
    CommitConflictError,
    DuplicateKeyError,
    MergeKeyError,
    SchemaMismatchError,
    UnnamedPartitionError,
    UpdateExpressionError,
    WriteError,
)
from dagster_lance_partitioned.core.row_changes.delete import delete_rows
from dagster_lance_partitioned.core.row_changes.merge import merge_rows
from dagster_lance_partitioned.core.row_changes.update import update_rows

D1, D2 = dt.date(2025, 12, 10), dt.date(2025, 12, 11)


def make_ns(tmp_path, fields=None) -> PartitionedNamespace:
    fields = fields or [PartitionField.identity("country")]
    ns = PartitionedNamespace.create(tmp_path / "ns", schema=SCHEMA, partition_fields=fields)
    ns.write(sample_table())  # ids 0..11 over US / FR / DE
    return ns


def rows(*specs: tuple[int, str, dt.date | None, float]) -> pa.Table:
    return pa.Table.from_pylist(
        [{"id": i, "country": c, "event_date": d, "value": v} for i, c, d, v in specs],
        schema=SCHEMA,
    )


def as_dict(ns: PartitionedNamespace) -> dict[int, dict]:
    return {r["id"]: r for r in ns.to_table().to_pylist()}


def pins(ns: PartitionedNamespace) -> dict[str, int]:
    return {p["object_id"]: p["read_version"] for p in ns.inspect.partitions()}


def by_country(ns: PartitionedNamespace) -> dict[str, str]:
    return {p["values"]["country"]: p["object_id"] for p in ns.inspect.partitions()}


# -- merge ------------------------------------------------------------------------------------
def test_merge_updates_and_inserts_across_partitions_in_one_commit(tmp_path):
    ns = make_ns(tmp_path)
    before_version = ns.version
    before = as_dict(ns)
    data = rows((0, "US", D1, 100.0), (1, "FR", D1, 101.0), (50, "DE", D2, 50.0))
    result = ns.merge_insert(data, on=["id", "country"])
    assert result.committed and result.manifest_version == before_version + 1
    assert (result.rows_updated, result.rows_inserted, result.rows_deleted) == (2, 1, 0)
    ids = by_country(ns)
    assert set(result.partitions) == {ids["US"], ids["FR"], ids["DE"]}
    after = as_dict(ns)
    assert after[0]["value"] == 100.0 and after[1]["value"] == 101.0 and after[50]["value"] == 50
    assert {k: v for k, v in after.items() if k not in (0, 1, 50)} == {
        k: v for k, v in before.items() if k not in (0, 1)
    }
    # the commit is a merge with its settings recorded
    props = ns.state.store.commit_properties(result.manifest_version)
    assert props["operation"] == "merge" and json.loads(props["on"]) == ["id", "country"]


def test_merge_new_partition_is_created_and_registered(tmp_path):
    ns = make_ns(tmp_path)
    result = ns.merge_insert(rows((70, "IT", D1, 7.0), (71, "IT", D2, 7.5)), on="id")
    assert result.rows_inserted == 2 and len(result.partitions_created) == 1
    assert sorted(by_country(ns)) == ["DE", "FR", "IT", "US"]
    assert ns.count_rows("country = 'IT'") == 2
    assert ns.plan_scan("country = 'IT'").tasks[0].object_id == result.partitions_created[0]


def test_merge_moves_a_key_whose_partition_changed(tmp_path):
    # `on` = id only: the key is searched in every partition, the old copy deleted
    ns = make_ns(tmp_path)
    ids = by_country(ns)
    old = pins(ns)
    result = ns.merge_insert(rows((0, "FR", D1, -1.0)), on="id")
    assert (result.rows_updated, result.rows_moved, result.rows_inserted) == (1, 1, 0)
    assert set(result.partitions) == {ids["US"], ids["FR"]}
    assert pins(ns)[ids["DE"]] == old[ids["DE"]]  # untouched
    table = ns.to_table(filter="id = 0").to_pylist()
    assert table == [{"id": 0, "country": "FR", "event_date": D1, "value": -1.0}]
    assert ns.count_rows() == 12


def test_merge_on_partition_columns_touches_only_the_target_partition(tmp_path):
    # `on` includes the partition source column: (0, FR) is another key than (0, US)
    ns = make_ns(tmp_path)
    ids = by_country(ns)
    old = pins(ns)
    result = ns.merge_insert(rows((0, "FR", D1, -1.0)), on=["id", "country"])
    assert result.partitions == (ids["FR"],)
    assert (result.rows_inserted, result.rows_updated) == (1, 0)
    assert pins(ns)[ids["US"]] == old[ids["US"]]
    assert sorted(r["country"] for r in ns.to_table(filter="id = 0").to_pylist()) == ["FR", "US"]


def test_merge_when_matched_ignore_and_when_not_matched_ignore(tmp_path):
    ns = make_ns(tmp_path)
    before = as_dict(ns)
    data = rows((0, "US", D1, 100.0), (60, "US", D1, 60.0))
    r1 = ns.merge_insert(data, MergeOptions("id", when_matched="ignore"))
    assert (r1.rows_updated, r1.rows_inserted) == (0, 1)
    assert as_dict(ns)[0] == before[0] and 60 in as_dict(ns)
    r2 = ns.merge_insert(
        rows((1, "FR", D1, 1e6), (61, "FR", D1, 61.0)),
        MergeOptions("id", when_not_matched="ignore"),
    )
    assert (r2.rows_updated, r2.rows_inserted) == (1, 0)
    assert as_dict(ns)[1]["value"] == 1e6 and 61 not in as_dict(ns)
    # moved key + ignore: the stored row stays where it is, nothing inserted elsewhere
    version = ns.version
    r3 = ns.merge_insert(rows((2, "US", D1, 0.0)), MergeOptions("id", when_matched="ignore"))
    assert not r3.committed and ns.version == version
    assert as_dict(ns)[2] == before[2]


def test_merge_not_matched_by_source_deletes_only_in_touched_partitions(tmp_path):
    ns = make_ns(tmp_path)
    us_before = ns.count_rows("country = 'US'")
    others = sorted_rows(ns.to_table(filter="country <> 'US'"))
    result = ns.merge_insert(
        rows((0, "US", D1, 5.0), (90, "US", D2, 9.0)),
        MergeOptions("id", when_not_matched_by_source="delete"),
    )
    assert result.rows_deleted == us_before - 1
    assert sorted(r["id"] for r in ns.to_table(filter="country = 'US'").to_pylist()) == [0, 90]
    assert sorted_rows(ns.to_table(filter="country <> 'US'")) == others


def test_merge_not_matched_by_source_with_a_scope(tmp_path):
    ns = make_ns(tmp_path)
    result = ns.merge_insert(
        rows((0, "US", D1, 5.0)),
        MergeOptions(
            "id",
            when_not_matched_by_source="delete",
            scope="country IN ('US', 'FR') AND value > 2",
        ),
    )
    left = sorted(r["id"] for r in ns.to_table().to_pylist())
    # US: 0 kept (in input), 3/6/9 deleted; FR: 1 kept (value 1), 4/7/10 deleted; DE untouched
    assert left == [0, 1, 2, 5, 8, 11]
    assert result.rows_deleted == 6
    with pytest.raises(WriteError, match="scope"):
        ns.merge_insert(rows((0, "US", D1, 5.0)), MergeOptions("id", scope="value > 1"))


def test_merge_refuses_duplicate_and_null_keys_changing_nothing(tmp_path):
    ns = make_ns(tmp_path)
    before = fingerprint(ns.uri)
    with pytest.raises(DuplicateKeyError, match=r"'id': 7") as info:
        ns.merge_insert(rows((7, "US", D1, 1.0), (8, "US", D1, 1.0), (7, "FR", D1, 2.0)), "id")
    assert info.value.key == {"id": 7}
    nullable = pa.table(
        {"id": [1], "country": pa.array([None], pa.utf8()), "value": [1.0]},
    )
    with pytest.raises(MergeKeyError, match="'country'"):
        ns.merge_insert(nullable, on=["id", "country"])
    with pytest.raises(MergeKeyError, match="'nope'"):
        ns.merge_insert(rows((1, "US", D1, 1.0)), on="nope")
    with pytest.raises(SchemaMismatchError):
        ns.merge_insert(pa.table({"id": [1], "value": ["x"]}), on="id")
    with pytest.raises(WriteError, match="when_matched"):
        ns.merge_insert(rows((1, "US", D1, 1.0)), MergeOptions("id", when_matched="replace"))
    assert fingerprint(ns.uri) == before


def test_merge_options_are_one_value_for_every_merge_path(tmp_path):
    """A key column name or MergeOptions: the same merge; filters kept as SQL; a frozen
    value that survives pickling (Spark tasks) and ``dataclasses.replace``."""
    options = MergeOptions(
        "id", when_not_matched_by_source="delete", scope=[("country", "=", "US")], confine=" "
    )
    assert options.scope == "`country` = 'US'" and options.confine is None
    assert pickle.loads(pickle.dumps(options)) == options
    assert dataclasses.replace(options, confine="id > 0").confine == "id > 0"
    assert MergeOptions.of("id") == MergeOptions(["id"]) == MergeOptions(("id",))
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.on = ("x",)  # type: ignore[misc]
    ns = make_ns(tmp_path)
    result = ns.merge_insert(rows((0, "US", D1, 5.0)), options)
    assert sorted(r["id"] for r in ns.to_table(filter="country = 'US'").to_pylist()) == [0]
    props = ns.state.store.commit_properties(result.manifest_version)
    assert props["scope"] == "`country` = 'US'" and props["on"] == '["id"]'


def test_merge_finds_rows_written_under_an_older_spec(tmp_path):
    ns = make_ns(tmp_path)
    ns.update_spec([PartitionField.identity("country"), PartitionField.identity("event_date")])
    result = ns.merge_insert(rows((0, "US", D1, 100.0), (3, "US", D2, 300.0)), on="id")
    assert (result.rows_updated, result.rows_moved, result.rows_inserted) == (2, 2, 0)
    assert ns.count_rows() == 12
    got = {r["id"]: r["value"] for r in ns.to_table(filter="id IN (0, 3)").to_pylist()}
    assert got == {0: 100.0, 3: 300.0}
    # the updated rows now live in spec v2 partitions
    v2 = [p for p in ns.inspect.partitions() if p["spec_id"] == 2]
    assert sorted((p["values"]["country"], p["values"]["event_date"]) for p in v2) == [
        ("US", D1),
        ("US", D2),
    ]
    # covering `on` (both specs' sources) finds the old-spec copy too
    r2 = ns.merge_insert(
        rows((6, "US", dt.date(2026, 1, 1), 600.0)), on=["id", "country", "event_date"]
    )
    assert (r2.rows_updated, r2.rows_moved) == (1, 1) and ns.count_rows() == 12


def test_merge_into_a_table_of_an_older_layout(tmp_path):
    ns = make_ns(tmp_path)
    ns.add_columns(pa.field("note", pa.utf8()))
    data = pa.table(
        {
            "id": pa.array([0, 40], pa.int64()),
            "country": ["US", "US"],
            "event_date": pa.array([D1, D1], pa.date32()),
            "value": [1.5, 2.5],
            "note": ["updated", "new"],
        }
    )
    result = ns.merge_insert(data, on=["id", "country"])
    assert (result.rows_updated, result.rows_inserted) == (1, 1)
    got = {r["id"]: r["note"] for r in ns.to_table(filter="country = 'US'").to_pylist()}
    assert got == {0: "updated", 40: "new", 3: None, 6: None, 9: None}


@pytest.mark.parametrize("operation", ["merge", "delete", "update"])
def test_unregistered_table_versions_never_leak_into_a_change(tmp_path, operation):
    # a killed write may leave a version on a table's main line that no manifest registers;
    # a change is built on the pinned version (Lance would rebase a commit made on it onto
    # the later one: the executor checks and makes it again on a detached copy)
    ns = make_ns(tmp_path)
    us = next(p for p in ns.inspect.partitions() if p["values"] == {"country": "US"})
    uri = os.path.join(ns.uri, us["location"])
    lance.write_dataset(rows((900, "US", D1, 9.0)), uri, mode="append")
    assert lance.dataset(uri).version > us["read_version"]
    before = as_dict(ns)
    if operation == "merge":
        ns.merge_insert(rows((0, "US", D1, 100.0), (60, "US", D1, 60.0)), on="id")
        expected = {**before, 0: {**before[0], "value": 100.0}, 60: as_dict(ns)[60]}
    elif operation == "delete":
        ns.delete("id = 0")
        expected = {k: v for k, v in before.items() if k != 0}
    else:
        ns.update("id = 0", {"value": "value + 1"})
        expected = {**before, 0: {**before[0], "value": before[0]["value"] + 1}}
    assert as_dict(ns.refresh()) == expected
    assert 900 not in as_dict(ns)


def test_merge_on_a_pinned_namespace_is_refused(tmp_path):
    ns = make_ns(tmp_path)
    old = PartitionedNamespace.open(ns.uri, version=ns.version)
    with pytest.raises(WriteError, match="opened at manifest version"):
        old.merge_insert(rows((1, "US", D1, 1.0)), on="id")


# -- delete -----------------------------------------------------------------------------------
def test_delete_touches_only_pruned_partitions_and_deregisters_emptied_ones(tmp_path):
    ns = make_ns(tmp_path)
    ids = by_country(ns)
    old = pins(ns)
    version = ns.version
    result = ns.delete("country = 'US' AND value > 4")
    assert result.manifest_version == version + 1
    assert result.partitions == (ids["US"],) and result.rows_deleted == 2
    assert pins(ns)[ids["FR"]] == old[ids["FR"]] and pins(ns)[ids["DE"]] == old[ids["DE"]]
    assert sorted(r["id"] for r in ns.to_table(filter="country = 'US'").to_pylist()) == [0, 3]
    r2 = ns.delete("country = 'FR' OR id = 0")
    assert set(r2.partitions_removed) == {ids["FR"]} and r2.rows_deleted == 5
    assert sorted(by_country(ns)) == ["DE", "US"]
    assert not ns.delete("id = 999").committed
    with pytest.raises(WriteError, match="needs a filter"):
        ns.delete(None)


def test_delete_with_null_values_is_not_a_match(tmp_path):
    ns = make_ns(tmp_path)
    ns.write(rows((30, "US", D1, None)))
    ns.delete("value < 100")
    assert [r["id"] for r in ns.to_table().to_pylist()] == [30]


def test_delete_filter_only_datafusion_evaluates(tmp_path):
    ns = make_ns(tmp_path)
    ns.add_columns(pa.field("note", pa.utf8()))  # tables now have an older layout
    result = ns.delete("id % 4 = 0")
    assert result.rows_deleted == 3
    assert sorted(r["id"] for r in ns.to_table().to_pylist()) == [1, 2, 3, 5, 6, 7, 9, 10, 11]


def test_delete_in_older_spec_partitions(tmp_path):
    ns = make_ns(tmp_path)
    ns.update_spec([PartitionField.identity("event_date")])
    ns.write(rows((20, "US", D1, 20.0)))
    result = ns.delete("country = 'US'")
    assert result.rows_deleted == 5
    assert ns.count_rows("country = 'US'") == 0 and ns.count_rows() == 8


# -- update -----------------------------------------------------------------------------------
def test_update_in_place_and_moving_rows(tmp_path):
    ns = make_ns(tmp_path)
    ids = by_country(ns)
    old = pins(ns)
    r1 = ns.update("country = 'FR'", {"value": "value * 10"})
    assert r1.rows_updated == 4 and r1.partitions == (ids["FR"],) and r1.rows_moved == 0
    assert sorted(r["value"] for r in ns.to_table(filter="country = 'FR'").to_pylist()) == [
        10.0,
        40.0,
        70.0,
        100.0,
    ]
    assert pins(ns)[ids["US"]] == old[ids["US"]]
    # changing the partition source column moves the rows, in the same commit
    version = ns.version
    r2 = ns.update("id IN (0, 3)", {"country": "'DE'"})
    assert r2.manifest_version == version + 1 and r2.rows_moved == 2
    assert set(r2.partitions) == {ids["US"], ids["DE"]}
    assert sorted(r["id"] for r in ns.to_table(filter="country = 'DE'").to_pylist()) == [
        0,
        2,
        3,
        5,
        8,
        11,
    ]
    # every row of a partition moving out deregisters it
    r3 = ns.update("country = 'US'", {"country": "'IT'"})
    assert r3.partitions_removed == (ids["US"],) and len(r3.partitions_created) == 1
    assert ns.count_rows() == 12 and ns.count_rows("country = 'IT'") == 2


def test_update_rows_of_an_older_spec_stay_unless_their_partition_changes(tmp_path):
    ns = make_ns(tmp_path)
    ids = by_country(ns)
    ns.update_spec([PartitionField.identity("event_date")])
    r1 = ns.update("id = 0", {"value": "-1"})
    assert r1.partitions == (ids["US"],) and r1.rows_moved == 0
    r2 = ns.update("id = 1", {"country": "'US'"})
    assert r2.rows_moved == 1 and len(r2.partitions_created) == 1  # into a spec v2 partition
    assert {p["spec_id"] for p in ns.inspect.partitions()} == {1, 2}
    assert ns.to_table(filter="id = 1").to_pylist()[0]["country"] == "US"


def test_update_refuses_bad_expressions_changing_nothing(tmp_path):
    ns = make_ns(tmp_path)
    before = fingerprint(ns.uri)
    with pytest.raises(UpdateExpressionError, match="'nope'"):
        ns.update("id = 1", {"nope": "1"})
    with pytest.raises(UpdateExpressionError):
        ns.update("id = 1", {"value": "no_such_column + 1"})
    with pytest.raises(UpdateExpressionError, match="'id'"):
        ns.update("id = 1", {"id": "NULL"})
    with pytest.raises(UpdateExpressionError, match="'value'"):
        ns.update(None, {"value": "'not a number'"})
    assert fingerprint(ns.uri) == before


# -- concurrency --------------------------------------------------------------------------------
def test_confine_refuses_moving_a_key_out_of_a_partition_it_does_not_name(tmp_path):
    ns = make_ns(tmp_path)
    before = fingerprint(ns.uri)
    # id 1 is stored in FR: merged as a US row it would be deleted from FR
    with pytest.raises(UnnamedPartitionError, match=r"merge key \{'id': 1\}.*FR") as info:
        ns.merge_insert(rows((1, "US", D1, -1.0)), MergeOptions("id", confine="country = 'US'"))
    assert info.value.sample["id"] == 1 and "FR" in info.value.values.values()
    assert fingerprint(ns.uri) == before
    # new keys and keys already in US are fine; so is a key whose move stays inside confine
    result = ns.merge_insert(
        rows((0, "US", D1, 7.0), (99, "US", D1, 9.0), (1, "FR", D2, 8.0)),
        MergeOptions("id", confine="country IN ('US', 'FR')"),
    )
    assert (result.rows_updated, result.rows_inserted) == (2, 1)


def test_confine_holds_against_a_concurrent_write_of_the_key_elsewhere(tmp_path):
    """The confinement is checked on the manifest version the merge commits on: a key written
    into another partition after the merge planned is found when it re-plans, and refused."""
    ns = make_ns(tmp_path)
    other = PartitionedNamespace.open(ns.uri)

    def concurrently() -> None:
        other.write(rows((900, "FR", D1, 5.0)))

    with (
        before_row_change_commit(ns, concurrently),
        pytest.raises(UnnamedPartitionError, match="900"),
    ):
        merge_rows(ns, rows((900, "US", D1, 1.0)), MergeOptions("id", confine="country = 'US'"))
    got = ns.refresh().to_table(filter="id = 900").to_pylist()
    assert [(r["country"], r["value"]) for r in got] == [("FR", 5.0)]  # the other write only
    assert ns.count_rows("country = 'US'") == 4

    # without confine the same race moves the row (the behaviour confine exists to refuse)
    ns2 = make_ns(tmp_path / "plain")
    other2 = PartitionedNamespace.open(ns2.uri)
    with before_row_change_commit(ns2, lambda: other2.write(rows((900, "FR", D1, 5.0)))):
        merge_rows(ns2, rows((900, "US", D1, 1.0)), MergeOptions("id"))
    got = ns2.refresh().to_table(filter="id = 900").to_pylist()
    assert [(r["country"], r["value"]) for r in got] == [("US", 1.0)]


def test_a_concurrent_append_to_a_touched_partition_is_kept(tmp_path):
    ns = make_ns(tmp_path)
    other = PartitionedNamespace.open(ns.uri)

    def concurrently() -> None:
        other.write(rows((500, "US", D1, 5.0)))

    with before_row_change_commit(ns, concurrently):
        # conflicts once, redone on the new US version
        merge_rows(ns, rows((0, "US", D1, 100.0)), MergeOptions("id"))
    got = as_dict(ns.refresh())
    assert got[0]["value"] == 100.0 and 500 in got and len(got) == 13


def test_a_concurrent_update_of_the_same_row_is_not_lost(tmp_path):
    ns = make_ns(tmp_path)
    other = PartitionedNamespace.open(ns.uri)

    def concurrently() -> None:
        other.update("id = 0", {"event_date": "DATE '2030-01-01'"})

    with before_row_change_commit(ns, concurrently):
        update_rows(ns, "id = 0", {"value": "value + 1000"})
    row = ns.refresh().to_table(filter="id = 0").to_pylist()
    assert row == [{"id": 0, "country": "US", "event_date": dt.date(2030, 1, 1), "value": 1000.0}]


def test_a_concurrent_delete_is_respected(tmp_path):
    ns = make_ns(tmp_path)
    other = PartitionedNamespace.open(ns.uri)
    with before_row_change_commit(ns, lambda: other.delete("country = 'US' AND id <> 3")):
        delete_rows(ns, "id = 3")
    assert ns.refresh().count_rows("country = 'US'") == 0


def test_a_partition_created_concurrently_is_merged_into_not_duplicated(tmp_path):
    ns = make_ns(tmp_path)
    other = PartitionedNamespace.open(ns.uri)

    def concurrently() -> None:
        other.write(rows((70, "IT", D2, -70.0), (72, "IT", D2, 7.0)))

    with before_row_change_commit(ns, concurrently):
        result = merge_rows(ns, rows((70, "IT", D1, 1.0), (71, "IT", D1, 2.0)), MergeOptions("id"))
    got = sorted_rows(ns.refresh().to_table(filter="country = 'IT'"))
    assert [(r["id"], r["value"]) for r in got] == [(70, 1.0), (71, 2.0), (72, 7.0)]
    assert (result.rows_updated, result.rows_inserted) == (1, 1)
    assert len([p for p in ns.inspect.partitions() if p["values"]["country"] == "IT"]) == 1


def test_a_concurrent_overwrite_of_a_touched_partition_is_merged_into(tmp_path):
    ns = make_ns(tmp_path)
    other = PartitionedNamespace.open(ns.uri)
    with before_row_change_commit(
        ns, lambda: other.write(rows((0, "US", D2, -1.0)), mode="overwrite_partitions")
    ):
        merge_rows(
            ns, rows((0, "US", D1, 100.0), (3, "US", D1, 300.0)), MergeOptions(("id", "country"))
        )
    got = sorted_rows(ns.refresh().to_table(filter="country = 'US'"))
    assert [(r["id"], r["value"]) for r in got] == [(0, 100.0), (3, 300.0)]


def test_commit_properties_and_deregistered_partitions_are_recorded(tmp_path):
    ns = make_ns(tmp_path)
    ids = by_country(ns)
    result = ns.delete("country = 'FR'", commit_properties={"ticket": "T-1"})
    props = ns.state.store.commit_properties(result.manifest_version)
    assert props["operation"] == "delete" and props["ticket"] == "T-1"
    assert json.loads(props["overwritten"]) == [ids["FR"]]
    assert props["filter"] == "country = 'FR'"


def test_partitions_that_keep_moving_give_up_with_a_conflict(tmp_path, tune):
    ns = make_ns(tmp_path)
    other = PartitionedNamespace.open(ns.uri)
    tune(max_redo=0)
    version = ns.version
    with (
        before_row_change_commit(ns, lambda: other.write(rows((501, "US", D1, 1.0)))),
        pytest.raises(CommitConflictError),
    ):
        merge_rows(ns, rows((0, "US", D1, 100.0)), MergeOptions("id"))
    assert ns.refresh().version == version + 1  # only the concurrent write landed
    assert as_dict(ns)[0]["value"] == 0.0


# -- kill -9 ------------------------------------------------------------------------------------
CHILD = r"""
import sys, pyarrow as pa
from dagster_lance_partitioned import PartitionedNamespace
ns = PartitionedNamespace.open(sys.argv[1])
n = int(sys.argv[2])
data = pa.table({"id": pa.array(range(n), pa.int64()),
                 "country": [f"C{i % 20}" for i in range(n)],
                 "value": [float(-i) for i in range(n)]})
print("start", flush=True)
ns.merge_insert(data, on="id")
print("done", flush=True)
"""


def _table_versions(root) -> int:
    """Versions of every partition table under ``root`` (detached ones included)."""
    return sum(
        len(os.listdir(os.path.join(root, d, "_versions")))
        for d in os.listdir(root)
        if d != "__manifest" and os.path.isdir(os.path.join(root, d, "_versions"))
    )


def _kill_trials(tmp_path, trials: int) -> dict[str, int]:
    """Kill a merging process at a random moment ``trials`` times (spread over the merge's
    duration, measured first); how many trials left the old state -- killed before the merge
    wrote anything, or while it was writing detached table versions -- and how many the new
    one. Anything else fails."""
    n = 3000
    seen = {"before": 0, "during": 0, "new": 0}

    def setup(name):
        root = tmp_path / name
        ns = PartitionedNamespace.create(
            root, schema=SCHEMA, partition_fields=[PartitionField.identity("country")]
        )
        # half the keys exist (in 10 partitions); the merge moves most of them and inserts
        # the other half into 20 partitions
        ns.write(sample_table(n=n // 2, countries=tuple(f"C{i}" for i in range(10))))
        return root, ns

    def child(root):
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(root), str(n)],
            stdout=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
        assert proc.stdout.readline().strip() == b"start"
        return proc

    root, _ = setup("calibration")
    proc = child(root)
    t0 = time.monotonic()
    assert proc.stdout.readline().strip() == b"done"
    duration = time.monotonic() - t0
    proc.wait()
    for trial in range(trials):
        root, ns = setup(f"ns{trial}")
        old = sorted_rows(ns.to_table())
        versions = _table_versions(root)
        proc = child(root)
        time.sleep(random.uniform(0.0, 1.3 * duration))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        after = PartitionedNamespace.open(root)
        got = sorted_rows(after.to_table())
        if got == old:
            seen["during" if _table_versions(root) > versions else "before"] += 1
            continue
        seen["new"] += 1
        assert len(got) == n  # no row lost, none twice
        assert all(r["value"] == -r["id"] for r in got), "a mix of old and new rows"
        countries = {r["id"]: r["country"] for r in got}
        assert all(countries[i] == f"C{i % 20}" for i in range(n))
        # every pinned version is readable
        for p in after.inspect.partitions():
            lance.dataset(os.path.join(root, p["location"]), version=p["read_version"])
    return seen  # which states were seen depends on timing


def test_kill_9_during_a_merge_leaves_the_old_or_the_new_state(tmp_path):
    assert sum(_kill_trials(tmp_path, 3).values()) == 3


@pytest.mark.slow
def test_kill_9_during_a_merge_many_trials(tmp_path):
    trials = int(os.environ.get("MERGE_KILL_TRIALS", "40"))
    seen = _kill_trials(tmp_path, trials)
    print(
        f"kill -9 during a merge, {trials} trials: old state {seen['before'] + seen['during']} "
        f"({seen['during']} killed while writing table versions), new state {seen['new']}"
    )
    assert seen["during"] and seen["new"]  # kills landed mid-merge and after its commit
