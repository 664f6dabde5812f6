"""Writing data whose schema or partitioning differs from its namespace's: the namespace is
opened or created (:func:`open_or_create`), the changes that let it hold the data are planned
(:func:`plan_adoption`: added columns, widened types, a new partition spec), refused when the
writer does not allow them (:meth:`Adoption.refuse`), and made in one transaction with the
data (:func:`write_adopting`), which plans them again on the latest version when another
writer's different changes won the commit.

.. code-block:: python

    def prepare():
        ns = PartitionedNamespace.open(uri)
        adoption = plan_adoption(ns, data.schema, fields)
        adoption.refuse(uri, spec="the partitioning is fixed")
        return ns, adoption

    adopted = write_adopting(prepare, lambda ns, target: target.write(data, "append"))
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from .errors import (
    CommitConflictError,
    EvolutionRefusedError,
    NamespaceNotFoundError,
    StorageError,
)
from .evolution import is_widening
from .namespace import PartitionedNamespace
from .partitioning.partition_spec import PartitionField, PartitionSpec, resolve_fields
from .schema.arrow_json import normalize_type
from .transaction import Transaction
from .write.result import WriteResult

if TYPE_CHECKING:
    from .row_changes.change import RowChangeResult

OPEN_ATTEMPTS = 5  # opens of a namespace that another writer is creating at that instant
ADOPT_ATTEMPTS = 10  # plans of the changes racing other writers' changes

WriteTarget = PartitionedNamespace | Transaction
"""Where data is written: the namespace, or the transaction making the adoption's changes."""


@dataclass(frozen=True)
class Adoption:
    """The changes that let a namespace hold data of another schema and partitioning, planned
    on one manifest version (``base_schema``, ``base_spec``): the columns the data adds
    (nullable, dictionaries as their values), the columns whose types it widens
    (``(column, wider type)``) and, when ``changes_spec``, a new spec of ``fields``."""

    base_schema: pa.Schema
    base_spec: PartitionSpec
    fields: tuple[PartitionField, ...]
    added: tuple[pa.Field, ...] = ()
    widened: tuple[tuple[str, pa.DataType], ...] = ()
    changes_spec: bool = False

    @property
    def changes_schema(self) -> bool:
        """Whether the data adds columns or widens types."""
        return bool(self.added or self.widened)

    @property
    def has_changes(self) -> bool:
        """Whether the namespace changes at all."""
        return self.changes_schema or self.changes_spec

    def refuse(self, subject: str, *, schema: str | None = None, spec: str | None = None) -> None:
        """Raise :class:`EvolutionRefusedError` when the schema changes and ``schema`` (the
        reason, e.g. ``lance/schema_update_mode is 'error'``) refuses it, or the partitioning
        changes and ``spec`` refuses it; the message starts with ``subject``."""
        if schema is not None and self.changes_schema:
            what = [f"new column {f.name!r} ({f.type})" for f in self.added] + [
                f"column {n!r} widened {self.base_schema.field(n).type} -> {t}"
                for n, t in self.widened
            ]
            raise EvolutionRefusedError(
                f"{subject}: the output schema changed ({'; '.join(what)}) and {schema}; "
                "nothing was written"
            )
        if spec is not None and self.changes_spec:
            have = ", ".join(f.field_id for f in self.base_spec.fields) or "none"
            want = ", ".join(f.default_field_id() for f in self.fields) or "none"
            raise EvolutionRefusedError(
                f"{subject}: its partitioning changed (spec v{self.base_spec.spec_id}: {have}; "
                f"now: {want}) and {spec}; nothing was written"
            )

    def transaction(self, ns: PartitionedNamespace) -> Transaction:
        """A transaction of ``ns`` holding the changes (none: nothing to adopt), not
        committed yet; concurrent writers making the same changes converge when they commit
        (see :mod:`.transaction`)."""
        tx = ns.transaction()
        if self.added:
            tx.add_columns(list(self.added))
        for name, typ in self.widened:
            tx.promote_column(name, typ)
        if self.changes_spec:
            tx.update_spec(list(self.fields))
        return tx


def plan_adoption(
    ns: PartitionedNamespace,
    schema: pa.Schema,
    partition_fields: Sequence[PartitionField] | Callable[[pa.Schema], Sequence[PartitionField]],
) -> Adoption:
    """What ``ns`` (at the version it reads) must adopt to hold data of ``schema`` partitioned
    by ``partition_fields`` (or by the fields a function returns for the namespace schema as
    the data's columns leave it: a column's type may decide its transform)."""
    current = ns.schema
    target = adopted_schema(current, schema)
    fields = tuple(partition_fields(target) if callable(partition_fields) else partition_fields)
    added, widened = schema_changes(current, schema)
    return Adoption(current, ns.current_spec, fields, added, widened, not _same_spec(ns, fields))


def schema_changes(
    current: pa.Schema, schema: pa.Schema
) -> tuple[tuple[pa.Field, ...], tuple[tuple[str, pa.DataType], ...]]:
    """Columns ``schema`` adds to ``current`` (nullable, dictionaries as their values), and
    the types it widens."""
    added = tuple(
        f.with_nullable(True).with_type(normalize_type(f.type))
        for f in schema
        if current.get_field_index(f.name) < 0
    )
    widened = tuple(
        (f.name, f.type)
        for f in schema
        if current.get_field_index(f.name) >= 0
        and current.field(f.name).type != f.type
        and is_widening(current.field(f.name).type, f.type)
    )
    return added, widened


def adopted_schema(current: pa.Schema, schema: pa.Schema) -> pa.Schema:
    """``current`` after adopting the columns ``schema`` adds and the types it widens."""
    target = current
    for f in schema:
        i = target.get_field_index(f.name)
        if i < 0:
            target = target.append(f.with_nullable(True))
        elif is_widening(target.field(i).type, f.type):
            target = target.set(i, target.field(i).with_type(f.type))
    return target


def _same_spec(ns: PartitionedNamespace, fields: Sequence[PartitionField]) -> bool:
    """Whether ``fields`` are the current spec's fields."""
    names = set(ns.schema.names)
    if any(c not in names for f in fields for c in f.source_columns):
        return False  # partitioned by a column the namespace does not have yet
    return resolve_fields(fields, ns.schema_with_ids, ns.specs) == ns.current_spec.fields


def open_or_create(
    uri: str,
    storage_options: dict[str, str] | None,
    create: Callable[[], PartitionedNamespace],
) -> PartitionedNamespace:
    """The namespace at ``uri``, made by ``create`` (which should create with ``exist_ok``:
    of writers creating it at once one wins, the others open its namespace) when there is
    none. A storage failure while another writer is creating it (the manifest half-appeared)
    is retried a few times; a lasting one is raised."""

    def attempt() -> PartitionedNamespace:
        try:
            return PartitionedNamespace.open(uri, storage_options)
        except NamespaceNotFoundError:
            return create()

    for n in range(1, OPEN_ATTEMPTS):
        try:
            return attempt()
        except StorageError:
            time.sleep(0.05 * n)
    return attempt()


@dataclass(frozen=True)
class Adopted:
    """What :func:`write_adopting` did: the namespace written (at the version it read before
    the write), the adoption made with the data, and the data operation's result."""

    namespace: PartitionedNamespace
    adoption: Adoption
    result: WriteResult | RowChangeResult | None


def write_adopting(
    prepare: Callable[[], tuple[PartitionedNamespace, Adoption]],
    write: Callable[[PartitionedNamespace, WriteTarget], WriteResult | RowChangeResult | None],
    *,
    on_retry: Callable[[], None] | None = None,
    attempts: int = ADOPT_ATTEMPTS,
) -> Adopted:
    """Write with the adoption's changes: ``prepare`` opens (or creates) the namespace and
    plans (and checks) the adoption; ``write(ns, target)`` writes the data into ``target``:
    the namespace itself when nothing changes, else the transaction making the changes, which
    commits them with the data (the result of a write into it is the transaction's).

    When another writer changed the schema or spec differently meanwhile, the commit fails
    with nothing of this write visible: it is prepared again on the latest version (calling
    ``on_retry`` first), up to ``attempts`` times; any other failure is raised at once."""
    for attempt in range(1, attempts + 1):
        ns, adoption = prepare()
        tx = adoption.transaction(ns)
        try:
            return Adopted(ns, adoption, _write(ns, tx, write))
        except CommitConflictError:
            if not tx.has_changes or tx.committed or attempt == attempts:
                raise
            if on_retry is not None:
                on_retry()
    raise AssertionError("unreachable")


def _write(
    ns: PartitionedNamespace,
    tx: Transaction,
    write: Callable[[PartitionedNamespace, WriteTarget], WriteResult | RowChangeResult | None],
) -> WriteResult | RowChangeResult | None:
    if not tx.has_changes:
        return write(ns, ns)
    with tx:
        returned = write(ns, tx)
    # a write in this process added its data to tx; an engine committing the changes with its
    # own data itself (Spark's driver) returned its result
    return tx.result.data if tx.result.data is not None else returned


__all__ = [
    "ADOPT_ATTEMPTS",
    "Adopted",
    "Adoption",
    "WriteTarget",
    "adopted_schema",
    "open_or_create",
    "plan_adoption",
    "schema_changes",
    "write_adopting",
]
