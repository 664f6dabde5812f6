"""Interoperability of the on-disk format with plain pylance.

* pylance's ``lance.namespace.DirectoryNamespace`` reads a partitioned namespace we wrote
  (namespaces, tables, locations) and its mutations are refused without touching ``__manifest``;
* the directory layout and ``__manifest`` columns/metadata are the ones FORMAT.md prescribes;
* a namespace written by hand with plain pylance after the published spec's Appendices A and C is
  read (and written to) by :class:`PartitionedNamespace`;
* ``__manifest`` columns added by someone else survive our writes.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import re
from pathlib import Path
from typing import Any

import lance
import lance.namespace as lns
import pyarrow as pa
import pytest

from dagster_lance_partitioned import PartitionedNamespace, PartitionField

MANIFEST = "__manifest"
PK_KEY = "lance-schema:unenforced-primary-key:position"
FLAG_KEY = "lance.namespace.manifest.writer_feature_flags"
NAME16 = re.compile(r"^[a-z0-9]{16}$")
TABLE_DIR = re.compile(r"^([0-9a-f]{8})_(.+)$")
ODD_VALUE = "a/b=c$%d"

BASE_COLUMNS: list[tuple[str, pa.DataType, bool]] = [
    ("object_id", pa.utf8(), False),
    ("object_type", pa.utf8(), False),
    ("location", pa.utf8(), True),
    ("metadata", pa.utf8(), True),
    ("base_objects", pa.list_(pa.utf8()), True),
    ("read_version", pa.uint64(), True),
    ("read_branch", pa.utf8(), True),
    ("read_tag", pa.utf8(), True),
]

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("event_date", pa.date32()),
        pa.field("country", pa.utf8()),
    ]
)


def _rows(*rows: tuple[int, dt.date, str | None]) -> pa.Table:
    ids, dates, countries = zip(*rows, strict=True) if rows else ((), (), ())
    return pa.table(
        {"id": list(ids), "event_date": list(dates), "country": list(countries)}, schema=SCHEMA
    )


def _d(y: int, m: int, d: int) -> dt.date:
    return dt.date(y, m, d)


FIRST = _rows(
    (1, _d(2024, 1, 5), "US"),
    (2, _d(2025, 2, 6), "US"),
    (3, _d(2024, 3, 7), "FR"),
    (4, _d(2025, 4, 8), ODD_VALUE),
    (5, _d(2024, 5, 9), "US"),
)
SECOND = _rows(
    (6, _d(2024, 6, 10), "US"),  # existing partition: a detached commit
    (7, _d(2025, 7, 11), ODD_VALUE),  # existing partition
    (8, _d(2025, 8, 12), "FR"),  # new partition under an existing namespace
)


def _make_namespace(root: Path) -> PartitionedNamespace:
    """A namespace partitioned by country x year(event_date) with five partitions."""
    ns = PartitionedNamespace.create(
        root,
        schema=SCHEMA,
        partition_fields=[
            PartitionField.identity("country", field_id="country"),
            PartitionField.year("event_date", field_id="event_year"),
        ],
    )
    ns.write(FIRST)
    ns.write(SECOND, mode="append")
    return ns


def _expected_rows(country: str, year: int) -> list[dict[str, Any]]:
    every = pa.concat_tables([FIRST, SECOND]).to_pylist()
    return sorted(
        (r for r in every if r["country"] == country and r["event_date"].year == year),
        key=lambda r: r["id"],
    )


def _sorted(table: pa.Table) -> list[dict[str, Any]]:
    return table.sort_by("id").to_pylist()


def _manifest(root: Path, version: int | None = None) -> lance.LanceDataset:
    return lance.dataset(str(root / MANIFEST), version=version)


def _manifest_rows(ds: lance.LanceDataset) -> list[dict[str, Any]]:
    return sorted(ds.to_table().to_pylist(), key=lambda r: r["object_id"])


def _ipc(table: pa.Table) -> bytes:
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue()


def _table_dirs(root: Path) -> set[str]:
    return {p.name for p in root.iterdir() if p.is_dir() and p.name != MANIFEST}


# -- 1. pylance's DirectoryNamespace reads what we write -------------------------------------------


def test_directory_namespace_lists_and_describes_our_namespace(tmp_path: Path) -> None:
    root = tmp_path / "ns"
    ns = _make_namespace(root)
    parts = ns.inspect.partitions()
    assert len(parts) == 5
    dirns = lns.DirectoryNamespace(root=str(root))

    top = dirns.list_namespaces(lns.ListNamespacesRequest(id=[]))
    assert list(top.namespaces) == ["v1"]

    paths = [p["object_id"].split("$") for p in parts]
    for path in paths:
        assert len(path) == 4 and path[0] == "v1" and path[3] == "dataset"
        assert NAME16.match(path[1]) and NAME16.match(path[2]), path

    level1 = dirns.list_namespaces(lns.ListNamespacesRequest(id=["v1"]))
    assert sorted(level1.namespaces) == sorted({p[1] for p in paths})
    assert len(level1.namespaces) == 3  # US, FR, ODD_VALUE
    for name in level1.namespaces:
        assert NAME16.match(name), name
        level2 = dirns.list_namespaces(lns.ListNamespacesRequest(id=["v1", name]))
        assert sorted(level2.namespaces) == sorted(p[2] for p in paths if p[1] == name)
        for leaf in level2.namespaces:
            assert NAME16.match(leaf), leaf
            tables = dirns.list_tables(lns.ListTablesRequest(id=["v1", name, leaf]))
            assert list(tables.tables) == ["dataset"]
            # no table at intermediate levels
            assert list(dirns.list_tables(lns.ListTablesRequest(id=["v1", name])).tables) == []

    for part in parts:
        desc = dirns.describe_table(lns.DescribeTableRequest(id=part["object_id"].split("$")))
        location = desc.location
        assert location is not None
        assert location.rstrip("/").endswith("/" + part["location"])
        pinned = lance.dataset(location, version=part["read_version"])
        assert pinned.version == part["read_version"]
        values = part["values"]
        assert _sorted(pinned.to_table()) == _expected_rows(values["country"], values["event_year"])


def test_directory_namespace_sees_detached_read_versions_only_through_manifest(
    tmp_path: Path,
) -> None:
    """Updates of existing tables are detached: the table's main branch still has the first
    version, and only the manifest's read_version shows the new rows."""
    root = tmp_path / "ns"
    ns = _make_namespace(root)
    dirns = lns.DirectoryNamespace(root=str(root))
    us_2024 = next(
        p for p in ns.inspect.partitions() if p["values"] == {"country": "US", "event_year": 2024}
    )
    location = dirns.describe_table(
        lns.DescribeTableRequest(id=us_2024["object_id"].split("$"))
    ).location
    latest_main = lance.dataset(location)
    assert sorted(latest_main.to_table().column("id").to_pylist()) == [1, 5]
    pinned = lance.dataset(location, version=us_2024["read_version"])
    assert sorted(pinned.to_table().column("id").to_pylist()) == [1, 5, 6]


# -- 2. DirectoryNamespace mutations are refused ---------------------------------------------------


def test_directory_namespace_mutations_are_refused(tmp_path: Path) -> None:
    root = tmp_path / "ns"
    ns = _make_namespace(root)
    before_ds = _manifest(root)
    before_version = before_ds.version
    before_rows = _manifest_rows(before_ds)
    before_meta = dict(before_ds.metadata)
    before_schema = before_ds.schema
    before_data = _sorted(ns.to_table())
    before_dirs = _table_dirs(root)
    assert before_meta[FLAG_KEY] == str(1 << 62)
    assert "read_version" in before_schema.names
    assert "partition_field_country" in before_schema.names

    part = ns.inspect.partitions()[0]
    table_id = part["object_id"].split("$")
    leaf_ns = table_id[:-1]
    ipc = _ipc(FIRST)
    dirns = lns.DirectoryNamespace(root=str(root))

    mutations = {
        "create_namespace at root": lambda: dirns.create_namespace(
            lns.CreateNamespaceRequest(id=["other"])
        ),
        "create_namespace under v1": lambda: dirns.create_namespace(
            lns.CreateNamespaceRequest(id=["v1", "zzzzzzzzzzzzzzzz"])
        ),
        "drop_namespace leaf": lambda: dirns.drop_namespace(lns.DropNamespaceRequest(id=leaf_ns)),
        "drop_namespace v1 cascade": lambda: dirns.drop_namespace(
            lns.DropNamespaceRequest(id=["v1"], behavior="Cascade")
        ),
        "create_table at root": lambda: dirns.create_table(
            lns.CreateTableRequest(id=["other"]), ipc
        ),
        "create_table in partition namespace": lambda: dirns.create_table(
            lns.CreateTableRequest(id=[*leaf_ns, "other"]), ipc
        ),
        "create_table overwriting dataset": lambda: dirns.create_table(
            lns.CreateTableRequest(id=table_id, mode="overwrite"), ipc
        ),
        "deregister_table": lambda: dirns.deregister_table(lns.DeregisterTableRequest(id=table_id)),
        "drop_table": lambda: dirns.drop_table(lns.DropTableRequest(id=table_id)),
        "register_table": lambda: dirns.register_table(
            lns.RegisterTableRequest(id=[*leaf_ns, "again"], location=part["location"])
        ),
        "declare_table": lambda: dirns.declare_table(
            lns.DeclareTableRequest(id=[*leaf_ns, "declared"])
        ),
    }
    succeeded = []
    for name, call in mutations.items():
        try:
            call()
        except Exception:
            continue
        succeeded.append(name)
    assert succeeded == [], f"DirectoryNamespace mutations not refused: {succeeded}"

    after_ds = _manifest(root)
    assert after_ds.version == before_version
    assert _manifest_rows(after_ds) == before_rows
    assert dict(after_ds.metadata) == before_meta
    assert after_ds.schema == before_schema
    assert _table_dirs(root) == before_dirs

    reopened = PartitionedNamespace.open(root)
    assert reopened.version == before_version
    assert _sorted(reopened.to_table()) == before_data
    assert len(before_data) == FIRST.num_rows + SECOND.num_rows

    # reads through DirectoryNamespace still work after the refused mutations
    assert list(dirns.list_namespaces(lns.ListNamespacesRequest(id=[])).namespaces) == ["v1"]
    assert list(dirns.list_tables(lns.ListTablesRequest(id=leaf_ns)).tables) == ["dataset"]


def test_directory_namespace_refuses_dropping_an_empty_spec_namespace(tmp_path: Path) -> None:
    """A fresh namespace has only the ``v1`` row; dropping it would be allowed in a plain
    catalog and must be refused here."""
    root = tmp_path / "ns"
    PartitionedNamespace.create(
        root, schema=SCHEMA, partition_fields=[PartitionField.identity("country")]
    )
    before = _manifest(root)
    dirns = lns.DirectoryNamespace(root=str(root))
    with pytest.raises(Exception):  # noqa: B017 - pylance raises its own error types
        dirns.drop_namespace(lns.DropNamespaceRequest(id=["v1"]))
    after = _manifest(root)
    assert after.version == before.version
    assert _manifest_rows(after) == _manifest_rows(before)
    assert PartitionedNamespace.open(root).describe_namespace(["v1"])["partition_spec"]


# -- 3. directory layout and __manifest columns ----------------------------------------------------


def test_table_directories_are_hex_prefixed_object_ids(tmp_path: Path) -> None:
    root = tmp_path / "ns"
    ns = _make_namespace(root)
    parts = ns.inspect.partitions()
    locations = {p["location"] for p in parts}
    assert _table_dirs(root) == locations
    assert sorted(p.name for p in root.iterdir()) == sorted([MANIFEST, *locations])
    for part in parts:
        m = TABLE_DIR.match(part["location"])
        assert m is not None, part["location"]
        assert m.group(2) == part["object_id"], (part["location"], part["object_id"])


def test_new_partitions_sharing_a_new_namespace_get_matching_directories(
    tmp_path: Path,
) -> None:
    """Two new partitions under one new first-level namespace, in a single write."""
    root = tmp_path / "ns"
    ns = PartitionedNamespace.create(
        root,
        schema=SCHEMA,
        partition_fields=[
            PartitionField.identity("country", field_id="country"),
            PartitionField.year("event_date", field_id="event_year"),
        ],
    )
    ns.write(_rows((1, _d(2024, 1, 1), "US"), (2, _d(2025, 1, 1), "US")))
    parts = ns.inspect.partitions()
    assert len(parts) == 2
    assert len({p["object_id"].split("$")[1] for p in parts}) == 1
    for part in parts:
        m = TABLE_DIR.match(part["location"])
        assert m is not None and m.group(2) == part["object_id"], (
            part["location"],
            part["object_id"],
        )


def test_partition_values_never_appear_in_paths(tmp_path: Path) -> None:
    root = tmp_path / "ns"
    ns = _make_namespace(root)
    assert any(p["values"]["country"] == ODD_VALUE for p in ns.inspect.partitions())
    every_path = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        every_path.extend(os.path.join(rel, n) for n in dirnames + filenames)
    assert every_path
    for rel in every_path:
        for value in (ODD_VALUE, "b=c$%d", "%d", "=", "US", "FR"):
            assert value not in rel, rel
    # the odd value did not create nested directories either
    assert not (root / "a").exists()


def test_manifest_metadata_and_column_types(tmp_path: Path) -> None:
    root = tmp_path / "ns"
    ns = _make_namespace(root)
    ds = _manifest(root)
    meta = dict(ds.metadata)
    assert meta[FLAG_KEY] == str(1 << 62)
    assert {"schema", "partition_spec_v1", FLAG_KEY} <= set(meta)
    assert not any(k.startswith("partition_spec_v") and k != "partition_spec_v1" for k in meta)

    schema_json = json.loads(meta["schema"])
    assert [
        (f["name"], f["nullable"], f["type"]["type"], f["metadata"]["lance:field_id"])
        for f in schema_json["fields"]
    ] == [
        ("id", False, "int64", "0"),
        ("event_date", True, "date32", "1"),
        ("country", True, "utf8", "2"),
    ]
    assert json.loads(meta["partition_spec_v1"]) == {
        "id": 1,
        "fields": [
            {
                "field_id": "country",
                "source_ids": [2],
                "transform": {"type": "identity"},
                "result_type": {"type": "utf8"},
            },
            {
                "field_id": "event_year",
                "source_ids": [1],
                "transform": {"type": "year"},
                "result_type": {"type": "int32"},
            },
        ],
    }

    schema = ds.schema
    assert schema.names == [c for c, _, _ in BASE_COLUMNS] + [
        "partition_field_country",
        "partition_field_event_year",
        "dlp_stats",  # this package's extension: table statistics
    ]
    assert schema.field("dlp_stats").type == pa.utf8()
    for name, typ, nullable in BASE_COLUMNS:
        f = schema.field(name)
        assert f.nullable is nullable, name
        if name == "base_objects":
            assert pa.types.is_list(f.type) and f.type.value_type == pa.utf8()
        else:
            assert f.type == typ, (name, f.type)
    assert (schema.field("object_id").metadata or {}).get(PK_KEY.encode()) == b"0"
    assert schema.field("partition_field_country").type == pa.utf8()
    assert schema.field("partition_field_event_year").type == pa.int32()

    rows = {r["object_id"]: r for r in ds.to_table().to_pylist()}
    assert len(rows) == ds.count_rows()  # object_id is unique
    for oid, row in rows.items():
        assert isinstance(json.loads(row["metadata"]), dict)
        depth = oid.count("$")
        country, year = row["partition_field_country"], row["partition_field_event_year"]
        if row["object_type"] == "table":
            assert row["location"] and row["read_version"] is not None
            assert country is not None and year is not None
        else:
            assert row["object_type"] == "namespace"
            assert row["location"] is None and row["read_version"] is None
            # every row carries the values of all its ancestors, and only those
            assert (country is not None, year is not None) == (depth >= 1, depth >= 2), oid
    table_values = sorted(
        (r["partition_field_country"], r["partition_field_event_year"])
        for r in rows.values()
        if r["object_type"] == "table"
    )
    assert table_values == sorted(
        (p["values"]["country"], p["values"]["event_year"]) for p in ns.inspect.partitions()
    )


# -- 4. a namespace written by hand after the spec's appendices ------------------------------------

APPENDIX_A_V1 = {
    "id": 1,
    "fields": [
        {
            "field_id": "event_date",
            "source_ids": [1],
            "transform": {"type": "identity"},
            "result_type": {"type": "date32"},
        }
    ],
}
APPENDIX_A_V2 = {
    "id": 2,
    "fields": [
        {
            "field_id": "event_year",
            "source_ids": [1],
            "transform": {"type": "year"},
            "result_type": {"type": "int32"},
        },
        {
            "field_id": "country",
            "source_ids": [2],
            "transform": {"type": "identity"},
            "result_type": {"type": "utf8"},
        },
    ],
}
APPENDIX_A_SCHEMA = {
    "fields": [
        {
            "name": "id",
            "nullable": False,
            "type": {"type": "int64"},
            "metadata": {"lance:field_id": "0"},
        },
        {
            "name": "event_date",
            "nullable": True,
            "type": {"type": "date32"},
            "metadata": {"lance:field_id": "1"},
        },
        {
            "name": "country",
            "nullable": True,
            "type": {"type": "utf8"},
            "metadata": {"lance:field_id": "2"},
        },
    ]
}
V1_NS = "k7m2n9p4q8r5s3t6"
V2_NS1 = "e9f0g1h2i3j4k5l6"
V2_NS2 = "m7n8o9p0q1r2s3t4"
V1_TABLE = f"v1${V1_NS}$dataset"
V2_TABLE = f"v2${V2_NS1}${V2_NS2}$dataset"
V1_LOCATION = f"b4a3c2d1_{V1_TABLE}"
V2_LOCATION = f"aabbccdd_{V2_TABLE}"
DEC10 = _d(2025, 12, 10)


def _hand_manifest_schema() -> pa.Schema:
    fields = []
    for name, typ, nullable in BASE_COLUMNS:
        md = {PK_KEY: "0"} if name == "object_id" else None
        fields.append(pa.field(name, typ, nullable=nullable, metadata=md))
    fields += [
        pa.field("partition_field_event_date", pa.date32()),
        pa.field("partition_field_event_year", pa.int32()),
        pa.field("partition_field_country", pa.utf8()),
    ]
    return pa.schema(fields)


def _write_hand_namespace(root: Path) -> dict[str, int]:
    """The spec's example namespace, with plain pylance; returns the pinned read versions."""
    root.mkdir()
    # v1 table (event_date = 2025-12-10): version 1 is pinned; version 2 must stay invisible
    v1_uri = str(root / V1_LOCATION)
    lance.write_dataset(_rows((1, DEC10, "US"), (2, DEC10, "FR")), v1_uri)
    lance.write_dataset(_rows((3, DEC10, "US")), v1_uri, mode="append")
    # v2 table (event_year = 2025, country = US): version 2 is pinned; version 3 is not
    v2_uri = str(root / V2_LOCATION)
    lance.write_dataset(_rows((10, _d(2025, 3, 1), "US")), v2_uri)
    lance.write_dataset(_rows((11, DEC10, "US")), v2_uri, mode="append")
    lance.write_dataset(_rows((12, _d(2025, 7, 4), "US")), v2_uri, mode="append")
    assert lance.dataset(v1_uri).version == 2
    assert lance.dataset(v2_uri).version == 3
    pins = {V1_TABLE: 1, V2_TABLE: 2}

    def row(oid: str, kind: str, **kw: Any) -> dict[str, Any]:
        return {"object_id": oid, "object_type": kind, "metadata": "{}", **kw}

    rows = [
        row("v1", "namespace"),
        row(f"v1${V1_NS}", "namespace", partition_field_event_date=DEC10),
        row(
            V1_TABLE,
            "table",
            location=V1_LOCATION,
            read_version=pins[V1_TABLE],
            partition_field_event_date=DEC10,
        ),
        row("v2", "namespace"),
        row(f"v2${V2_NS1}", "namespace", partition_field_event_year=2025),
        row(
            f"v2${V2_NS1}${V2_NS2}",
            "namespace",
            partition_field_event_year=2025,
            partition_field_country="US",
        ),
        row(
            V2_TABLE,
            "table",
            location=V2_LOCATION,
            read_version=pins[V2_TABLE],
            partition_field_event_year=2025,
            partition_field_country="US",
        ),
    ]
    manifest_schema = _hand_manifest_schema()
    table = pa.Table.from_pylist(rows, schema=manifest_schema)
    ds = lance.write_dataset(table, str(root / MANIFEST))
    ds.update_metadata(
        {
            "schema": json.dumps(APPENDIX_A_SCHEMA),
            "partition_spec_v1": json.dumps(APPENDIX_A_V1),
            "partition_spec_v2": json.dumps(APPENDIX_A_V2),
            FLAG_KEY: "2",
        }
    )
    written = _manifest(root)
    assert written.schema.field("object_id").metadata == {PK_KEY.encode(): b"0"}
    assert written.schema.field("read_version").type == pa.uint64()
    assert dict(written.metadata)["partition_spec_v2"]
    return pins


def _ids(table: pa.Table) -> list[int]:
    return sorted(table.column("id").to_pylist())


def test_hand_written_namespace_schema_and_specs(tmp_path: Path) -> None:
    root = tmp_path / "hand"
    _write_hand_namespace(root)
    ns = PartitionedNamespace.open(root)

    assert ns.schema.names == ["id", "event_date", "country"]
    assert [f.type for f in ns.schema] == [pa.int64(), pa.date32(), pa.utf8()]
    assert [f.nullable for f in ns.schema] == [False, True, True]
    assert [(f.metadata or {}).get(b"lance:field_id") for f in ns.schema_with_ids] == [
        b"0",
        b"1",
        b"2",
    ]

    assert [s.spec_id for s in ns.specs] == [1, 2]
    assert ns.current_spec.spec_id == 2
    v1, v2 = ns.specs
    assert [(f.field_id, f.source_ids, f.result_type) for f in v1.fields] == [
        ("event_date", (1,), pa.date32())
    ]
    assert [(f.field_id, f.source_ids, f.result_type) for f in v2.fields] == [
        ("event_year", (1,), pa.int32()),
        ("country", (2,), pa.utf8()),
    ]
    assert [f.transform.type_name for f in v1.fields if f.transform] == ["identity"]
    assert [f.transform.type_name for f in v2.fields if f.transform] == ["year", "identity"]
    assert all(f.expression is None for f in (*v1.fields, *v2.fields))
    assert v1.to_json() == APPENDIX_A_V1
    assert v2.to_json() == APPENDIX_A_V2


def test_hand_written_namespace_partitions_and_reads(tmp_path: Path) -> None:
    root = tmp_path / "hand"
    pins = _write_hand_namespace(root)
    ns = PartitionedNamespace.open(root)

    parts = {p["object_id"]: p for p in ns.inspect.partitions()}
    assert set(parts) == {V1_TABLE, V2_TABLE}
    assert parts[V1_TABLE]["spec_id"] == 1
    assert parts[V1_TABLE]["values"] == {"event_date": DEC10}
    assert parts[V1_TABLE]["location"] == V1_LOCATION
    assert parts[V1_TABLE]["read_version"] == pins[V1_TABLE]
    assert parts[V2_TABLE]["spec_id"] == 2
    assert parts[V2_TABLE]["values"] == {"event_year": 2025, "country": "US"}
    assert parts[V2_TABLE]["location"] == V2_LOCATION
    assert parts[V2_TABLE]["read_version"] == pins[V2_TABLE]

    everything = ns.to_table()
    assert everything.schema.names == ["id", "event_date", "country"]
    # ids 3 and 12 exist only in versions newer than the pinned ones
    assert _sorted(everything) == _sorted(
        _rows(
            (1, DEC10, "US"),
            (2, DEC10, "FR"),
            (10, _d(2025, 3, 1), "US"),
            (11, DEC10, "US"),
        )
    )
    assert _ids(ns.to_table("country = 'US'")) == [1, 10, 11]
    assert _ids(ns.to_table("country = 'FR'")) == [2]

    # the same predicate with a DATE literal
    dated = "event_date = DATE '2025-12-10' AND country = 'US'"
    plan = ns.plan_scan(dated)
    assert {t.object_id for t in plan.tasks} == {V1_TABLE, V2_TABLE}
    assert _ids(ns.to_table(dated)) == [1, 11]

    # an event_date the v1 table cannot hold prunes it; v2 still has to be read
    plan = ns.plan_scan("event_date = DATE '2025-03-01'")
    assert {t.object_id for t in plan.tasks} == {V2_TABLE}
    assert _ids(ns.to_table("event_date = DATE '2025-03-01'")) == [10]


def test_hand_written_namespace_appendix_d_query(tmp_path: Path) -> None:
    """The spec's Appendix D predicate, verbatim (a string literal compared with a date)."""
    root = tmp_path / "hand"
    pins = _write_hand_namespace(root)
    ns = PartitionedNamespace.open(root)
    query = "event_date = '2025-12-10' AND country = 'US'"
    plan = ns.plan_scan(query)
    # v1 cannot prune on country; v2's year transform is not used for pruning (yet)
    assert {t.object_id for t in plan.tasks} == {V1_TABLE, V2_TABLE}
    by_id = {t.object_id: t for t in plan.tasks}
    assert by_id[V1_TABLE].read_version == pins[V1_TABLE]
    assert by_id[V2_TABLE].read_version == pins[V2_TABLE]
    assert by_id[V1_TABLE].partition_values == {"event_date": DEC10}
    assert by_id[V2_TABLE].partition_values == {"event_year": 2025, "country": "US"}
    assert _ids(ns.to_table(query)) == [1, 11]


def test_hand_written_namespace_runtime_properties(tmp_path: Path) -> None:
    root = tmp_path / "hand"
    _write_hand_namespace(root)
    ns = PartitionedNamespace.open(root)

    v1 = ns.describe_namespace(["v1"])
    assert set(v1) == {"partition_spec"}
    assert json.loads(v1["partition_spec"]) == APPENDIX_A_V1
    assert json.loads(ns.describe_namespace(["v2"])["partition_spec"]) == APPENDIX_A_V2
    assert ns.describe_namespace(["v1", V1_NS]) == {"partition.event_date": "2025-12-10"}
    assert ns.describe_namespace(["v2", V2_NS1]) == {"partition.event_year": "2025"}
    assert ns.describe_namespace(["v2", V2_NS1, V2_NS2]) == {"partition.country": "US"}


def test_directory_namespace_reads_hand_written_namespace(tmp_path: Path) -> None:
    root = tmp_path / "hand"
    pins = _write_hand_namespace(root)
    dirns = lns.DirectoryNamespace(root=str(root))
    assert sorted(dirns.list_namespaces(lns.ListNamespacesRequest(id=[])).namespaces) == [
        "v1",
        "v2",
    ]
    assert list(dirns.list_namespaces(lns.ListNamespacesRequest(id=["v2"])).namespaces) == [V2_NS1]
    location = dirns.describe_table(lns.DescribeTableRequest(id=V2_TABLE.split("$"))).location
    assert location.rstrip("/").endswith(V2_LOCATION)
    assert _ids(lance.dataset(location, version=pins[V2_TABLE]).to_table()) == [10, 11]


def test_writing_to_hand_written_namespace_uses_current_spec(tmp_path: Path) -> None:
    root = tmp_path / "hand"
    pins = _write_hand_namespace(root)
    ns = PartitionedNamespace.open(root)
    v1_before = next(r for r in _manifest_rows(_manifest(root)) if r["object_id"] == V1_TABLE)

    result = ns.write(
        _rows(
            (20, _d(2025, 5, 5), "US"),  # existing v2 table (2025, US)
            (21, _d(2025, 6, 6), "DE"),  # new table under the existing 2025 namespace
            (22, _d(2024, 1, 1), "FR"),  # new table under a new year namespace
            (23, DEC10, "FR"),  # a v1-like date still goes to spec v2
        )
    )
    assert result.spec_id == 2
    assert result.rows_written == 4
    written = {tuple(sorted(p.values.items())): p for p in result.partitions}
    assert set(written) == {
        (("country", "US"), ("event_year", 2025)),
        (("country", "DE"), ("event_year", 2025)),
        (("country", "FR"), ("event_year", 2024)),
        (("country", "FR"), ("event_year", 2025)),
    }
    for p in result.partitions:
        assert p.object_id.startswith("v2$"), p.object_id
        assert p.object_id.endswith("$dataset")
    us = written[(("country", "US"), ("event_year", 2025))]
    assert us.object_id == V2_TABLE and us.location == V2_LOCATION and not us.created
    de = written[(("country", "DE"), ("event_year", 2025))]
    assert de.created and de.object_id.split("$")[1] == V2_NS1  # existing year namespace reused
    fr24 = written[(("country", "FR"), ("event_year", 2024))]
    assert fr24.created and fr24.object_id.split("$")[1] != V2_NS1
    for p in result.partitions:
        if p.created:
            m = TABLE_DIR.match(p.location)
            assert m is not None and m.group(2) == p.object_id
            assert (root / p.location).is_dir()

    ns = PartitionedNamespace.open(root)
    # the hand-written v1 table is still read at its pinned version (row 3 stays invisible).
    # Row 12 (the v2 table's unpinned version 3) is checked in
    # test_append_to_hand_written_table_builds_on_read_version.
    ids = _ids(ns.to_table())
    assert 3 not in ids
    assert [i for i in ids if i != 12] == [1, 2, 10, 11, 20, 21, 22, 23]
    assert _ids(ns.to_table("country = 'FR'")) == [2, 22, 23]
    assert _ids(ns.to_table("event_date = DATE '2025-12-10' AND id < 12")) == [1, 2, 11]
    assert _ids(ns.to_table("country = 'DE'")) == [21]
    parts = {p["object_id"]: p for p in ns.inspect.partitions()}
    assert parts[V1_TABLE]["read_version"] == pins[V1_TABLE]
    assert parts[V2_TABLE]["read_version"] != pins[V2_TABLE]
    assert len(parts) == 5
    assert sum(1 for p in parts.values() if p["spec_id"] == 2) == 4

    after = _manifest(root)
    assert dict(after.metadata)[FLAG_KEY] == "2"
    assert json.loads(dict(after.metadata)["partition_spec_v1"]) == APPENDIX_A_V1
    # untouched, but for the statistics column this package's first commit added (NULL)
    assert next(r for r in _manifest_rows(after) if r["object_id"] == V1_TABLE) == {
        **v1_before,
        "dlp_stats": None,
    }
    for name in ("partition_field_event_date", "partition_field_event_year"):
        assert name in after.schema.names
    # new namespace rows carry their ancestors' partition values
    new_year_ns = "$".join(fr24.object_id.split("$")[:2])
    row = next(r for r in _manifest_rows(after) if r["object_id"] == new_year_ns)
    assert row["object_type"] == "namespace"
    assert row["partition_field_event_year"] == 2024
    assert row["partition_field_country"] is None
    assert row["partition_field_event_date"] is None


def test_append_to_hand_written_table_builds_on_read_version(tmp_path: Path) -> None:
    """The v2 table's main branch is at version 3 but the manifest pins version 2: an append
    must build on version 2, never make the unregistered version 3's rows visible."""
    root = tmp_path / "hand"
    pins = _write_hand_namespace(root)
    ns = PartitionedNamespace.open(root)
    assert _ids(ns.to_table("country = 'US'")) == [1, 10, 11]
    result = ns.write(_rows((20, _d(2025, 5, 5), "US")))
    (written,) = result.partitions
    assert written.object_id == V2_TABLE and not written.created
    assert written.read_version != pins[V2_TABLE]
    pinned = lance.dataset(str(root / V2_LOCATION), version=written.read_version)
    assert _ids(pinned.to_table()) == [10, 11, 20]
    assert _ids(PartitionedNamespace.open(root).to_table("country = 'US'")) == [1, 10, 11, 20]


# -- 5. unknown __manifest columns survive our writes ----------------------------------------------


def _owners(root: Path) -> dict[str, str | None]:
    ds = _manifest(root)
    assert ds.schema.field("owner").type == pa.utf8()
    return {r["object_id"]: r["owner"] for r in ds.to_table().to_pylist()}


def test_unknown_manifest_columns_survive_writes(tmp_path: Path) -> None:
    root = tmp_path / "ns"
    ns = _make_namespace(root)
    ds = _manifest(root)
    ds.add_columns({"owner": "concat('owner:', object_id)"})
    ds = _manifest(root)
    assert dict(ds.metadata)[FLAG_KEY] == str(1 << 62)
    original = _owners(root)
    assert original and all(v == f"owner:{k}" for k, v in original.items())

    ns = PartitionedNamespace.open(root)
    assert _ids(ns.to_table()) == list(range(1, 9))

    # append: one existing partition, one new partition under a new namespace
    ns.write(_rows((9, _d(2024, 9, 9), "US"), (10, _d(2025, 10, 10), "JP")))
    owners = _owners(root)
    assert {k: v for k, v in owners.items() if k in original} == original
    new_ids = set(owners) - set(original)
    assert len(new_ids) == 3  # JP namespace, JP$2025 namespace, its table
    assert all(owners[k] is None for k in new_ids)
    assert _ids(ns.to_table()) == list(range(1, 11))

    # overwrite_partitions: the FR 2024 table is replaced, its row stays (with its owner)
    fr_2024 = next(
        p["object_id"]
        for p in ns.inspect.partitions()
        if p["values"] == {"country": "FR", "event_year": 2024}
    )
    ns.write(_rows((11, _d(2024, 11, 11), "FR")), mode="overwrite_partitions")
    owners = _owners(root)
    assert owners[fr_2024] == f"owner:{fr_2024}"
    assert {k: v for k, v in owners.items() if k in original} == original
    assert _ids(ns.to_table()) == [1, 2, 4, 5, 6, 7, 8, 9, 10, 11]

    # overwrite: only US 2024 remains; rows that still exist keep their owners
    us_2024 = next(
        p["object_id"]
        for p in ns.inspect.partitions()
        if p["values"] == {"country": "US", "event_year": 2024}
    )
    ns.write(_rows((12, _d(2024, 12, 12), "US")), mode="overwrite")
    owners = _owners(root)
    us_ns = "$".join(us_2024.split("$")[:2])
    us_leaf_ns = "$".join(us_2024.split("$")[:3])
    assert set(owners) == {"v1", us_ns, us_leaf_ns, us_2024}
    assert owners == {k: f"owner:{k}" for k in owners}
    assert _ids(PartitionedNamespace.open(root).to_table()) == [12]

    final = _manifest(root)
    assert dict(final.metadata)[FLAG_KEY] == str(1 << 62)
    assert final.schema.field("read_version").type == pa.uint64()
    assert "partition_field_country" in final.schema.names


def test_legacy_writer_flag_opens_writes_and_upgrades(tmp_path: Path) -> None:
    """A namespace written with the earlier flag value 2 (now Lance's next bit) still opens and
    takes writes; ``upgrade()`` replaces that bit with ours and keeps any other bits."""
    root = tmp_path / "legacy"
    ns = _make_namespace(root)
    _manifest(root).update_metadata({FLAG_KEY: str(2 | 1)})  # legacy bit + Lance's lifecycle bit
    ns = PartitionedNamespace.open(root)
    rows = ns.count_rows()
    ns.write(FIRST.slice(0, 1))
    assert PartitionedNamespace.open(root).count_rows() == rows + 1
    assert dict(_manifest(root).metadata)[FLAG_KEY] == "3"  # writes leave the flags alone
    ns.upgrade()
    assert dict(_manifest(root).metadata)[FLAG_KEY] == str(1 | (1 << 62))
    version = _manifest(root).version
    ns.upgrade()  # idempotent
    assert _manifest(root).version == version


def test_writer_flag_is_ored_into_existing_flags() -> None:
    from dagster_lance_partitioned.core.manifest.layout import writer_flags

    assert writer_flags(None) == str(1 << 62)
    assert writer_flags("1") == str(1 | 1 << 62)
    assert writer_flags("2") == str(1 << 62)  # legacy value: replaced
    assert writer_flags(str(2 | 1 << 62)) == str(2 | 1 << 62)  # Lance's bit 2 next to ours: kept
