"""Manifest commits write only what changed (one Lance ``Update`` per commit), stay one commit per
write, keep unknown columns, stay fast to read as small commits accumulate, and give up on
endless contention after a bounded time."""

from __future__ import annotations

import os
from pathlib import Path

import lance
import pyarrow as pa
import pytest
from helpers.data import SCHEMA, sample_table, sorted_rows

from dagster_lance_partitioned import PartitionedNamespace, PartitionField
from dagster_lance_partitioned.core.errors import CommitConflictError
from dagster_lance_partitioned.core.manifest.snapshot import ManifestSnapshot
from dagster_lance_partitioned.core.manifest.store import ManifestEdit, ManifestStore


def _manifest(ns: PartitionedNamespace) -> lance.LanceDataset:
    return lance.dataset(os.path.join(ns.uri, "__manifest"))


def _many(tmp_path: Path, n: int = 300) -> PartitionedNamespace:
    schema = pa.schema([pa.field("key", pa.int64()), pa.field("value", pa.float64())])
    ns = PartitionedNamespace.create(tmp_path / "ns", schema, [PartitionField.identity("key")])
    ns.write(pa.table({"key": list(range(n)), "value": [1.0] * n}, schema=schema))
    return ns


def test_a_one_partition_append_rewrites_only_its_rows(tmp_path: Path) -> None:
    ns = _many(tmp_path)
    rows_before = _manifest(ns).count_rows()
    result = ns.write(pa.table({"key": [7], "value": [2.0]}, schema=ns.schema))
    ds = _manifest(ns)
    tx = ds.read_transaction(result.manifest_version)
    assert type(tx.operation).__name__ == "Update"
    written = sum(f.physical_rows for f in tx.operation.new_fragments)
    assert written == 2  # the partition's table row and the sentinel row, not 600 rows
    assert ds.count_rows() == rows_before
    assert ds.version == result.manifest_version  # one commit
    assert ns.count_rows("key = 7") == 2 and ns.count_rows() == 301


def test_a_new_partition_appends_its_rows(tmp_path: Path) -> None:
    ns = _many(tmp_path)
    result = ns.write(pa.table({"key": [1000], "value": [2.0]}, schema=ns.schema))
    tx = _manifest(ns).read_transaction(result.manifest_version)
    assert type(tx.operation).__name__ == "Update"
    # the new partition namespace and table, the spec namespace row (sentinel)
    assert sum(f.physical_rows for f in tx.operation.new_fragments) == 3
    assert ns.count_rows("key = 1000") == 1


def test_many_small_commits_keep_the_manifest_compact(tmp_path: Path, tune) -> None:
    tune(compact_min_fragments=6)
    ns = _many(tmp_path, 50)
    expected = sorted_rows(ns.to_table(), "key")
    for i in range(20):
        result = ns.write(pa.table({"key": [i % 50], "value": [3.0]}, schema=ns.schema))
        expected.append({"key": i % 50, "value": 3.0})
        manifest = _manifest(ns)
        assert len(manifest.get_fragments()) <= 6
        # the result names the write's own commit, not a compaction that followed it
        tx = manifest.read_transaction(result.manifest_version)
        assert tx.transaction_properties.get("dlp.operation") == "write"
    ops = [manifest.read_transaction(v) for v in range(3, manifest.version + 1)]
    assert any("dlp.operation" not in (tx.transaction_properties or {}) for tx in ops)
    got = ns.to_table().to_pylist()
    key = lambda r: (r["key"], r["value"])  # noqa: E731
    assert sorted(got, key=key) == sorted(expected, key=key)


def test_unknown_columns_survive_row_level_commits(tmp_path: Path) -> None:
    ns = PartitionedNamespace.create(tmp_path / "ns", SCHEMA, [PartitionField.identity("country")])
    ns.write(sample_table(6))
    _manifest(ns).add_columns({"owner": "concat('owner:', object_id)"})
    ns.write(sample_table(3, start=50))
    ns.write(sample_table(3, start=80), mode="overwrite_partitions")
    owners = _manifest(ns).to_table(columns=["object_id", "owner"]).to_pylist()
    assert owners and all(r["owner"] == f"owner:{r['object_id']}" for r in owners)


def test_endless_contention_gives_up_after_the_timeout(tmp_path: Path) -> None:
    ns = PartitionedNamespace.create(tmp_path / "ns", SCHEMA, [PartitionField.identity("country")])
    ns.write(sample_table(3))
    other = PartitionedNamespace.open(ns.uri)
    store = ManifestStore(ns.uri)
    attempts = []

    def plan(snap: ManifestSnapshot) -> ManifestEdit:
        attempts.append(snap.version)
        other.write(sample_table(3, start=100 + 10 * len(attempts)))  # always lands first
        return ManifestEdit(upserts={"v1": {"metadata": "{}"}}, properties={"operation": "x"})

    with pytest.raises(CommitConflictError, match="gave up after"):
        store.commit(lambda ds: ManifestSnapshot(ds, ns.specs), plan, timeout=0.5)
    assert len(attempts) >= 2  # it re-planned on the latest version before giving up
    assert len(set(attempts)) == len(attempts)
    # every concurrent write landed, nothing of the given-up commit did
    assert PartitionedNamespace.open(ns.uri).count_rows() == 3 + 3 * len(attempts)


def test_local_writers_take_turns_at_the_manifest_commit(tmp_path: Path) -> None:
    """On local disk the commit turn is an advisory lock: while one holder has it, another
    commit waits (and a commit nested in a commit on the same thread does not deadlock)."""
    import threading
    import time

    ns = PartitionedNamespace.create(tmp_path / "ns", SCHEMA, [PartitionField.identity("country")])
    store = ManifestStore(ns.uri)
    other = PartitionedNamespace.open(ns.uri)
    landed: list[float] = []

    def write() -> None:
        other.write(sample_table(3))
        landed.append(time.monotonic())

    with store._turn():
        with store._turn():  # nested on this thread: no deadlock
            pass
        thread = threading.Thread(target=write)
        thread.start()
        time.sleep(0.5)
        held_until = time.monotonic()
        assert not landed  # the other writer waits for its turn
    thread.join(timeout=30)
    assert landed and landed[0] >= held_until
    assert PartitionedNamespace.open(ns.uri).count_rows() == 3
