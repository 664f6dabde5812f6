"""Importing a Hive-style ``key=value/.../*.lance`` tree as a partitioned namespace, in place."""

from __future__ import annotations

import datetime as dt
import json
import os
import re

import lance
import pyarrow as pa
import pytest
from helpers.data import sorted_rows

from dagster_lance_partitioned import PartitionedNamespace
from dagster_lance_partitioned.core.errors import NamespaceExistsError, SchemaError
from dagster_lance_partitioned.core.ops import hive

DATA = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("value", pa.float64())])

# (relative leaf path, ids, partition values as they should read)
US1, US2, D0 = dt.date(2025, 1, 1), dt.date(2024, 6, 30), dt.date(2025, 2, 1)
LEAVES = [
    ("country=US/year=2025/day=2025-01-01/part-0.lance", [0, 1], ("US", 2025, US1)),
    ("country=US/year=2024/day=2024-06-30/data.lance", [2], ("US", 2024, US2)),
    ("country=A%2FB%3D/year=2025/day=2025-01-01/data.lance", [3, 4], ("A/B=", 2025, US1)),
    (
        "country=__HIVE_DEFAULT_PARTITION__/year=2025/day=2025-02-01/data.lance",
        [5],
        (None, 2025, D0),
    ),
    ("country=FR/year=2025/day=2025-01-01/x.lance", [6], ("FR", 2025, US1)),
]
KEYS = ("country", "year", "day")


def _data(ids: list[int], note: bool = False) -> pa.Table:
    table = pa.table(
        {"id": pa.array(ids, pa.int64()), "value": [i * 1.5 for i in ids]}, schema=DATA
    )
    if note:
        table = table.append_column("note", pa.array([f"n{i}" for i in ids], pa.utf8()))
    return table


def make_tree(root: str, leaves=LEAVES) -> str:
    """A Hive-style tree of Lance tables; the FR leaf has an extra column and two versions."""
    for location, ids, _values in leaves:
        path = os.path.join(root, location)
        is_fr = "country=FR" in location
        lance.write_dataset(_data(ids[:0] if is_fr else ids, note=is_fr), path)
        if is_fr:
            lance.write_dataset(_data(ids, note=True), path, mode="append")
    (open(os.path.join(root, "_SUCCESS"), "w")).close()  # ignored marker file
    return root


def expected_rows(leaves=LEAVES) -> list[dict]:
    rows = []
    for location, ids, values in leaves:
        for i in ids:
            row = {"id": i, "value": i * 1.5, "note": f"n{i}" if "FR" in location else None}
            row.update(dict(zip(KEYS, values, strict=True)))
            rows.append(row)
    return sorted(rows, key=lambda r: r["id"])


def files_outside_manifest(root: str) -> set[str]:
    out = set()
    for dirpath, _dirs, names in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        if rel == "__manifest" or rel.startswith("__manifest" + os.sep):
            continue
        out |= {os.path.join(rel, n) for n in names}
    return out


@pytest.fixture
def tree(tmp_path) -> str:
    return make_tree(str(tmp_path / "hive"))


def test_import_registers_every_leaf_in_place(tree):
    ns = PartitionedNamespace.import_hive(tree)
    assert ns.version >= 1
    spec = ns.current_spec
    assert spec.spec_id == 1
    assert [(f.field_id, f.transform.type_name) for f in spec.fields] == [
        ("country", "identity"),
        ("year", "identity"),
        ("day", "identity"),
    ]
    assert ns.schema.names == ["id", "value", "note", "country", "year", "day"]
    assert [ns.schema.field(k).type for k in KEYS] == [pa.utf8(), pa.int64(), pa.date32()]
    assert not ns.schema.field("id").nullable  # stored non-null in every leaf
    assert ns.schema.field("note").nullable and ns.schema.field("country").nullable
    parts = {p["location"]: p for p in ns.inspect.partitions()}
    assert set(parts) == {loc for loc, _, _ in LEAVES}
    for location, _ids, values in LEAVES:
        p = parts[location]
        assert tuple(p["values"][k] for k in KEYS) == values
        assert p["read_version"] == lance.dataset(os.path.join(tree, location)).version
        assert re.fullmatch(r"v1(\$[a-z0-9]{16}){3}\$dataset", p["object_id"])
    assert parts["country=FR/year=2025/day=2025-01-01/x.lance"]["read_version"] == 2
    # namespace rows as the writer makes them: one per distinct prefix, ancestors' values kept
    manifest = lance.dataset(os.path.join(tree, "__manifest")).to_table().to_pylist()
    namespaces = [r for r in manifest if r["object_type"] == "namespace"]
    depth = {1: 0, 2: 0, 3: 0, 4: 0}
    for r in namespaces:
        depth[r["object_id"].count("$") + 1] += 1
    assert depth == {1: 1, 2: 4, 3: 5, 4: 5}  # v1; countries; (country, year); full prefixes
    us2024 = next(
        r
        for r in namespaces
        if r["partition_field_year"] == 2024 and r["object_id"].count("$") == 2
    )
    assert us2024["partition_field_country"] == "US" and us2024["partition_field_day"] is None
    tables = [r for r in manifest if r["object_type"] == "table"]
    assert all(r["metadata"] == "{}" and r["read_branch"] is None for r in tables)
    assert all(
        r["object_id"].rsplit("$", 1)[0] in {n["object_id"] for n in namespaces} for r in tables
    )


def test_fill_partition_columns_gives_key_values(tree):
    ns = PartitionedNamespace.import_hive(tree)
    spec = ns.current_spec
    for task in ns.plan_scan().tasks:
        raw = lance.dataset(task.uri, version=task.read_version).to_table()
        assert "country" not in raw.column_names
        filled = hive.fill_partition_columns(raw, task, spec, ns.schema_with_ids)
        for key in KEYS:
            assert filled.schema.field(key).type == ns.schema.field(key).type
            assert set(filled[key].to_pylist()) == {task.partition_values[key]}
        assert filled["id"].equals(raw["id"])
        # columns the table stores are never replaced
        assert hive.fill_partition_columns(filled, task, spec, ns.schema_with_ids).equals(filled)
        # a key column that reads as NULL (reconciled, or added as NULL by a schema change)
        nulls = raw.append_column("country", pa.nulls(raw.num_rows, pa.utf8()))
        refilled = hive.fill_partition_columns(nulls, task, spec, ns.schema_with_ids)
        assert refilled["country"].to_pylist() == [task.partition_values["country"]] * raw.num_rows


def test_to_table_returns_the_union_with_key_columns(tree):
    ns = PartitionedNamespace.import_hive(tree)
    assert sorted_rows(ns.to_table()) == expected_rows()


def test_pruning_and_filters_by_key(tree):
    ns = PartitionedNamespace.import_hive(tree)
    plan = ns.plan_scan("country = 'US'")
    assert sorted(t.location for t in plan.tasks) == sorted(
        loc for loc, _, values in LEAVES if values[0] == "US"
    )
    plan = ns.plan_scan([("country", "=", "A/B=")])
    assert [t.location for t in plan.tasks] == [LEAVES[2][0]]
    plan = ns.plan_scan("country IS NULL")
    assert [t.partition_values["country"] for t in plan.tasks] == [None]
    assert sorted(ns.to_table("country = 'US'")["id"].to_pylist()) == [0, 1, 2]
    assert sorted(ns.to_table("year = 2025 AND day = DATE '2025-01-01'")["id"].to_pylist()) == [
        0,
        1,
        3,
        4,
        6,
    ]
    assert ns.to_table("country IS NULL")["id"].to_pylist() == [5]


def test_import_copies_no_data(tree):
    before = files_outside_manifest(tree)
    ns = PartitionedNamespace.import_hive(tree)
    ns.to_table()
    assert files_outside_manifest(tree) == before
    assert sorted(os.listdir(tree)) == sorted(
        ["__manifest", "_SUCCESS", "country=US", "country=A%2FB%3D",
         "country=__HIVE_DEFAULT_PARTITION__", "country=FR"]
    )  # fmt: skip


def test_writes_after_import_create_normal_partition_tables(tree):
    ns = PartitionedNamespace.import_hive(tree)
    new = pa.table(
        {
            "id": pa.array([100, 101], pa.int64()),
            "value": [1.0, 2.0],
            "country": ["JP", "JP"],
            "year": pa.array([2026, 2026], pa.int64()),
            "day": pa.array([dt.date(2026, 1, 1)] * 2, pa.date32()),
        }
    )
    result = ns.write(new)
    (part,) = result.partitions
    assert part.created
    assert re.fullmatch(r"[0-9a-f]{8}_v1(\$[a-z0-9]{16}){3}\$dataset", part.location)
    assert os.path.isdir(os.path.join(tree, part.location))
    assert sorted(ns.to_table("country = 'JP'")["id"].to_pylist()) == [100, 101]
    assert ns.count_rows() == len(expected_rows()) + 2
    assert [t.location for t in ns.plan_scan("country = 'JP'").tasks] == [part.location]


def test_append_to_an_imported_partition(tree):
    ns = PartitionedNamespace.import_hive(tree)
    new = pa.table(
        {
            "id": pa.array([200], pa.int64()),
            "value": [3.0],
            "country": ["US"],
            "year": pa.array([2024], pa.int64()),
            "day": pa.array([dt.date(2024, 6, 30)], pa.date32()),
        }
    )
    (part,) = ns.write(new).partitions
    assert not part.created and part.location == LEAVES[1][0]
    got = ns.to_table("country = 'US' AND year = 2024")
    assert sorted(got["id"].to_pylist()) == [2, 200]
    assert set(got["country"].to_pylist()) == {"US"}


def test_import_twice_is_refused(tree):
    PartitionedNamespace.import_hive(tree)
    before = files_outside_manifest(tree)
    version = lance.dataset(os.path.join(tree, "__manifest")).version
    with pytest.raises(NamespaceExistsError):
        PartitionedNamespace.import_hive(tree)
    assert lance.dataset(os.path.join(tree, "__manifest")).version == version
    assert files_outside_manifest(tree) == before


def test_incompatible_leaf_schema_names_the_leaf_and_writes_nothing(tmp_path):
    root = make_tree(str(tmp_path / "hive"))
    bad = "country=DE/year=2025/day=2025-01-01/data.lance"
    lance.write_dataset(
        pa.table({"id": pa.array([9], pa.int64()), "value": ["not a float"]}),
        os.path.join(root, bad),
    )
    before = files_outside_manifest(root)
    with pytest.raises(SchemaError, match=re.escape(bad)) as info:
        PartitionedNamespace.import_hive(root)
    assert "'value'" in str(info.value)
    assert not os.path.exists(os.path.join(root, "__manifest"))
    assert files_outside_manifest(root) == before


def test_layout_errors_name_the_path(tmp_path):
    root = make_tree(str(tmp_path / "keys"))
    odd = "country=DE/day=2025-01-01/data.lance"
    lance.write_dataset(_data([9]), os.path.join(root, odd))
    with pytest.raises(hive.HiveImportError, match=re.escape(odd)):
        PartitionedNamespace.import_hive(root)
    root = make_tree(str(tmp_path / "dup"))
    twin = "country=US/year=2024/day=2024-06-30/other.lance"
    lance.write_dataset(_data([9]), os.path.join(root, twin))
    with pytest.raises(hive.HiveImportError, match="same partition"):
        PartitionedNamespace.import_hive(root)
    root = str(tmp_path / "stray")
    lance.write_dataset(_data([1]), os.path.join(root, "a=1", "data.lance"))
    os.makedirs(os.path.join(root, "a=2", "misc"))
    with pytest.raises(hive.HiveImportError, match="a=2/misc"):
        PartitionedNamespace.import_hive(root)
    with pytest.raises(hive.HiveImportError, match="no key=value"):
        PartitionedNamespace.import_hive(tmp_path / "dup" / LEAVES[1][0] / "data")
    for name in ("keys", "dup", "stray"):
        assert not os.path.exists(tmp_path / name / "__manifest")


def test_bad_value_for_a_given_type_names_the_leaf(tree):
    with pytest.raises(hive.HiveImportError, match=re.escape(LEAVES[2][0])) as info:
        PartitionedNamespace.import_hive(tree, types={"country": pa.int32()})
    assert "'A/B='" in str(info.value) and "'country'" in str(info.value)
    assert not os.path.exists(os.path.join(tree, "__manifest"))


def test_types_override_inference(tree):
    ns = PartitionedNamespace.import_hive(tree, types={"year": pa.int32(), "day": pa.utf8()})
    assert ns.schema.field("year").type == pa.int32()
    assert ns.schema.field("day").type == pa.utf8()
    assert {p["values"]["day"] for p in ns.inspect.partitions()} == {
        "2025-01-01",
        "2024-06-30",
        "2025-02-01",
    }
    assert sorted(ns.to_table("year = 2024")["id"].to_pylist()) == [2]


def test_older_draft_properties_and_seed_leaf_names(tmp_path):
    """The older draft's layout: ``event_date=.../country=US.lance`` with its properties."""
    root = str(tmp_path / "old")
    props = {
        hive.PROP_COLUMNS: json.dumps(
            [{"name": "event_date", "function": "identity"}, {"name": "country"}]
        ),
        hive.PROP_SCHEMA: json.dumps(
            {
                "fields": [
                    {"name": "id", "type": {"name": "int", "bitWidth": 64, "isSigned": True},
                     "nullable": False, "children": []},
                    {"name": "event_date", "type": {"name": "date", "unit": "DAY"},
                     "nullable": True, "children": []},
                    {"name": "country", "type": {"name": "utf8"}, "nullable": True, "children": []},
                    {"name": "code", "type": {"name": "int", "bitWidth": 32, "isSigned": True},
                     "nullable": True, "children": []},
                ]
            }
        ),
    }  # fmt: skip
    for day, country, ids in [("2025-12-10", "US", [1, 2]), ("2025-12-11", "001", [3])]:
        path = os.path.join(root, f"event_date={day}", f"country={country}.lance")
        ds = lance.write_dataset(pa.table({"id": pa.array(ids, pa.int64())}), path)
        ds.update_metadata(props)
    ns = PartitionedNamespace.import_hive(root)
    assert [f.field_id for f in ns.current_spec.fields] == ["event_date", "country"]
    # the properties' schema gives the types ("001" stays a string) and its extra column
    assert ns.schema == pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("event_date", pa.date32()),
            pa.field("country", pa.utf8()),
            pa.field("code", pa.int32()),
        ]
    )
    assert {p["values"]["country"] for p in ns.inspect.partitions()} == {"US", "001"}
    assert ns.to_table("country = '001'").to_pylist() == [
        {"id": 3, "event_date": dt.date(2025, 12, 11), "country": "001", "code": None}
    ]


def test_properties_that_contradict_the_tree_are_refused(tmp_path):
    root = str(tmp_path / "bad")
    path = os.path.join(root, "a=1", "data.lance")
    ds = lance.write_dataset(_data([1]), path)
    ds.update_metadata({hive.PROP_COLUMNS: json.dumps([{"name": "b"}])})
    with pytest.raises(hive.HiveImportError, match="names \\['b'\\]"):
        PartitionedNamespace.import_hive(root)
    ds.update_metadata(
        {hive.PROP_COLUMNS: json.dumps([{"name": "a", "function": "bucket", "properties": {}}])}
    )
    with pytest.raises(hive.HiveImportError, match="only identity"):
        PartitionedNamespace.import_hive(root)


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (["1", "-20", None], pa.int64()),
        (["1", "2.5"], pa.float64()),
        (["1e3", "2"], pa.float64()),
        (["2025-01-01", "2024-02-29"], pa.date32()),
        (["2025-02-30"], pa.utf8()),
        (["true", "FALSE"], pa.bool_()),
        (["US", "1"], pa.utf8()),
        ([None], pa.utf8()),
        (["99999999999999999999"], pa.float64()),  # beyond int64
    ],
)
def test_infer_type(values, expected):
    assert hive.infer_type(values) == expected


def test_widen():
    assert hive.widen(pa.int32(), pa.int64()) == pa.int64()
    assert hive.widen(pa.uint32(), pa.int32()) == pa.int64()
    assert hive.widen(pa.uint64(), pa.int64()) is None
    assert hive.widen(pa.float32(), pa.int64()) == pa.float64()
    assert hive.widen(pa.utf8(), pa.large_utf8()) == pa.large_utf8()
    assert hive.widen(pa.utf8(), pa.int64()) is None
    assert hive.widen(pa.null(), pa.date32()) == pa.date32()


def test_an_import_records_statistics_of_every_leaf(tree):
    """The import reads each leaf once for its statistics (key columns as reads fill them):
    reads then skip leaves no row of which can match, and appends keep them exact."""
    from helpers.stats import assert_statistics_hold

    ns = PartitionedNamespace.import_hive(tree)
    assert assert_statistics_hold(ns) == len(LEAVES)
    plan = ns.plan_scan("id >= 5")
    assert len(plan.tasks) == 2 and sorted(ns.to_table("id >= 5")["id"].to_pylist()) == [5, 6]
    country = {t.object_id: t.stats.columns for t in plan.tasks}
    assert all(country.values())
    assert len(ns.plan_scan("year = 2024 AND value > 100").pruned_by_stats) == 1
    new = pa.table(  # an append to an imported leaf keeps its statistics
        {
            "id": pa.array([200], pa.int64()),
            "value": [3.0],
            "country": ["US"],
            "year": pa.array([2024], pa.int64()),
            "day": pa.array([dt.date(2024, 6, 30)], pa.date32()),
        }
    )
    ns.write(new)
    assert assert_statistics_hold(ns) == len(LEAVES)
    assert len(ns.plan_scan("id = 200").tasks) == 1
