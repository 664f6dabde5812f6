"""What a search is asked, checked before anything runs: ``k``, the columns, the query's
parameters and, for the cosine metric, the query vector. Every value out of its range is a
:class:`SearchQueryError` naming the parameter and what it takes, whether the namespace is
indexed or not.

A ``k`` (or ``refine_factor``, or HNSW ``ef``) beyond the rows the searched tables hold is
no error: what one table's Lance search is asked is bounded by that table's rows
(:func:`for_table`), which gives the same answer, since Lance allocates for what it is asked
rather than for what it finds."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import SearchQueryError
from .declaration import METRICS

# what each integer parameter counts, as its errors say
COUNTS = {
    "probes": "IVF clusters probed across the partitions searched",
    "nprobes": "IVF clusters probed in every partition",
    "minimum_nprobes": "IVF clusters probed in every partition at least",
    "maximum_nprobes": "IVF clusters probed in every partition at most",
    "refine_factor": "candidates re-ranked by exact distance per row returned",
    "ef": "HNSW search breadth",
}
VECTOR_PARAMS = (*COUNTS, "use_index")
# the parameters every table's Lance search takes as given (``probes`` is the package's own)
PER_TABLE = ("nprobes", "minimum_nprobes", "maximum_nprobes", "refine_factor", "ef", "use_index")
_PROBE_COUNTS = ("nprobes", "minimum_nprobes", "maximum_nprobes")
# more IVF clusters than any index holds: a larger count probes every cluster all the same
MAX_CLUSTERS = 2**31 - 1


def positive(name: str, value: Any, what: str | None = None) -> int:
    """``value`` as a positive integer of any size (raises naming ``name`` and ``what`` it
    counts)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        counts = f" ({what})" if what else ""
        raise SearchQueryError(f"{name} must be a positive integer{counts}, got {value!r}")
    return int(value)


def check_k(k: Any) -> int:
    """``k`` as a positive integer (any size: a search returns the rows that match, up to
    ``k``)."""
    return positive("k", k)


def check_columns(column: Any, columns: Any) -> None:
    """Refuses a ``column`` that is not a name, and ``columns`` that are not a non-empty list
    of distinct names."""
    if column is not None and not isinstance(column, str):
        raise SearchQueryError(f"column must be a column name, got {column!r}")
    if columns is None:
        return
    if isinstance(columns, str):
        raise SearchQueryError(
            f"columns must be a list of column names, got the string {columns!r} (write "
            f"[{columns!r}])"
        )
    if not isinstance(columns, Sequence):
        raise SearchQueryError(f"columns must be a list of column names, got {columns!r}")
    for name in columns:
        if not isinstance(name, str):
            raise SearchQueryError(f"columns must be a list of column names, got {name!r} in it")
    if not columns:
        raise SearchQueryError("columns must name at least one column (None returns them all)")
    seen: set[str] = set()
    for name in columns:
        if name in seen:
            raise SearchQueryError(f"columns names {name!r} twice")
        seen.add(name)


@dataclass(frozen=True)
class VectorParams:
    """A vector search's parameters, checked (None: not given, the default applies)."""

    metric: str | None = None
    probes: int | None = None
    nprobes: int | None = None
    minimum_nprobes: int | None = None
    maximum_nprobes: int | None = None
    refine_factor: int | None = None
    ef: int | None = None
    use_index: bool | None = None

    def per_table(self) -> dict[str, Any]:
        """The parameters given that every table's Lance search takes (cluster counts beyond
        any index's clusters as :data:`MAX_CLUSTERS`: every cluster all the same)."""
        out = {n: getattr(self, n) for n in PER_TABLE if getattr(self, n) is not None}
        for name in _PROBE_COUNTS:
            if name in out:
                out[name] = min(out[name], MAX_CLUSTERS)
        return out


def vector_params(params: Mapping[str, Any], k: int) -> VectorParams:
    """``params`` of a vector search of ``k`` rows, checked one by one and together (a
    parameter given as None is left to its default)."""
    given = {name: value for name, value in params.items() if value is not None}
    unknown = sorted(set(given) - {"metric", *VECTOR_PARAMS})
    if unknown:
        raise SearchQueryError(
            f"unknown vector search parameter(s) {unknown}; known: metric, "
            + ", ".join(VECTOR_PARAMS)
        )
    counts = {name: positive(name, given[name], COUNTS[name]) for name in COUNTS if name in given}
    use_index = given.get("use_index")
    if use_index is not None and not isinstance(use_index, bool | np.bool_):
        raise SearchQueryError(f"use_index must be True or False, got {use_index!r}")
    metric = given.get("metric")
    if metric is not None:
        if not isinstance(metric, str) or metric.lower() not in METRICS:
            raise SearchQueryError(f"metric must be one of {', '.join(METRICS)}, got {metric!r}")
        metric = metric.lower()
    out = VectorParams(
        metric=metric,
        probes=counts.get("probes"),
        nprobes=counts.get("nprobes"),
        minimum_nprobes=counts.get("minimum_nprobes"),
        maximum_nprobes=counts.get("maximum_nprobes"),
        refine_factor=counts.get("refine_factor"),
        ef=counts.get("ef"),
        use_index=None if use_index is None else bool(use_index),
    )
    _check_together(out, k)
    return out


def _check_together(p: VectorParams, k: int) -> None:
    """Refuses parameters that contradict each other or ``k``."""
    bounds = [n for n in ("minimum_nprobes", "maximum_nprobes") if getattr(p, n) is not None]
    per_table = [n for n in _PROBE_COUNTS if getattr(p, n) is not None]
    if p.probes is not None and per_table:
        raise SearchQueryError(
            f"probes (IVF clusters across the partitions searched) and {per_table} "
            "(per partition) exclude each other: pass one"
        )
    if p.probes is not None and p.use_index is False:
        raise SearchQueryError(
            "probes (IVF clusters probed) and use_index=False (every row searched, no index) "
            "exclude each other: pass one"
        )
    if p.nprobes is not None and bounds:
        raise SearchQueryError(
            f"nprobes sets both minimum_nprobes and maximum_nprobes: pass nprobes or {bounds}"
        )
    low, high = p.minimum_nprobes, p.maximum_nprobes
    if low is not None and high is not None and low > high:
        raise SearchQueryError(f"minimum_nprobes ({low}) exceeds maximum_nprobes ({high})")
    if p.ef is not None and p.ef < k:
        raise SearchQueryError(
            f"ef ({COUNTS['ef']}) must be at least k = {k}, got {p.ef}: HNSW finds at most ef rows"
        )


def check_text_params(params: Mapping[str, Any]) -> None:
    """Refuses any parameter given to a full-text search (it takes none)."""
    given = sorted(name for name, value in params.items() if value is not None)
    if given:
        vector = [n for n in given if n in VECTOR_PARAMS or n == "metric"]
        which = " (vector search parameters)" if vector == given else ""
        raise SearchQueryError(f"full-text search takes no parameters, got {given}{which}")


def check_direction(vector: np.ndarray, metric: str, column: str) -> None:
    """Refuses a query vector without a norm (zero, or too small for float32) under the
    cosine metric: its cosine distance to every row is undefined."""
    if metric == "cosine" and float(np.dot(vector, vector)) == 0.0:
        raise SearchQueryError(
            f"a zero vector has no direction: its cosine distance to the vectors of {column!r} "
            "is undefined (query a non-zero vector, or pass metric='l2' or 'dot')"
        )


def for_table(k: int, per_table: Mapping[str, Any], rows: int) -> dict[str, Any]:
    """What one table's Lance search of its ``k`` best rows is given: ``k`` and the
    ``per_table`` parameters, no more rows (``k``), candidates (``k * refine_factor``) or HNSW
    breadth (``ef``) than the table's ``rows`` (the same answer), and ``ef`` at least the
    candidates it re-ranks, as HNSW requires."""
    out = dict(per_table)
    k = max(1, min(k, rows))
    out["k"] = k
    refine = out.get("refine_factor")
    if refine is not None:
        refine = max(1, min(refine, -(-rows // k)))
        out["refine_factor"] = refine
    if out.get("ef") is not None:
        out["ef"] = max(min(out["ef"], rows), k * (refine or 1))
    return out
