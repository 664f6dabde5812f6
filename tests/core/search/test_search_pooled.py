"""Tables without a vector index are searched as one pool (``core/search/pooled.py``): their
vectors in one matrix, the columns a filter reads and a search returns kept beside it, in
the search session. Every answer equals the reference path (``use_index=False``, every row
of every table read and measured) and brute force over ``ns.to_table()``, whatever the
filter, metric, ``k``, session budget, null vectors, deleted rows or ties between tables."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from helpers.search import SCHEMA, brute_force, count_table_opens, make_ns, make_rows
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dagster_lance_partitioned.core.read.planning import plan_namespace
from dagster_lance_partitioned.core.search.distances import matrix_of
from dagster_lance_partitioned.core.search.nearest import VectorQuery
from dagster_lance_partitioned.core.search.params import VectorParams
from dagster_lance_partitioned.core.search.session import SearchSession
from dagster_lance_partitioned.core.search.tables import Opener, matching_ids

DIM = 16
TENANTS = ("a", "b", "c", "d", "e")
VALUES = make_rows(900, seed=61, tenants=TENANTS, weights=None)["v"].combine_chunks()
VALUES = VALUES.values.to_numpy().reshape(-1, DIM).copy()


def pooled_rows() -> pa.Table:
    """900 rows in 15 small partitions (tenant x day); some vectors null, some equal to
    another partition's (ties between tables)."""
    table = make_rows(900, seed=61, tenants=TENANTS, weights=None)
    values = VALUES.copy()
    values[450:500] = values[0:50]  # twins in other partitions
    valid = np.ones(len(values), dtype=bool)
    valid[::37] = False
    vectors = pa.FixedSizeListArray.from_arrays(pa.array(values.ravel()), DIM)
    vectors = pc.if_else(pa.array(valid), vectors, pa.scalar(None, vectors.type))
    return table.set_column(SCHEMA.get_field_index("v"), "v", vectors)


@pytest.fixture(scope="module")
def pooled_ns(tmp_path_factory):
    """The rows above, with rows deleted from two partitions (row ids no longer dense)."""
    ns = make_ns(tmp_path_factory.mktemp("pooled") / "ns", pooled_rows())
    ns.delete("n % 11 = 3 AND tenant IN ('a', 'c')")
    return ns


FILTERS = [
    None,
    "n < 300",
    "n >= 100 AND n < 700",
    "tenant = 'b'",
    "tenant IN ('a', 'e') AND n % 3 = 0",
    "n < 500 OR tenant = 'c'",
    "txt LIKE 't1x%'",
    "n = -1",  # nothing matches
    "v IS NULL",  # only rows without a vector: nothing to rank
]


def reference(ns, q, k, metric, sql):
    """Brute force over the rows ``ns.to_table`` returns for the filter."""
    rows = ns.to_table(filter=sql)
    return brute_force(rows, np.asarray(q, np.float64), k, metric)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    seed=st.integers(0, 2**16),
    k=st.sampled_from([1, 3, 10, 60]),
    metric=st.sampled_from(["l2", "cosine", "dot"]),
    sql=st.sampled_from(FILTERS),
    budget=st.sampled_from([0, 30_000, None]),
    near_a_row=st.booleans(),
)
def test_the_pool_answers_as_the_reference_path(
    pooled_ns, seed, k, metric, sql, budget, near_a_row
):
    rng = np.random.default_rng(seed)
    if near_a_row:  # at a stored vector: ties between the twins of two partitions
        q = VALUES[int(rng.integers(0, 50))].copy()
    else:
        q = rng.normal(size=DIM).astype(np.float32)
    session = SearchSession(budget)
    for _ in range(2):  # read, then from what the session kept
        got = pooled_ns.search(q, k=k, filter=sql, metric=metric, session=session)
        want = pooled_ns.search(q, k=k, filter=sql, metric=metric, use_index=False)
        assert got.equals(want), (got.to_pydict(), want.to_pydict())
        ids, dist = reference(pooled_ns, q, k, metric, sql)
        assert got.column("id").to_pylist() == ids or _tied(got, dist)
        np.testing.assert_allclose(got.column("_distance").to_numpy(), dist, rtol=1e-4, atol=1e-4)
    if budget is not None:
        assert session.size_bytes() <= budget


def _tied(got: pa.Table, dist: np.ndarray) -> bool:
    """Brute force in float64 may order rows at equal float32 distances otherwise."""
    mine = got.column("_distance").to_numpy()
    return len(mine) == len(dist) and bool(np.allclose(mine, dist, rtol=1e-5, atol=1e-6))


def test_small_tables_are_kept_as_one_pool_and_a_new_filter_reads_no_table(pooled_ns):
    session = SearchSession()
    q = np.random.default_rng(3).normal(size=DIM)
    pooled_ns.search(q, k=5, columns=["id"], filter="n < 100", session=session)
    report = session.report()
    assert report["pooled"].entries == 1  # the 15 tables' vectors in one matrix
    # the column the filter reads and the column returned, kept beside it (one entry each)
    assert report["pooled column"].entries == 2
    assert "vectors" not in report  # nothing kept table by table
    for bound in (200, 300, 400):
        got = pooled_ns.search(q, k=5, columns=["id"], filter=f"n < {bound}", session=session)
        ids, _ = reference(pooled_ns, q, 5, "l2", f"n < {bound}")
        assert got.column("id").to_pylist() == ids
    report = session.report()
    assert report["pooled column"].entries == 2  # the same columns: nothing read again
    assert report["pooled matches"].entries == 4  # one per filter


def test_returned_columns_come_from_the_pool_as_they_are_stored(pooled_ns):
    session = SearchSession()
    q = np.random.default_rng(4).normal(size=DIM)
    for _ in range(2):
        got = pooled_ns.search(q, k=8, session=session)  # every column, the vector too
        want = pooled_ns.search(q, k=8, use_index=False)
        assert got.equals(want)
        assert got.schema.equals(want.schema)
    stored = pooled_ns.to_table()
    by_id = {i: r for i, r in zip(stored["id"].to_pylist(), stored.to_pylist(), strict=True)}
    for row in got.to_pylist():
        assert {n: v for n, v in row.items() if n != "_distance"} == by_id[row["id"]]


def test_a_table_version_changed_gives_a_new_pool(tmp_path):
    ns = make_ns(tmp_path / "ns", make_rows(600, seed=62, tenants=TENANTS, weights=None))
    session = SearchSession()
    q = np.random.default_rng(5).normal(size=DIM).astype(np.float32)
    ns.search(q, k=3, session=session)
    twin = make_rows(1, seed=63, start=10_000, tenants=("a",), weights=None)
    twin = twin.set_column(
        SCHEMA.get_field_index("v"), "v", pa.array([q.tolist()], SCHEMA.field("v").type)
    )
    ns.write(twin, mode="append")
    got = ns.search(q, k=3, columns=["id"], session=session)
    assert got.column("id")[0].as_py() == 10_000
    assert got.column("_distance")[0].as_py() == 0.0


def test_a_table_written_since_is_the_only_one_read_again(tmp_path, monkeypatch):
    # tables x days: 15 small partitions, pooled; one of them written to
    ns = make_ns(tmp_path / "ns", make_rows(600, seed=65, tenants=TENANTS, weights=None))
    session = SearchSession()
    q = np.random.default_rng(6).normal(size=DIM).astype(np.float32)
    first = ns.search(q, k=5, columns=["id", "tenant"], session=session)
    (before,) = session.values("pooled")
    twin = make_rows(1, seed=66, start=20_000, tenants=("c",), weights=None)
    twin = twin.set_column(
        SCHEMA.get_field_index("v"), "v", pa.array([q.tolist()], SCHEMA.field("v").type)
    )
    ns.write(twin, mode="append")
    opened = count_table_opens(monkeypatch)
    got = ns.search(q, k=5, columns=["id", "tenant"], session=session)
    monkeypatch.undo()
    assert got.column("id")[0].as_py() == 20_000 and got.column("_distance")[0].as_py() == 0.0
    assert got.slice(1).select(["id", "tenant"]).equals(first.slice(0, 4).select(["id", "tenant"]))
    assert got.equals(ns.search(q, k=5, columns=["id", "tenant"], use_index=False))
    after = next(p for p in session.values("pooled") if p is not before)
    old = {b.key: b for b in before.blocks}
    reused = [b for b in after.blocks if old.get(b.key) is b]
    assert len(after.blocks) == len(before.blocks) == 15
    assert len(reused) == 14  # every block but the one of the table written is the same object
    (fresh,) = [b for b in after.blocks if b.key not in old]
    assert opened == [fresh.key[0]]  # no other table is opened (the pool's types are the ns's)
    assert (
        len(fresh.row_ids)
        == len(next(b for b in before.blocks if b.key[0] == fresh.key[0]).row_ids) + 1
    )


def test_a_column_of_one_chunk_becomes_a_matrix_without_a_copy():
    # a pool's blocks are tables' vectors as scanned: one chunk each, kept as Arrow read them
    flat = pa.array(np.arange(40 * DIM, dtype=np.float32))
    column = pa.chunked_array([pa.FixedSizeListArray.from_arrays(flat, DIM)])
    matrix = matrix_of(column, DIM)
    assert matrix.shape == (40, DIM) and matrix[3, 5] == 3 * DIM + 5
    assert matrix.ctypes.data == flat.buffers()[1].address
    two = pa.chunked_array(column.chunks + column.chunks)
    assert np.array_equal(matrix_of(two, DIM), np.concatenate([matrix, matrix]))


@pytest.fixture(scope="module")
def mixed_ns(tmp_path_factory):
    """Partitions of 25-500 rows, the larger ones with an IVF_FLAT index: a filter's rows in
    the indexed ones are gathered with the pooled tables' (few matches each)."""
    rows = make_rows(3000, seed=64)  # tenants a..d weighted 0.5 / 0.3 / 0.15 / 0.05, 3 days
    ns = make_ns(tmp_path_factory.mktemp("mixed") / "ns", rows)
    ns.create_index("v", "IVF_FLAT", min_rows=200, num_partitions=2)
    (cov,) = ns.indexes()
    assert 0 < cov.partitions_indexed < cov.partitions_total
    return ns


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    seed=st.integers(0, 2**16),
    k=st.sampled_from([1, 5, 40]),
    metric=st.sampled_from(["l2", "cosine", "dot"]),
    sql=st.sampled_from([f for f in FILTERS if f is not None and f != "tenant = 'b'"]),
    budget=st.sampled_from([0, None]),
)
def test_a_filters_rows_in_indexed_and_pooled_tables_rank_as_the_reference(
    mixed_ns, seed, k, metric, sql, budget
):
    q = np.random.default_rng(seed).normal(size=DIM).astype(np.float32)
    session = SearchSession(budget)
    for _ in range(2):
        got = mixed_ns.search(q, k=k, filter=sql, metric=metric, session=session)
        want = mixed_ns.search(q, k=k, filter=sql, metric=metric, use_index=False)
        assert got.equals(want), (got.to_pydict(), want.to_pydict())
    if budget is None and got.num_rows:
        assert "matched" in session.report()


def test_indexed_tables_gathered_are_the_lightest_within_a_quarter_of_the_budget(mixed_ns, tune):
    # every indexed table's filtered rows are few enough alone; together they exceed a quarter
    # of the session's budget: the lightest are gathered, the others searched by Lance
    state = mixed_ns.state
    sql = "n >= 0"
    plan = plan_namespace(state, sql, check_links=False)
    opener = Opener(SearchSession(), state.schema_with_ids, plan.residual_filter, None)
    tables = [opener(t) for t in plan.tasks]
    indexed = [t for t in tables if t.index_on("v") is not None]
    assert len(indexed) >= 3 and all(t.lance_sql is not None for t in indexed)
    weights = {id(t): len(matching_ids(SearchSession(), t)) * DIM * 4 for t in indexed}
    light = sorted(weights.values())
    cap = max(light[-1], sum(light) // 2)  # every table fits alone, not all together
    budget = 4 * cap
    q = np.zeros(DIM, np.float32)
    schema = state.schema_with_ids

    def gathered() -> list:
        session = SearchSession(budget)
        query = VectorQuery(state, session, schema, schema, "v", q, 5, "l2", VectorParams())
        query.places = {id(t): i for i, t in enumerate(tables)}
        return query.gathered(indexed)

    tune(few_match_bytes=light[-1])
    picked = gathered()
    fit = max(i for i in range(len(light) + 1) if sum(light[:i]) <= cap)
    assert 0 < len(picked) == fit < len(indexed)
    assert sorted(weights[id(t)] for t in picked) == light[:fit]
    assert [t for t in indexed if t in picked] == picked  # in plan order
    tune(few_match_bytes=light[0] - 1)
    assert gathered() == []  # none is few enough alone
    # and the answer is the reference's, whichever tables are gathered
    for size in (budget, None):
        got = mixed_ns.search(q, k=5, filter=sql, session=SearchSession(size), columns=["id"])
        want = mixed_ns.search(q, k=5, filter=sql, use_index=False, columns=["id"])
        assert got["id"].to_pylist() == want["id"].to_pylist()
