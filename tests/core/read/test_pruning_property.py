"""Property: for random predicates over namespaces with several kinds of specs, the pruned scan
returns exactly the rows that filtering everything returns, and the planned partitions include
every partition holding a matching row (pruning may keep too much, never too little)."""

from __future__ import annotations

import datetime as dt

import datafusion as dfn
import lance
import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dagster_lance_partitioned import PartitionedNamespace, PartitionField
from dagster_lance_partitioned.core.tuning import tuned, tuning

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        ("k", pa.int32()),
        ("s", pa.utf8()),
        ("d", pa.date32()),
        ("ts", pa.timestamp("us", tz="UTC")),
    ]
)
WORDS = ["alpha", "alps", "beta", "bet", "gamma", "", "a'b", "zeta"]
RANGE = (
    "CASE WHEN col0 IS NULL THEN NULL WHEN col0 < 0 THEN 'neg' WHEN col0 < 10 THEN 'low' "
    "ELSE 'high' END"
)

SPECS = {
    "identity": [PartitionField.identity("k"), PartitionField.identity("s")],
    "time": [PartitionField.year("ts"), PartitionField.month("ts"), PartitionField.day("ts")],
    "hash_trunc": [
        PartitionField.bucket("k", 5),
        PartitionField.truncate("s", 2),
        PartitionField.year("d"),
    ],
    "multi_expr": [
        PartitionField.multi_bucket(["k", "s"], 4),
        PartitionField.expression(["k"], RANGE, result_type=pa.utf8(), field_id="k_range"),
        PartitionField.month("d"),
    ],
}


def random_table(seed: int, n: int = 300) -> pa.Table:
    rng = np.random.default_rng(seed)
    k = rng.integers(-5, 25, n)
    k_null = rng.random(n) < 0.1
    s_idx = rng.integers(0, len(WORDS), n)
    s_null = rng.random(n) < 0.1
    d0 = dt.date(2024, 11, 20)
    days = rng.integers(0, 70, n)
    ts0 = dt.datetime(2025, 12, 1, tzinfo=dt.UTC)
    hours = rng.integers(0, 24 * 40, n)
    return pa.table(
        {
            "id": pa.array(np.arange(n), pa.int64()),
            "k": pa.array(
                [None if z else int(v) for v, z in zip(k, k_null, strict=True)], pa.int32()
            ),
            "s": [None if z else WORDS[i] for i, z in zip(s_idx, s_null, strict=True)],
            "d": [d0 + dt.timedelta(days=int(x)) for x in days],
            "ts": pa.array(
                [ts0 + dt.timedelta(hours=int(h)) for h in hours], pa.timestamp("us", tz="UTC")
            ),
        },
        schema=SCHEMA,
    )


@pytest.fixture(scope="module")
def namespaces(tmp_path_factory):
    out = {}
    for i, (name, fields) in enumerate(SPECS.items()):
        table = random_table(seed=i)
        ns = PartitionedNamespace.create(tmp_path_factory.mktemp(name) / "ns", SCHEMA, fields)
        ns.write(table.slice(0, 150))
        ns.write(table.slice(150), mode="append")
        home = {}  # row id -> the partition table holding it
        for task in ns.plan_scan().tasks:
            rows = lance.dataset(task.uri, version=task.read_version).to_table(columns=["id"])
            home.update(dict.fromkeys(rows["id"].to_pylist(), task.object_id))
        assert len(home) == table.num_rows
        out[name] = (ns, table, home)
    return out


ints = st.integers(-7, 27)
words = st.sampled_from([*WORDS, "al", "b", "zz"])
dates = st.dates(dt.date(2024, 11, 1), dt.date(2025, 2, 15))
times = st.datetimes(dt.datetime(2025, 11, 25), dt.datetime(2026, 1, 15))


def q(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


@st.composite
def atoms(draw) -> str:
    col = draw(st.sampled_from(["k", "s", "d", "ts"]))
    op = draw(
        st.sampled_from(
            ["=", "!=", "<", "<=", ">", ">=", "in", "null", "notnull", "between", "like"]
        )
    )
    if op == "null":
        return f"{col} IS NULL"
    if op == "notnull":
        return f"{col} IS NOT NULL"

    def value():
        if col == "k":
            return str(draw(ints))
        if col == "s":
            return q(draw(words))
        if col == "d":
            return f"DATE '{draw(dates).isoformat()}'"
        return f"TIMESTAMP '{draw(times).isoformat()}'"

    if op == "in":
        items = ", ".join(value() for _ in range(draw(st.integers(1, 3))))
        neg = draw(st.booleans())
        return f"{col} {'NOT IN' if neg else 'IN'} ({items})"
    if op == "between":
        return f"{col} BETWEEN {value()} AND {value()}"
    if op == "like":
        if col != "s":
            return f"{col} IS NOT NULL"
        return f"s LIKE {q(draw(st.sampled_from(['a', 'al', 'be', 'x', ''])) + '%')}"
    return f"{col} {op} {value()}"


predicates = st.recursive(
    atoms(),
    lambda inner: st.one_of(
        st.tuples(inner, inner).map(lambda p: f"({p[0]} AND {p[1]})"),
        st.tuples(inner, inner).map(lambda p: f"({p[0]} OR {p[1]})"),
        inner.map(lambda p: f"NOT ({p})"),
    ),
    max_leaves=4,
)


def matching_ids(table: pa.Table, flt: str) -> list[int]:
    ctx = dfn.SessionContext()
    ctx.register_record_batches("t", [table.to_batches()])
    return sorted(ctx.sql(f"SELECT id FROM t WHERE {flt}").to_arrow_table()["id"].to_pylist())


@settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(name=st.sampled_from(sorted(SPECS)), flt=predicates, lance_query=st.booleans())
def test_pruned_scan_equals_full_filter(namespaces, name, flt, lance_query):
    """``lance_query``: plan through Lance's scanner on ``__manifest`` (as for large manifests)
    instead of evaluating in memory (small manifests)."""
    ns, table, home = namespaces[name]
    with tuned(small_manifest_rows=0 if lance_query else tuning().small_manifest_rows):
        if lance_query:
            ns = PartitionedNamespace.open(ns.uri)  # manifest not loaded
        expected = matching_ids(table, flt)
        planned = {t.object_id for t in ns.plan_scan(flt).tasks}
        missing = {home[i] for i in expected} - planned
        assert not missing, (name, flt, lance_query, missing)
        got = sorted(ns.to_table(filter=flt)["id"].to_pylist())
        assert got == expected, (name, flt, lance_query)
