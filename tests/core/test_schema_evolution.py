"""Schema evolution: add, rename, drop and promote columns of a partitioned namespace.

Each operation is one ``__manifest`` commit of the ``schema`` metadata; partition tables are not
rewritten by it. Old partitions read with the new schema (by field id), and writes with the new
schema go into old and new partitions alike."""

from __future__ import annotations

import json
import os

import lance
import pyarrow as pa
import pytest
from helpers.data import SCHEMA, fingerprint, sample_table, sorted_rows

from dagster_lance_partitioned import PartitionedNamespace, PartitionField
from dagster_lance_partitioned.core.errors import SchemaError, SchemaMismatchError, WriteError
from dagster_lance_partitioned.core.evolution import is_widening
from dagster_lance_partitioned.core.manifest.snapshot import ManifestSnapshot
from dagster_lance_partitioned.core.manifest.store import SCHEMA_KEY, ManifestEdit, ManifestStore
from dagster_lance_partitioned.core.partitioning.partition_spec import (
    PartitionSpec,
    resolve_fields,
    specs_from_metadata,
)
from dagster_lance_partitioned.core.schema.conform import FIELD_IDS_KEY


def make_ns(tmp_path, fields=None, schema=SCHEMA) -> PartitionedNamespace:
    """A namespace partitioned by country holding the 12 sample rows (US, FR, DE)."""
    ns = PartitionedNamespace.create(
        tmp_path / "ns", schema, fields or [PartitionField.identity("country")]
    )
    ns.write(sample_table())
    return ns


def stored_fields(ns: PartitionedNamespace) -> list[dict]:
    """The ``schema`` JSON fields as stored in the latest ``__manifest`` metadata."""
    metadata = lance.dataset(os.path.join(ns.uri, "__manifest")).metadata
    return json.loads(metadata[SCHEMA_KEY])["fields"]


def ids_by_name(ns: PartitionedNamespace) -> dict[str, int]:
    """Live top-level field name -> field id in the stored schema JSON."""
    return {
        f["name"]: int(f["metadata"]["lance:field_id"])
        for f in stored_fields(ns)
        if f.get("metadata", {}).get("lance:deprecated") != "true"
    }


def table_of(ns: PartitionedNamespace, country: str) -> lance.LanceDataset:
    """The partition table of ``country`` at its registered version."""
    (task,) = ns.plan_scan(f"country = '{country}'").tasks
    return lance.dataset(task.uri, version=task.read_version)


def partition_ids(ns: PartitionedNamespace) -> dict[str, dict]:
    """Table object id -> partition values."""
    return {p["object_id"]: p["values"] for p in ns.inspect.partitions()}


def data_files(ds: lance.LanceDataset) -> set[str]:
    """Paths of every data file a table version reads."""
    return {f.path for frag in ds.get_fragments() for f in frag.metadata.files}


def register_version(ns: PartitionedNamespace, object_id: str, version: int) -> None:
    """Point a manifest table row at ``version`` (as a hand-made edit would)."""
    ManifestStore(ns.uri).commit(
        lambda ds: ManifestSnapshot(ds, specs_from_metadata(dict(ds.metadata))),
        lambda snap: ManifestEdit(
            upserts={object_id: {"read_version": version}}, properties={"overwritten": "[]"}
        ),
    )
    ns.refresh()


# -- field ids on partition tables ----------------------------------------------------------------
def test_partition_tables_record_namespace_field_ids(tmp_path):
    ns = make_ns(tmp_path)
    expected = {"id": 0, "country": 1, "event_date": 2, "value": 3}
    assert ids_by_name(ns) == expected
    for task in ns.plan_scan().tasks:
        ds = lance.dataset(task.uri, version=task.read_version)
        assert json.loads(ds.schema.metadata[FIELD_IDS_KEY.encode()]) == expected
    ns.write(sample_table(3, start=100), mode="overwrite_partitions")
    assert json.loads(table_of(ns, "US").schema.metadata[FIELD_IDS_KEY.encode()]) == expected


# -- add ----------------------------------------------------------------------------------------
def test_add_columns_new_ids_old_partitions_null_and_writes_everywhere(tmp_path):
    ns = make_ns(tmp_path)
    before = ns.version
    us_before = table_of(ns, "US")
    tags = pa.struct([("label", pa.utf8()), ("weight", pa.float32())])
    version = ns.add_columns([pa.field("score", pa.int32()), pa.field("tags", tags)])
    assert version == before + 1 == ns.version  # one manifest commit
    stored = {f["name"]: f for f in stored_fields(ns)}
    assert stored["score"]["metadata"]["lance:field_id"] == "4"
    assert stored["tags"]["metadata"]["lance:field_id"] == "5"
    children = stored["tags"]["type"]["fields"]
    assert [c["metadata"]["lance:field_id"] for c in children] == ["6", "7"]
    assert ns.schema.names == [*SCHEMA.names, "score", "tags"]
    assert table_of(ns, "US").version == us_before.version  # no partition table was rewritten

    # old partitions read the new columns as NULL
    old = ns.to_table()
    assert old.schema == ns.schema
    assert old["score"].null_count == old["tags"].null_count == 12

    # append new-schema rows into an old partition (US) and a new one (JP)
    new_rows = pa.table(
        {
            "id": pa.array([100, 101], pa.int64()),
            "country": ["US", "JP"],
            "score": pa.array([7, 8], pa.int32()),
            "tags": pa.array([{"label": "a", "weight": 1.5}, None], tags),
        }
    )
    ns.write(new_rows)
    us = table_of(ns, "US")
    assert data_files(us_before) <= data_files(us)  # metadata-only: old data files kept
    assert json.loads(us.schema.metadata[FIELD_IDS_KEY.encode()])["score"] == 4
    rows = {r["id"]: r for r in ns.to_table().to_pylist()}
    assert rows[100]["score"] == 7 and rows[100]["tags"] == {"label": "a", "weight": 1.5}
    assert rows[101]["score"] == 8 and rows[101]["country"] == "JP"
    assert rows[0]["score"] is None and rows[0]["value"] == 0.0
    assert ns.count_rows("country = 'US'") == 5
    assert sorted(ns.to_table("score > 7")["id"].to_pylist()) == [101]

    # overwrite an old partition with new-schema rows
    fr = pa.table({"id": pa.array([200], pa.int64()), "country": ["FR"], "score": [9]})
    ns.write(fr, mode="overwrite_partitions")
    fr_table = table_of(ns, "FR")
    assert fr_table.schema.names == ns.schema.names
    assert json.loads(fr_table.schema.metadata[FIELD_IDS_KEY.encode()]) == ids_by_name(ns)
    assert ns.to_table("country = 'FR'").to_pylist() == [
        {
            "id": 200,
            "country": "FR",
            "event_date": None,
            "value": None,
            "score": 9,
            "tags": None,
        }
    ]


def test_add_columns_refusals_leave_storage_unchanged(tmp_path):
    ns = make_ns(tmp_path)
    before = fingerprint(ns.uri)
    with pytest.raises(SchemaError, match=r"'score'.*nullable"):
        ns.add_columns(pa.field("score", pa.int32(), nullable=False))
    with pytest.raises(SchemaError, match=r"'value'.*already has it, as double"):
        ns.add_columns(pa.schema([("extra", pa.int32()), ("value", pa.utf8())]))
    with pytest.raises(SchemaError, match=r"'dup'.*already"):
        ns.add_columns([pa.field("dup", pa.int32()), pa.field("dup", pa.utf8())])
    assert fingerprint(ns.uri) == before
    assert ns.schema == SCHEMA


def test_schema_change_from_a_stale_object_revalidates_against_the_latest(tmp_path):
    ns = make_ns(tmp_path)
    stale = PartitionedNamespace.open(ns.uri)
    ns.add_columns(pa.field("a", pa.int32()))
    with pytest.raises(SchemaError, match=r"'a'.*already"):
        stale.add_columns(pa.field("a", pa.utf8()))
    stale.add_columns(pa.field("b", pa.utf8()))
    assert ids_by_name(stale) == {
        "id": 0,
        "country": 1,
        "event_date": 2,
        "value": 3,
        "a": 4,
        "b": 5,
    }


def test_schema_changes_are_refused_on_a_pinned_namespace(tmp_path):
    ns = make_ns(tmp_path)
    pinned = PartitionedNamespace.open(ns.uri, version=ns.version)
    before = fingerprint(ns.uri)
    with pytest.raises(WriteError, match="opened at manifest version"):
        pinned.add_columns(pa.field("x", pa.int32()))
    assert fingerprint(ns.uri) == before


# -- rename -------------------------------------------------------------------------------------
def test_rename_keeps_the_id_and_old_partitions_read_by_id(tmp_path):
    ns = make_ns(tmp_path)
    before = ids_by_name(ns)
    ns.rename_column("value", "amount")
    after = ids_by_name(ns)
    assert after["amount"] == before["value"] == 3 and "value" not in after
    assert ns.schema.names == ["id", "country", "event_date", "amount"]
    table = ns.to_table()
    renamed = sample_table().rename_columns(["id", "country", "event_date", "amount"])
    assert sorted_rows(table) == sorted_rows(renamed)
    # filters in the new name work on tables that still call the column "value"
    assert sorted(ns.to_table("amount >= 9")["id"].to_pylist()) == [9, 10, 11]
    assert sorted(ns.to_table("amount >= 9 AND country = 'US'")["id"].to_pylist()) == [9]
    assert ns.to_table(columns=["amount"]).column_names == ["amount"]

    # the old name is no longer writable; the new one is, into old and new partitions
    with pytest.raises(SchemaMismatchError, match="'value'") as err:
        ns.write(pa.table({"id": [1], "country": ["US"], "value": [1.0]}))
    assert err.value.column == "value"
    ns.write(pa.table({"id": [50, 51], "country": ["US", "JP"], "amount": [50.0, 51.0]}))
    us = table_of(ns, "US")
    assert "amount" in us.schema.names and "value" not in us.schema.names
    assert json.loads(us.schema.metadata[FIELD_IDS_KEY.encode()])["amount"] == 3
    rows = {r["id"]: r["amount"] for r in ns.to_table().to_pylist()}
    assert rows[50] == 50.0 and rows[51] == 51.0 and rows[0] == 0.0 and rows[9] == 9.0
    ns.write(pa.table({"id": [60], "country": ["DE"], "amount": [60.0]}), "overwrite_partitions")
    assert ns.to_table("country = 'DE'")["amount"].to_pylist() == [60.0]
    assert ns.count_rows() == 12 + 2 - 4 + 1


def test_rename_partition_source_keeps_pruning(tmp_path):
    ns = make_ns(tmp_path)
    parts = partition_ids(ns)
    ns.rename_column("country", "region")
    assert ids_by_name(ns)["region"] == 1
    plan = ns.plan_scan("region = 'US'")
    assert [t.partition_values for t in plan.tasks] == [{"country": "US"}]
    assert plan.pruned == 2
    us = ns.to_table("region = 'US'")
    assert sorted(us["id"].to_pylist()) == [0, 3, 6, 9]
    assert set(us["region"].to_pylist()) == {"US"}
    # new rows with the new name land in the existing partition
    ns.write(pa.table({"id": [70], "region": ["US"], "value": [1.0]}))
    assert partition_ids(ns) == parts
    assert sorted(ns.to_table("region = 'US'")["id"].to_pylist()) == [0, 3, 6, 9, 70]


def test_rename_refusals_leave_storage_unchanged(tmp_path):
    ns = make_ns(tmp_path)
    before = fingerprint(ns.uri)
    with pytest.raises(SchemaError, match=r"'nope'.*no such column"):
        ns.rename_column("nope", "x")
    with pytest.raises(SchemaError, match=r"'value' to 'country'.*already exists"):
        ns.rename_column("value", "country")
    assert fingerprint(ns.uri) == before


# -- drop ---------------------------------------------------------------------------------------
def test_drop_hides_the_column_keeps_its_id_and_never_reuses_it(tmp_path):
    ns = make_ns(tmp_path)
    ns.drop_column("value")
    stored = {f["name"]: f for f in stored_fields(ns)}
    assert stored["value"]["metadata"] == {"lance:field_id": "3", "lance:deprecated": "true"}
    assert stored["value"]["nullable"] is True
    assert ns.schema.names == ["id", "country", "event_date"]
    assert "value" not in ns.schema_with_ids.names
    assert ns.to_table().column_names == ["id", "country", "event_date"]
    assert ns.count_rows("id >= 6") == 6

    with pytest.raises(SchemaMismatchError, match="'value' was dropped") as err:
        ns.write(pa.table({"id": [1], "country": ["US"], "value": [1.0]}))
    assert err.value.column == "value"
    version = ns.version
    assert ns.drop_column("value") == version  # dropped already: nothing committed

    # a new column named like the dropped one gets a new id; old data never shows through
    ns.add_columns(pa.field("value", pa.utf8()))
    fields = stored_fields(ns)
    assert [(f["name"], f["metadata"]["lance:field_id"]) for f in fields][-2:] == [
        ("value", "3"),
        ("value", "4"),
    ]
    assert ns.to_table()["value"].null_count == 12
    ns.write(pa.table({"id": [80, 81], "country": ["US", "JP"], "value": ["x", "y"]}))
    rows = {r["id"]: r["value"] for r in ns.to_table().to_pylist()}
    assert rows[80] == "x" and rows[81] == "y"
    assert all(rows[i] is None for i in range(12))
    assert ns.count_rows("value = 'x'") == 1
    # the US table (which held the old "value") now records the new id for the name
    ids = json.loads(table_of(ns, "US").schema.metadata[FIELD_IDS_KEY.encode()])
    assert ids["value"] == 4 and 3 not in ids.values()


def test_drop_then_append_to_old_partition_fills_the_dropped_column_with_nulls(tmp_path):
    ns = make_ns(tmp_path)
    before = table_of(ns, "US")
    ns.drop_column("event_date")
    ns.write(pa.table({"id": pa.array([90], pa.int64()), "country": ["US"], "value": [9.0]}))
    us = table_of(ns, "US")
    assert data_files(before) <= data_files(us)  # no rewrite
    assert us.to_table(filter="id = 90")["event_date"].to_pylist() == [None]
    assert sorted_rows(ns.to_table("country = 'US'"))[-1] == {
        "id": 90,
        "country": "US",
        "value": 9.0,
    }


def test_dropping_a_current_spec_source_is_refused_and_changes_nothing(tmp_path):
    ns = make_ns(
        tmp_path,
        [PartitionField.identity("country"), PartitionField.month("event_date")],
    )
    before = fingerprint(ns.uri)
    with pytest.raises(SchemaError, match=r"cannot drop column 'event_date'.*'event_date_month'"):
        ns.drop_column("event_date")
    with pytest.raises(SchemaError, match=r"'country'.*spec v1"):
        ns.drop_column("country")
    assert fingerprint(ns.uri) == before
    assert ns.schema == SCHEMA


def test_old_spec_with_a_dropped_source_still_reads(tmp_path):
    ns = make_ns(tmp_path, [PartitionField.identity("event_date")])
    # a spec v2 partitioned by country, registered by hand
    spec2 = PartitionSpec(
        2, resolve_fields([PartitionField.identity("country")], ns.schema_with_ids, ns.specs)
    )
    store = ManifestStore(ns.uri)
    store.commit(
        lambda ds: ManifestSnapshot(ds, specs_from_metadata(dict(ds.metadata))),
        lambda snap: ManifestEdit(
            new_columns=[pa.field(f.column, f.result_type) for f in spec2.fields],
            properties={"overwritten": "[]"},
        ),
    )
    store.update_metadata({spec2.key: spec2.to_json_str()}, store.dataset().version)
    ns.refresh()
    assert ns.current_spec.spec_id == 2
    ns.drop_column("event_date")  # only the old spec uses it
    assert ns.schema.names == ["id", "country", "value"]
    assert sorted(ns.to_table()["id"].to_pylist()) == list(range(12))
    assert ns.plan_scan().total_partitions == 3
    assert sorted(ns.to_table("value > 9.5")["id"].to_pylist()) == [10, 11]
    ns.write(pa.table({"id": pa.array([300], pa.int64()), "country": ["US"], "value": [1.0]}))
    assert {p["spec_id"] for p in ns.inspect.partitions()} == {1, 2}
    assert ns.count_rows() == 13


# -- promote ------------------------------------------------------------------------------------
def test_promote_int32_to_int64_keeps_bucket_partitions(tmp_path):
    schema = pa.schema([("user_id", pa.int32()), ("payload", pa.utf8())])
    ns = PartitionedNamespace.create(tmp_path / "b", schema, [PartitionField.bucket("user_id", 8)])
    users = list(range(0, 400, 7))
    ns.write(
        pa.table(
            {"user_id": pa.array(users, pa.int32()), "payload": ["old"] * len(users)},
            schema=schema,
        )
    )
    parts = partition_ids(ns)
    assert len(parts) > 1
    before = {t.object_id: set(_read(t)["user_id"].to_pylist()) for t in ns.plan_scan().tasks}

    ns.promote_column("user_id", pa.int64())
    assert ids_by_name(ns) == {"user_id": 0, "payload": 1}
    assert {f["name"]: f["type"] for f in stored_fields(ns)}["user_id"] == {"type": "int64"}
    assert ns.schema.field("user_id").type == pa.int64()
    assert ns.to_table().schema.field("user_id").type == pa.int64()

    big = 2**40
    ns.write(
        pa.table(
            {"user_id": pa.array(users, pa.int64()), "payload": ["new"] * len(users)},
        )
    )
    assert partition_ids(ns) == parts  # same tables, no new partitions
    for task in ns.plan_scan().tasks:
        rows = _read(task)
        assert rows.schema.field("user_id").type == pa.int64()  # rewritten on append
        old = {r["user_id"] for r in rows.to_pylist() if r["payload"] == "old"}
        new = {r["user_id"] for r in rows.to_pylist() if r["payload"] == "new"}
        assert old == new == before[task.object_id]
    ns.write(pa.table({"user_id": pa.array([big], pa.int64()), "payload": ["big"]}))
    assert ns.to_table("payload = 'big'")["user_id"].to_pylist() == [big]
    assert ns.count_rows() == 2 * len(users) + 1


def _read(task) -> pa.Table:
    """A scan task's partition table at its registered version."""
    return lance.dataset(task.uri, version=task.read_version).to_table()


def test_promote_float32_to_float64_casts_old_partitions(tmp_path):
    schema = pa.schema([("id", pa.int64()), ("k", pa.utf8()), ("x", pa.float32())])
    ns = PartitionedNamespace.create(tmp_path / "f", schema, [PartitionField.identity("k")])
    ns.write(pa.table({"id": [1, 2], "k": ["a", "b"], "x": pa.array([0.5, 1.5], pa.float32())}))
    ns.promote_column("x", pa.float64())
    table = ns.to_table()
    assert table.schema.field("x").type == pa.float64()
    assert sorted(table["x"].to_pylist()) == [0.5, 1.5]
    assert ns.to_table("x > 1.0")["id"].to_pylist() == [2]
    ns.write(pa.table({"id": [3], "k": ["a"], "x": [1e300]}), mode="overwrite_partitions")
    assert ns.to_table("k = 'a'")["x"].to_pylist() == [1e300]


def test_narrowing_and_unrelated_promotions_are_refused(tmp_path):
    ns = make_ns(tmp_path)
    before = fingerprint(ns.uri)
    with pytest.raises(SchemaError, match="'id' from int64 to int32"):
        ns.promote_column("id", pa.int32())
    with pytest.raises(SchemaError, match="'value' from double to int64"):
        ns.promote_column("value", pa.int64())
    with pytest.raises(SchemaError, match="'country' from string to int64"):
        ns.promote_column("country", pa.int64())
    with pytest.raises(SchemaError, match="'id' from int64 to double"):
        ns.promote_column("id", pa.float64())
    with pytest.raises(SchemaError, match=r"'event_date' from date32.* to date64"):
        ns.promote_column("event_date", pa.date64())
    with pytest.raises(SchemaError, match=r"'missing'.*no such column"):
        ns.promote_column("missing", pa.int64())
    with pytest.raises(SchemaError, match=r"'missing'.*no such column"):
        ns.drop_column("missing")
    assert fingerprint(ns.uri) == before


@pytest.mark.parametrize(
    ("src", "dst", "ok"),
    [
        (pa.int8(), pa.int16(), True),
        (pa.int16(), pa.int64(), True),
        (pa.uint8(), pa.uint32(), True),
        (pa.uint16(), pa.int32(), True),
        (pa.uint32(), pa.int32(), False),
        (pa.float32(), pa.float64(), True),
        (pa.int32(), pa.float64(), False),
        (pa.decimal128(10, 2), pa.decimal128(20, 2), True),
        (pa.decimal128(10, 2), pa.decimal128(20, 3), False),
        (pa.decimal128(10, 2), pa.decimal128(8, 2), False),
        (pa.utf8(), pa.large_utf8(), True),
        (pa.large_utf8(), pa.utf8(), False),
        (pa.int64(), pa.int32(), False),
        (pa.int64(), pa.int64(), False),
        (pa.date32(), pa.date64(), False),
    ],
)
def test_widening_rules(src, dst, ok):
    assert is_widening(src, dst) is ok


# -- tables without dlp:field_ids ---------------------------------------------------------------
def test_table_without_field_ids_reads_by_name(tmp_path):
    ns = make_ns(tmp_path)
    (task,) = ns.plan_scan("country = 'US'").tasks
    hand = pa.table(
        {
            "value": [1.5, 2.5],
            "id": pa.array([500, 501], pa.int32()),
            "country": ["US", "US"],
            "junk": ["x", "y"],
        }
    )
    version = lance.write_dataset(hand, task.uri, mode="overwrite").version
    assert FIELD_IDS_KEY.encode() not in (lance.dataset(task.uri).schema.metadata or {})
    register_version(ns, task.object_id, version)
    assert sorted_rows(ns.to_table("country = 'US'")) == [
        {"id": 500, "country": "US", "event_date": None, "value": 1.5},
        {"id": 501, "country": "US", "event_date": None, "value": 2.5},
    ]
    assert ns.to_table("value > 2 AND country = 'US'")["id"].to_pylist() == [501]

    # appending into it gives the table the namespace layout and records the ids
    ns.write(pa.table({"id": pa.array([502], pa.int64()), "country": ["US"], "value": [3.5]}))
    us = table_of(ns, "US")
    assert json.loads(us.schema.metadata[FIELD_IDS_KEY.encode()])["value"] == 3
    assert sorted(ns.to_table("country = 'US'")["value"].to_pylist()) == [1.5, 2.5, 3.5]

    # a rename is followed in tables with ids
    ns.rename_column("value", "amount")
    assert sorted(ns.to_table("country = 'US'")["amount"].to_pylist()) == [1.5, 2.5, 3.5]
    assert sorted(ns.to_table("country = 'FR'")["amount"].to_pylist()) == [1.0, 4.0, 7.0, 10.0]


# -- concurrency ----------------------------------------------------------------------------------
def test_append_rebased_onto_a_partition_evolved_concurrently_keeps_both_writes(
    tmp_path, before_commit
):
    """A writer that read the old schema commits after another added a column and appended to
    the same partition with it: its rows are re-laid out for the evolved table, nothing lost."""
    ns = make_ns(tmp_path)
    other = PartitionedNamespace.open(ns.uri)

    def meanwhile(_pending) -> None:
        other.add_columns(pa.field("score", pa.int32()))
        other.write(pa.table({"id": [900], "country": ["US"], "score": pa.array([5], pa.int32())}))

    before_commit(ns, meanwhile)
    ns.write(pa.table({"id": pa.array([901], pa.int64()), "country": ["US"], "value": [1.0]}))
    before_commit(ns, None)
    rows = {r["id"]: r for r in ns.to_table("country = 'US'").to_pylist()}
    assert sorted(rows) == [0, 3, 6, 9, 900, 901]
    assert rows[900]["score"] == 5 and rows[901]["score"] is None
    assert rows[901]["value"] == 1.0 and rows[0]["value"] == 0.0
    assert json.loads(table_of(ns, "US").schema.metadata[FIELD_IDS_KEY.encode()])["score"] == 4
