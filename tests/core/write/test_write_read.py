"""Writes in every mode and reads back: split, values, streaming, projection, reconciliation."""

from __future__ import annotations

import datetime as dt
import decimal
import os

import lance
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from helpers.data import SCHEMA, sample_table, sorted_rows

from dagster_lance_partitioned import PartitionedNamespace, PartitionField
from dagster_lance_partitioned.core.manifest.snapshot import ManifestSnapshot
from dagster_lance_partitioned.core.manifest.store import ManifestEdit, ManifestStore
from dagster_lance_partitioned.core.partitioning.partition_spec import specs_from_metadata


def make_ns(tmp_path, fields=None, schema=SCHEMA):
    fields = fields or [PartitionField.identity("country"), PartitionField.identity("event_date")]
    return PartitionedNamespace.create(tmp_path / "ns", schema=schema, partition_fields=fields)


def test_append_splits_rows_and_registers_one_table_per_partition(tmp_path, sample):
    ns = make_ns(tmp_path)
    result = ns.write(sample)
    assert result.rows_written == 12
    keys = {(p.values["country"], p.values["event_date"]) for p in result.partitions}
    expected = set(
        zip(sample["country"].to_pylist(), sample["event_date"].to_pylist(), strict=True)
    )
    assert keys == expected
    assert all(p.created and not p.replaced for p in result.partitions)
    assert ns.version == result.manifest_version
    assert sorted_rows(ns.to_table()) == sorted_rows(sample)
    # each partition table holds exactly its rows
    for task in ns.plan_scan().tasks:
        rows = lance.dataset(task.uri, version=task.read_version).to_table()
        assert set(rows["country"].to_pylist()) == {task.partition_values["country"]}
        assert set(rows["event_date"].to_pylist()) == {task.partition_values["event_date"]}


def test_modes_append_overwrite_partitions_overwrite(tmp_path, sample):
    ns = make_ns(tmp_path)
    ns.write(sample)
    ns.write(sample.slice(0, 3).set_column(0, "id", pa.array([100, 101, 102], pa.int64())))
    assert ns.to_table().num_rows == 15
    # overwrite_partitions: only partitions present in the data are replaced
    us = sample.filter(pc.equal(sample["country"], "US"))
    replacement = us.slice(0, 1).set_column(0, "id", pa.array([999], pa.int64()))
    key = (replacement["country"][0].as_py(), replacement["event_date"][0].as_py())

    def in_partition(t: pa.Table) -> pa.Table:
        return t.filter(pc.and_(pc.equal(t["country"], key[0]), pc.equal(t["event_date"], key[1])))

    before = ns.to_table()
    res = ns.write(replacement, mode="overwrite_partitions")
    assert [p.replaced for p in res.partitions] == [True]
    after = ns.to_table()
    assert in_partition(before).num_rows > 1
    assert in_partition(after)["id"].to_pylist() == [999]
    assert after.num_rows == before.num_rows - in_partition(before).num_rows + 1
    others = sorted_rows(
        before.filter(pc.invert(pc.is_in(before["id"], in_partition(before)["id"])))
    )
    assert sorted_rows(after.filter(pc.not_equal(after["id"], 999))) == others
    # overwrite: whole table replaced, absent partitions deregistered in the same commit
    before = ns.version
    res = ns.write(sample_table(2, countries=("JP",), start=500), mode="overwrite")
    assert ns.version == before + 1
    assert sorted(ns.to_table()["id"].to_pylist()) == [500, 501]
    assert len(ns.inspect.partitions()) == 2
    assert len(res.removed) == len(
        set(zip(sample["country"].to_pylist(), sample["event_date"].to_pylist(), strict=True))
    )
    manifest = lance.dataset(os.path.join(ns.uri, "__manifest")).to_table()
    ns_rows = [r for r in manifest.to_pylist() if r["object_type"] == "namespace"]
    # only v1 and the namespaces above the two remaining tables are left
    assert {r["partition_field_country"] for r in ns_rows} == {None, "JP"}


def test_overwrite_with_empty_data_empties_the_table(tmp_path, sample):
    ns = make_ns(tmp_path)
    ns.write(sample)
    ns.write(sample.slice(0, 0), mode="overwrite")
    assert ns.to_table().num_rows == 0
    assert ns.inspect.partitions() == []
    assert ns.to_table().schema == ns.schema


@pytest.mark.parametrize(
    "value",
    ["a$b", "x/y", "k=v", "100%", "it's", 'say "hi"', "ünïcødé ✓", "", "z" * 10_000, None],
)
def test_awkward_partition_values(tmp_path, value):
    ns = make_ns(tmp_path, [PartitionField.identity("country")])
    t = pa.table(
        {
            "id": [1, 2],
            "country": [value, "plain"],
            "event_date": [None, None],
            "value": [1.0, 2.0],
        },
        schema=SCHEMA,
    )
    ns.write(t)
    ns.write(t.slice(0, 1).set_column(0, "id", pa.array([3], pa.int64())))
    parts = {p["values"]["country"]: p for p in ns.inspect.partitions()}
    assert set(parts) == {value, "plain"}
    assert len(ns.inspect.partitions()) == 2  # the second write reused the partition
    for d in os.listdir(ns.uri):
        if value:
            assert value not in d
        assert len(d.split("_", 1)[0]) in (8, 0) or d == "__manifest"
    filt = "country IS NULL" if value is None else [("country", "=", value)]
    got = ns.to_table(filter=filt)
    assert sorted(got["id"].to_pylist()) == [1, 3]
    assert len(ns.plan_scan(filt).tasks) == 1


def test_null_partition_is_its_own_partition(tmp_path):
    ns = make_ns(tmp_path)
    t = pa.table(
        {
            "id": [1, 2, 3, 4],
            "country": [None, None, "US", None],
            "event_date": [None, dt.date(2025, 1, 1), None, None],
            "value": [1.0, 2.0, 3.0, 4.0],
        },
        schema=SCHEMA,
    )
    res = ns.write(t)
    got = {tuple(p.values.values()): p.rows for p in res.partitions}
    assert got == {(None, None): 2, (None, dt.date(2025, 1, 1)): 1, ("US", None): 1}
    assert ns.to_table("country IS NULL AND event_date IS NULL")["id"].to_pylist() == [1, 4]
    assert len(ns.plan_scan("country IS NULL AND event_date IS NULL").tasks) == 1
    ns.write(t.slice(0, 1), mode="overwrite_partitions")
    assert sorted(ns.to_table()["id"].to_pylist()) == [1, 2, 3]


def test_every_transform_writes_and_reads(tmp_path):
    schema = pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("ts", pa.timestamp("us", tz="UTC")),
            pa.field("d", pa.date32()),
            pa.field("user_id", pa.int32()),
            pa.field("name", pa.utf8()),
            pa.field("amount", pa.decimal128(10, 2)),
        ]
    )
    fields = [
        PartitionField.year("d"),
        PartitionField.month("d"),
        PartitionField.day("d"),
        PartitionField.hour("ts"),
        PartitionField.bucket("user_id", 4),
        PartitionField.multi_bucket(["user_id", "name"], 3),
        PartitionField.truncate("name", 2),
        PartitionField.expression(
            ["name", "user_id"],
            "concat(col0, '-', CAST(col1 AS VARCHAR))",
            result_type=pa.utf8(),
            field_id="name_user",
        ),
    ]
    ns = PartitionedNamespace.create(tmp_path / "t", schema, fields)
    n = 40
    t = pa.table(
        {
            "id": list(range(n)),
            "ts": [dt.datetime(2025, 1, 1, i % 24, tzinfo=dt.UTC) for i in range(n)],
            "d": [dt.date(2024 + i % 2, 1 + i % 12, 1 + i % 28) for i in range(n)],
            "user_id": [i % 7 if i % 5 else None for i in range(n)],
            "name": [f"n{i % 3}x" for i in range(n)],
            "amount": [decimal.Decimal(f"{i}.25") for i in range(n)],
        },
        schema=schema,
    )
    res = ns.write(t)
    assert sum(p.rows for p in res.partitions) == n
    for p in res.partitions:
        v = p.values
        assert v["d_year"] in (2024, 2025) and 1 <= v["d_month"] <= 12
        assert 0 <= v["ts_hour"] <= 23
        assert v["user_id_bucket_4"] is None or 0 <= v["user_id_bucket_4"] < 4
        assert 0 <= v["user_id_name_bucket_3"] < 3  # murmur3_multi ignores the NULL user_id
        assert v["name_trunc_2"] in ("n0", "n1", "n2")
    assert sorted_rows(ns.to_table()) == sorted_rows(t)


def test_streaming_reader_flushes_and_keeps_every_row(tmp_path, tune):
    tune(partition_flush_bytes=4_000)
    tune(total_flush_bytes=10_000)
    ns = make_ns(tmp_path)
    batches = [sample_table(200, start=i * 200).to_batches()[0] for i in range(10)]
    reader = pa.RecordBatchReader.from_batches(SCHEMA, iter(batches))
    res = ns.write(reader)
    assert res.rows_written == 2000
    got = ns.to_table()
    assert sorted(got["id"].to_pylist()) == list(range(2000))
    # buffers were flushed along the way: partitions hold several fragments
    frags = [
        len(lance.dataset(t.uri, version=t.read_version).get_fragments())
        for t in ns.plan_scan().tasks
    ]
    assert max(frags) > 1


def test_arrow_c_stream_and_record_batch_inputs(tmp_path, sample):
    ns = make_ns(tmp_path)

    class Stream:
        def __arrow_c_stream__(self, requested_schema=None):
            return sample.__arrow_c_stream__(requested_schema)

    ns.write(Stream())
    ns.write(sample.to_batches()[0].slice(0, 2))
    assert ns.to_table().num_rows == 14
    with pytest.raises(TypeError, match="cannot write list"):
        ns.write([1, 2])


def test_write_casts_compatible_types_and_fills_missing_nullable_columns(tmp_path):
    ns = make_ns(tmp_path)
    t = pa.table(
        {
            "id": pa.array([1, 2], pa.int32()),
            "country": pa.array(["US", "US"]).dictionary_encode(),
        }
    )
    ns.write(t)
    got = ns.to_table()
    assert got.schema == ns.schema
    assert sorted_rows(got) == [
        {"id": 1, "country": "US", "event_date": None, "value": None},
        {"id": 2, "country": "US", "event_date": None, "value": None},
    ]


def test_projection_filter_and_plan(tmp_path, sample):
    ns = make_ns(tmp_path)
    ns.write(sample)
    got = ns.to_table(filter="country = 'FR' AND value > 3", columns=["id", "value"])
    assert got.column_names == ["id", "value"]
    expected = [r["id"] for r in sample.to_pylist() if r["country"] == "FR" and r["value"] > 3]
    assert sorted(got["id"].to_pylist()) == sorted(expected)
    plan = ns.plan_scan("country = 'FR' AND event_date = '2025-12-10'")
    assert len(plan.tasks) == 1 and plan.total_partitions == len(ns.inspect.partitions())
    assert plan.tasks[0].partition_values == {"country": "FR", "event_date": dt.date(2025, 12, 10)}
    assert plan.residual_filter == "country = 'FR' AND event_date = '2025-12-10'"
    in_plan = ns.plan_scan([("country", "in", ["FR", "US"])])
    assert {t.partition_values["country"] for t in in_plan.tasks} == {"FR", "US"}
    assert ns.count_rows("country = 'US'") == 4


def test_time_travel_reads_the_whole_table_as_of_a_manifest_version(tmp_path, sample):
    ns = make_ns(tmp_path)
    v_first = ns.write(sample).manifest_version
    ns.write(sample_table(3, start=100))
    ns.write(sample_table(3, start=200), mode="overwrite_partitions")
    ns.write(sample_table(1, start=300), mode="overwrite")
    old = PartitionedNamespace.open(ns.uri, version=v_first)
    assert sorted_rows(old.to_table()) == sorted_rows(sample)
    assert old.version == v_first
    with pytest.raises(Exception, match="opened at manifest version"):
        old.write(sample)


def test_reads_reconcile_partition_table_schemas(tmp_path, sample):
    """A partition table lacking a column reads NULLs, a narrower type is cast, extras dropped."""
    ns = make_ns(tmp_path, [PartitionField.identity("country")])
    ns.write(sample)
    task = ns.plan_scan("country = 'US'").tasks[0]
    odd = pa.table(
        {
            "id": pa.array([7, 8], pa.int32()),  # narrower than int64
            "country": ["US", "US"],
            "extra": ["x", "y"],  # not in the namespace schema
        }  # event_date and value missing
    )
    new_version = lance.write_dataset(odd, task.uri, mode="overwrite").version
    store = ManifestStore(ns.uri)
    store.commit(
        lambda ds: ManifestSnapshot(ds, specs_from_metadata(dict(ds.metadata))),
        lambda snap: ManifestEdit(
            upserts={task.object_id: {"read_version": new_version}},
            properties={"overwritten": "[]"},
        ),
    )
    ns.refresh()
    us = ns.to_table(filter="country = 'US'")
    assert us.schema == ns.schema
    assert sorted_rows(us) == [
        {"id": 7, "country": "US", "event_date": None, "value": None},
        {"id": 8, "country": "US", "event_date": None, "value": None},
    ]
    assert sorted(ns.to_table(filter="id > 7 AND country = 'US'")["id"].to_pylist()) == [8]
    assert ns.to_table(columns=["value"]).num_rows == sample.num_rows - 4 + 2


def test_large_batches_keep_rows_aligned_with_their_partition_values(tmp_path):
    """Values computed by DataFusion must line up with the rows they came from, also for
    batches larger than DataFusion's own batch size (a reordering would misfile rows)."""
    n = 100_000
    months = [(i * 7919) % 12 + 1 for i in range(n)]  # interleaved, not sorted
    schema = pa.schema([("id", pa.int64()), ("d", pa.date32()), ("k", pa.utf8())])
    t = pa.table(
        {
            "id": list(range(n)),
            "d": [dt.date(2025, m, 1 + i % 28) for i, m in enumerate(months)],
            "k": [("a", "b", "c")[i % 3] for i in range(n)],
        },
        schema=schema,
    )
    assert t.to_batches()[0].num_rows > 8192
    ns = PartitionedNamespace.create(
        tmp_path / "big", schema, [PartitionField.identity("k"), PartitionField.month("d")]
    )
    ns.write(t)
    for task in ns.plan_scan().tasks:
        rows = lance.dataset(task.uri, version=task.read_version).to_table()
        assert set(rows["k"].to_pylist()) == {task.partition_values["k"]}
        assert {x.month for x in rows["d"].to_pylist()} == {task.partition_values["d_month"]}
    assert sorted(ns.to_table()["id"].to_pylist()) == list(range(n))


def test_streamed_input_keeps_at_most_one_input_batch_alive(tmp_path, tune):
    """A partition that gets one row from every batch must not pin every input batch: Arrow
    memory stays bounded by the buffers, not by the input size."""
    tune(partition_flush_bytes=1 << 20)
    tune(total_flush_bytes=4 << 20)
    schema = pa.schema([("id", pa.int64()), ("country", pa.utf8()), ("payload", pa.utf8())])
    ns = PartitionedNamespace.create(tmp_path / "s", schema, [PartitionField.identity("country")])
    rows, batches_n, payload = 3001, 20, "x" * 2000  # ~6 MB a batch, ~120 MB in all
    peak = 0

    def batches():
        nonlocal peak
        for i in range(batches_n):
            countries = ["DE"] + ["US", "FR"] * ((rows - 1) // 2)
            yield pa.record_batch(
                {
                    "id": pa.array(range(i * rows, (i + 1) * rows), pa.int64()),
                    "country": countries,
                    "payload": [payload] * rows,
                },
                schema=schema,
            )
            peak = max(peak, pa.total_allocated_bytes())

    base = pa.total_allocated_bytes()
    ns.write(pa.RecordBatchReader.from_batches(schema, batches()))
    assert ns.count_rows() == rows * batches_n
    assert ns.count_rows("country = 'DE'") == batches_n
    assert peak - base < 40 << 20, f"{(peak - base) >> 20} MiB held while streaming"


def test_write_limited_to_named_partitions(tmp_path, sample):
    from helpers.data import fingerprint

    from dagster_lance_partitioned import WriteError

    ns = make_ns(tmp_path)
    ns.write(sample)
    before = fingerprint(ns.uri)
    named = [{"country": "US", "event_date": "2025-12-10"}]  # values cast to the field types
    stray = sample.filter(pc.equal(sample["country"], "FR")).slice(0, 1)
    with pytest.raises(WriteError, match=r"partition \{'country': 'FR'.*Sample row: \{'id'"):
        ns.write(stray, mode="overwrite_partitions", partitions=named)
    after = fingerprint(ns.uri)
    assert after["manifest_version"] == before["manifest_version"]
    assert after["manifest_rows"] == before["manifest_rows"]
    with pytest.raises(WriteError, match="missing \\['event_date'\\]"):
        ns.write(stray, partitions=[{"country": "FR"}])
    # a named partition without rows becomes empty; other partitions are untouched
    others = ns.to_table("NOT (country = 'US' AND event_date = DATE '2025-12-10')")
    res = ns.write(sample.slice(0, 0), mode="overwrite_partitions", partitions=named)
    assert [p.rows for p in res.partitions] == [0]
    assert ns.count_rows("country = 'US' AND event_date = DATE '2025-12-10'") == 0
    assert sorted_rows(
        ns.to_table("NOT (country = 'US' AND event_date = DATE '2025-12-10')")
    ) == sorted_rows(others)
    # rows inside the named partitions are written as usual
    row = sample.filter(pc.equal(sample["country"], "US")).slice(0, 1)
    ns.write(
        row,
        mode="append",
        partitions=[{"country": "US", "event_date": row["event_date"][0].as_py()}],
    )
    assert ns.count_rows("country = 'US'") >= 1


def test_reading_a_task_fragment_by_fragment(tmp_path, tune):
    from dagster_lance_partitioned.core.read.scan import iter_task_batches, lance_filter

    tune(max_rows_per_file=10)
    ns = make_ns(tmp_path, [PartitionField.identity("country")])
    ns.write(sample_table(90, countries=("US", "FR")))
    for flt in (None, "value > 40"):
        translated = lance_filter(flt, ns.schema)
        for task in ns.plan_scan(flt).tasks:
            frags = lance.dataset(task.uri, version=task.read_version).get_fragments()
            assert len(frags) > 1
            whole = pa.Table.from_batches(
                list(iter_task_batches(task, ns.schema_with_ids, None, flt, None, None, translated))
            )
            pieces = [
                row
                for f in frags
                for b in iter_task_batches(
                    task, ns.schema_with_ids, ["id"], flt, None, None, translated, [f.fragment_id]
                )
                for row in b.to_pylist()
            ]
            assert sorted(r["id"] for r in pieces) == sorted(whole["id"].to_pylist())
