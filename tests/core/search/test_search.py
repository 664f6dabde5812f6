"""Search across partitions (issue 22): indexes declared for the whole namespace, built on
every partition table, and searched partition by partition with the results merged into one
global top k.

Every vector result is compared with brute force over the same rows (numpy, Lance's
distances), every full-text result with one plain Lance dataset holding the same rows and an
INVERTED index. Later writes are in ``test_search_writes.py``."""

from __future__ import annotations

import datetime as dt
import json
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
    VECTOR,
    assert_exact,
    assert_indexed,
    brute_force,
    index_map,
    make_ns,
    make_rows,
    table_of,
    vector_array,
)

from dagster_lance_partitioned import PartitionedNamespace
from dagster_lance_partitioned.core.errors import (
    IndexBuildError,
    IndexDeclarationError,
    IndexNotFoundError,
    PartitionedNamespaceError,
    SearchError,
    SearchQueryError,
)

ROWS = make_rows()  # 3,000 rows in 12 partitions of about 500 / 300 / 150 / 50 rows
MIN_ROWS = 100  # the 50-row partitions (tenant d) are searched flat


def queries(n: int = 4, seed: int = 7) -> list[np.ndarray]:
    """``n`` random query vectors, and the vector of a stored row (distance 0 for l2)."""
    rng = np.random.default_rng(seed)
    stored = ROWS.column("v")[123].values.to_numpy().astype(np.float32)
    return [rng.normal(size=DIM).astype(np.float32) for _ in range(n)] + [stored]


def manifest_version(ns: PartitionedNamespace) -> int:
    return lance.dataset(os.path.join(ns.uri, "__manifest")).version


def read_versions(ns: PartitionedNamespace) -> dict[str, int]:
    return {p["object_id"]: p["read_version"] for p in ns.inspect.partitions()}


def rows_per_partition(table: pa.Table) -> dict[tuple[str, int], int]:
    counts: dict[tuple[str, int], int] = {}
    for t, d in zip(
        table.column("tenant").to_pylist(), table.column("day").to_pylist(), strict=True
    ):
        counts[(t, d.day)] = counts.get((t, d.day), 0) + 1
    return counts


@pytest.fixture
def ns(tmp_path) -> PartitionedNamespace:
    return make_ns(tmp_path / "ns", ROWS)


# -- vector search: exact ----------------------------------------------------------------------


def test_fixture_spreads_rows_over_partitions_of_mixed_sizes(ns):
    sizes = rows_per_partition(ROWS)
    assert len(ns.inspect.partitions()) == len(sizes) == 12
    assert sum(1 for s in sizes.values() if s < MIN_ROWS) == 3
    assert sum(1 for s in sizes.values() if s >= MIN_ROWS) == 9


@pytest.mark.parametrize("metric", ["l2", "cosine", "dot"])
def test_vector_search_without_index_is_brute_force(ns, metric):
    # no index declared: the only vector column is searched exhaustively in every partition
    for q in queries():
        kw = {} if metric == "l2" else {"metric": metric}
        found = ns.search(q, k=25, **kw)
        assert found.schema.names == [*SCHEMA.names, "_distance"]
        assert_exact(found, ROWS, q, 25, metric)
        assert len(set(found.column("tenant").to_pylist())) > 1  # merged across partitions


def test_vector_search_list_query_and_selected_columns(ns):
    q = queries(1)[0]
    found = ns.search(q.tolist(), k=7, columns=["id", "tenant"])
    assert found.schema.names == ["id", "tenant", "_distance"]
    assert found.schema.field("_distance").type == pa.float32()
    assert_exact(found, ROWS, q, 7)
    same = ns.search(pa.array(q.tolist(), pa.float32()), k=7, columns=["id"])
    assert same.column("id").to_pylist() == found.column("id").to_pylist()


def test_k_larger_than_the_namespace_returns_every_row(tmp_path):
    small = make_rows(40, seed=3)
    ns = make_ns(tmp_path / "ns", small)
    q = queries(1)[0]
    found = ns.search(q, k=1000)
    assert found.num_rows == 40
    assert_exact(found, small, q, 1000)


def test_partitions_below_min_rows_are_searched_flat(ns):
    cov = ns.create_index("v", "IVF_PQ")  # default min_rows (4,096) exceeds every partition
    assert cov.partitions_indexed == 0
    assert cov.partitions_flat == cov.partitions_total == 12
    assert cov.partitions_needing == 0
    assert all(not found for _, found in index_map(ns).values())
    for q in queries():
        assert_exact(ns.search(q, k=15), ROWS, q, 15)


def _search_params(index_type: str) -> dict:
    params = {"nprobes": 2, "refine_factor": 100}  # 100 x k candidates >= rows of a partition
    if index_type == "IVF_HNSW_SQ":
        params["ef"] = 2000
    return params


@pytest.mark.parametrize("metric", ["l2", "cosine", "dot"])
@pytest.mark.parametrize("index_type", ["IVF_FLAT", "IVF_PQ", "IVF_HNSW_SQ"])
def test_indexed_vector_search_is_exact_with_full_probes_and_refine(ns, index_type, metric):
    cov = ns.create_index("v", index_type, min_rows=MIN_ROWS, metric=metric, num_partitions=2)
    assert (cov.column, cov.index_type) == ("v", index_type)
    assert cov.params["metric"] == metric
    # an 8-bit PQ codebook trains on 256 rows at least: smaller tables are searched flat
    least = 256 if index_type == "IVF_PQ" else MIN_ROWS
    sizes = rows_per_partition(ROWS).values()
    indexed = sum(1 for s in sizes if s >= least)
    assert (cov.partitions_indexed, cov.partitions_flat) == (indexed, 12 - indexed)
    assert cov.partitions_needing == 0
    assert indexed >= 6
    assert cov.indexed_rows == sum(s for s in sizes if s >= least)
    assert cov.unindexed_rows == 0
    tables = index_map(ns)
    for rows, found in tables.values():
        assert (cov.name in found) == (rows >= least)
        if cov.name in found:
            assert found[cov.name] == rows
    for q in queries():
        found = ns.search(q, k=10, **_search_params(index_type))
        assert_exact(found, ROWS, q, 10, metric)
        # the metric comes from the declaration: asking for it explicitly changes nothing
        again = ns.search(q, k=10, metric=metric, **_search_params(index_type))
        assert again.column("id").to_pylist() == found.column("id").to_pylist()


def test_ivf_flat_is_exact_with_all_ivf_partitions_probed(ns):
    ns.create_index("v", "IVF_FLAT", min_rows=MIN_ROWS, num_partitions=4)
    for q in queries():
        assert_exact(ns.search(q, k=20, nprobes=4), ROWS, q, 20)


def test_default_index_search_returns_k_rows_close_to_brute_force(ns):
    ns.create_index("v", "IVF_PQ", min_rows=MIN_ROWS, num_partitions=4)
    recall = []
    for q in queries(8):
        found = ns.search(q, k=10)
        assert found.num_rows == 10
        d = found.column("_distance").to_numpy()
        assert np.all(np.diff(d) >= 0)
        ids, _ = brute_force(ROWS, q, 10)
        recall.append(len(set(ids) & set(found.column("id").to_pylist())) / 10)
        # the distances returned are exact ones (refined), whatever rows were picked
        by_id = {int(i): j for j, i in enumerate(ROWS.column("id").to_pylist())}
        picked = ROWS.take([by_id[i] for i in found.column("id").to_pylist()])
        _, exact = brute_force(picked, q, 10)
        np.testing.assert_allclose(np.sort(d), exact, rtol=1e-4, atol=1e-4)
    assert np.mean(recall) >= 0.5


# -- filters -----------------------------------------------------------------------------------


DAY2 = pa.scalar(dt.date(2024, 1, 2), pa.date32())
FILTERS = [
    ("tenant = 'b'", pc.field("tenant") == "b"),
    ("day = DATE '2024-01-02'", pc.field("day") == DAY2),
    (
        "tenant IN ('a', 'c') AND n >= 500",
        pc.field("tenant").isin(["a", "c"]) & (pc.field("n") >= 500),
    ),
    # very selective inside the largest (indexed) partitions
    ("tenant = 'a' AND n < 20", (pc.field("tenant") == "a") & (pc.field("n") < 20)),
    ("n < 8", pc.field("n") < 8),  # selective, prunes nothing
    ("tenant = 'd' AND n < 300", (pc.field("tenant") == "d") & (pc.field("n") < 300)),  # flat ones
]


@pytest.mark.parametrize("indexed", [False, True], ids=["flat", "ivf_flat"])
@pytest.mark.parametrize(("sql", "expr"), FILTERS, ids=[f[0] for f in FILTERS])
def test_filtered_vector_search_is_brute_force_over_the_filtered_rows(ns, sql, expr, indexed):
    if indexed:
        ns.create_index("v", "IVF_FLAT", min_rows=MIN_ROWS, num_partitions=2)
    matching = ROWS.filter(expr)
    assert matching.num_rows > 0
    for q in queries(2):
        found = ns.search(q, k=10, filter=sql, nprobes=2)
        assert found.num_rows == min(10, matching.num_rows)
        assert found.filter(expr).num_rows == found.num_rows  # every row satisfies it
        assert_exact(found, matching, q, 10)


def test_filter_prunes_partitions_before_searching(ns):
    plan = ns.plan_scan("tenant = 'b'")
    assert len(plan.tasks) == 3
    found = ns.search(queries(1)[0], k=50, filter="tenant = 'b'")
    assert set(found.column("tenant").to_pylist()) == {"b"}


def test_selective_filter_inside_an_indexed_partition_returns_k_rows(ns):
    ns.create_index("v", "IVF_PQ", min_rows=MIN_ROWS, num_partitions=8)
    sql = "tenant = 'a' AND n < 12"
    expr = (pc.field("tenant") == "a") & (pc.field("n") < 12)
    matching = ROWS.filter(expr)
    assert 10 < matching.num_rows < 40  # a few rows of partitions of about 500
    for q in queries():
        found = ns.search(q, k=10, filter=sql)  # default probes, no refine: still k rows
        assert found.num_rows == 10
        assert found.filter(expr).num_rows == 10
        everything = ns.search(q, k=matching.num_rows + 5, filter=sql)
        assert sorted(everything.column("id").to_pylist()) == sorted(
            matching.column("id").to_pylist()
        )
        assert_exact(everything, matching, q, matching.num_rows)
        exact = ns.search(q, k=10, filter=sql, nprobes=8, refine_factor=100)
        assert_exact(exact, matching, q, 10)


def test_filter_matching_nothing_gives_an_empty_table(ns):
    ns.create_index("v", "IVF_FLAT", min_rows=MIN_ROWS, num_partitions=2)
    for sql in ["tenant = 'zz'", "tenant = 'a' AND n > 5000"]:
        found = ns.search(queries(1)[0], k=5, filter=sql)
        assert found.num_rows == 0
        assert found.schema.names == [*SCHEMA.names, "_distance"]


# -- full-text search --------------------------------------------------------------------------

TEXT_EQUAL = make_rows(2000, seed=11, doc_length=6)  # every document 6 words long
TEXT_VARIED = make_rows(2000, seed=12, doc_length=None)  # 2 to 14 words
TEXT_QUERIES = [
    " ".join(
        np.random.default_rng(i).choice(
            [f"t{j}x" for j in range(2, 60)], size=1 + i % 3, replace=False
        )
    )
    for i in range(15)
]


@pytest.fixture(scope="module")
def text(tmp_path_factory) -> dict:
    """For equal and varied document lengths: a namespace with an FTS index, and one plain
    Lance dataset holding the same rows with an INVERTED index."""
    root = tmp_path_factory.mktemp("text")
    out = {}
    for label, rows in [("equal", TEXT_EQUAL), ("varied", TEXT_VARIED)]:
        ns = make_ns(root / f"ns_{label}", rows)
        cov = ns.create_index("txt", "FTS")
        assert cov.partitions_indexed == cov.partitions_total == 12
        ds = lance.write_dataset(rows, str(root / f"plain_{label}.lance"))
        ds.create_scalar_index("txt", "INVERTED")
        out[label] = (ns, ds)
    return out


def reference(ds: lance.LanceDataset, q: str, filter: str | None = None) -> pa.Table:
    """Every match of ``q`` in one plain dataset, best first."""
    found = ds.to_table(
        full_text_query=q, columns=["id"], filter=filter, prefilter=filter is not None, limit=None
    )
    return found.sort_by([("_score", "descending"), ("id", "ascending")])


def assert_same_ranking(found: pa.Table, ref: pa.Table, k: int, rel: float = 1e-4) -> None:
    """``found`` is the top ``k`` of ``ref`` with the same scores: ties at the boundary may
    be broken either way, rows scoring above it must all be there."""
    assert found.num_rows == min(k, ref.num_rows)
    if not found.num_rows:
        return
    scores = found.column("_score").to_numpy().astype(np.float64)
    assert np.all(np.diff(scores) <= 1e-6)
    ref_ids = ref.column("id").to_pylist()
    ref_scores = ref.column("_score").to_numpy().astype(np.float64)
    np.testing.assert_allclose(scores, ref_scores[: found.num_rows], rtol=rel)
    by_id = dict(zip(ref_ids, ref_scores, strict=True))
    got = found.column("id").to_pylist()
    for i, s in zip(got, scores, strict=True):
        assert i in by_id, i
        assert s == pytest.approx(by_id[i], rel=rel)
    boundary = ref_scores[found.num_rows - 1]
    above = {i for i, s in zip(ref_ids, ref_scores, strict=True) if s > boundary * (1 + rel)}
    assert above <= set(got)
    assert len(set(got)) == len(got)


def test_text_search_equals_a_single_dataset_for_equal_lengths(text):
    ns, ds = text["equal"]
    for q in TEXT_QUERIES:
        found = ns.search(q, k=10)
        assert found.schema.names == [*SCHEMA.names, "_score"]
        assert found.num_rows == 10
        assert_same_ranking(found, reference(ds, q), 10)


def test_text_search_column_and_columns(text):
    ns, ds = text["equal"]
    q = TEXT_QUERIES[4]
    found = ns.search(q, column="txt", k=12, columns=["id", "txt"])
    assert found.schema.names == ["id", "txt", "_score"]
    assert found.schema.field("_score").type == pa.float32()
    assert_same_ranking(found, reference(ds, q), 12)
    words = set(q.split())
    assert all(words & set(doc.split()) for doc in found.column("txt").to_pylist())


def test_text_search_equals_a_single_dataset_for_varied_lengths(text):
    # partitions' average document lengths differ: the namespace's average is the one used
    ns, ds = text["varied"]
    for q in TEXT_QUERIES:
        found = ns.search(q, k=10)
        assert found.num_rows == 10
        assert_same_ranking(found, reference(ds, q), 10)


@pytest.mark.parametrize(
    ("sql", "inside"),
    [
        ("tenant IN ('a', 'b')", "tenant IN ('a', 'b')"),
        ("tenant IN ('a', 'b') AND n < 300", "tenant IN ('a', 'b') AND n < 300"),
        ("tenant = 'c' AND n < 60", "tenant = 'c' AND n < 60"),  # a handful of rows
    ],
)
def test_text_search_with_filter_scores_as_one_dataset_prefiltered(text, sql, inside):
    # one dataset scores a pre-filtered query with its whole index: so does the namespace
    ns, ds = text["varied"]
    for q in TEXT_QUERIES[:8]:
        ref = reference(ds, q, inside)
        found = ns.search(q, k=10, filter=sql)
        assert_same_ranking(found, ref, 10)
        unfiltered = ns.search(q, k=2000, columns=["id"])
        score = dict(
            zip(unfiltered["id"].to_pylist(), unfiltered["_score"].to_pylist(), strict=True)
        )
        for row, s in zip(found["id"].to_pylist(), found["_score"].to_pylist(), strict=True):
            assert s == score[row]  # the filter changes no row's score


def test_text_search_of_tables_below_min_rows_scores_alike(tmp_path, text):
    # partitions of about 330 (tenant a) rows get the index, the others are scored flat
    _, ds = text["equal"]
    ns = make_ns(tmp_path / "ns", TEXT_EQUAL)
    cov = ns.create_index("txt", "FTS", min_rows=250)
    assert cov.partitions_indexed == 3
    assert cov.partitions_flat == 9
    for q in TEXT_QUERIES:
        assert_same_ranking(ns.search(q, k=10), reference(ds, q), 10)


def test_text_search_without_a_match_is_empty(text):
    ns, _ = text["equal"]
    for q in ["nothingmatches", "", "   "]:
        found = ns.search(q, k=5)
        assert found.num_rows == 0
        assert found.schema.names == [*SCHEMA.names, "_score"]


# -- declarations ------------------------------------------------------------------------------


def test_declaration_is_stored_in_manifest_metadata_and_survives_reopen(ns):
    cov = ns.create_index("v", "IVF_FLAT", min_rows=MIN_ROWS, num_partitions=2, metric="Cosine")
    assert cov.name == "v_ivf_flat"
    metadata = lance.dataset(os.path.join(ns.uri, "__manifest")).metadata
    stored = json.loads(metadata["dlp.index.v_ivf_flat"])
    assert stored == {
        "column": "v",
        "field_id": 4,
        "index_type": "IVF_FLAT",
        "min_rows": MIN_ROWS,
        "params": {"metric": "cosine", "num_partitions": 2},
    }
    fresh = PartitionedNamespace.open(ns.uri)
    assert fresh.indexes() == ns.indexes() == [cov]
    q = queries(1)[0]
    assert_exact(fresh.search(q, k=10, nprobes=2), ROWS, q, 10, "cosine")


def test_create_index_is_one_declaration_commit_and_one_registration_commit(ns):
    before = manifest_version(ns)
    versions_before = read_versions(ns)
    cov = ns.create_index("v", "IVF_FLAT", name="vec", min_rows=MIN_ROWS, num_partitions=2)
    assert manifest_version(ns) == ns.version == before + 2
    # the first commit declares, the tables are unchanged
    declared = PartitionedNamespace.open(ns.uri, version=before + 1)
    assert "dlp.index.vec" in declared.metadata
    assert read_versions(declared) == versions_before
    # the second registers every indexed table version at once
    after = read_versions(ns)
    sizes = index_map(ns)
    changed = {oid for oid in after if after[oid] != versions_before[oid]}
    assert changed == {oid for oid, (rows, _) in sizes.items() if rows >= MIN_ROWS}
    assert len(changed) == cov.partitions_indexed == 9
    commits = list(ns.inspect.history(since=before))
    assert len(commits) == 2
    assert [c.properties.get("operation") for c in commits] == ["create_index", "create_index"]


def test_identical_declaration_is_idempotent(ns):
    first = ns.create_index("txt", "FTS")
    version = manifest_version(ns)
    files = fingerprint(ns.uri)
    assert ns.create_index("txt", "inverted") == first  # the alias names the same index
    assert ns.create_index("txt", "fts", name="txt_inverted", min_rows=1) == first
    assert manifest_version(ns) == version
    assert fingerprint(ns.uri) == files


def test_a_different_declaration_under_a_taken_name_is_refused(ns):
    ns.create_index("v", "IVF_FLAT", name="vec", min_rows=MIN_ROWS, num_partitions=2)
    before = fingerprint(ns.uri)
    with pytest.raises(IndexDeclarationError, match="'vec'"):
        ns.create_index("v", "IVF_FLAT", name="vec", min_rows=MIN_ROWS, num_partitions=4)
    with pytest.raises(IndexDeclarationError, match="'vec'"):
        ns.create_index("v", "IVF_PQ", name="vec", min_rows=MIN_ROWS)
    assert fingerprint(ns.uri) == before


@pytest.mark.parametrize(
    ("column", "index_type", "kwargs", "named"),
    [
        ("nope", "IVF_FLAT", {}, "'nope'"),
        ("v", "IVF_WHATEVER", {}, "'IVF_WHATEVER'"),
        ("v", 3, {}, "3"),
        ("n", "FTS", {}, "'n'"),  # full text on an int
        ("txt", "IVF_PQ", {}, "'txt'"),  # vector index on a string
        ("v", "BTREE", {}, "'v'"),  # scalar index on a vector
        ("tenant", "LABEL_LIST", {}, "'tenant'"),
        ("v", "IVF_FLAT", {"min_rows": 0}, "min_rows"),
        ("v", "IVF_FLAT", {"min_rows": -3}, "min_rows"),
        ("v", "IVF_FLAT", {"min_rows": 2.5}, "min_rows"),
        ("v", "IVF_FLAT", {"min_rows": True}, "min_rows"),
        ("v", "IVF_FLAT", {"min_rows": "10"}, "min_rows"),
        ("v", "IVF_FLAT", {"metric": "hamming"}, "'hamming'"),
        ("txt", "FTS", {"metric": "l2"}, "'l2'"),  # a metric on a text index
        ("v", "IVF_FLAT", {"name": "bad name!"}, "'bad name!'"),
        ("v", "IVF_FLAT", {"name": ""}, "''"),
        ("v", "IVF_FLAT", {"when": object()}, "JSON"),
        ("v", "IVF_PQ", {"num_partitions": "x"}, "num_partitions"),
        ("v", "IVF_PQ", {"num_sub_vectors": 0}, "num_sub_vectors"),
        ("v", "IVF_FLAT", {"sample_rate": 2.5}, "sample_rate"),
    ],
)
def test_bad_declarations_are_refused_naming_the_fault_and_change_nothing(
    ns, column, index_type, kwargs, named
):
    before = fingerprint(ns.uri)
    version = ns.version
    with pytest.raises(IndexDeclarationError) as err:
        ns.create_index(column, index_type, **kwargs)
    assert named in str(err.value)
    assert isinstance(err.value, SearchError)
    assert isinstance(err.value, ValueError)
    assert fingerprint(ns.uri) == before
    assert ns.version == version
    assert ns.indexes() == []


def test_create_index_on_a_namespace_opened_at_a_version_is_refused(ns):
    old = PartitionedNamespace.open(ns.uri, version=ns.version)
    before = fingerprint(ns.uri)
    with pytest.raises(PartitionedNamespaceError, match="version"):
        old.create_index("v", "IVF_FLAT")
    assert fingerprint(ns.uri) == before


def test_a_failing_index_build_commits_nothing(ns):
    before = fingerprint(ns.uri)
    with pytest.raises(IndexBuildError) as err:
        ns.create_index("v", "IVF_PQ", min_rows=1, num_sub_vectors=3)  # 16 is not divisible
    assert "partition v1$" in str(err.value)
    assert "num_sub_vectors" in str(err.value)
    after = fingerprint(ns.uri)
    for key in ("manifest_version", "manifest_rows", "metadata"):
        assert after[key] == before[key]
    assert ns.indexes() == []


def test_a_zero_parameter_is_refused_with_a_package_error(ns):
    before = fingerprint(ns.uri)
    with pytest.raises(SearchError, match=r"num_sub_vectors|v_ivf_pq"):
        ns.create_index("v", "IVF_PQ", min_rows=1, num_sub_vectors=0)
    after = fingerprint(ns.uri)
    assert after["manifest_version"] == before["manifest_version"]
    assert after["metadata"] == before["metadata"]


# -- search errors -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "kwargs", "named"),
    [
        ("vector", {"k": 0}, "k must"),
        ("vector", {"k": -2}, "-2"),
        ("vector", {"k": 2.5}, "2.5"),
        ("vector", {"k": "3"}, "'3'"),
        ("vector", {"k": True}, "True"),
        ({"a": 1}, {}, "dict"),
        (5, {}, "int"),
        (None, {}, "NoneType"),
        ("short", {}, "dimension 16"),
        ("matrix", {}, "dimension 16"),
        ("nan", {}, "finite"),
        (["x"] * DIM, {}, "numbers"),
        ("vector", {"column": "nope"}, "'nope'"),
        ("vector", {"column": "txt"}, "'txt'"),  # not a vector column
        ("vector", {"nprobe": 3}, "nprobe"),  # a misspelled parameter
        ("vector", {"metric": "hamming"}, "hamming"),
        ("some words", {}, "INVERTED"),  # no full-text index declared
        ("some words", {"column": "nope"}, "'nope'"),
    ],
)
def test_bad_searches_are_refused_naming_the_fault(ns, query, kwargs, named):
    q = queries(1)[0]
    if isinstance(query, str) and query in ("vector", "short", "matrix", "nan"):
        query = {
            "vector": q,
            "short": q[:8],
            "matrix": np.stack([q, q]),
            "nan": np.where(np.arange(DIM) == 3, np.nan, q),
        }[query]
    before = fingerprint(ns.uri)
    with pytest.raises(SearchQueryError) as err:
        ns.search(query, **kwargs)
    assert named in str(err.value)
    assert fingerprint(ns.uri) == before


def test_text_query_on_a_column_without_a_text_index_is_refused(ns):
    ns.create_index("txt", "FTS")
    with pytest.raises(SearchQueryError, match="'tenant'"):
        ns.search("a b", column="tenant")
    with pytest.raises(
        SearchQueryError, match=r"full-text search takes no parameters, got \[.nprobes.\]"
    ):
        ns.search("a b", nprobes=3)


def test_ambiguous_vector_column_is_refused(tmp_path):
    schema = SCHEMA.append(pa.field("w", VECTOR))
    rows = make_rows(200, seed=5)
    rows = rows.append_column("w", rows.column("v"))
    ns = PartitionedNamespace.create(tmp_path / "ns", schema, FIELDS)
    ns.write(rows)
    q = queries(1)[0]
    with pytest.raises(SearchQueryError, match=r"\['v', 'w'\].*column="):
        ns.search(q)
    assert_exact(ns.search(q, column="w", k=5), rows, q, 5, column="w")
    # one declared vector index decides the column
    ns.create_index("w", "IVF_FLAT", min_rows=1, num_partitions=1, metric="dot")
    assert_exact(ns.search(q, k=5), rows, q, 5, "dot", column="w")
    ns.create_index("v", "IVF_FLAT", min_rows=1, num_partitions=1)
    with pytest.raises(SearchQueryError, match="column="):
        ns.search(q)
    assert_exact(ns.search(q, column="v", k=5), rows, q, 5)


def test_two_text_indexes_need_a_column(tmp_path):
    schema = SCHEMA.append(pa.field("title", pa.utf8()))
    rows = make_rows(300, seed=5)
    rows = rows.append_column("title", pa.array(["t5x"] * 300))
    ns = PartitionedNamespace.create(tmp_path / "ns", schema, FIELDS)
    ns.write(rows)
    ns.create_index("txt", "FTS")
    ns.create_index("title", "FTS")
    with pytest.raises(SearchQueryError, match="column="):
        ns.search("t5x")
    assert ns.search("t5x", column="title", k=400).num_rows == 300
    expected = sum("t5x" in d.split() for d in rows.column("txt").to_pylist())
    assert ns.search("t5x", column="txt", k=400).num_rows == expected


# -- drop_index --------------------------------------------------------------------------------


def test_drop_index_removes_the_declaration_and_the_tables_indexes(ns):
    ns.create_index("v", "IVF_PQ", name="vec", min_rows=MIN_ROWS, num_partitions=2, num_bits=4)
    ns.create_index("txt", "FTS")
    before = manifest_version(ns)
    done = ns.drop_index("vec")
    assert manifest_version(ns) == done.manifest_version == before + 2
    assert len(done.partitions) == 9
    assert "dlp.index.vec" not in PartitionedNamespace.open(ns.uri).metadata
    assert [c.name for c in ns.indexes()] == ["txt_inverted"]
    for _, found in index_map(ns).values():
        assert "vec" not in found
        assert "txt_inverted" in found  # the other index stays
    for q in queries(2):
        assert_exact(ns.search(q, k=10), ROWS, q, 10)
    with pytest.raises(IndexNotFoundError, match=r"'vec'.*txt_inverted"):
        ns.drop_index("vec")


def test_drop_unknown_index_is_refused(ns):
    before = fingerprint(ns.uri)
    with pytest.raises(IndexNotFoundError, match=r"'nope'.*none"):
        ns.drop_index("nope")
    assert isinstance(IndexNotFoundError("x"), LookupError)
    assert fingerprint(ns.uri) == before


def test_a_dropped_name_can_be_declared_again_otherwise(ns):
    ns.create_index("v", "IVF_FLAT", name="vec", min_rows=MIN_ROWS, num_partitions=2)
    ns.drop_index("vec")
    cov = ns.create_index("v", "IVF_PQ", name="vec", min_rows=MIN_ROWS, num_bits=4)
    assert cov.index_type == "IVF_PQ"
    assert cov.partitions_indexed == 9
    assert_indexed(ns)
    for _, found in index_map(ns).values():
        assert set(found) <= {"vec"}


# -- time travel -------------------------------------------------------------------------------


def test_search_at_an_older_manifest_version_uses_its_tables(ns):
    ns.create_index("v", "IVF_FLAT", min_rows=MIN_ROWS, num_partitions=2)
    ns.create_index("txt", "FTS")
    old_version = ns.version
    more = make_rows(1500, seed=21, start=10_000, tenants=("a", "e"), weights=None)
    ns.write(more)
    ns.delete("tenant = 'b'")
    everything = pa.concat_tables([ROWS, more]).filter(pc.field("tenant") != "b")
    old = PartitionedNamespace.open(ns.uri, version=old_version)
    for q in queries(3):
        assert_exact(old.search(q, k=10, nprobes=2), ROWS, q, 10)
        assert_exact(ns.search(q, k=10, nprobes=2), everything, q, 10)
        assert_exact(
            old.search(q, k=5, filter="tenant = 'b'", nprobes=2),
            ROWS.filter(pc.field("tenant") == "b"),
            q,
            5,
        )
        assert ns.search(q, k=5, filter="tenant = 'b'").num_rows == 0
    old_ids = set(ROWS.column("id").to_pylist())
    found = old.search("t3x t7x", k=50)
    assert found.num_rows == 50
    assert set(found.column("id").to_pylist()) <= old_ids
    assert [c.partitions_total for c in old.indexes()] == [12, 12]


# -- schema evolution --------------------------------------------------------------------------


def test_renamed_vector_column_keeps_its_index(ns):
    ns.create_index("v", "IVF_FLAT", min_rows=MIN_ROWS, num_partitions=2)
    ns.rename_column("v", "emb")
    (cov,) = ns.indexes()
    assert (cov.name, cov.column, cov.partitions_indexed) == ("v_ivf_flat", "emb", 9)
    renamed = ROWS.rename_columns([*ROWS.column_names[:4], "emb", "txt"])
    for q in queries(2):
        found = ns.search(q, k=10, nprobes=2)
        assert "emb" in found.schema.names
        assert_exact(found, renamed, q, 10, column="emb")
        assert_exact(
            ns.search(q, column="emb", k=10, filter="tenant = 'a'"),
            renamed.filter(pc.field("tenant") == "a"),
            q,
            10,
            column="emb",
        )
    with pytest.raises(SearchQueryError, match="'v'"):
        ns.search(queries(1)[0], column="v")
    # declaring it again under the new column name is the same declaration: nothing changes
    version = manifest_version(ns)
    again = ns.create_index(
        "emb", "IVF_FLAT", name="v_ivf_flat", min_rows=MIN_ROWS, num_partitions=2
    )
    assert again == cov
    assert manifest_version(ns) == version
    with pytest.raises(IndexDeclarationError, match="'v_ivf_flat'"):
        ns.create_index("emb", "IVF_FLAT", name="v_ivf_flat", min_rows=MIN_ROWS, num_partitions=3)
    # a later write indexes the renamed column
    more = make_rows(400, seed=31, start=20_000, tenants=("e",), weights=None)
    ns.write(more.rename_columns(renamed.column_names))
    assert_indexed(ns)
    both = pa.concat_tables([renamed, more.rename_columns(renamed.column_names)])
    q = queries(1)[0]
    assert_exact(ns.search(q, k=10, nprobes=2), both, q, 10, column="emb")


def test_vector_column_added_after_some_partitions_were_written(ns):
    ns.add_columns(pa.field("w", pa.list_(pa.float32(), 8)))
    rng = np.random.default_rng(41)
    more = make_rows(600, seed=42, start=50_000, tenants=("a", "e"), weights=None)
    more = more.append_column("w", vector_array(rng.normal(size=(600, 8))))
    ns.write(more)
    cov = ns.create_index("w", "IVF_FLAT", min_rows=MIN_ROWS, num_partitions=2)
    tables = index_map(ns)
    with_w = {
        p["object_id"] for p in ns.inspect.partitions() if "w" in table_of(ns, p).schema.names
    }
    assert len(with_w) == 6  # tenant a's tables (written to again) and tenant e's new ones
    big = {oid for oid in with_w if tables[oid][0] >= MIN_ROWS}
    assert cov.partitions_total == 15
    assert cov.partitions_needing == 0
    assert cov.partitions_indexed == len(big) >= 3
    assert {oid for oid, (_, found) in tables.items() if "w_ivf_flat" in found} == big
    assert cov.partitions_flat == 15 - len(big)
    # rows without a vector are never returned
    assert cov.unindexed_rows == 0
    stored = ns.to_table(columns=["id", "tenant", "n", "w"])
    assert stored.filter(pc.is_valid(stored.column("w"))).num_rows == 600
    for q in [rng.normal(size=8).astype(np.float32) for _ in range(3)]:
        found = ns.search(q, column="w", k=10, nprobes=2)
        assert_exact(found, more, q, 10, column="w")
        sel = ns.search(q, column="w", k=10, filter="tenant = 'a' AND n < 500", nprobes=2)
        assert_exact(
            sel, more.filter((pc.field("tenant") == "a") & (pc.field("n") < 500)), q, 10, column="w"
        )
        none = ns.search(q, column="w", k=10, filter="tenant = 'b'")
        assert none.num_rows == 0
        # a filter on the new column applies to old tables (which lack it) too
        assert_exact(
            ns.search(q, column="w", k=10, filter="w IS NOT NULL AND n >= 100"),
            more.filter(pc.field("n") >= 100),
            q,
            10,
            column="w",
        )


def test_tables_too_small_to_train_pq_are_searched_flat(ns):
    # Lance trains an 8-bit PQ codebook on 256 rows at least; on fewer it publishes an index
    # covering no row: such tables count as flat, get no index and are not rebuilt forever
    cov = ns.create_index("v", "IVF_PQ", min_rows=MIN_ROWS, num_partitions=2)
    tables = index_map(ns)
    big = {oid for oid, (rows, _) in tables.items() if rows >= 256}
    assert 3 <= len(big) < 9
    assert {oid for oid, (_, found) in tables.items() if found} == big
    assert (cov.partitions_indexed, cov.partitions_flat) == (len(big), 12 - len(big))
    assert cov.unindexed_rows == 0
    for _, found in tables.values():
        assert all(n > 0 for n in found.values())
    version = manifest_version(ns)
    assert ns.maintenance.optimize_indexes().partitions == ()
    assert manifest_version(ns) == version
    for q in queries(2):
        assert_exact(ns.search(q, k=10, nprobes=2, refine_factor=100), ROWS, q, 10)
    # 4-bit codes train on 16 rows: every table of MIN_ROWS rows is indexed
    cov4 = ns.create_index("v", "IVF_PQ", name="pq4", min_rows=MIN_ROWS, num_bits=4)
    assert (cov4.partitions_indexed, cov4.partitions_flat) == (9, 3)
    assert all(n > 0 for _, found in index_map(ns).values() for n in found.values())


# -- scalar indexes ----------------------------------------------------------------------------


def test_scalar_indexes_are_built_and_filters_stay_exact(ns):
    btree = ns.create_index("n", "BTREE")
    bitmap = ns.create_index("tenant", "bitmap")
    assert (btree.name, bitmap.name) == ("n_btree", "tenant_bitmap")
    for cov in (btree, bitmap):
        assert cov.partitions_indexed == cov.partitions_total == 12
        assert cov.unindexed_rows == 0
    assert_indexed(ns)
    for _, found in index_map(ns).values():
        assert {"n_btree", "tenant_bitmap"} <= set(found)
    expr = (pc.field("n") >= 990) | (pc.field("n") < 3)
    matching = ROWS.filter(expr)
    for q in queries(2):
        found = ns.search(q, k=15, filter="n >= 990 OR n < 3")
        assert found.num_rows == 15
        assert_exact(found, matching, q, 15)
    assert ns.count_rows("n >= 990 OR n < 3") == matching.num_rows
    ns.drop_index("n_btree")
    assert all("n_btree" not in found for _, found in index_map(ns).values())


def test_label_list_index_on_a_list_column(tmp_path):
    schema = SCHEMA.append(pa.field("tags", pa.list_(pa.utf8())))
    rows = make_rows(300, seed=8)
    tags = pa.array([["x", "y"] if i % 3 else ["z"] for i in range(300)], pa.list_(pa.utf8()))
    rows = rows.append_column("tags", tags)
    ns = PartitionedNamespace.create(tmp_path / "ns", schema, FIELDS)
    ns.write(rows)
    cov = ns.create_index("tags", "LABEL_LIST")
    assert cov.partitions_indexed == cov.partitions_total == len(ns.inspect.partitions())
    with pytest.raises(IndexDeclarationError, match="'tags'"):
        ns.create_index("tags", "BTREE")
    q = queries(1)[0]
    found = ns.search(q, k=500, filter="array_has_any(tags, ['z'])")
    assert found.num_rows == 100


def test_search_at_a_version_before_the_declaration_uses_no_index(ns):
    before = ns.version
    ns.create_index("txt", "FTS")
    old = PartitionedNamespace.open(ns.uri, version=before)
    assert old.indexes() == []
    with pytest.raises(SearchQueryError, match="INVERTED"):
        old.search("t3x")
    assert ns.search("t3x", k=3).num_rows == 3


def test_use_index_false_and_tokenizer_options_pass_through(tmp_path):
    rows = make_rows(600, seed=9)
    upper = pc.utf8_upper(rows["txt"])
    rows = rows.set_column(5, "txt", upper)
    ns = make_ns(tmp_path / "ns", rows)
    ns.create_index("v", "IVF_PQ", min_rows=1, num_bits=4, num_partitions=2)
    q = queries(1)[0]
    assert_exact(ns.search(q, k=10, use_index=False), rows, q, 10)
    # the query is tokenized as the index tokenizes text
    ns.create_index("txt", "FTS", name="cased", lower_case=False)
    assert ns.search("t3x", k=5).num_rows == 0
    expected = sum("T3X" in d.split() for d in rows["txt"].to_pylist())
    assert ns.search("T3X", k=1000).num_rows == expected > 0
