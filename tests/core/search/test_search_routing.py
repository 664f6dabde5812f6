"""Vector queries spanning many indexed partitions probe the IVF clusters nearest the query
across all of them (``probes``, default 20), not every cluster of every table; small tables
without an index are ranked from cached vectors. Expectations are computed here: brute force
in numpy, and each table's IVF clusters from its own centroids."""

from __future__ import annotations

import datetime as dt
import json
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from helpers.data import fingerprint
from helpers.search import (
    SCHEMA,
    brute_force,
    distances,
    make_ns,
    make_rows,
    matrix_of,
    table_of,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from dagster_lance_partitioned.core.concurrency import serial_while_fast
from dagster_lance_partitioned.core.errors import SearchQueryError
from dagster_lance_partitioned.core.search.distances import (
    Stacked,
    Vectors,
    distance,
    nearest_rows,
)
from dagster_lance_partitioned.core.search.ivf import CENTROIDS_ENV, OUTLIERS_KEY, route

DIM = 16
TENANTS = ("a", "b", "c", "d", "e", "f")
CLUSTERS_PER_TABLE = 4


def clustered_rows(per_tenant: int = 400, seed: int = 5) -> pa.Table:
    """Rows of six tenants, each tenant's vectors around its own four centres."""
    rng = np.random.default_rng(seed)
    base = make_rows(per_tenant * len(TENANTS), seed=seed, weights=None, tenants=TENANTS)
    tenants = np.repeat(np.array(TENANTS), per_tenant)
    centres = rng.normal(scale=6.0, size=(len(TENANTS), CLUSTERS_PER_TABLE, DIM))
    which = rng.integers(0, CLUSTERS_PER_TABLE, size=len(tenants))
    owner = np.repeat(np.arange(len(TENANTS)), per_tenant)
    vectors = centres[owner, which] + rng.normal(size=(len(tenants), DIM))
    table = base.set_column(1, "tenant", pa.array(tenants.tolist(), pa.utf8()))
    v = pa.FixedSizeListArray.from_arrays(pa.array(vectors.astype(np.float32).ravel()), DIM)
    return table.set_column(SCHEMA.get_field_index("v"), "v", v)


ROWS = clustered_rows()


@pytest.fixture
def ns(tmp_path):
    ns = make_ns(tmp_path / "ns", ROWS)
    ns.create_index("v", "IVF_FLAT", min_rows=1, num_partitions=CLUSTERS_PER_TABLE)
    return ns


def query_near(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    row = int(rng.integers(0, ROWS.num_rows))
    stored = ROWS.column("v")[row].values.to_numpy().astype(np.float32)
    return stored + rng.normal(scale=0.3, size=DIM).astype(np.float32)


def clusters(ns, monkeypatch) -> list[tuple[pa.Table, np.ndarray]]:
    """Per partition table: its rows (``_outlier``: recorded as far from every centroid of
    its table, measured by every search) and its IVF centroids (from Lance's index
    statistics)."""
    monkeypatch.setenv(CENTROIDS_ENV, "true")
    out = []
    for entry in ns.inspect.partitions():
        ds = table_of(ns, entry)
        stats = ds.stats.index_stats("v_ivf_flat")
        centroids = np.asarray(stats["indices"][0]["centroids"], dtype=np.float64)
        (segment,) = ds.describe_indices()[0].segments
        outliers = json.loads(ds.config()[OUTLIERS_KEY + str(segment.uuid)])
        assert outliers != "many"
        rows = ds.to_table(columns=SCHEMA.names, with_row_id=True)
        flag = pc.is_in(rows["_rowid"], pa.array(outliers, pa.uint64()))
        out.append((rows.drop_columns(["_rowid"]).append_column("_outlier", flag), centroids))
    return out


def test_probing_every_cluster_equals_brute_force(ns):
    total = sum(1 for _ in ns.inspect.partitions()) * CLUSTERS_PER_TABLE
    for seed in range(4):
        q = query_near(seed)
        found = ns.search(q, k=15, probes=total)
        ids, dist = brute_force(ROWS, q, 15)
        assert found.column("id").to_pylist() == ids
        np.testing.assert_allclose(found.column("_distance").to_numpy(), dist, rtol=1e-4)


AMBIGUOUS = 1e-3  # relative gap under which float32 and float64 may order two distances apart


def expected_ids(
    tables: list[tuple[pa.Table, np.ndarray]], q: np.ndarray, probes: int, k: int = 10
) -> list[int] | None:
    """The ids of the ``k`` rows nearest ``q`` among the rows of the ``probes`` clusters
    nearest ``q`` over every table's centroids (IVF assigns a row to the nearest centroid of
    its own table); None when a centroid, or a row that would be among them, lies so near a
    boundary that Lance's float32 arithmetic may decide it the other way."""
    ranked = sorted(
        (float(d), t, c)
        for t, (_, centroids) in enumerate(tables)
        for c, d in enumerate(distances(centroids, q, "l2"))
    )
    if (
        len(ranked) > probes
        and ranked[probes][0] - ranked[probes - 1][0] < AMBIGUOUS * (ranked[probes][0])
    ):
        return None
    chosen = ranked[:probes]
    probed, doubtful = [], []
    for t, (rows, centroids) in enumerate(tables):
        mine = list({c for _, tt, c in chosen if tt == t})
        m = matrix_of(rows)
        d = ((m[:, None, :] - centroids[None]) ** 2).sum(axis=2)
        inside = np.isin(np.argmin(d, axis=1), mine) | rows["_outlier"].to_numpy(False)
        probed.append(rows.filter(pa.array(inside)))
        if len(centroids) > 1:
            two = np.sort(d, axis=1)[:, :2]
            near = two[:, 1] - two[:, 0] < AMBIGUOUS * two[:, 1]
            doubtful.append(rows.filter(pa.array(near)))
    ids, dist = brute_force(pa.concat_tables(probed), q, k)
    limit = dist[-1] if len(dist) == k else np.inf
    for rows in doubtful:
        if rows.num_rows and np.any(distances(matrix_of(rows), q, "l2") <= limit):
            return None
    return ids


@pytest.mark.parametrize("probes", [1, 3])
def test_a_query_probes_the_nearest_clusters_over_all_tables(ns, monkeypatch, probes):
    tables = clusters(ns, monkeypatch)
    checked = 0
    for seed in range(8):
        q = query_near(seed).astype(np.float64)
        expected = expected_ids(tables, q, probes)
        if expected is None or len(expected) < 10:  # fewer: every table searched in full
            continue
        checked += 1
        found = ns.search(q, k=10, probes=probes)
        assert found.column("id").to_pylist() == expected
        if probes == 1:
            assert len(set(found.column("tenant").to_pylist())) == 1  # one table searched
    assert checked >= 4


def test_a_filter_keeping_few_rows_of_indexed_tables_measures_them_all(ns, monkeypatch):
    # the filter keeps few rows of the table (Tuning.few_match_bytes): they are measured exactly,
    # whatever the probes (the "in_memory" strategy equals the reference, use_index=False)
    one = "tenant = 'b' AND day = DATE '2024-01-02'"
    tables = [
        (rows, c)
        for rows, c in clusters(ns, monkeypatch)
        if set(rows.column("tenant").to_pylist()) == {"b"}
        and set(rows.column("day").to_pylist()) == {dt.date(2024, 1, 2)}
    ]
    assert len(tables) == 1
    for seed in range(8):
        q = query_near(seed).astype(np.float64)
        expected = brute_force(tables[0][0], q, 10)[0]
        for params in ({}, {"probes": 1}, {"nprobes": 1}, {"use_index": False}):
            found = ns.search(q, k=10, filter=one, **params)
            assert found.column("id").to_pylist() == expected


def test_default_probes_find_the_true_nearest_rows(ns):
    # 24 clusters in all, 20 probed: on well-separated clusters the answer is exact
    for seed in range(6):
        q = query_near(seed)
        found = ns.search(q, k=10)
        assert found.column("id").to_pylist() == brute_force(ROWS, q, 10)[0]


def test_probed_clusters_holding_fewer_than_k_matches_fall_back_to_every_table(ns):
    # 7 rows match the filter, spread over tenants: probing one cluster finds at most a few
    rng = np.random.default_rng(11)
    chosen = rng.choice(ROWS.num_rows, size=7, replace=False)
    marked = np.zeros(ROWS.num_rows, dtype=np.int64)
    marked[chosen] = 1
    rows = ROWS.set_column(SCHEMA.get_field_index("n"), "n", pa.array(marked * 5000))
    ns.write(rows, mode="overwrite_partitions")
    q = query_near(1)
    found = ns.search(q, k=10, probes=1, filter="n = 5000")
    assert sorted(found.column("id").to_pylist()) == sorted(
        ROWS.column("id").take(chosen).to_pylist()
    )
    matching = rows.filter(pa.compute.equal(rows.column("n"), 5000))
    assert found.column("id").to_pylist() == brute_force(matching, q, 10)[0]


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"probes": 0}, "probes"),
        ({"probes": True}, "probes"),
        ({"probes": 2.5}, "probes"),
        ({"probes": 4, "nprobes": 2}, "nprobes"),
        ({"probes": 4, "minimum_nprobes": 1}, "minimum_nprobes"),
    ],
)
def test_bad_probes_raise_naming_the_parameter_and_change_nothing(ns, params, named):
    before = fingerprint(ns.uri)
    with pytest.raises(SearchQueryError, match=named):
        ns.search(query_near(0), k=5, **params)
    assert fingerprint(ns.uri) == before


@pytest.mark.parametrize("index_type", ["IVF_PQ", "IVF_HNSW_SQ"])
def test_routed_candidates_are_refined_together_by_exact_distance(tmp_path, index_type):
    rows = clustered_rows(per_tenant=1500)  # ~500 rows per table: PQ codebooks train (>= 256)
    ns = make_ns(tmp_path / "ns", rows)
    cov = ns.create_index("v", index_type, min_rows=1, num_partitions=CLUSTERS_PER_TABLE)
    assert cov.partitions_indexed == cov.partitions_total == 18
    for seed in range(4):
        q = query_near(seed)
        found = ns.search(q, k=10)
        got = found.column("_distance").to_numpy()
        assert np.all(np.diff(got) >= 0)
        # every distance returned is the row's exact one, not the index's approximation
        hits = rows.filter(pa.compute.is_in(rows.column("id"), found.column("id")))
        by_id = dict(
            zip(hits.column("id").to_pylist(), distances(matrix_of(hits), q, "l2"), strict=True)
        )
        want = [by_id[i] for i in found.column("id").to_pylist()]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        # every cluster probed and every candidate re-ranked: brute force
        everything = ns.search(q, k=10, probes=10_000, refine_factor=1_000)
        assert everything.column("id").to_pylist() == brute_force(rows, q, 10)[0]


def test_route_picks_the_nearest_centroids_across_tables():
    a = np.array([[0.0, 0.0], [10.0, 0.0]], dtype=np.float32)
    b = np.array([[1.0, 0.0], [20.0, 0.0], [30.0, 0.0]], dtype=np.float32)
    c = np.array([[0.5, 0.5]], dtype=np.float32)
    q = np.array([0.2, 0.0], dtype=np.float32)

    def picked(probes: int) -> list[list[int]]:
        return [r.tolist() for r in route([a, b, c], q, "l2", probes)]

    assert picked(1) == [[0], [], []]
    assert picked(3) == [[0], [0], [0]]
    assert picked(4) == [[0, 1], [0], [0]]
    assert picked(100) == [[0, 1], [0, 1, 2], [0]]


def cached(matrix: np.ndarray, cuts: list[int] | None = None) -> Vectors:
    """The rows as one matrix, or (``cuts``) as blocks stacked as a pool's tables are."""
    flat = Vectors.of(matrix, np.arange(len(matrix), dtype=np.uint64))
    if cuts is None:
        return flat
    blocks = np.split(matrix, sorted(c % (len(matrix) + 1) for c in cuts))
    return Vectors(Stacked(blocks, matrix.shape[1]), flat.row_ids, flat.norms, flat.largest)


@settings(max_examples=60, deadline=None)
@given(
    rows=st.integers(1, 400),
    k=st.integers(1, 12),
    offset=st.sampled_from([0.0, 1.0, 1e3]),
    duplicates=st.booleans(),
    seed=st.integers(0, 2**16),
    metric=st.sampled_from(["l2", "cosine", "dot"]),
    cuts=st.none() | st.lists(st.integers(0, 400), max_size=6),
)
def test_cached_ranking_equals_a_full_sort(rows, k, offset, duplicates, seed, metric, cuts):
    # the screening strategy (one matrix product, then the rows its rounding bound leaves a
    # chance measured exactly) equals measuring every row, under every metric, whether the
    # rows are one matrix or blocks stacked (a pool's tables, empty blocks included)
    rng = np.random.default_rng(seed)
    matrix = (rng.normal(size=(rows, 8)) + offset).astype(np.float32)
    if duplicates:
        matrix[rows // 2 :] = matrix[: rows - rows // 2]
    q = matrix[rng.integers(0, rows)] + rng.normal(scale=0.01, size=8).astype(np.float32)
    vectors = cached(matrix, cuts)
    positions, got = nearest_rows(vectors, q, k, metric)
    full = distance(matrix, q, metric)
    expected = np.argsort(full, kind="stable")[:k]
    assert positions.tolist() == expected.tolist()
    assert got.tolist() == full[expected].tolist()
    among = np.sort(rng.choice(rows, size=max(1, rows // 3), replace=False))
    positions, got = nearest_rows(vectors, q, k, metric, among)
    expected = among[np.argsort(full[among], kind="stable")[:k]]
    assert positions.tolist() == expected.tolist()
    picked = rng.integers(0, rows, size=7)  # any order, repeats
    assert np.array_equal(vectors.matrix[picked], matrix[picked])


def test_cached_ranking_far_from_the_origin_is_exact():
    # |x|^2 ~ 8e6 while distances are ~1: the matrix product alone misorders a third of these
    for seed in range(50):
        rng = np.random.default_rng(seed)
        matrix = (rng.normal(size=(300, 8)) + 1e3).astype(np.float32)
        q = matrix[5] + rng.normal(scale=0.01, size=8).astype(np.float32)
        positions, _ = nearest_rows(cached(matrix), q, 3, "l2")
        assert (
            positions.tolist() == np.argsort(distance(matrix, q, "l2"), kind="stable")[:3].tolist()
        )


def test_serial_while_fast_keeps_order_and_goes_concurrent_after_a_slow_call():
    import threading

    seen: list[tuple[int, int]] = []

    def fn(x: int) -> int:
        if x == 3:
            time.sleep(0.02)
        seen.append((x, threading.get_ident()))
        return x * x

    main = threading.get_ident()
    assert serial_while_fast(fn, list(range(10)), threads=4) == [x * x for x in range(10)]
    where = dict(seen)
    assert all(where[x] == main for x in range(4))  # up to and including the slow call
    assert any(where[x] != main for x in range(4, 10))
    seen.clear()
    assert serial_while_fast(fn, [0, 1, 2], threads=4) == [0, 1, 4]
    assert {t for _, t in seen} == {main}


@pytest.mark.parametrize("index_type", ["IVF_FLAT", "IVF_PQ", "IVF_HNSW_SQ"])
@pytest.mark.parametrize("metric", ["l2", "cosine"])
def test_centroids_from_the_ivf_model_equal_the_index_statistics(tmp_path, index_type, metric):
    # routing reads each table's centroids from Lance's IVF model of the index; they are the
    # centroids Lance's index statistics report, in the same order
    from dagster_lance_partitioned.core.search.ivf import _centroids_from_statistics, read_centroids

    ns = make_ns(tmp_path / "ns", clustered_rows(per_tenant=1500))  # 500 rows a table: PQ trains
    ns.create_index("v", index_type, min_rows=1, num_partitions=CLUSTERS_PER_TABLE, metric=metric)
    checked = 0
    for entry in ns.inspect.partitions():
        ds = table_of(ns, entry)
        names = [d.name for d in ds.describe_indices()]
        if not names:  # too few rows to train this index type
            continue
        (name,) = names
        checked += 1
        from_model = read_centroids(ds, name)
        assert from_model is not None and from_model.shape == (CLUSTERS_PER_TABLE, DIM)
        np.testing.assert_array_equal(from_model, _centroids_from_statistics(ds, name))
    assert checked
