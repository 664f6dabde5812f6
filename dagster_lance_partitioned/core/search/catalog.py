"""The namespace's indexes: declaring one (and indexing every partition table), their
coverage, dropping one, and folding appended rows into them.

Declaring is two manifest commits after the builds: the declaration (table metadata, so that
writers from then on index what they write), then every partition table's indexed version,
registered together in one commit (Lance commits table metadata and rows separately). A build
that fails commits nothing. A process killed between the two commits leaves the index
declared with no partition built: its coverage is ``pending`` (every partition whose size
calls for it not built yet, searched exhaustively, so results stay exact) until the next
``optimize_indexes``, the next write to a partition (for that partition) or declaring the same
index again builds it."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from ..concurrency import parallel_map, table_threads
from ..errors import IndexDeclarationError, IndexNotFoundError
from ..expr.filters import FilterLike
from ..manifest.commit_summary import WRITER_ID, CommitSummary, Operation
from ..manifest.edit import ManifestEdit
from ..manifest.registration import TableVersion
from ..manifest.retire import epoch
from ..manifest.revisions import Registered, register
from ..manifest.snapshot import ManifestSnapshot
from ..manifest.state import HasState, NamespaceState, load_snapshot, state_of
from ..read.planning import ScanTask, plan_namespace
from ..read.scan import open_table
from .build import TableIndexState, index_version, table_state
from .declaration import IndexDeclaration, declarations, declare


@dataclass(frozen=True)
class IndexCoverage:
    """A declared index and how far the partition tables of one manifest version carry it.

    ``partitions_needing`` (object ids in ``needing``) lack an index their size calls for,
    not built yet: registered by a writer that did not know the declaration yet, or every
    partition after a ``create_index`` interrupted between its declaration and its tables'
    commit; they are searched exhaustively (exact results) until ``optimize_indexes``, or a
    write to them, builds it (:attr:`status` ``pending``, :attr:`hint`).
    ``partitions_flat`` are below ``min_rows`` (searched exhaustively, exactly);
    ``unindexed_rows`` are searched without the index although their table's size calls for
    it: appended to indexed tables since their index was built (until ``optimize_indexes``),
    and the ``pending_rows`` of the partitions in ``needing``."""

    name: str
    column: str
    index_type: str
    min_rows: int
    params: dict[str, Any]
    partitions_indexed: int
    partitions_needing: int
    partitions_flat: int
    partitions_total: int
    indexed_rows: int
    unindexed_rows: int
    needing: tuple[str, ...] = ()  # object ids of the partitions needing one
    pending_rows: int = 0  # rows of those partitions (part of unindexed_rows)

    @property
    def complete(self) -> bool:
        """Every partition whose size calls for the index has it."""
        return self.partitions_needing == 0

    @property
    def status(self) -> Literal["complete", "pending"]:
        """``complete``, or ``pending`` while partitions in :attr:`needing` lack it."""
        return "complete" if self.complete else "pending"

    @property
    def hint(self) -> str:
        """What a pending index means and what builds it (empty when complete)."""
        if self.complete:
            return ""
        return (
            f"index {self.name!r}: {self.partitions_needing} partition(s) not built yet, "
            "searched exhaustively (results stay exact); the next "
            "ns.maintenance.optimize_indexes() builds them, a write to one of them builds "
            "its own"
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field, with :attr:`status` and :attr:`hint`."""
        out = asdict(self)
        out["needing"] = list(self.needing)
        out["status"] = self.status
        out["hint"] = self.hint
        return out


@dataclass(frozen=True)
class IndexResult:
    """The outcome of a change to indexes: the manifest version after it, the partitions
    whose indexed versions it registered, and those skipped (a concurrent commit changed
    them first; ``optimize_indexes`` picks them up)."""

    manifest_version: int
    partitions: tuple[str, ...]
    skipped: tuple[str, ...] = ()


def declared(ns: NamespaceState | HasState) -> list[IndexDeclaration]:
    """The indexes declared at the manifest version ``ns`` reads (columns as named now)."""
    state = state_of(ns)
    schema = state.schema_with_ids
    return [d.with_column(schema) for d in declarations(state.metadata)]


def find(ns: NamespaceState | HasState, name: str) -> IndexDeclaration:
    """The declared index ``name`` (raises :class:`IndexNotFoundError` listing the others)."""
    found = {d.name: d for d in declared(ns)}
    if name not in found:
        names = ", ".join(sorted(found)) or "none"
        raise IndexNotFoundError(f"no index named {name!r} is declared (declared: {names})")
    return found[name]


def _summary(operation: Operation, index: str | None = None) -> CommitSummary:
    return CommitSummary(operation, writer=WRITER_ID, index=index)


@dataclass(frozen=True)
class Reindex:
    """The indexing of a set of partition tables, to run where the caller chooses (threads
    here, Spark tasks in :func:`dagster_lance_partitioned.spark.build_indexes`): ``decls``
    built (``fold``: appended rows folded in), ``drop`` removed, on each table of ``tasks``."""

    tasks: tuple[ScanTask, ...]
    decls: tuple[IndexDeclaration, ...]
    schema: Any  # the namespace schema with field ids (pa.Schema)
    storage_options: dict[str, str] | None
    fold: bool = False
    drop: tuple[str, ...] = ()

    def new_version(self, task: ScanTask) -> TableVersion | None:
        """The new version of ``task``'s table (None: nothing to change)."""
        if task.read_branch is not None:
            return None  # branch-pinned tables are not written by this package
        ds = open_table(task, self.storage_options)
        done = index_version(
            task.uri,
            ds.version,
            self.decls,
            self.schema,
            self.storage_options,
            object_id=task.object_id,
            fold=self.fold,
            drop=self.drop,
            dataset=ds,
        )
        if done.version == ds.version:
            return None
        return TableVersion.of_task(task, done.version, stats=task.stats)  # the same rows


Runner = Callable[[Reindex], list[TableVersion]]


def run_in_threads(job: Reindex) -> list[TableVersion]:
    """``job`` in this process, a few tables at a time."""
    if not job.tasks:
        return []
    threads = table_threads(job.tasks[0].uri)
    return [r for r in parallel_map(job.new_version, list(job.tasks), threads) if r is not None]


def _reindex(
    state: NamespaceState,
    tasks: Sequence[ScanTask],
    decls: Sequence[IndexDeclaration],
    *,
    fold: bool = False,
    drop: Sequence[str] = (),
    runner: Runner | None = None,
) -> list[TableVersion]:
    """New versions of the tables of ``tasks`` carrying ``decls`` (see ``index_version``), for
    the tables where anything changed."""
    job = Reindex(
        tuple(tasks),
        tuple(decls),
        state.schema_with_ids,
        state.storage_options,
        fold,
        tuple(drop),
    )
    return (runner or run_in_threads)(job)


def _set_metadata(
    state: NamespaceState,
    key: str,
    value: str | None,
    operation: Operation,
    *,
    expect: str | None,
) -> None:
    """Set (or with None remove) one ``__manifest`` metadata key in a commit of its own,
    unless it already holds ``value``; refuses when a concurrent commit set it to something
    other than ``expect`` or ``value``."""

    def plan(snap: ManifestSnapshot) -> ManifestEdit | None:
        current = snap.metadata.get(key) or None
        if current == value:
            return None
        if current != expect:
            raise IndexDeclarationError(
                f"index {key.split('.', 2)[-1]!r} was declared otherwise by a concurrent "
                f"commit: {current}"
            )
        return ManifestEdit(metadata={key: value}, properties=_summary(operation).to_properties())

    state.store.commit(load_snapshot, plan)
    state.refresh()


def create_index(
    ns: NamespaceState | HasState,
    column: str,
    index_type: str,
    *,
    name: str | None = None,
    min_rows: int | None = None,
    params: Mapping[str, Any] | None = None,
    runner: Runner | None = None,
) -> IndexCoverage:
    """Declare an index on ``column`` for the whole namespace and index every partition table
    whose size calls for it (two manifest commits: the declaration, then every table's
    indexed version); returns its coverage. Declaring the same index again indexes the tables
    still lacking it; a different declaration under a taken name is refused."""
    state = state_of(ns)
    state.require_unpinned("create an index")
    state.store.check_store()
    state.refresh()
    decl = declare(
        state.schema_with_ids,
        column,
        index_type,
        name=name,
        min_rows=min_rows,
        params=params or {},
    )
    before = state.metadata.get(decl.key) or None
    value = decl.to_json()
    if before is not None:
        # compared as declared now: a renamed column is followed by its field id
        if IndexDeclaration.from_json(decl.name, before).with_column(state.schema_with_ids) != decl:
            raise IndexDeclarationError(
                f"index {decl.name!r} is already declared as {before}; drop it first or choose "
                "another name"
            )
        value = before  # the same declaration, kept as stored
    made_at = epoch(state.snapshot)
    revisions = _reindex(
        state, plan_namespace(state, None, by_stats=False).tasks, [decl], runner=runner
    )
    _set_metadata(state, decl.key, value, Operation.CREATE_INDEX, expect=None)
    register(state, revisions, _summary(Operation.CREATE_INDEX, decl.name), made_at)
    return coverage(state, decl.name)


def drop_index(ns: NamespaceState | HasState, name: str) -> IndexResult:
    """Remove the declaration ``name`` and its indexes from every partition table (the
    declaration first, then the tables' versions without it in one commit)."""
    state = state_of(ns)
    state.require_unpinned("drop an index")
    state.store.check_store()
    state.refresh()
    decl = find(state, name)
    made_at = epoch(state.snapshot)
    revisions = _reindex(
        state, plan_namespace(state, None, by_stats=False).tasks, [], drop=[decl.name]
    )
    _set_metadata(state, decl.key, None, Operation.DROP_INDEX, expect=decl.to_json())
    done = register(state, revisions, _summary(Operation.DROP_INDEX, decl.name), made_at)
    return IndexResult(done.manifest_version, done.committed, done.skipped)


def optimize_indexes(
    ns: NamespaceState | HasState, filter: FilterLike = None, runner: Runner | None = None
) -> IndexResult:
    """Build the declared indexes the selected partition tables lack and fold rows appended
    since into the ones they have, registered in one manifest commit."""
    state = state_of(ns)
    state.require_unpinned("optimize its indexes")
    state.store.check_store()
    state.refresh()
    decls = declared(state)
    if not decls:
        return IndexResult(state.version, ())
    made_at = epoch(state.snapshot)
    revisions = _reindex(
        state, plan_namespace(state, filter, by_stats=False).tasks, decls, fold=True, runner=runner
    )
    done: Registered = register(state, revisions, _summary(Operation.OPTIMIZE_INDEXES), made_at)
    return IndexResult(done.manifest_version, done.committed, done.skipped)


def table_states(
    state: NamespaceState, decls: Sequence[IndexDeclaration], tasks: Sequence[ScanTask]
) -> list[tuple[ScanTask, list[TableIndexState]]]:
    """What each table of ``tasks`` holds of each of ``decls``."""
    schema = state.schema_with_ids
    opts = state.storage_options

    def states_of(task: ScanTask) -> tuple[ScanTask, list[TableIndexState]]:
        ds = open_table(task, opts)
        return task, [table_state(ds, d, schema) for d in decls]

    return parallel_map(states_of, list(tasks), table_threads(state.uri))


def coverages(ns: NamespaceState | HasState, filter: FilterLike = None) -> list[IndexCoverage]:
    """Every declared index with its coverage over the partitions ``filter`` selects."""
    state = state_of(ns)
    decls = declared(state)
    if not decls:
        return []
    return summarize(
        decls, table_states(state, decls, plan_namespace(state, filter, by_stats=False).tasks)
    )


def summarize(
    decls: Sequence[IndexDeclaration],
    found: Sequence[tuple[ScanTask, list[TableIndexState]]],
) -> list[IndexCoverage]:
    """Each declaration's coverage over the tables of ``found`` (from :func:`table_states`)."""
    out = []
    for i, d in enumerate(decls):
        states = [(task, per[i]) for task, per in found]
        needing = tuple(sorted(t.object_id for t, s in states if s.needed and not s.present))
        out.append(
            IndexCoverage(
                name=d.name,
                column=d.column,
                index_type=d.index_type,
                min_rows=d.min_rows,
                params=dict(d.params),
                partitions_indexed=sum(1 for _, s in states if s.present),
                partitions_needing=len(needing),
                partitions_flat=sum(1 for _, s in states if not s.needed and not s.present),
                partitions_total=len(states),
                indexed_rows=sum(s.indexed_rows for _, s in states if s.present),
                # rows searched without the index although their table's size calls for it
                # (appended since it was built, or in a table needing one): not those of
                # tables below min_rows, which are searched flat by design
                unindexed_rows=sum(
                    s.unindexed_rows if s.present else (s.rows if s.needed else 0)
                    for _, s in states
                ),
                needing=needing,
                pending_rows=sum(s.rows for _, s in states if s.needed and not s.present),
            )
        )
    return out


def coverage(ns: NamespaceState | HasState, name: str) -> IndexCoverage:
    """The coverage of the declared index ``name``."""
    find(ns, name)
    return next(c for c in coverages(ns) if c.name == name)
