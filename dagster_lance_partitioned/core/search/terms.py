"""The terms of a partition table's text column held in memory: per token, the documents that
hold it and how often, and each document's length, so that a full-text query is scored here
with BM25 exactly as Lance scores it from the table's index.

Lance answers a full-text search of a small table in about half a millisecond, and a query is
one search per partition and token (see :mod:`.text`): over many small partitions that is most
of a query's time. A table version never changes, so its terms are kept per process, bounded in
bytes. Building them tokenizes every document of the table once (about 4 microseconds a
document), so an indexed table gets them only when it is searched again (a one-off search does
not pay for them), only when it has at most :data:`TERMS_CACHE_DOCS` documents, and a query
builds at most :data:`TERMS_BUILD_DOCS` documents' worth; the rest keep Lance's searches. A
table without the index is read and tokenized by every query anyway: its terms are kept when
they fit.

Scores equal Lance's only where Lance scores with the table's current statistics: a table with
deleted rows (its index keeps the statistics it was built on) or with rows its index does not
cover is left to Lance."""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import lance
import numpy as np
import pyarrow as pa

from ..lru import Lru, Sightings
from .declaration import IndexDeclaration
from .memory import share

K1 = 1.2  # Lance's BM25 parameters
B = 0.75
TERMS_CACHE_BYTES = share(0.25)  # terms kept per process at most (256 MiB by default)
TERMS_CACHE_DOCS = 65_536  # indexed tables up to this many documents
TERMS_BUILD_DOCS = 32_768  # documents of indexed tables one query tokenizes at most
_CHUNK = 4096  # documents tokenized in one call
# a word no text holds, between documents tokenized together (checked: see _token_lists)
_BREAK = "zqxjdocbreakzqxj"

Postings = tuple[np.ndarray, np.ndarray]  # (row ids, BM25 contributions)


def idf(docs: int, matching: int) -> float:
    """BM25's inverse document frequency, as Lance computes it."""
    return math.log(1.0 + (docs - matching + 0.5) / (matching + 0.5))


@dataclass(frozen=True)
class TableTerms:
    """One table version's documents (row ids, lengths in tokens) and, for each token, the
    positions of the documents holding it with the token's count in each."""

    row_ids: np.ndarray  # uint64, one per document
    lengths: np.ndarray  # float64 tokens per document
    vocabulary: dict[str, int]  # token -> its slice of ``documents`` / ``counts``
    starts: np.ndarray  # int64: token i's documents are documents[starts[i]:starts[i + 1]]
    documents: np.ndarray  # int32 document positions, grouped by token
    counts: np.ndarray  # float64 occurrences of the token in each of them
    average: float  # the average document length (1 when no document holds a token)

    @property
    def docs(self) -> int:
        return len(self.row_ids)

    @property
    def nbytes(self) -> int:
        arrays = (self.row_ids, self.lengths, self.starts, self.documents, self.counts)
        return sum(a.nbytes for a in arrays) + 100 * len(self.vocabulary)

    def postings(self, token: str) -> Postings:
        """The documents holding ``token`` with its BM25 contribution to each, under this
        table's statistics (document count, average length)."""
        i = self.vocabulary.get(token)
        if i is None:
            return np.zeros(0, np.uint64), np.zeros(0, np.float64)
        lo, hi = int(self.starts[i]), int(self.starts[i + 1])
        documents, tf = self.documents[lo:hi], self.counts[lo:hi]
        norm = K1 * (1 - B + B * self.lengths[documents] / self.average)
        scores = idf(self.docs, hi - lo) * tf * (K1 + 1) / (tf + norm)
        return self.row_ids[documents], scores


def read_terms(ds: lance.LanceDataset, column: str, decl: IndexDeclaration) -> TableTerms:
    """The terms of ``column`` in a table version, its documents tokenized as the index
    ``decl`` tokenizes them."""
    table = ds.to_table(columns=[column], with_row_id=True)
    texts = table.column(column).to_pylist()
    lists = _token_lists(texts, decl)
    lengths = np.fromiter((len(t) for t in lists), dtype=np.int64, count=len(lists))
    flat = [token for tokens in lists for token in tokens]
    if flat:
        encoded = pa.array(flat, pa.string()).dictionary_encode()
        token_ids = encoded.indices.to_numpy().astype(np.int64)
        names = encoded.dictionary.to_pylist()
    else:
        token_ids, names = np.zeros(0, np.int64), []
    owner = np.repeat(np.arange(len(lists), dtype=np.int64), lengths)
    pairs, counts = np.unique(token_ids * max(len(lists), 1) + owner, return_counts=True)
    tokens_of, documents = np.divmod(pairs, max(len(lists), 1))
    starts = np.searchsorted(tokens_of, np.arange(len(names) + 1)).astype(np.int64)
    total = float(lengths.sum())
    return TableTerms(
        table.column("_rowid").to_numpy().astype(np.uint64),
        lengths.astype(np.float64),
        {name: i for i, name in enumerate(names)},
        starts,
        documents.astype(np.int32),
        counts.astype(np.float64),
        total / len(lists) if total else 1.0,
    )


def _token_lists(texts: Sequence[str | None], decl: IndexDeclaration) -> list[list[str]]:
    """The tokens of each text under the index's tokenizer.

    Texts are tokenized a few thousand at a time, joined by a word none of them holds; when
    the tokenizer does not keep that word as one token of its own (n-grams, say), or a text
    holds it, they are tokenized one by one."""
    options = decl.tokenizer()
    alone = [t.text for t in lance.tokenize(_BREAK, **options)]
    out: list[list[str]] = []
    for start in range(0, len(texts), _CHUNK):
        chunk = texts[start : start + _CHUNK]
        lists = _joined(chunk, alone, options) if len(alone) == 1 else None
        if lists is None:
            lists = [[t.text for t in lance.tokenize(x, **options)] if x else [] for x in chunk]
        out.extend(lists)
    return out


def _joined(
    chunk: Sequence[str | None], alone: list[str], options: dict[str, Any]
) -> list[list[str]] | None:
    """``chunk`` tokenized in one call (None: the separating word is not a clean break)."""
    if any(x and _BREAK in x.lower() for x in chunk):
        return None
    separator = f" \n {_BREAK} \n "
    found = [t.text for t in lance.tokenize(separator.join(x or "" for x in chunk), **options)]
    lists: list[list[str]] = [[]]
    for token in found:
        if token == alone[0]:
            lists.append([])
        else:
            lists[-1].append(token)
    return lists if len(lists) == len(chunk) else None


# (table version, column, tokenizer) -> its terms; and the table versions searched once already
_terms: Lru[TableTerms] = Lru(TERMS_CACHE_BYTES, weight=lambda t: t.nbytes)
_searched_before = Sightings(16_384)


class TermsSource:
    """The terms one query scores from, for the full-text index ``decl`` (thread-safe): kept
    ones, and those it may still build (``budget``: documents of indexed tables)."""

    def __init__(self, decl: IndexDeclaration, budget: int | None = None) -> None:
        self.decl = decl
        self.left = TERMS_BUILD_DOCS if budget is None else budget
        self._tokenizer = json.dumps(decl.tokenizer(), sort_keys=True, default=str)
        self._lock = threading.Lock()

    def _key(self, ds: lance.LanceDataset, column: str) -> tuple[object, ...]:
        return (ds.uri, ds.version, column, self._tokenizer)

    def _spend(self, docs: int) -> bool:
        with self._lock:
            if docs > self.left:
                return False
            self.left -= docs
            return True

    def indexed(
        self, ds: lance.LanceDataset, column: str, docs: int, indexed_rows: int
    ) -> TableTerms | None:
        """The terms of a table carrying the index (``docs`` rows, ``indexed_rows`` of them
        indexed), or None when Lance searches it (see the module doc)."""
        key = self._key(ds, column)
        hit = _terms.get(key)
        if hit is not None:
            return hit
        if docs > TERMS_CACHE_DOCS or indexed_rows != docs or _terms.size <= 0:
            return None
        if not _searched_before.again(key):
            return None
        if any(f.metadata.deletion_file is not None for f in ds.get_fragments()):
            return None
        if not self._spend(docs):
            return None
        terms = read_terms(ds, column, self.decl)
        _terms.put(key, terms)
        return terms

    def unindexed(self, ds: lance.LanceDataset, column: str) -> TableTerms:
        """The terms of a table without the index (read and kept when they fit)."""
        key = self._key(ds, column)
        hit = _terms.get(key)
        if hit is None:
            hit = read_terms(ds, column, self.decl)
            _terms.put(key, hit)
        return hit


def clear() -> None:
    """Forget the terms kept (and which tables were searched)."""
    _terms.clear()
    _searched_before.clear()
