"""Deletion safe by protocol (core/manifest/retire.py): a commit landing *inside* a cleanup or
vacuum (after it read the pins, before it deleted) never leaves the namespace pointing at deleted
files.

Each race is made deterministic: the maintenance run's first deletion first lets a writer paused
between its table commits and its manifest commit finish. Before the protocol, cleanup deleted
the version that writer had just registered (the namespace no longer opened), and vacuum the
files of the new table it had just registered."""

from __future__ import annotations

import datetime as dt
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from helpers.data import SCHEMA, fail_write, sample_table, sorted_rows
from helpers.faults import CommitHooks, before_row_change_commit

from dagster_lance_partitioned import MergeOptions, PartitionedNamespace, PartitionField
from dagster_lance_partitioned.core import storage
from dagster_lance_partitioned.core.errors import CommitConflictError, MaintenanceConflictError
from dagster_lance_partitioned.core.manifest import retire
from dagster_lance_partitioned.core.ops import maintenance
from dagster_lance_partitioned.core.row_changes.merge import merge_rows

FIELDS = [PartitionField.identity("country")]
ZERO = dt.timedelta(0)


def _ns(tmp_path: Path) -> PartitionedNamespace:
    ns = PartitionedNamespace.create(tmp_path / "ns", SCHEMA, FIELDS)
    ns.write(sample_table(6))
    ns.write(sample_table(6, start=50))
    fail_write(ns, sample_table(6, start=70))  # unpinned versions for cleanup to remove
    return ns


class _Paused:
    """Runs ``op`` in a thread that stops just before its manifest commit until released."""

    def __init__(
        self, ns: PartitionedNamespace, op: Callable[[], Any], before_commit: CommitHooks
    ) -> None:
        self.ready, self.go = threading.Event(), threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None

        def hook(*_: Any) -> None:
            self.ready.set()
            assert self.go.wait(30)

        before_commit(ns, hook)

        def run() -> None:
            try:
                self.result = op()
            except BaseException as e:  # handed to the test
                self.error = e

        self.thread = threading.Thread(target=run)
        self.thread.start()
        assert self.ready.wait(30)

    def finish(self) -> None:
        self.go.set()
        self.thread.join(30)
        assert not self.thread.is_alive()


def _inside_first_deletion(monkeypatch: pytest.MonkeyPatch, paused: _Paused) -> list[int]:
    """Make the maintenance run's first deletion let ``paused`` commit first."""
    calls: list[int] = []
    for name in ("delete_files", "delete_tree"):
        real = getattr(storage, name)

        def wrapped(*args: Any, _real: Any = real, **kwargs: Any) -> Any:
            if not calls:
                paused.finish()
            calls.append(1)
            return _real(*args, **kwargs)

        monkeypatch.setattr(storage, name, wrapped)
    return calls


def _readable(uri: str) -> list[dict[str, Any]]:
    return sorted_rows(PartitionedNamespace.open(uri).to_table())


@pytest.mark.parametrize("mode", ["append", "overwrite_partitions"])
def test_a_write_registered_inside_a_cleanup_is_refused_not_broken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str, before_commit: CommitHooks
) -> None:
    ns = _ns(tmp_path)
    before = _readable(ns.uri)
    writer = PartitionedNamespace.open(ns.uri)
    new = sample_table(4, countries=("US",), start=500)
    paused = _Paused(writer, lambda: writer.write(new, mode=mode), before_commit)
    other = PartitionedNamespace.open(ns.uri)
    # the paused write's detached version exists (unpinned) before the cleanup lists tables
    calls = _inside_first_deletion(monkeypatch, paused)
    result = other.maintenance.cleanup(older_than=ZERO, keep_manifest_versions=1)
    assert calls and result.table_versions_removed > 0
    assert isinstance(paused.error, MaintenanceConflictError), paused.error
    assert isinstance(paused.error, CommitConflictError)  # a conflict: retry it
    assert "retry" in str(paused.error) and "retired" in str(paused.error)
    assert _readable(ns.uri) == before  # opens, reads, nothing of the write visible
    before_commit(writer, None)
    writer.write(new, mode=mode)  # a retry lands
    fresh = PartitionedNamespace.open(ns.uri)
    assert fresh.count_rows("id >= 500") == 4
    assert fresh.inspect.check_read_versions()[0] == []


def test_a_new_partition_registered_inside_a_vacuum_is_refused_not_broken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, before_commit: CommitHooks
) -> None:
    ns = _ns(tmp_path)
    before = _readable(ns.uri)
    writer = PartitionedNamespace.open(ns.uri)
    new = sample_table(4, countries=("NL",), start=500)  # a new partition: an orphan until commit
    paused = _Paused(writer, lambda: writer.write(new), before_commit)
    calls = _inside_first_deletion(monkeypatch, paused)
    result = PartitionedNamespace.open(ns.uri).maintenance.vacuum(grace=ZERO)
    assert calls and result.orphans_removed
    assert isinstance(paused.error, MaintenanceConflictError), paused.error
    assert _readable(ns.uri) == before
    before_commit(writer, None)
    writer.write(new)
    assert PartitionedNamespace.open(ns.uri).count_rows("country = 'NL'") == 4


def test_a_merge_inside_a_cleanup_is_redone_and_lands(tmp_path: Path) -> None:
    """Row changes keep their input: the versions a retirement named are made again. The
    cleanup runs after the merge planned its commit (its detached versions made, unpinned)."""
    ns = _ns(tmp_path)
    writer = PartitionedNamespace.open(ns.uri)
    changed = sample_table(3, countries=("US",))
    changed = changed.set_column(3, "value", pa.array([-1.0, -2.0, -3.0]))
    other = PartitionedNamespace.open(ns.uri)
    cleaned: list[Any] = []

    def meanwhile() -> None:
        cleaned.append(other.maintenance.cleanup(older_than=ZERO, keep_manifest_versions=1))

    with before_row_change_commit(writer, meanwhile):
        result = merge_rows(writer, changed, MergeOptions("id"))
    assert cleaned and cleaned[0].table_versions_removed > 0
    assert result.rows_updated == 3
    fresh = PartitionedNamespace.open(ns.uri)
    assert fresh.inspect.check_read_versions()[0] == []
    got = {r["id"]: r["value"] for r in fresh.to_table().to_pylist()}
    assert [got[i] for i in (0, 1, 2)] == [-1.0, -2.0, -3.0]
    assert fresh.count_rows() == 12


def test_a_write_elsewhere_is_not_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, before_commit: CommitHooks
) -> None:
    """A retirement names tables and versions: a write into another table still lands."""
    ns = PartitionedNamespace.create(tmp_path / "ns", SCHEMA, FIELDS)
    ns.write(sample_table(2, countries=("US",)))
    ns.write(sample_table(2, countries=("US",), start=10))
    ns.write(sample_table(2, countries=("FR",), start=20))
    fail_write(ns, sample_table(2, countries=("US",), start=40))  # an unpinned US version
    [us] = [p["location"] for p in ns.inspect.partitions() if p["values"]["country"] == "US"]
    old = time.time() - 7200
    for path in (tmp_path / "ns" / us).rglob("*"):
        os.utime(path, (old, old))  # US's files are two hours old, FR's new
    writer = PartitionedNamespace.open(ns.uri)
    paused = _Paused(
        writer, lambda: writer.write(sample_table(2, countries=("FR",), start=30)), before_commit
    )
    calls = _inside_first_deletion(monkeypatch, paused)
    result = PartitionedNamespace.open(ns.uri).maintenance.cleanup(older_than=dt.timedelta(hours=1))
    assert calls and result.table_versions_removed == 1
    assert paused.error is None, paused.error
    assert PartitionedNamespace.open(ns.uri).count_rows() == 8


def test_compaction_made_before_a_retirement_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ns = _ns(tmp_path)
    for k in range(3):
        ns.write(sample_table(4, start=100 + 10 * k))
    before = _readable(ns.uri)
    other = PartitionedNamespace.open(ns.uri)
    real = maintenance._compact_table
    done = threading.Event()

    def compact_then_cleanup(*args: Any, **kwargs: Any) -> Any:
        out = real(*args, **kwargs)
        if not done.is_set():
            done.set()  # the compacted version exists, unregistered: a cleanup retires it
            other.maintenance.cleanup(older_than=ZERO, keep_manifest_versions=1)
        return out

    monkeypatch.setattr(maintenance, "_compact_table", compact_then_cleanup)
    serial = lambda fn, items, threads=0: list(map(fn, items))  # noqa: E731
    monkeypatch.setattr(maintenance, "parallel_map", serial)
    result = ns.maintenance.compact()
    assert result.skipped  # the retired ones are left for the next run
    assert _readable(ns.uri) == before
    assert PartitionedNamespace.open(ns.uri).inspect.check_read_versions()[0] == []


def test_a_retirement_is_stored_and_bounded(tmp_path: Path) -> None:
    ns = _ns(tmp_path)
    assert retire.epoch(ns.state.snapshot) == 0
    ns.maintenance.cleanup(older_than=ZERO, keep_manifest_versions=1)
    snap = ns.refresh().state.snapshot
    assert retire.epoch(snap) == 1
    text = snap.metadata[retire.SLOT_PREFIX + "1"]
    stored, retired = retire.Retirement.from_json(text)
    assert stored == 1 and retired.versions
    huge = retire.Retirement(versions={f"t{i:06d}": frozenset(range(50)) for i in range(2000)})
    assert len(huge.to_json(7)) <= retire.MAX_MARKS_BYTES
    assert retire.Retirement.from_json(huge.to_json(7))[1].names(retire.Use("t000001", 9, 8, 0))
    for _ in range(retire.KEPT_FENCES + 2):
        maintenance.announce(ns.state.store, retire.Retirement(files=frozenset({"x"})), "test")
    snap = ns.refresh().state.snapshot
    assert len(retire.fences(snap)) == retire.KEPT_FENCES
    # a version made before the forgotten announcements conflicts, whatever it touches
    assert retire.conflicting(snap, [retire.Use("elsewhere", 1, None, 1)])
    assert not retire.conflicting(snap, [retire.Use("elsewhere", 1, None, retire.epoch(snap) - 1)])


def test_a_replacement_whose_intervening_commits_were_cleaned_up_conflicts(
    tmp_path: Path, before_commit: CommitHooks
) -> None:
    """A replacing write cannot tell what commits since its base replaced once those manifest
    versions are gone: it assumes the worst (a conflict), never a raw error."""
    ns = _ns(tmp_path)
    before = _readable(ns.uri)
    writer = PartitionedNamespace.open(ns.uri)
    other = PartitionedNamespace.open(ns.uri)

    def meanwhile(_: Any) -> None:
        other.write(sample_table(2, countries=("US",), start=900))  # moves the US pin
        other.write(sample_table(2, countries=("FR",), start=910))
        other.state.store.dataset().cleanup_old_versions(older_than=ZERO, retain_versions=1)

    before_commit(writer, meanwhile)
    with pytest.raises(CommitConflictError):
        writer.write(sample_table(3, countries=("US",), start=800), mode="overwrite_partitions")
    assert PartitionedNamespace.open(ns.uri).count_rows() == len(before) + 4
