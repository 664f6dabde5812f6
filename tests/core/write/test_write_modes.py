"""The write path in parts: one manifest-commit class per write mode, each with its own rule for
concurrent commits (rebase or :class:`CommitConflictError`), and the facade's operation groups
``ns.maintenance`` / ``ns.inspect``.

The concurrent commit runs inside the write's ``before_commit`` hook: the write has committed
its partition tables from the old base version and meets the other commit at its manifest
commit."""

from __future__ import annotations

import datetime as dt
import typing

import pyarrow as pa
import pytest
from helpers.data import SCHEMA, sorted_rows
from helpers.faults import CommitHooks

from dagster_lance_partitioned import (
    CommitConflictError,
    PartitionedNamespace,
    PartitionField,
    WriteError,
    WriteMode,
)
from dagster_lance_partitioned.core.errors import StorageError
from dagster_lance_partitioned.core.ops.groups import Inspect, Maintenance
from dagster_lance_partitioned.core.write.append import AppendCommit
from dagster_lance_partitioned.core.write.mode import WRITE_MODES, check_mode
from dagster_lance_partitioned.core.write.overwrite import (
    OverwriteCommit,
    OverwritePartitionsCommit,
)
from dagster_lance_partitioned.core.write.staged import StagedWrite
from dagster_lance_partitioned.core.write.writer import COMMITS

MODES: tuple[WriteMode, ...] = ("append", "overwrite_partitions", "overwrite")


def _rows(start: int, country: str, n: int = 2) -> pa.Table:
    return pa.table(
        {
            "id": pa.array(range(start, start + n), pa.int64()),
            "country": [country] * n,
            "event_date": [dt.date(2025, 1, 1)] * n,
            "value": [float(i) for i in range(n)],
        },
        schema=SCHEMA,
    )


def _ns(tmp_path) -> PartitionedNamespace:
    ns = PartitionedNamespace.create(tmp_path / "ns", SCHEMA, [PartitionField.identity("country")])
    ns.write(pa.concat_tables([_rows(0, "US"), _rows(10, "FR")]))
    return ns


def test_one_mode_type_and_one_commit_class_per_mode() -> None:
    assert WRITE_MODES == MODES == typing.get_args(WriteMode)
    assert {m: c.mode for m, c in COMMITS.items()} == {m: m for m in MODES}
    assert {
        "append": AppendCommit,
        "overwrite_partitions": OverwritePartitionsCommit,
        "overwrite": OverwriteCommit,
    } == COMMITS
    assert [COMMITS[m].replaces for m in MODES] == [False, True, True]
    assert check_mode("overwrite") == "overwrite"
    with pytest.raises(WriteError, match="unknown write mode 'upsert'"):
        check_mode("upsert")


# (our mode, the concurrent commit's mode) -> does our write conflict? Both write partition US.
CONFLICTS = {
    # an append never conflicts: it is rebased onto whatever the other commit registered
    ("append", "append"): False,
    ("append", "overwrite_partitions"): False,
    ("append", "overwrite"): False,
    # a replacement supersedes a concurrent append, but not a concurrent replacement
    ("overwrite_partitions", "append"): False,
    ("overwrite_partitions", "overwrite_partitions"): True,
    ("overwrite_partitions", "overwrite"): True,
    # replacing the whole table: any concurrent replacement anywhere conflicts
    ("overwrite", "append"): False,
    ("overwrite", "overwrite_partitions"): True,
    ("overwrite", "overwrite"): True,
}


@pytest.mark.parametrize(("ours", "theirs"), sorted(CONFLICTS))
def test_each_mode_validates_concurrent_commits(
    tmp_path, ours: WriteMode, theirs: WriteMode, before_commit: CommitHooks
):
    ns = _ns(tmp_path)
    other = PartitionedNamespace.open(ns.uri)
    before_commit(ns, lambda pending: other.write(_rows(100, "US"), mode=theirs))
    if CONFLICTS[(ours, theirs)]:
        with pytest.raises(CommitConflictError):
            ns.write(_rows(200, "US"), mode=ours)
        # nothing of ours is visible: the state is the other commit's
        after = PartitionedNamespace.open(ns.uri)
        assert after.version == other.version
        assert not [r for r in after.to_table().to_pylist() if r["id"] >= 200]
        return
    result = ns.write(_rows(200, "US"), mode=ours)
    assert result.mode == ours and result.manifest_version == other.version + 1
    us = sorted(r["id"] for r in ns.to_table("country = 'US'").to_pylist())
    if ours == "append":  # as if run after the other write
        before = {"append": [0, 1, 100, 101]}.get(theirs, [100, 101])
        assert us == sorted([*before, 200, 201])
    else:  # our replacement wins over the concurrent append
        assert us == [200, 201]
    fr = ns.count_rows("country = 'FR'")
    assert fr == (0 if "overwrite" in (ours, theirs) else 2)


def test_a_write_without_rows_commits_only_when_its_mode_changes_something(tmp_path):
    ns = _ns(tmp_path)
    empty = SCHEMA.empty_table()
    version = ns.version
    for mode in ("append", "overwrite_partitions"):
        result = ns.write(empty, mode=mode)
        assert not result.committed and result.manifest_version == version
    result = ns.write(empty, mode="overwrite")  # deregisters every partition
    assert result.committed and ns.count_rows() == 0 and not ns.inspect.partitions()


def test_staged_writers_agree_on_new_partitions(tmp_path):
    ns = _ns(tmp_path)
    staged = StagedWrite.begin(ns, "append")
    message = staged.stage(_rows(300, "SE").to_batches())
    (part,) = message.partitions
    placed = staged.writer().new_partition(part.key)  # what the driver derives from the key
    assert (placed.location, tuple(placed.path), placed.existing) == (
        part.location,
        part.path,
        None,
    )
    result = staged.commit([message])
    assert [p.created for p in result.partitions] == [True]
    assert ns.refresh().count_rows("country = 'SE'") == 2


def test_operation_groups_work_on_the_facade_state(tmp_path):
    ns = _ns(tmp_path)
    assert isinstance(ns.maintenance, Maintenance) and isinstance(ns.inspect, Inspect)
    assert ns.maintenance.state is ns.state and ns.inspect.state is ns.state
    assert ns.inspect.partitions() == ns.inspect.partitions()
    ns.write(_rows(20, "US"))
    result = ns.maintenance.compact()
    assert result.partitions and ns.version == result.manifest_version  # the facade moved too
    assert not ns.inspect.check_schemas() and not ns.inspect.check_integrity()
    issues, uncommitted = ns.inspect.check_read_versions()
    assert not issues and not uncommitted and not ns.inspect.find_orphans()
    ops = [c.operation for c in ns.inspect.history()]
    assert ops[0] == "create" and ops[-3:] == ["write", "write", "compact"]
    dropped = ns.maintenance.drop_partitions("country = 'FR'")
    assert [p.values for p in dropped.partitions] == [{"country": "FR"}]
    assert sorted_rows(ns.to_table())[0]["country"] == "US"


def test_operation_groups_name_the_namespace_in_storage_errors(tmp_path):
    ns = _ns(tmp_path)
    (table,) = [p for p in ns.inspect.partitions() if p["values"] == {"country": "US"}]
    root = tmp_path / "ns" / table["location"]
    for manifest in (root / "_versions").iterdir():
        manifest.unlink()
    with pytest.raises(StorageError, match=r"compacting .*failed") as info:
        ns.maintenance.compact()
    assert info.value.namespace == ns.uri


@pytest.mark.parametrize("staged", [False, True], ids=["core", "staged"])
def test_an_append_lands_on_exactly_the_registered_version(tmp_path, staged) -> None:
    """A version on a table's main line that no manifest registers (a killed writer's, another
    tool's) never leaks into an append built on the registered one."""
    import os

    import lance

    ns = PartitionedNamespace.create(tmp_path / "ns", SCHEMA, [PartitionField.identity("country")])
    ns.write(_rows(0, "US"))
    (us,) = ns.inspect.partitions()
    uri = os.path.join(ns.uri, us["location"])
    lance.write_dataset(_rows(900, "US"), uri, mode="append")  # main line moves on
    assert lance.dataset(uri).version > us["read_version"]
    if staged:
        staged_write = StagedWrite.begin(ns, "append")
        staged_write.commit([staged_write.stage(_rows(10, "US").to_batches())])
    else:
        ns.write(_rows(10, "US"))
    ids = sorted(r["id"] for r in ns.refresh().to_table().to_pylist())
    assert ids == [0, 1, 10, 11]
    (after,) = ns.inspect.partitions()
    assert after["read_version"] >= 1 << 63  # a detached version
