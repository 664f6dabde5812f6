"""Vector search across partitions: each searched table is answered by one named strategy,
every one of which returns the same rows as the reference (:mod:`.exact`) for the rows it
covers, and the candidates of all tables, each with its exact distance, are merged into one
global top k (ties by plan order, then row id).

- ``exact`` (:mod:`.exact`): every row read and measured; for ``use_index=False`` and tables
  Lance cannot search as they are.
- ``pooled`` (:mod:`.pooled`): the tables without a vector index on the column, ranked
  together from one matrix of their vectors kept in the search session (one screening
  product, :func:`.distances.nearest_rows`); a filter inside them is evaluated once over the
  pool from the columns it reads, kept beside the vectors, and the rows returned come from
  the pool's kept columns.
- ``in_memory``: rows of an indexed table measured from their vectors kept in the session:
  the rows its index does not cover (appended since it was built), the rows recorded as
  outliers of the index (:mod:`.ivf`), and every matching row when the vectors of the rows
  the table's filter keeps are few (:meth:`VectorQuery.gathered`; the rows found by
  Lance, with the table's scalar indexes; these
  are gathered with the pooled tables' matching rows in one matrix per filter and ranked
  with them).
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

from ..concurrency import parallel_map
from ..expr.filters import filter_columns
from ..manifest.state import NamespaceState
from ..read.scan import _guarded, scan_concurrency
from ..schema.arrow_json import strip_field_ids
from ..tuning import tuning
from . import exact, vectors
from .distances import Vectors, distance, matrix_of, nearest_of, nearest_rows
from .ivf import DEFAULT_PROBES, ivf_of, route
from .params import VectorParams, for_table
from .pooled import (
    Matched,
    Pool,
    pool_of,
    pooled_matches,
    pooled_nearest,
    pooled_rows,
)
from .session import SearchSession
from .tables import (
    DISTANCE,
    SearchTable,
    for_each_table,
    matching_ids,
    rows_by_id,
    take_rows,
)

# candidates re-ranked by exact distance per row kept, unless refine_factor is given
DEFAULT_REFINE = 10
_PLACE = "__dlp_place"  # while rows are merged: the plan position of their table


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
    places: dict[int, int] = field(default_factory=dict)  # id(table) -> its place in the plan
    # the pooled tables' nearest rows: pool, its tables, positions and each one's table
    from_pool: tuple[Pool, Sequence[SearchTable], np.ndarray, np.ndarray] | None = None

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
        self.places = {id(t): i for i, t in enumerate(tables)}
        slow = [t for t in tables if not t.pushable]
        fast = [t for t in tables if t.pushable]
        flat = [t for t in fast if t.index_on(self.column) is None]
        with_index = [t for t in fast if t.index_on(self.column) is not None]
        few = self.gathered(with_index)
        candidates = self.pooled(flat, few)
        chosen = {id(t) for t in few}
        searched = [t for t in with_index if id(t) not in chosen]
        # each table's IVF facts, read from its index statistics unless kept (milliseconds a
        # table, read as a scan reads tables)
        for_each_table(self.state, searched, lambda t: ivf_of(self.session, t, self.column))
        indexed: list[_Indexed] = []
        for table in searched:
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

    def gathered(self, indexed: Sequence[SearchTable]) -> list[SearchTable]:
        """The indexed tables whose filtered rows are measured exactly, in plan order: those
        whose filter keeps rows (found by Lance with the table's scalar indexes) whose vectors
        weigh at most ``Tuning.few_match_bytes``, the lightest first while together they weigh
        at most a quarter of the session's budget (at least ``few_match_bytes``): the rows
        gathered for one filter are kept in the session."""
        limit = tuning().few_match_bytes
        cap = max(limit, self.session.budget_bytes // 4)
        weighed = sorted(
            (len(matching_ids(self.session, t)) * len(self.vector) * 4, self.places[id(t)], t)
            for t in indexed
            if t.lance_sql is not None
        )
        chosen: set[int] = set()
        total = 0
        for weight, _, table in weighed:
            if weight > limit or total + weight > cap:
                break
            chosen.add(id(table))
            total += weight
        return [t for t in indexed if id(t) in chosen]

    def pooled(
        self, tables: Sequence[SearchTable], few: Sequence[SearchTable] = ()
    ) -> list[Candidates]:
        """The candidates of the tables without a vector index, ranked together from their
        pool (:mod:`.pooled`), and of the indexed tables ``few`` whose filter keeps few
        rows: with a filter, the rows it keeps in all of them are gathered in one matrix,
        kept per filter (:class:`.pooled.Matched`), and ranked at once."""
        if not tables and not few:
            return []
        if tables:
            self.strategies["pooled"] = len(tables)
        if few:
            self.strategies["in_memory"] = self.strategies.get("in_memory", 0) + len(few)
        session, state = self.session, self.state
        sql = next((t.sql for t in [*tables, *few] if t.sql is not None), None)
        plain = strip_field_ids(self.schema)
        also = [f.name for f in self.target if f.name != self.column]
        if sql is not None and tables:
            also.extend(filter_columns(sql, plain))
        pool = pool_of(session, state, tables, self.column, also) if tables else None
        if sql is None:
            assert pool is not None  # indexed tables without a filter are not "few"
            positions, dist = pooled_nearest(pool, self.vector, self.k, self.metric)
            owners = pool.owners(positions)
            self.from_pool = (pool, tables, positions, owners)
            row_ids = pool.vectors.row_ids[positions]
            return [
                Candidates(tables[i], row_ids[owners == i], dist[owners == i])
                for i in sorted(set(owners.tolist()))
            ]

        def gather() -> Matched:
            parts = []
            if pool is not None:
                among = pooled_matches(session, state, pool, tables, sql, plain)
                if among is None:  # its columns do not fit in the session: Lance finds them
                    among = self.matches_by_table(pool, tables)
                subset = Vectors(
                    pool.vectors.matrix[among],
                    pool.vectors.row_ids[among],
                    pool.vectors.norms[among],
                    pool.vectors.largest,
                )
                parts.append((subset, pool.owners(among), among))
            for j, table in enumerate(few):
                found = vectors.matching_vectors(table, self.column)
                n = len(found.row_ids)
                parts.append(
                    (found, np.full(n, len(tables) + j, np.int64), np.full(n, -1, np.int64))
                )
            return Matched.of(parts, len(self.vector))

        key = (
            self.column,
            sql,
            None if pool is None else pool.key,
            tuple(t.version_key for t in few),
            tuple(t.lance_sql is not None for t in few),
        )
        matched = session.keep("matched", key, gather, lambda m: m.nbytes)
        positions, dist = nearest_rows(matched.vectors, self.vector, self.k, self.metric)
        owners = matched.tables[positions]
        row_ids = matched.vectors.row_ids[positions]
        in_pool = matched.in_pool[positions] >= 0
        if pool is not None and in_pool.any():
            self.from_pool = (
                pool,
                tables,
                matched.in_pool[positions][in_pool],
                owners[in_pool],
            )
        every = [*tables, *few]
        return [
            Candidates(every[i], row_ids[owners == i], dist[owners == i])
            for i in sorted(set(owners.tolist()))
        ]

    def matches_by_table(self, pool: Pool, tables: Sequence[SearchTable]) -> np.ndarray:
        """Positions among the pool's vector rows of the rows each table's filter keeps, as
        Lance finds them in each table."""
        keep = np.ones(pool.rows, dtype=bool)
        for i, table in enumerate(tables):
            if table.lance_sql is None:
                continue
            lo, hi = int(pool.starts[i]), int(pool.starts[i + 1])
            keep[lo:hi] = np.isin(pool.row_ids[lo:hi], matching_ids(self.session, table))
        return np.flatnonzero(keep[pool.valid]).astype(np.int64)

    def in_memory(self, table: SearchTable, out: list[Candidates]) -> _Indexed | None:
        """What of an indexed ``table`` is measured from kept vectors (added to ``out``); the
        part left to its index, if any."""
        session, column = self.session, self.column
        filtered = table.lance_sql is not None
        found = table.index_on(column)
        assert found is not None  # tables without an index are pooled
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
        found = _indexed_search(table, nearest)
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
        found = _indexed_search(table, nearest)
        if found.num_rows < nearest["k"]:
            # fewer than k from the index (HNSW, a few clusters): its rows measured exactly
            kept = vectors.all_vectors(self.session, table, self.column)
            if table.lance_sql is not None:
                kept = vectors.filtered_vectors(self.session, table, self.column, kept, "all")
            return self._ranked(table, kept)
        ids = found.column("_rowid").to_numpy().astype(np.uint64)
        return Candidates(table, ids, found.column(DISTANCE).to_numpy().astype(np.float32))

    def fetch(self, candidates: Sequence[Candidates]) -> pa.Table:
        """The rows of the ``k`` nearest candidates (a row found twice counted once; ties by
        table, then row id) in the target's columns, with their distances: the pooled
        tables' rows from the pool's kept columns, the others' read by row id."""
        parts = [c for c in candidates if len(c.row_ids)]
        out_schema = self.target.append(pa.field(DISTANCE, pa.float32()))
        if not parts:
            return out_schema.empty_table()
        place = np.concatenate(
            [np.full(len(c.row_ids), self.places[id(c.table)], np.int64) for c in parts]
        )
        ids = np.concatenate([c.row_ids for c in parts]).astype(np.uint64)
        dist = np.concatenate([c.distances for c in parts]).astype(np.float32)
        order = np.lexsort((ids, place, dist))
        place, ids, dist = place[order], ids[order], dist[order]
        first = np.ones(len(ids), dtype=bool)  # a row's nearest sighting
        seen = np.lexsort((ids, place))
        same = (place[seen][1:] == place[seen][:-1]) & (ids[seen][1:] == ids[seen][:-1])
        first[seen[1:][same]] = False
        place, ids, dist = place[first][: self.k], ids[first][: self.k], dist[first][: self.k]
        tables = {self.places[id(c.table)]: c.table for c in parts}
        found = []
        pooled = self.rows_from_pool(place, ids, dist)
        if pooled is not None:
            found.append(pooled[0])
            rest = ~pooled[1]
            place, ids, dist = place[rest], ids[rest], dist[rest]

        def read(p: int) -> pa.Table:
            mine = place == p
            rows = rows_by_id(tables[p], ids[mine].tolist(), self.schema, self.target)
            by_id = dict(zip(ids[mine].tolist(), dist[mine].tolist(), strict=True))
            got = rows.column("_rowid").to_pylist()
            rows = rows.append_column(DISTANCE, pa.array([by_id[r] for r in got], pa.float32()))
            return rows.append_column(_PLACE, pa.array(np.full(len(got), p, np.int64)))

        threads = scan_concurrency(self.state.uri)
        places = sorted(set(place.tolist()))
        found.extend(
            parallel_map(lambda p: _guarded(tables[p].task, lambda: read(p)), places, threads)
        )
        together = pa.concat_tables(found)
        order = np.lexsort(
            (
                together.column("_rowid").to_numpy(),
                together.column(_PLACE).to_numpy(),
                together.column(DISTANCE).to_numpy(),
            )
        )[: self.k]
        return together.take(pa.array(order)).select([*self.target.names, DISTANCE])

    def rows_from_pool(
        self, place: np.ndarray, ids: np.ndarray, dist: np.ndarray
    ) -> tuple[pa.Table, np.ndarray] | None:
        """The picked rows (``place``: plan position of their table) that came from the
        pool, read from its kept columns, and which of the picked they are (None: none, or
        the session cannot keep a column they need)."""
        if self.from_pool is None:
            return None
        pool, tables, positions, owners = self.from_pool
        at = {
            (self.places[id(tables[o])], int(r)): int(p)
            for o, r, p in zip(owners, pool.vectors.row_ids[positions], positions, strict=True)
        }
        mine = np.array([(int(p), int(r)) in at for p, r in zip(place, ids, strict=True)], bool)
        if not mine.any():
            return None
        wanted = np.array(
            [at[(int(p), int(r))] for p, r in zip(place[mine], ids[mine], strict=True)]
        )
        rows = pooled_rows(self.session, self.state, pool, tables, wanted, self.target, self.column)
        if rows is None:
            return None
        rows = rows.append_column("_rowid", pa.array(ids[mine], pa.uint64()))
        rows = rows.append_column(DISTANCE, pa.array(dist[mine], pa.float32()))
        return rows.append_column(_PLACE, pa.array(place[mine], pa.int64())), mine


@dataclass(frozen=True)
class _Approximate:
    """A routed table's best indexed rows by its index's distances (``exact``: they are)."""

    table: SearchTable
    row_ids: np.ndarray
    distances: np.ndarray
    exact: bool


def _indexed_search(table: SearchTable, nearest: dict[str, Any]) -> pa.Table:
    """Lance's search of ``table``'s indexed rows its filter keeps: row ids and distances."""
    return table.ds.to_table(
        columns=[DISTANCE],
        disable_scoring_autoprojection=True,
        with_row_id=True,
        nearest=nearest,
        filter=table.lance_sql,
        prefilter=True,
        fast_search=True,
    )
