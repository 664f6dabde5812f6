"""Committing a row-level change: the per-table outcomes (detached versions of changed tables,
new tables, emptied tables) registered in **one** manifest commit.

:func:`run` is the core's loop: plan on the snapshot the commit is built on, apply the
per-table changes (in threads), commit; when a concurrent commit wins, plan again on the
latest snapshot -- partitions whose pin did not move reuse the detached version already made,
partitions that moved are redone on their new version, so no concurrent change is lost. After
:attr:`~..tuning.Tuning.max_redo` rounds in which some touched partition kept moving,
:class:`CommitConflictError` is raised (nothing visible).

:func:`commit_outcomes` commits outcomes made elsewhere (Spark tasks) against a pinned
snapshot: when a concurrent commit moved a touched partition (or registered a partition the
change creates), it raises :class:`StaleChangeError` instead and the caller makes the change
again on the new state."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

import pyarrow as pa

from ..concurrency import parallel_map
from ..errors import CommitConflictError, StaleChangeError
from ..manifest import retire, stats
from ..manifest.commit_summary import WRITER_ID, CommitSummary, Operation
from ..manifest.edit import ManifestEdit, NothingToCommit
from ..manifest.layout import SEP, TABLE_NAME, partition_field_columns, table_location
from ..manifest.naming import NamespaceNaming, ensure_naming_key
from ..manifest.registration import NameOf, TableVersion, add_table, pin_version
from ..manifest.snapshot import ManifestSnapshot
from ..manifest.state import NamespaceState, load_snapshot
from ..manifest.store import ManifestStore, delete_empty_namespaces
from ..partitioning.partition_spec import PartitionSpec
from ..schema.conform import conform_for_write, table_write_schema
from ..search.catalog import declared
from ..tuning import tuning
from . import keys as K
from .change import RowChangeResult
from .executor import TableExecutor
from .plan import ChangePlan, Key


@dataclass
class Counts:
    """Rows a change inserted, updated, deleted and moved."""

    inserted: int = 0
    updated: int = 0
    deleted: int = 0
    moved: int = 0


@dataclass
class _Round:
    """State kept across the re-plans of one core operation."""

    naming: NamespaceNaming | None = None  # of new partition namespaces (set by the first round)
    locations: dict[Key, str] = field(default_factory=dict)  # new table locations
    result: RowChangeResult | None = None
    epoch: int | None = None  # retirement epoch up to which the versions made are checked

    def forget_retired(
        self, store: ManifestStore, snap: ManifestSnapshot, executor: TableExecutor
    ) -> None:
        """Drop the versions and new tables made before a retirement (announced since the
        last round, up to ``snap``) named their tables: they are made again."""
        if self.epoch is None or self.epoch == retire.epoch(snap):
            return
        made = executor.made(self.epoch)
        gone = {use.location for use in retire.conflicting(snap, made)}
        executor.forget(gone)
        self.locations = {k: loc for k, loc in self.locations.items() if loc not in gone}

    def name_of(self, prefix: Key) -> str:
        assert self.naming is not None
        return self.naming.namespace_name(prefix)


def new_table_location(spec: PartitionSpec, key: Key, name_of: NameOf) -> str:
    """A location for the new table of partition ``key`` (named after its object id when its
    partition namespaces are all new)."""
    names = [name_of(key[:level]) for level in range(1, len(spec.fields) + 1)]
    return table_location(SEP.join([spec.namespace, *names, TABLE_NAME]))


def run(
    ns: NamespaceState,
    operation: Operation,
    build: Callable[[ChangePlan], None],
    properties: dict[str, str],
    executor: TableExecutor | None = None,
) -> RowChangeResult:
    """Plan with ``build`` on the latest manifest, make the detached versions and commit them
    in one manifest commit (re-planned on conflicts, see the module doc)."""
    store = ns.store
    if ensure_naming_key(store, ns.refresh().snapshot):
        ns.refresh()
    executor = executor or TableExecutor(ns.uri, store.storage_options)
    state = _Round()
    rounds = [0, 0]  # planning rounds, rounds that had to redo a partition

    def plan(snap: ManifestSnapshot) -> ManifestEdit:
        state.forget_retired(store, snap, executor)
        at = NamespaceState(store, snap, pinned=True)
        p = ChangePlan(snap, ns.uri, at.schema_with_ids, at.current_spec)
        executor.index_with(declared(at), at.schema_with_ids)
        if state.naming is None or state.naming.spec_id != p.spec.spec_id:
            state.naming = NamespaceNaming.of(snap, p.spec.spec_id)
        build(p)
        before = executor.misses
        edit = _materialize(p, executor, operation, state)
        state.epoch = retire.epoch(snap)  # what was kept is checked up to here
        if rounds[0] and executor.misses > before:
            rounds[1] += 1
            if rounds[1] > tuning().max_redo:
                raise CommitConflictError(
                    f"{store.root}: partitions this {operation} changes kept being changed by "
                    f"concurrent commits ({tuning().max_redo} re-plans); nothing of it is visible, "
                    "retry it",
                    sorted(p.changes)[:5],
                )
        rounds[0] += 1
        if edit is None:
            raise NothingToCommit
        edit.properties = _properties(operation, sorted(p.deregister), properties)
        return edit

    def result() -> RowChangeResult:
        assert state.result is not None
        return state.result

    return _commit(ns, plan, result)


def _commit(
    ns: NamespaceState,
    plan: Callable[[ManifestSnapshot], ManifestEdit],
    result: Callable[[], RowChangeResult],
) -> RowChangeResult:
    """Commit ``plan`` to the manifest; ``result()`` (set by the last planning round) with the
    manifest version it is visible at (no commit when the plan found nothing to change)."""
    try:
        snap = ns.store.commit(load_snapshot, plan)
    except NothingToCommit:
        ns.refresh()
        return replace(result(), manifest_version=ns.version, committed=False)
    ns.refresh()
    return replace(result(), manifest_version=snap.version)


def _properties(operation: str, removed: list[str], extra: Mapping[str, str]) -> dict[str, str]:
    summary = CommitSummary(operation, overwritten=tuple(removed), writer=WRITER_ID, user=extra)
    return summary.to_properties()


def _materialize(
    p: ChangePlan, executor: TableExecutor, operation: str, state: _Round
) -> ManifestEdit | None:
    """Make the detached versions and new tables of ``p``; the manifest edit registering them
    (None when nothing changes)."""
    items = list(p.changes.values())
    applied = parallel_map(
        lambda it: executor.apply(it[0], it[1], p.schema), items, executor.threads
    )
    counts = Counts(p.inserted, p.updated, p.deleted, p.moved)
    outcomes: list[TableVersion] = []
    for (task, change), done in zip(items, applied, strict=True):
        if change.counted:
            counts.updated += done.updated
            counts.inserted += done.inserted
        outcomes.append(
            TableVersion.of_task(task, done.version, done.rows, done.changed, done.stats)
        )
    write_schema = table_write_schema(p.schema)
    jobs: list[tuple[Key, str, pa.Table]] = []
    for key, parts in sorted(p.creates.items(), key=lambda kv: repr(kv[0])):
        rows = K.concat(parts)
        assert rows is not None
        rows = pa.Table.from_batches(
            [conform_for_write(b, write_schema) for b in rows.to_batches()], schema=write_schema
        )
        location = state.locations.setdefault(key, new_table_location(p.spec, key, state.name_of))
        jobs.append((key, location, rows))
    made = parallel_map(lambda j: executor.create(j[1], j[2]), jobs, executor.threads)
    for (key, location, rows), version in zip(jobs, made, strict=True):
        found = stats.of_table(rows, p.schema)
        outcomes.append(TableVersion.new_table(key, location, version, rows.num_rows, found))
    edit, result = manifest_edit(
        p.snap, p.spec, outcomes, p.deregister, state.name_of, operation, counts
    )
    # whatever was made in earlier rounds is checked against retirements up to p.snap
    made_at = retire.epoch(p.snap)
    edit.uses = [u for o in outcomes if (u := o.use(made_at)) is not None]
    state.result = result
    if not edit.upserts and not edit.deletes:
        return None
    return edit


def manifest_edit(
    snap: ManifestSnapshot,
    spec: PartitionSpec,
    outcomes: Iterable[TableVersion],
    deregister: Iterable[str],
    name_of: NameOf,
    operation: str,
    counts: Counts,
) -> tuple[ManifestEdit, RowChangeResult]:
    """The manifest edit registering ``outcomes`` (and deregistering the tables ``deregister``
    names and those left empty) on ``snap``, and the result it makes."""
    edit = ManifestEdit()
    changed: list[str] = []
    created: list[str] = []
    removed = set(deregister)
    new: list[TableVersion] = []
    for out in outcomes:
        if out.object_id is None:
            new.append(out)
        elif out.rows == 0:
            removed.add(out.object_id)
        elif out.changed:
            pin_version(edit, out.object_id, out.version, out.stats)
            changed.append(out.object_id)
    if new:
        edit.new_columns = partition_field_columns([spec])
        edit.upserts[spec.namespace] = {"object_type": "namespace"}
        keys = [out.key for out in new if out.key is not None]
        prefixes = {k[:n] for k in keys for n in range(1, len(k) + 1)}
        ns_ids = dict(snap.find_namespaces(spec, prefixes))
        for out in sorted(new, key=lambda o: repr(o.key)):
            assert out.key is not None and out.location is not None
            oid = add_table(
                edit, spec, out.key, out.location, out.version, ns_ids, name_of, out.stats
            )
            created.append(oid)
    if removed:
        edit.deletes.update(removed)
        delete_empty_namespaces(snap, edit)
    result = RowChangeResult(
        operation=operation,
        manifest_version=snap.version,
        rows_inserted=counts.inserted,
        rows_updated=counts.updated,
        rows_deleted=counts.deleted,
        rows_moved=counts.moved,
        partitions=tuple(sorted({*changed, *created, *removed})),
        partitions_created=tuple(sorted(created)),
        partitions_removed=tuple(sorted(removed)),
    )
    return edit, result


def commit_outcomes(
    ns: NamespaceState,
    base: ManifestSnapshot,
    outcomes: list[TableVersion],
    operation: str,
    counts: Counts,
    properties: Mapping[str, str],
    name_of: NameOf,
) -> RowChangeResult:
    """Register ``outcomes`` (made on the snapshot ``base``) in one manifest commit.

    Concurrent commits that touched none of the outcomes' partitions are kept (the commit is
    built on the latest manifest); when one moved the pin of a changed table, removed it,
    registered a partition an outcome creates, or changed the spec or schema,
    :class:`StaleChangeError` is raised and nothing is visible. Nothing to register: no
    commit (``committed=False``)."""
    store = ns.store
    base_state = NamespaceState(store, base, pinned=True)
    spec = base_state.current_spec
    schema = base_state.schema_with_ids
    outcome: list[RowChangeResult] = []

    made_at = retire.epoch(base)
    uses = [u for o in outcomes if (u := o.use(made_at)) is not None]

    def plan(snap: ManifestSnapshot) -> ManifestEdit:
        if snap.version != base.version:
            _check_unchanged(NamespaceState(store, snap, pinned=True), spec, schema, outcomes)
            retired = retire.conflicting(snap, uses)
            if retired:
                raise StaleChangeError(
                    f"{store.root}: a maintenance run retired what {len(retired)} partition "
                    "table(s) of this change were made on",
                    sorted({u.location for u in retired})[:5],
                )
        edit, result = manifest_edit(snap, spec, outcomes, (), name_of, operation, counts)
        edit.uses = uses
        outcome[:] = [result]
        if not edit.upserts and not edit.deletes:
            raise NothingToCommit
        edit.properties = _properties(operation, sorted(result.partitions_removed), properties)
        return edit

    return _commit(ns, plan, lambda: outcome[0])


def _check_unchanged(
    now: NamespaceState,
    spec: PartitionSpec,
    schema: pa.Schema,
    outcomes: list[TableVersion],
) -> None:
    """Raise :class:`StaleChangeError` when ``now`` (a later manifest version) changed what
    the outcomes were made on."""
    if now.current_spec.spec_id != spec.spec_id or not now.schema_with_ids.equals(
        schema, check_metadata=True
    ):
        raise StaleChangeError(
            f"{now.uri}: the spec or schema changed since the change was planned"
        )
    snap = now.snapshot
    base = {o.object_id: o.base_version for o in outcomes if o.object_id is not None}
    rows = snap.rows_by_id(base).to_pylist() if base else []
    current = {r["object_id"]: r for r in rows if r.get("object_type") == "table"}
    stale = [
        oid
        for oid, version in base.items()
        if (row := current.get(oid)) is None
        or row.get("read_version") != version
        or row.get("read_branch") is not None
    ]
    created = snap.find_tables(spec, [o.key for o in outcomes if o.object_id is None and o.key])
    stale += [entry.object_id for entry in created.values()]
    if stale:
        raise StaleChangeError(
            f"{now.uri}: {len(stale)} partition(s) this change touches were changed by a "
            "concurrent commit",
            sorted(stale)[:5],
        )
