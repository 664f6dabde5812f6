"""Shared data and reference answers for the search tests: rows with a vector, a text and a
few partition columns, brute-force nearest neighbours (numpy, Lance's distances), and what
each registered partition table version carries of indexes."""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Sequence
from typing import Any

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dagster_lance_partitioned import PartitionedNamespace, PartitionField

DIM = 16
VECTOR = pa.list_(pa.float32(), DIM)
SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("tenant", pa.utf8()),
        pa.field("day", pa.date32()),
        pa.field("n", pa.int64()),
        pa.field("v", VECTOR),
        pa.field("txt", pa.utf8()),
    ]
)
FIELDS = [PartitionField.identity("tenant"), PartitionField.day("day")]
DAYS = (dt.date(2024, 1, 1), dt.date(2024, 1, 2), dt.date(2024, 1, 3))
# 3,000 rows: partitions (tenant x day) of about 500, 300, 150 and 50 rows
TENANTS = ("a", "b", "c", "d")
WEIGHTS = (0.5, 0.3, 0.15, 0.05)
VOCABULARY = tuple(f"t{i}x" for i in range(80))
_ZIPF = np.array([1.0 / (i + 1) for i in range(len(VOCABULARY))])
_ZIPF /= _ZIPF.sum()


def vector_array(matrix: np.ndarray) -> pa.FixedSizeListArray:
    matrix = np.asarray(matrix, dtype=np.float32)
    return pa.FixedSizeListArray.from_arrays(pa.array(matrix.ravel()), matrix.shape[1])


def documents(rng: np.random.Generator, n: int, length: int | None) -> list[str]:
    """``n`` documents of ``length`` words (None: 2 to 14 words) drawn Zipf-like."""
    out = []
    for _ in range(n):
        size = length if length is not None else int(rng.integers(2, 15))
        out.append(" ".join(rng.choice(VOCABULARY, size=size, p=_ZIPF)))
    return out


def make_rows(
    n: int = 3000,
    *,
    seed: int = 0,
    start: int = 0,
    tenants: Sequence[str] = TENANTS,
    weights: Sequence[float] | None = WEIGHTS,
    doc_length: int | None = 6,
) -> pa.Table:
    """``n`` rows of :data:`SCHEMA` with ids from ``start`` (tenants drawn with ``weights``)."""
    rng = np.random.default_rng(seed)
    probs = None if weights is None else np.asarray(weights) / np.sum(weights)
    tenant = rng.choice(list(tenants), size=n, p=probs)
    day = [DAYS[i] for i in rng.integers(0, len(DAYS), size=n)]
    return pa.table(
        {
            "id": pa.array(np.arange(start, start + n), pa.int64()),
            "tenant": pa.array(tenant.tolist(), pa.utf8()),
            "day": pa.array(day, pa.date32()),
            "n": pa.array(rng.integers(0, 1000, size=n), pa.int64()),
            "v": vector_array(rng.normal(size=(n, DIM))),
            "txt": pa.array(documents(rng, n, doc_length), pa.utf8()),
        },
        schema=SCHEMA,
    )


def make_ns(path: Any, rows: pa.Table | None = None) -> PartitionedNamespace:
    ns = PartitionedNamespace.create(path, SCHEMA, FIELDS)
    ns.write(rows if rows is not None else make_rows())
    return ns


def matrix_of(table: pa.Table, column: str = "v") -> np.ndarray:
    values = table.column(column).combine_chunks()
    dim = values.type.list_size
    flat = pc.list_flatten(values).to_numpy(zero_copy_only=False)
    return np.asarray(flat, dtype=np.float64).reshape(-1, dim)


def distances(matrix: np.ndarray, q: np.ndarray, metric: str) -> np.ndarray:
    """Lance's distances, computed here independently in float64: squared L2, 1 - cosine
    similarity, 1 - dot product."""
    q = np.asarray(q, dtype=np.float64)
    if metric == "l2":
        return ((matrix - q) ** 2).sum(axis=1)
    if metric == "cosine":
        return 1.0 - matrix @ q / (np.linalg.norm(matrix, axis=1) * np.linalg.norm(q))
    if metric == "dot":
        return 1.0 - matrix @ q
    raise AssertionError(metric)


def brute_force(
    table: pa.Table, q: np.ndarray, k: int, metric: str = "l2", column: str = "v"
) -> tuple[list[int], np.ndarray]:
    """Ids and distances of the ``k`` rows of ``table`` nearest to ``q`` (rows without a
    vector left out)."""
    table = table.filter(pc.is_valid(table.column(column)))
    d = distances(matrix_of(table, column), q, metric)
    order = np.argsort(d, kind="stable")[:k]
    ids = table.column("id").to_numpy()
    return [int(i) for i in ids[order]], d[order]


def assert_exact(
    result: pa.Table, table: pa.Table, q: np.ndarray, k: int, metric: str = "l2", column="v"
) -> None:
    """``result`` holds the ``k`` nearest rows of ``table`` in order, with their distances."""
    ids, dist = brute_force(table, q, k, metric, column)
    assert result.column("id").to_pylist() == ids
    got = result.column("_distance").to_numpy()
    np.testing.assert_allclose(got, dist, rtol=1e-4, atol=1e-4)
    assert np.all(np.diff(got) >= 0)


def table_of(ns: PartitionedNamespace, entry: dict[str, Any]) -> lance.LanceDataset:
    """A partition table at the version the manifest registered (an entry of
    ``ns.inspect.partitions()``)."""
    return lance.dataset(os.path.join(ns.uri, entry["location"]), version=entry["read_version"])


def index_map(ns: PartitionedNamespace) -> dict[str, tuple[int, dict[str, int]]]:
    """Object id -> (rows, index name -> rows indexed) of every registered table version."""
    out = {}
    for entry in ns.inspect.partitions():
        ds = table_of(ns, entry)
        found = {d.name: int(d.num_rows_indexed) for d in ds.describe_indices()}
        out[entry["object_id"]] = (ds.count_rows(), found)
    return out


def assert_indexed(ns: PartitionedNamespace) -> None:
    """Every registered table version with at least ``min_rows`` rows carries every declared
    index (checked on the tables themselves), and ``ns.indexes()`` agrees. (A table below
    ``min_rows`` may keep an index built when it was larger.)"""
    coverages = ns.indexes()
    assert coverages, "no index declared"
    tables = index_map(ns)
    for cov in coverages:
        assert cov.partitions_needing == 0, cov
        assert cov.partitions_total == len(tables)
        for oid, (rows, found) in tables.items():
            if rows >= cov.min_rows:
                assert cov.name in found, (oid, rows, cov.name)
        indexed = sum(1 for _, found in tables.values() if cov.name in found)
        assert cov.partitions_indexed == indexed
        assert cov.partitions_flat == len(tables) - indexed


def count_table_opens(monkeypatch: Any) -> list[str]:
    """The directories of the partition tables search opens from now on (to open one is
    to check its files for links), one entry per open, in order."""
    from dagster_lance_partitioned.core.search import tables

    opened: list[str] = []
    real = tables.open_table

    def counted(task: Any, opts: Any, planned: bool = True) -> lance.LanceDataset:
        opened.append(task.uri)
        return real(task, opts, planned=planned)

    monkeypatch.setattr(tables, "open_table", counted)
    return opened
