"""Searching a namespace: the partitions a filter keeps are searched concurrently, each with
its own index (or exhaustively when it has none), the filter applied inside each before
ranking, and the per-partition results merged into one global top k.

Vector queries return the k nearest rows with ``_distance`` (ascending; Lance's distances:
squared L2, ``1 - cosine``, ``1 - dot``); text queries are in :mod:`.text`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..concurrency import serial_while_fast
from ..errors import SearchQueryError
from ..manifest.state import HasState, NamespaceState, state_of
from ..read.filters import FilterLike
from ..read.planning import ScanTask
from ..read.scan import _guarded, read_schema, scan_concurrency
from ..schema.arrow_json import strip_field_ids
from . import clustered
from .build import describe
from .catalog import declared
from .declaration import IndexDeclaration, vector_dimension
from .flat import cacheable, cached_candidates, distance, flat, matrix_of, quoted
from .params import (
    VectorParams,
    check_columns,
    check_direction,
    check_k,
    check_text_params,
    for_table,
    vector_params,
)
from .routing import DEFAULT_PROBES, ivf_index, route
from .searched import (
    DISTANCE,
    Candidates,
    Searched,
    fetch_best,
    for_each_partition,
    for_each_searched,
    nearest_of,
    open_searched,
    rows_by_id,
)
from .text import search_text

# candidates re-ranked by exact distance per row kept, unless refine_factor is given (recall@10
# 0.77 at 1, 0.97 at 5, 0.995 at 10 in bench/bench_search.py; latency about the same)
DEFAULT_REFINE = 10


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
    k = check_k(k)
    kind = query_kind(query)
    check_columns(column, columns)
    if kind == "text":
        check_text_params(params or {})
    given = vector_params(params or {}, k) if kind == "vector" else VectorParams()
    state = state_of(ns)
    decls = declared(state)
    schema = state.schema_with_ids
    plain = strip_field_ids(schema)
    target = read_schema(plain, columns)
    if kind == "text":
        decl = text_index(plain, decls, column)
        return search_text(state, query, decl, k, filter, target)
    name, metric = vector_column(plain, decls, column)
    metric = given.metric or metric
    dimension = vector_dimension(plain.field(name).type)
    assert dimension is not None
    vector = as_vector(query, dimension, name)
    check_direction(vector, metric, name)
    plan = state.plan_scan(filter)
    opts = state.storage_options
    probes = _probes(given)

    def opened(task: ScanTask) -> _Opened:
        return _opened(task, schema, plan.residual_filter, opts, name, probes is not None)

    tables = for_each_partition(state, plan.tasks, opened, quick=True)  # opened before: cheap
    # no more rows asked for than the tables hold
    k = max(1, min(k, sum(describe(t.searched.ds)[0] for t in tables)))
    extra = given.per_table()
    # left to its default, a query of one indexed table keeps Lance's own probing
    route_from = 1 if given.probes is not None else 2
    query = _Query(state, schema, target, name, vector, k, metric, extra, route_from)
    found, routed = query.run(tables, probes)
    if routed and sum(t.num_rows for t in found) < k:
        # the clusters probed hold fewer than k matching rows: every table searched in full
        found, _ = query.run(tables, None)
    if not found:
        return target.append(pa.field(DISTANCE, pa.float32())).empty_table()
    merged = pa.concat_tables(found)
    order = pc.sort_indices(merged, sort_keys=[(DISTANCE, "ascending")])
    return merged.take(order[:k])


def _probes(given: VectorParams) -> int | None:
    """IVF clusters a query over several indexed tables probes in all (None: every table is
    searched with Lance's parameters as given, as when ``nprobes`` or probe bounds per table
    or ``use_index=False`` are passed)."""
    if given.probes is not None:
        return given.probes
    per_table = (given.nprobes, given.minimum_nprobes, given.maximum_nprobes)
    if any(n is not None for n in per_table) or given.use_index is False:
        return None
    return DEFAULT_PROBES


def _opened(
    task: ScanTask,
    schema: pa.Schema,
    residual: str | None,
    opts: dict[str, str] | None,
    column: str,
    routable: bool,
) -> _Opened:
    """``task``'s table opened for a vector search on ``column`` and how it is searched (from
    what is kept per process of pinned versions: the opening, the index descriptions, the
    centroids)."""
    searched = open_searched(task, schema, residual, opts)
    if cacheable(searched, column):
        return _Opened(searched, "cached")
    if not searched.pushable:
        return _Opened(searched, "flat")
    ivf = ivf_index(searched.ds, column) if routable else None
    return _Opened(searched, "lance", *(ivf or (None, None)))


@dataclass(frozen=True)
class _Opened:
    """A table opened for a vector search and how it is searched: from cached vectors
    (``cached``), by Lance (``lance``, with its IVF centroids when a query spanning several
    tables is routed by them), or read and ranked here (``flat``)."""

    searched: Searched
    how: str
    index_type: str | None = None
    centroids: np.ndarray | None = None


@dataclass(frozen=True)
class _Query:
    """One vector query over opened tables."""

    state: NamespaceState
    schema: pa.Schema
    target: pa.Schema
    column: str
    vector: np.ndarray
    k: int
    metric: str
    extra: dict[str, Any]
    route_from: int  # indexed tables a query is routed over at least

    def run(self, tables: Sequence[_Opened], probes: int | None) -> tuple[list[pa.Table], bool]:
        """Each table's best rows (of those found by row id, the ``k`` best fetched), and
        whether the search was routed (``probes`` clusters over the tables with centroids)."""
        routed = [t for t in tables if t.centroids is not None] if probes is not None else []
        clusters: dict[int, np.ndarray] = {}
        if len(routed) >= self.route_from and probes is not None:
            centroids = [t.centroids for t in routed if t.centroids is not None]
            picked = route(centroids, self.vector, self.metric, probes)
            clusters = {id(t): c for t, c in zip(routed, picked, strict=True)}
        small = [t.searched for t in tables if t.how == "cached"]
        candidates = cached_candidates(small, self.column, self.vector, self.k, self.metric)
        in_memory = self.in_memory([t for t in tables if id(t) in clusters], clusters)
        searched = [
            t.searched
            for t in tables
            if t.how != "cached"
            and (id(t) not in clusters or len(clusters[id(t)]))
            and id(t) not in in_memory
        ]
        how = {id(t.searched): t for t in tables}
        done = for_each_searched(self.state, searched, lambda s: self.one(how[id(s)], clusters))
        parts = [d for d in done if isinstance(d, pa.Table) and d.num_rows]
        candidates.extend(self.refined([d for d in done if isinstance(d, _Approximate)]))
        parts.extend(self.measured(list(in_memory.values())))
        threads = scan_concurrency(self.state.uri)
        parts.extend(fetch_best(candidates, self.k, self.schema, self.target, threads))
        return parts, bool(clusters)

    @property
    def refine(self) -> int:
        """Candidates re-ranked by exact distance per row kept."""
        return max(1, int(self.extra.get("refine_factor") or DEFAULT_REFINE))

    def refined(self, found: Sequence[_Approximate]) -> list[Candidates]:
        """The ``k * refine_factor`` best of the routed tables' candidates together, by the
        indexes' approximate distances, measured exactly (one read of their vectors per table
        holding some; an ``IVF_FLAT`` index's distances are exact already)."""
        found = [f for f in found if len(f.row_ids)]
        picked = nearest_of([f.distances for f in found], self.k * self.refine)
        by_table = {id(found[i].searched): (found[i], rows) for i, rows in picked.items()}

        def exact(searched: Searched) -> Candidates:
            f, rows = by_table[id(searched)]
            if f.exact:
                return Candidates(searched, f.row_ids[rows], f.distances[rows])
            ids = np.sort(f.row_ids[rows])
            taken = searched.ds._take_rows(ids.tolist(), columns=[self.column])
            matrix = matrix_of(taken.column(self.column), len(self.vector))
            return Candidates(searched, ids, distance(matrix, self.vector, self.metric))

        return for_each_searched(self.state, [f.searched for f, _ in by_table.values()], exact)

    def measured(self, found: Sequence[_Approximate]) -> list[pa.Table]:
        """The rows of ``found`` (the few that can be among the k nearest) in the target's
        columns with their exact distances: one read per table, their vectors with them."""
        found = [f for f in found if len(f.row_ids)]
        plain = strip_field_ids(self.schema)
        names = list(dict.fromkeys([*self.target.names, self.column]))
        wanted = pa.schema([plain.field(n) for n in names])

        def one(searched: Searched) -> pa.Table:
            f = by_table[id(searched)]
            rows = rows_by_id(searched, f.row_ids.tolist(), self.schema, wanted, keep=False)
            exact = distance(
                matrix_of(rows.column(self.column), len(self.vector)), self.vector, self.metric
            )
            picked = rows.select(list(self.target.names))
            return picked.append_column(DISTANCE, pa.array(exact, pa.float32()))

        by_table = {id(f.searched): f for f in found}
        # a few quick reads: in this thread while they are (concurrent ones slow each other)
        return serial_while_fast(
            lambda s: _guarded(s.task, lambda: one(s)),
            [f.searched for f in found],
            scan_concurrency(self.state.uri),
        )

    def one(self, t: _Opened, clusters: Mapping[int, np.ndarray]) -> pa.Table | _Approximate:
        """One table's search: routed (its nearest clusters only), Lance's, or read here."""
        if t.how == "flat":
            return flat(
                t.searched,
                self.schema,
                self.target,
                self.column,
                self.vector,
                self.k,
                self.metric,
                self.state.storage_options,
            )
        if id(t) in clusters:
            return self.probed(t, len(clusters[id(t)]))
        return _nearest(
            t.searched, self.target, self.column, self.vector, self.k, self.metric, self.extra
        )

    def in_memory(
        self, routed: Sequence[_Opened], clusters: Mapping[int, np.ndarray]
    ) -> dict[int, _Approximate]:
        """Of the ``routed`` tables, those whose vectors are kept by cluster (see
        :mod:`.clustered`) and that hold some of the clusters probed, all probed together
        here: the rows that can be among the k nearest (of the ``k * refine_factor`` best by
        approximate distance), with those distances."""
        eligible = [t for t in routed if t.searched.lance_sql is None and t.centroids is not None]
        present = clustered.kept(
            [(t.searched.ds, t.centroids) for t in eligible if t.centroids is not None],
            self.column,
            self.metric,
        )
        kept = [
            (t, k)
            for t, k in zip(eligible, present, strict=True)
            if k is not None and len(clusters[id(t)])
        ]
        found = clustered.probe(
            [(k, clusters[id(t)]) for t, k in kept],
            self.vector,
            self.metric,
            self.k,
            self.k * self.refine,
        )
        return {
            id(t): _Approximate(t.searched, ids, distances, exact=False)
            for (t, _), (ids, distances) in zip(kept, found, strict=True)
        }

    def probed(self, t: _Opened, nprobes: int) -> _Approximate:
        """Lance's search of ``nprobes`` IVF clusters of a table, unrefined: the row ids and
        the index's distances of its ``k * refine_factor`` best rows."""
        passed = {key: v for key, v in self.extra.items() if key != "refine_factor"}
        nearest = {
            "column": self.column,
            "q": self.vector,
            "metric": self.metric,
            **for_table(self.k * self.refine, passed, describe(t.searched.ds)[0]),
            "nprobes": nprobes,
        }
        found = t.searched.ds.to_table(
            columns=[],
            with_row_id=True,
            nearest=nearest,
            filter=t.searched.lance_sql,
            prefilter=True,
        )
        return _Approximate(
            t.searched,
            found.column("_rowid").to_numpy().astype(np.uint64),
            found.column(DISTANCE).to_numpy().astype(np.float32),
            exact=t.index_type == "IVF_FLAT",
        )


@dataclass(frozen=True)
class _Approximate:
    """A routed table's best rows by its index's distances (``exact``: they are exact)."""

    searched: Searched
    row_ids: np.ndarray
    distances: np.ndarray
    exact: bool


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
    # exact distances for the k rows kept, so that partitions' results merge by true distance
    # (an index's quantized distances differ from table to table)
    passed = {"refine_factor": DEFAULT_REFINE, **extra}
    nearest: dict[str, Any] = {"column": column, "q": vector, "metric": metric}
    nearest.update(for_table(k, passed, describe(ds)[0]))
    k = nearest["k"]
    cols = [*target.names, DISTANCE]
    found = ds.to_table(columns=cols, nearest=nearest, filter=searched.lance_sql, prefilter=True)
    if found.num_rows < k:
        has_vector = f"{quoted(column)} IS NOT NULL"
        where = f"({searched.lance_sql}) AND {has_vector}" if searched.lance_sql else has_vector
        if ds.count_rows(filter=where) > found.num_rows:
            nearest["use_index"] = False
            found = ds.to_table(
                columns=cols, nearest=nearest, filter=searched.lance_sql, prefilter=True
            )
    return _shaped(found, target, DISTANCE)


def _shaped(found: pa.Table, target: pa.Schema, extra: str) -> pa.Table:
    """Lance's search result in ``target``'s columns plus the ``extra`` column (float32)."""
    arrays = [found.column(f.name).cast(f.type) for f in target]
    arrays.append(found.column(extra).cast(pa.float32()))
    return pa.Table.from_arrays(arrays, schema=target.append(pa.field(extra, pa.float32())))
