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

A partition table without the index (written before the declaration reached its writer) is
scored exhaustively with the same formula (Lance's k1 = 1.2, b = 0.75), its documents
tokenized alike."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

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
from .build import describe
from .declaration import IndexDeclaration
from .searched import SCORE, Searched, for_each_partition, open_searched, rows_by_id

K1 = 1.2
B = 0.75
POSTINGS_CACHED = 4096  # (table version, token) results kept per process


def idf(docs: int, matching: int) -> float:
    """BM25's inverse document frequency, as Lance computes it."""
    return math.log(1.0 + (docs - matching + 0.5) / (matching + 0.5))


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
    postings: dict[str, tuple[np.ndarray, np.ndarray]]


# (table version, column, tokenizer, token) -> (row ids, scores)
_postings: Lru[tuple[np.ndarray, np.ndarray]] = Lru(POSTINGS_CACHED)


def _indexed_postings(
    searched: Searched, column: str, decl: IndexDeclaration, words: list[str]
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
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


def _flat_postings(
    searched: Searched, column: str, decl: IndexDeclaration, words: list[str]
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per-token BM25 contributions of every row of a table without the index."""
    table = searched.ds.to_table(columns=[column], with_row_id=True)
    ids = table.column("_rowid").to_numpy().astype(np.uint64)
    options = decl.tokenizer()
    counts: list[dict[str, int]] = []
    lengths = np.zeros(len(ids), dtype=np.float64)
    for i, text in enumerate(table.column(column).to_pylist()):
        found = [t.text for t in lance.tokenize(text, **options)] if text else []
        lengths[i] = len(found)
        tally: dict[str, int] = {}
        for token in found:
            tally[token] = tally.get(token, 0) + 1
        counts.append(tally)
    docs = len(ids)
    average = float(lengths.mean()) if docs and lengths.sum() else 1.0
    out = {}
    for word in words:
        rows = np.array([i for i, c in enumerate(counts) if word in c], dtype=np.int64)
        if not len(rows):
            out[word] = (np.zeros(0, np.uint64), np.zeros(0, np.float64))
            continue
        tf = np.array([counts[i][word] for i in rows], dtype=np.float64)
        norm = K1 * (1 - B + B * lengths[rows] / average)
        scores = idf(docs, len(rows)) * tf * (K1 + 1) / (tf + norm)
        out[word] = (ids[rows], scores)
    return out


def search_text(
    state: NamespaceState,
    query: str,
    decl: IndexDeclaration,
    k: int,
    filter: FilterLike,
    target: pa.Schema,
    params: Mapping[str, Any],
) -> pa.Table:
    """The ``k`` rows scoring best for ``query`` under ``decl`` (see the module doc)."""
    if params:
        raise SearchQueryError(
            f"unknown full-text search parameter(s) {sorted(params)}; none are taken"
        )
    out_schema = target.append(pa.field(SCORE, pa.float32()))
    words = tokens(query, decl)
    if not words:
        return out_schema.empty_table()
    schema = state.schema_with_ids
    plan = state.plan_scan(filter)

    def one(task: ScanTask) -> _Partition:
        searched = open_searched(task, schema, plan.residual_filter, state.storage_options)
        column = searched.sources.get(decl.column)
        docs, indexes = describe(searched.ds)
        if column is None or docs == 0:
            return _Partition(searched, docs, {})
        if decl.name in indexes:
            postings = _indexed_postings(searched, column, decl, words)
        else:
            postings = _flat_postings(searched, column, decl, words)
        return _Partition(searched, docs, postings)

    parts = for_each_partition(state, plan.tasks, one)
    docs = sum(p.docs for p in parts)
    matching = {w: sum(len(p.postings.get(w, ((),))[0]) for p in parts) for w in words}
    ranked: list[tuple[np.ndarray, np.ndarray, int]] = []  # (row ids, scores, partition)
    for i, part in enumerate(parts):
        ids_parts, score_parts = [], []
        for word, (ids, scores) in part.postings.items():
            if not len(ids):
                continue
            local = idf(part.docs, len(ids))
            scale = idf(docs, matching[word]) / local if local > 0 else 0.0
            ids_parts.append(ids)
            score_parts.append(scores * scale)
        if not ids_parts:
            continue
        all_ids = np.concatenate(ids_parts)
        all_scores = np.concatenate(score_parts)
        unique, inverse = np.unique(all_ids, return_inverse=True)
        summed = np.zeros(len(unique), dtype=np.float64)
        np.add.at(summed, inverse, all_scores)
        ranked.append((unique, summed, i))
    return _top(parts, ranked, k, schema, target, out_schema)


def _top(
    parts: list[_Partition],
    ranked: list[tuple[np.ndarray, np.ndarray, int]],
    k: int,
    schema: pa.Schema,
    target: pa.Schema,
    out_schema: pa.Schema,
) -> pa.Table:
    """The ``k`` best-scoring rows that pass each partition's filter, fetched in rounds from
    the best candidates down."""
    if not ranked:
        return out_schema.empty_table()
    scores = np.concatenate([s for _, s, _ in ranked])
    ids = np.concatenate([r for r, _, _ in ranked])
    owner = np.concatenate([np.full(len(r), i, dtype=np.int64) for r, _, i in ranked])
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
        for i in sorted(set(owner[chunk].tolist())):
            mine = chunk[owner[chunk] == i]
            rows = rows_by_id(parts[i].searched, ids[mine].tolist(), schema, target)
            by_id = dict(zip(ids[mine].tolist(), scores[mine].tolist(), strict=True))
            got = rows.column("_rowid").to_pylist()
            table = rows.drop_columns(["_rowid"]).append_column(
                SCORE, pa.array([by_id[r] for r in got], pa.float32())
            )
            kept.append(table)
            have += table.num_rows
        if not filtered:
            break
        size *= 4
    merged = pa.concat_tables(kept) if kept else out_schema.empty_table()
    merged = merged.cast(out_schema)
    order_out = pc.sort_indices(merged, sort_keys=[(SCORE, "descending")])
    return merged.take(order_out[:k])
