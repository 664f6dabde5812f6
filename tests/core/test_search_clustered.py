"""Indexed tables' vectors kept by IVF cluster (``core/search/clustered.py``): the second query
routed over the same tables keeps their vectors in memory (bfloat16, grouped by the centroid
each is nearest to, built in the background); later routed queries probe them there, not
through Lance, and measure exactly only the rows whose error bounds leave them a chance of
being among the k nearest. Results still equal brute force over the clusters probed, with
exact distances. Expectations are brute force in numpy."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from helpers.search import assert_exact, distances, make_ns, make_rows, matrix_of
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from dagster_lance_partitioned.core.search import clustered, flat
from dagster_lance_partitioned.core.search import query as search_query

ROWS = make_rows(3000, seed=11)
FINITE = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False, width=32)


@pytest.fixture(autouse=True)
def _fresh() -> None:
    clustered.clear()
    flat._cached_vectors.clear()


def _indexed(tmp_path, metric: str = "l2", index_type: str = "IVF_FLAT"):
    ns = make_ns(tmp_path / "ns", ROWS)
    params = {"num_sub_vectors": 4} if index_type == "IVF_PQ" else {}
    ns.create_index("v", index_type, min_rows=1, num_partitions=4, metric=metric, **params)
    return ns


def _query(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    row = int(rng.integers(0, ROWS.num_rows))
    stored = ROWS.column("v")[row].values.to_numpy().astype(np.float32)
    return stored + rng.normal(scale=0.3, size=len(stored)).astype(np.float32)


def _kept_tables() -> int:
    return sum(
        1 for _, (v, _) in flat._cached_vectors._items.items() if isinstance(v, clustered.Clustered)
    )


def _warm(ns, **params) -> None:
    """Two routed queries over every table, then the builds they started."""
    ns.search(_query(100), k=5, **params)
    ns.search(_query(101), k=5, **params)
    clustered.settle()


@given(arrays(np.float32, st.integers(1, 64), elements=FINITE))
@settings(max_examples=200, deadline=None)
def test_bfloat16_keeps_each_value_within_its_rounding_bound(values):
    back = clustered.from_bfloat16(clustered.to_bfloat16(values.reshape(1, -1))).ravel()
    assert np.all(np.abs(back - values) <= 2.0**-8 * np.abs(values) * 1.0001 + 2.0**-133)


@pytest.mark.parametrize("metric", ["l2", "cosine", "dot"])
def test_the_bounds_hold_the_exact_distances(metric):
    rng = np.random.default_rng(3)
    matrix = (rng.normal(size=(2000, 32)) * rng.uniform(0.01, 100, size=(2000, 1))).astype(
        np.float32
    )
    halves = clustered.to_bfloat16(matrix)
    widened = clustered.from_bfloat16(halves)
    norms = np.einsum("ij,ij->i", widened, widened)
    for _ in range(5):
        q = rng.normal(size=32).astype(np.float32) * 10
        kept = clustered.Clustered(
            halves, np.arange(len(matrix), dtype=np.uint64), norms, np.array([0, len(matrix)])
        )
        [(ids, approximate)] = clustered.probe([(kept, np.array([0]))], q, metric, 2000, 2000)
        low, high = clustered.bounds(approximate, norms[ids.astype(np.int64)], q, metric)
        exact = distances(matrix.astype(np.float64)[ids.astype(np.int64)], q, metric)
        assert np.all(low <= exact) and np.all(exact <= high)


def test_probe_keeps_only_rows_that_can_be_among_the_k_nearest():
    rng = np.random.default_rng(4)
    matrix = rng.normal(size=(5000, 16)).astype(np.float32)
    halves = clustered.to_bfloat16(matrix)
    widened = clustered.from_bfloat16(halves)
    kept = clustered.Clustered(
        halves,
        np.arange(len(matrix), dtype=np.uint64),
        np.einsum("ij,ij->i", widened, widened),
        np.array([0, 2500, 5000]),
    )
    q = rng.normal(size=16).astype(np.float32)
    [(ids, _)] = clustered.probe([(kept, np.array([0, 1]))], q, "l2", 10, 100)
    exact = distances(matrix.astype(np.float64), q, "l2")
    truth = set(np.argsort(exact)[:10].tolist())
    assert truth <= {int(i) for i in ids}
    assert len(ids) < 100  # the bounds leave far fewer than k * refine_factor


@pytest.mark.parametrize(
    ("metric", "index_type"), [("l2", "IVF_FLAT"), ("cosine", "IVF_PQ"), ("dot", "IVF_FLAT")]
)
def test_kept_clusters_probed_here_equal_brute_force(tmp_path, monkeypatch, metric, index_type):
    ns = _indexed(tmp_path, metric, index_type)
    tables = len(ns.plan_scan().tasks)
    [coverage] = ns.indexes()
    assert coverage.partitions_indexed >= 4  # (IVF_PQ trains on tables of 256 rows and more)
    _warm(ns, metric=metric)
    assert _kept_tables() == coverage.partitions_indexed

    def no_lance(*args, **kwargs):
        raise AssertionError("a table with kept clusters was searched by Lance")

    monkeypatch.setattr(search_query._Query, "probed", no_lance)
    for seed in range(3):
        q = _query(seed)
        # every cluster probed: brute force over every row
        found = ns.search(q, k=12, metric=metric, probes=tables * 4)
        assert_exact(found, ROWS, q, 12, metric)
        # the default probes: exact distances for the rows returned, ascending
        some = ns.search(q, k=12, metric=metric)
        by_id = dict(
            zip(
                ROWS.column("id").to_pylist(),
                distances(matrix_of(ROWS), q, metric).tolist(),
                strict=True,
            )
        )
        got = some.column("_distance").to_numpy()
        want = [by_id[i] for i in some.column("id").to_pylist()]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        assert np.all(np.diff(got) >= 0)


def test_one_query_keeps_nothing_and_a_filter_inside_tables_keeps_lance(tmp_path):
    ns = _indexed(tmp_path)
    ns.search(_query(1), k=5)
    clustered.settle()
    assert _kept_tables() == 0  # a one-off query pays for no copy

    # a filter evaluated inside each table: Lance's searches, which apply it before ranking
    _warm(ns)
    q = _query(2)
    found = ns.search(q, k=10, filter="n < 50", probes=len(ns.plan_scan().tasks) * 4)
    rows = ROWS.filter(pa.compute.less(ROWS.column("n"), 50))
    assert_exact(found, rows, q, 10)


def test_nothing_is_kept_without_memory_for_it(tmp_path, monkeypatch):
    monkeypatch.setattr(clustered, "FLAT_CACHE_BYTES", 0)
    ns = _indexed(tmp_path)
    _warm(ns)
    assert _kept_tables() == 0
    q = _query(3)
    assert_exact(ns.search(q, k=10, probes=64), ROWS, q, 10)


def test_tables_that_would_not_fit_together_are_not_kept(tmp_path, monkeypatch):
    ns = _indexed(tmp_path)
    # room for about a third of the indexed rows' clusters: none kept (else every query would
    # evict what the one before built)
    monkeypatch.setattr(clustered, "FLAT_CACHE_BYTES", ROWS.num_rows * 44 // 3)
    _warm(ns)
    assert _kept_tables() == 0
    q = _query(6)
    assert_exact(ns.search(q, k=10, probes=64), ROWS, q, 10)
    monkeypatch.setattr(clustered, "FLAT_CACHE_BYTES", ROWS.num_rows * 44 * 2)
    _warm(ns)
    assert _kept_tables() > 0


def test_a_new_table_version_is_searched_by_lance_until_kept_again(tmp_path):
    ns = _indexed(tmp_path)
    _warm(ns)
    before = _kept_tables()
    more = make_rows(300, seed=12, start=10_000)
    ns.write(more, mode="append")
    rows = pa.concat_tables([ROWS, more])
    q = _query(4)
    # the appended tables' new versions are not kept: Lance searches them, results exact
    assert_exact(ns.search(q, k=10, probes=64), rows, q, 10)
    ns.search(_query(5), k=5)
    clustered.settle()
    assert _kept_tables() > before  # the new versions kept from the second query over them
    assert_exact(ns.search(q, k=10, probes=64), rows, q, 10)
