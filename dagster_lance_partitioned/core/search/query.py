"""Searching a namespace: the entry point of vector and full-text queries. What is asked is
checked first (:mod:`.params`), the column and index searched are chosen, and the partitions
the filter keeps are searched (vectors: :mod:`.nearest`, text: :mod:`.text`), with what the
search session keeps (:mod:`.session`).

Vector queries return the k nearest rows with ``_distance`` (ascending; Lance's distances:
squared L2, ``1 - cosine``, ``1 - dot``); text queries the k best with ``_score`` (BM25 over
the whole namespace version, descending)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from ..errors import SearchQueryError
from ..expr.filters import FilterLike
from ..manifest.state import HasState, NamespaceState, state_of
from ..read.planning import plan_namespace
from ..read.scan import read_schema
from ..schema.arrow_json import strip_field_ids
from .catalog import declared
from .declaration import IndexDeclaration, vector_dimension
from .nearest import VectorQuery
from .params import (
    VectorParams,
    check_columns,
    check_direction,
    check_k,
    check_text_params,
    vector_params,
)
from .session import SearchSession, default_session
from .tables import DISTANCE, Opener, for_each_task
from .text import search_text


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
    session: SearchSession | None = None,
) -> pa.Table:
    """The ``k`` best rows for ``query`` across the partitions ``filter`` keeps (see the
    facade's ``search``); ``session``: what searches keep (None: the default session)."""
    k = check_k(k)
    kind = query_kind(query)
    check_columns(column, columns)
    if session is not None and not isinstance(session, SearchSession):
        raise SearchQueryError(f"session must be a SearchSession, got {type(session).__name__}")
    if kind == "text":
        check_text_params(params or {})
    given = vector_params(params or {}, k) if kind == "vector" else VectorParams()
    session = session if session is not None else default_session()
    state = state_of(ns)
    decls = declared(state)
    schema = state.schema_with_ids
    plain = strip_field_ids(schema)
    target = read_schema(plain, columns)
    if kind == "text":
        decl = text_index(plain, decls, column)
        return search_text(state, session, query, decl, k, filter, target)
    name, metric = vector_column(plain, decls, column)
    metric = given.metric or metric
    dimension = vector_dimension(plain.field(name).type)
    assert dimension is not None
    vector = as_vector(query, dimension, name)
    check_direction(vector, metric, name)
    plan = plan_namespace(state, filter, check_links=False)  # checked when read
    opts = state.storage_options

    tables = for_each_task(state, plan.tasks, Opener(session, schema, plan.residual_filter, opts))
    # no more rows asked for than the tables hold
    k = max(1, min(k, sum(t.rows for t in tables)))
    if not tables:
        return target.append(pa.field(DISTANCE, pa.float32())).empty_table()
    q = VectorQuery(state, session, schema, target, name, vector, k, metric, given)
    return q.run(tables)


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
