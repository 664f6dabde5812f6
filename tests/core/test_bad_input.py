"""Bad input that used to be accepted and then could not be read back is refused up front, and
everything accepted round-trips.

1. Column names: Lance cannot write a top-level name with a ``.``, reads back no column named
   with a backtick, the empty name, NUL or ``*``, and refuses its reserved row-id names; these
   are refused by ``create``, ``add_columns`` and ``rename_column`` (nested struct fields too)
   with a SchemaError naming the column. Every other name of the battery round-trips: write,
   read, projection, filters (tuples and quoted SQL), merge on it, update, delete, rename, and
   partitioning by it (identity and transforms, with pruning).
2. ``update(set=...)`` takes scalar row expressions only: subqueries (they read the partition
   table an update evaluates them on), window functions and aggregates (evaluated over one
   partition's rows), UNNEST and references to other tables are refused with FilterError,
   before anything is read; the stored data is unchanged.
3. ``dictionary<...>`` column types are refused at ``create`` / ``add_columns`` /
   ``promote_column`` (the namespace schema, Lance Namespace JSON, has no dictionary type: they
   were silently stored as their value type); dictionary-encoded *data* is still written into a
   column of the value type.
"""

from __future__ import annotations

import datetime as dt
import os
import re

import dagster as dg
import lance
import pyarrow as pa
import pytest
from helpers.data import SCHEMA, fingerprint, sample_table, sorted_rows
from helpers.names import ACCEPTED, REFUSED_EVERYWHERE, REFUSED_TOP_LEVEL

from dagster_lance_partitioned import PartitionedNamespace, PartitionField
from dagster_lance_partitioned.core.errors import FilterError, SchemaError, UpdateExpressionError
from dagster_lance_partitioned.core.expr.filters import quote_ident
from dagster_lance_partitioned.orchestration import LancePartitionedIOManager

BY_K = [PartitionField.identity("k")]
BY_COUNTRY = [PartitionField.identity("country")]


def name_schema(name: str) -> pa.Schema:
    return pa.schema(
        [
            pa.field("id", pa.int64()),
            pa.field("k", pa.utf8()),
            pa.field(name, pa.utf8()),
            pa.field("st", pa.struct([pa.field(name, pa.int32())])),
        ]
    )


def name_rows(name: str, ids=(1, 2, 3), ks=("a", "b", "a"), values=("x", "y", None)) -> pa.Table:
    return pa.table(
        {
            "id": list(ids),
            "k": list(ks),
            name: list(values),
            "st": [{name: i} for i in ids],
        },
        schema=name_schema(name),
    )


def no_namespace_at(path) -> bool:
    return not os.path.exists(os.path.join(path, "__manifest"))


def _lit(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _ids(table: pa.Table) -> list[int]:
    return sorted(table["id"].to_pylist())


# -- 1. column names ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", list(ACCEPTED.values()), ids=list(ACCEPTED))
def test_accepted_name_round_trips(tmp_path, name):
    ns = PartitionedNamespace.create(tmp_path / "ns", name_schema(name), BY_K)
    ns.write(name_rows(name))
    col = quote_ident(name)

    got = ns.to_table()
    assert got.schema == name_schema(name)
    assert sorted_rows(got) == sorted_rows(name_rows(name))
    assert ns.to_table(columns=[name])[name].to_pylist().count("x") == 1
    assert _ids(ns.to_table(filter=[(name, "=", "x")])) == [1]
    assert _ids(ns.to_table(filter=[(name, "in", ["x", "y"])])) == [1, 2]
    assert _ids(ns.to_table(filter=f"{col} = 'y'")) == [2]
    assert _ids(ns.to_table(filter=f"{col} IS NULL")) == [3]
    assert _ids(ns.to_table(filter=f"st[{_lit(name)}] = 2")) == [2]  # the nested field

    # merge keyed on the column: x updated (and moved to partition c), z inserted
    ns.merge_insert(name_rows(name, ids=(10, 20), ks=("c", "c"), values=("x", "z")), on=name)
    assert _ids(ns.to_table()) == [2, 3, 10, 20]
    assert _ids(ns.to_table(filter=[(name, "=", "x")])) == [10]
    assert ns.to_table(filter="id = 10")["k"].to_pylist() == ["c"]

    ns.update([(name, "=", "z")], {name: f"concat({col}, '!')"})
    assert _ids(ns.to_table(filter=[(name, "=", "z!")])) == [20]
    ns.delete(f"{col} = 'z!'")
    assert _ids(ns.to_table()) == [2, 3, 10]

    ns.rename_column(name, "renamed")
    assert _ids(ns.to_table(filter=[("renamed", "=", "y")])) == [2]
    ns.rename_column("renamed", name)
    ns.write(name_rows(name, ids=(4,), ks=("b",), values=("w",)))
    assert sorted_rows(ns.to_table(filter=[(name, "in", ["y", "w"])])) == sorted_rows(
        name_rows(name, ids=(2, 4), ks=("b", "b"), values=("y", "w"))
    )


@pytest.mark.parametrize("name", list(ACCEPTED.values()), ids=list(ACCEPTED))
def test_partitioning_by_an_accepted_name_prunes(tmp_path, name):
    ns = PartitionedNamespace.create(
        tmp_path / "ns", name_schema(name), [PartitionField.identity(name)]
    )
    ns.write(name_rows(name))
    assert len(ns.inspect.partitions()) == 3  # x, y and NULL
    plan = ns.plan_scan([(name, "=", "x")])
    assert len(plan.tasks) == 1
    assert _ids(ns.to_table(filter=[(name, "=", "x")])) == [1]
    assert _ids(ns.to_table(filter=f"{quote_ident(name)} IS NULL")) == [3]
    ns.merge_insert(name_rows(name, ids=(9,), ks=("q",), values=("y",)), on=name)
    assert _ids(ns.to_table(filter=[(name, "=", "y")])) == [9]


@pytest.mark.parametrize("name", ["event date", "my-col", "côté", "a,b", "f(x)"])
def test_transforms_of_oddly_named_columns(tmp_path, name):
    schema = pa.schema([pa.field("id", pa.int64()), pa.field(name, pa.date32())])
    fields = [PartitionField.year(name), PartitionField.bucket(name, 4)]
    ns = PartitionedNamespace.create(tmp_path / "ns", schema, fields)
    days = [dt.date(2024, 5, 1), dt.date(2025, 6, 2), dt.date(2025, 7, 3)]
    ns.write(pa.table({"id": [1, 2, 3], name: days}, schema=schema))
    plan = ns.plan_scan([(name, "=", dt.date(2024, 5, 1))])
    assert len(plan.tasks) == 1
    assert _ids(ns.to_table(filter=[(name, ">=", dt.date(2025, 1, 1))])) == [2, 3]


def test_names_differing_only_in_case_are_distinct_columns(tmp_path):
    schema = pa.schema(
        [pa.field("id", pa.int64()), pa.field("MyCol", pa.utf8()), pa.field("mycol", pa.utf8())]
    )
    ns = PartitionedNamespace.create(tmp_path / "ns", schema, [PartitionField.identity("mycol")])
    rows = pa.table({"id": [1, 2], "MyCol": ["A", "B"], "mycol": ["a", "b"]}, schema=schema)
    ns.write(rows)
    assert sorted_rows(ns.to_table()) == sorted_rows(rows)
    assert _ids(ns.to_table(filter=[("MyCol", "=", "B")])) == [2]
    assert _ids(ns.to_table(filter="`MyCol` = 'A' AND `mycol` = 'a'")) == [1]
    assert len(ns.plan_scan([("mycol", "=", "b")]).tasks) == 1
    ns.merge_insert(pa.table({"id": [7], "MyCol": ["B"], "mycol": ["z"]}, schema=schema), "MyCol")
    assert sorted_rows(ns.to_table()) == [
        {"id": 1, "MyCol": "A", "mycol": "a"},
        {"id": 7, "MyCol": "B", "mycol": "z"},
    ]


TOP = list(REFUSED_TOP_LEVEL.values())
TOP_IDS = list(REFUSED_TOP_LEVEL)
NESTED = list(REFUSED_EVERYWHERE.values())
NESTED_IDS = list(REFUSED_EVERYWHERE)


def _message(name: str, why: str) -> str:
    return re.escape(repr(name)) + ".*" + why


@pytest.mark.parametrize(("name", "why"), TOP, ids=TOP_IDS)
def test_create_refuses_a_column_name_lance_cannot_store(tmp_path, name, why):
    with pytest.raises(SchemaError, match=_message(name, why)):
        PartitionedNamespace.create(
            tmp_path / "ns", name_schema("ok").append(pa.field(name, pa.int8())), BY_K
        )
    assert no_namespace_at(tmp_path / "ns")


def _nested_schemas(name: str) -> dict[str, pa.Schema]:
    """The name as a struct field, a struct field inside a list, and inside a map value."""
    inner = pa.struct([pa.field("fine", pa.int8()), pa.field(name, pa.int8())])
    base = [pa.field("id", pa.int64()), pa.field("k", pa.utf8())]
    return {
        "struct": pa.schema([*base, pa.field("s", pa.struct([pa.field("t", inner)]))]),
        "list": pa.schema([*base, pa.field("s", pa.list_(inner))]),
        "map": pa.schema([*base, pa.field("s", pa.map_(pa.utf8(), inner))]),
    }


@pytest.mark.parametrize("where", ["struct", "list", "map"])
@pytest.mark.parametrize(("name", "why"), NESTED, ids=NESTED_IDS)
def test_create_refuses_a_nested_field_name_lance_cannot_store(tmp_path, name, why, where):
    schema = _nested_schemas(name)[where]
    with pytest.raises(SchemaError, match=_message(name, why)) as info:
        PartitionedNamespace.create(tmp_path / "ns", schema, BY_K)
    assert "in 's" in str(info.value)  # the path of the field: its column first
    assert no_namespace_at(tmp_path / "ns")


def _populated(tmp_path) -> PartitionedNamespace:
    ns = PartitionedNamespace.create(tmp_path / "ns", SCHEMA, [PartitionField.identity("country")])
    ns.write(sample_table())
    return ns


@pytest.mark.parametrize(("name", "why"), TOP, ids=TOP_IDS)
def test_add_columns_refuses_a_column_name_lance_cannot_store(tmp_path, name, why):
    ns = _populated(tmp_path)
    before = fingerprint(ns.uri)
    with pytest.raises(SchemaError, match=_message(name, why)):
        ns.add_columns([pa.field("fine", pa.int8()), pa.field(name, pa.int8())])
    assert fingerprint(ns.uri) == before
    assert sorted_rows(ns.to_table()) == sorted_rows(sample_table())


@pytest.mark.parametrize(("name", "why"), NESTED, ids=NESTED_IDS)
def test_add_columns_refuses_a_nested_field_name_lance_cannot_store(tmp_path, name, why):
    ns = _populated(tmp_path)
    before = fingerprint(ns.uri)
    with pytest.raises(SchemaError, match=_message(name, why)):
        ns.add_columns(pa.field("s", pa.list_(pa.struct([pa.field(name, pa.int8())]))))
    assert fingerprint(ns.uri) == before


@pytest.mark.parametrize(("name", "why"), TOP, ids=TOP_IDS)
def test_rename_column_refuses_a_column_name_lance_cannot_store(tmp_path, name, why):
    ns = _populated(tmp_path)
    before = fingerprint(ns.uri)
    with pytest.raises(SchemaError, match=_message(name, why)):
        ns.rename_column("value", name)
    assert fingerprint(ns.uri) == before
    assert sorted_rows(ns.to_table()) == sorted_rows(sample_table())


# -- 2. update expressions ------------------------------------------------------------------------
# (expression for column ``value``, what the FilterError names)
REFUSED_SET = [
    ("(SELECT max(value) FROM t)", "subquery"),  # t: the table an update evaluates on
    ("(SELECT max(value) FROM __dlp_filter)", "subquery"),
    ("(SELECT 1)", "subquery"),
    ("CASE WHEN id IN (SELECT id FROM t) THEN 1 ELSE 0 END", "subquery"),
    ("CASE WHEN EXISTS (SELECT 1) THEN 1 ELSE 0 END", "subquery"),
    ("row_number() OVER ()", "window function"),
    ("sum(value) OVER ()", "window function"),
    ("max(value) OVER (PARTITION BY country)", "window function"),
    ("lag(value) OVER (ORDER BY id)", "window function"),
    ("sum(value)", "aggregate function"),
    ("count(*)", "aggregate function"),
    ("avg(value) + value", "aggregate function"),
    ("unnest(make_array(1.0, 2.0))", "UNNEST"),
    ("t.value + 1", "table 't'"),
    ("other.value", "table 'other'"),
    ("value; DELETE FROM t", "semicolon"),
    ("value -- a comment", "comment"),
    ("value) AS value, (1", "parenthes"),
]


@pytest.fixture
def populated(tmp_path) -> PartitionedNamespace:
    return _populated(tmp_path)


@pytest.mark.parametrize(("expr", "what"), REFUSED_SET, ids=[e for e, _ in REFUSED_SET])
def test_update_refuses_expressions_that_are_not_scalar_row_expressions(populated, expr, what):
    ns = populated
    before = fingerprint(ns.uri)
    version = ns.version
    with pytest.raises(FilterError, match=re.escape(what)) as info:
        ns.update("id < 6", {"value": expr})
    assert "'value'" in str(info.value) and "update" in str(info.value)
    ns.refresh()
    assert ns.version == version
    assert fingerprint(ns.uri) == before
    assert sorted_rows(ns.to_table()) == sorted_rows(sample_table())


def test_update_refuses_before_reading_any_partition(populated, monkeypatch):
    from dagster_lance_partitioned.core.row_changes import update as update_mod

    def boom(*_a, **_k):
        raise AssertionError("a partition table was read")

    monkeypatch.setattr(update_mod, "iter_task_batches", boom)
    with pytest.raises(FilterError):
        populated.update(None, {"value": "row_number() OVER ()", "country": "'US'"})


def test_scalar_row_expressions_still_update(populated):
    ns = populated
    ns.update(
        "id < 6",
        {
            "value": "CASE WHEN id % 2 = 0 THEN -value ELSE value * 10 END + length(country)",
            "event_date": "event_date + INTERVAL '1 day'",
        },
    )
    got = {r["id"]: r for r in ns.to_table().to_pylist()}
    for row in sample_table().to_pylist():
        i = row["id"]
        if i < 6:
            sign = -row["value"] if i % 2 == 0 else row["value"] * 10
            assert got[i]["value"] == sign + len(row["country"])
            assert got[i]["event_date"] == row["event_date"] + dt.timedelta(days=1)
        else:
            assert got[i] == row
    # unknown columns and type errors still raise UpdateExpressionError, as before
    with pytest.raises(UpdateExpressionError):
        ns.update(None, {"value": "no_such_column + 1"})


# -- 3. dictionary types ---------------------------------------------------------------------------
DICT = pa.dictionary(pa.int32(), pa.utf8())


@pytest.mark.parametrize(
    ("field", "path"),
    [
        (pa.field("cat", DICT), "'cat'"),
        (pa.field("cat", pa.list_(DICT)), "'cat"),
        (pa.field("cat", pa.struct([pa.field("inner", DICT)])), "'cat.inner'"),
    ],
    ids=["column", "list item", "struct field"],
)
def test_create_refuses_dictionary_types(tmp_path, field, path):
    with pytest.raises(SchemaError, match=re.escape(path) + ".*dictionary"):
        PartitionedNamespace.create(tmp_path / "ns", SCHEMA.append(field), BY_COUNTRY)
    assert no_namespace_at(tmp_path / "ns")


def test_add_and_promote_refuse_dictionary_types(populated):
    ns = populated
    before = fingerprint(ns.uri)
    with pytest.raises(SchemaError, match=r"'cat'.*dictionary"):
        ns.add_columns(pa.field("cat", DICT))
    with pytest.raises(SchemaError, match=r"'country'.*dictionary"):
        ns.promote_column("country", DICT)
    assert fingerprint(ns.uri) == before


def test_dictionary_encoded_data_is_written_as_its_values(populated):
    ns = populated
    rows = sample_table(3, start=100)
    encoded = rows.set_column(1, "country", rows["country"].dictionary_encode())
    ns.write(encoded)
    got = ns.to_table(filter="id >= 100")
    assert got.schema == SCHEMA
    assert sorted_rows(got) == sorted_rows(rows)
    ns.merge_insert(encoded, on="id")
    assert ns.count_rows() == 15


def test_io_manager_stores_dictionary_columns_as_their_values(tmp_path):
    """Dataframes often hold dictionary (categorical) columns: the IO manager stores them as
    their value type, when it creates the namespace and when a new column is added."""
    state = {"extra": False}

    @dg.asset(metadata={"lance/partition_by": ["country"]})
    def cats() -> pa.Table:
        t = sample_table(6)
        t = t.set_column(1, "country", t["country"].dictionary_encode())
        if state["extra"]:
            t = t.append_column("tag", pa.array(["x"] * 6).dictionary_encode())
        return t

    io = {"io_manager": LancePartitionedIOManager(root=str(tmp_path))}
    instance = dg.DagsterInstance.ephemeral()
    dg.materialize([cats], instance=instance, resources=io)
    state["extra"] = True
    dg.materialize([cats], instance=instance, resources=io)
    ns = PartitionedNamespace.open(tmp_path / "cats")
    assert ns.schema.field("country").type == pa.utf8()
    assert ns.schema.field("tag").type == pa.utf8()
    assert ns.count_rows([("tag", "=", "x")]) == 6
    for p in ns.inspect.partitions():
        ds = lance.dataset(os.path.join(ns.uri, p["location"]), version=p["read_version"])
        assert not pa.types.is_dictionary(ds.schema.field("country").type)
