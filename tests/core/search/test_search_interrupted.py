"""``create_index`` interrupted between its two manifest commits (issue 32, item 7): the
declaration landed, no partition table's indexed version did. ``ns.indexes()`` says so (every
partition whose size calls for the index is pending, with a hint of what builds it), searches
stay equal to brute force over ``ns.to_table()``, and the next write to a partition, the next
``optimize_indexes`` or declaring the same index again builds what is missing. The interruption
is injected in this process or is a real SIGKILL of a child process at that point
(``helpers/interrupted.py``)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from helpers.interrupted import Interrupted, after_index_declared, declare_index, interrupt
from helpers.search import DIM, assert_exact, assert_indexed, index_map, make_ns, make_rows

from dagster_lance_partitioned import PartitionedNamespace

CHILD = Path(__file__).resolve().parents[2] / "helpers" / "interrupted.py"
ROWS = make_rows()  # 3,000 rows in 12 partitions of about 500 / 300 / 150 / 50 rows
MIN_ROWS = 100  # declare_index's
NAME = "v_ivf_flat"
QUERIES = [np.random.default_rng(i).normal(size=DIM).astype(np.float32) for i in range(3)]


def interrupted_declaration(tmp_path: Path, how: str) -> PartitionedNamespace:
    """A namespace of :data:`ROWS` whose ``declare_index`` was cut between its commits."""
    ns = make_ns(tmp_path / "ns", ROWS)
    version0 = ns.version
    if how == "injected":
        with after_index_declared(interrupt), pytest.raises(Interrupted):
            declare_index(ns)
    else:
        child = subprocess.run(
            [sys.executable, str(CHILD), ns.uri, "create_index"],
            capture_output=True,
            timeout=120,
            check=False,
        )
        assert child.returncode == -signal.SIGKILL, child.stderr.decode(errors="replace")[-3000:]
    fresh = PartitionedNamespace.open(ns.uri)
    assert fresh.version == version0 + 1  # the declaration, and nothing else
    (commit,) = fresh.inspect.history(since=version0)
    assert commit.operation == "create_index"
    assert all(found == {} for _, found in index_map(fresh).values())  # no table indexed
    return fresh


def big_partitions(ns: PartitionedNamespace) -> set[str]:
    """The partitions whose size calls for the index."""
    return {oid for oid, (rows, _) in index_map(ns).items() if rows >= MIN_ROWS}


def assert_search_exact(ns: PartitionedNamespace) -> None:
    everything = ns.to_table()
    for q in QUERIES:
        assert_exact(ns.search(q, k=10), everything, q, 10)
        assert_exact(ns.search(q, k=10, nprobes=2), everything, q, 10)  # every cluster
        some = everything.filter(pa.compute.equal(everything.column("tenant"), "b"))
        assert_exact(ns.search(q, k=7, filter="tenant = 'b'"), some, q, 7)


@pytest.mark.parametrize("how", ["injected", "sigkill"])
def test_an_interrupted_declaration_is_pending_until_writes_and_optimize_build_it(
    tmp_path: Path, how: str
) -> None:
    ns = interrupted_declaration(tmp_path, how)
    big = big_partitions(ns)
    assert len(big) == 9  # and 3 below min_rows

    (cov,) = ns.indexes()
    assert (cov.name, cov.partitions_indexed, cov.partitions_total) == (NAME, 0, 12)
    assert set(cov.needing) == big and cov.partitions_needing == 9
    assert cov.partitions_flat == 3 and cov.indexed_rows == 0
    rows = index_map(ns)
    assert cov.pending_rows == cov.unindexed_rows == sum(rows[oid][0] for oid in big)
    assert not cov.complete and cov.status == "pending"
    assert "9 partition(s) not built yet" in cov.hint
    assert "optimize_indexes()" in cov.hint and "write" in cov.hint
    assert cov.to_dict()["status"] == "pending" and cov.to_dict()["hint"] == cov.hint
    assert_search_exact(ns)  # the pending tables are searched exhaustively

    # a write to some partitions indexes what it writes
    more = make_rows(600, seed=7, start=50_000, tenants=("a",), weights=None)
    ns.write(more)
    written = {p["object_id"] for p in ns.inspect.partitions() if p["values"]["tenant"] == "a"}
    assert len(written) == 3 and written <= big
    (cov,) = ns.indexes()
    assert set(cov.needing) == big - written and cov.partitions_indexed == 3
    assert cov.pending_rows == sum(index_map(ns)[oid][0] for oid in big - written)
    assert all(NAME in index_map(ns)[oid][1] for oid in written)
    assert_search_exact(ns)

    # the next optimize_indexes builds the rest
    done = ns.maintenance.optimize_indexes()
    assert set(done.partitions) == big - written and done.skipped == ()
    assert_indexed(ns)
    (cov,) = ns.indexes()
    assert cov.complete and cov.status == "complete" and cov.hint == ""
    assert (cov.partitions_indexed, cov.partitions_needing, cov.pending_rows) == (9, 0, 0)
    assert_search_exact(ns)


def test_declaring_the_interrupted_index_again_builds_every_partition(tmp_path: Path) -> None:
    ns = interrupted_declaration(tmp_path, "injected")
    version = ns.version
    big = big_partitions(ns)
    cov = declare_index(ns)  # the same code, run again
    assert cov.complete and cov.partitions_indexed == len(big)
    assert ns.version == version + 1  # the tables' indexed versions; the declaration stands
    (commit,) = ns.inspect.history(since=version)
    assert commit.operation == "create_index"
    assert_indexed(ns)
    assert_search_exact(ns)
