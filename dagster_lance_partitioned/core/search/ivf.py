"""The IVF side of partition tables' vector indexes: their centroids (from Lance's index
statistics), which tables a query over many of them probes and how deeply (routing), and the
rows of a table lying far from every centroid of its own index (outliers).

Routing: a query over several indexed tables ranks the union of their centroids and probes the
``probes`` nearest of them, wherever they are: a table holding ``n`` of them is searched with
``nprobes = n``, a table holding none is not searched. That is the search one IVF index over
the namespace, whose centroids are those of every table, would make.

Outliers: each table's index is trained on that table's rows only, so a row unlike the rest of
its table (a tenant's row that looks like another tenant's) lies in a cluster whose centroid is
far from it, and routing, which ranks centroids, would never probe that cluster for a query
near the row. When an index is built (:mod:`.build`), the rows farther from their centroid
than four times the median of their cluster (squared distances) are recorded in the table
version's config, keyed by the index segment; a search measures those rows exactly every
time. A table whose record is missing (built before this, or its index remapped since) is
never skipped by routing: it is searched with at least its nearest cluster, which holds every
row nearer the query than to another of its centroids."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

import lance
import numpy as np

from .distances import distance
from .session import SearchSession

if TYPE_CHECKING:  # the write path imports this module through .build: no cycle
    from .tables import SearchTable

# IVF clusters probed across the tables a query spans, unless ``nprobes`` is given (Lance's
# own default for one index; see docs/explanation/search.md)
DEFAULT_PROBES = 20
# Lance includes IVF centroids in index statistics only when this is set
CENTROIDS_ENV = "LANCE_INCLUDE_VECTOR_CENTROIDS"
OUTLIERS_KEY = "dlp.search.outliers."  # + the index segment's uuid: JSON list of row ids
OUTLIER_FACTOR = 4.0  # squared distance to its centroid beyond this many medians of its cluster
MAX_OUTLIERS = 4096  # more than this (or 1 % of the rows) recorded as "too many": never skipped
ASSIGN_ROWS = 1 << 15  # rows assigned to centroids per matrix product


def read_centroids(ds: lance.LanceDataset, index: str) -> np.ndarray | None:
    """The IVF centroids of index ``index`` of ``ds`` (None: not an IVF index in one segment,
    or statistics without centroids): Lance's IVF model of the index (0.1-1.5 ms a table),
    else its index statistics (3-5 ms a table: every partition's statistics, the centroids
    as JSON)."""
    get_model = getattr(ds._ds, "get_ivf_model", None)
    try:
        if get_model is None:
            raise AttributeError("get_ivf_model")
        values = get_model(index).centroids
        dimension = int(values.type.list_size)
        matrix = np.asarray(values.values.to_numpy(zero_copy_only=False), dtype=np.float32).reshape(
            -1, dimension
        )
        if len(matrix) and not values.null_count:
            return matrix
    except (AttributeError, OSError, ValueError, RuntimeError, TypeError):
        pass
    return _centroids_from_statistics(ds, index)


def _centroids_from_statistics(ds: lance.LanceDataset, index: str) -> np.ndarray | None:
    os.environ.setdefault(CENTROIDS_ENV, "true")
    try:
        stats = ds.stats.index_stats(index)
    except (OSError, ValueError, RuntimeError):
        return None
    segments = stats.get("indices") or []
    if len(segments) != 1:
        return None
    found = segments[0].get("centroids")
    if not found:
        return None
    matrix = np.asarray(found, dtype=np.float32)
    return matrix if matrix.ndim == 2 and len(matrix) else None


def ivf_of(
    session: SearchSession, table: SearchTable, column: str
) -> tuple[str, np.ndarray, np.ndarray | None] | None:
    """The IVF index on ``column`` of ``table``: its type, centroids and recorded outliers
    (None: unknown); None when the table has no IVF index on it in one segment."""
    found = table.index_on(column, ("IVF",))
    if found is None:
        return None
    name, description = found
    segments = list(description.segments)
    if len(segments) != 1:
        return None

    def read() -> tuple[tuple[str, np.ndarray, np.ndarray | None] | None]:
        centroids = read_centroids(table.ds, name)
        if centroids is None:
            return (None,)
        recorded = table.ds.config().get(OUTLIERS_KEY + str(segments[0].uuid))
        outliers = None
        if recorded is not None:
            ids = json.loads(recorded)
            outliers = None if ids == "many" else np.asarray(ids, dtype=np.uint64)
        return ((str(description.index_type).upper(), centroids, outliers),)

    def weight(found: tuple[tuple[str, np.ndarray, np.ndarray | None] | None]) -> int:
        if found[0] is None:
            return 0
        _, centroids, outliers = found[0]
        return int(centroids.nbytes + (0 if outliers is None else outliers.nbytes))

    return session.keep("ivf", (*table.version_key, name), read, weight)[0]


def route(
    centroids: Sequence[np.ndarray], vector: np.ndarray, metric: str, probes: int
) -> list[np.ndarray]:
    """For each table (its centroids, in order), which of its centroids are among the
    ``probes`` nearest ``vector`` over all tables (their positions; none: not searched)."""
    owner = np.concatenate([np.full(len(c), i) for i, c in enumerate(centroids)])
    local = np.concatenate([np.arange(len(c)) for c in centroids])
    distances = distance(np.concatenate(centroids), vector, metric)
    if probes < len(distances):
        nearest = np.argpartition(distances, probes - 1)[:probes]
    else:
        nearest = np.arange(len(distances))
    return [np.sort(local[nearest[owner[nearest] == i]]) for i in range(len(centroids))]


def nearest_centroids(
    matrix: np.ndarray, centroids: np.ndarray, metric: str
) -> tuple[np.ndarray, np.ndarray]:
    """For each row of ``matrix``, the centroid nearest it under ``metric`` and the squared
    L2 distance to it (of unit vectors under cosine)."""
    if metric == "cosine":
        matrix = _unit(matrix)
        centroids = _unit(centroids)
    c_norms = np.einsum("ij,ij->i", centroids, centroids)
    which = np.empty(len(matrix), dtype=np.int64)
    far = np.empty(len(matrix), dtype=np.float64)
    for start in range(0, len(matrix), ASSIGN_ROWS):
        part = matrix[start : start + ASSIGN_ROWS]
        products = part @ centroids.T
        if metric == "dot":
            best = products.argmax(axis=1)
        else:
            best = (c_norms - 2.0 * products).argmin(axis=1)
        which[start : start + len(part)] = best
        diff = part.astype(np.float64) - centroids[best]
        far[start : start + len(part)] = np.einsum("ij,ij->i", diff, diff)
    return which, far


def _unit(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(norms > 0, matrix / norms, 0.0).astype(np.float32)


def find_outliers(
    matrix: np.ndarray, row_ids: np.ndarray, centroids: np.ndarray, metric: str
) -> list[int] | str:
    """The row ids of rows farther from their centroid than :data:`OUTLIER_FACTOR` medians of
    their cluster (squared distances), or ``"many"`` when there are more than a search should
    measure each time."""
    if not len(matrix):
        return []
    which, far = nearest_centroids(matrix, centroids, metric)
    order = np.argsort(which, kind="stable")
    bounds = np.searchsorted(which[order], np.arange(len(centroids) + 1))
    out: list[int] = []
    for c in range(len(centroids)):
        members = order[bounds[c] : bounds[c + 1]]
        if len(members) < 2:
            continue
        limit = OUTLIER_FACTOR * float(np.median(far[members]))
        out.extend(int(i) for i in row_ids[members[far[members] > limit]])
    if len(out) > min(MAX_OUTLIERS, max(16, len(matrix) // 100)):
        return "many"
    return sorted(out)
