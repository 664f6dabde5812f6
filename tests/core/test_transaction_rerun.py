"""A transaction interrupted between its two manifest commits (issue 32, item 6), then run
again unchanged: the changes it made before the interruption are found in place (no error, no
second change), and its data lands exactly once, in one more commit. The interruption is
injected in this process right after the changes' commit, or is a real SIGKILL of a child
process at that point (``helpers/interrupted.py``).

Re-applying a change that is already in place is no error, in a transaction and through the
facade alike; a change that only looks alike (another type, a column that was never renamed
from that name) is still refused, naming the column, with nothing stored changed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import lance
import pyarrow as pa
import pytest
from helpers.data import fingerprint, sorted_rows
from helpers.interrupted import (
    SCHEMA,
    TRANSACTIONS,
    Interrupted,
    after_changes_commit,
    interrupt,
    new_namespace,
)

from dagster_lance_partitioned import PartitionedNamespace, PartitionField
from dagster_lance_partitioned.core.errors import SchemaError
from dagster_lance_partitioned.core.manifest.changes import TRANSACTION_PROPERTY

CHILD = Path(__file__).resolve().parents[1] / "helpers" / "interrupted.py"


def metadata(uri: str) -> dict[str, str]:
    return dict(lance.dataset(os.path.join(uri, "__manifest")).metadata)


def schema_and_specs(uri: str) -> dict[str, str]:
    """The table metadata a transaction's changes set (no naming key: it is random)."""
    return {k: v for k, v in metadata(uri).items() if k != "dlp.naming_key"}


def operations(ns: PartitionedNamespace, since: int) -> list[dict[str, str]]:
    return [dict(c.properties or {}) for c in ns.inspect.history(since=since)]


def expected_rows(before: pa.Table, data: pa.Table, merged: bool) -> list[dict]:
    """``before`` with ``data`` appended (or upserted on ``id``), as rows."""
    if not merged:
        return sorted_rows(pa.concat_tables([before, data.cast(before.schema)]))
    by_id = {r["id"]: r for r in before.to_pylist()}
    by_id.update({r["id"]: r for r in data.cast(before.schema).to_pylist()})
    return sorted_rows(pa.Table.from_pylist(list(by_id.values()), schema=before.schema))


def clean_run(tmp_path: Path, name: str) -> tuple[dict[str, str], list[dict]]:
    """Table metadata and rows after ``name`` ran once, uninterrupted, on a fresh namespace."""
    uri = str(tmp_path / "clean")
    ns = new_namespace(uri)
    TRANSACTIONS[name][0](ns)
    return schema_and_specs(uri), sorted_rows(PartitionedNamespace.open(uri).to_table())


def check_rerun(tmp_path: Path, uri: str, name: str, version0: int) -> None:
    """``uri`` holds the changes of transaction ``name`` without its data (one commit after
    ``version0``): running it again lands the data once and changes nothing else."""
    run, merged = TRANSACTIONS[name]
    crashed = PartitionedNamespace.open(uri)
    assert crashed.version == version0 + 1
    (props,) = operations(crashed, version0)
    assert props["operation"] != "write" and TRANSACTION_PROPERTY in props
    changed = schema_and_specs(uri)
    before = crashed.to_table()
    assert before.num_rows == 12  # the old rows only

    again = PartitionedNamespace.open(uri)
    data = run(again)  # the same code, unchanged

    after = PartitionedNamespace.open(uri)
    assert after.version == version0 + 2  # one more commit: the data's
    (props,) = operations(after, version0 + 1)
    assert props["operation"] == ("merge" if merged else "write")
    assert schema_and_specs(uri) == changed  # no change made twice, nothing else changed
    got = sorted_rows(after.to_table())
    assert got == expected_rows(before, data, merged)  # the data exactly once
    # the state one uninterrupted run leaves
    clean_metadata, clean_rows = clean_run(tmp_path, name)
    assert schema_and_specs(uri) == clean_metadata
    assert got == clean_rows


@pytest.mark.parametrize("name", sorted(TRANSACTIONS))
def test_a_transaction_interrupted_between_its_commits_lands_its_data_when_run_again(
    tmp_path: Path, name: str
) -> None:
    uri = str(tmp_path / "ns")
    ns = new_namespace(uri)
    version0 = ns.version
    with after_changes_commit(interrupt), pytest.raises(Interrupted):
        TRANSACTIONS[name][0](ns)
    check_rerun(tmp_path, uri, name, version0)


def test_a_transaction_killed_between_its_commits_lands_its_data_when_run_again(
    tmp_path: Path,
) -> None:
    uri = str(tmp_path / "ns")
    version0 = new_namespace(uri).version
    child = subprocess.run(
        [sys.executable, str(CHILD), uri, "every_step"],
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr.decode(errors="replace")[-3000:]
    check_rerun(tmp_path, uri, "every_step", version0)


# -- a change already in place, through the facade ------------------------------------------------
def test_the_facade_takes_a_change_already_in_place_as_done(tmp_path: Path) -> None:
    ns = new_namespace(str(tmp_path / "ns"))
    ns.add_columns(pa.field("score", pa.int32()))
    ns.rename_column("value", "amount")
    ns.drop_column("note")
    ns.promote_column("n", pa.int64())
    ns.update_spec([PartitionField.identity("country"), PartitionField.bucket("id", 4)])
    before = fingerprint(ns.uri)
    assert ns.add_columns(pa.field("score", pa.int32())) == before["manifest_version"]
    assert ns.rename_column("value", "amount") == before["manifest_version"]
    assert ns.drop_column("note") == before["manifest_version"]
    assert ns.promote_column("n", pa.int64()) == before["manifest_version"]
    assert (
        ns.update_spec([PartitionField.identity("country"), PartitionField.bucket("id", 4)])
        == before["manifest_version"]
    )
    assert fingerprint(ns.uri) == before  # nothing committed, nothing written


def test_add_columns_adds_only_the_columns_not_in_place(tmp_path: Path) -> None:
    ns = new_namespace(str(tmp_path / "ns"))
    nested = pa.field("s", pa.list_(pa.struct([("a", pa.int32()), ("b", pa.utf8())])))
    ns.add_columns([pa.field("score", pa.int32()), nested])
    version = ns.version
    assert ns.add_columns([nested, pa.field("score", pa.int32())]) == version
    ns.add_columns([pa.field("score", pa.int32()), pa.field("tag", pa.utf8()), nested])
    assert ns.version == version + 1
    assert ns.schema.names == [*SCHEMA.names, "score", "s", "tag"]
    ids = {f.name: f.metadata[b"lance:field_id"] for f in ns.schema_with_ids}
    assert (ids["score"], ids["s"], ids["tag"]) == (b"5", b"6", b"10")  # 7-9: the item, a, b of s
    with pytest.raises(SchemaError, match=r"'s'.*already has it"):
        ns.add_columns(pa.field("s", pa.list_(pa.struct([("a", pa.int64()), ("b", pa.utf8())]))))


def test_changes_that_only_look_in_place_are_still_refused(tmp_path: Path) -> None:
    ns = new_namespace(str(tmp_path / "ns"))
    ns.add_columns(pa.field("score", pa.int32()))
    ns.rename_column("value", "amount")
    before = fingerprint(ns.uri)
    # the same name with another type
    with pytest.raises(SchemaError, match=r"'score'.*already has it.*int32"):
        ns.add_columns(pa.field("score", pa.int64()))
    with pytest.raises(SchemaError, match=r"'score'.*already has it"):
        ns.add_columns(pa.field("score", pa.int32(), nullable=False))
    with pytest.raises(SchemaError, match=r"'id'.*already has it"):
        ns.add_columns(pa.field("id", pa.int64()))  # stored NOT NULL: never an added column
    in_place = r"'score'.*already has it.*int32"
    with pytest.raises(SchemaError, match=in_place), ns.transaction() as tx:
        tx.add_columns(pa.field("score", pa.utf8()))
    # a target that exists but was never called by the old name
    with pytest.raises(SchemaError, match=r"'typo' to 'amount'.*no such column"):
        ns.rename_column("typo", "amount")
    with pytest.raises(SchemaError, match=r"'country' to 'amount'.*already exists"):
        ns.rename_column("country", "amount")
    # a type the column does not have
    with pytest.raises(SchemaError, match=r"'n' from int32 to int16"):
        ns.promote_column("n", pa.int16())
    # never a column
    with pytest.raises(SchemaError, match=r"'never'.*no such column"):
        ns.drop_column("never")
    assert fingerprint(ns.uri) == before


def test_a_rename_is_in_place_only_for_the_column_it_renamed(tmp_path: Path) -> None:
    ns = new_namespace(str(tmp_path / "ns"))
    ns.rename_column("value", "amount")
    ns.drop_column("amount")
    ns.add_columns(pa.field("amount", pa.float64()))  # another column (field id) of that name
    before = fingerprint(ns.uri)
    with pytest.raises(SchemaError, match=r"'value' to 'amount'.*no such column"):
        ns.rename_column("value", "amount")
    assert fingerprint(ns.uri) == before
    # a rename chain: the column once called "note" is "remark" now
    ns.rename_column("note", "memo")
    ns.rename_column("memo", "remark")
    version = ns.version
    assert ns.rename_column("note", "remark") == version
    assert ns.rename_column("memo", "remark") == version
    # what tells them apart: the names each renamed column had (format.md, table metadata)
    assert json.loads(metadata(ns.uri)["dlp.former_names"]) == {
        "2": ["value"],
        "4": ["note", "memo"],
    }
    # a column named like the old one again: a rename of that one, refused as the name is taken
    ns.add_columns(pa.field("note", pa.utf8()))
    with pytest.raises(SchemaError, match=r"'note' to 'remark'.*already exists"):
        ns.rename_column("note", "remark")


def test_a_drop_in_place_is_done_and_a_readded_column_is_dropped_again(tmp_path: Path) -> None:
    ns = new_namespace(str(tmp_path / "ns"))
    ns.drop_column("note")
    version = ns.version
    assert ns.drop_column("note") == version
    ns.add_columns(pa.field("note", pa.int8()))
    assert ns.drop_column("note") == version + 2
    assert "note" not in ns.schema.names
