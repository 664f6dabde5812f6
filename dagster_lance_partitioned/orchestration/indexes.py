"""Indexes of assets stored by the IO manager: the ``lance/indexes`` asset metadata, read and
checked before anything is touched (:func:`index_requests`, :func:`check_requests`), declared
on the namespace before a run's write so that the write's own manifest commit registers
indexed tables (:func:`declare_requested`), and the coverage of the declared indexes over
some partition tables, as Dagster metadata (:func:`coverage_over`, :func:`coverage_metadata`).

.. code-block:: python

    @dg.asset(metadata={
        "partition_expr": "day",
        "lance/indexes": [
            {"column": "embedding", "index_type": "IVF_PQ", "metric": "cosine"},
            {"column": "origin", "index_type": "BITMAP", "name": "by_origin"},
        ],
    })
    def flights(context) -> pa.Table: ...
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import dagster as dg
import pyarrow as pa

from ..core import (
    IndexBuildError,
    IndexCoverage,
    IndexDeclarationError,
    PartitionedNamespace,
    ScanTask,
)
from ..core.engine import (
    IndexDeclaration,
    TableIndexState,
    canonical_type,
    normalize_schema,
    state_of,
)
from ..core.engine import declare_index as declare
from ..core.engine import declared_indexes as declared
from ..core.engine import index_table_states as table_states
from ..core.engine import summarize_indexes as summarize
from .errors import IndexDeclarationConflictError, IndexMetadataError
from .metadata_keys import INDEX_PARTITIONS_NEEDING, INDEX_UNINDEXED_ROWS, INDEXES, scoped

_RESERVED = ("column", "index_type", "name", "min_rows")  # other keys of an entry are params
_SHAPE = (
    '[{"column": "<column>", "index_type": "<IVF_PQ | IVF_HNSW_SQ | IVF_FLAT | INVERTED | FTS '
    '| BTREE | BITMAP | LABEL_LIST>", "name": "<optional>", "min_rows": <optional>, '
    "<parameters such as metric>}]"
)
# the columns of the coverage table in materialization, observation and check metadata
COVERAGE_COLUMNS = (
    "name",
    "column",
    "index_type",
    "partitions_indexed",
    "partitions_needing",
    "partitions_flat",
    "partitions_total",
    "indexed_rows",
    "unindexed_rows",
)
_TEXT_COLUMNS = ("name", "column", "index_type")


@dataclass(frozen=True)
class IndexRequest:
    """One entry of an asset's ``lance/indexes``: an index of ``index_type`` (canonical, e.g.
    ``INVERTED`` for ``FTS``) on ``column``, named ``name`` (the entry's ``name``, else
    ``<column>_<index type>`` as the core names it), with ``min_rows`` (None: the core's
    default) and the remaining keys as ``params``. ``position`` is the entry's place in the
    list (for error messages)."""

    position: int
    column: str
    index_type: str
    name: str
    min_rows: int | None = None
    params: dict[str, Any] = field(default_factory=dict)

    def declaration(self, schema: pa.Schema) -> IndexDeclaration:
        """The core's checked declaration of this entry on ``schema`` (raises
        :class:`IndexDeclarationError` naming the column, type, name or parameter at
        fault)."""
        return declare(
            schema,
            self.column,
            self.index_type,
            name=self.name,
            min_rows=self.min_rows,
            params=self.params,
        )


def index_requests(asset: str, raw: Any) -> tuple[IndexRequest, ...]:
    """The entries of ``asset``'s ``lance/indexes`` metadata value ``raw`` (None: none).
    Raises :class:`IndexMetadataError` naming the asset and the entry at fault for a value
    that is not a list of mappings, an entry without a string ``column`` or ``index_type``,
    an unknown index type, a ``name`` that is not a non-empty string, a ``min_rows`` that is
    not a positive integer, parameters that are not JSON values, or two entries of one
    name."""
    if raw is None:
        return ()
    if isinstance(raw, dg.MetadataValue):
        raw = raw.value
    if isinstance(raw, str | bytes | Mapping) or not isinstance(raw, Sequence):
        raise IndexMetadataError(
            f"asset {asset}: metadata {INDEXES} must be a list of index entries {_SHAPE}; got "
            f"{type(raw).__name__} {raw!r}. Nothing was written.",
            asset,
        )
    out: list[IndexRequest] = []
    names: dict[str, int] = {}
    for i, entry in enumerate(raw):
        request = _request(asset, i, entry)
        if request.name in names:
            raise IndexMetadataError(
                f"asset {asset}: metadata {INDEXES}[{names[request.name]}] and [{i}] both "
                f"declare the index {request.name!r}; give each entry its own 'name'. Nothing "
                "was written.",
                asset,
                i,
            )
        names[request.name] = i
        out.append(request)
    return tuple(out)


def _request(asset: str, i: int, entry: Any) -> IndexRequest:
    """One checked entry of ``lance/indexes``."""

    def bad(problem: str) -> IndexMetadataError:
        return IndexMetadataError(
            f"asset {asset}: metadata {INDEXES}[{i}] {entry!r}: {problem}. Expected a list of "
            f"{_SHAPE}. Nothing was written.",
            asset,
            i,
        )

    if not isinstance(entry, Mapping):
        raise bad(f"an entry must be a mapping, not {type(entry).__name__}")
    odd = [k for k in entry if not isinstance(k, str)]
    if odd:
        raise bad(f"keys must be strings, got {odd[0]!r}")
    column = entry.get("column")
    if not isinstance(column, str) or not column:
        raise bad("'column' (the name of the column to index) is missing or not a string")
    index_type = entry.get("index_type")
    if not isinstance(index_type, str) or not index_type:
        raise bad("'index_type' is missing or not a string")
    try:
        canonical = canonical_type(index_type)
    except IndexDeclarationError as e:
        raise bad(str(e)) from None
    name = entry.get("name")
    if name is not None and (not isinstance(name, str) or not name):
        raise bad(f"'name' must be a non-empty string, got {name!r}")
    min_rows = entry.get("min_rows")
    if min_rows is not None and (
        isinstance(min_rows, bool) or not isinstance(min_rows, int) or min_rows < 1
    ):
        raise bad(f"'min_rows' must be a positive integer, got {min_rows!r}")
    params = {k: v for k, v in entry.items() if k not in _RESERVED}
    try:
        json.dumps(params)
    except (TypeError, ValueError):
        raise bad("index parameters must be JSON values (numbers, strings, lists)") from None
    resolved = name if name is not None else f"{column}_{canonical.lower()}"
    return IndexRequest(i, column, canonical, resolved, min_rows, params)


def check_requests(asset: str, requests: Sequence[IndexRequest], schema: pa.Schema) -> None:
    """Raise :class:`IndexMetadataError` unless every entry of ``requests`` is a declaration
    the core accepts on the output's ``schema`` (its column is in the output and of a type
    the index holds, a valid name, ``min_rows`` and parameters); nothing is touched."""
    if not requests:
        return
    schema = normalize_schema(schema)
    for r in requests:
        if schema.get_field_index(r.column) < 0:
            raise IndexMetadataError(
                f"asset {asset}: metadata {INDEXES}[{r.position}] indexes column {r.column!r}, "
                f"which the output does not have (columns: {', '.join(schema.names)}). Nothing "
                "was written.",
                asset,
                r.position,
            )
        try:
            r.declaration(schema)
        except IndexDeclarationError as e:
            raise IndexMetadataError(
                f"asset {asset}: metadata {INDEXES}[{r.position}]: {e}. Nothing was written.",
                asset,
                r.position,
            ) from None


def declare_requested(
    asset: str, ns: PartitionedNamespace, requests: Sequence[IndexRequest]
) -> list[str]:
    """Declare on ``ns`` each index of ``requests`` it does not declare yet, and return their
    names (an index declared alike already is left as it is: no commit). A new declaration
    on a namespace without partition tables is one manifest commit; on one with tables, the
    core indexes them first and registers them in one more commit. Raises
    :class:`IndexDeclarationConflictError` for an index ``ns`` declares otherwise (the IO
    manager never changes a declaration) -- before any declaration of this call."""
    if not requests:
        return []
    schema = ns.schema_with_ids
    stored = {d.name: d for d in declared(ns)}
    new: list[tuple[IndexRequest, IndexDeclaration]] = []
    for r in requests:
        try:
            wanted = r.declaration(schema)
        except IndexDeclarationError as e:
            raise IndexMetadataError(
                f"asset {asset}: metadata {INDEXES}[{r.position}]: {e}. Nothing was written.",
                asset,
                r.position,
            ) from None
        have = stored.get(wanted.name)
        if have is None:
            new.append((r, wanted))
        elif not have.asks_for_same(wanted):
            raise _conflict(asset, ns.uri, r, have, wanted)
    made = []
    for r, wanted in new:
        try:
            ns.create_index(
                r.column, r.index_type, name=wanted.name, min_rows=r.min_rows, **r.params
            )
        except IndexBuildError as e:  # an existing table cannot get the index
            raise IndexBuildError(
                f"asset {asset}: declaring index {wanted.name!r} of metadata "
                f"{INDEXES}[{r.position}] on {ns.uri}: {e}. The index was not declared; "
                "nothing was written."
            ) from e
        except IndexDeclarationError as e:  # a concurrent run declared it otherwise first
            ns.refresh()
            have = {d.name: d for d in declared(ns)}.get(wanted.name)
            if have is not None and not have.asks_for_same(wanted):
                raise _conflict(asset, ns.uri, r, have, wanted) from None
            raise IndexMetadataError(
                f"asset {asset}: metadata {INDEXES}[{r.position}]: {e}. Nothing was written.",
                asset,
                r.position,
            ) from None
        made.append(wanted.name)
    return made


def _conflict(
    asset: str, uri: str, r: IndexRequest, have: IndexDeclaration, wanted: IndexDeclaration
) -> IndexDeclarationConflictError:
    stored, asked = have.plain(), wanted.plain()
    return IndexDeclarationConflictError(
        f"asset {asset}: metadata {INDEXES}[{r.position}] asks for index {wanted.name!r} as "
        f"{json.dumps(asked, sort_keys=True)}, but the namespace {uri} already declares it as "
        f"{json.dumps(stored, sort_keys=True)}. The IO manager never changes a declaration: "
        f"drop it first (ns.drop_index({wanted.name!r}), e.g. on "
        "LancePartitionedResource.namespace(key)) or give the entry another 'name'. Nothing "
        "was written.",
        asset,
        r.position,
        wanted.name,
        stored,
        asked,
    )


# -- coverage ---------------------------------------------------------------------------------
def coverage_over(
    ns: PartitionedNamespace,
    tasks: Sequence[ScanTask],
    group: Callable[[ScanTask], str | None] | None = None,
    groups: Sequence[str] = (),
) -> tuple[list[IndexCoverage], dict[str, list[IndexCoverage]]]:
    """The coverage of every index ``ns`` declares over the partition tables of ``tasks``
    (each opened once, a few at a time), and, with ``group``, over those of each group
    (``group`` names a table's group, None: none; every name of ``groups`` gets an entry,
    one without tables a coverage of no partition). Nothing when ``ns`` declares no index;
    the numbers mean what :meth:`PartitionedNamespace.indexes` says."""
    decls = declared(ns)
    if not decls:
        return [], {}
    found = table_states(state_of(ns), decls, list(tasks))
    total = summarize(decls, found)
    if group is None:
        return total, {}
    by_group: dict[str, list[tuple[ScanTask, list[TableIndexState]]]] = {g: [] for g in groups}
    for task, per in found:
        name = group(task)
        if name is not None:
            by_group.setdefault(name, []).append((task, per))
    return total, {g: summarize(decls, items) for g, items in by_group.items()}


def coverage_table(coverages: Sequence[IndexCoverage]) -> dg.TableMetadataValue:
    """The coverage of each index as a table (one row per index) the Dagster UI shows."""
    schema = dg.TableSchema(
        columns=[
            dg.TableColumn(c, "string" if c in _TEXT_COLUMNS else "int") for c in COVERAGE_COLUMNS
        ]
    )
    records = [dg.TableRecord({c: getattr(cov, c) for c in COVERAGE_COLUMNS}) for cov in coverages]
    return dg.MetadataValue.table(records, schema)


def coverage_metadata(coverages: Sequence[IndexCoverage], run: bool = False) -> dict[str, Any]:
    """``lance/indexes`` (the coverage table) and, summed over the indexes and as integers
    the UI plots, ``lance/index_partitions_needing`` and ``lance/index_unindexed_rows``
    (``lance/run_...`` with ``run``: a multi-key run's totals)."""
    return {
        scoped(INDEXES, run): coverage_table(coverages),
        scoped(INDEX_PARTITIONS_NEEDING, run): dg.MetadataValue.int(
            sum(c.partitions_needing for c in coverages)
        ),
        scoped(INDEX_UNINDEXED_ROWS, run): dg.MetadataValue.int(
            sum(c.unindexed_rows for c in coverages)
        ),
    }


def coverage_summary(coverages: Sequence[IndexCoverage]) -> str:
    """One line per run log: each index's partitions indexed / needing one and unindexed
    rows."""
    return "; ".join(
        f"{c.name} ({c.index_type} on {c.column}): {c.partitions_indexed}/{c.partitions_total} "
        f"partition(s) indexed, {c.partitions_needing} needing one, {c.partitions_flat} below "
        f"min_rows, {c.unindexed_rows} unindexed row(s)"
        for c in coverages
    )


# -- the coverage check's bound -----------------------------------------------------------------
@dataclass(frozen=True)
class UnindexedBound:
    """How many unindexed rows (appended since an index was built, searched exhaustively) an
    index may have and still pass ``lance_index_coverage``: at most ``fraction`` of its
    indexed rows and at most ``rows`` (None: that bound is not applied)."""

    fraction: float | None = 0.1
    rows: int | None = None

    def __post_init__(self) -> None:
        if self.fraction is not None and self.fraction < 0:
            raise ValueError(f"index_unindexed_fraction must be >= 0, got {self.fraction}")
        if self.rows is not None and self.rows < 0:
            raise ValueError(f"index_unindexed_rows must be >= 0, got {self.rows}")

    def allowed(self, indexed_rows: int) -> int | None:
        """The most unindexed rows allowed next to ``indexed_rows`` (None: no bound)."""
        bounds = []
        if self.fraction is not None:
            bounds.append(int(self.fraction * indexed_rows))
        if self.rows is not None:
            bounds.append(self.rows)
        return min(bounds) if bounds else None

    def describe(self) -> str:
        """The bound as a person reads it."""
        parts = []
        if self.fraction is not None:
            parts.append(f"{self.fraction * 100:g}% of the indexed rows")
        if self.rows is not None:
            parts.append(f"{self.rows} rows")
        return "at most " + " and ".join(parts) if parts else "no bound"
