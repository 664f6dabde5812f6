"""Vector search across partitions: each searched table is answered by one named strategy,
every one of which returns the same rows as the reference (:mod:`.exact`) for the rows it
covers, and the candidates of all tables, each with its exact distance, are merged into one
global top k.

- ``exact`` (:mod:`.exact`): every row read and measured; for ``use_index=False`` and tables
  Lance cannot search as they are.
- ``in_memory``: rows measured from their vectors kept in the search session, screened by one
  matrix product (:func:`.distances.nearest_rows`): tables without a vector index, the rows an
  index does not cover (appended since it was built), the rows recorded as outliers of an
  index (:mod:`.ivf`), and every matching row of an indexed table whose filter keeps at most
  :data:`FEW_MATCHES` rows.
- ``routed``: a query over several tables with IVF indexes probes the ``probes`` clusters
  nearest it over all of their centroids (:func:`.ivf.route`); each table holding some is
  searched by Lance for its ``k * refine_factor`` best indexed rows by the index's distances,
  and the best of all of them together are measured exactly, as one index over the namespace
  would refine.
- ``per_table``: Lance's own search of each indexed table with the parameters given
  (``nprobes`` per table, one indexed table, ...), refined by Lance.

Indexed tables are always searched with Lance's ``fast_search`` (indexed rows only): their
other rows are the ``in_memory`` strategy's, so no row is left out whichever clusters are
probed. If the clusters probed hold fewer than k rows that pass the filter, every indexed
table is searched in full, so k rows come back whenever k rows match."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from ..manifest.state import NamespaceState
from ..read.scan import scan_concurrency
from . import exact, vectors
from .distances import Vectors, distance, matrix_of, nearest_of, nearest_rows
from .ivf import DEFAULT_PROBES, ivf_of, route
from .params import VectorParams, for_table
from .session import SearchSession
from .tables import (
    DISTANCE,
    SearchTable,
    fetch_scored,
    for_each_table,
    matching_ids,
    take_rows,
)

# candidates re-ranked by exact distance per row kept, unless refine_factor is given
DEFAULT_REFINE = 10
# an indexed table whose filter keeps at most this many rows has them measured exactly
FEW_MATCHES = 8192


@dataclass(frozen=True)
class Candidates:
    """Rows of one table by row id, with their exact distances."""

    table: SearchTable
    row_ids: np.ndarray
    distances: np.ndarray


@dataclass
class _Indexed:
    """An indexed table's part searched by Lance: its IVF type and centroids (None: not
    routable), and whether routing may skip it."""

    table: SearchTable
    index_type: str | None = None
    centroids: np.ndarray | None = None
    skippable: bool = True


@dataclass
class VectorQuery:
    """One vector query over opened tables."""

    state: NamespaceState
    session: SearchSession
    schema: pa.Schema
    target: pa.Schema
    column: str
    vector: np.ndarray
    k: int
    metric: str
    params: VectorParams
    strategies: dict[str, int] = field(default_factory=dict)  # tables answered by each

    @property
    def refine(self) -> int:
        return max(1, self.params.refine_factor or DEFAULT_REFINE)

    @property
    def probes(self) -> int | None:
        """IVF clusters probed across routed tables (None: every table its own search)."""
        p = self.params
        if p.probes is not None:
            return p.probes
        if any(n is not None for n in (p.nprobes, p.minimum_nprobes, p.maximum_nprobes)):
            return None
        return DEFAULT_PROBES

    def run(self, tables: Sequence[SearchTable]) -> pa.Table:
        """The ``k`` nearest rows of ``tables``, merged."""
        if self.params.use_index is False:
            self.strategies["exact"] = len(tables)
            return exact.nearest(
                self.state,
                tables,
                self.schema,
                self.target,
                self.column,
                self.vector,
                self.k,
                self.metric,
            )
        slow = [t for t in tables if not t.pushable]
        fast = [t for t in tables if t.pushable]
        candidates: list[Candidates] = []
        indexed: list[_Indexed] = []
        for table in fast:
            part = self.in_memory(table, candidates)
            if part is not None:
                indexed.append(part)
        candidates.extend(self.indexed(indexed))
        found = [self.fetch(candidates)]
        if slow:
            self.strategies["exact"] = len(slow)
            opts = self.state.storage_options
            found.extend(
                for_each_table(
                    self.state,
                    slow,
                    lambda t: exact.table_nearest(
                        t,
                        self.schema,
                        self.target,
                        self.column,
                        self.vector,
                        self.k,
                        self.metric,
                        opts,
                    ),
                )
            )
        return exact.merged(found, self.target, self.k)

    def _count(self, name: str) -> None:
        self.strategies[name] = self.strategies.get(name, 0) + 1

    def _ranked(self, table: SearchTable, kept: Vectors) -> Candidates:
        rows, dist = nearest_rows(kept, self.vector, self.k, self.metric)
        return Candidates(table, kept.row_ids[rows], dist)

    def in_memory(self, table: SearchTable, out: list[Candidates]) -> _Indexed | None:
        """What of ``table`` is measured from kept vectors (added to ``out``); the part left
        to its index, if any."""
        session, column = self.session, self.column
        filtered = table.lance_sql is not None
        found = table.index_on(table.sources.get(column) or column)
        if found is None:
            self._count("in_memory")
            kept = vectors.all_vectors(session, table, column)
            if filtered:
                kept = vectors.filtered_vectors(session, table, column, kept, "all")
            out.append(self._ranked(table, kept))
            return None
        if filtered and len(matching_ids(session, table)) <= FEW_MATCHES:
            self._count("in_memory")
            ids = matching_ids(session, table)
            out.append(
                self._ranked(table, vectors.rows_vectors(session, table, column, ids, "filtered"))
            )
            return None
        _, description = found
        rest = vectors.unindexed_vectors(session, table, column, description)
        ivf = ivf_of(session, table, column)
        outliers = None if ivf is None else ivf[2]
        extra = []
        if rest is not None:
            extra.append(("unindexed", rest))
        if outliers is not None and len(outliers):
            extra.append(
                ("outliers", vectors.rows_vectors(session, table, column, outliers, "outliers"))
            )
        for part, kept in extra:
            if filtered:
                kept = vectors.filtered_vectors(session, table, column, kept, part)
            out.append(self._ranked(table, kept))
        if ivf is None:
            return _Indexed(table)
        return _Indexed(table, ivf[0], ivf[1], skippable=outliers is not None)

    def indexed(self, tables: list[_Indexed]) -> list[Candidates]:
        """The indexed parts' candidates: routed when there are several IVF tables (or
        ``probes`` was given), else each table searched by Lance."""
        probes = self.probes
        routable = [t for t in tables if t.centroids is not None]
        least = 1 if self.params.probes is not None else 2
        if probes is None or len(routable) < least:
            return self.each_by_lance(tables)
        picked = route(
            [t.centroids for t in routable if t.centroids is not None],
            self.vector,
            self.metric,
            probes,
        )
        clusters = {id(t): c for t, c in zip(routable, picked, strict=True)}
        for t in routable:
            if not t.skippable and not len(clusters[id(t)]):
                # never skipped: its nearest cluster holds every row nearer the query than
                # to another of its centroids
                nearest = np.argmin(distance(t.centroids, self.vector, self.metric))  # type: ignore[arg-type]
                clusters[id(t)] = np.array([nearest])
        others = [t for t in tables if t.centroids is None]
        probed = [t for t in routable if len(clusters[id(t)])]
        self.strategies["routed"] = self.strategies.get("routed", 0) + len(probed)
        by_table = {id(t.table): t for t in probed}
        found = for_each_table(
            self.state,
            [t.table for t in probed],
            lambda s: self.probe(s, len(clusters[id(by_table[id(s)])]), by_table[id(s)]),
        )
        out = self.refined(found) + self.each_by_lance(others)
        every = sum(len(t.centroids) for t in routable if t.centroids is not None)
        if sum(len(c.row_ids) for c in out) < self.k and sum(map(len, clusters.values())) < every:
            return self.each_by_lance(tables)
        return out

    def probe(self, table: SearchTable, nprobes: int, part: _Indexed) -> _Approximate:
        """Lance's search of ``nprobes`` IVF clusters of a table's indexed rows, unrefined:
        its ``k * refine_factor`` best rows by the index's distances."""
        passed = {n: v for n, v in self.params.per_table().items() if n != "refine_factor"}
        nearest: dict[str, Any] = {
            "column": table.sources.get(self.column) or self.column,
            "q": self.vector,
            "metric": self.metric,
            **for_table(self.k * self.refine, passed, table.rows),
            "nprobes": nprobes,
        }
        found = table.ds.to_table(
            columns=[DISTANCE],
            disable_scoring_autoprojection=True,
            with_row_id=True,
            nearest=nearest,
            filter=table.lance_sql,
            prefilter=True,
            fast_search=True,
        )
        return _Approximate(
            table,
            found.column("_rowid").to_numpy().astype(np.uint64),
            found.column(DISTANCE).to_numpy().astype(np.float32),
            exact=part.index_type == "IVF_FLAT",
        )

    def refined(self, found: Sequence[_Approximate]) -> list[Candidates]:
        """The ``k * refine_factor`` best of routed candidates together, by the indexes'
        distances, measured exactly (one read of their vectors per table holding some; an
        ``IVF_FLAT`` index's distances are exact already)."""
        found = [f for f in found if len(f.row_ids)]
        picked = nearest_of([f.distances for f in found], self.k * self.refine)
        chosen = {id(found[i].table): (found[i], rows) for i, rows in picked.items()}

        def measure(table: SearchTable) -> Candidates:
            f, rows = chosen[id(table)]
            if f.exact:
                return Candidates(table, f.row_ids[rows], f.distances[rows])
            ids = np.sort(f.row_ids[rows])
            name = table.sources.get(self.column) or self.column
            taken = take_rows(table.ds, ids.tolist(), [name])
            matrix = matrix_of(taken.column(name), len(self.vector))
            return Candidates(table, ids, distance(matrix, self.vector, self.metric))

        return for_each_table(self.state, [f.table for f, _ in chosen.values()], measure)

    def each_by_lance(self, tables: Sequence[_Indexed]) -> list[Candidates]:
        """Each table's own Lance search of its indexed rows, refined by Lance (exhaustively
        when the index finds fewer than ``k`` of the rows that match)."""
        if tables:
            self.strategies["per_table"] = self.strategies.get("per_table", 0) + len(tables)
        return for_each_table(self.state, [t.table for t in tables], self.lance_search)

    def lance_search(self, table: SearchTable) -> Candidates:
        """One table's Lance search of its indexed rows."""
        passed = {"refine_factor": DEFAULT_REFINE, **self.params.per_table()}
        name = table.sources.get(self.column) or self.column
        nearest: dict[str, Any] = {"column": name, "q": self.vector, "metric": self.metric}
        nearest.update(for_table(self.k, passed, table.rows))
        found = table.ds.to_table(
            columns=[DISTANCE],
            disable_scoring_autoprojection=True,
            with_row_id=True,
            nearest=nearest,
            filter=table.lance_sql,
            prefilter=True,
            fast_search=True,
        )
        if found.num_rows < nearest["k"]:
            # fewer than k from the index (HNSW, a few clusters): its rows measured exactly
            kept = vectors.all_vectors(self.session, table, self.column)
            if table.lance_sql is not None:
                kept = vectors.filtered_vectors(self.session, table, self.column, kept, "all")
            return self._ranked(table, kept)
        ids = found.column("_rowid").to_numpy().astype(np.uint64)
        return Candidates(table, ids, found.column(DISTANCE).to_numpy().astype(np.float32))

    def fetch(self, candidates: Sequence[Candidates]) -> pa.Table:
        """The rows of the ``k`` nearest candidates (a row found twice counted once) in the
        target's columns, with their distances."""
        by_table: dict[int, list[Candidates]] = {}
        for c in candidates:
            if len(c.row_ids):
                by_table.setdefault(id(c.table), []).append(c)
        merged = []
        for parts in by_table.values():
            ids = np.concatenate([p.row_ids for p in parts])
            dist = np.concatenate([p.distances for p in parts])
            order = np.lexsort((ids, dist))
            ids, dist = ids[order], dist[order]
            _, first = np.unique(ids, return_index=True)
            first = np.sort(first)
            merged.append(Candidates(parts[0].table, ids[first], dist[first]))
        picked = [
            (merged[i].table, merged[i].row_ids[rows], merged[i].distances[rows])
            for i, rows in nearest_of([m.distances for m in merged], self.k).items()
        ]
        threads = scan_concurrency(self.state.uri)
        found = fetch_scored(picked, DISTANCE, self.schema, self.target, threads)
        return exact.merged(found, self.target, self.k)


@dataclass(frozen=True)
class _Approximate:
    """A routed table's best indexed rows by its index's distances (``exact``: they are)."""

    table: SearchTable
    row_ids: np.ndarray
    distances: np.ndarray
    exact: bool
