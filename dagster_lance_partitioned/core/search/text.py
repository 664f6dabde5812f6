"""Full-text search across partitions with scores comparable between them.

Lance scores a document with BM25 against its own table's statistics: a term's inverse
document frequency (idf) in a small partition differs from the namespace's, so per-partition
scores do not merge. Here the query is tokenized as the index tokenizes text
(``lance.tokenize`` with the declaration's tokenizer options), and each partition is searched
once per query token: Lance returns every matching row with that token's BM25 contribution
and thereby the token's document frequency in the partition. Each contribution is rescaled
from the partition's idf to the idf of all searched partitions together (their documents and
the token's document frequency summed), and a row's score is the sum over the query's tokens:
the BM25 score a single table holding the searched partitions would give, except that length
normalisation uses each partition's own average document length. Per-token results of a
table version are cached (a version never changes). After rows are deleted, Lance keeps
scoring with the statistics its index was built on, so scores drift by a few percent until
``optimize_indexes`` rebuilds those indexes.

Small tables searched again, and tables without the index (written before the declaration
reached their writer), are scored here from their terms held in memory with the same formula
(Lance's k1 = 1.2, b = 0.75), their documents tokenized alike: see :mod:`.terms`. Scores
are ranked as they are returned, in float32, ties (equal scores) by partition and row id.
Lance computes in float32 as well: a row of a table it scored may differ in the last bit from
the same row scored here, so rows tied to that precision may come in another order the first
time a table is searched than later."""

from __future__ import annotations

from dataclasses import dataclass

import lance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from lance.query import MatchQuery

from ..errors import SearchQueryError
from ..lru import Lru
from ..manifest.state import NamespaceState
from ..read.filters import FilterLike
from ..read.planning import ScanTask
from ..read.scan import scan_concurrency
from .build import describe
from .declaration import IndexDeclaration
from .searched import SCORE, Searched, fetch_scored, for_each_partition, open_searched
from .terms import Postings, TableTerms, TermsSource, idf

POSTINGS_CACHED = 4096  # (table version, token) results kept per process


def tokens(query: str, decl: IndexDeclaration) -> list[str]:
    """The distinct tokens of ``query`` under the index's tokenizer, in order."""
    try:
        found = lance.tokenize(query, **decl.tokenizer())
    except (TypeError, ValueError) as e:
        raise SearchQueryError(f"cannot tokenize the query for index {decl.name!r}: {e}") from None
    return list(dict.fromkeys(t.text for t in found))


@dataclass
class _Partition:
    """What one searched partition contributes: its documents and, per token, the matching
    rows with their BM25 contributions under the partition's statistics."""

    searched: Searched
    docs: int
    postings: dict[str, Postings]


# (table version, column, tokenizer, token) -> (row ids, scores)
_postings: Lru[Postings] = Lru(POSTINGS_CACHED)


def _indexed_postings(
    searched: Searched, column: str, decl: IndexDeclaration, words: list[str]
) -> dict[str, Postings]:
    """Per-token BM25 contributions from Lance's searches of the table's index."""
    ds = searched.ds
    out = {}
    for word in words:
        key = (ds.uri, ds.version, column, decl.name, decl.to_json(), word)
        hit = _postings.get(key)
        if hit is None:
            found = ds.to_table(
                full_text_query=MatchQuery(word, column),
                columns=[SCORE],
                with_row_id=True,
                limit=None,
            )
            hit = (
                found.column("_rowid").to_numpy().astype(np.uint64),
                found.column(SCORE).to_numpy().astype(np.float64),
            )
            _postings.put(key, hit)
        out[word] = hit
    return out


def search_text(
    state: NamespaceState,
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
    plan = state.plan_scan(filter)
    source = TermsSource(decl)

    def one(task: ScanTask) -> _Partition:
        searched = open_searched(task, schema, plan.residual_filter, state.storage_options)
        column = searched.sources.get(decl.column)
        docs, indexes = describe(searched.ds)
        if column is None or docs == 0:
            return _Partition(searched, docs, {})
        index = indexes.get(decl.name)
        terms: TableTerms | None
        if index is None:
            terms = source.unindexed(searched.ds, column)
        else:
            terms = source.indexed(searched.ds, column, docs, int(index.num_rows_indexed))
        if terms is None:
            return _Partition(searched, docs, _indexed_postings(searched, column, decl, words))
        return _Partition(searched, docs, {w: terms.postings(w) for w in words})

    parts = for_each_partition(state, plan.tasks, one, quick=True)
    docs = sum(p.docs for p in parts)
    matching = {w: sum(len(p.postings.get(w, ((),))[0]) for p in parts) for w in words}
    # every (partition, token) contribution rescaled to the searched partitions' idf, then
    # summed per row
    owners, ids_parts, score_parts = [], [], []
    for i, part in enumerate(parts):
        for word, (ids, scores) in part.postings.items():
            if not len(ids):
                continue
            local = idf(part.docs, len(ids))
            scale = idf(docs, matching[word]) / local if local > 0 else 0.0
            owners.append(np.full(len(ids), i, dtype=np.int64))
            ids_parts.append(ids)
            score_parts.append(scores * scale)
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
    return _top(parts, ranked, k, schema, target, out_schema, threads)


def _top(
    parts: list[_Partition],
    ranked: tuple[np.ndarray, np.ndarray, np.ndarray],
    k: int,
    schema: pa.Schema,
    target: pa.Schema,
    out_schema: pa.Schema,
    threads: int,
) -> pa.Table:
    """The ``k`` best-scoring rows that pass each partition's filter (``ranked``: row ids,
    scores and the partition of each), fetched in rounds from the best candidates down
    (``threads`` tables at a time)."""
    ids, scores, owner = ranked
    # ranked as returned: in float32, so that rows shown with equal scores are ties
    scores = scores.astype(np.float32)
    # best first; ties by partition order, then row id (deterministic)
    order = np.lexsort((ids, owner, -scores))
    kept: list[pa.Table] = []
    have = 0
    start = 0
    size = k
    filtered = any(p.searched.sql for p in parts)
    while start < len(order) and have < k:
        chunk = order[start : start + size]
        start += len(chunk)
        picked = [
            (parts[i].searched, ids[mine], scores[mine])
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
