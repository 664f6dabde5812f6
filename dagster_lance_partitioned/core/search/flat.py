"""Exhaustive vector search: Lance's distances computed here, small tables without a vector
index searched from an in-memory copy of their vectors, and tables Lance cannot search as
they are (an older layout, a filter only DataFusion evaluates) read and ranked.

Results equal brute force: distances are computed exactly for every row that could be among
the k nearest, ties broken by row position."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..lru import Lru, Sightings
from ..read.scan import iter_task_batches, read_schema
from ..schema.arrow_json import strip_field_ids
from .build import describe
from .declaration import vector_dimension
from .memory import share
from .searched import DISTANCE, Candidates, Searched

# Small tables without a vector index are searched from an in-memory copy of their vectors
# (a version never changes): one matrix product each instead of one Lance search each, and
# the rows of only the best k of them all fetched.
FLAT_CACHE_ROWS = 65_536  # tables up to this many rows
FLAT_CACHE_BYTES = share(0.5)  # vectors kept per process at most (512 MiB by default)
# float32 rounding: a squared L2 distance computed as |x|^2 - 2 x.q + |q|^2 and one computed
# from x - q each differ from the true one by at most about (dimension + 3) * eps * (|x| + |q|)^2
_EPS = float(np.finfo(np.float32).eps)


def distance(matrix: np.ndarray, vector: np.ndarray, metric: str) -> np.ndarray:
    """Distances of the rows of ``matrix`` to ``vector`` as Lance computes them."""
    if metric == "cosine":
        norms = np.linalg.norm(matrix, axis=1) * np.linalg.norm(vector)
        with np.errstate(divide="ignore", invalid="ignore"):
            sims = np.where(norms > 0, matrix @ vector / norms, 0.0)
        out: np.ndarray = (1.0 - sims).astype(np.float32)
    elif metric == "dot":
        out = (1.0 - matrix @ vector).astype(np.float32)
    else:
        diff = matrix - vector
        out = np.einsum("ij,ij->i", diff, diff).astype(np.float32)
    return out


def matrix_of(values: pa.ChunkedArray, dimension: int) -> np.ndarray:
    """A column of fixed-size lists as a (rows, dimension) float32 matrix."""
    flat = pc.list_flatten(values.combine_chunks()).to_numpy(zero_copy_only=False)
    return np.asarray(flat, dtype=np.float32).reshape(-1, dimension)


@dataclass(frozen=True)
class _Vectors:
    """One table version's non-null vectors, their row ids and squared norms."""

    matrix: np.ndarray
    row_ids: np.ndarray
    norms: np.ndarray
    largest: float  # the largest norm
    # several tables' vectors pooled: where each table's rows start (and the end)
    starts: np.ndarray | None = None

    @property
    def nbytes(self) -> int:
        return self.matrix.nbytes + self.row_ids.nbytes + self.norms.nbytes


# (table version, column) -> its vectors, bounded in bytes (shared with the clusters of
# indexed tables, see .clustered: any value with ``nbytes``)
_cached_vectors: Lru[Any] = Lru(FLAT_CACHE_BYTES, weight=lambda v: int(v.nbytes))


def vectors_of(ds: lance.LanceDataset, column: str) -> _Vectors:
    """The non-null vectors of ``column`` in a table version (cached)."""
    key = (ds.uri, ds.version, column)
    hit = _cached_vectors.get(key)
    if isinstance(hit, _Vectors):
        return hit
    table = ds.to_table(columns=[column], with_row_id=True, filter=f"{quoted(column)} IS NOT NULL")
    dimension = vector_dimension(table.schema.field(column).type) or 1
    matrix = matrix_of(table.column(column), dimension)
    norms = np.einsum("ij,ij->i", matrix, matrix)
    value = _Vectors(
        matrix,
        table.column("_rowid").to_numpy().astype(np.uint64),
        norms,
        float(np.sqrt(norms.max())) if len(norms) else 0.0,
    )
    _cached_vectors.put(key, value)
    return value


def cacheable(searched: Searched, column: str) -> bool:
    """Whether a table is searched from cached vectors: small, no vector index on ``column``,
    no filter inside it."""
    if not searched.native or searched.sql is not None:
        return False
    rows, indexes = describe(searched.ds)
    if rows > FLAT_CACHE_ROWS:
        return False
    return not any(column in (d.field_names or ()) for d in indexes.values())


def cached_candidates(
    tables: Sequence[Searched], column: str, vector: np.ndarray, k: int, metric: str
) -> list[Candidates]:
    """The ``k`` nearest rows of small tables together (ties: earlier table, then earlier
    row), from their cached vectors: one matrix product over all of them once the same tables
    were searched together before (see :func:`_pooled`), else one per table."""
    pooled = _pooled(tables, column) if len(tables) > 1 else None
    if pooled is None or pooled.starts is None:
        out = []
        for searched in tables:
            vectors = vectors_of(searched.ds, column)
            rows, distances = nearest_rows(vectors, vector, k, metric)
            out.append(Candidates(searched, vectors.row_ids[rows], distances))
        return out
    rows, distances = nearest_rows(pooled, vector, k, metric)
    owner = np.searchsorted(pooled.starts, rows, side="right") - 1
    return [
        Candidates(tables[i], pooled.row_ids[rows[owner == i]], distances[owner == i])
        for i in np.unique(owner).tolist()
    ]


# sets of small tables searched together once already (pooled the next time)
_searched_together = Sightings(256)


def _pooled(tables: Sequence[Searched], column: str) -> _Vectors | None:
    """The vectors of ``tables`` in one matrix (with where each table's rows start), kept
    beside the tables' own within the same bound from the second query over the same tables
    on (building it copies every one of them); None before."""
    key = ("pooled", column, *((t.ds.uri, t.ds.version) for t in tables))
    hit = _cached_vectors.get(key)
    if isinstance(hit, _Vectors):
        return hit
    if not _searched_together.again(key):
        return None
    parts = [vectors_of(t.ds, column) for t in tables]
    pooled = _Vectors(
        np.concatenate([p.matrix for p in parts]),
        np.concatenate([p.row_ids for p in parts]),
        np.concatenate([p.norms for p in parts]),
        max(p.largest for p in parts),
        np.cumsum([0, *(len(p.row_ids) for p in parts)]),
    )
    _cached_vectors.put(key, pooled)
    return pooled


def nearest_rows(
    vectors: _Vectors, vector: np.ndarray, k: int, metric: str
) -> tuple[np.ndarray, np.ndarray]:
    """Positions and exact distances of the ``k`` rows nearest ``vector`` (ties by position).

    For squared L2 over many rows, a matrix-vector product ranks the rows first and only
    those within its rounding error of the k-th are measured exactly."""
    matrix = vectors.matrix
    if metric != "l2" or len(matrix) <= 4 * k:
        distances = distance(matrix, vector, metric)
        top = np.argsort(distances, kind="stable")[:k]
        return top, distances[top]
    q2 = float(vector @ vector)
    approx = vectors.norms - 2.0 * (matrix @ vector) + q2
    kth = float(np.partition(approx, k - 1)[k - 1])
    slack = 4.0 * (matrix.shape[1] + 3) * _EPS * (vectors.largest + np.sqrt(q2)) ** 2
    pool = np.flatnonzero(approx <= kth + slack)
    exact = distance(matrix[pool], vector, metric)
    order = np.argsort(exact, kind="stable")[:k]
    return pool[order], exact[order]


def flat(
    searched: Searched,
    schema: pa.Schema,
    target: pa.Schema,
    column: str,
    vector: np.ndarray,
    k: int,
    metric: str,
    opts: dict[str, str] | None,
) -> pa.Table:
    """An exhaustive search of a table Lance cannot search as it is (an older layout, or a
    filter only DataFusion evaluates): its rows read in the namespace schema, then ranked."""
    names = list(dict.fromkeys([*target.names, column]))
    batches = list(
        iter_task_batches(
            searched.task,
            schema,
            names,
            searched.sql,
            opts,
            translated_filter=searched.lance_sql,
        )
    )
    plain = strip_field_ids(schema)
    rows = pa.Table.from_batches(batches, schema=read_schema(plain, names))
    rows = rows.filter(pc.is_valid(rows.column(column)))
    if rows.num_rows == 0:
        return target.append(pa.field(DISTANCE, pa.float32())).empty_table()
    distances = distance(matrix_of(rows.column(column), vector.shape[0]), vector, metric)
    top = np.argsort(distances, kind="stable")[:k]
    picked = rows.take(pa.array(top)).select(list(target.names))
    return picked.append_column(DISTANCE, pa.array(distances[top], pa.float32()))


def quoted(name: str) -> str:
    """``name`` as a Lance SQL identifier."""
    return "`" + name.replace("`", "``") + "`"
