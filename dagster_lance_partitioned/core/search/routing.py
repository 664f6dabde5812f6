"""Which partition tables a vector query probes, and how deeply, when it spans many.

Every partition table's IVF index has its own centroids. A query over several such tables
ranks the union of their centroids by distance to the query and probes the ``probes`` nearest
of them, wherever they are: a table holding ``n`` of them is searched with ``nprobes = n``, a
table holding none is not searched. That is the search one IVF index over the namespace,
whose centroids are those of every table, would make with ``nprobes = probes``; the number of
Lance searches a query makes then grows with ``probes``, not with the number of partitions.

A table's centroids come from Lance's index statistics, read once per table version (a
version never changes) and kept per process."""

from __future__ import annotations

import os
from collections.abc import Sequence

import lance
import numpy as np

from ..lru import Lru
from .build import describe
from .flat import distance

# IVF clusters probed across the tables a query spans, unless ``nprobes`` is given (Lance's
# own default for one index; recall@10 0.97 in bench/bench_search.py, see
# docs/explanation/search.md)
DEFAULT_PROBES = 20
CENTROIDS_CACHED = 4096  # table versions whose centroids are kept per process
# Lance includes IVF centroids in index statistics only when this is set (its default is
# changing); setting it before the first read keeps them there for this process
CENTROIDS_ENV = "LANCE_INCLUDE_VECTOR_CENTROIDS"


def _read_centroids(ds: lance.LanceDataset, index: str) -> np.ndarray | None:
    os.environ.setdefault(CENTROIDS_ENV, "true")
    try:
        stats = ds.stats.index_stats(index)
    except (OSError, ValueError, RuntimeError):
        return None
    segments = stats.get("indices") or []
    if len(segments) != 1:  # an index in several segments (appended rows folded apart)
        return None
    centroids = segments[0].get("centroids")
    if not centroids:
        return None
    matrix = np.asarray(centroids, dtype=np.float32)
    return matrix if matrix.ndim == 2 and len(matrix) else None


# (table version, index) -> its centroids (boxed: None is "not an IVF index")
_centroids: Lru[tuple[np.ndarray | None]] = Lru(CENTROIDS_CACHED)


def _centroids_of(ds: lance.LanceDataset, index: str) -> np.ndarray | None:
    key = (ds.uri, ds.version, index)
    hit = _centroids.get(key)
    if hit is None:
        hit = (_read_centroids(ds, index),)
        _centroids.put(key, hit)
    return hit[0]


def ivf_index(ds: lance.LanceDataset, column: str) -> tuple[str, np.ndarray] | None:
    """The type and IVF centroids of the vector index on ``column`` of ``ds`` (None: no IVF
    index on it, several, or statistics without centroids)."""
    _, indexes = describe(ds)
    on = [name for name, d in indexes.items() if column in (d.field_names or ())]
    if len(on) != 1:
        return None
    index_type = str(getattr(indexes[on[0]], "index_type", "")).upper()
    if not index_type.startswith("IVF"):
        return None
    centroids = _centroids_of(ds, on[0])
    return None if centroids is None else (index_type, centroids)


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
