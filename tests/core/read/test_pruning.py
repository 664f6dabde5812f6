"""Partition pruning: each transform's projection, spec-version evolution, explain, and a
property test that pruning never loses a matching row."""

from __future__ import annotations

import datetime as dt
import json
import os

import lance
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from dagster_lance_partitioned import PartitionedNamespace, PartitionField
from dagster_lance_partitioned.core.manifest.store import ManifestStore

UTC = dt.UTC


def kept(ns, flt) -> set:
    """The partitions the partition values keep (statistics would prune more)."""
    return {tuple(t.partition_values.values()) for t in ns.plan_scan(flt, by_stats=False).tasks}


def assert_correct(ns, table, flt, expected_mask):
    """to_table(filter) equals filtering everything, and the planned partitions cover it."""
    got = ns.to_table(filter=flt)
    expected = table.filter(expected_mask)
    assert sorted(got["id"].to_pylist()) == sorted(expected["id"].to_pylist()), flt


# -- the spec's Appendix D ---------------------------------------------------------------------
def test_appendix_d_exactly_two_tables(tmp_path):
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            ("event_date", pa.date32()),
            ("country", pa.utf8()),
        ]
    )
    ns = PartitionedNamespace.create(
        tmp_path / "d", schema, [PartitionField.identity("event_date", field_id="event_date")]
    )
    days = [dt.date(2025, 12, 10), dt.date(2025, 12, 11), dt.date(2024, 1, 1)]
    rows = [(i, days[i % 3], ("US", "FR")[i % 2]) for i in range(12)]
    t = pa.table(
        {
            "id": [r[0] for r in rows],
            "event_date": [r[1] for r in rows],
            "country": [r[2] for r in rows],
        },
        schema=schema,
    )
    ns.write(t)
    # evolve to v2 (year + country) by hand-adding the spec, as partition evolution would
    m = lance.dataset(os.path.join(ns.uri, "__manifest"))
    v2 = {
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
    store = ManifestStore(ns.uri)
    from dagster_lance_partitioned.core.manifest.snapshot import ManifestSnapshot
    from dagster_lance_partitioned.core.manifest.store import ManifestEdit
    from dagster_lance_partitioned.core.partitioning.partition_spec import specs_from_metadata

    store.commit(
        lambda ds: ManifestSnapshot(ds, specs_from_metadata(dict(ds.metadata))),
        lambda snap: ManifestEdit(
            upserts={"v2": {"object_type": "namespace", "metadata": "{}"}},
            new_columns=[
                pa.field("partition_field_event_year", pa.int32()),
                pa.field("partition_field_country", pa.utf8()),
            ],
            properties={"overwritten": "[]"},
        ),
    )
    m = lance.dataset(os.path.join(ns.uri, "__manifest"))
    store.update_metadata({"partition_spec_v2": json.dumps(v2)}, m.version)
    ns.refresh()
    assert ns.current_spec.spec_id == 2
    ns.write(t)
    plan = ns.plan_scan("event_date = '2025-12-10' AND country = 'US'")
    got = {(t.spec_id, tuple(t.partition_values.values())) for t in plan.tasks}
    assert got == {(1, (dt.date(2025, 12, 10),)), (2, (2025, "US"))}
    assert "partition_field_event_year` = 2025" in plan.manifest_query
    assert "object_id LIKE 'v1$%'" in plan.manifest_query
    text = ns.plan_scan("event_date = '2025-12-10' AND country = 'US'")
    assert "spec v1: keep 1 / 3" in str(text) and "spec v2: keep 1 / 4" in str(text)
    expected = [r[0] for r in rows if r[1] == dt.date(2025, 12, 10) and r[2] == "US"]
    got_rows = ns.to_table("event_date = '2025-12-10' AND country = 'US'")["id"].to_pylist()
    assert sorted(got_rows) == sorted(expected * 2)


# -- identity -----------------------------------------------------------------------------------
@pytest.fixture
def ident(tmp_path):
    schema = pa.schema(
        [pa.field("id", pa.int64(), nullable=False), ("k", pa.int32()), ("s", pa.utf8())]
    )
    ns = PartitionedNamespace.create(
        tmp_path / "i", schema, [PartitionField.identity("k"), PartitionField.identity("s")]
    )
    ks = [1, 2, 3, None]
    ss = ["apple", "apricot", "banana", None]
    t = pa.table(
        {
            "id": range(16),
            "k": [ks[i % 4] for i in range(16)],
            "s": [ss[(i // 4) % 4] for i in range(16)],
        },
        schema=schema,
    )
    ns.write(t)
    return ns, t


@pytest.mark.parametrize(
    ("flt", "expect"),
    [
        ("k = 2", lambda k, s: k == 2),
        ("k != 2", lambda k, s: k is not None and k != 2),
        ("k < 2", lambda k, s: k is not None and k < 2),
        ("k >= 2", lambda k, s: k is not None and k >= 2),
        ("k IN (1, 3)", lambda k, s: k in (1, 3)),
        ("k NOT IN (1, 3)", lambda k, s: k is not None and k not in (1, 3)),
        ("k IS NULL", lambda k, s: k is None),
        ("k IS NOT NULL", lambda k, s: k is not None),
        ("k BETWEEN 2 AND 3", lambda k, s: k is not None and 2 <= k <= 3),
        ("k NOT BETWEEN 2 AND 3", lambda k, s: k is not None and not 2 <= k <= 3),
        ("s LIKE 'ap%'", lambda k, s: s is not None and s.startswith("ap")),
        (
            "NOT (k = 1 OR s = 'banana')",
            lambda k, s: k is not None and s is not None and not (k == 1 or s == "banana"),
        ),
        ("k = 1 OR s IS NULL", lambda k, s: k == 1 or s is None),
        (
            "(k = 1 AND s = 'apple') OR (k = 3 AND s LIKE 'b%')",
            lambda k, s: (
                (k == 1 and s == "apple") or (k == 3 and s is not None and s.startswith("b"))
            ),
        ),
    ],
)
def test_identity_projection_is_exact(ident, flt, expect):
    ns, t = ident
    parts = {tuple(p["values"].values()) for p in ns.inspect.partitions()}
    assert kept(ns, flt) == {p for p in parts if expect(*p)}
    rows = t.to_pylist()
    got = sorted(ns.to_table(filter=flt)["id"].to_pylist())
    assert got == sorted(r["id"] for r in rows if expect(r["k"], r["s"]))


def test_unprunable_conditions_keep_everything(ident):
    ns, _ = ident
    every = {tuple(p["values"].values()) for p in ns.inspect.partitions()}
    assert kept(ns, "k + 1 = 3") == every
    assert kept(ns, "id = 5 OR k = 1") == every
    assert kept(ns, "k = 1 AND id > 3") == {v for v in every if v[0] == 1}  # AND keeps what it can


# -- time transforms ----------------------------------------------------------------------------
def hours_table(tz=None):
    start = dt.datetime(2025, 12, 9, 0, tzinfo=UTC)
    ts = [start + dt.timedelta(hours=5 * i) for i in range(30)]  # 2025-12-09 .. 2025-12-15
    t = pa.timestamp("us", tz="UTC")
    col = pa.array(ts, t)
    if tz is not None:
        col = pc.cast(col, pa.timestamp("us", tz=tz))
    return pa.table({"id": range(30), "ts": col})


def test_year_month_day_chain_selects_exactly_one_day(tmp_path):
    t = hours_table()
    ns = PartitionedNamespace.create(
        tmp_path / "c",
        t.schema,
        [PartitionField.year("ts"), PartitionField.month("ts"), PartitionField.day("ts")],
    )
    ns.write(t)
    flt = "ts >= '2025-12-10T10:00:00' AND ts < '2025-12-11'"
    assert kept(ns, flt) == {(2025, 12, 10)}
    lo, hi = dt.datetime(2025, 12, 10, 10, tzinfo=UTC), dt.datetime(2025, 12, 11, tzinfo=UTC)
    expect = [r["id"] for r in t.to_pylist() if lo <= r["ts"] < hi]
    assert sorted(ns.to_table(flt)["id"].to_pylist()) == expect
    assert kept(ns, "ts > '2025-12-14T23:59:59'") == {(2025, 12, 14), (2025, 12, 15)}
    assert kept(ns, "ts = '2025-12-12T05:00:00'") == {(2025, 12, 12)}
    assert kept(ns, "ts <= '2025-12-09T23:00:00'") == {(2025, 12, 9)}


def test_hour_chain_in_a_non_utc_zone(tmp_path):
    t = hours_table("America/New_York")
    ns = PartitionedNamespace.create(
        tmp_path / "h",
        t.schema,
        [
            PartitionField.year("ts"),
            PartitionField.month("ts"),
            PartitionField.day("ts"),
            PartitionField.hour("ts"),
        ],
    )
    ns.write(t)
    # 2025-12-10T10:00Z = 05:00 local; partition values are local (date_part on the zone)
    flt = "ts >= '2025-12-10T10:00:00+00:00' AND ts < '2025-12-10T20:00:00+00:00'"
    got = kept(ns, flt)
    assert got and all(v[:3] == (2025, 12, 10) and 5 <= v[3] < 15 for v in got)
    lo, hi = dt.datetime(2025, 12, 10, 10, tzinfo=UTC), dt.datetime(2025, 12, 10, 20, tzinfo=UTC)
    expect = [r["id"] for r in t.to_pylist() if lo <= r["ts"] < hi]
    assert sorted(ns.to_table(flt)["id"].to_pylist()) == expect


def test_year_alone_prunes_ranges_and_months_alone_only_equality(tmp_path):
    schema = pa.schema([("id", pa.int64()), ("d", pa.date32())])
    d = [dt.date(2023 + i % 3, 1 + i % 12, 1) for i in range(36)]
    t = pa.table({"id": range(36), "d": d}, schema=schema)
    ns = PartitionedNamespace.create(tmp_path / "y", schema, [PartitionField.year("d")])
    ns.write(t)
    assert kept(ns, "d >= DATE '2024-06-01'") == {(2024,), (2025,)}
    assert kept(ns, "d < DATE '2024-01-01'") == {(2023,)}
    ns2 = PartitionedNamespace.create(tmp_path / "m", schema, [PartitionField.month("d")])
    ns2.write(t)
    assert kept(ns2, "d = DATE '2024-03-01'") == {(3,)}
    assert len(kept(ns2, "d >= DATE '2024-06-01'")) == 12  # months repeat: no range pruning


# -- bucket / truncate / expressions -------------------------------------------------------------
def test_bucket_and_multi_bucket_equality(tmp_path):
    schema = pa.schema([("id", pa.int64()), ("user", pa.int64()), ("org", pa.utf8())])
    t = pa.table(
        {
            "id": range(40),
            "user": [i % 10 for i in range(40)],
            "org": [("a", "b")[i % 2] for i in range(40)],
        },
        schema=schema,
    )
    ns = PartitionedNamespace.create(
        tmp_path / "b",
        schema,
        [PartitionField.bucket("user", 4), PartitionField.multi_bucket(["user", "org"], 3)],
    )
    ns.write(t)
    plan = ns.plan_scan("user = 7")
    rows = ns.to_table("user = 7")
    assert sorted(rows["id"].to_pylist()) == [i for i in range(40) if i % 10 == 7]
    assert len({v["user_bucket_4"] for v in (x.partition_values for x in plan.tasks)}) == 1
    both = ns.plan_scan("user = 7 AND org = 'b'")
    assert len(both.tasks) == 1  # both columns pinned: the multi bucket is known too
    assert len(ns.plan_scan("user IN (1, 7)").tasks) <= len(ns.plan_scan("user > 0").tasks)
    assert sorted(ns.to_table("user IN (1, 7) AND org = 'b'")["id"].to_pylist()) == [
        i for i in range(40) if i % 10 in (1, 7) and i % 2 == 1
    ]


def test_truncate_ranges_and_like(tmp_path):
    schema = pa.schema([("id", pa.int64()), ("name", pa.utf8()), ("amount", pa.int64())])
    names = ["alpha", "alps", "beta", "bet", "gamma", "al"]
    t = pa.table(
        {
            "id": range(30),
            "name": [names[i % 6] for i in range(30)],
            "amount": [i * 7 - 50 for i in range(30)],
        },
        schema=schema,
    )
    ns = PartitionedNamespace.create(
        tmp_path / "t",
        schema,
        [PartitionField.truncate("name", 3), PartitionField.truncate("amount", 50)],
    )
    ns.write(t)
    assert {v[0] for v in kept(ns, "name LIKE 'alp%'")} == {"alp"}
    assert {v[0] for v in kept(ns, "name LIKE 'a%'")} == {"alp", "al"}
    assert {v[0] for v in kept(ns, "name = 'beta'")} == {"bet"}
    assert {v[0] for v in kept(ns, "name >= 'bet'")} == {"bet", "gam"}
    assert {v[1] for v in kept(ns, "amount < 0")} <= {-50, 0}
    for flt, mask in [
        ("name LIKE 'alp%'", pc.starts_with(t["name"], "alp")),
        (
            "amount >= 60 AND amount < 120",
            pc.and_(pc.greater_equal(t["amount"], 60), pc.less(t["amount"], 120)),
        ),
    ]:
        assert_correct(ns, t, flt, mask)


def test_custom_expression_equality_by_evaluating_the_literal(tmp_path):
    schema = pa.schema([("id", pa.int64()), ("a", pa.utf8()), ("b", pa.utf8())])
    t = pa.table({"id": range(8), "a": list("xxyyxxyy"), "b": list("pqpqpqpq")}, schema=schema)
    ns = PartitionedNamespace.create(
        tmp_path / "e",
        schema,
        [
            PartitionField.expression(
                ["a", "b"], "concat(col0, '-', col1)", result_type=pa.utf8(), field_id="ab"
            ),
            PartitionField.expression(["a"], "upper(col0)", result_type=pa.utf8(), field_id="up"),
        ],
    )
    ns.write(t)
    assert kept(ns, "a = 'x' AND b = 'q'") == {("x-q", "X")}
    assert {v[1] for v in kept(ns, "a = 'y'")} == {"Y"}
    assert len(kept(ns, "a > 'x'")) == 4  # no range rule for arbitrary expressions: keep all


def test_case_expressions_range_and_list(tmp_path):
    schema = pa.schema([("id", pa.int64()), ("d", pa.date32()), ("c", pa.utf8())])
    d = [dt.date(2015 + i % 6, 6, 1) for i in range(24)]
    c = [("US", "CA", "FR", "DE", "JP", "BR")[i % 6] for i in range(24)]
    t = pa.table({"id": range(24), "d": d, "c": c}, schema=schema)
    rng = (
        "CASE WHEN col0 IS NULL THEN NULL WHEN col0 < DATE '2017-01-01' THEN 'p0' "
        "WHEN col0 < DATE '2019-01-01' THEN 'p1' ELSE 'p2' END"
    )
    lst = (
        "CASE WHEN col0 IN ('US', 'CA') THEN 'na' WHEN col0 IN ('FR', 'DE') THEN 'eu' "
        "ELSE 'other' END"
    )
    ns = PartitionedNamespace.create(
        tmp_path / "r",
        schema,
        [
            PartitionField.expression(["d"], rng, result_type=pa.utf8(), field_id="era"),
            PartitionField.expression(["c"], lst, result_type=pa.utf8(), field_id="region"),
        ],
    )
    ns.write(t)
    assert {v[0] for v in kept(ns, "d >= DATE '2019-03-01'")} == {"p2"}
    assert {v[0] for v in kept(ns, "d < DATE '2017-01-01'")} == {"p0"}
    assert {v[0] for v in kept(ns, "d BETWEEN DATE '2016-06-01' AND DATE '2017-06-01'")} == {
        "p0",
        "p1",
    }
    assert {v[1] for v in kept(ns, "c = 'FR'")} == {"eu"}
    assert {v[1] for v in kept(ns, "c IN ('US', 'JP')")} == {"na", "other"}
    assert {v[1] for v in kept(ns, "c >= 'U'")} == {"na", "other"}
    for flt in [
        "d >= DATE '2019-03-01'",
        "d BETWEEN DATE '2016-06-01' AND DATE '2017-06-01'",
        "c >= 'U'",
    ]:
        got = sorted(ns.to_table(flt)["id"].to_pylist())
        full = ns.to_table()
        import datafusion as dfn

        ctx = dfn.SessionContext()
        ctx.from_arrow(full, "t")
        assert got == sorted(
            ctx.sql(f"SELECT id FROM t WHERE {flt}").to_arrow_table()["id"].to_pylist()
        )


def test_explain_is_readable_and_json(ident):
    ns, _ = ident
    plan = ns.plan_scan("k = 2 AND s = 'banana'")
    text = str(plan)
    assert "spec v1: keep 1 / 16 partitions where" in text
    assert "partition_field_k` = 2" in text and "partition_field_s` = 'banana'" in text
    assert "residual filter in each partition scan: k = 2 AND s = 'banana'" in text
    data = plan.to_dict()
    json.dumps(data)
    assert data["kept_partitions"] == 1 and data["specs"][0]["total"] == 16


def test_large_manifests_get_indexes_and_plan_the_same(tmp_path, tune):

    tune(index_min_rows=10)
    tune(small_manifest_rows=0)  # plan through Lance's scanner
    schema = pa.schema(
        [pa.field("id", pa.int64(), nullable=False), ("k", pa.int32()), ("s", pa.utf8())]
    )
    t = pa.table(
        {
            "id": range(60),
            "k": [i % 12 for i in range(60)],
            "s": [("a", "b", "c")[i % 3] for i in range(60)],
        },
        schema=schema,
    )
    ns = PartitionedNamespace.create(
        tmp_path / "ix", schema, [PartitionField.identity("k"), PartitionField.identity("s")]
    )
    ns.write(t)
    m = lance.dataset(os.path.join(ns.uri, "__manifest"))
    indexed = {n for i in m.describe_indices() for n in i.field_names}
    assert {"object_id", "object_type", "partition_field_k", "partition_field_s"} <= indexed
    for flt in ["k = 3", "k IN (1, 2) AND s = 'b'", "k >= 10", "s LIKE 'c%' OR k = 0"]:
        fresh = PartitionedNamespace.open(ns.uri)  # manifest not loaded: Lance's indexed scan
        loaded = PartitionedNamespace.open(ns.uri)
        loaded.inspect.partitions()  # manifest in memory: DataFusion over the rows
        a = {x.object_id for x in fresh.plan_scan(flt).tasks}
        b = {x.object_id for x in loaded.plan_scan(flt).tasks}
        assert a == b and a, flt
        assert fresh.plan_scan(flt).total_partitions == 12
    ns.write(t.slice(0, 5), mode="overwrite_partitions")  # a row-level commit keeps them
    m = lance.dataset(os.path.join(ns.uri, "__manifest"))
    assert "partition_field_k" in {n for i in m.describe_indices() for n in i.field_names}
    for flt in ["k = 3", "k IN (1, 2) AND s = 'b'"]:  # new rows are found through the indexes
        fresh, loaded = PartitionedNamespace.open(ns.uri), PartitionedNamespace.open(ns.uri)
        loaded.inspect.partitions()
        assert {x.object_id for x in fresh.plan_scan(flt).tasks} == {
            x.object_id for x in loaded.plan_scan(flt).tasks
        }


def test_constant_and_contradictory_filters(ident):
    ns, t = ident
    assert ns.to_table("1 = 1").num_rows == t.num_rows
    assert ns.to_table("k = 1 OR TRUE").num_rows == t.num_rows
    assert ns.to_table("1 = 0").num_rows == 0
    assert ns.plan_scan("k = 1 AND k = 2").tasks == ()
    assert ns.to_table("k = 1 AND k = 2").num_rows == 0


def test_range_and_list_builders_prune(tmp_path):
    schema = pa.schema([("id", pa.int64()), ("d", pa.date32()), ("c", pa.utf8())])
    d = [dt.date(2015 + i % 6, 6, 1) for i in range(24)]
    c = [("US", "CA", "FR", "DE", "JP", "BR")[i % 6] for i in range(24)]
    t = pa.table({"id": range(24), "d": d, "c": c}, schema=schema)
    ns = PartitionedNamespace.create(
        tmp_path / "rl",
        schema,
        [
            PartitionField.range("d", [dt.date(2017, 1, 1), dt.date(2019, 1, 1)]),
            PartitionField.list("c", {"na": ["US", "CA"], "eu": ["FR", "DE"]}, default="other"),
        ],
    )
    ns.write(t)
    assert [f.field_id for f in ns.current_spec.fields] == ["d_range", "c_list"]
    assert len({v[0] for v in kept(ns, "d >= DATE '2019-03-01'")}) == 1
    assert len({v[0] for v in kept(ns, "d BETWEEN DATE '2016-06-01' AND DATE '2017-06-01'")}) == 2
    assert {v[1] for v in kept(ns, "c = 'FR'")} == {"eu"}
    assert sorted(ns.to_table("c = 'FR' AND d >= DATE '2019-01-01'")["id"].to_pylist()) == [
        i for i in range(24) if c[i] == "FR" and d[i] >= dt.date(2019, 1, 1)
    ]


def test_tuple_filter_with_zone_aware_datetime_on_a_zoned_column(tmp_path):
    t = hours_table("America/New_York")
    ns = PartitionedNamespace.create(tmp_path / "z", t.schema, [PartitionField.day("ts")])
    ns.write(t)
    lo = dt.datetime(2025, 12, 10, 15, tzinfo=UTC)
    got = sorted(ns.to_table([("ts", ">=", lo)])["id"].to_pylist())
    assert got == [r["id"] for r in t.to_pylist() if r["ts"] >= lo]


def test_draft_expressions_prune_as_the_transforms_they_spell():
    """A draft field whose SQL is exactly a transform's prunes through that transform: ranges
    through the year, LIKE through a string truncation, identity exactly."""
    from dagster_lance_partitioned import PartitionSpec, SpecField
    from dagster_lance_partitioned.core.expr.predicates import TRUE, And, Cmp, Like
    from dagster_lance_partitioned.core.read.pruning import SpecProjector
    from dagster_lance_partitioned.core.schema import arrow_json

    schema, _ = arrow_json.assign_field_ids(
        pa.schema([("d", pa.date32()), ("name", pa.utf8()), ("n", pa.int64())]), 0
    )
    draft = PartitionSpec(
        3,
        (
            SpecField("y", (0,), pa.int32(), expression="date_part('year', col0)", column="y"),
            SpecField("p", (1,), pa.utf8(), expression="LEFT(col0,  2)", column="p"),
            SpecField("k", (2,), pa.int64(), expression="col0", column="k"),
        ),
        draft=True,
    )
    projector = SpecProjector(draft, schema)
    assert projector.project(Cmp("d", ">=", dt.date(2024, 3, 1))) == Cmp("y", ">=", 2024)
    assert projector.project(Like("name", "abc%")) == Cmp("p", "=", "ab")
    assert projector.project(Cmp("n", "!=", 4)) == Cmp("k", "!=", 4)
    # an expression that is no transform claims no order: a range keeps every partition
    other = PartitionSpec(
        4, (SpecField("u", (1,), pa.utf8(), expression="upper(col0)", column="u"),), draft=True
    )
    assert SpecProjector(other, schema).project(Cmp("name", ">", "a")) == TRUE
    assert SpecProjector(other, schema).project(
        And((Cmp("name", "=", "ab"), Cmp("n", "=", 1)))
    ) == Cmp("u", "=", "AB")
