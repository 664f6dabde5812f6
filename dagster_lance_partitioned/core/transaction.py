"""Transactions: schema and partition-spec changes and at most one data operation on a
namespace, made visible together or not at all.

``with ns.transaction() as tx:`` collects ``add_columns``, ``rename_column``, ``drop_column``,
``promote_column`` and ``update_spec`` (each checked when called, against the schema and specs
the earlier calls made) and then one of ``write``, ``merge_insert``, ``delete`` or ``update``.
Nothing is written inside the block; an exception there discards everything. On exit:

- Schema and spec changes alone are **one** manifest commit (planned again on the latest
  version when a concurrent commit wins, like every metadata change).
- With a data operation, the data is written and indexed first, as partition-table versions
  nobody sees yet, against the schema and spec the changes make, and every refusal the data
  operation can raise (bad rows, a stray partition, a merge key at fault) is raised then, with
  nothing committed. Then the changes and the data are committed back to back, each commit
  carrying the transaction's id (commit property ``transaction``). Lance commits a version's
  table metadata and its rows in separate operations (``UpdateConfig`` and ``Update``; pylance
  14 can batch only appends), so these are two manifest versions: the first holds the new
  schema and spec without the data, a state any reader reads (new columns are null, a new spec
  has no partitions yet). When the data commit fails after the first landed and nothing else
  was committed in between, the changes are reverted in one more commit; a process killed
  exactly between the two leaves the first (never a partial data commit).
- A change already in place is no change (see :mod:`.evolution`): the same transaction
  run again after such a kill finds its changes made and commits its data alone.
- A transaction with only a data operation is that operation's own single commit.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from .concurrency import decided_by, in_background
from .errors import (
    CommitConflictError,
    PartitionedNamespaceError,
    SpecError,
    TransactionError,
)
from .evolution import (
    add_columns_step,
    drop_column_step,
    promote_column_step,
    rename_column_step,
    update_spec_step,
)
from .expr.filters import FilterLike
from .manifest.changes import (
    TRANSACTION_PROPERTY,
    ChangedState,
    Changes,
    ChangesFirstStore,
    MetadataStep,
    commit_steps,
)
from .manifest.naming import ensure_naming_key
from .manifest.state import NamespaceState
from .partitioning.partition_spec import (
    PartitionField,
    PartitionSpec,
    SpecField,
    specs_from_metadata,
)
from .schema.namespace_schema import full_schema, live_schema
from .write.mode import WriteMode
from .write.result import WriteResult
from .write.writer import PartitionWriter

if TYPE_CHECKING:
    from .row_changes.change import RowChangeResult
    from .row_changes.merge import MergeOptions


@dataclass(frozen=True)
class TransactionResult:
    """What a transaction committed: ``manifest_version`` holds all of it; ``changes_version``
    is the commit of its schema and spec changes (None: none), ``data`` the data operation's
    result (None: none); ``operations`` every call in order; ``committed`` False when it
    changed nothing."""

    transaction_id: str
    manifest_version: int
    operations: tuple[str, ...]
    changes_version: int | None = None
    data: WriteResult | RowChangeResult | None = None
    committed: bool = True


DataOperation = Callable[[NamespaceState, dict[str, str]], "WriteResult | RowChangeResult"]


class Transaction:
    """Schema and spec changes plus at most one data operation, committed on :meth:`commit`
    (or on leaving a ``with`` block without an exception); see the module doc."""

    def __init__(self, state: NamespaceState) -> None:
        state.require_unpinned("change it in a transaction")
        self._state = state
        self.id = uuid.uuid4().hex
        self._steps: list[MetadataStep] = []
        self._begun = dict(state.snapshot.metadata)  # the version the calls are checked on
        self._metadata = dict(self._begun)  # as the calls so far leave it
        self._data: tuple[str, DataOperation] | None = None
        self._operations: list[str] = []
        self._result: TransactionResult | None = None
        self._closed = False
        self._base = state.version  # the version the commit was prepared on

    # -- the context manager ----------------------------------------------------------------
    def __enter__(self) -> Transaction:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None and self._result is None:
            self.commit()
        else:
            self._closed = True  # discarded: nothing was written

    @property
    def result(self) -> TransactionResult:
        """What the transaction committed (after it was committed)."""
        if self._result is None:
            raise TransactionError("the transaction has not been committed")
        return self._result

    @property
    def uri(self) -> str:
        """The namespace root."""
        return self._state.uri

    @property
    def storage_options(self) -> dict[str, str] | None:
        """Storage options of the namespace's tables."""
        return self._state.storage_options

    @property
    def committed(self) -> bool:
        """Whether :meth:`commit` has run (and returned)."""
        return self._result is not None

    @property
    def has_changes(self) -> bool:
        """Whether schema or spec changes were added."""
        return bool(self._steps)

    @property
    def schema(self) -> pa.Schema:
        """The namespace schema as the changes so far leave it."""
        return live_schema(full_schema(self._metadata))

    @property
    def current_spec(self) -> PartitionSpec:
        """The partition spec the data operation is partitioned by."""
        return specs_from_metadata(self._metadata)[-1]

    # -- schema and spec changes ------------------------------------------------------------
    def add_columns(self, fields: pa.Field | Sequence[pa.Field] | pa.Schema) -> None:
        """Add nullable columns with new field ids (see ``PartitionedNamespace.add_columns``)."""
        self.add_step(add_columns_step(fields))

    def rename_column(self, old: str, new: str) -> None:
        """Rename a column, keeping its field id (see ``PartitionedNamespace.rename_column``)."""
        self.add_step(rename_column_step(old, new))

    def drop_column(self, name: str) -> None:
        """Drop a column the current spec (as changed so far) does not use (nothing when it is
        dropped already)."""
        self.add_step(drop_column_step(name))

    def promote_column(self, name: str, wider_type: pa.DataType) -> None:
        """Widen a column's type (e.g. int32 -> int64; nothing when it has that type)."""
        self.add_step(promote_column_step(name, wider_type))

    def update_spec(self, partition_fields: Sequence[PartitionField | SpecField]) -> None:
        """Add spec version N+1 (nothing when the fields equal the current spec's); the data
        operation of the transaction is partitioned by it."""
        if any(s.draft for s in self._state.specs):
            raise SpecError(
                f"{self._state.uri} has draft-shaped partition specs: run upgrade() before "
                "changing its spec in a transaction"
            )
        self.add_step(update_spec_step(partition_fields))

    def add_step(self, step: MetadataStep) -> None:
        """Add a schema or spec change (checked now against the changes before it)."""
        self._open()
        if self._data is not None:
            raise TransactionError(
                f"{step.operation}: schema and spec changes come before the transaction's "
                f"data operation ({self._data[0]})"
            )
        self._metadata.update(step.apply(self._metadata))  # raises naming what is refused
        self._steps.append(step)
        self._operations.append(step.operation)

    # -- the data operation -----------------------------------------------------------------
    def write(
        self,
        data: Any,
        mode: WriteMode = "append",
        *,
        commit_properties: dict[str, str] | None = None,
        partitions: Sequence[Mapping[str, Any]] | None = None,
    ) -> None:
        """Write ``data`` as ``PartitionedNamespace.write`` does, under the schema and spec the
        transaction's changes make."""

        def run(state: NamespaceState, props: dict[str, str]) -> WriteResult:
            return write_rows(
                state,
                data,
                mode,
                commit_properties={**(commit_properties or {}), **props},
                partitions=partitions,
            )

        self._set_data("write", run)

    def merge_insert(
        self,
        data: Any,
        on: str | Sequence[str] | MergeOptions,
        *,
        commit_properties: dict[str, str] | None = None,
    ) -> None:
        """Upsert ``data`` on the key column(s) ``on`` or as a ``MergeOptions`` says, as
        ``PartitionedNamespace.merge_insert`` does."""
        from .row_changes.merge import MergeOptions, merge_rows

        options = MergeOptions.of(on)

        def run(state: NamespaceState, props: dict[str, str]) -> RowChangeResult:
            return merge_rows(
                state, data, options, commit_properties={**(commit_properties or {}), **props}
            )

        self._set_data("merge_insert", run)

    def delete(
        self, filter: FilterLike, *, commit_properties: dict[str, str] | None = None
    ) -> None:
        """Delete the rows matching ``filter`` as ``PartitionedNamespace.delete`` does."""
        from .row_changes.delete import delete_rows

        def run(state: NamespaceState, props: dict[str, str]) -> RowChangeResult:
            return delete_rows(
                state, filter, commit_properties={**(commit_properties or {}), **props}
            )

        self._set_data("delete", run)

    def update(
        self,
        filter: FilterLike,
        set: Mapping[str, str],
        *,
        commit_properties: dict[str, str] | None = None,
    ) -> None:
        """Set columns of the rows matching ``filter`` as ``PartitionedNamespace.update``
        does."""
        from .row_changes.update import update_rows

        def run(state: NamespaceState, props: dict[str, str]) -> RowChangeResult:
            return update_rows(
                state, filter, set, commit_properties={**(commit_properties or {}), **props}
            )

        self._set_data("update", run)

    def _set_data(self, name: str, run: DataOperation) -> None:
        self._open()
        if self._data is not None:
            raise TransactionError(
                f"{name}: a transaction has one data operation and this one has "
                f"{self._data[0]} already"
            )
        self._data = (name, run)
        self._operations.append(name)

    def _open(self) -> None:
        if self._closed:
            raise TransactionError("the transaction was committed or discarded already")

    # -- commit ------------------------------------------------------------------------------
    def commit(self) -> TransactionResult:
        """Commit everything (see the module doc); returns and keeps the result."""
        self._open()
        self._closed = True
        state = self._state
        if not self._steps and self._data is None:
            return self._done(state.version, None, None, False)
        changes = self._prepare()
        props = {TRANSACTION_PROPERTY: self.id}
        if self._data is None:  # planned again on the latest version, as any schema change
            snap = commit_steps(state.store, self._steps, properties=props)
            state.refresh()
            changed = snap.version != self._base
            return self._done(snap.version, snap.version if changed else None, None, changed)
        run = self._data[1]
        if not changes.updates:  # the changes are made already: the data operation alone
            data = run(state, props)
            state.refresh()
            return self._done(data.manifest_version, None, data, data.committed)
        store = ChangesFirstStore(state.store, changes)
        data = run(ChangedState(store, state.snapshot), props)
        made = store.commit_changes()  # when the data operation committed nothing
        state.refresh()
        version = data.manifest_version if data.committed else made.version
        return self._done(version, made.version, data, True)

    def detach_changes(self) -> Changes:
        """The transaction's changes, for an engine that commits them with its data itself
        (Spark's driver, through :class:`.ChangesFirstStore`); the transaction then commits
        nothing of its own."""
        self._open()
        if self._data is not None:
            raise TransactionError(
                "a transaction whose changes an engine commits has no data operation of its own"
            )
        self._closed = True
        changes = self._prepare()
        self._result = TransactionResult(self.id, self._state.version, tuple(self._operations))
        return changes

    def _prepare(self) -> Changes:
        """The changes on the latest version (the naming key given first, when missing)."""
        state = self._state
        state.store.check_store()
        state.refresh()
        if ensure_naming_key(state.store, state.snapshot):
            state.refresh()
        self._base = state.version
        try:
            return Changes.prepare(state.snapshot.metadata, self._steps, self.id)
        except PartitionedNamespaceError as e:
            if state.snapshot.metadata == self._begun:
                raise
            raise CommitConflictError(
                f"{state.uri}: the namespace's schema or partition spec changed while this "
                f"transaction was prepared ({e}); nothing of it is visible, retry it"
            ) from e

    def _done(
        self,
        version: int,
        changes_version: int | None,
        data: WriteResult | RowChangeResult | None,
        committed: bool,
    ) -> TransactionResult:
        self._result = TransactionResult(
            self.id, version, tuple(self._operations), changes_version, data, committed
        )
        return self._result


def write_rows(
    state: NamespaceState,
    data: Any,
    mode: WriteMode,
    *,
    commit_properties: dict[str, str] | None = None,
    partitions: Sequence[Mapping[str, Any]] | None = None,
    listing: Future[int | None] | None = None,
) -> WriteResult:
    """Write ``data`` into the namespace version ``state`` reads, partitioned by its current
    spec, in one manifest commit (see ``PartitionedNamespace.write``); ``state`` moves to the
    version made (or, when nothing was committed, to the latest).

    ``listing``: the newest manifest version, being listed meanwhile (a refresh made beside
    routing the rows and opening the tables they go to); when it is not the version ``state``
    reads, the latest is read and the write made from it (``data`` is then routed again)."""
    writer = PartitionWriter(
        state.store,
        state.snapshot,
        state.schema_with_ids,
        state.current_spec,
        mode,
        commit_properties=commit_properties,
        partitions=partitions,
    )
    if listing is None:
        writer.route(data)
    else:

        def route() -> Future[None]:
            writer.route(data)
            opening = in_background(writer.open_tables)
            writer.prepare_ahead()
            return opening

        current, opening = decided_by(listing, state.snapshot.version, route)
        if not current:
            state.read_latest()
            return write_rows(
                state, data, mode, commit_properties=commit_properties, partitions=partitions
            )
        assert opening is not None
        try:
            # the rows' files uploaded while their tables' versions are read
            writer.write_ahead()
        finally:
            opening.result()
    result = writer.finish()
    committed = writer.manifest_commit.committed
    if committed is not None and committed.version == result.manifest_version:
        # the version this write made, from the verified one it was planned on: no re-read
        state.snapshot = committed
    elif not state.pinned:
        state.refresh()
    return result


__all__ = ["Transaction", "TransactionResult", "write_rows"]
