"""Changes interrupted between their two ``__manifest`` commits, and the code the tests run
again after the interruption.

- A transaction with a data operation commits its schema / spec changes
  (``ChangesFirstStore.commit_changes``), then its data: :func:`after_changes_commit` runs an
  action right after the changes' commit returned, before the data's commit is tried.
- ``create_index`` commits the declaration, then every partition table's indexed version
  (``catalog.register``): :func:`after_index_declared` runs an action between the two.

The action is :func:`kill_self` (SIGKILL: nothing after it runs, as in a crash) in a child
process (``python interrupted.py URI SCENARIO``), or raising :class:`Interrupted` (a
``BaseException`` the package never catches, so nothing is reverted) in the test's own process.
:data:`TRANSACTIONS` and :func:`declare_index` are the code a test interrupts and then runs
again unchanged.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa

from dagster_lance_partitioned import PartitionedNamespace, PartitionField
from dagster_lance_partitioned.core.manifest.changes import ChangesFirstStore
from dagster_lance_partitioned.core.search import catalog

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("country", pa.utf8()),
        pa.field("value", pa.float64()),
        pa.field("n", pa.int32()),
        pa.field("note", pa.utf8()),
    ]
)
FIELDS = [PartitionField.identity("country")]
COUNTRIES = ("US", "FR", "DE")


class Interrupted(BaseException):
    """The injected interruption (a BaseException: no ``except Exception`` of the package
    sees it, so nothing is cleaned up or reverted, as after a kill)."""


def interrupt() -> None:
    raise Interrupted("interrupted between the two manifest commits")


def kill_self() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def column(name: str, t: pa.DataType, ids: list[int]) -> pa.Array:
    """Values of a column of type ``t`` for rows ``ids`` (deterministic)."""
    if name == "country":
        return pa.array([COUNTRIES[i % len(COUNTRIES)] for i in ids], t)
    if pa.types.is_integer(t):
        return pa.array([i % 1000 for i in ids], t)
    if pa.types.is_floating(t):
        return pa.array([i / 4 for i in ids], t)
    return pa.array([f"{name}-{i}" for i in ids], t)


def rows(schema: pa.Schema, ids: range) -> pa.Table:
    """Rows ``ids`` of ``schema``, every column filled."""
    idx = list(ids)
    return pa.table({f.name: column(f.name, f.type, idx) for f in schema}, schema=schema)


def new_namespace(uri: str) -> PartitionedNamespace:
    ns = PartitionedNamespace.create(uri, SCHEMA, FIELDS)
    ns.write(rows(SCHEMA, range(12)))
    return ns


NEW_ROWS = range(100, 109)
MERGED_ROWS = range(6, 15)  # ids 6..11 are stored, 12..14 new


def _tx_add(ns: PartitionedNamespace) -> pa.Table:
    with ns.transaction() as tx:
        tx.add_columns([pa.field("score", pa.int32()), pa.field("tag", pa.utf8())])
        data = rows(tx.schema, NEW_ROWS)
        tx.write(data)
    return data


def _tx_rename(ns: PartitionedNamespace) -> pa.Table:
    with ns.transaction() as tx:
        tx.rename_column("value", "amount")
        data = rows(tx.schema, NEW_ROWS)
        tx.write(data)
    return data


def _tx_drop(ns: PartitionedNamespace) -> pa.Table:
    with ns.transaction() as tx:
        tx.drop_column("note")
        data = rows(tx.schema, NEW_ROWS)
        tx.write(data)
    return data


def _tx_promote(ns: PartitionedNamespace) -> pa.Table:
    with ns.transaction() as tx:
        tx.promote_column("n", pa.int64())
        data = rows(tx.schema, NEW_ROWS)
        tx.write(data)
    return data


def _tx_update_spec(ns: PartitionedNamespace) -> pa.Table:
    with ns.transaction() as tx:
        tx.update_spec([PartitionField.identity("country"), PartitionField.bucket("id", 4)])
        data = rows(tx.schema, NEW_ROWS)
        tx.write(data)
    return data


def _tx_every_step(ns: PartitionedNamespace) -> pa.Table:
    with ns.transaction() as tx:
        tx.add_columns(pa.field("score", pa.int32()))
        tx.rename_column("value", "amount")
        tx.drop_column("note")
        tx.promote_column("n", pa.int64())
        tx.update_spec([PartitionField.identity("country"), PartitionField.bucket("id", 4)])
        data = rows(tx.schema, NEW_ROWS)
        tx.write(data)
    return data


def _tx_merge(ns: PartitionedNamespace) -> pa.Table:
    with ns.transaction() as tx:
        tx.add_columns(pa.field("score", pa.int32()))
        data = rows(tx.schema, MERGED_ROWS)
        tx.merge_insert(data, on="id")
    return data


# name -> (the transaction: returns its data, whether the data is merged on ``id``)
TRANSACTIONS: dict[str, tuple[Callable[[PartitionedNamespace], pa.Table], bool]] = {
    "add_columns": (_tx_add, False),
    "rename_column": (_tx_rename, False),
    "drop_column": (_tx_drop, False),
    "promote_column": (_tx_promote, False),
    "update_spec": (_tx_update_spec, False),
    "every_step": (_tx_every_step, False),
    "merge_with_add_columns": (_tx_merge, True),
}


def declare_index(ns: PartitionedNamespace) -> Any:
    """The index declaration the index tests interrupt and run again."""
    return ns.create_index("v", "IVF_FLAT", min_rows=100, num_partitions=2)


@contextmanager
def after_changes_commit(action: Callable[[], None]) -> Iterator[None]:
    """Within the block, ``action()`` runs once a transaction's changes are committed, before
    its data's commit."""
    real = ChangesFirstStore.commit_changes

    def commit_changes(store: ChangesFirstStore) -> Any:
        first = store.made is None
        made = real(store)
        if first:
            action()
        return made

    ChangesFirstStore.commit_changes = commit_changes  # type: ignore[method-assign]
    try:
        yield
    finally:
        ChangesFirstStore.commit_changes = real  # type: ignore[method-assign]


@contextmanager
def after_index_declared(action: Callable[[], None]) -> Iterator[None]:
    """Within the block, ``action()`` runs once ``create_index`` committed the declaration,
    before it registers the partition tables' indexed versions."""
    real = catalog.register

    def register(*args: Any, **kwargs: Any) -> Any:
        action()
        return real(*args, **kwargs)

    catalog.register = register  # type: ignore[assignment]
    try:
        yield
    finally:
        catalog.register = real  # type: ignore[assignment]


def main(uri: str, scenario: str) -> int:
    """Run ``scenario`` (a name of :data:`TRANSACTIONS`, or ``create_index``) on ``uri`` and
    SIGKILL this process between its two manifest commits."""
    ns = PartitionedNamespace.open(uri)
    if scenario == "create_index":
        with after_index_declared(kill_self):
            declare_index(ns)
    else:
        with after_changes_commit(kill_self):
            TRANSACTIONS[scenario][0](ns)
    return 0  # not reached: the process is killed first


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
