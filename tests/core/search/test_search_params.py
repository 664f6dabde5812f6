"""What a search accepts (issue 32): every parameter out of its range is refused with a
:class:`SearchQueryError` naming it, before anything runs, the same way for vector and
full-text queries on indexed and unindexed namespaces; a ``k`` beyond the rows that can match
returns those rows with memory bounded by the data (searches that asked Lance for more than
memory holds run in a subprocess under an address-space limit); a zero vector under the
cosine metric is refused everywhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from helpers.data import fingerprint
from helpers.search import DIM, assert_exact, brute_force, distances, make_ns, make_rows, matrix_of

from dagster_lance_partitioned import PartitionedNamespace
from dagster_lance_partitioned.core.errors import PartitionedNamespaceError, SearchQueryError

ROWS = make_rows(1200, seed=11)  # 12 partitions of about 200 / 120 / 60 / 20 rows
Q = np.random.default_rng(5).normal(size=DIM).astype(np.float32)
ROOT = Path(__file__).resolve().parents[3]
SEARCH_PROC = Path(__file__).resolve().parents[2] / "helpers" / "search_proc.py"


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> PartitionedNamespace:
    """Every partition with an IVF_FLAT index on ``v`` and a full-text index on ``txt``."""
    ns = make_ns(tmp_path_factory.mktemp("params") / "indexed", ROWS)
    ns.create_index("v", "IVF_FLAT", min_rows=1, num_partitions=2)
    ns.create_index("txt", "FTS")
    return PartitionedNamespace.open(ns.uri)


@pytest.fixture(scope="module")
def unindexed(tmp_path_factory: pytest.TempPathFactory) -> PartitionedNamespace:
    return make_ns(tmp_path_factory.mktemp("params") / "unindexed", ROWS)


@pytest.fixture(params=["indexed", "unindexed"])
def ns(request: pytest.FixtureRequest) -> PartitionedNamespace:
    ns: PartitionedNamespace = request.getfixturevalue(request.param)
    return ns


def refused(ns: PartitionedNamespace, query: Any, **kwargs: Any) -> str:
    """The message of the SearchQueryError ``ns.search(query, **kwargs)`` raises; nothing
    stored changed."""
    before = fingerprint(ns.uri)
    with pytest.raises(SearchQueryError) as err:
        ns.search(query, **kwargs)
    assert fingerprint(ns.uri) == before
    message = str(err.value)
    assert ".rs:" not in message
    return message


# -- every parameter, checked before anything runs ---------------------------------------------
BAD_VECTOR_SEARCHES = [
    ({"k": 0}, "k must be a positive integer"),
    ({"k": -5}, "k must be a positive integer"),
    ({"k": 2.5}, "k must be a positive integer"),
    ({"k": None}, "k must be a positive integer"),
    ({"probes": 0}, "probes must be a positive integer"),
    ({"probes": "3"}, "probes must be a positive integer"),
    ({"nprobes": 0}, "nprobes must be a positive integer"),
    ({"nprobes": -1}, "nprobes must be a positive integer"),
    ({"nprobes": "abc"}, "nprobes must be a positive integer"),
    ({"nprobes": 1.5}, "nprobes must be a positive integer"),
    ({"nprobes": True}, "nprobes must be a positive integer"),
    ({"minimum_nprobes": 0}, "minimum_nprobes must be a positive integer"),
    ({"maximum_nprobes": 0}, "maximum_nprobes must be a positive integer"),
    ({"maximum_nprobes": -1}, "maximum_nprobes must be a positive integer"),
    ({"minimum_nprobes": 5, "maximum_nprobes": 2}, "minimum_nprobes (5) exceeds maximum_nprobes"),
    ({"minimum_nprobes": 2**41, "maximum_nprobes": 2**40}, "minimum_nprobes (2199023255552) exc"),
    ({"nprobes": 3, "minimum_nprobes": 2}, "nprobes sets both minimum_nprobes and maximum"),
    ({"probes": 4, "nprobes": 2}, "exclude each other"),
    ({"probes": 4, "use_index": False}, "probes"),
    ({"refine_factor": 0}, "refine_factor must be a positive integer"),
    ({"refine_factor": -1}, "refine_factor must be a positive integer"),
    ({"ef": 0}, "ef must be a positive integer"),
    ({"ef": -3}, "ef must be a positive integer"),
    ({"ef": 5, "k": 10}, "ef (HNSW search breadth) must be at least k = 10, got 5"),
    ({"use_index": "yes"}, "use_index must be True or False, got 'yes'"),
    ({"use_index": 1}, "use_index must be True or False, got 1"),
    ({"metric": "hamming"}, "metric must be one of l2, cosine, dot, got 'hamming'"),
    ({"metric": 3}, "metric must be one of l2, cosine, dot, got 3"),
    ({"nprobe": 3}, "unknown vector search parameter(s) ['nprobe']"),
    ({"column": 5}, "column must be a column name, got 5"),
    ({"columns": "id"}, "columns must be a list of column names, got the string 'id'"),
    ({"columns": []}, "columns must name at least one column"),
    ({"columns": ["id", "id"]}, "columns names 'id' twice"),
    ({"columns": ["id", 3]}, "columns must be a list of column names, got 3 in it"),
]


@pytest.mark.parametrize(("kwargs", "says"), BAD_VECTOR_SEARCHES)
def test_bad_vector_search_parameters_are_refused_naming_them(ns, kwargs, says):
    assert says in refused(ns, Q, **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"k": 0}, "k must be a positive integer"),
        ({"k": True}, "k must be a positive integer"),
        ({"nprobes": 3}, "full-text search takes no parameters, got ['nprobes']"),
        ({"ef": 0, "metric": "l2"}, "full-text search takes no parameters, got ['ef', 'metric']"),
        ({"column": 5}, "column must be a column name, got 5"),
        ({"columns": "id"}, "columns must be a list of column names, got the string 'id'"),
    ],
)
def test_bad_text_search_parameters_are_refused_naming_them(ns, kwargs, says):
    # refused before the full-text index is looked for (the unindexed namespace has none)
    assert says in refused(ns, "t1x t2x", **kwargs)


@pytest.mark.parametrize("query", ["vector", "text"])
def test_a_filter_of_the_wrong_type_is_a_package_error(indexed, query):
    before = fingerprint(indexed.uri)
    with pytest.raises(PartitionedNamespaceError) as err:
        indexed.search(Q if query == "vector" else "t1x", filter=123)  # type: ignore[arg-type]
    assert "filter" in str(err.value) and "123" in str(err.value)
    assert fingerprint(indexed.uri) == before


def test_none_leaves_a_parameter_to_its_default(ns):
    given = ns.search(Q, k=7, nprobes=None, refine_factor=None, ef=None, use_index=None)
    assert given.column("id").to_pylist() == ns.search(Q, k=7).column("id").to_pylist()


@pytest.mark.parametrize("kwargs", [{}, {"nprobes": 2}, {"probes": 3}])
def test_hnsw_ef_from_k_up_is_taken(tmp_path, kwargs):
    """Lance's HNSW needs ef at least the candidates it re-ranks (k * refine_factor): an ef
    from k up to that failed every search (a PartitionReadError saying "ef must be greater
    than or equal to k" for ef = 50, k = 10)."""
    ns = make_ns(tmp_path / "hnsw", ROWS)
    ns.create_index("v", "IVF_HNSW_SQ", min_rows=1, num_partitions=2)
    for ef in (10, 50):
        found = ns.search(Q, k=10, ef=ef, **kwargs)
        assert found.num_rows == 10
        assert np.all(np.diff(found["_distance"].to_numpy()) >= 0)


# -- k beyond the rows that can match ---------------------------------------------------------
@pytest.mark.parametrize("k", [2**63, 2**64, 10**30])
def test_a_huge_k_returns_every_matching_row(ns, k):
    assert_exact(ns.search(Q, k=k), ROWS, Q, len(ROWS))
    kept = ROWS.filter(pc.equal(ROWS["tenant"], "b"))
    assert_exact(ns.search(Q, k=k, filter="tenant = 'b'"), kept, Q, len(kept))
    assert_exact(ns.search(Q, k=k, nprobes=2**70), ROWS, Q, len(ROWS))


@pytest.mark.parametrize("k", [2**63, 10**30])
def test_a_huge_k_returns_every_text_match(indexed, k):
    found = indexed.search("t3x", k=k)
    expected = sum("t3x" in d.split() for d in ROWS["txt"].to_pylist())
    assert found.num_rows == expected > 0
    assert np.all(np.diff(found["_score"].to_numpy()) <= 0)


def _limited(searches: list[dict[str, Any]], tmp_path: Path) -> list[dict[str, Any]]:
    """``searches`` run by ``helpers/search_proc.py`` under an address-space limit of 3 GiB
    beyond what the opened process holds; the process must end normally."""
    config = tmp_path / "searches.json"
    config.write_text(json.dumps({"headroom_gb": 3, "searches": searches}))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), str(ROOT / "tests"), env.get("PYTHONPATH")) if p
    )
    env["RUST_BACKTRACE"] = "0"
    done = subprocess.run(
        [sys.executable, str(SEARCH_PROC), str(config)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return [json.loads(line) for line in done.stdout.splitlines()]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc")
def test_searches_asking_for_more_than_memory_holds_answer_within_bounds(
    tmp_path, indexed, unindexed
):
    """``k = 10**9`` made Lance allocate 80 GB for a namespace of 1,200 rows (the process
    aborted); a huge ``refine_factor`` or HNSW ``ef`` did the same. Each is answered now with
    memory bounded by the rows the searched tables hold."""
    hnsw = make_ns(tmp_path / "hnsw", ROWS)
    hnsw.create_index("v", "IVF_HNSW_SQ", min_rows=1, num_partitions=2)
    q = [float(x) for x in Q]
    huge = str(10**9)
    searches = [
        {"uri": indexed.uri, "query": q, "kwargs": {"k": huge}},
        {"uri": hnsw.uri, "query": q, "kwargs": {"k": huge}},
        {"uri": unindexed.uri, "query": q, "kwargs": {"k": huge}},
        {"uri": indexed.uri, "query": q, "kwargs": {"k": huge, "nprobes": 1}},
        {"uri": indexed.uri, "query": "t3x", "kwargs": {"k": huge}},
        {"uri": indexed.uri, "query": q, "kwargs": {"k": 10, "refine_factor": str(10**8)}},
        {
            "uri": indexed.uri,
            "query": q,
            "kwargs": {"k": 10, "refine_factor": str(10**8), "nprobes": 2},
        },
        {"uri": hnsw.uri, "query": q, "kwargs": {"k": 10, "refine_factor": str(10**8)}},
        {"uri": hnsw.uri, "query": q, "kwargs": {"k": 10, "ef": huge}},
        {"uri": hnsw.uri, "query": q, "kwargs": {"k": 10, "ef": huge, "nprobes": 2}},
        {"uri": hnsw.uri, "query": q, "kwargs": {"k": 10, "ef": 10}},  # ef = k: Lance's least
    ]
    found = _limited(searches, tmp_path)
    assert len(found) == len(searches)
    ids, want = brute_force(ROWS, Q, len(ROWS))
    for got in found[:4]:
        assert got["ids"] == ids
        np.testing.assert_allclose(got["values"], want, rtol=1e-4, atol=1e-4)
    expected = sum("t3x" in d.split() for d in ROWS["txt"].to_pylist())
    assert len(found[4]["ids"]) == expected
    for got in found[5:]:
        # ten rows, nearest first, each with its exact distance
        assert len(got["ids"]) == 10, got
        rows = ROWS.filter(pc.is_in(ROWS["id"], pa.array(got["ids"])))
        exact = dict(zip(rows["id"].to_pylist(), distances(matrix_of(rows), Q, "l2"), strict=True))
        np.testing.assert_allclose(
            got["values"], [exact[i] for i in got["ids"]], rtol=1e-4, atol=1e-4
        )
        assert got["values"] == sorted(got["values"])
    assert found[6]["ids"] == ids[:10]  # IVF_FLAT, every cluster probed, re-ranked: exact


# -- a zero vector under the cosine metric --------------------------------------------------------
def test_a_zero_vector_with_cosine_is_refused_everywhere(tmp_path, unindexed):
    cosine = make_ns(tmp_path / "cosine", ROWS)
    cosine.create_index("v", "IVF_FLAT", min_rows=1, num_partitions=2, metric="cosine")
    zero = np.zeros(DIM, np.float32)
    tiny = np.full(DIM, 1e-30, np.float32)  # no norm in float32 either
    for ns, kwargs in [
        (cosine, {}),  # the declared index's metric
        (cosine, {"filter": "tenant = 'a'"}),
        (cosine, {"nprobes": 2}),
        (cosine, {"use_index": False}),
        (unindexed, {"metric": "cosine"}),
        (unindexed, {"metric": "COSINE", "filter": "tenant = 'a'"}),
    ]:
        for q in (zero, tiny):
            message = refused(ns, q, **kwargs)
            assert "cosine" in message and "zero" in message and "'v'" in message, message
    # l2 and dot measure a zero vector: rows answer
    assert_exact(cosine.search(zero, k=5, metric="l2"), ROWS, zero, 5, "l2")
    assert cosine.search(zero, k=5, metric="dot")["_distance"].to_pylist() == [1.0] * 5
    assert cosine.search(-Q, k=5).num_rows == 5
