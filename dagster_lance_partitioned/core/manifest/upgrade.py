"""Upgrading a namespace written in the Jan-2026 draft shape (array-shaped ``partition_spec_v<N>``,
manifest columns named after the partition fields) to the current shape.

The upgrade is two commits, so that every intermediate state reads correctly:

1. one ``__manifest`` commit adding the ``partition_field_<field_id>`` columns, filled from the
   draft columns (which are kept, like any column this package does not know), while the table
   metadata still holds the draft specs;
2. one table-metadata commit replacing the draft specs by current-shape ones.

Re-running after an interruption between the two completes it; running it on a current-shape
namespace changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import lance
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import ManifestError, WriteError
from ..partitioning.partition_spec import (
    PartitionSpec,
    SpecField,
    source_types,
    specs_from_metadata,
)
from ..partitioning.transforms import ExpressionTransform
from ..schema import arrow_json
from .commit_summary import CommitSummary, Operation
from .edit import ManifestEdit
from .layout import PK_KEY, SEP, WRITER_FLAG_KEY, base_manifest_schema, writer_flags
from .snapshot import ManifestSnapshot
from .state import HasState, NamespaceState, state_of
from .store import SCHEMA_KEY, ManifestStore


class _NothingToUpgrade(Exception):
    """Raised inside a manifest commit plan when the latest manifest has no draft spec left."""


@dataclass(frozen=True)
class Conversion:
    """How one manifest version's draft specs map onto current-shape specs and columns."""

    specs: dict[int, PartitionSpec]  # converted specs, by spec id (draft specs only)
    fills: dict[str, list[tuple[int, str]]]  # new column -> [(spec id, draft column)]
    new_columns: list[pa.Field] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        """Whether there is no draft spec to convert."""
        return not self.specs


def convert_field(sf: SpecField, schema: pa.Schema, field_id: str) -> SpecField:
    """A draft field in the current shape under ``field_id``: a transform when its expression is
    exactly a well-known one of the result type it declares, else the same expression."""
    types = source_types(sf, schema)
    transform = sf.transform_for(types)
    if not isinstance(transform, ExpressionTransform) and (
        transform.result_type(types) == sf.result_type
    ):
        return SpecField(field_id, sf.source_ids, sf.result_type, transform=transform)
    return SpecField(field_id, sf.source_ids, sf.result_type, expression=sf.expression)


def plan_conversion(specs: dict[int, PartitionSpec], schema: pa.Schema) -> Conversion:
    """Current-shape specs for every draft spec, reusing field ids of identical definitions."""
    canonical: list[SpecField] = [f for s in specs.values() if not s.draft for f in s.fields]
    taken = {f.field_id for f in canonical}
    converted: dict[int, PartitionSpec] = {}
    fills: dict[str, list[tuple[int, str]]] = {}
    columns: dict[str, pa.DataType] = {}
    for spec in sorted(specs.values(), key=lambda s: s.spec_id):
        if not spec.draft:
            continue
        fields: list[SpecField] = []
        for draft_field in spec.fields:
            candidate = convert_field(draft_field, schema, "_")
            reused = next(
                (
                    c
                    for c in canonical
                    if c.same_definition(candidate) and c.result_type == candidate.result_type
                ),
                None,
            )
            if reused is None:
                fid, n = draft_field.field_id, 2
                while fid in taken:
                    fid, n = f"{draft_field.field_id}_{n}", n + 1
                taken.add(fid)
                reused = convert_field(draft_field, schema, fid)
                canonical.append(reused)
            if any(f.field_id == reused.field_id for f in fields):
                raise ManifestError(
                    f"draft partition spec v{spec.spec_id} defines partition field "
                    f"{reused.field_id!r} twice"
                )
            fields.append(reused)
            fills.setdefault(reused.column, []).append((spec.spec_id, draft_field.column))
            columns[reused.column] = reused.result_type
        converted[spec.spec_id] = PartitionSpec(spec.spec_id, tuple(fields))
    new_columns = [pa.field(name, t) for name, t in columns.items()]
    return Conversion(converted, fills, new_columns)


def _spec_ids(table: pa.Table) -> list[int | None]:
    out: list[int | None] = []
    for oid in table.column("object_id").to_pylist():
        head = oid.split(SEP, 1)[0]
        out.append(int(head[1:]) if head.startswith("v") and head[1:].isdigit() else None)
    return out


def fill_columns(table: pa.Table, conversion: Conversion) -> pa.Table:
    """``table`` with the current-shape manifest columns present and filled from draft columns.

    A value already in a new column is kept (``coalesce(new, draft)``): partition values of an
    object id never change, and rows written under the current specs have no draft values."""
    for f in base_manifest_schema():
        if f.name not in table.column_names:
            table = table.append_column(f, pa.nulls(table.num_rows, f.type))
    for f in conversion.new_columns:
        idx = table.schema.get_field_index(f.name)
        if idx < 0:
            table = table.append_column(f, pa.nulls(table.num_rows, f.type))
        elif table.schema.field(idx).type != f.type:
            raise ManifestError(
                f"manifest column {f.name!r} has type {table.schema.field(idx).type}, "
                f"but partition field needs {f.type}"
            )
    spec_ids = pa.array(_spec_ids(table), pa.int64())
    for name, sources in conversion.fills.items():
        idx = table.schema.get_field_index(name)
        col = table.column(idx)
        target = table.schema.field(idx)
        for spec_id, draft_column in sources:
            if draft_column == name or table.schema.get_field_index(draft_column) < 0:
                continue
            src = table.column(draft_column)
            if src.type != target.type:
                src = pc.cast(src, target.type, safe=True)
            mask = pc.fill_null(pc.equal(spec_ids, spec_id), False)
            col = pc.if_else(pc.and_(mask, pc.is_null(col)), src, col)
        table = table.set_column(idx, target, col)
    oid_idx = table.schema.get_field_index("object_id")
    oid = table.schema.field(oid_idx)
    if (oid.metadata or {}).get(PK_KEY.encode()) != b"0":
        md = {**(oid.metadata or {}), PK_KEY.encode(): b"0"}
        table = table.set_column(oid_idx, oid.with_metadata(md), table.column(oid_idx))
    return table


def _needs_fill(table: pa.Table, conversion: Conversion) -> bool:
    filled = fill_columns(table, conversion)
    if not filled.schema.equals(table.schema, check_metadata=True):
        return True
    return not all(filled.column(name).equals(table.column(name)) for name in conversion.fills)


class _FillEdit(ManifestEdit):
    """A manifest edit that fills the current-shape partition columns of every row."""

    row_level = False

    def __init__(self, conversion: Conversion, summary: CommitSummary) -> None:
        super().__init__(properties=summary.to_properties())
        self.conversion = conversion

    def apply(self, table: pa.Table) -> pa.Table:
        """The manifest rows with the current-shape columns added and filled."""
        return fill_columns(table, self.conversion)


def _snapshot(ds: lance.LanceDataset) -> ManifestSnapshot:
    return ManifestSnapshot(ds, specs_from_metadata(dict(ds.metadata)))


def _schema_of(snap: ManifestSnapshot) -> pa.Schema:
    return arrow_json.schema_from_json(snap.metadata[SCHEMA_KEY])


def _fill_commit(
    store: ManifestStore, fixed: Conversion | None = None
) -> tuple[ManifestSnapshot, Conversion]:
    """Step 1 (or the repair after step 2): one manifest commit filling the current-shape
    columns, skipped when every row already has them. ``fixed`` pins the conversion (used once
    the metadata no longer holds the draft specs)."""
    latest = _snapshot(store.dataset())
    conversion = fixed or plan_conversion(latest.specs, _schema_of(latest))
    if conversion.empty:
        return latest, conversion
    if not _needs_fill(latest.table, conversion):
        return latest, conversion
    used: list[Conversion] = []

    def plan(snap: ManifestSnapshot) -> ManifestEdit:
        used.clear()
        conv = fixed or plan_conversion(snap.specs, _schema_of(snap))
        if conv.empty:
            raise _NothingToUpgrade
        used.append(conv)
        return _FillEdit(conv, CommitSummary(Operation.UPGRADE))

    try:
        snap = store.commit(_snapshot, plan)
    except _NothingToUpgrade:
        return _snapshot(store.dataset()), Conversion({}, {})
    return snap, used[0]


def refill_after_switch(
    store: ManifestStore, draft_specs: dict[int, PartitionSpec], schema: pa.Schema
) -> int:
    """Fill the current-shape columns of rows that a commit planned under ``draft_specs`` made
    after an upgrade switched the specs (Lance merges such a commit with the switch); returns
    the manifest version."""
    snap, _ = _fill_commit(store, fixed=plan_conversion(draft_specs, schema))
    return snap.version


def migrate_rows(ns: NamespaceState | HasState) -> int:
    """Step 1 of :func:`upgrade` alone: add and fill the current-shape manifest columns (the
    draft specs stay in force); returns the manifest version."""
    ns = state_of(ns)
    snap, _ = _fill_commit(_store(ns))
    return snap.version


def _store(ns: NamespaceState) -> ManifestStore:
    if ns.pinned:
        raise WriteError(
            f"{ns.uri} was opened at manifest version {ns.version}; "
            "open it without a version to upgrade it"
        )
    return ManifestStore(ns.uri, ns.storage_options)


def _upgrade_writer_flag(store: ManifestStore, snap: ManifestSnapshot) -> int:
    """Replace a legacy writer flag (value 2, now Lance's) by ours; returns the version."""
    current = snap.metadata.get(WRITER_FLAG_KEY)
    flags = writer_flags(current)
    if current == flags:
        return snap.version
    return store.update_metadata({WRITER_FLAG_KEY: flags}, base_version=snap.version).version


def upgrade(ns: NamespaceState | HasState) -> int:
    """Rewrite draft-shaped specs and manifest columns in the current shape (idempotent);
    returns the final manifest version."""
    ns = state_of(ns)
    store = _store(ns)
    for _attempt in range(10):
        snap, conversion = _fill_commit(store)
        if conversion.empty:
            return _upgrade_writer_flag(store, snap)
        values = {spec.key: spec.to_json_str() for spec in conversion.specs.values()}
        flags = writer_flags(snap.metadata.get(WRITER_FLAG_KEY))
        if snap.metadata.get(WRITER_FLAG_KEY) != flags:
            values[WRITER_FLAG_KEY] = flags
        if store.dataset().version != snap.version:
            continue  # a commit landed after step 1: fill its rows too before switching specs
        ds = store.update_metadata(values, base_version=snap.version)
        if ds.version == snap.version + 1:
            return ds.version
        # the switch was rebased over concurrent commits made under the draft specs: fill the
        # rows they added with the conversion the metadata no longer describes
        repaired, _ = _fill_commit(store, fixed=conversion)
        return repaired.version
    raise ManifestError(f"{ns.uri}: upgrade kept meeting concurrent commits; retry it")
