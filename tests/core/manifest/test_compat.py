"""Draft-shaped namespaces (Jan-2026 draft): reading them as they are, and upgrading them."""

from __future__ import annotations

import datetime as dt
import json
import os
import secrets

import lance
import pyarrow as pa
import pytest
from helpers.data import sorted_rows

from dagster_lance_partitioned import PartitionedNamespace, PartitionField
from dagster_lance_partitioned.core.errors import WriteError
from dagster_lance_partitioned.core.manifest import upgrade as compat
from dagster_lance_partitioned.core.manifest.layout import WRITER_FLAG_KEY
from dagster_lance_partitioned.core.manifest.snapshot import ManifestSnapshot
from dagster_lance_partitioned.core.manifest.store import ManifestEdit, ManifestStore
from dagster_lance_partitioned.core.partitioning.partition_spec import (
    PartitionSpec,
    SpecField,
    specs_from_metadata,
)
from dagster_lance_partitioned.core.partitioning.transforms import Truncate

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("event_date", pa.date32()),
        pa.field("country", pa.utf8()),
        pa.field("value", pa.float64()),
    ]
)


def _json_field(name: str, type_name: str, field_id: int, nullable: bool = True) -> dict:
    return {
        "name": name,
        "nullable": nullable,
        "type": {"type": type_name},
        "metadata": {"lance:field_id": str(field_id)},
    }


DRAFT_SCHEMA_JSON = {
    "fields": [
        _json_field("id", "int64", 0, nullable=False),
        _json_field("event_date", "date32", 1),
        _json_field("country", "utf8", 2),
        _json_field("value", "float64", 3),
    ]
}
DRAFT_V1 = [
    {
        "field_id": 1,
        "name": "event_date",
        "source_id": 1,
        "expression": "col",
        "result_type": {"type": "date32"},
    }
]
DRAFT_V2 = [
    {
        "field_id": 2,
        "name": "event_year",
        "source_id": 1,
        "expression": "date_part('year', col)",
        "result_type": {"type": "int32"},
    },
    {
        "field_id": 3,
        "name": "country",
        "source_id": 2,
        "expression": "col",
        "result_type": {"type": "utf8"},
    },
]
D10, D11 = dt.date(2025, 12, 10), dt.date(2025, 12, 11)
DRAFT_MANIFEST = pa.schema(
    [
        pa.field("object_id", pa.utf8(), nullable=False),
        pa.field("object_type", pa.utf8(), nullable=False),
        pa.field("location", pa.utf8()),
        pa.field("metadata", pa.utf8()),
        pa.field("read_version", pa.uint64()),
        pa.field("event_date", pa.date32()),
        pa.field("event_year", pa.int32()),
        pa.field("country", pa.utf8()),
        pa.field("note", pa.utf8()),  # a column this package does not know
    ]
)


def _rows(ids: list[int], dates: list[dt.date], countries: list[str]) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "event_date": pa.array(dates, pa.date32()),
            "country": countries,
            "value": [float(i) / 2 for i in ids],
        },
        schema=SCHEMA,
    )


# rows of each draft partition table
V1_TABLES = {
    D10: _rows([0, 1, 2], [D10] * 3, ["US", "FR", "DE"]),
    D11: _rows([3, 4], [D11] * 2, ["US", "FR"]),
}
V2_TABLES = {
    (2026, "US"): _rows([10, 11], [dt.date(2026, 1, 1), dt.date(2026, 2, 1)], ["US", "US"]),
    (2026, "FR"): _rows([12], [dt.date(2026, 3, 1)], ["FR"]),
}
ALL_ROWS = pa.concat_tables([*V1_TABLES.values(), *V2_TABLES.values()])


def _name() -> str:
    return "".join(secrets.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(16))


def build_draft_namespace(root: str) -> str:
    """A namespace exactly in the draft's shape (Appendix A / C), made with plain pylance."""
    os.makedirs(root)
    rows: list[dict] = []

    def add_table(oid: str, data: pa.Table, **values: object) -> None:
        location = f"{secrets.token_hex(4)}_{oid}"
        ds = lance.write_dataset(data, os.path.join(root, location))
        rows.append(
            {
                "object_id": oid,
                "object_type": "table",
                "location": location,
                "metadata": "{}",
                "read_version": ds.version,
                "note": "kept",
                **values,
            }
        )

    rows.append({"object_id": "v1", "object_type": "namespace", "metadata": "{}"})
    for day, data in V1_TABLES.items():
        ns = f"v1${_name()}"
        rows.append(
            {"object_id": ns, "object_type": "namespace", "metadata": "{}", "event_date": day}
        )
        add_table(f"{ns}$dataset", data, event_date=day)
    rows.append({"object_id": "v2", "object_type": "namespace", "metadata": "{}"})
    year_ns = f"v2${_name()}"
    rows.append(
        {"object_id": year_ns, "object_type": "namespace", "metadata": "{}", "event_year": 2026}
    )
    for (year, country), data in V2_TABLES.items():
        ns = f"{year_ns}${_name()}"
        values = {"event_year": year, "country": country}
        rows.append({"object_id": ns, "object_type": "namespace", "metadata": "{}", **values})
        add_table(f"{ns}$dataset", data, **values)
    manifest = lance.write_dataset(
        pa.Table.from_pylist(rows, schema=DRAFT_MANIFEST), os.path.join(root, "__manifest")
    )
    manifest.update_metadata(
        {
            "schema": json.dumps(DRAFT_SCHEMA_JSON),
            "partition_spec_v1": json.dumps(DRAFT_V1),
            "partition_spec_v2": json.dumps(DRAFT_V2),
        }
    )
    return root


@pytest.fixture
def draft_root(tmp_path) -> str:
    return build_draft_namespace(str(tmp_path / "draft"))


def _manifest(root: str) -> lance.LanceDataset:
    return lance.dataset(os.path.join(root, "__manifest"))


def _table_values(root: str, column: str) -> dict[str, object]:
    return {
        r["object_id"]: r[column]
        for r in _manifest(root).to_table().to_pylist()
        if r["object_type"] == "table"
    }


def _check_reads(ns: PartitionedNamespace) -> None:
    assert ns.schema == SCHEMA
    assert sorted_rows(ns.to_table()) == sorted_rows(ALL_ROWS)
    us = ns.to_table("country = 'US'")
    assert sorted(us["id"].to_pylist()) == [0, 3, 10, 11]
    assert sorted(ns.to_table([("event_date", "=", D11)])["id"].to_pylist()) == [3, 4]
    assert ns.count_rows("event_date >= DATE '2026-01-01'") == 3


# -- reading the draft shape as it is -------------------------------------------------------------


def test_open_reads_draft_namespace(draft_root):
    ns = PartitionedNamespace.open(draft_root)
    assert [s.spec_id for s in ns.specs] == [1, 2]
    assert all(s.draft for s in ns.specs)
    v1, v2 = ns.specs
    assert [(f.field_id, f.column, f.expression) for f in v1.fields] == [
        ("event_date", "event_date", "col0")
    ]
    assert [(f.field_id, f.column, f.expression) for f in v2.fields] == [
        ("event_year", "event_year", "date_part('year', col0)"),
        ("country", "country", "col0"),
    ]
    values = sorted(
        (p["spec_id"], tuple(p["values"].values()))
        for p in ns.inspect.partitions()
        if p["spec_id"] == 2
    )
    assert values == [(2, (2026, "FR")), (2, (2026, "US"))]
    parts = ns.inspect.partitions()
    assert {p["values"]["event_date"] for p in parts if p["spec_id"] == 1} == {D10, D11}
    _check_reads(ns)


def test_draft_identity_expression_prunes(draft_root):
    ns = PartitionedNamespace.open(draft_root)
    plan = ns.plan_scan("country = 'US'")
    # v1 has no country field: both v1 tables stay; v2 keeps only the US table
    assert len(plan.tasks) == 3
    assert [t.partition_values for t in plan.tasks if t.spec_id == 2] == [
        {"event_year": 2026, "country": "US"}
    ]
    plan = ns.plan_scan([("event_date", "=", D10)])
    assert {t.partition_values.get("event_date") for t in plan.tasks if t.spec_id == 1} == {D10}
    assert sorted(ns.to_table([("event_date", "=", D10)])["id"].to_pylist()) == [0, 1, 2]


def test_write_into_draft_namespace_uses_draft_columns(draft_root):
    ns = PartitionedNamespace.open(draft_root)
    new = _rows([20, 21], [dt.date(2026, 5, 1), dt.date(2027, 1, 1)], ["US", "JP"])
    result = ns.write(new)
    assert result.spec_id == 2
    # (2026, US) existed: appended; (2027, JP) is new
    got = sorted(
        (p.values["event_year"], p.values["country"], p.created) for p in result.partitions
    )
    assert got == [(2026, "US", False), (2027, "JP", True)]
    created = next(p for p in result.partitions if p.created)
    raw = {r["object_id"]: r for r in _manifest(draft_root).to_table().to_pylist()}
    assert raw[created.object_id]["event_year"] == 2027
    assert raw[created.object_id]["country"] == "JP"
    assert "partition_field_country" not in _manifest(draft_root).schema.names
    assert sorted_rows(ns.to_table()) == sorted_rows(pa.concat_tables([ALL_ROWS, new]))
    assert sorted(ns.to_table("country = 'JP'")["id"].to_pylist()) == [21]


# -- upgrade ------------------------------------------------------------------------------------


def test_upgrade_rewrites_specs_and_columns(draft_root):
    ns = PartitionedNamespace.open(draft_root)
    before = ns.version
    version = ns.upgrade()
    assert version == ns.version == before + 2  # one manifest commit + one metadata commit
    md = _manifest(draft_root).metadata
    assert json.loads(md["partition_spec_v1"]) == {
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
    assert json.loads(md["partition_spec_v2"])["fields"] == [
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
    ]
    assert md[WRITER_FLAG_KEY] == str(1 << 62)
    assert md["schema"] == json.dumps(DRAFT_SCHEMA_JSON)  # the schema is already current
    assert not any(s.draft for s in specs_from_metadata(md))
    # new columns filled from the draft ones, which survive (as does the unknown column)
    manifest = _manifest(draft_root)
    names = manifest.schema.names
    for col in ("event_date", "event_year", "country", "note", "read_branch", "read_tag"):
        assert col in names
    pk = manifest.schema.field("object_id").metadata
    assert pk[b"lance-schema:unenforced-primary-key:position"] == b"0"
    for draft, new in [
        ("event_date", "partition_field_event_date"),
        ("event_year", "partition_field_event_year"),
        ("country", "partition_field_country"),
    ]:
        table = manifest.to_table(columns=[draft, new, "object_id"])
        assert table[draft].to_pylist() == table[new].to_pylist()
        assert table[new].null_count < table.num_rows
    assert set(_table_values(draft_root, "note").values()) == {"kept"}


def test_upgraded_namespace_reads_prunes_and_writes(draft_root):
    ns = PartitionedNamespace.open(draft_root)
    tables_before = sorted(
        (p["object_id"], p["location"], p["read_version"]) for p in ns.inspect.partitions()
    )
    ns.upgrade()
    ns = PartitionedNamespace.open(draft_root)
    assert not any(s.draft for s in ns.specs)
    assert [f.column for f in ns.specs[1].fields] == [
        "partition_field_event_year",
        "partition_field_country",
    ]
    assert ns.specs[0].fields[0].transform is not None
    assert (
        sorted((p["object_id"], p["location"], p["read_version"]) for p in ns.inspect.partitions())
        == tables_before
    )
    _check_reads(ns)
    plan = ns.plan_scan("country = 'US'")
    assert len(plan.tasks) == 3 and plan.pruned == 1
    plan = ns.plan_scan([("event_date", "=", D10)])
    assert {t.partition_values.get("event_date") for t in plan.tasks if t.spec_id == 1} == {D10}
    new = _rows([30], [dt.date(2027, 1, 1)], ["JP"])
    result = ns.write(new)
    (part,) = result.partitions
    assert part.created and part.values == {"event_year": 2027, "country": "JP"}
    raw = {r["object_id"]: r for r in _manifest(draft_root).to_table().to_pylist()}
    assert raw[part.object_id]["partition_field_country"] == "JP"
    assert raw[part.object_id]["partition_field_event_year"] == 2027
    assert raw[part.object_id]["country"] is None  # the draft columns are no longer written
    assert sorted(ns.to_table("country = 'JP'")["id"].to_pylist()) == [30]
    assert ns.count_rows() == ALL_ROWS.num_rows + 1


def test_upgrade_is_idempotent(draft_root):
    ns = PartitionedNamespace.open(draft_root)
    version = ns.upgrade()
    rows = _manifest(draft_root).to_table()
    assert ns.upgrade() == version
    assert _manifest(draft_root).version == version
    assert _manifest(draft_root).to_table().equals(rows)


def test_upgrade_of_current_shape_namespace_is_a_noop(tmp_path):
    ns = PartitionedNamespace.create(tmp_path / "ns", SCHEMA, [PartitionField.identity("country")])
    ns.write(ALL_ROWS)
    before = ns.version
    metadata = _manifest(ns.uri).metadata
    assert ns.upgrade() == before
    assert _manifest(ns.uri).version == before
    assert _manifest(ns.uri).metadata == metadata


def test_interrupted_upgrade_reads_correctly_and_completes(draft_root):
    ns = PartitionedNamespace.open(draft_root)
    before = ns.version
    assert compat.migrate_rows(ns) == before + 1
    # step 1 alone: columns added, draft specs still in force, everything reads the same
    ns = PartitionedNamespace.open(draft_root)
    assert ns.version == before + 1
    assert all(s.draft for s in ns.specs)
    assert "partition_field_country" in _manifest(draft_root).schema.names
    _check_reads(ns)
    assert len(ns.plan_scan("country = 'US'").tasks) == 3
    # a write under the draft specs in between fills only the draft columns ...
    new = _rows([40], [dt.date(2028, 1, 1)], ["IT"])
    (part,) = ns.write(new).partitions
    raw = {r["object_id"]: r for r in _manifest(draft_root).to_table().to_pylist()}
    assert raw[part.object_id]["country"] == "IT"
    assert raw[part.object_id]["partition_field_country"] is None
    # ... and re-running completes the upgrade, filling those rows too
    version = ns.upgrade()
    ns = PartitionedNamespace.open(draft_root)
    assert ns.version == version
    assert not any(s.draft for s in ns.specs)
    raw = {r["object_id"]: r for r in _manifest(draft_root).to_table().to_pylist()}
    assert raw[part.object_id]["partition_field_country"] == "IT"
    assert raw[part.object_id]["partition_field_event_year"] == 2028
    assert sorted(ns.to_table("country = 'IT'")["id"].to_pylist()) == [40]
    assert [t.partition_values for t in ns.plan_scan("country = 'IT'").tasks if t.spec_id == 2] == [
        {"event_year": 2028, "country": "IT"}
    ]


def test_migrate_rows_twice_commits_once(draft_root):
    ns = PartitionedNamespace.open(draft_root)
    version = compat.migrate_rows(ns)
    assert compat.migrate_rows(ns) == version
    assert _manifest(draft_root).version == version


def test_rows_committed_under_draft_specs_after_the_switch_are_repaired(draft_root):
    """A draft-spec commit rebased under the spec switch leaves rows with only draft values; the
    repair pass with the pinned conversion fills them."""
    ns = PartitionedNamespace.open(draft_root)
    snap = ManifestSnapshot(_manifest(draft_root), ns.specs)
    conversion = compat.plan_conversion(snap.specs, ns.schema_with_ids)
    ns.upgrade()
    store = ManifestStore(ns.uri)
    year_ns = next(p["object_id"] for p in ns.inspect.partitions() if p["spec_id"] == 2).split("$")[
        :2
    ]
    oid = "$".join([*year_ns, "zzzzzzzzzzzzzzzz", "dataset"])
    location = "0000abcd_" + oid  # a directory of its own (the repair only fills values)

    def plan(_snap: ManifestSnapshot) -> ManifestEdit:
        row = {"object_type": "table", "location": location, "metadata": "{}"}
        return ManifestEdit(upserts={oid: {**row, "event_year": 2026, "country": "NL"}})

    store.commit(lambda ds: ManifestSnapshot(ds, specs_from_metadata(dict(ds.metadata))), plan)
    raw = {r["object_id"]: r for r in _manifest(draft_root).to_table().to_pylist()}
    assert raw[oid]["partition_field_country"] is None
    repaired, _ = compat._fill_commit(store, fixed=conversion)
    raw = {r["object_id"]: r for r in _manifest(draft_root).to_table().to_pylist()}
    assert raw[oid]["partition_field_country"] == "NL"
    assert raw[oid]["partition_field_event_year"] == 2026
    assert repaired.version == _manifest(draft_root).version
    # values set under the current specs are never overwritten by (NULL) draft values
    assert all(
        r["partition_field_event_year"] is not None
        for r in raw.values()
        if r["object_id"].startswith("v2$")
    )


def test_upgrade_refuses_a_pinned_namespace(draft_root):
    ns = PartitionedNamespace.open(draft_root, version=_manifest(draft_root).version)
    with pytest.raises(WriteError, match="opened at manifest version"):
        ns.upgrade()
    assert all(s.draft for s in PartitionedNamespace.open(draft_root).specs)


# -- recognising well-known expressions ---------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "source", "result", "expected"),
    [
        ("col0", pa.utf8(), pa.utf8(), {"type": "identity"}),
        ("col0", pa.int32(), pa.int64(), None),  # declared type differs: keep the expression
        ("date_part('year', col0)", pa.date32(), pa.int32(), {"type": "year"}),
        ("DATE_PART( 'Month' , col0 )", pa.timestamp("us"), pa.int32(), {"type": "month"}),
        ("date_part('hour', col0)", pa.date32(), pa.int32(), None),  # hour needs a timestamp
        ("date_part('day', col0)", pa.date32(), pa.int64(), None),
        ("left(col0, 3)", pa.utf8(), pa.utf8(), {"type": "truncate", "width": 3}),
        ("col0 - (col0 % 10)", pa.int64(), pa.int64(), {"type": "truncate", "width": 10}),
        ("left(col0, 3)", pa.int64(), pa.int64(), None),
        ("abs(hash(col0)) % 16", pa.utf8(), pa.int64(), None),  # xxhash64, not the bucket transform
        ("upper(col0)", pa.utf8(), pa.utf8(), None),
    ],
)
def test_known_transforms(expression, source, result, expected):
    schema = pa.schema([pa.field("c", source, metadata={"lance:field_id": "7"})])
    draft = SpecField("f", (7,), result, expression=expression, column="f")
    converted = compat.convert_field(draft, schema, "f")
    if expected is None:
        assert converted.transform is None and converted.expression == expression
    else:
        assert converted.transform is not None and converted.transform.to_json() == expected
        assert converted.expression is None
    assert converted.column == "partition_field_f"


def test_field_ids_reuse_identical_definitions_and_never_clash():
    schema = pa.schema(
        [
            pa.field("a", pa.utf8(), metadata={"lance:field_id": "0"}),
            pa.field("b", pa.int64(), metadata={"lance:field_id": "1"}),
        ]
    )
    v1 = PartitionSpec(1, (SpecField("k", (0,), pa.utf8(), expression="col0", column="k"),), True)
    # v2: same definition under another name (reuses v1's id); the name k for another definition
    v2 = PartitionSpec(
        2,
        (
            SpecField("a_again", (0,), pa.utf8(), expression="col0", column="a_again"),
            SpecField("k", (1,), pa.int64(), expression="col0 - (col0 % 5)", column="k"),
        ),
        True,
    )
    conv = compat.plan_conversion({1: v1, 2: v2}, schema)
    assert [f.field_id for f in conv.specs[1].fields] == ["k"]
    assert [f.field_id for f in conv.specs[2].fields] == ["k", "k_2"]
    assert conv.specs[2].fields[1].transform == Truncate(5)
    assert conv.fills == {
        "partition_field_k": [(1, "k"), (2, "a_again")],
        "partition_field_k_2": [(2, "k")],
    }


def test_a_write_merged_with_a_concurrent_upgrade_switch_is_repaired(draft_root, monkeypatch):
    """A write planned under the draft specs whose manifest commit lands just after an upgrade
    switched them (Lance merges the two commits) still gets its current-shape columns."""
    from dagster_lance_partitioned.core.manifest import store as manifest_mod

    ns = PartitionedNamespace.open(draft_root)
    compat.migrate_rows(ns)  # step 1 done: the upgrade below is only the spec switch
    upgrader = PartitionedNamespace.open(draft_root)
    real = manifest_mod.build_transaction
    ran = []

    def upgrade_first(*args, **kwargs):
        if not ran:
            ran.append("upgrading")
            upgrader.upgrade()  # lands between the write's plan and its commit
        return real(*args, **kwargs)

    monkeypatch.setattr(manifest_mod, "build_transaction", upgrade_first)
    row = {"id": 99, "event_date": dt.date(2026, 3, 1), "country": "NL"}
    ns.write(pa.Table.from_pylist([row], schema=ns.schema))
    assert ran
    fresh = PartitionedNamespace.open(draft_root)
    assert not any(s.draft for s in fresh.specs)
    assert fresh.to_table("country = 'NL'").column("id").to_pylist() == [99]
    assert 99 in fresh.to_table("event_date >= DATE '2026-01-01'").column("id").to_pylist()
