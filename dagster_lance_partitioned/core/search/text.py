"""Full-text search across partitions, scored as one dataset holding the namespace version's
rows would score it: BM25 with the statistics of every partition table of that version (see
:mod:`.bm25`), whatever the query's filter, so a row's score depends on neither the filter
nor how the rows are partitioned.

Each table version's terms (its documents tokenized as the index tokenizes them) are kept in
the search session; a query sums the statistics of every table for its tokens, scores the
rows of the tables the filter keeps, restricted to the rows the filter keeps, and reads the k
best. Scores are ranked in float32, ties by partition order then row id.

A table that does not carry the index yet (a declaration not built there) is tokenized alike:
its rows are scored the same. A namespace without a full-text index refuses text queries
(:class:`SearchQueryError` naming ``ns.create_index(column, 'INVERTED')``): the index's
declaration is what says how its texts are tokenized."""

from __future__ import annotations

import json

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import SearchQueryError
from ..expr.filters import FilterLike
from ..manifest.state import NamespaceState
from ..read.planning import ScanTask, plan_namespace
from ..read.scan import scan_concurrency
from .bm25 import TableTerms, corpus_of, read_terms
from .declaration import IndexDeclaration
from .session import SearchSession
from .tables import SCORE, Opener, SearchTable, fetch_scored, for_each_task, matching_ids


def tokens(query: str, decl: IndexDeclaration) -> list[str]:
    """The tokens of ``query`` under the index's tokenizer, in order (repeated ones
    repeated: each counts, as in Lance)."""
    try:
        found = lance.tokenize(query, **decl.tokenizer())
    except (TypeError, ValueError) as e:
        raise SearchQueryError(f"cannot tokenize the query for index {decl.name!r}: {e}") from None
    return [t.text for t in found]


def table_terms(
    session: SearchSession, table: SearchTable, decl: IndexDeclaration
) -> TableTerms | None:
    """The terms of the indexed column in a table version (None: it does not hold it)."""
    column = table.sources.get(decl.column)
    if column is None or table.rows == 0:
        return None
    tokenizer = json.dumps(decl.tokenizer(), sort_keys=True, default=str)
    key = (*table.version_key, column, tokenizer)
    return session.keep(
        "terms", key, lambda: read_terms(table.ds, column, decl), lambda t: t.nbytes
    )


def search_text(
    state: NamespaceState,
    session: SearchSession,
    query: str,
    decl: IndexDeclaration,
    k: int,
    filter: FilterLike,
    target: pa.Schema,
) -> pa.Table:
    """The ``k`` rows scoring best for ``query`` under ``decl`` (see the module doc)."""
    out_schema = target.append(pa.field(SCORE, pa.float32()))
    words = tokens(query, decl)
    if not words:
        return out_schema.empty_table()
    schema = state.schema_with_ids
    opts = state.storage_options
    plan = plan_namespace(state, filter, check_links=False)  # checked when read
    whole = plan_namespace(state, None, check_links=False) if filter is not None else plan

    unfiltered = Opener(session, schema, None, opts)

    def every_table(task: ScanTask) -> tuple[tuple[str, int], TableTerms | None]:
        table = unfiltered(task)
        return table.version_key, table_terms(session, table, decl)

    terms = dict(for_each_task(state, whole.tasks, every_table))
    corpus = corpus_of([t for t in terms.values() if t is not None], words)
    searched = for_each_task(state, plan.tasks, unfiltered.under(plan.residual_filter))
    owners, ids_parts, score_parts = [], [], []
    for i, table in enumerate(searched):
        found = terms.get(table.version_key)
        if found is None:
            continue
        allowed = matching_ids(session, table) if table.lance_sql is not None else None
        for word in words:
            ids, scores = found.scored(word, corpus)
            if allowed is not None and len(ids):
                keep = np.isin(ids, allowed)
                ids, scores = ids[keep], scores[keep]
            if not len(ids):
                continue
            owners.append(np.full(len(ids), i, dtype=np.int64))
            ids_parts.append(ids)
            score_parts.append(scores)
    if not ids_parts:
        return out_schema.empty_table()
    owner, row_ids = np.concatenate(owners), np.concatenate(ids_parts)
    order = np.lexsort((row_ids, owner))  # stable: a row's tokens stay in query order
    owner, row_ids, summed = owner[order], row_ids[order], np.concatenate(score_parts)[order]
    first = np.ones(len(owner), dtype=bool)
    first[1:] = (owner[1:] != owner[:-1]) | (row_ids[1:] != row_ids[:-1])
    starts = np.flatnonzero(first)
    ranked = (row_ids[starts], np.add.reduceat(summed, starts), owner[starts])
    threads = scan_concurrency(state.uri)
    return _top(searched, ranked, k, schema, target, out_schema, threads)


def _top(
    searched: list[SearchTable],
    ranked: tuple[np.ndarray, np.ndarray, np.ndarray],
    k: int,
    schema: pa.Schema,
    target: pa.Schema,
    out_schema: pa.Schema,
    threads: int,
) -> pa.Table:
    """The ``k`` best-scoring rows that pass each table's filter (``ranked``: row ids,
    scores and the table of each), read in rounds from the best down while a filter only
    DataFusion evaluates drops some (``threads`` tables at a time)."""
    ids, scores, owner = ranked
    scores = scores.astype(np.float32)
    order = np.lexsort((ids, owner, -scores))  # best first; ties by table, then row id
    kept: list[pa.Table] = []
    have = 0
    start = 0
    size = k
    filtered = any(t.sql is not None and t.lance_sql is None for t in searched)
    while start < len(order) and have < k:
        chunk = order[start : start + size]
        start += len(chunk)
        picked = [
            (searched[i], ids[mine], scores[mine])
            for i in sorted(set(owner[chunk].tolist()))
            for mine in [chunk[owner[chunk] == i]]
        ]
        tables = fetch_scored(picked, SCORE, schema, target, threads)
        kept.extend(tables)
        have += sum(t.num_rows for t in tables)
        if not filtered:
            break
        size *= 4
    merged = pa.concat_tables(kept) if kept else out_schema.empty_table()
    merged = merged.cast(out_schema)
    order_out = pc.sort_indices(merged, sort_keys=[(SCORE, "descending")])
    return merged.take(order_out[:k])
