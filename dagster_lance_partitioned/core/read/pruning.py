"""Partition pruning: project a filter on source columns onto each spec version's partition
columns, and select the partition tables with one query against ``__manifest``.

Single-field rules live with the transforms (``Transform.project``, driven by what the transform
preserves); this module adds what spans several fields (year/month/day/hour chains, multi-column
hashes) and what an expression's SQL still reveals about ranges (calendar windows; ``CASE WHEN``
range/list expressions analysed branch by branch). A projection may keep too much, never too
little: what it cannot use becomes TRUE."""

from __future__ import annotations

import datetime as dt
import itertools
from dataclasses import dataclass
from typing import Any

import datafusion as dfn
import pyarrow as pa

from ..expr.filters import literal_value
from ..expr.predicates import (
    FALSE,
    TRUE,
    UNKNOWN,
    And,
    Cmp,
    Const,
    InSet,
    IsNan,
    IsNull,
    Leaf,
    Like,
    Or,
    Pred,
    conj,
    disj,
    to_sql,
)
from ..manifest.layout import SEP
from ..manifest.snapshot import ManifestSnapshot, TableEntry
from ..manifest.stats import STATS_COLUMN
from ..partitioning.expressions import CompiledExpression, coerce_result, compiled, ordered_context
from ..partitioning.partition_spec import PartitionSpec, SpecField, source_names, source_types
from ..partitioning.transforms import ExpressionTransform, Granularity, Transform, value_set
from ..partitioning.windows import parse_window

_MAX_COMBINATIONS = 1024


@dataclass
class _Field:
    spec_field: SpecField
    sources: list[str | None]
    types: list[pa.DataType]
    transform: Transform
    compiled: CompiledExpression | None = None
    case: _CaseShape | None = None

    def evaluate(self, *columns: list[Any]) -> list[Any]:
        """Partition values for literal source values (one list per source)."""
        if self.compiled is None:
            f = self.spec_field
            self.compiled = compiled(f.sql(self.types), self.types, label=f.field_id)
        arrays = [pa.array(col, type=t) for col, t in zip(columns, self.types, strict=True)]
        values = coerce_result(
            self.compiled.evaluate(arrays), self.spec_field.result_type, self.spec_field.field_id
        )
        out: list[Any] = values.to_pylist()
        return out


class SpecProjector:
    """Projects predicates on source columns onto one spec version's partition columns."""

    def __init__(self, spec: PartitionSpec, schema: pa.Schema) -> None:
        self.spec = spec
        self.fields: list[_Field] = []
        for f in spec.fields:
            types = source_types(f, schema)
            self.fields.append(_Field(f, source_names(f, schema), types, f.transform_for(types)))

    def project(self, pred: Pred) -> Pred:
        """A predicate on partition columns kept by every partition that may match ``pred``."""
        if pred is UNKNOWN:
            return TRUE
        if isinstance(pred, Const):
            return pred
        if isinstance(pred, And):
            return conj([self.project(p) for p in pred.parts] + self._multi_source(pred.parts))
        if isinstance(pred, Or):
            return disj([self.project(p) for p in pred.parts])
        if isinstance(pred, IsNan):
            return TRUE  # partition values say nothing of NaN (a NaN partition matches)
        assert isinstance(pred, Cmp | InSet | IsNull | Like)
        return conj(self._leaf(pred))

    def _single(self, column: str) -> list[_Field]:
        return [f for f in self.fields if f.sources == [column]]

    def _leaf(self, leaf: Leaf) -> list[Pred]:
        leaf = self._inclusive(leaf)
        out: list[Pred] = []
        for f in self._single(leaf.column):
            col = f.spec_field.column
            try:
                projected = f.transform.project(leaf, col, f.evaluate)
                if isinstance(f.transform, ExpressionTransform):
                    projected = conj([projected, self._expression_range(f, leaf)])
                out.append(projected)
            except Exception:  # a literal the expression cannot take: keep the partitions
                out.append(TRUE)
        out.append(self._chain(leaf))
        return out

    def _inclusive(self, leaf: Leaf) -> Leaf:
        """``< v`` as ``<= (v - 1 unit)`` and ``> v`` as ``>= (v + 1 unit)`` on discrete types,
        so bounds map exactly through the transforms."""
        if not (isinstance(leaf, Cmp) and leaf.op in ("<", ">")):
            return leaf
        t = self._type_of(leaf.column)
        stepped = _step(leaf.value, t, -1 if leaf.op == "<" else 1) if t is not None else None
        if stepped is None:
            return leaf
        return Cmp(leaf.column, "<=" if leaf.op == "<" else ">=", stepped)

    def _type_of(self, column: str) -> pa.DataType | None:
        for f in self.fields:
            for name, t in zip(f.sources, f.types, strict=True):
                if name == column:
                    return t
        return None

    # -- year/month/day/hour of one column, combined ------------------------------------------
    def _chain(self, leaf: Leaf) -> Pred:
        if not (isinstance(leaf, Cmp) and leaf.op in ("<", "<=", ">", ">=")):
            return TRUE
        units = {
            f.transform.granularity: f
            for f in self._single(leaf.column)
            if f.transform.granularity is not None
        }
        chain: list[_Field] = []
        for unit in Granularity:  # coarsest first
            if unit not in units:
                break
            chain.append(units[unit])
        if len(chain) < 2:
            return TRUE
        upper = leaf.op in ("<", "<=")
        bound = [f.evaluate([leaf.value])[0] for f in chain]  # strict bounds made inclusive
        if any(b is None for b in bound):
            return TRUE
        return _lexicographic([f.spec_field.column for f in chain], bound, upper)

    # -- columns hashed together ---------------------------------------------------------------
    def _multi_source(self, parts: tuple[Pred, ...]) -> list[Pred]:
        pins: dict[str, set[Any]] = {}
        for p in parts:
            if isinstance(p, Cmp) and p.op == "=":
                pins.setdefault(p.column, set()).add(p.value)
            elif isinstance(p, InSet) and not p.negated:
                pins.setdefault(p.column, set()).update(p.values)
            elif isinstance(p, IsNull) and not p.negated:
                pins.setdefault(p.column, set()).add(None)
        out: list[Pred] = []
        for f in self.fields:
            if len(f.sources) < 2 or any(s is None or s not in pins for s in f.sources):
                continue
            combos = list(
                itertools.islice(
                    itertools.product(*(sorted(pins[s], key=repr) for s in f.sources)),  # type: ignore[index]
                    _MAX_COMBINATIONS + 1,
                )
            )
            if len(combos) > _MAX_COMBINATIONS:
                continue
            try:
                values = f.evaluate(*[list(c) for c in zip(*combos, strict=True)])
            except Exception:
                continue
            out.append(value_set(f.spec_field.column, values))
        return out

    # -- ranges through expressions ------------------------------------------------------------
    def _expression_range(self, f: _Field, leaf: Leaf) -> Pred:
        """A range on the source mapped through an expression this package generates: a
        calendar window whose start never decreases, or a ``CASE WHEN`` of ranges / lists."""
        col = f.spec_field.column
        if isinstance(leaf, Cmp) and leaf.op in ("<", "<=", ">", ">="):
            window = parse_window(f.spec_field.sql(f.types), f.types[0])
            if window is not None and window.monotone(f.types[0]):
                # a window start never decreases as the source grows: bounds map through it
                bound = f.evaluate([leaf.value])[0]
                return TRUE if bound is None else Cmp(col, leaf.op[0] + "=", bound)
            if f.case is None:
                f.case = _CaseShape.parse(f.spec_field.sql(f.types), f.types[0])
            if f.case.valid:
                lo = leaf.value if leaf.op in (">", ">=") else None
                hi = leaf.value if leaf.op in ("<", "<=") else None
                return value_set(col, f.case.reachable(lo, hi))
        return TRUE


def _lexicographic(columns: list[str], bound: list[Any], upper: bool) -> Pred:
    """(columns) <= bound (``upper``) or >= bound, compared as tuples."""
    last = len(columns) - 1
    pred: Pred = Cmp(columns[last], "<=" if upper else ">=", bound[last])
    for i in range(last - 1, -1, -1):
        strict = Cmp(columns[i], "<" if upper else ">", bound[i])
        pred = disj([strict, conj([Cmp(columns[i], "=", bound[i]), pred])])
    return pred


def _step(value: Any, t: pa.DataType, direction: int) -> Any:
    """The next representable value after ``value`` (direction +1) or before it (-1), at
    microsecond resolution for timestamps (partition boundaries fall on whole microseconds);
    None for types without a next value."""
    if pa.types.is_integer(t) and isinstance(value, int) and not isinstance(value, bool):
        return value + direction
    if pa.types.is_timestamp(t) and isinstance(value, dt.datetime):
        if value.tzinfo is not None:  # exact time, not wall-clock arithmetic across DST
            value = value.astimezone(dt.UTC)
        return value + direction * dt.timedelta(microseconds=1)
    if pa.types.is_date(t) and isinstance(value, dt.date):
        return value + direction * dt.timedelta(days=1)
    return None


@dataclass
class _CaseShape:
    """``CASE WHEN <cond on col0> THEN <literal> ... ELSE <literal> END`` as branches:
    (kind, bounds/values, label) with kind in ``lt``, ``le``, ``in``, ``null``."""

    valid: bool
    branches: list[tuple[str, Any, Any]]
    default: Any
    has_default: bool

    @classmethod
    def parse(cls, sql: str, source_type: pa.DataType) -> _CaseShape:
        invalid = cls(False, [], None, False)
        ctx = ordered_context()
        schema = pa.schema([("col0", source_type)])
        ctx.register_record_batches(
            "t", [[pa.RecordBatch.from_arrays([pa.array([], source_type)], schema=schema)]]
        )
        try:
            plan = ctx.sql(f"SELECT {sql} AS v FROM t").logical_plan()
            expr = plan.to_variant().projections()[0]
        except Exception:
            return invalid
        v = expr.to_variant()
        while type(v).__name__ == "Alias":
            v = v.expr().to_variant()
        if type(v).__name__ != "Case" or v.expr() is not None:
            return invalid
        branches: list[tuple[str, Any, Any]] = []
        for when, then in v.when_then_expr():
            ok, label = _label(then)
            cond = _condition(when, source_type)
            if not ok or cond is None:
                return invalid
            branches.append((cond[0], cond[1], label))
        else_expr = v.else_expr()
        if else_expr is None:
            return cls(True, branches, None, True)
        ok, default = _label(else_expr)
        return cls(ok, branches, default, True) if ok else invalid

    def reachable(self, lo: Any, hi: Any) -> list[Any]:
        """Labels of the branches that values in [lo, hi] (None = unbounded) can reach."""
        labels: list[Any] = []
        floor: Any = None  # values below this were taken by earlier ``<``/``<=`` branches
        open_region = True  # whether earlier branches only removed a lower part of the line
        for kind, arg, label in self.branches:
            if kind == "null":
                continue  # a range never holds NULL
            if kind in ("lt", "le"):
                lower_ok = hi is None or floor is None or _le(floor, hi)
                upper_ok = lo is None or _le(lo, arg)
                if lower_ok and upper_ok:
                    labels.append(label)
                if open_region and (floor is None or _le(floor, arg)):
                    floor = arg
            else:  # "in": listed values
                if any((lo is None or _le(lo, x)) and (hi is None or _le(x, hi)) for x in arg):
                    labels.append(label)
                open_region = False
        if self.has_default and (not open_region or floor is None or hi is None or _le(floor, hi)):
            labels.append(self.default)
        return labels


def _le(a: Any, b: Any) -> bool:
    try:
        return bool(a <= b)
    except TypeError:
        return True  # incomparable: assume reachable


def _label(expr: Any) -> tuple[bool, Any]:
    v = expr.to_variant()
    kind = type(v).__name__
    if kind in ("Cast", "TryCast"):
        return _label(v.expr())
    if kind != "Literal":
        return False, None
    try:
        value = expr.python_value()
    except Exception:
        return False, None
    return True, value.as_py() if isinstance(value, pa.Scalar) else value


def _is_col0(expr: Any) -> bool:
    v = expr.to_variant()
    kind = type(v).__name__
    if kind in ("Cast", "TryCast"):
        return _is_col0(v.expr())
    return kind == "Column" and v.name() == "col0"


def _condition(expr: Any, t: pa.DataType) -> tuple[str, Any] | None:
    v = expr.to_variant()
    kind = type(v).__name__
    if kind == "IsNull" and _is_col0(v.expr()):
        return ("null", None)
    if kind == "InList" and not v.negated() and _is_col0(v.expr()):
        values = []
        for item in v.list():
            ok, value = literal_value(item, t)
            if not ok:
                return None
            values.append(value)
        return ("in", tuple(x for x in values if x is not None))
    if kind == "BinaryExpr" and _is_col0(v.left()) and v.op() in ("<", "<=", "="):
        ok, value = literal_value(v.right(), t)
        if not ok or value is None:
            return None
        return {"<": ("lt", value), "<=": ("le", value), "=": ("in", (value,))}[v.op()]
    return None


# -- the manifest query -----------------------------------------------------------------------
@dataclass(frozen=True)
class SpecPruning:
    """One spec version's part of a scan plan."""

    spec_id: int
    predicate: str  # over partition_field_* columns (TRUE: every partition of the version)
    kept: int
    total: int


def manifest_where(
    manifest_schema: pa.Schema, predicates: dict[int, Pred], dialect: str = "datafusion"
) -> str:
    """The WHERE clause selecting the partition tables of every spec version whose projected
    predicate may hold (the spec's Appendix D form), over a manifest of ``manifest_schema``."""
    types = {f.name: f.type for f in manifest_schema}
    ors = []
    for spec_id, pred in sorted(predicates.items()):
        if pred == FALSE:
            continue
        prefix = f"object_id LIKE 'v{spec_id}{SEP}%'"
        ors.append(prefix if pred == TRUE else f"({prefix} AND {to_sql(pred, types, dialect)})")
    return f"object_type = 'table' AND ({' OR '.join(ors) if ors else 'FALSE'})"


def manifest_query(manifest_schema: pa.Schema, predicates: dict[int, Pred]) -> str:
    """The whole ``__manifest`` query of a plan, as SQL."""
    return f"SELECT object_id FROM __manifest WHERE {manifest_where(manifest_schema, predicates)}"


def select_tables(snapshot: ManifestSnapshot, sql: str) -> set[str]:
    """Object ids the manifest query returns, run by DataFusion over the loaded manifest."""
    ctx = dfn.SessionContext()
    batches = snapshot.table.to_batches() or [
        pa.RecordBatch.from_arrays(
            [pa.array([], f.type) for f in snapshot.arrow_schema], schema=snapshot.arrow_schema
        )
    ]
    ctx.register_record_batches("__manifest", [batches])
    out = ctx.sql(sql).to_arrow_table()
    return set(out.column("object_id").to_pylist())


_ENTRY_COLUMNS = (
    "object_id",
    "object_type",
    "location",
    "metadata",
    "read_version",
    "read_branch",
    "read_tag",
    STATS_COLUMN,
)


def scan_manifest(snapshot: ManifestSnapshot, where: str) -> list[TableEntry]:
    """The table entries matching ``where`` (Lance dialect), read by Lance's scanner from the
    manifest version (using its scalar indexes, without reading every row)."""
    present = set(snapshot.arrow_schema.names)
    columns = list(_ENTRY_COLUMNS)
    columns += [f.column for s in snapshot.specs.values() for f in s.fields if f.column in present]
    with snapshot.reading("querying __manifest"):
        rows = snapshot.query_dataset.to_table(
            columns=[c for c in dict.fromkeys(columns) if c in present], filter=where
        )
    return snapshot.entries(snapshot.check_rows(rows))
