"""The typed commit summary (core/manifest/commit_summary.py): the one serialization of the
``__manifest`` commit properties, read back tolerantly (other versions and tools), with
``overwritten`` always written (a commit without it reads as having replaced every table)."""

from __future__ import annotations

import json

import pytest
from helpers.data import SCHEMA, sample_table

from dagster_lance_partitioned import PartitionedNamespace, PartitionField
from dagster_lance_partitioned.core.manifest.commit_summary import (
    WRITER_ID,
    CommitSummary,
    Operation,
    creation_properties,
)
from dagster_lance_partitioned.core.manifest.store import ManifestStore, overwritten_ids

FIELDS = [PartitionField.identity("country")]


def test_a_summary_without_overwritten_says_nothing_was_replaced():
    props = CommitSummary(Operation.UPDATE_SPEC).to_properties()
    assert props == {"operation": "update_spec", "overwritten": "[]"}
    assert overwritten_ids(props) == set()


@pytest.mark.parametrize(
    "summary",
    [
        CommitSummary(Operation.COMPACT, writer=WRITER_ID),
        CommitSummary(Operation.RETIRE, of="vacuum"),
        CommitSummary(
            Operation.WRITE,
            overwritten=("v1$b$dataset", "v1$a$dataset"),
            mode="overwrite_partitions",
            writer=WRITER_ID,
            user={"source": "me", "dagster.run_id": "r1"},
        ),
        CommitSummary(Operation.WRITE, overwritten=None, mode="overwrite", writer=WRITER_ID),
        CommitSummary(
            Operation.DROP_PARTITIONS, overwritten=("x",), writer=WRITER_ID, filter="a = 1"
        ),
        CommitSummary(Operation.CREATE_INDEX, writer=WRITER_ID, index="by_origin"),
    ],
)
def test_round_trip(summary):
    props = summary.to_properties()
    assert all(isinstance(k, str) and type(v) is str for k, v in props.items())
    assert CommitSummary.from_properties(props) == summary
    assert CommitSummary.from_properties(props).to_properties() == props


def test_the_serialized_strings_are_those_stored_before():
    write = CommitSummary(
        Operation.WRITE,
        overwritten=("v1$b$dataset", "v1$a$dataset"),
        mode="overwrite_partitions",
        writer=WRITER_ID,
        user={"write_id": "00ff"},
    )
    assert write.to_properties() == {
        "operation": "write",
        "mode": "overwrite_partitions",
        "writer": "dagster-lance-partitioned",
        "overwritten": '["v1$a$dataset", "v1$b$dataset"]',  # json.dumps of the sorted ids
        "write_id": "00ff",
    }
    everything = CommitSummary(Operation.WRITE, overwritten=None, mode="overwrite")
    assert everything.to_properties()["overwritten"] == json.dumps("*") == '"*"'
    assert CommitSummary(Operation.RETIRE, of="cleanup").to_properties() == {
        "operation": "retire",
        "of": "cleanup",
        "overwritten": "[]",
    }
    assert creation_properties() == {"operation": "create"}


def test_caller_properties_come_last():
    props = CommitSummary(Operation.DELETE, user={"filter": "x > 1", "k": "v"}).to_properties()
    assert props == {"operation": "delete", "overwritten": "[]", "filter": "x > 1", "k": "v"}
    read = CommitSummary.from_properties(props)
    assert read.filter == "x > 1" and dict(read.user) == {"k": "v"}


def test_an_unknown_operation_is_kept_as_stored():
    read = CommitSummary.from_properties({"operation": "frobnicate", "overwritten": "[]"})
    assert read.operation == "frobnicate" and not isinstance(read.operation, Operation)
    assert read.to_properties() == {"operation": "frobnicate", "overwritten": "[]"}
    known = CommitSummary.from_properties({"operation": "compact", "overwritten": "[]"})
    assert known.operation is Operation.COMPACT


@pytest.mark.parametrize(
    "props",
    [
        {"operation": "write", "mode": "append"},  # an old or other writer: no overwritten
        {"operation": "write", "overwritten": '"*"'},
        {"operation": "write", "overwritten": "not json"},
        {"operation": "write", "overwritten": '{"a": 1}'},
        {"source": "another-tool"},
    ],
)
def test_a_commit_without_a_readable_overwritten_replaced_every_table(props):
    read = CommitSummary.from_properties(props)
    assert read.overwritten is None and read.replaces_all
    assert overwritten_ids(props) is None


def test_a_commit_without_operation_reads_as_none():
    read = CommitSummary.from_properties({"source": "another-tool", "overwritten": "[]"})
    assert read.operation is None and read.source == "another-tool"
    assert read.to_properties() == {"overwritten": "[]", "source": "another-tool"}


def test_operations_keep_their_stored_values():
    assert {o.value for o in Operation} >= {
        "create",
        "write",
        "metadata",
        "update_spec",
        "add_columns",
        "rename_column",
        "drop_column",
        "promote_column",
        "upgrade",
        "compact",
        "retire",
        "drop_partitions",
        "merge",
        "delete",
        "update",
        "create_index",
        "drop_index",
        "optimize_indexes",
    }


def test_the_commits_of_a_namespace_read_back(tmp_path):
    ns = PartitionedNamespace.create(tmp_path / "ns", SCHEMA, FIELDS)
    ns.write(sample_table(6), commit_properties={"source": "test"})
    ns.write(sample_table(3, countries=("DE",), start=50))  # DE: two fragments to compact
    ns.write(sample_table(3, countries=("US",), start=100), mode="overwrite_partitions")
    ns.delete("country = 'FR'")
    ns.maintenance.compact()
    assert ManifestStore(ns.uri).commit_properties(1) == {"operation": "create"}
    summaries = [c.summary for c in ns.inspect.history()]
    assert all(s is not None and isinstance(s.operation, Operation) for s in summaries)
    ops = [str(s.operation) for s in summaries if s is not None]
    assert ops == ["create", "create", "write", "write", "write", "delete", "compact"]
    _, _, append, _, replace, delete, compact = (s for s in summaries if s is not None)
    assert append.mode == "append" and append.overwritten == () and append.source == "test"
    assert append.writer == WRITER_ID
    assert replace.mode == "overwrite_partitions" and len(replace.overwritten or ()) == 1
    assert delete.filter is not None and "FR" in delete.filter
    assert len(delete.overwritten or ()) == 1  # the partition it emptied
    assert compact.overwritten == () and compact.writer == WRITER_ID
