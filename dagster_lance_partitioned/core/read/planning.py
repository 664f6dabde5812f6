"""Scan planning: which partition tables, at which versions, a filter needs."""

from __future__ import annotations

import datetime as dt
import decimal
import functools
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from .. import storage
from ..expr.filters import FilterLike, literal_value, parse, to_sql
from ..expr.predicates import (
    CMP_OPS,
    FALSE,
    TRUE,
    Cmp,
    InSet,
    IsNull,
    Leaf,
    NotRenderable,
    Pred,
    _compare,
    from_datafusion,
    holds,
    to_expression,
)
from ..expr.predicates import to_sql as pred_sql
from ..manifest.snapshot import ManifestSnapshot, TableEntry
from ..manifest.state import NamespaceState
from ..manifest.stats import TableStats
from ..partitioning.partition_constants import identity_constants
from ..partitioning.partition_spec import PartitionSpec
from ..table_files import check_known_files
from .field_filters import ResolvedFilter, resolved
from .pruning import (
    SpecProjector,
    SpecPruning,
    manifest_query,
    manifest_where,
    scan_manifest,
    select_tables,
)
from .stats_pruning import StatsPruner


@dataclass(frozen=True)
class ScanTask:
    """One partition table to read, pinned to the version the manifest registered."""

    object_id: str
    location: str
    uri: str
    read_version: int | None
    read_branch: str | None
    read_tag: str | None
    spec_id: int
    partition_values: dict[str, Any]
    # identity partition columns -> their value (filled in when a table does not store them)
    constants: dict[str, Any] = field(default_factory=dict)
    # every row of the table satisfies the plan's filter (it only tests identity partition
    # columns, on values this partition holds): the table is read without it
    filter_implied: bool = False
    # what the manifest knows of the pinned version's rows (None: nothing recorded)
    stats: TableStats | None = field(default=None, compare=False)

    @property
    def rows(self) -> int | None:
        """The rows of the pinned version, from the manifest (None: not recorded)."""
        return None if self.stats is None else self.stats.rows

    @property
    def root(self) -> str:
        """The namespace root the table lies under."""
        path, sep, query = self.uri.partition("?")
        return path[: len(path) - len(self.location)].rstrip("/") + sep + query


@dataclass(frozen=True)
class ScanPlan:
    """The tasks a scan reads, the filter applied inside each, and the manifest version used."""

    tasks: tuple[ScanTask, ...]
    residual_filter: str | None
    manifest_version: int
    manifest_query: str = ""
    source_predicate: str = "TRUE"
    predicates: tuple[tuple[int, str], ...] = ()  # (spec id, manifest predicate SQL)
    snapshot: ManifestSnapshot | None = field(default=None, repr=False, compare=False)
    # tables the partition values kept whose statistics prove no row matches (not read), and
    # how many of the tables kept had statistics to judge by
    pruned_by_stats: tuple[str, ...] = ()
    with_stats: int = 0

    @property
    def total_partitions(self) -> int:
        """Registered partition tables of the manifest version (counted when first asked)."""
        return sum(self._totals().values())

    @property
    def specs(self) -> tuple[SpecPruning, ...]:
        """Per spec version: the manifest predicate and the partitions it keeps / has."""
        totals = self._totals()
        by_stats = set(self.pruned_by_stats)
        kept: dict[int, int] = {}
        for t in self.tasks:
            kept[t.spec_id] = kept.get(t.spec_id, 0) + 1
        for oid in by_stats:  # kept by their partition values
            sid = _spec_id(oid)
            kept[sid] = kept.get(sid, 0) + 1
        return tuple(
            SpecPruning(sid, sql, kept.get(sid, 0), totals.get(sid, 0))
            for sid, sql in self.predicates
        )

    def _totals(self) -> dict[int, int]:
        if self.snapshot is None:
            counts: dict[int, int] = {}
            for t in self.tasks:
                counts[t.spec_id] = counts.get(t.spec_id, 0) + 1
            return counts
        return self.snapshot.table_counts()

    @property
    def pruned(self) -> int:
        """How many registered partition tables the plan skips (by partition values and by
        statistics)."""
        return self.total_partitions - len(self.tasks)

    @property
    def pruned_by_values(self) -> int:
        """How many registered partition tables their partition values rule out."""
        return self.pruned - len(self.pruned_by_stats)

    def explain(self) -> str:
        """A readable account of the plan: per spec version, the manifest predicate and how
        many partitions it keeps, then the filter applied inside each partition."""
        lines = [
            f"scan of manifest version {self.manifest_version}: "
            f"{len(self.tasks)} of {self.total_partitions} partition tables",
            f"  filter: {self.residual_filter or '(none)'}",
        ]
        for sp in self.specs:
            lines.append(
                f"  spec v{sp.spec_id}: keep {sp.kept} / {sp.total} partitions where {sp.predicate}"
            )
        lines.append(
            f"  pruned by partition values: {self.pruned_by_values}; by statistics: "
            f"{len(self.pruned_by_stats)} (of {self.with_stats} kept tables with statistics)"
        )
        lines.append(
            f"  residual filter in each partition scan: {self.residual_filter or '(none)'}"
        )
        lines.append(f"  manifest query: {self.manifest_query}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """The plan's explanation as JSON-able data."""
        return {
            "manifest_version": self.manifest_version,
            "filter": self.residual_filter,
            "total_partitions": self.total_partitions,
            "kept_partitions": len(self.tasks),
            "pruned_by_values": self.pruned_by_values,
            "pruned_by_stats": len(self.pruned_by_stats),
            "tables_with_stats": self.with_stats,
            "specs": [
                {
                    "spec_id": s.spec_id,
                    "manifest_predicate": s.predicate,
                    "kept": s.kept,
                    "total": s.total,
                }
                for s in self.specs
            ],
            "residual_filter": self.residual_filter,
            "manifest_query": self.manifest_query,
            "tasks": [
                {
                    "object_id": t.object_id,
                    "location": t.location,
                    "read_version": t.read_version,
                    "spec_id": t.spec_id,
                }
                for t in self.tasks
            ],
        }

    def __str__(self) -> str:
        return self.explain()


def plan_namespace(
    state: NamespaceState,
    filter: FilterLike = None,
    by_stats: bool = True,
    check_links: bool = True,
) -> ScanPlan:
    """The scan plan of ``filter`` over the manifest version ``state`` reads (see
    :func:`plan_scan`)."""
    return plan_scan(
        state.snapshot, state.schema_with_ids, state.uri, filter, by_stats, check_links
    )


def plan_scan(
    snapshot: ManifestSnapshot,
    schema: pa.Schema,
    root: str,
    filter: FilterLike = None,
    by_stats: bool = True,
    check_links: bool = True,
) -> ScanPlan:
    """Tasks for the partition tables that may hold rows matching ``filter``: the filter is
    projected onto every spec version's partition columns and ``__manifest`` is queried once;
    then (``by_stats``) the tables whose statistics prove that no row matches are left out
    (see :mod:`.stats_pruning`). Operations that act on whole partitions whatever their rows
    (maintenance, index builds) plan without statistics.

    What depends only on the filter, the schema and the manifest version (the compiled
    filter, its projections, the manifest query, the tables it selects and their tasks) is
    computed once per process; the tables' directories are checked for links on every call
    (see :func:`check_at_use`), unless ``check_links`` is False: then the caller checks the
    tasks it reads files of, when it reads them."""
    specs = tuple(s for _, s in sorted(snapshot.specs.items()))
    named = resolved(to_sql(filter), schema, specs)  # partition field ids read as such
    sql = named.row_filter()
    shape = _shape(sql, schema, tuple(sorted(snapshot.specs.items())), snapshot.arrow_schema)

    def make() -> tuple[pa.Schema, tuple[ScanTask, ...], tuple[str, ...], int]:
        tables = _selected_tables(snapshot, shape)
        specs = snapshot.specs
        pruner = shape.pruner if by_stats else None
        pruned: tuple[str, ...] = ()
        judged = 0
        if pruner is not None:
            judged = sum(1 for t in tables if t.stats is not None)
            kept = [t for t in tables if pruner.may_match(t.stats)]
            if len(kept) != len(tables):
                ids = {t.object_id for t in kept}
                pruned = tuple(t.object_id for t in tables if t.object_id not in ids)
            tables = kept
        tasks = tuple(_task(t, specs[t.spec_id], root, schema, shape.exact, named) for t in tables)
        return schema, tasks, pruned, judged

    # keyed by the schema object (kept with the tasks, so that its id is not reused)
    made, tasks, pruned, judged = snapshot.memo(("tasks", root, id(schema), sql, by_stats), make)
    if made is not schema:
        made, tasks, pruned, judged = make()
    if check_links:
        check_at_use(tasks)
    if storage.local_path(root) is None and any("/" in t.location for t in tasks):
        # on an object store, the directories on the way of a location of several segments
        # (imports) hold no nested namespace: checked once per manifest version
        snapshot.memo(
            ("not nested", root, sql),
            lambda: storage.check_not_nested(
                root, {t.location: t.object_id for t in tasks}, snapshot.storage_options
            ),
        )
    return ScanPlan(
        tuple(tasks),
        sql,
        snapshot.version,
        shape.query,
        shape.source_sql,
        shape.predicate_sql,
        snapshot,
        pruned,
        judged,
    )


@dataclass(frozen=True)
class _Shape:
    """A filter compiled for one namespace schema and manifest layout (immutable, shared)."""

    predicates: dict[int, Pred]  # spec id -> predicate on its partition columns
    query: str  # the manifest query, as SQL
    source_sql: str
    predicate_sql: tuple[tuple[int, str], ...]
    exact: tuple[Leaf, ...] | None  # the filter is exactly the AND of these leaves
    key: tuple[tuple[int, Pred], ...]  # the predicates, hashable
    pruner: StatsPruner | None  # judges tables by their statistics (None: nothing to judge)


@functools.lru_cache(maxsize=256)
def _shape(
    sql: str | None,
    schema: pa.Schema,
    specs: tuple[tuple[int, PartitionSpec], ...],
    manifest_schema: pa.Schema,
) -> _Shape:
    expr = parse(sql, schema) if sql else None
    source: Pred = from_datafusion(expr, schema) if expr is not None else TRUE
    columns = set(manifest_schema.names)
    predicates = {
        # a spec's manifest columns arrive with its first write: until then it has no tables
        spec_id: projector(spec, schema).project(source)
        if all(f.column in columns for f in spec.fields)
        else FALSE
        for spec_id, spec in specs
    }
    types = {f.name: f.type for f in manifest_schema}
    return _Shape(
        predicates,
        manifest_query(manifest_schema, predicates),
        pred_sql(source, {f.name: f.type for f in schema}),
        tuple((sid, pred_sql(pred, types)) for sid, pred in sorted(predicates.items())),
        _exact_conjuncts(expr, schema) if expr is not None else (),
        tuple(sorted(predicates.items(), key=lambda item: item[0])),
        StatsPruner.of(source, schema),
    )


def check_at_use(tasks: Iterable[ScanTask]) -> None:
    """On a local root, refuse (:class:`PathEscapeError`) a task whose table directory is, is
    reached through, or holds a symbolic link or a nested namespace, or whose known files are
    links: the check of the moment of use, made in the calling thread (see
    :mod:`..table_files`)."""
    for task in tasks:
        root = task.root
        storage.check_table_dir(root, task.location, task.object_id)
        check_known_files(root, task.location, task.read_version, task.object_id)


def _spec_id(object_id: str) -> int:
    head = object_id.split("$", 1)[0]
    return int(head[1:]) if head[1:].isdigit() else -1


def _selected_tables(snapshot: ManifestSnapshot, shape: _Shape) -> list[TableEntry]:
    """The partition tables the manifest query selects (once per manifest version and
    predicates in the process, see :meth:`ManifestSnapshot.memo`)."""
    predicates = shape.predicates
    if all(p == TRUE for p in predicates.values()):
        return snapshot.tables()
    in_memory = snapshot.loaded or snapshot.is_small()
    found: tuple[TableEntry, ...] = snapshot.memo(
        ("plan", in_memory, shape.key), lambda: tuple(_select(snapshot, shape, in_memory))
    )
    return list(found)


def _select(snapshot: ManifestSnapshot, shape: _Shape, in_memory: bool) -> list[TableEntry]:
    """From the loaded manifest when it is in memory (or small), else with Lance's scanner
    (indexed) when the predicate renders for Lance."""
    predicates = shape.predicates
    if in_memory:
        # a small manifest is read once and the predicate evaluated on its rows in memory,
        # vectorised (only the matching rows become entries)
        try:
            where = _in_memory_where(snapshot, predicates)
        except NotRenderable:
            return [t for t in snapshot.tables() if _keeps(t, snapshot, predicates[t.spec_id])]
        if snapshot.loaded or snapshot.is_small():
            _ = snapshot.table
        return snapshot.entries(snapshot.rows_where(where))
    try:
        where = manifest_where(snapshot.arrow_schema, predicates, dialect="lance")
    except NotRenderable:
        selected = select_tables(snapshot, shape.query)
        return [t for t in snapshot.tables() if t.object_id in selected]
    return scan_manifest(snapshot, where)


def _in_memory_where(snapshot: ManifestSnapshot, predicates: dict[int, Pred]) -> pc.Expression:
    """The manifest rows of the partition tables ``predicates`` keep, as an Arrow expression
    (raises :class:`NotRenderable` when a predicate has no such form)."""
    types = {f.name: f.type for f in snapshot.arrow_schema}
    where: pc.Expression | None = None
    for spec_id, pred in sorted(predicates.items()):
        if pred == FALSE:
            continue
        of_spec = pc.starts_with(pc.field("object_id"), f"v{spec_id}$")
        test = of_spec if pred == TRUE else of_spec & to_expression(pred, types)
        where = test if where is None else where | test
    tables = pc.field("object_type") == "table"
    return tables & (where if where is not None else pc.scalar(False))


def _keeps(entry: TableEntry, snapshot: ManifestSnapshot, pred: Pred) -> bool:
    spec = snapshot.specs[entry.spec_id]
    row = {f.column: v for f, v in zip(spec.fields, entry.values, strict=True)}
    return holds(pred, row) is True


# -- filters every row of a partition satisfies ------------------------------------------------
_EXACT_TYPES = (str, bytes, int, dt.date, dt.time, dt.timedelta, decimal.Decimal)


def _exact_conjuncts(expr: Any, schema: pa.Schema) -> tuple[Leaf, ...] | None:
    """The filter as an AND of comparisons of columns with literals (``=``, ``!=``, ``<``,
    ``<=``, ``>``, ``>=``, ``IN``, ``BETWEEN``, ``IS [NOT] NULL``) when it is exactly that
    (each literal of its column's type, unchanged by the cast), else None. Unlike the pruning
    tree (which drops what it cannot read), this form is the filter itself."""
    kind = expr.variant_name()
    if kind == "Alias":
        return _exact_conjuncts(expr.to_variant().expr(), schema)
    v = expr.to_variant() if kind in _EXACT_KINDS else None
    if v is None:
        return None
    if kind == "BinaryExpr":
        op = v.op().upper()
        if op == "AND":
            left, right = _exact_conjuncts(v.left(), schema), _exact_conjuncts(v.right(), schema)
            return None if left is None or right is None else left + right
        if op == "OR":  # DataFusion writes a short IN list as ORed equalities
            sides = [_exact_conjuncts(v.left(), schema), _exact_conjuncts(v.right(), schema)]
            values: list[Any] = []
            columns = set()
            for side in sides:
                if side is None or len(side) != 1:
                    return None
                leaf = side[0]
                if isinstance(leaf, Cmp) and leaf.op == "=":
                    values.append(leaf.value)
                elif isinstance(leaf, InSet) and not leaf.negated:
                    values.extend(leaf.values)
                else:
                    return None
                columns.add(leaf.column)
            if len(columns) != 1:
                return None
            return (InSet(columns.pop(), tuple(values)),)
        op = "!=" if op == "<>" else op
        if op not in CMP_OPS:
            return None
        col, lit = _column(v.left(), schema), v.right()
        if col is None:
            col, lit, op = _column(v.right(), schema), v.left(), _FLIP[op]
        value = _exact_literal(lit, schema, col)
        return None if col is None or value is None else (Cmp(col, op, value),)
    if kind in ("IsNull", "IsNotNull"):
        col = _column(v.expr(), schema)
        return None if col is None else (IsNull(col, negated=kind == "IsNotNull"),)
    if kind == "InList":
        col = _column(v.expr(), schema)
        values = [_exact_literal(item, schema, col) for item in v.list()]
        if col is None or v.negated() or not values or any(x is None for x in values):
            return None
        return (InSet(col, tuple(values)),)
    if kind == "Between":
        col = _column(v.expr(), schema)
        lo, hi = _exact_literal(v.low(), schema, col), _exact_literal(v.high(), schema, col)
        if col is None or v.negated() or lo is None or hi is None:
            return None
        return (Cmp(col, ">=", lo), Cmp(col, "<=", hi))
    return None


_EXACT_KINDS = frozenset(("BinaryExpr", "IsNull", "IsNotNull", "InList", "Between"))
_FLIP = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


def _column(expr: Any, schema: pa.Schema) -> str | None:
    if expr.variant_name() != "Column":
        return None
    name = str(expr.to_variant().name())
    return name if schema.get_field_index(name) >= 0 else None


def _exact_literal(expr: Any, schema: pa.Schema, column: str | None) -> Any:
    """The value of a literal compared with ``column`` when the literal is of a type compared
    exactly in Python and casting it to the column's type leaves it as it was (else None)."""
    if column is None or expr.variant_name() != "Literal":
        return None
    try:
        raw = expr.python_value()
    except Exception:
        return None
    if isinstance(raw, pa.Scalar):
        raw = raw.as_py()
    if raw is None or isinstance(raw, bool) or not isinstance(raw, _EXACT_TYPES):
        return None
    if isinstance(raw, dt.datetime) and raw.tzinfo is not None:
        return None
    ok, value = literal_value(expr, schema.field(column).type)
    if not ok or type(value) is not type(raw) or value != raw:
        return None
    return value


def _implied(exact: tuple[Leaf, ...] | None, constants: dict[str, Any]) -> bool:
    """Whether every row holding ``constants`` (identity partition values) satisfies the
    filter whose exact conjuncts are ``exact``."""
    if not exact:
        return False  # no filter (nothing to drop), or not exactly conjuncts
    for leaf in exact:
        if leaf.column not in constants:
            return False
        value = constants[leaf.column]
        if isinstance(leaf, IsNull):
            if (value is None) == leaf.negated:
                return False
            continue
        if value is None or isinstance(value, bool) or not isinstance(value, _EXACT_TYPES):
            return False
        if isinstance(value, dt.datetime) and value.tzinfo is not None:
            return False
        if isinstance(leaf, InSet):
            if any(type(w) is not type(value) for w in leaf.values) or value not in leaf.values:
                return False
        elif not (
            isinstance(leaf, Cmp)
            and type(leaf.value) is type(value)
            and _compare(value, leaf.op, leaf.value)
        ):
            return False
    return True


@functools.lru_cache(maxsize=64)
def projector(spec: PartitionSpec, schema: pa.Schema) -> SpecProjector:
    """The (cached) projector of one spec version over a namespace schema."""
    return SpecProjector(spec, schema)


def _task(
    entry: TableEntry,
    spec: PartitionSpec,
    root: str,
    schema: pa.Schema,
    exact: tuple[Leaf, ...] | None = None,
    named: ResolvedFilter | None = None,
) -> ScanTask:
    values = entry.partition_values(spec)
    storage.check_table_refs(entry.object_id, entry.location, entry.read_branch, entry.read_tag)
    constants = identity_constants(spec, schema, values)
    storage.check_location(entry.location, entry.object_id)
    return ScanTask(
        entry.object_id,
        entry.location,
        storage.join(root, entry.location),
        None if entry.read_version is None else int(entry.read_version),
        entry.read_branch,
        entry.read_tag,
        entry.spec_id,
        values,
        constants,
        _implied(exact, constants) or (named is not None and named.implied(values)),
        entry.stats,
    )
