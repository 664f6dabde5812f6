"""``ns.transaction()``: schema and spec changes plus one data operation, visible together or
not at all.

- Changes alone are one manifest commit; an exception in the block commits nothing.
- With a data operation, refusals of the data (stray partitions, bad rows, merge keys) come
  before anything is committed; the changes and the data are two adjacent commits carrying
  the transaction's id; a data commit failing after the changes landed reverts them.
- Concurrent transactions making the same change converge (the second adds only its data)."""

from __future__ import annotations

import json
import threading

import lance
import pyarrow as pa
import pytest
from helpers.data import SCHEMA, fingerprint, sample_table, sorted_rows

from dagster_lance_partitioned import PartitionedNamespace, PartitionField
from dagster_lance_partitioned.core.errors import (
    CommitConflictError,
    DuplicateKeyError,
    SchemaError,
    SchemaMismatchError,
    TransactionError,
    UnnamedPartitionError,
)
from dagster_lance_partitioned.core.manifest.changes import TRANSACTION_PROPERTY
from dagster_lance_partitioned.core.manifest.store import ManifestStore

WIDE = pa.schema([*SCHEMA, pa.field("score", pa.int32())])


def make_ns(tmp_path) -> PartitionedNamespace:
    ns = PartitionedNamespace.create(tmp_path / "ns", SCHEMA, [PartitionField.identity("country")])
    ns.write(sample_table())
    return ns


def wide_rows(ids: range, country: str = "US") -> pa.Table:
    return pa.table(
        {
            "id": pa.array(list(ids), pa.int64()),
            "country": [country] * len(ids),
            "event_date": pa.array([None] * len(ids), pa.date32()),
            "value": [float(i) for i in ids],
            "score": pa.array([i % 7 for i in ids], pa.int32()),
        },
        schema=WIDE,
    )


def commits(ns: PartitionedNamespace, since: int) -> list[dict[str, str]]:
    """This package's properties of every manifest commit after version ``since``."""
    out = []
    for c in ns.inspect.history(since=since):
        out.append(dict(c.properties or {}))
    return out


def test_changes_alone_are_one_commit(tmp_path):
    ns = make_ns(tmp_path)
    before = ns.version
    with ns.transaction() as tx:
        tx.add_columns(pa.field("score", pa.int32()))
        tx.promote_column("score", pa.int64())
        tx.rename_column("value", "amount")
        tx.update_spec([PartitionField.identity("country"), PartitionField.bucket("id", 4)])
    assert ns.version == before + 1
    assert tx.result.manifest_version == ns.version == tx.result.changes_version
    assert ns.schema.field("score").type == pa.int64()
    assert "amount" in ns.schema.names and "value" not in ns.schema.names
    assert len(ns.current_spec.fields) == 2
    (props,) = commits(ns, before)
    assert props["operation"] == "evolve"
    assert json.loads(props["steps"]) == [
        "add_columns",
        "promote_column",
        "rename_column",
        "update_spec",
    ]
    assert props[TRANSACTION_PROPERTY] == tx.id
    # old rows read under the new schema
    assert ns.count_rows() == 12
    assert ns.to_table(columns=["score"]).column("score").null_count == 12


def test_an_exception_in_the_block_commits_nothing(tmp_path):
    ns = make_ns(tmp_path)
    before = fingerprint(ns.uri)
    with pytest.raises(RuntimeError, match="user code"), ns.transaction() as tx:
        tx.add_columns(pa.field("score", pa.int32()))
        tx.update_spec([PartitionField.identity("country"), PartitionField.bucket("id", 4)])
        tx.write(wide_rows(range(100, 110)))
        raise RuntimeError("user code failed")
    assert fingerprint(ns.uri) == before
    with pytest.raises(TransactionError):
        tx.write(wide_rows(range(1)))


def test_changes_and_write_land_together_with_one_transaction_id(tmp_path):
    ns = make_ns(tmp_path)
    before = ns.version
    with ns.transaction() as tx:
        tx.add_columns(pa.field("score", pa.int32()))
        tx.update_spec([PartitionField.identity("country"), PartitionField.bucket("id", 4)])
        tx.write(wide_rows(range(100, 110)))
    result = tx.result
    assert result.data is not None and result.data.rows_written == 10
    assert result.changes_version == before + 1
    assert result.manifest_version == ns.version == before + 2
    props = commits(ns, before)
    assert [p["operation"] for p in props] == ["evolve", "write"]
    assert {p[TRANSACTION_PROPERTY] for p in props} == {tx.id}
    # the data was written under the new spec, with its new column
    assert result.data.spec_id == ns.current_spec.spec_id == 2
    got = ns.to_table("id >= 100")
    assert sorted_rows(got.select(["id", "score"])) == [
        {"id": i, "score": i % 7} for i in range(100, 110)
    ]
    assert ns.count_rows() == 22


@pytest.mark.parametrize(
    "bad",
    ["stray_partition", "schema_mismatch"],
)
def test_a_refused_write_leaves_schema_spec_and_data_as_they_were(tmp_path, bad):
    ns = make_ns(tmp_path)
    before = fingerprint(ns.uri)
    with pytest.raises((UnnamedPartitionError, SchemaMismatchError)), ns.transaction() as tx:
        tx.add_columns(pa.field("score", pa.int32()))
        tx.update_spec([PartitionField.identity("country"), PartitionField.bucket("id", 4)])
        if bad == "stray_partition":
            # names one partition of the new spec; the rows are of others
            named = [{"country": "US", "id_bucket_4": 0}]
            tx.write(wide_rows(range(100, 110), "FR"), partitions=named)
        else:
            rows = wide_rows(range(100, 110)).set_column(
                4, "score", pa.array(["x"] * 10, pa.utf8())
            )
            tx.write(rows)
    after = fingerprint(ns.uri)
    assert after["manifest_version"] == before["manifest_version"]
    assert after["metadata"] == before["metadata"]
    assert after["manifest_rows"] == before["manifest_rows"]
    fresh = PartitionedNamespace.open(ns.uri)
    assert fresh.schema == ns.schema and "score" not in fresh.schema.names
    assert len(fresh.specs) == 1


def test_merge_with_a_new_column_in_one_transaction(tmp_path):
    ns = make_ns(tmp_path)
    before = ns.version
    with ns.transaction() as tx:
        tx.add_columns(pa.field("score", pa.int32()))
        tx.merge_insert(wide_rows(range(8, 16)), on="id")
    data = tx.result.data
    assert data is not None and data.rows_updated == 4 and data.rows_inserted == 4
    assert ns.version == before + 2
    rows = {r["id"]: r for r in ns.to_table().to_pylist()}
    assert len(rows) == 16
    assert rows[8]["score"] == 8 % 7 and rows[8]["country"] == "US"
    assert rows[0]["score"] is None


def test_a_refused_merge_commits_nothing(tmp_path):
    ns = make_ns(tmp_path)
    before = fingerprint(ns.uri)
    dup = pa.concat_tables([wide_rows(range(8, 10)), wide_rows(range(8, 9))])
    with pytest.raises(DuplicateKeyError), ns.transaction() as tx:
        tx.add_columns(pa.field("score", pa.int32()))
        tx.merge_insert(dup, on="id")
    assert fingerprint(ns.uri)["metadata"] == before["metadata"]
    assert fingerprint(ns.uri)["manifest_version"] == before["manifest_version"]


def test_delete_and_update_under_changed_schema(tmp_path):
    ns = make_ns(tmp_path)
    with ns.transaction() as tx:
        tx.rename_column("value", "amount")
        tx.update("country = 'US'", {"amount": "amount * 10"})
    assert tx.result.data is not None and tx.result.data.rows_updated == 4
    us = ns.to_table("country = 'US'").column("amount").to_pylist()
    assert sorted(us) == sorted(float(i) * 10 for i in range(0, 12, 3))
    with ns.transaction() as tx:
        tx.add_columns(pa.field("note", pa.utf8()))
        tx.delete("country = 'FR'")
    assert ns.count_rows() == 8
    assert "note" in ns.schema.names


def test_calls_are_checked_when_made(tmp_path):
    ns = make_ns(tmp_path)
    before = fingerprint(ns.uri)
    with pytest.raises(SchemaError, match="already has it"), ns.transaction() as tx:
        tx.add_columns(pa.field("score", pa.int32()))
        tx.add_columns(pa.field("score", pa.int64()))  # the first call added it
    with pytest.raises(TransactionError, match="one data operation"), ns.transaction() as tx:
        tx.write(sample_table())
        tx.delete("country = 'US'")
    with pytest.raises(TransactionError, match="come before"), ns.transaction() as tx:
        tx.write(sample_table())
        tx.add_columns(pa.field("score", pa.int32()))
    with pytest.raises(SchemaError, match="no such column"), ns.transaction() as tx:
        tx.rename_column("value", "amount")
        tx.promote_column("value", pa.float64())  # renamed by the call before
    assert fingerprint(ns.uri) == before


def test_a_data_commit_failing_after_the_changes_reverts_them(tmp_path, monkeypatch):
    ns = make_ns(tmp_path)
    metadata = dict(lance.dataset(f"{ns.uri}/__manifest").metadata)
    rows_before = sorted_rows(ns.to_table())
    real = ManifestStore.commit
    calls = []

    def failing_second(self, load, plan, timeout=120.0):
        calls.append(1)
        if len(calls) == 2:  # the changes were the first commit; the data's is the second
            raise OSError("injected: the store went away during the data commit")
        return real(self, load, plan, timeout)

    monkeypatch.setattr(ManifestStore, "commit", failing_second)
    with pytest.raises(OSError, match="injected"), ns.transaction() as tx:
        tx.add_columns(pa.field("score", pa.int32()))
        tx.write(wide_rows(range(100, 103)))
    monkeypatch.undo()
    fresh = PartitionedNamespace.open(ns.uri)
    assert dict(fresh.metadata) == metadata  # schema as it was
    assert sorted_rows(fresh.to_table()) == rows_before
    ops = [p["operation"] for p in commits(fresh, 0)][-2:]
    assert ops == ["add_columns", "revert"]


def test_concurrent_transactions_making_the_same_change_converge(tmp_path):
    ns = make_ns(tmp_path)
    before = ns.version
    barrier = threading.Barrier(2)
    results, errors = [], []

    def run(start: int) -> None:
        own = PartitionedNamespace.open(ns.uri)
        try:
            tx = own.transaction()
            tx.add_columns(pa.field("score", pa.int32()))
            tx.write(wide_rows(range(start, start + 5)))
            barrier.wait()
            results.append(tx.commit())
        except Exception as e:  # pragma: no cover - the assertion below shows it
            errors.append(e)

    threads = [threading.Thread(target=run, args=(s,)) for s in (100, 200)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    ns.refresh()
    # one commit of the column, two of data: the second transaction found its change made
    assert ns.version == before + 3
    assert sum(r.changes_version is not None for r in results) >= 1
    got = ns.to_table("id >= 100")
    assert sorted(got.column("id").to_pylist()) == [*range(100, 105), *range(200, 205)]
    assert got.column("score").null_count == 0


def test_a_conflicting_concurrent_change_refuses_the_transaction(tmp_path):
    ns = make_ns(tmp_path)
    tx = ns.transaction()
    tx.add_columns(pa.field("score", pa.int32()))
    tx.write(wide_rows(range(100, 103)))
    other = PartitionedNamespace.open(ns.uri)
    other.add_columns(pa.field("score", pa.utf8()))  # same name, another type
    version = other.version
    with pytest.raises(CommitConflictError, match="changed while this transaction"):
        tx.commit()
    assert PartitionedNamespace.open(ns.uri).version == version
    assert ns.count_rows("id >= 100") == 0


def test_a_transaction_with_nothing_commits_nothing(tmp_path):
    ns = make_ns(tmp_path)
    before = ns.version
    with ns.transaction() as tx:
        tx.update_spec([PartitionField.identity("country")])  # the current spec
    assert ns.version == before and tx.result.committed is False
    with ns.transaction() as tx:
        pass
    assert tx.result.committed is False and tx.result.manifest_version == before


def test_a_staged_write_commits_a_detached_transactions_changes_with_its_data(tmp_path):
    """The path of distributed engines (Spark): the driver detaches the changes, workers
    stage rows under them (the StagedWrite travels pickled), the driver commits both."""
    import pickle

    from dagster_lance_partitioned.core.write.staged import StagedWrite

    ns = make_ns(tmp_path)
    before = fingerprint(ns.uri)
    tx = ns.transaction()
    tx.add_columns(pa.field("score", pa.int32()))
    tx.update_spec([PartitionField.identity("country"), PartitionField.bucket("id", 4)])
    changes = tx.detach_changes()
    staged = StagedWrite.begin(ns, "append", changes=changes)
    assert fingerprint(ns.uri)["metadata"] == before["metadata"]  # nothing committed yet
    worker = pickle.loads(pickle.dumps(staged))
    messages = [worker.stage(wide_rows(range(100, 105)).to_batches())]
    messages.append(worker.stage(wide_rows(range(200, 203), "FR").to_batches()))
    assert PartitionedNamespace.open(ns.uri).version == before["manifest_version"]
    result = staged.commit(messages)
    ns.refresh()
    assert result.spec_id == 2 and result.rows_written == 8
    assert ns.version == before["manifest_version"] + 2
    props = commits(ns, before["manifest_version"])
    assert [p["operation"] for p in props] == ["evolve", "write"]
    assert {p[TRANSACTION_PROPERTY] for p in props} == {tx.id}
    got = ns.to_table("id >= 100")
    assert sorted(got.column("id").to_pylist()) == [*range(100, 105), *range(200, 203)]
    assert got.column("score").null_count == 0


def test_a_staged_write_refused_at_commit_leaves_the_changes_uncommitted(tmp_path):
    from dagster_lance_partitioned.core.write.staged import StagedWrite

    ns = make_ns(tmp_path)
    before = fingerprint(ns.uri)
    tx = ns.transaction()
    tx.add_columns(pa.field("score", pa.int32()))
    tx.update_spec([PartitionField.identity("country"), PartitionField.bucket("id", 4)])
    named = [{"country": "US", "id_bucket_4": 0}]
    staged = StagedWrite.begin(
        ns, "overwrite_partitions", partitions=named, changes=tx.detach_changes()
    )
    with pytest.raises(UnnamedPartitionError):
        staged.commit([staged.stage(wide_rows(range(100, 110), "FR").to_batches())])
    after = fingerprint(ns.uri)
    assert after["metadata"] == before["metadata"]
    assert after["manifest_version"] == before["manifest_version"]
