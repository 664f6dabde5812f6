"""Distances between vectors, the one place they are computed: :func:`distance` gives them as
Lance does (squared L2, ``1 - cosine``, ``1 - dot``), one row at a time in a fixed order, so
that a row's distance does not depend on the rows beside it; :func:`nearest_rows` finds the k
nearest rows of a matrix with a screening matrix product whose rounding is bounded, then
measures only the rows the bound leaves a chance exactly (the same rows, distances and order
as measuring them all)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

_EPS = float(np.finfo(np.float32).eps)


def distance(matrix: np.ndarray | Stacked, vector: np.ndarray, metric: str) -> np.ndarray:
    """Exact distances (float32) of the rows of ``matrix`` to ``vector`` as Lance computes
    them; a zero row is at cosine distance 1."""
    matrix = np.asarray(matrix, dtype=np.float32)
    if metric == "l2":
        diff = matrix - vector
        squared: np.ndarray = np.einsum("ij,ij->i", diff, diff).astype(np.float32)
        return squared
    dots = np.einsum("ij,j->i", matrix, vector)
    if metric == "dot":
        out: np.ndarray = (1.0 - dots).astype(np.float32)
        return out
    norms = np.sqrt(np.einsum("ij,ij->i", matrix, matrix)) * np.float32(
        np.sqrt(np.einsum("i,i->", vector, vector))
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        sims = np.where(norms > 0, dots / norms, 0.0)
    return (1.0 - sims).astype(np.float32)


def matrix_of(values: pa.ChunkedArray | pa.Array, dimension: int) -> np.ndarray:
    """A column of fixed-size lists as a (rows, dimension) float32 matrix: the column's own
    memory, not a copy, when it is one chunk of float32 values without nulls."""
    if isinstance(values, pa.ChunkedArray):
        # one chunk is used as it is: combining copies even a single chunk
        values = values.chunk(0) if values.num_chunks == 1 else values.combine_chunks()
    flat = pc.list_flatten(values).to_numpy(zero_copy_only=False)
    return np.asarray(flat, dtype=np.float32).reshape(-1, dimension)


class Stacked:
    """Blocks of rows read as one matrix (block i's rows after block i - 1's), never copied
    into one: a pool of many tables keeps each table's vectors as read, so that a table
    read again replaces only its own block and a pool is not copied whole when made."""

    def __init__(self, blocks: Sequence[np.ndarray], dimension: int) -> None:
        self.blocks = list(blocks)
        sizes = [len(b) for b in self.blocks]
        self.starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.shape = (int(self.starts[-1]), dimension)
        self.nbytes = int(sum(b.nbytes for b in self.blocks))

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, positions: np.ndarray) -> np.ndarray:
        """The rows at ``positions`` (integers, in any order), as one new matrix."""
        positions = np.asarray(positions, dtype=np.int64)
        out = np.empty((len(positions), self.shape[1]), np.float32)
        order = np.argsort(positions, kind="stable")
        ordered = positions[order]
        cuts = np.searchsorted(ordered, self.starts)
        for i, block in enumerate(self.blocks):
            lo, hi = int(cuts[i]), int(cuts[i + 1])
            if lo < hi:
                out[order[lo:hi]] = block[ordered[lo:hi] - self.starts[i]]
        return out

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        if not self.blocks:
            return np.zeros(self.shape, dtype or np.float32)
        return np.concatenate(self.blocks).astype(dtype or np.float32, copy=False)

    def products(self, vector: np.ndarray) -> np.ndarray:
        """Each row's dot product with ``vector`` (one streaming product per block)."""
        if not self.blocks:
            return np.zeros(0, np.float32)
        return np.concatenate([np.einsum("ij,j->i", b, vector) for b in self.blocks])


def products(matrix: np.ndarray | Stacked, vector: np.ndarray) -> np.ndarray:
    """Each row's dot product with ``vector``."""
    if isinstance(matrix, Stacked):
        return matrix.products(vector)
    # einsum streams the matrix once; numpy's matmul of a matrix by a vector took 2-3x as
    # long on the benchmark's machine
    dots: np.ndarray = np.einsum("ij,j->i", matrix, vector)
    return dots


@dataclass(frozen=True)
class Vectors:
    """Vectors of some rows of one table version (or of a pool's tables): the matrix, their
    row ids, squared norms and the largest norm."""

    matrix: np.ndarray | Stacked
    row_ids: np.ndarray
    norms: np.ndarray
    largest: float

    @classmethod
    def of(cls, matrix: np.ndarray, row_ids: np.ndarray) -> Vectors:
        """``matrix`` (float32) with its rows' ids."""
        matrix = np.ascontiguousarray(matrix, dtype=np.float32)
        norms = np.einsum("ij,ij->i", matrix, matrix)
        largest = float(np.sqrt(norms.max())) if len(norms) else 0.0
        return cls(matrix, np.asarray(row_ids, dtype=np.uint64), norms, largest)

    @property
    def nbytes(self) -> int:
        return int(self.matrix.nbytes + self.row_ids.nbytes + self.norms.nbytes)

    def subset(self, positions: np.ndarray) -> Vectors:
        """The rows at ``positions`` (ascending)."""
        return Vectors.of(self.matrix[positions], self.row_ids[positions])


def screen(vectors: Vectors, vector: np.ndarray, metric: str) -> tuple[np.ndarray, np.ndarray]:
    """Distances from one matrix-vector product and a bound on how far each is from the
    exact one (float32 rounding of the product)."""
    dimension = vectors.matrix.shape[1]
    q2 = float(np.dot(vector, vector))
    dots = products(vectors.matrix, vector)
    rounding = 4.0 * (dimension + 3) * _EPS
    if metric == "l2":
        approx = vectors.norms - 2.0 * dots + q2
        return approx, np.full(1, rounding * (vectors.largest + np.sqrt(q2)) ** 2)
    if metric == "dot":
        return 1.0 - dots, np.full(1, rounding * vectors.largest * np.sqrt(q2) + rounding)
    scale = np.sqrt(vectors.norms) * np.float32(np.sqrt(q2))
    with np.errstate(divide="ignore", invalid="ignore"):
        approx = 1.0 - np.where(scale > 0, dots / scale, 0.0)
    return approx, np.full(1, 2 * rounding)


def nearest_rows(
    vectors: Vectors,
    vector: np.ndarray,
    k: int,
    metric: str,
    among: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Positions and exact distances of the ``k`` rows nearest ``vector`` (ties by
    position), of every row or only of those at the positions ``among`` (ascending): the
    rows a screening product leaves within its rounding bound of the k-th are measured
    exactly."""
    if among is not None:
        # the largest norm of all the rows still bounds the rounding of these
        part = Vectors(
            vectors.matrix[among], vectors.row_ids[among], vectors.norms[among], vectors.largest
        )
        positions, distances = nearest_rows(part, vector, k, metric)
        return among[positions], distances
    n = len(vectors.row_ids)
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.float32)
    if n <= 4 * k:
        exact = distance(vectors.matrix, vector, metric)
        top = np.argsort(exact, kind="stable")[:k]
        return top, exact[top]
    approx, slack = screen(vectors, vector, metric)
    kth = float(np.partition(approx, k - 1)[k - 1])
    pool = np.flatnonzero(approx <= kth + 2 * float(slack[0]))
    exact = distance(vectors.matrix[pool], vector, metric)
    order = np.argsort(exact, kind="stable")[:k]
    return pool[order], exact[order]


def nearest_of(distances: Sequence[np.ndarray], n: int) -> dict[int, np.ndarray]:
    """Of several sets of distances, the ``n`` smallest over all of them (ties: earlier set
    first): set index -> positions in that set, ascending by distance within each set."""
    if not distances:
        return {}
    owner = np.concatenate([np.full(len(d), i) for i, d in enumerate(distances)])
    starts = np.cumsum([0, *(len(d) for d in distances)])
    best = np.argsort(np.concatenate(distances), kind="stable")[:n]
    return {i: best[owner[best] == i] - starts[i] for i in sorted(set(owner[best].tolist()))}
