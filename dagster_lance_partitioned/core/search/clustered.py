"""Indexed tables' vectors kept by IVF cluster, for queries routed over many tables.

A query routed over several indexed tables (see :mod:`.routing`) probes a few IVF clusters of
each; a Lance search of a table costs about a millisecond whatever the size of the clusters it
probes. From the second query routed over the same set of tables in a process, their vectors
are kept in memory as bfloat16, grouped by the centroid of each table's index that each is
nearest to; they are built in the background (one table at a time), so no query waits for
them. A routed query then measures the rows of the clusters it probes here, in one pass over
all of them. These distances are approximate; each has bounds (the bfloat16 and float32
rounding), and only the rows those bounds leave a chance of being among the k nearest are
read and measured exactly (see :meth:`.query._Query.measured`).

Kept within the vector share of ``DLP_SEARCH_CACHE_MB``, beside the small tables' vectors."""

from __future__ import annotations

import threading
from collections.abc import Hashable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass

import lance
import numpy as np

from ..concurrency import in_background
from ..lru import Sightings
from .build import describe
from .flat import FLAT_CACHE_BYTES, _cached_vectors, matrix_of, quoted

# rows assigned to clusters per matrix product while building (bounds its scratch memory)
ASSIGN_ROWS = 1 << 15


@dataclass(frozen=True)
class Clustered:
    """One table version's non-null vectors (bfloat16) grouped by IVF cluster: cluster ``c``
    holds rows ``offsets[c]:offsets[c + 1]``; their row ids and squared norms (of the bfloat16
    values)."""

    matrix: np.ndarray
    row_ids: np.ndarray
    norms: np.ndarray
    offsets: np.ndarray

    @property
    def nbytes(self) -> int:
        return self.matrix.nbytes + self.row_ids.nbytes + self.norms.nbytes + self.offsets.nbytes


def nearest_centroids(matrix: np.ndarray, centroids: np.ndarray, metric: str) -> np.ndarray:
    """For each row of ``matrix``, the centroid nearest it as routing measures (see
    :func:`.flat.distance`)."""
    c_norms = np.einsum("ij,ij->i", centroids, centroids)
    out = np.empty(len(matrix), dtype=np.int64)
    for start in range(0, len(matrix), ASSIGN_ROWS):
        products = matrix[start : start + ASSIGN_ROWS] @ centroids.T
        if metric == "l2":
            scores = c_norms - 2.0 * products  # |x|^2 is the same for every centroid
            out[start : start + len(products)] = scores.argmin(axis=1)
        elif metric == "cosine":
            with np.errstate(divide="ignore", invalid="ignore"):
                sims = np.where(c_norms > 0, products / np.sqrt(c_norms), -np.inf)
            out[start : start + len(products)] = sims.argmax(axis=1)
        else:  # dot
            out[start : start + len(products)] = products.argmax(axis=1)
    return out


def build(ds: lance.LanceDataset, column: str, centroids: np.ndarray, metric: str) -> Clustered:
    """The vectors of ``column`` in ``ds`` grouped by the cluster of ``centroids`` each is
    nearest to."""
    table = ds.to_table(columns=[column], with_row_id=True, filter=f"{quoted(column)} IS NOT NULL")
    matrix = matrix_of(table.column(column), centroids.shape[1])
    clusters = nearest_centroids(matrix, centroids, metric)
    order = np.argsort(clusters, kind="stable")
    halves = to_bfloat16(matrix[order])
    del matrix
    widened = from_bfloat16(halves)
    norms = np.einsum("ij,ij->i", widened, widened)
    offsets = np.searchsorted(clusters[order], np.arange(len(centroids) + 1))
    row_ids = table.column("_rowid").to_numpy().astype(np.uint64)[order]
    return Clustered(halves, row_ids, norms.astype(np.float32), offsets.astype(np.int64))


def to_bfloat16(matrix: np.ndarray) -> np.ndarray:
    """float32 values rounded to their 16 high bits (bfloat16: float32's range, 8 significant
    bits), as uint16: widened back with two integer operations (numpy's float16 is converted
    one value at a time)."""
    bits = np.ascontiguousarray(matrix, dtype=np.float32).view(np.uint32)
    rounded = bits + (np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1)))
    return (rounded >> np.uint32(16)).astype(np.uint16)


def from_bfloat16(halves: np.ndarray) -> np.ndarray:
    """bfloat16 values (uint16, see :func:`to_bfloat16`) as float32."""
    return (halves.astype(np.uint32) << np.uint32(16)).view(np.float32)


def probe(
    tables: Sequence[tuple[Clustered, np.ndarray]],
    vector: np.ndarray,
    metric: str,
    k: int,
    n: int,
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Of the rows of the given clusters of several tables (each table's kept clusters and the
    positions of those probed), those that can be among the ``k`` nearest ``vector`` once
    measured exactly (at most ``n``, by approximate distance): per table, their row ids and
    approximate distances (ascending). One matrix product over all of them."""
    spans = [
        (i, int(kept.offsets[c]), int(kept.offsets[c + 1]))
        for i, (kept, clusters) in enumerate(tables)
        for c in np.sort(clusters)
    ]
    spans = [(i, a, b) for i, a, b in spans if b > a]
    empty = (np.empty(0, np.uint64), np.empty(0, np.float32))
    if not spans:
        return [empty for _ in tables]
    starts = np.cumsum([0, *(b - a for _, a, b in spans)])
    products = np.empty(starts[-1], np.float32)
    norms = np.empty(starts[-1], np.float32)
    for (i, a, b), at in zip(spans, starts, strict=False):
        # one cluster at a time: its float32 copy stays in the CPU's cache
        kept = tables[i][0]
        products[at : at + b - a] = from_bfloat16(kept.matrix[a:b]) @ vector
        norms[at : at + b - a] = kept.norms[a:b]
    if metric == "l2":
        distances = norms - 2.0 * products + float(vector @ vector)
    elif metric == "cosine":
        scale = np.sqrt(norms) * float(np.linalg.norm(vector))
        with np.errstate(divide="ignore", invalid="ignore"):
            distances = 1.0 - np.where(scale > 0, products / scale, 0.0)
    else:
        distances = 1.0 - products
    distances = distances.astype(np.float32)
    everything = np.arange(len(distances))
    top = np.argpartition(distances, n - 1)[:n] if n < len(distances) else everything
    # only rows that can be among the k nearest once measured exactly
    low, high = bounds(distances[top], norms[top], vector, metric)
    kth = float(np.partition(high, min(k, len(high)) - 1)[min(k, len(high)) - 1])
    top = top[low <= kth]
    top = top[np.argsort(distances[top], kind="stable")]
    span = np.searchsorted(starts, top, side="right") - 1
    owner = np.array([i for i, _, _ in spans])[span]
    local = np.array([a for _, a, _ in spans])[span] + (top - starts[span])
    out = []
    for i, (kept, _) in enumerate(tables):
        mine = owner == i
        out.append((kept.row_ids[local[mine]], distances[top[mine]]) if mine.any() else empty)
    return out


# bfloat16 rounding (to nearest, 8 significant bits): |x - x~| <= 2^-8 |x| per component, or
# half its smallest step for subnormal values
_BF16 = 2.0**-8 * 1.01
_BF16_TINY = 2.0**-133
_EPS32 = float(np.finfo(np.float32).eps)


def bounds(
    approximate: np.ndarray, norms: np.ndarray, vector: np.ndarray, metric: str
) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper bounds of the exact distances of rows whose distances computed from
    their bfloat16 values are ``approximate`` (``norms``: squared norms of those values)."""
    dimension = len(vector)
    q_norm = float(np.linalg.norm(vector))
    x_norm = np.sqrt(norms.astype(np.float64))
    off = _BF16 * x_norm + np.sqrt(dimension) * _BF16_TINY  # |x - x~|
    # float32 rounding of the computation (an expansion of |x - q|^2 or a dot product)
    rounding = 4.0 * (dimension + 3) * _EPS32 * (x_norm + q_norm) ** 2
    a = approximate.astype(np.float64)
    if metric == "l2":
        root = np.sqrt(np.maximum(a, 0.0))
        low = np.maximum(root - off, 0.0) ** 2 - rounding
        high = (root + off) ** 2 + rounding
        return low, high
    if metric == "cosine":
        with np.errstate(divide="ignore", invalid="ignore"):
            turn = np.where(x_norm > 0, 2.0 * off / x_norm, 2.0)  # change of the cosine
        slack = turn + 4.0 * (dimension + 3) * _EPS32
        return a - slack, a + slack
    slack = off * q_norm + rounding  # dot
    return a - slack, a + slack


# sets of table versions a query was routed over (their clusters kept from the second time)
_routed = Sightings(256)
_building: set[Hashable] = set()
_lock = threading.Lock()
_one_build = threading.Lock()  # builds run one at a time
_pending: list[Future[None]] = []

Routed = tuple[lance.LanceDataset, np.ndarray]  # a table version and its index's centroids


# the share of the vector cache the clusters of one set of routed tables may take (the rest
# stays for small tables' vectors)
KEPT_SHARE = 0.75


def _size(ds: lance.LanceDataset, centroids: np.ndarray) -> int:
    """About how many bytes a table version's kept clusters take."""
    rows = describe(ds)[0]
    return int(rows * (2 * centroids.shape[1] + 12) + 8 * (len(centroids) + 1))


def kept(tables: Sequence[Routed], column: str, metric: str) -> list[Clustered | None]:
    """The kept clusters of ``column`` in each of ``tables`` (None where they are not). The
    second query routed over the same tables starts building those missing, in the
    background, when all of them fit in :data:`KEPT_SHARE` of the vector cache."""
    keys = [("clustered", ds.uri, ds.version, column, metric) for ds, _ in tables]
    found = [_cached_vectors.get(key) for key in keys]
    out = [hit if isinstance(hit, Clustered) else None for hit in found]
    missing = [(key, t) for key, t, hit in zip(keys, tables, out, strict=True) if hit is None]
    if not missing or FLAT_CACHE_BYTES <= 0 or not _routed.again(tuple(keys)):
        return out
    if sum(_size(ds, centroids) for ds, centroids in tables) > FLAT_CACHE_BYTES * KEPT_SHARE:
        # they would not fit together: each query would evict what the last one built
        return out
    with _lock:
        todo = [(key, t) for key, t in missing if key not in _building]
        _building.update(key for key, _ in todo)
        _pending[:] = [f for f in _pending if not f.done()]
        if todo:
            _pending.append(in_background(lambda: _build_kept(todo, column, metric)))
    return out


def _build_kept(todo: Sequence[tuple[Hashable, Routed]], column: str, metric: str) -> None:
    for key, (ds, centroids) in todo:
        try:
            with _one_build:
                if _cached_vectors.get(key) is None:
                    _cached_vectors.put(key, build(ds, column, centroids, metric))
        except Exception:  # a table not kept is searched by Lance, as before
            pass
        finally:
            with _lock:
                _building.discard(key)


def settle() -> None:
    """Wait for the builds started so far (tests, benchmarks)."""
    with _lock:
        pending = list(_pending)
    for future in pending:
        future.result()


def clear() -> None:
    """Forget which tables were routed to (their kept clusters go with the vector cache)."""
    settle()
    _routed.clear()
