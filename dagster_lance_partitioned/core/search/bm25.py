"""BM25 over a whole namespace version, as Lance scores one dataset: a document's score for a
query is the sum over the query's tokens (a token twice in the query counts twice) of
``idf(t) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / average_length))`` with Lance's
``k1 = 1.2``, ``b = 0.75`` and ``idf(t) = ln(1 + (N - n(t) + 0.5) / (n(t) + 0.5))``, where ``N``
is the number of documents (texts holding at least one token), ``n(t)`` the documents
holding ``t`` and the average length the tokens of all documents over ``N``, every one of
them counted over the whole namespace version whatever the query's filter (one dataset scores
a pre-filtered query with its whole index). Documents are tokenized as the index tokenizes them
(``lance.tokenize`` with the declaration's options).

:class:`TableTerms` holds one table version's terms: per token, the documents that hold it
and how often, and each document's length; :class:`Corpus` sums the statistics of the
tables of a namespace version.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import lance
import numpy as np
import pyarrow as pa

from ..tuning import tuning
from .declaration import IndexDeclaration

K1 = 1.2  # Lance's BM25 parameters
B = 0.75
# a word no text holds, between documents tokenized together (checked: see _token_lists)
_BREAK = "zqxjdocbreakzqxj"

Postings = tuple[np.ndarray, np.ndarray]  # (row ids, BM25 contributions)


def idf(docs: int, matching: int) -> float:
    """BM25's inverse document frequency, as Lance computes it."""
    return math.log(1.0 + (docs - matching + 0.5) / (matching + 0.5))


@dataclass(frozen=True)
class Corpus:
    """BM25's statistics of a namespace version: documents, their tokens in all, and the
    documents holding each of a query's tokens."""

    docs: int
    tokens: int
    holding: dict[str, int]

    @property
    def average(self) -> float:
        """The average document length (1 with no document)."""
        return self.tokens / self.docs if self.docs else 1.0


@dataclass(frozen=True)
class TableTerms:
    """One table version's documents (those holding a token: row ids, lengths in tokens)
    and, for each token, the positions of the documents holding it with its count in each."""

    row_ids: np.ndarray  # uint64, one per document
    lengths: np.ndarray  # float64 tokens per document
    vocabulary: dict[str, int]  # token -> its slice of ``documents`` / ``counts``
    starts: np.ndarray  # int64: token i's documents are documents[starts[i]:starts[i + 1]]
    documents: np.ndarray  # int32 document positions, grouped by token
    counts: np.ndarray  # float64 occurrences of the token in each of them

    @property
    def docs(self) -> int:
        return len(self.row_ids)

    @property
    def tokens(self) -> int:
        return int(self.lengths.sum())

    @property
    def nbytes(self) -> int:
        arrays = (self.row_ids, self.lengths, self.starts, self.documents, self.counts)
        return sum(a.nbytes for a in arrays) + 100 * len(self.vocabulary)

    def holding(self, token: str) -> int:
        """How many documents hold ``token``."""
        i = self.vocabulary.get(token)
        return 0 if i is None else int(self.starts[i + 1] - self.starts[i])

    def scored(self, token: str, corpus: Corpus) -> Postings:
        """The documents holding ``token`` with its BM25 contribution to each, under the
        ``corpus`` statistics."""
        i = self.vocabulary.get(token)
        if i is None:
            return np.zeros(0, np.uint64), np.zeros(0, np.float64)
        lo, hi = int(self.starts[i]), int(self.starts[i + 1])
        documents, tf = self.documents[lo:hi], self.counts[lo:hi]
        norm = K1 * (1 - B + B * self.lengths[documents] / corpus.average)
        weight = idf(corpus.docs, corpus.holding.get(token, 0))
        return self.row_ids[documents], weight * tf * (K1 + 1) / (tf + norm)


def corpus_of(terms: Sequence[TableTerms], tokens: Sequence[str]) -> Corpus:
    """The statistics of the documents of ``terms`` together, for ``tokens``."""
    return Corpus(
        sum(t.docs for t in terms),
        sum(t.tokens for t in terms),
        {w: sum(t.holding(w) for t in terms) for w in dict.fromkeys(tokens)},
    )


def read_terms(ds: lance.LanceDataset, column: str, decl: IndexDeclaration) -> TableTerms:
    """The terms of ``column`` in a table version, its documents tokenized as the index
    ``decl`` tokenizes them (texts without a token are not documents)."""
    table = ds.to_table(columns=[column], with_row_id=True)
    every = _token_lists(table.column(column).to_pylist(), decl)
    kept = np.flatnonzero(np.fromiter((bool(t) for t in every), dtype=bool, count=len(every)))
    lists = [every[i] for i in kept]
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
    return TableTerms(
        table.column("_rowid").to_numpy().astype(np.uint64)[kept],
        lengths.astype(np.float64),
        {name: i for i, name in enumerate(names)},
        starts,
        documents.astype(np.int32),
        counts.astype(np.float64),
    )


def _token_lists(texts: Sequence[str | None], decl: IndexDeclaration) -> list[list[str]]:
    """The tokens of each text under the index's tokenizer.

    Texts are tokenized a few thousand at a time, joined by a word none of them holds; when
    the tokenizer does not keep that word as one token of its own (n-grams, say), or a text
    holds it, they are tokenized one by one."""
    options = decl.tokenizer()
    alone = [t.text for t in lance.tokenize(_BREAK, **options)]
    out: list[list[str]] = []
    size = tuning().text_chunk
    for start in range(0, len(texts), size):
        chunk = texts[start : start + size]
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
