"""Search across partitions (issue 22): writes after ``create_index`` index what they write
before their manifest commit (appends, overwrites, merges, updates, deletes, compaction), so
every registered table version carries every declared index its size calls for; appended rows
are reported unindexed until ``ns.maintenance.optimize_indexes()``; a build that fails
commits nothing. Search results stay equal to brute force throughout."""

from __future__ import annotations

import os

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from helpers.data import fingerprint
from helpers.search import (
    DIM,
    FIELDS,
    SCHEMA,
    assert_exact,
    assert_indexed,
    index_map,
    make_ns,
    make_rows,
    vector_array,
)

from dagster_lance_partitioned import PartitionedNamespace
from dagster_lance_partitioned.core.errors import IndexBuildError

ROWS = make_rows()  # 3,000 rows in 12 partitions of about 500 / 300 / 150 / 50 rows
MIN_ROWS = 100
VEC = "v_ivf_flat"
FTS = "txt_inverted"
QUERIES = [np.random.default_rng(i).normal(size=DIM).astype(np.float32) for i in range(3)]
WORDS = ["t3x", "t9x t20x", "t14x t2x t41x"]


def manifest_version(ns: PartitionedNamespace) -> int:
    return lance.dataset(os.path.join(ns.uri, "__manifest")).version


def coverage(ns: PartitionedNamespace) -> dict:
    return {c.name: c for c in ns.indexes()}


@pytest.fixture
def ns(tmp_path) -> PartitionedNamespace:
    ns = make_ns(tmp_path / "ns", ROWS)
    ns.create_index("v", "IVF_FLAT", min_rows=MIN_ROWS, num_partitions=2)
    ns.create_index("txt", "FTS")
    assert_indexed(ns)
    return ns


def assert_search_exact(
    ns: PartitionedNamespace, expected: pa.Table, tmp_path, *, text_rel: float = 1e-4
) -> None:
    """Vector search equals brute force over ``expected``; text search equals one plain Lance
    dataset of ``expected`` with an INVERTED index (documents of equal length), scores within
    ``text_rel`` (tables whose rows were deleted or replaced keep their index's statistics,
    as a plain Lance table does, until compaction rebuilds it)."""
    stored = ns.to_table()
    assert sorted(stored.column("id").to_pylist()) == sorted(expected.column("id").to_pylist())
    for q in QUERIES:
        assert_exact(ns.search(q, k=10, nprobes=2), expected, q, 10)
        sel = (pc.field("tenant") == "a") & (pc.field("n") < 50)
        assert_exact(
            ns.search(q, k=10, nprobes=2, filter="tenant = 'a' AND n < 50"),
            expected.filter(sel),
            q,
            10,
        )
    path = tmp_path / f"plain_{ns.version}.lance"
    ds = lance.write_dataset(expected, str(path))
    ds.create_scalar_index("txt", "INVERTED")
    for words in WORDS:
        found = ns.search(words, k=10)
        ref = ds.to_table(full_text_query=words, columns=["id"], limit=None).sort_by(
            [("_score", "descending")]
        )
        assert found.num_rows == min(10, ref.num_rows)
        got = found.column("_score").to_numpy()
        assert np.all(np.diff(got) <= 0)
        np.testing.assert_allclose(got, ref.column("_score").to_numpy()[:10], rtol=text_rel)
        scores = dict(zip(ref["id"].to_pylist(), ref["_score"].to_pylist(), strict=True))
        for i, s in zip(found["id"].to_pylist(), got, strict=True):
            assert s == pytest.approx(scores[i], rel=text_rel)


def test_append_of_new_partitions_indexes_them_in_the_write_commit(ns, tmp_path):
    before = manifest_version(ns)
    more = make_rows(900, seed=51, start=10_000, tenants=("e",), weights=None)
    result = ns.write(more, mode="append")
    assert result.manifest_version == manifest_version(ns) == before + 1  # one commit
    assert len(ns.inspect.partitions()) == 15
    assert_indexed(ns)
    cov = coverage(ns)
    assert cov[VEC].partitions_indexed == 12
    assert cov[VEC].unindexed_rows == cov[FTS].unindexed_rows == 0
    # the version the write registered is the indexed one
    new = {p.object_id for p in result.partitions}
    for oid, (rows, found) in index_map(ns).items():
        if oid in new:
            assert found == {VEC: rows, FTS: rows}
    assert_search_exact(ns, pa.concat_tables([ROWS, more]), tmp_path)


def test_a_writer_opened_before_the_declaration_indexes_its_write(tmp_path):
    ns = make_ns(tmp_path / "ns", ROWS)
    other = PartitionedNamespace.open(ns.uri)
    ns.create_index("v", "IVF_FLAT", min_rows=MIN_ROWS, num_partitions=2)
    other.write(make_rows(600, seed=52, start=10_000, tenants=("e",), weights=None))
    assert_indexed(other)
    assert coverage(other)[VEC].partitions_indexed == 12


def test_appends_to_indexed_tables_are_unindexed_until_optimize(ns, tmp_path):
    more = make_rows(300, seed=53, start=20_000, tenants=("a", "b"), weights=None)
    # a token no stored document holds: found before the index covers the new rows
    more = more.set_column(
        5, "txt", pc.binary_join_element_wise(more["txt"], pa.scalar("zzq"), " ")
    )
    before = manifest_version(ns)
    ns.write(more, mode="append")
    assert manifest_version(ns) == before + 1
    cov = coverage(ns)
    for name in (VEC, FTS):
        assert cov[name].partitions_needing == 0
        assert cov[name].unindexed_rows == 300
    everything = pa.concat_tables([ROWS, more])
    for q in QUERIES:
        assert_exact(ns.search(q, k=10, nprobes=2), everything, q, 10)
    new_ids = set(more["id"].to_pylist())
    found = ns.search("zzq", k=500)
    assert set(found["id"].to_pylist()) == new_ids
    # the new row nearest a query is found before its rows are indexed
    target = more["v"][17].values.to_numpy()
    assert ns.search(target, k=1)["id"].to_pylist() == [more["id"][17].as_py()]

    done = ns.maintenance.optimize_indexes()
    assert done.manifest_version == manifest_version(ns) == before + 2
    assert len(done.partitions) == 6  # tenant a's and b's tables
    cov = coverage(ns)
    assert cov[VEC].unindexed_rows == cov[FTS].unindexed_rows == 0
    assert cov[FTS].indexed_rows == everything.num_rows
    assert cov[VEC].indexed_rows == everything.num_rows - _flat_rows(ns)
    for rows, found in index_map(ns).values():
        for n in found.values():
            assert n == rows
    assert_indexed(ns)
    assert set(ns.search("zzq", k=500)["id"].to_pylist()) == new_ids
    for q in QUERIES:
        assert_exact(ns.search(q, k=10, nprobes=2), everything, q, 10)
    # nothing left to fold: no commit
    again = ns.maintenance.optimize_indexes()
    assert again.partitions == ()
    assert manifest_version(ns) == before + 2


def _flat_rows(ns: PartitionedNamespace) -> int:
    return sum(rows for rows, _ in index_map(ns).values() if rows < MIN_ROWS)


def test_optimize_indexes_with_a_filter_folds_only_those_partitions(ns):
    more = make_rows(300, seed=54, start=20_000, tenants=("a", "b"), weights=None)
    ns.write(more)
    done = ns.maintenance.optimize_indexes("tenant = 'a'")
    assert len(done.partitions) == 3
    assert coverage(ns)[VEC].unindexed_rows == more.filter(pc.field("tenant") == "b").num_rows
    assert ns.indexes("tenant = 'a'")[0].unindexed_rows == 0
    assert ns.indexes("tenant = 'a'")[0].partitions_total == 3


def test_append_growing_a_flat_partition_past_min_rows_indexes_it(ns, tmp_path):
    flat = {oid for oid, (rows, _) in index_map(ns).items() if rows < MIN_ROWS}
    assert len(flat) == 3  # tenant d
    more = make_rows(450, seed=55, start=30_000, tenants=("d",), weights=None)
    ns.write(more)
    tables = index_map(ns)
    assert all(tables[oid][0] >= MIN_ROWS for oid in flat)
    assert all(tables[oid][1].get(VEC) == tables[oid][0] for oid in flat)
    assert_indexed(ns)
    cov = coverage(ns)[VEC]
    assert (cov.partitions_indexed, cov.partitions_flat, cov.unindexed_rows) == (12, 0, 0)
    assert_search_exact(ns, pa.concat_tables([ROWS, more]), tmp_path)


def test_overwrite_partitions_indexes_the_new_tables(ns, tmp_path):
    before = manifest_version(ns)
    fresh = make_rows(700, seed=56, start=40_000, tenants=("b",), weights=None)
    ns.write(fresh, mode="overwrite_partitions")
    assert manifest_version(ns) == before + 1
    assert_indexed(ns)
    assert coverage(ns)[VEC].unindexed_rows == 0
    expected = pa.concat_tables([ROWS.filter(pc.field("tenant") != "b"), fresh])
    assert_search_exact(ns, expected, tmp_path)


def test_overwrite_of_everything_indexes_every_table(ns, tmp_path):
    fresh = make_rows(1200, seed=57, start=50_000)
    ns.write(fresh, mode="overwrite")
    assert_indexed(ns)
    assert_search_exact(ns, fresh, tmp_path)


def test_merge_insert_indexes_what_it_writes(ns, tmp_path):
    rng = np.random.default_rng(58)
    changed = ROWS.filter(pc.field("tenant").isin(["a", "d"])).slice(0, 120)
    changed = changed.set_column(4, "v", vector_array(rng.normal(size=(120, DIM))))
    inserted = make_rows(400, seed=59, start=60_000, tenants=("c", "e"), weights=None)
    before = manifest_version(ns)
    result = ns.merge_insert(pa.concat_tables([changed, inserted]), on="id")
    assert (result.rows_updated, result.rows_inserted) == (120, 400)
    assert manifest_version(ns) == before + 1
    assert_indexed(ns)
    kept = ROWS.filter(~pc.field("id").isin(changed["id"]))
    expected = pa.concat_tables([kept, changed, inserted])
    assert_search_exact(ns, expected, tmp_path, text_rel=0.1)
    # an updated row is found by its new vector
    target = changed["v"][5].values.to_numpy()
    found = ns.search(target, k=1, nprobes=2)
    assert found["id"].to_pylist() == [changed["id"][5].as_py()]
    assert found["_distance"][0].as_py() == pytest.approx(0.0, abs=1e-5)


def test_update_indexes_what_it_writes(ns, tmp_path):
    before = manifest_version(ns)
    result = ns.update("tenant = 'b' AND n < 500", {"n": "n + 1000"})
    assert result.rows_updated > 0
    moved = ns.update("tenant = 'c' AND n < 300", {"tenant": "'a'"})
    assert moved.rows_moved > 0
    assert manifest_version(ns) == before + 2
    assert_indexed(ns)
    n = ROWS["n"].to_numpy()
    tenant = np.array(ROWS["tenant"].to_pylist())
    n = np.where((tenant == "b") & (n < 500), n + 1000, n)
    tenant = np.where((tenant == "c") & (n < 300), "a", tenant)
    expected = ROWS.set_column(3, "n", pa.array(n, pa.int64()))
    expected = expected.set_column(1, "tenant", pa.array(tenant.tolist(), pa.utf8()))
    assert_search_exact(ns, expected, tmp_path, text_rel=0.1)
    for q in QUERIES:
        sel = (pc.field("tenant") == "b") & (pc.field("n") >= 1000)
        assert_exact(
            ns.search(q, k=10, filter="tenant = 'b' AND n >= 1000", nprobes=2),
            expected.filter(sel),
            q,
            10,
        )


def test_delete_keeps_the_tables_indexed(ns, tmp_path):
    before = manifest_version(ns)
    ns.delete("n < 150 OR tenant = 'd'")
    assert manifest_version(ns) == before + 1
    assert len(ns.inspect.partitions()) == 9  # tenant d's tables are deregistered
    assert_indexed(ns)
    expected = ROWS.filter((pc.field("n") >= 150) & (pc.field("tenant") != "d"))
    assert_search_exact(ns, expected, tmp_path, text_rel=0.1)
    gone = set(ROWS["id"].to_pylist()) - set(expected["id"].to_pylist())
    for words in WORDS:
        assert not set(ns.search(words, k=300)["id"].to_pylist()) & gone


def test_compaction_rebuilds_the_indexes(ns, tmp_path):
    parts = [
        make_rows(200, seed=60 + i, start=70_000 + 1000 * i, tenants=("a", "b"), weights=None)
        for i in range(3)
    ]
    for part in parts:
        ns.write(part)
    assert coverage(ns)[VEC].unindexed_rows == 600
    before = manifest_version(ns)
    result = ns.maintenance.compact()
    assert len(result.partitions) == 6
    assert manifest_version(ns) == before + 1
    assert_indexed(ns)
    cov = coverage(ns)
    assert cov[VEC].unindexed_rows == cov[FTS].unindexed_rows == 0
    for rows, found in index_map(ns).values():
        assert all(n == rows for n in found.values())
    assert_search_exact(ns, pa.concat_tables([ROWS, *parts]), tmp_path)


def test_dropped_index_is_not_built_by_later_writes(ns):
    ns.drop_index(VEC)
    ns.write(make_rows(600, seed=61, start=80_000, tenants=("e",), weights=None))
    for _, found in index_map(ns).values():
        assert VEC not in found
        assert FTS in found
    assert [c.name for c in ns.indexes()] == [FTS]


# -- failing builds ----------------------------------------------------------------------------


def _failing(tmp_path, rows: pa.Table | None) -> PartitionedNamespace:
    """A namespace declaring an index no table can be given (16 dimensions do not split into
    3 sub-vectors) once it holds 400 rows."""
    ns = PartitionedNamespace.create(tmp_path / "ns", SCHEMA, FIELDS)
    if rows is not None:
        ns.write(rows)
    cov = ns.create_index("v", "IVF_PQ", min_rows=400, num_partitions=1, num_sub_vectors=3)
    assert cov.partitions_indexed == 0
    return ns


def _manifest_state(ns: PartitionedNamespace) -> dict:
    seen = fingerprint(ns.uri)
    return {k: seen[k] for k in ("manifest_version", "manifest_rows", "metadata")}


def test_a_write_whose_index_build_fails_commits_nothing(tmp_path):
    ns = _failing(tmp_path, None)
    before = _manifest_state(ns)
    with pytest.raises(IndexBuildError) as err:
        ns.write(make_rows(1300, seed=62, tenants=("a",), weights=None))
    assert "partition v1$" in str(err.value)
    assert "num_sub_vectors" in str(err.value)
    assert _manifest_state(ns) == before
    fresh = PartitionedNamespace.open(ns.uri)
    assert fresh.inspect.partitions() == []
    assert fresh.count_rows() == 0


def test_an_append_whose_index_build_fails_commits_nothing(tmp_path):
    rows = make_rows(600, seed=63)  # partitions of at most about 100 rows
    ns = _failing(tmp_path, rows)
    before = _manifest_state(ns)
    with pytest.raises(IndexBuildError, match=r"partition v1\$"):
        ns.write(make_rows(1500, seed=64, start=10_000, tenants=("a",), weights=None))
    assert _manifest_state(ns) == before
    with pytest.raises(IndexBuildError, match=r"partition v1\$"):
        ns.merge_insert(make_rows(1500, seed=65, start=20_000, tenants=("b",), weights=None), "id")
    assert _manifest_state(ns) == before
    fresh = PartitionedNamespace.open(ns.uri)
    assert sorted(fresh.to_table()["id"].to_pylist()) == list(range(600))
    # small writes (below min_rows) still go through, searched flat
    small = make_rows(50, seed=66, start=30_000, tenants=("c",), weights=None)
    ns.write(small)
    q = QUERIES[0]
    assert_exact(ns.search(q, k=5), pa.concat_tables([rows, small]), q, 5)


def test_merged_rows_are_unindexed_until_optimize(ns):
    rng = np.random.default_rng(67)
    changed = ROWS.filter(pc.field("tenant") == "a").slice(0, 90)
    changed = changed.set_column(4, "v", vector_array(rng.normal(size=(90, DIM))))
    ns.merge_insert(changed, on="id")
    cov = coverage(ns)
    assert cov[VEC].unindexed_rows == cov[FTS].unindexed_rows == 90
    assert cov[VEC].partitions_needing == 0
    expected = pa.concat_tables([ROWS.filter(~pc.field("id").isin(changed["id"])), changed])
    for q in QUERIES:
        assert_exact(ns.search(q, k=10, nprobes=2), expected, q, 10)
    done = ns.maintenance.optimize_indexes()
    assert len(done.partitions) == 3
    cov = coverage(ns)
    assert cov[VEC].unindexed_rows == cov[FTS].unindexed_rows == 0
    for q in QUERIES:
        assert_exact(ns.search(q, k=10, nprobes=2), expected, q, 10)
    target = changed["v"][3].values.to_numpy()
    assert ns.search(target, k=1)["id"].to_pylist() == [changed["id"][3].as_py()]


def test_text_scores_after_a_delete_equal_a_fresh_dataset(ns, tmp_path):
    """Lance scores with the document statistics its index was built on; after a delete,
    optimize_indexes rebuilds the full-text index so that scores are exact again."""
    ns.delete("n < 150")
    done = ns.maintenance.optimize_indexes()
    assert done.partitions  # the full-text indexes of the changed tables were rebuilt
    expected = ROWS.filter(pc.field("n") >= 150)
    assert_search_exact(ns, expected, tmp_path)


def test_a_write_racing_the_declaration_leaves_partitions_needing_until_optimize(
    tmp_path, before_commit
):
    ns = make_ns(tmp_path / "ns", ROWS)
    declarer = PartitionedNamespace.open(ns.uri)
    more = make_rows(900, seed=68, start=90_000, tenants=("e",), weights=None)

    def declare(_pending) -> None:
        # the declaration lands after this write planned, before its manifest commit
        declarer.create_index("v", "IVF_FLAT", min_rows=MIN_ROWS, num_partitions=2)

    before_commit(ns, declare)
    try:
        ns.write(more)
    finally:
        before_commit(ns, None)
    (cov,) = ns.indexes()
    new = {p["object_id"] for p in ns.inspect.partitions() if p["values"]["tenant"] == "e"}
    assert len(new) == 3
    assert cov.partitions_needing == 3
    assert set(cov.needing) == new
    assert not cov.complete
    assert cov.to_dict()["needing"] == sorted(new)
    assert cov.unindexed_rows == 900
    everything = pa.concat_tables([ROWS, more])
    for q in QUERIES:  # the unindexed tables are searched flat, exactly
        assert_exact(ns.search(q, k=10, nprobes=2), everything, q, 10)
    done = ns.maintenance.optimize_indexes()
    assert set(done.partitions) == new
    assert_indexed(ns)
    (cov,) = ns.indexes()
    assert cov.complete
    assert cov.unindexed_rows == 0
    for q in QUERIES:
        assert_exact(ns.search(q, k=10, nprobes=2), everything, q, 10)
