"""Searching a namespace: the partitions a filter keeps are searched concurrently, each with
its own index (or exhaustively when it has none), the filter applied inside each before
ranking, and the per-partition results merged into one global top k.

Vector queries return the k nearest rows with ``_distance`` (ascending; Lance's distances:
squared L2, ``1 - cosine``, ``1 - dot``); text queries are in :mod:`.text`."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import SearchQueryError
from ..manifest.state import HasState, NamespaceState, state_of
from ..read.filters import FilterLike
from ..read.planning import ScanTask
from ..read.scan import iter_task_batches, read_schema
from ..schema.arrow_json import strip_field_ids
from .build import describe
from .catalog import declared
from .declaration import METRICS, IndexDeclaration, vector_dimension
from .searched import DISTANCE, Searched, for_each_partition, open_searched, rows_by_id
from .text import search_text

VECTOR_PARAMS = (
    "nprobes",
    "minimum_nprobes",
    "maximum_nprobes",
    "refine_factor",
    "ef",
    "use_index",
)
# candidates re-ranked by exact distance per row kept, unless refine_factor is given (recall@10
# 0.77 at 1, 0.97 at 5, 0.995 at 10 in bench/bench_search.py; latency about the same)
DEFAULT_REFINE = 10


def check_k(k: Any) -> int:
    """``k`` as a positive integer (raises :class:`SearchQueryError`)."""
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
        raise SearchQueryError(f"k must be a positive integer, got {k!r}")
    return int(k)


def query_kind(query: Any) -> str:
    """``text`` for a string, ``vector`` for a sequence of numbers (raises otherwise)."""
    if isinstance(query, str):
        return "text"
    if isinstance(query, np.ndarray | pa.Array | pa.ChunkedArray | list | tuple):
        return "vector"
    raise SearchQueryError(
        f"a search query is a string (full text) or a list / numpy array of numbers (a vector), "
        f"got {type(query).__name__}"
    )


def search(
    ns: NamespaceState | HasState,
    query: Any,
    *,
    column: str | None = None,
    k: int = 10,
    filter: FilterLike = None,
    columns: Sequence[str] | None = None,
    params: Mapping[str, Any] | None = None,
) -> pa.Table:
    """The ``k`` best rows for ``query`` across the partitions ``filter`` keeps (see the
    facade's ``search``)."""
    state = state_of(ns)
    k = check_k(k)
    kind = query_kind(query)
    decls = declared(state)
    schema = state.schema_with_ids
    plain = strip_field_ids(schema)
    target = read_schema(plain, columns)
    if kind == "text":
        decl = text_index(plain, decls, column)
        return search_text(state, query, decl, k, filter, target, dict(params or {}))
    name, metric = vector_column(plain, decls, column)
    dimension = vector_dimension(plain.field(name).type)
    assert dimension is not None
    vector = as_vector(query, dimension, name)
    extra = _vector_params(params or {})
    metric = str(extra.pop("metric", metric)).lower()
    if metric not in METRICS:
        raise SearchQueryError(
            f"metric {metric!r}: vector search takes one of {', '.join(METRICS)}"
        )
    plan = state.plan_scan(filter)

    def one(task: ScanTask) -> pa.Table | _Candidates:
        searched = open_searched(task, schema, plan.residual_filter, state.storage_options)
        if _cacheable(searched, name):
            return _cached_candidates(searched, name, vector, k, metric)
        if searched.pushable:
            return _nearest(searched, target, name, vector, k, metric, extra)
        return _flat(searched, schema, target, name, vector, k, metric, state.storage_options)

    out_schema = target.append(pa.field(DISTANCE, pa.float32()))
    found = for_each_partition(state, plan.tasks, one)
    parts = [t for t in found if isinstance(t, pa.Table) and t.num_rows]
    parts.extend(_fetch_best([c for c in found if isinstance(c, _Candidates)], k, schema, target))
    if not parts:
        return out_schema.empty_table()
    merged = pa.concat_tables(parts)
    order = pc.sort_indices(merged, sort_keys=[(DISTANCE, "ascending")])
    return merged.take(order[:k])


# Small tables without a vector index are searched from an in-memory copy of their vectors
# (a version never changes): one numpy product each instead of one Lance search each, and the
# rows of only the best k of them all fetched.
FLAT_CACHE_ROWS = 65_536  # tables up to this many rows
FLAT_CACHE_BYTES = 512 * 1024 * 1024  # vectors kept per process at most


@dataclass(frozen=True)
class _Candidates:
    """The best rows of one table searched from its cached vectors."""

    searched: Searched
    row_ids: np.ndarray
    distances: np.ndarray


class _VectorCache:
    """A process-wide LRU of (table version, column) -> (vectors, row ids), bounded in bytes."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._items: OrderedDict[tuple[Any, ...], tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, ds: lance.LanceDataset, column: str) -> tuple[np.ndarray, np.ndarray]:
        key = (ds.uri, ds.version, column)
        with self._lock:
            hit = self._items.get(key)
            if hit is not None:
                self._items.move_to_end(key)
                return hit
        table = ds.to_table(
            columns=[column], with_row_id=True, filter=f"{_quoted(column)} IS NOT NULL"
        )
        dimension = vector_dimension(table.schema.field(column).type) or 1
        value = (
            _matrix(table.column(column), dimension),
            table.column("_rowid").to_numpy().astype(np.uint64),
        )
        size = value[0].nbytes + value[1].nbytes
        with self._lock:
            if key not in self._items and size <= self.limit:
                self._items[key] = value
                self.used += size
                while self.used > self.limit:
                    _, (m, r) = self._items.popitem(last=False)
                    self.used -= m.nbytes + r.nbytes
        return value


_vectors = _VectorCache(FLAT_CACHE_BYTES)


def _cacheable(searched: Searched, column: str) -> bool:
    """Whether a table is searched from cached vectors: small, no vector index on ``column``,
    no filter inside it."""
    if not searched.native or searched.sql is not None:
        return False
    rows, indexes = describe(searched.ds)
    if rows > FLAT_CACHE_ROWS:
        return False
    return not any(column in (d.field_names or ()) for d in indexes.values())


def _cached_candidates(
    searched: Searched, column: str, vector: np.ndarray, k: int, metric: str
) -> _Candidates:
    matrix, row_ids = _vectors.get(searched.ds, column)
    if not len(row_ids):
        return _Candidates(searched, row_ids, np.zeros(0, np.float32))
    distances = distance(matrix, vector, metric)
    top = np.argsort(distances, kind="stable")[:k]
    return _Candidates(searched, row_ids[top], distances[top])


def _fetch_best(
    found: list[_Candidates], k: int, schema: pa.Schema, target: pa.Schema
) -> list[pa.Table]:
    """The rows of the ``k`` nearest candidates of all cached tables, with their distances."""
    if not found:
        return []
    distances = np.concatenate([c.distances for c in found])
    owner = np.concatenate([np.full(len(c.row_ids), i) for i, c in enumerate(found)])
    order = np.argsort(distances, kind="stable")[:k]
    out = []
    for i in sorted(set(owner[order].tolist())):
        mine = order[owner[order] == i]
        offsets = mine - sum(len(c.row_ids) for c in found[:i])
        ids = found[i].row_ids[offsets]
        rows = rows_by_id(found[i].searched, ids.tolist(), schema, target)
        by_id = dict(zip(ids.tolist(), found[i].distances[offsets].tolist(), strict=True))
        got = rows.column("_rowid").to_pylist()
        out.append(
            rows.drop_columns(["_rowid"]).append_column(
                DISTANCE, pa.array([by_id[r] for r in got], pa.float32())
            )
        )
    return out


def text_index(
    plain: pa.Schema, decls: Sequence[IndexDeclaration], column: str | None
) -> IndexDeclaration:
    """The full-text index a text query searches (on ``column``, else the only one)."""
    text = [d for d in decls if d.kind == "text"]
    if column is not None:
        if plain.get_field_index(column) < 0:
            raise SearchQueryError(
                f"no column {column!r} in the namespace schema (columns: {', '.join(plain.names)})"
            )
        on = [d for d in text if d.column == column]
        if not on:
            raise SearchQueryError(
                f"a text query needs a full-text (INVERTED) index on {column!r}: declare one "
                f"with ns.create_index({column!r}, 'INVERTED')"
            )
        return on[0]
    if len(text) == 1:
        return text[0]
    if not text:
        raise SearchQueryError(
            "a text query needs a full-text (INVERTED) index; none is declared "
            "(ns.create_index(column, 'INVERTED'))"
        )
    raise SearchQueryError(
        f"full-text indexes are declared on {sorted({d.column for d in text})}: pass column="
    )


def vector_column(
    plain: pa.Schema, decls: Sequence[IndexDeclaration], column: str | None
) -> tuple[str, str]:
    """The vector column a vector query searches, and its metric (the declared index's)."""
    vector_decls = [d for d in decls if d.kind == "vector"]
    if column is not None:
        if plain.get_field_index(column) < 0:
            raise SearchQueryError(
                f"no column {column!r} in the namespace schema (columns: {', '.join(plain.names)})"
            )
        if vector_dimension(plain.field(column).type) is None:
            raise SearchQueryError(
                f"column {column!r} is {plain.field(column).type}, not a vector column: a "
                "vector query searches a fixed-size list of floats"
            )
        on = [d for d in vector_decls if d.column == column]
        return column, on[0].metric if on else "l2"
    declared_columns = sorted({d.column for d in vector_decls})
    if len(declared_columns) == 1:
        on = [d for d in vector_decls if d.column == declared_columns[0]]
        return declared_columns[0], on[0].metric
    if len(declared_columns) > 1:
        raise SearchQueryError(f"vector indexes are declared on {declared_columns}: pass column=")
    candidates = [f.name for f in plain if vector_dimension(f.type) is not None]
    if len(candidates) == 1:
        return candidates[0], "l2"
    if not candidates:
        raise SearchQueryError("a vector query needs a vector column; the namespace has none")
    raise SearchQueryError(f"the namespace has vector columns {candidates}: pass column=")


def as_vector(query: Any, dimension: int, column: str) -> np.ndarray:
    """``query`` as a float32 vector of ``dimension`` (raises naming the column)."""
    try:
        if isinstance(query, pa.Array | pa.ChunkedArray):
            query = query.to_numpy(zero_copy_only=False)
        vector = np.asarray(query, dtype=np.float32)
    except (TypeError, ValueError):
        raise SearchQueryError(f"a vector query for {column!r} must hold numbers only") from None
    if vector.ndim != 1 or vector.shape[0] != dimension:
        raise SearchQueryError(
            f"column {column!r} holds vectors of dimension {dimension}; the query has "
            f"shape {tuple(vector.shape)}"
        )
    if not np.all(np.isfinite(vector)):
        raise SearchQueryError(f"a vector query for {column!r} must hold finite numbers")
    return vector


def _vector_params(params: Mapping[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(params) - set(VECTOR_PARAMS) - {"metric"})
    if unknown:
        raise SearchQueryError(
            f"unknown vector search parameter(s) {unknown}; known: metric, "
            + ", ".join(VECTOR_PARAMS)
        )
    return dict(params)


def _nearest(
    searched: Searched,
    target: pa.Schema,
    column: str,
    vector: np.ndarray,
    k: int,
    metric: str,
    extra: dict[str, Any],
) -> pa.Table:
    """Lance's nearest-neighbour search of one table, the filter applied before ranking; an
    index search that returns fewer than ``k`` rows while more match is redone exhaustively."""
    ds = searched.ds
    nearest = {"column": column, "q": vector, "k": k, "metric": metric, **extra}
    # exact distances for the k rows kept, so that partitions' results merge by true distance
    # (an index's quantized distances differ from table to table)
    nearest.setdefault("refine_factor", DEFAULT_REFINE)
    cols = [*target.names, DISTANCE]
    found = ds.to_table(columns=cols, nearest=nearest, filter=searched.lance_sql, prefilter=True)
    if found.num_rows < k:
        has_vector = f"{_quoted(column)} IS NOT NULL"
        where = f"({searched.lance_sql}) AND {has_vector}" if searched.lance_sql else has_vector
        if ds.count_rows(filter=where) > found.num_rows:
            nearest["use_index"] = False
            found = ds.to_table(
                columns=cols, nearest=nearest, filter=searched.lance_sql, prefilter=True
            )
    return _shaped(found, target, DISTANCE)


def _flat(
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
    matrix = _matrix(rows.column(column), vector.shape[0])
    distances = distance(matrix, vector, metric)
    top = np.argsort(distances, kind="stable")[:k]
    picked = rows.take(pa.array(top)).select(list(target.names))
    return picked.append_column(DISTANCE, pa.array(distances[top], pa.float32()))


def _matrix(values: pa.ChunkedArray, dimension: int) -> np.ndarray:
    flat = pc.list_flatten(values.combine_chunks()).to_numpy(zero_copy_only=False)
    return np.asarray(flat, dtype=np.float32).reshape(-1, dimension)


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


def _shaped(found: pa.Table, target: pa.Schema, extra: str) -> pa.Table:
    """Lance's search result in ``target``'s columns plus the ``extra`` column (float32)."""
    arrays = [found.column(f.name).cast(f.type) for f in target]
    arrays.append(found.column(extra).cast(pa.float32()))
    return pa.Table.from_arrays(arrays, schema=target.append(pa.field(extra, pa.float32())))


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"
