"""Search meets a symbolic link under a local root when it is about to read the table's files:
a query that reads a partition table whose data file or directory is a link is refused with
:class:`PathEscapeError` naming the partition, and reads nothing through it; tables a query
answers from what its session keeps, or does not search, are not opened."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from helpers.data import link_data_file as link_first_data_file
from helpers.search import count_table_opens

from dagster_lance_partitioned import PartitionedNamespace, PartitionField
from dagster_lance_partitioned.core.errors import PathEscapeError
from dagster_lance_partitioned.core.search.session import SearchSession

pytestmark = pytest.mark.skipif(os.name == "nt", reason="symbolic links need privileges")

DIM = 8


def rows(n: int, tenant: str, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    vectors = rng.standard_normal((n, DIM)).astype(np.float32)
    return pa.table(
        {
            "id": pa.array([f"{tenant}{i}" for i in range(n)]),
            "tenant": pa.array([tenant] * n),
            "text": pa.array([f"word{i % 7} common" for i in range(n)]),
            "vec": pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1)), DIM),
        }
    )


@pytest.fixture
def ns(tmp_path: Path) -> PartitionedNamespace:
    data = pa.concat_tables([rows(40, "a", 1), rows(40, "b", 2)])
    ns = PartitionedNamespace.create(
        tmp_path / "ns", data.schema, [PartitionField.identity("tenant")]
    )
    ns.write(data)
    ns.create_index("text", "INVERTED")
    return ns


def link_data_file(ns: PartitionedNamespace, tenant: str, outside: Path) -> tuple[str, Path]:
    """Replace the tenant's data file by a link to a copy outside the root."""
    p = next(p for p in ns.inspect.partitions() if p["values"]["tenant"] == tenant)
    return p["object_id"], link_first_data_file(ns.uri, p, outside)


QUERIES = {
    "vector": lambda ns, s, f: ns.search(np.zeros(DIM, np.float32) + 0.1, k=5, filter=f, session=s),
    "text": lambda ns, s, f: ns.search("word3", k=5, filter=f, session=s),
}


@pytest.mark.parametrize("kind", sorted(QUERIES))
def test_a_search_reading_a_linked_table_is_refused(ns, tmp_path, kind):
    oid, link = link_data_file(ns, "a", tmp_path / "outside")
    with pytest.raises(PathEscapeError) as info:
        QUERIES[kind](ns, SearchSession(), None)
    assert info.value.object_id == oid and str(link) in str(info.value)
    if kind == "vector":
        # a query whose filter leaves the linked partition out reads only the other one
        found = QUERIES[kind](ns, SearchSession(), "tenant = 'b'")
        assert found.num_rows == 5 and set(found["tenant"].to_pylist()) == {"b"}
    else:
        # full-text scores take the statistics of every table, whatever the filter
        with pytest.raises(PathEscapeError):
            QUERIES[kind](ns, SearchSession(), "tenant = 'b'")


def test_a_search_answered_from_its_session_opens_nothing_and_a_cold_one_is_refused(ns, tmp_path):
    session = SearchSession()
    before = QUERIES["vector"](ns, session, None)
    oid, link = link_data_file(ns, "a", tmp_path / "outside")
    os.remove(tmp_path / "outside" / link.name)  # the link leads nowhere now
    again = QUERIES["vector"](ns, session, None)  # every row it needs is kept: no file read
    assert again.equals(before)
    session.clear()
    with pytest.raises(PathEscapeError) as info:
        QUERIES["vector"](ns, session, None)
    assert info.value.object_id == oid


def test_a_text_search_reads_its_best_rows_and_meets_the_link_warm_too(ns, tmp_path):
    session = SearchSession()
    QUERIES["text"](ns, session, None)
    oid, _ = link_data_file(ns, "a", tmp_path / "outside")
    with pytest.raises(PathEscapeError) as info:
        QUERIES["text"](ns, session, None)
    assert info.value.object_id == oid


@pytest.mark.parametrize("kind", sorted(QUERIES))
def test_a_filtered_cold_query_opens_and_checks_each_table_once(ns, monkeypatch, kind):
    # a filtered text query opens every table for the statistics and the filtered ones again
    # for their rows: one handle each, so one check of its files
    opened = count_table_opens(monkeypatch)
    found = QUERIES[kind](ns, SearchSession(), "tenant = 'a' AND id != 'a1'")
    assert found.num_rows == 5 and set(found["tenant"].to_pylist()) == {"a"}
    assert len(opened) == len(set(opened)) == (2 if kind == "text" else 1)
