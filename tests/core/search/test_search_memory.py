"""What searches keep in memory between queries: the terms of small tables (full-text queries
scored here from them equal Lance's scores), the returned columns of small tables (rows taken
from them equal Lance's takes), the scan plans of a manifest version, and the shared workers
of ``parallel_map``."""

from __future__ import annotations

import multiprocessing
import os
import re
import subprocess
import sys
import threading

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from helpers.search import brute_force, distances, make_ns, make_rows

from dagster_lance_partitioned.core import concurrency
from dagster_lance_partitioned.core.errors import PathEscapeError, SearchQueryError
from dagster_lance_partitioned.core.lru import Lru
from dagster_lance_partitioned.core.search import bm25
from dagster_lance_partitioned.core.search.declaration import IndexDeclaration
from dagster_lance_partitioned.core.search.session import SearchSession
from dagster_lance_partitioned.core.search.tables import take_rows

TEXTS = [
    "Running dogs, QUICKLY!",
    "",
    None,
    "émigré café naïve",
    "x" * 60 + " short",
    "the and of a",  # stop words
    "numbers 123 4.5 a1b2",
    "zqxjdocbreakzqxj inside",  # the separating word itself
    "ZQXJDOCBREAKZQXJ loud",
    "tab\tseparated\nlines",
    "hyphen-ated under_score",
    "日本語のテキスト",
]


def declaration(**params) -> IndexDeclaration:
    return IndexDeclaration("txt_idx", "txt", 6, "INVERTED", 1, params)


# -- tokenizing many documents at once --------------------------------------------------------
@pytest.mark.parametrize(
    "params",
    [
        {},
        {"stem": False},
        {"remove_stop_words": True},
        {"lower_case": False},
        {"ascii_folding": True},
        {"base_tokenizer": "whitespace"},
        {"base_tokenizer": "ngram", "min_ngram_length": 2, "max_ngram_length": 3},
        {"max_token_length": 8},
    ],
)
@pytest.mark.parametrize("texts", [TEXTS, TEXTS[:7], [t for t in TEXTS if t and "zqxj" not in t]])
def test_documents_tokenized_together_equal_one_by_one(params, texts):
    decl = declaration(**params)
    expected = [[t.text for t in lance.tokenize(x, **params)] if x else [] for x in texts]
    assert bm25._token_lists(texts, decl) == expected


def test_many_documents_are_tokenized_in_chunks(tune):
    tune(text_chunk=5)
    rng = np.random.default_rng(3)
    words = ["alpha", "Beta", "gamma,", "delta.", "", "epsilon"]
    texts = [" ".join(rng.choice(words, size=int(rng.integers(0, 6)))) for _ in range(23)]
    expected = [[t.text for t in lance.tokenize(x)] if x else [] for x in texts]
    assert bm25._token_lists(texts, declaration()) == expected


# -- full-text queries scored from terms in memory ----------------------------------------------
def ranking(found: pa.Table) -> dict[int, float]:
    return dict(zip(found["id"].to_pylist(), found["_score"].to_pylist(), strict=True))


def test_terms_kept_in_the_session_score_as_when_read(tmp_path):
    rows_ = make_rows(2000, seed=41, doc_length=None)
    ns = make_ns(tmp_path / "ns", rows_)
    ns.create_index("txt", "FTS")
    session = SearchSession()
    for q in ["t3x", "t5x t9x", "t12x t2x t30x", "t70x", "nothing"]:
        session.clear()
        a = ns.search(q, k=25, session=session)  # every table tokenized
        assert session.report()["terms"].entries == len(ns.plan_scan().tasks)
        b = ns.search(q, k=25, session=session)  # from the terms kept
        assert a.equals(b)


def test_a_table_with_deleted_rows_scores_its_rows_as_they_are(tmp_path):
    # Lance's own index keeps the statistics it was built on; the namespace's BM25 is that
    # of the rows of the version searched, as one dataset holding them scores
    table = make_rows(2000, seed=42)
    ns = make_ns(tmp_path / "ns", table)
    ns.create_index("txt", "FTS")
    ns.delete("tenant = 'a' AND n < 500")
    kept = ns.to_table()
    ds = lance.write_dataset(kept, str(tmp_path / "one.lance"))
    ds.create_scalar_index("txt", "INVERTED")
    found = ns.search("t4x t6x", k=20, columns=["id"])
    ref = ds.to_table(full_text_query="t4x t6x", columns=["id"], limit=20)
    np.testing.assert_allclose(found["_score"].to_numpy(), ref["_score"].to_numpy(), rtol=1e-5)


# -- rows by row id ----------------------------------------------------------------------------
def dataset(tmp_path, **kwargs) -> lance.LanceDataset:
    table = pa.table({"id": pa.array(range(100), pa.int64()), "s": [f"r{i}" for i in range(100)]})
    return lance.write_dataset(table, str(tmp_path / "t.lance"), max_rows_per_file=40, **kwargs)


def reference_take(ds: lance.LanceDataset, ids: list[int]) -> pa.Table:
    return ds._take_rows(ids, columns=["id", "s"])


@pytest.mark.parametrize("stable", [False, True])
@pytest.mark.parametrize("delete", [None, "id % 7 = 3"])
def test_rows_taken_equal_lances_takes(tmp_path, stable, delete):
    ds = dataset(tmp_path, enable_stable_row_ids=stable)
    if delete:
        ds.delete(delete)
    all_ids = ds.to_table(columns=["id"], with_row_id=True)
    by_row_id = dict(zip(all_ids["_rowid"].to_pylist(), all_ids["id"].to_pylist(), strict=True))
    row_ids = list(by_row_id)
    rng = np.random.default_rng(5)
    picks = [
        [row_ids[i] for i in rng.choice(len(row_ids), size=n, replace=False)] for n in (1, 5, 12)
    ]
    picks.append([r for r in row_ids if r >> 32 == 1][::-3])  # one fragment, descending
    for ids in picks:
        got = take_rows(ds, ids, ["id", "s"])
        assert got.equals(reference_take(ds, ids))
        assert got["id"].to_pylist() == [by_row_id[r] for r in ids]


# -- plans of a manifest version ---------------------------------------------------------------
def test_filters_pruning_alike_keep_their_own_filter_inside_partitions(tmp_path):
    ns = make_ns(tmp_path / "ns", make_rows(1000, seed=45))
    everything = ns.to_table()
    by_tenant = ns.to_table(filter="tenant IN ('a', 'b')")
    narrower = ns.to_table(filter="tenant IN ('a', 'b') AND n < 300")
    assert by_tenant.num_rows == everything.filter(pc.field("tenant").isin(["a", "b"])).num_rows
    expected = everything.filter(pc.field("tenant").isin(["a", "b"]) & (pc.field("n") < 300))
    assert narrower.num_rows == expected.num_rows > 0
    assert sorted(narrower["id"].to_pylist()) == sorted(expected["id"].to_pylist())


def test_a_plan_checks_links_on_every_call(tmp_path):
    ns = make_ns(tmp_path / "ns", make_rows(300, seed=46))
    task = ns.plan_scan().tasks[0]
    ns.plan_scan()  # planned once: the tasks are kept for this manifest version
    moved = tmp_path / "elsewhere"
    (tmp_path / "ns" / task.location).rename(moved)
    (tmp_path / "ns" / task.location).symlink_to(moved)
    with pytest.raises(PathEscapeError, match=re.escape(task.object_id)):
        ns.plan_scan()


# -- caches and workers ------------------------------------------------------------------------
def test_lru_bounded_by_weight():
    lru: Lru[bytes] = Lru(10, weight=len)
    lru.put("a", b"xxxx")
    lru.put("b", b"xxxx")
    assert lru.get("a") == b"xxxx"  # a is now the most recent
    lru.put("c", b"xxxx")  # 12 > 10: b, the least recent, goes
    assert lru.get("b") is None
    assert lru.get("a") == lru.get("c") == b"xxxx"
    assert lru.used == 8
    lru.put("big", b"x" * 11)  # heavier than the bound: not kept, nothing dropped
    assert lru.get("big") is None and lru.used == 8
    lru.put("a", b"xx")  # replaced: its weight counted once
    assert lru.used == 6


def test_parallel_map_keeps_order_and_waits_for_every_call_before_raising():
    finished = []
    lock = threading.Lock()

    def fn(x: int) -> int:
        if x == 3:
            raise ValueError("three")
        threading.Event().wait(0.01)
        with lock:
            finished.append(x)
        return x * 2

    assert concurrency.parallel_map(lambda x: x * 2, list(range(50)), 8) == [
        x * 2 for x in range(50)
    ]
    with pytest.raises(ValueError, match="three"):
        concurrency.parallel_map(fn, list(range(20)), 4)
    assert sorted(finished) == [x for x in range(20) if x != 3]


def test_nested_parallel_maps_do_not_wait_on_each_other():
    def inner(x: int) -> int:
        return sum(concurrency.parallel_map(lambda y: x + y, list(range(20)), 20))

    def outer(x: int) -> int:
        return sum(concurrency.parallel_map(inner, list(range(10)), 10))

    done: list[list[int]] = []
    worker = threading.Thread(
        target=lambda: done.append(concurrency.parallel_map(outer, list(range(80)), 80)),
        daemon=True,
    )
    worker.start()
    worker.join(60)
    assert done, "nested parallel_map calls deadlocked"
    assert done[0] == [outer(x) for x in range(80)]


def _in_child(queue) -> None:
    queue.put(concurrency.parallel_map(lambda x: x + 1, list(range(10)), 4))


@pytest.mark.filterwarnings("ignore:lance is not fork-safe")
def test_parallel_map_works_in_a_forked_child():
    concurrency.parallel_map(lambda x: x, list(range(10)), 4)  # the parent's workers exist
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_in_child, args=(queue,))
    child.start()
    child.join(60)
    assert child.exitcode == 0
    assert queue.get(timeout=5) == list(range(1, 11))


def test_work_decided_by_a_check_made_beside_it():
    def answer(value):
        return concurrency.in_background(lambda: value)

    assert concurrency.decided_by(answer(3), 3, lambda: "done") == (True, "done")
    assert concurrency.decided_by(answer(4), 3, lambda: "done") == (False, None)

    def fails() -> str:
        raise ValueError("planned on a stale version")

    # the work's error counts only when the check holds
    assert concurrency.decided_by(answer(4), 3, fails) == (False, None)
    with pytest.raises(ValueError, match="stale"):
        concurrency.decided_by(answer(3), 3, fails)
    # the check's own error is raised, whatever the work did
    with pytest.raises(OSError, match="listing"):
        concurrency.decided_by(
            concurrency.in_background(lambda: (_ for _ in ()).throw(OSError("listing"))),
            3,
            lambda: "done",
        )


_BOUNDS = """
from dagster_lance_partitioned.core.search.session import SearchSession, default_session
print(default_session().budget_bytes, SearchSession().budget_bytes, SearchSession(5).budget_bytes)
"""


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        (None, [1024, 1024]),
        ("64", [64, 64]),
        ("0", [0, 0]),
        ("lots", [1024, 1024]),  # not a number: the default
        ("-5", [1024, 1024]),
    ],
)
def test_search_sessions_take_their_budget_from_one_setting(setting, expected):
    env = {k: v for k, v in os.environ.items() if k != "DLP_SEARCH_CACHE_MB"}
    if setting is not None:
        env["DLP_SEARCH_CACHE_MB"] = setting
    out = subprocess.run(
        [sys.executable, "-c", _BOUNDS], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    assert [int(b) // (1024 * 1024) for b in out[:2]] == expected
    assert int(out[2]) == 5  # given: taken as it is


def test_a_session_without_memory_keeps_nothing_and_answers_alike(tmp_path):
    ns = make_ns(tmp_path / "ns", make_rows(1000, seed=47))
    ns.create_index("txt", "FTS")
    empty, kept = SearchSession(0), SearchSession()
    q = np.random.default_rng(3).normal(size=16)
    for query in ("t3x t8x", q):
        answers = [ns.search(query, k=7, session=s) for s in (empty, kept, kept, empty)]
        assert answers[0].num_rows == 7
        assert all(a.equals(answers[0]) for a in answers)
    assert empty.size_bytes() == 0 and not empty.report()
    assert 0 < kept.size_bytes() <= kept.budget_bytes
    assert set(kept.report()) >= {"terms", "pooled", "pooled column", "table"}
    kept.clear()
    assert kept.size_bytes() == 0 and not kept.report()


def test_a_session_stays_within_its_budget(tmp_path):
    ns = make_ns(tmp_path / "ns", make_rows(3000, seed=50))
    small = SearchSession(40_000)  # room for a few tables' vectors, not all
    reference = SearchSession(0)
    for seed in range(5):
        q = np.random.default_rng(seed).normal(size=16)
        assert ns.search(q, k=10, session=small).equals(ns.search(q, k=10, session=reference))
        assert small.size_bytes() <= 40_000


def test_a_session_must_be_a_search_session(tmp_path):
    ns = make_ns(tmp_path / "ns", make_rows(200, seed=51))
    with pytest.raises(SearchQueryError, match="session must be a SearchSession"):
        ns.search("t1x", session="big")  # type: ignore[arg-type]


# -- small tables ranked together ---------------------------------------------------------------
@pytest.mark.parametrize("metric", ["l2", "cosine", "dot"])
def test_small_tables_ranked_in_memory_equal_the_reference(tmp_path, metric):
    table = make_rows(1200, seed=48)
    # the same vectors in several partitions: ties between tables, broken by table then row
    v = table.column("v").combine_chunks()
    twins = pa.concat_arrays([v.slice(0, 300), v.slice(0, 300), v.slice(600, 600)])
    table = table.set_column(table.schema.get_field_index("v"), "v", twins)
    ns = make_ns(tmp_path / "ns", table)
    # declared for its metric; every table is below min_rows, so all are ranked from memory
    ns.create_index("v", "IVF_FLAT", min_rows=100_000, metric=metric)
    rng = np.random.default_rng(49)
    stored = table.column("v").combine_chunks().flatten().to_numpy().reshape(-1, 16)
    queries = [*rng.normal(size=(6, 16)), *stored[:3], *stored[650:652]]
    for q in queries:
        q = np.asarray(q, np.float32)
        first = ns.search(q, k=15, session=SearchSession(0))  # read, nothing kept
        second = ns.search(q, k=15, use_index=False)  # the reference: every row measured
        assert second.equals(first)
        # exact: the distances brute force gives (rows tied at equal distances either way)
        _, expected = brute_force(table, q.astype(np.float64), 15, metric)
        got = second.column("_distance").to_numpy()
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
        by_id = dict(zip(table["id"].to_pylist(), range(table.num_rows), strict=True))
        mine = np.array([by_id[i] for i in second["id"].to_pylist()])
        own = distances(stored[mine].astype(np.float64), q.astype(np.float64), metric)
        np.testing.assert_allclose(got, own, rtol=1e-4, atol=1e-4)
