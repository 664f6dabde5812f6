"""Writing partitioned namespaces through the ``lance_partitioned`` Spark data source (real
Spark, local[2]): round trips, modes, atomicity under task failure, concurrency, schema checks."""

from __future__ import annotations

import datetime as dt
import os
import pickle
import threading
import time

import lance
import pyarrow as pa
import pytest
from helpers.data import SCHEMA, fingerprint, sample_table, sorted_rows
from helpers.spark import every_type_table, rows_of
from helpers.stats import assert_statistics_hold

from dagster_lance_partitioned import (
    PartitionedNamespace,
    PartitionField,
    SchemaMismatchError,
    WriteError,
)
from dagster_lance_partitioned.core.errors import NamespaceNotFoundError, PartitionByError
from dagster_lance_partitioned.core.manifest.store import ManifestStore
from dagster_lance_partitioned.core.partitioning.partition_by import parse_partition_by
from dagster_lance_partitioned.core.partitioning.transforms import Bucket, Identity, Year
from dagster_lance_partitioned.core.write.staged import StagedWrite
from dagster_lance_partitioned.spark import FORMAT, write_dataframe
from dagster_lance_partitioned.spark.result import Summary, find_result
from dagster_lance_partitioned.spark.writer import LancePartitionedWriter, scatter_advice

FIELDS = [PartitionField.identity("country"), PartitionField.identity("event_date")]


def make_ns(path, schema=SCHEMA, fields=FIELDS) -> PartitionedNamespace:
    return PartitionedNamespace.create(path, schema, fields)


def frame(spark, table: pa.Table, slices: int = 3):
    """A DataFrame of ``table`` spread over ``slices`` Spark partitions."""
    return spark.createDataFrame(table).repartition(slices)


def visible(ns_or_uri) -> dict:
    """What readers see: the manifest version and its rows (not the orphan files)."""
    fp = fingerprint(ns_or_uri if isinstance(ns_or_uri, str) else ns_or_uri.uri)
    return {k: fp[k] for k in ("manifest_version", "manifest_rows", "metadata")}


def test_spark_write_round_trips_every_type(spark, tmp_path):
    table = every_type_table()
    fields = [PartitionField.identity("country"), PartitionField.day("ts_utc")]
    source = PartitionedNamespace.create(tmp_path / "src", table.schema, fields)
    source.write(table)
    target = PartitionedNamespace.create(tmp_path / "dst", table.schema, fields)
    df = spark.read.format(FORMAT).load(source.uri).repartition(2)
    df.write.format(FORMAT).mode("append").save(target.uri)
    target.refresh()
    assert target.to_table().schema == table.schema
    assert rows_of(target.to_table()) == rows_of(table)
    # the NULL partitions (country NULL) landed in their own tables, as the core writes them
    assert sorted(map(str, (p["values"] for p in target.inspect.partitions()))) == sorted(
        map(str, (p["values"] for p in source.inspect.partitions()))
    )
    # the workers' statistics of every type, combined on the driver, hold for the rows
    assert assert_statistics_hold(target) == len(target.inspect.partitions())


def test_append_commits_each_partition_table_once_in_one_manifest_commit(spark, tmp_path):
    ns = make_ns(tmp_path / "ns")
    ns.write(sample_table(12))
    before = ns.version
    frame(spark, sample_table(30, start=100)).write.format(FORMAT).mode("append").save(ns.uri)
    ns.refresh()
    assert ns.version == before + 1  # one manifest commit for the whole job
    assert assert_statistics_hold(ns) == len(ns.inspect.partitions())  # appended: combined
    assert sorted_rows(ns.to_table()) == sorted_rows(
        pa.concat_tables([sample_table(12), sample_table(30, start=100)])
    )
    # three Spark tasks each staged rows of every partition: still one new version per table
    for p in ns.inspect.partitions():
        ds = lance.dataset(os.path.join(ns.uri, p["location"]), version=p["read_version"])
        assert ds.count_rows() == ns.count_rows(
            [
                ("country", "=", p["values"]["country"]),
                ("event_date", "=", p["values"]["event_date"]),
            ]
        )


def test_dynamic_overwrite_replaces_only_present_partitions(spark, tmp_path):
    ns = make_ns(tmp_path / "ns")
    ns.write(sample_table(18))  # US, FR, DE x 3 dates
    replacement = sample_table(6, countries=("US",), start=500)  # US on 3 dates
    (
        frame(spark, replacement)
        .write.format(FORMAT)
        .mode("overwrite")
        .option("partitionOverwriteMode", "dynamic")
        .save(ns.uri)
    )
    ns.refresh()
    rows = ns.to_table().to_pylist()
    assert sorted(r["id"] for r in rows if r["country"] == "US") == list(range(500, 506))
    others = [r for r in sample_table(18).to_pylist() if r["country"] != "US"]
    assert sorted_rows(pa.Table.from_pylist([r for r in rows if r["country"] != "US"])) == (
        sorted_rows(pa.Table.from_pylist(others, schema=SCHEMA))
    )


def test_overwrite_replaces_the_whole_table(spark, tmp_path):
    ns = make_ns(tmp_path / "ns")
    ns.write(sample_table(18))
    new = sample_table(4, countries=("JP",), start=900)
    frame(spark, new, 2).write.format(FORMAT).mode("overwrite").save(ns.uri)
    ns.refresh()
    assert sorted_rows(ns.to_table()) == sorted_rows(new)
    assert {p["values"]["country"] for p in ns.inspect.partitions()} == {"JP"}


def test_failing_task_changes_nothing_visible(spark, tmp_path):
    ns = make_ns(tmp_path / "ns")
    ns.write(sample_table(12))
    before = visible(ns)
    rows_before = sorted_rows(ns.to_table())

    def explode_on_one_row(batches):
        for batch in batches:
            if 1013 in batch.column("id").to_pylist():
                raise RuntimeError("injected failure")
            yield batch

    df = frame(spark, sample_table(40, start=1000), 4)
    failing = df.mapInArrow(explode_on_one_row, df.schema)
    with pytest.raises(Exception, match="injected failure"):
        failing.write.format(FORMAT).mode("overwrite").save(ns.uri)
    assert visible(ns) == before
    assert sorted_rows(PartitionedNamespace.open(ns.uri).to_table()) == rows_before
    # the same through the helper, which reports a WriteError
    with pytest.raises(WriteError, match="nothing committed"):
        write_dataframe(failing, ns.uri, "append")
    assert visible(ns) == before


def test_concurrent_spark_append_and_core_write_both_land(spark, tmp_path):
    ns = make_ns(tmp_path / "ns")
    ns.write(sample_table(6))
    started, go = tmp_path / "started", tmp_path / "go"

    def wait_for_go(batches):
        started.touch()
        deadline = time.monotonic() + 60
        while not go.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        yield from batches

    spark_rows = sample_table(12, start=100)
    df = frame(spark, spark_rows, 2)
    blocked = df.mapInArrow(wait_for_go, df.schema)
    errors: list[BaseException] = []

    def run() -> None:  # in another thread, as a Dagster op may run
        try:
            write_dataframe(blocked, ns.uri, "append")
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    thread = threading.Thread(target=run)
    thread.start()
    deadline = time.monotonic() + 60
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert started.exists(), errors
    core_rows = sample_table(6, countries=("JP",), start=200)
    PartitionedNamespace.open(ns.uri).write(core_rows)  # commits while Spark is staging
    go.touch()
    thread.join(120)
    assert not errors, errors
    ns.refresh()
    assert sorted_rows(ns.to_table()) == sorted_rows(
        pa.concat_tables([sample_table(6), spark_rows, core_rows])
    )


def test_schema_mismatch_names_the_column_and_writes_nothing(spark, tmp_path):
    ns = make_ns(tmp_path / "ns")
    ns.write(sample_table(6))
    before = fingerprint(ns.uri)
    bad = spark.createDataFrame(sample_table(3)).selectExpr(
        "id", "country", "event_date", "CAST(value AS STRING) AS value"
    )
    with pytest.raises(Exception, match="'value'"):
        bad.write.format(FORMAT).mode("append").save(ns.uri)
    with pytest.raises(SchemaMismatchError, match="'value'") as info:
        write_dataframe(bad, ns.uri, "append")
    assert info.value.column == "value"
    extra = spark.createDataFrame(sample_table(3)).selectExpr("*", "1 AS surprise")
    with pytest.raises(SchemaMismatchError, match="'surprise'"):
        write_dataframe(extra, ns.uri)
    assert fingerprint(ns.uri) == before  # not even orphan files


def test_missing_namespace_is_created_with_partition_by(spark, tmp_path):
    df = frame(spark, sample_table(12), 2)
    uri = str(tmp_path / "created")
    with pytest.raises(Exception, match="partitionBy"):
        df.write.format(FORMAT).mode("append").save(uri)
    with pytest.raises(NamespaceNotFoundError, match="partitionBy"):
        write_dataframe(df, uri)
    (
        df.write.format(FORMAT)
        .mode("append")
        .option("partitionBy", "country, year(event_date), bucket(id, 4)")
        .save(uri)
    )
    ns = PartitionedNamespace.open(uri)
    assert [type(f.transform) for f in ns.current_spec.fields] == [Identity, Year, Bucket]
    assert sorted_rows(ns.to_table()) == sorted_rows(sample_table(12))
    json_uri = str(tmp_path / "created_json")
    result = write_dataframe(
        df, json_uri, partition_by='[{"transform": "identity", "column": "country"}]'
    )
    assert result is not None and result.rows_written == 12
    assert {p.values["country"] for p in result.partitions} == {"US", "FR", "DE"}


def test_write_dataframe_reports_rows_per_partition_and_clusters(spark, tmp_path):
    ns = make_ns(tmp_path / "ns")
    result = write_dataframe(frame(spark, sample_table(36), 4), ns.uri)
    ns.refresh()
    assert result is not None
    assert result.manifest_version == ns.version
    assert result.rows_written == 36 and len(result.partitions) == 9
    assert all(p.rows == 4 for p in result.partitions)
    # rows were clustered by partition first: one fragment per partition table
    for p in ns.inspect.partitions():
        ds = lance.dataset(os.path.join(ns.uri, p["location"]), version=p["read_version"])
        assert len(ds.get_fragments()) == 1


def test_write_dataframe_partition_values_restrict_the_write(spark, tmp_path):
    ns = make_ns(tmp_path / "ns")
    ns.write(sample_table(18))
    before = visible(ns)
    us = sample_table(6, countries=("US",), start=300)

    allowed = [{"country": "US", "event_date": d} for d in (dt.date(2025, 12, 10),)]
    with pytest.raises(WriteError, match="may not touch"):
        write_dataframe(
            frame(spark, us, 2), ns.uri, "overwrite_partitions", partition_values=allowed
        )
    assert visible(ns) == before
    one_day = us.filter(pa.compute.equal(us["event_date"], pa.scalar(dt.date(2025, 12, 10))))
    result = write_dataframe(
        frame(spark, one_day, 2), ns.uri, "overwrite_partitions", partition_values=allowed
    )
    assert result is not None and {tuple(p.values.values()) for p in result.partitions} == {
        ("US", dt.date(2025, 12, 10))
    }
    ns.refresh()
    got = ns.to_table(filter="country = 'US' AND event_date = DATE '2025-12-10'")
    assert sorted(got["id"].to_pylist()) == sorted(one_day["id"].to_pylist())
    assert ns.count_rows() == 18 - 2 + one_day.num_rows


def test_parse_partition_by_forms():
    fields = parse_partition_by("country,year(event_date),bucket(user_id,16),truncate(name, 3)")
    assert [f.source_columns for f in fields] == [
        ("country",),
        ("event_date",),
        ("user_id",),
        ("name",),
    ]
    assert fields[2].transform == Bucket(16)
    multi = parse_partition_by("multi_bucket(a, b, 8)")[0]
    assert multi.source_columns == ("a", "b")
    expr = parse_partition_by(
        '[{"expression": "CAST(col0 AS DATE)", "columns": ["ts"], "result_type": "date32",'
        ' "field_id": "event_day"}, "hour(ts)"]'
    )
    assert expr[0].field_id == "event_day" and expr[0].result_type == pa.date32()
    with pytest.raises(PartitionByError, match="cannot read"):
        parse_partition_by("median(x)")


# -- commit results through the namespace, compact commit messages, scattered writes ----------


def _wide_table(n: int, partitions: int) -> pa.Table:
    """``n`` rows over ``partitions`` (country, day) partitions and eight more columns."""
    cols = {
        "id": pa.array(range(n), pa.int64()),
        "country": [f"C{i % partitions:03d}" for i in range(n)],
        "event_date": [dt.date(2025, 1, 1) + dt.timedelta(days=i % partitions) for i in range(n)],
    }
    for k in range(8):
        cols[f"m{k}"] = pa.array([float(i) for i in range(n)])
    return pa.table(cols)


def test_commit_messages_stay_under_100_bytes_per_task_partition_pair(tmp_path):
    """Nine tasks each writing into the same 200 partitions: what each task sends the driver
    (its pickled commit message) is at most 100 bytes per task-partition pair; the former
    message (the pickled StageResult) was about 840."""
    table = _wide_table(9 * 2000, 200)
    ns = PartitionedNamespace.create(tmp_path / "ns", table.schema, FIELDS)
    ns.write(table.slice(0, 200))  # appends: the messages then carry the tables' layouts
    before = ns.version
    staged = StagedWrite.begin(ns, "append")
    writer = LancePartitionedWriter(staged)
    slices = [table.slice(i * 2000, 2000) for i in range(9)]
    messages = [writer.write(iter(s.to_batches())) for s in slices]
    pairs = sum(m.partitions for m in messages)
    assert pairs == 9 * 200
    per_pair = sum(len(pickle.dumps(m)) for m in messages) / pairs
    former = staged.stage(slices[0].to_batches())
    former_per_pair = len(pickle.dumps(former)) / len(former.partitions)
    print(
        f"commit message bytes per task-partition pair: {per_pair:.1f} (was {former_per_pair:.0f})"
    )
    assert per_pair <= 100 < former_per_pair
    writer.commit(messages)
    result = find_result(ns.uri, None, before, staged.write_id)
    assert result is not None and result.manifest_version == before + 1
    assert result.rows_written == table.num_rows and len(result.partitions) == 200
    assert PartitionedNamespace.open(ns.uri).count_rows() == 200 + table.num_rows


def test_write_dataframe_result_is_read_back_from_the_commit(spark, tmp_path):
    """The commit records the write under the caller's write id; write_dataframe rebuilds its
    result from the namespace (no file passes between the driver's commit and the caller)."""
    table = every_type_table()
    fields = [PartitionField.identity("country"), PartitionField.day("ts_utc")]
    source = PartitionedNamespace.create(tmp_path / "src", table.schema, fields)
    source.write(table)
    ns = PartitionedNamespace.create(tmp_path / "ns", table.schema, fields)
    ns.write(table.slice(0, 2))
    df = spark.read.format(FORMAT).load(source.uri).repartition(2)
    result = write_dataframe(df, ns.uri, "overwrite_partitions")
    ns.refresh()
    assert result is not None and result.manifest_version == ns.version
    assert result.mode == "overwrite_partitions"
    pins = {p["object_id"]: p["read_version"] for p in ns.inspect.partitions()}
    assert result.read_versions.items() <= pins.items()
    # rows per partition (NULL, zoned and date partition values) as the manifest counts them
    for p in result.partitions:
        got = lance.dataset(os.path.join(ns.uri, p.location), version=p.read_version)
        assert p.rows == got.count_rows() and p.bytes_written > 0
    assert result.rows_written == table.num_rows
    props = ManifestStore(ns.uri).commit_properties(ns.version)
    assert len(props["write_id"]) == 16 and props["spark.result"].startswith("z")
    assert len(props["spark.result"]) < 400
    assert props["engine"] == "spark"  # stored as dlp.engine, read back without the prefix
    assert not any(k.startswith("dlp.") for k in props)


def test_plain_write_scatters_fragments_and_says_how_to_cluster(spark, tmp_path):
    """A plain df.write writes one fragment per task into every partition the task holds rows
    of (a Python data source cannot ask Spark to cluster its input); the commit records that
    and the driver warns with the fix. write_dataframe clusters first: one fragment each."""
    table = sample_table(96)
    plain, helper = make_ns(tmp_path / "plain"), make_ns(tmp_path / "helper")
    frame(spark, table, 4).write.format(FORMAT).mode("append").save(plain.uri)
    write_dataframe(frame(spark, table, 4), helper.uri)

    def layout(ns: PartitionedNamespace) -> tuple[list[int], Summary]:
        ns.refresh()
        frags = [
            len(
                lance.dataset(
                    os.path.join(ns.uri, p["location"]), version=p["read_version"]
                ).get_fragments()
            )
            for p in ns.inspect.partitions()
        ]
        props = ManifestStore(ns.uri).commit_properties(ns.version)
        return frags, Summary.decode(props["spark.result"])

    frags, summary = layout(plain)
    assert summary.tasks == 4 and summary.pairs == sum(frags) >= 2 * len(frags) == 2 * 9
    advice = scatter_advice(summary)
    assert advice is not None and "write_dataframe" in advice and "repartition" in advice
    frags, summary = layout(helper)
    assert frags == [1] * 9 and summary.pairs == 9
    assert scatter_advice(summary) is None
    assert sorted_rows(plain.to_table()) == sorted_rows(helper.to_table())
