"""Staged writes: workers write fragments, the driver commits once."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import re

import lance
import pyarrow as pa
import pytest
from helpers.data import SCHEMA, fingerprint, sample_table, sorted_rows

from dagster_lance_partitioned import PartitionedNamespace, PartitionField, SchemaMismatchError
from dagster_lance_partitioned.core.write.staged import StagedWrite, StageResult


@pytest.fixture
def ns(tmp_path):
    ns = PartitionedNamespace.create(
        tmp_path / "ns",
        SCHEMA,
        [PartitionField.identity("country"), PartitionField.identity("event_date")],
    )
    ns.write(sample_table(12))
    return ns


def _stage_in_child(sw_bytes: bytes, table_bytes: bytes) -> bytes:
    sw = pickle.loads(sw_bytes)
    table = pa.ipc.open_stream(table_bytes).read_all()
    return pickle.dumps(sw.stage(table.to_batches(max_chunksize=4)))


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def test_workers_in_other_processes_share_new_partition_tables(ns):
    before_rows = sorted_rows(ns.to_table())
    sw = StagedWrite.begin(ns, "append")
    # both workers hold rows of the same new partitions (JP) and of existing ones (US)
    a = sample_table(8, countries=("JP", "US"), start=100)
    b = sample_table(8, countries=("JP", "US"), start=200)
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:
        results = pool.starmap(
            _stage_in_child, [(pickle.dumps(sw), _ipc(a)), (pickle.dumps(sw), _ipc(b))]
        )
    messages = [pickle.loads(r) for r in results]
    assert all(isinstance(m, StageResult) for m in messages)
    assert sum(m.rows for m in messages) == 16
    # staged but not committed: readers see the previous state
    assert sorted_rows(PartitionedNamespace.open(ns.uri).to_table()) == before_rows
    result = sw.commit(messages)
    ns.refresh()
    assert sorted_rows(ns.to_table()) == sorted(
        before_rows + a.to_pylist() + b.to_pylist(), key=lambda r: r["id"]
    )
    parts = ns.inspect.partitions()
    keys = [tuple(p["values"].values()) for p in parts]
    assert len(keys) == len(set(keys))  # one table per partition, shared by both workers
    for p in parts:
        assert re.fullmatch(r"[0-9a-f]{8}_" + re.escape(p["object_id"]), p["location"])
    assert result.rows_written == 16 and result.manifest_version == ns.version


def test_abort_and_uncommitted_stages_change_nothing_visible(ns):
    before = fingerprint(ns.uri)
    sw = StagedWrite.begin(ns, "overwrite")
    message = sw.stage(sample_table(6, countries=("ZZ",), start=500).to_batches())
    sw.abort([message])
    after = fingerprint(ns.uri)
    assert after["manifest_version"] == before["manifest_version"]
    assert after["manifest_rows"] == before["manifest_rows"]
    assert ns.refresh().to_table().num_rows == 12


def test_modes(ns):
    sw = StagedWrite.begin(ns, "overwrite_partitions")
    us = sample_table(12).filter(pa.compute.equal(sample_table(12)["country"], "US"))
    replacement = us.set_column(0, "id", pa.array(range(900, 900 + us.num_rows), pa.int64()))
    sw.commit([sw.stage(replacement.to_batches())])
    got = ns.refresh().to_table()
    assert sorted(r["id"] for r in got.to_pylist() if r["country"] == "US") == list(
        range(900, 900 + us.num_rows)
    )
    assert got.num_rows == 12
    sw = StagedWrite.begin(ns, "overwrite")
    sw.commit([sw.stage(sample_table(2, countries=("FR",), start=7).to_batches()), None])
    assert sorted(ns.refresh().to_table()["id"].to_pylist()) == [7, 8]


def test_a_core_write_between_begin_and_commit_is_kept(ns):
    sw = StagedWrite.begin(ns, "append")
    message = sw.stage(sample_table(3, countries=("US",), start=300).to_batches())
    ns.write(sample_table(3, countries=("US",), start=400))  # commits first
    sw.commit([message])
    ids = ns.refresh().to_table()["id"].to_pylist()
    assert {300, 301, 302, 400, 401, 402} <= set(ids) and len(ids) == 18


def test_schema_check_names_the_column_and_nothing_is_written(ns):
    before = fingerprint(ns.uri)
    sw = StagedWrite.begin(ns)
    with pytest.raises(SchemaMismatchError, match="'bogus'"):
        sw.check_schema(SCHEMA.append(pa.field("bogus", pa.utf8())))
    assert sw.stage([]) == StageResult()
    assert fingerprint(ns.uri) == before
    assert sw.schema.names == SCHEMA.names
    # a detached version only: the partition table's main line did not move
    task = ns.plan_scan("country = 'US'").tasks[0]
    main = lance.dataset(task.uri)
    assert main.version == 1 and os.path.isdir(task.uri)


def test_staged_write_limited_to_named_partitions(ns):
    from dagster_lance_partitioned import WriteError

    named = [{"country": "US", "event_date": "2025-12-10"}]
    sw = StagedWrite.begin(ns, "overwrite_partitions", partitions=named)
    with pytest.raises(WriteError, match="'FR'"):
        sw.stage(sample_table(3).to_batches())  # the worker refuses rows of other partitions
    sw.commit([None])  # no rows staged: the named partition becomes empty
    assert ns.refresh().count_rows("country = 'US' AND event_date = DATE '2025-12-10'") == 0
    assert ns.count_rows() == 12 - len(
        [
            r
            for r in sample_table(12).to_pylist()
            if r["country"] == "US" and str(r["event_date"]) == "2025-12-10"
        ]
    )


@pytest.mark.parametrize("staged", [False, True], ids=["write", "staged"])
def test_named_new_partition_without_rows_is_registered_empty(ns, staged):
    """``overwrite_partitions`` of N named partitions leaves N partitions, also new ones."""
    named = [
        {"country": "US", "event_date": "2025-12-10"},
        {"country": "JP", "event_date": "2025-12-10"},  # not in the namespace, gets no rows
    ]
    rows = sample_table(12).filter(
        pa.compute.and_(
            pa.compute.equal(sample_table(12)["country"], "US"),
            pa.compute.equal(
                sample_table(12)["event_date"], pa.scalar("2025-12-10").cast(pa.date32())
            ),
        )
    )
    before = len(ns.inspect.partitions())
    if staged:
        sw = StagedWrite.begin(ns, "overwrite_partitions", partitions=named)
        result = sw.commit([sw.stage(rows.to_batches())])
    else:
        result = ns.write(rows, "overwrite_partitions", partitions=named)
    ns.refresh()
    jp = [p for p in ns.inspect.partitions() if p["values"]["country"] == "JP"]
    assert len(jp) == 1 and len(ns.inspect.partitions()) == before + 1
    assert ns.count_rows("country = 'JP'") == 0
    assert ns.count_rows("country = 'US' AND event_date = DATE '2025-12-10'") == rows.num_rows
    assert sorted((p.values["country"], p.rows, p.created) for p in result.partitions) == [
        ("JP", 0, True),
        ("US", rows.num_rows, False),
    ]
