"""Merging a Spark DataFrame into a namespace, distributed (executors merge per partition table,
the driver commits once): the same result as the core merge of the same rows, moved keys,
duplicate and NULL keys, scoped deletes, errors raised in tasks, concurrency, and no collect
of the data on the driver."""

from __future__ import annotations

import datetime as dt
import json
import os

import lance
import pyarrow as pa
import pytest
from helpers.data import SCHEMA, fingerprint, sample_table, sorted_rows
from pyspark.sql import DataFrame

from dagster_lance_partitioned import MergeOptions, PartitionedNamespace, PartitionField
from dagster_lance_partitioned.core.errors import (
    CommitConflictError,
    DuplicateKeyError,
    MergeKeyError,
    NullabilityError,
    SchemaMismatchError,
    UnnamedPartitionError,
    WriteError,
)
from dagster_lance_partitioned.spark import merge as spark_merge
from dagster_lance_partitioned.spark import write_dataframe
from dagster_lance_partitioned.spark.merge import merge_dataframe

D1, D2, D3 = dt.date(2025, 12, 10), dt.date(2025, 12, 11), dt.date(2026, 1, 1)
COUNTRIES = tuple(f"C{i}" for i in range(8))
BY_COUNTRY = [PartitionField.identity("country")]


def stored(n: int = 400) -> pa.Table:
    """``n`` rows over 8 countries and 3 dates."""
    return sample_table(n=n, countries=COUNTRIES)


def changes(n: int = 400) -> pa.Table:
    """Updates of a third of the stored ids (half of them now in another country), NULL-free
    new rows in new and existing partitions."""
    rows = []
    for i in range(0, n, 3):
        country = COUNTRIES[i % 8] if i % 2 else COUNTRIES[(i + 3) % 8]  # even ids move
        rows.append({"id": i, "country": country, "event_date": D2, "value": -float(i)})
    for i in range(n, n + 60):
        rows.append(
            {"id": i, "country": ("NEW", *COUNTRIES)[i % 9], "event_date": D3, "value": 0.5}
        )
    return pa.Table.from_pylist(rows, schema=SCHEMA)


def pair(tmp_path, fields=None, data=None) -> tuple[PartitionedNamespace, PartitionedNamespace]:
    """Two namespaces with the same rows: one merged by the core, one by Spark."""
    out = []
    for name in ("core", "spark"):
        ns = PartitionedNamespace.create(
            tmp_path / name, schema=SCHEMA, partition_fields=fields or BY_COUNTRY
        )
        ns.write(data if data is not None else stored())
        out.append(ns)
    return out[0], out[1]


def contents(ns: PartitionedNamespace) -> dict[str, list[dict]]:
    """Every partition table's rows (at its pinned version), by its partition values."""
    out = {}
    for p in ns.inspect.partitions():
        ds = lance.dataset(os.path.join(ns.uri, p["location"]), version=p["read_version"])
        key = json.dumps({"spec": p.get("spec_id"), **p["values"]}, default=str, sort_keys=True)
        assert key not in out
        out[key] = sorted_rows(ds.to_table())
    return out


def counts(result) -> tuple:
    return (
        result.rows_inserted,
        result.rows_updated,
        result.rows_deleted,
        result.rows_moved,
        len(result.partitions),
        len(result.partitions_created),
        len(result.partitions_removed),
        result.committed,
    )


def spark_df(spark, table: pa.Table) -> DataFrame:
    return spark.createDataFrame(
        table.to_pylist(), "id long, country string, event_date date, value double"
    ).repartition(3)


CASES = {
    "on id (moved keys searched everywhere)": MergeOptions("id"),
    "on id and country (partition column covered)": MergeOptions(("id", "country")),
    "when_matched ignore": MergeOptions("id", when_matched="ignore"),
    "when_not_matched ignore": MergeOptions("id", when_not_matched="ignore"),
    "not matched by source: delete in the touched partitions": MergeOptions(
        ["id"], when_not_matched_by_source="delete"
    ),
    "not matched by source: delete in scope": MergeOptions(
        ["id", "country"],
        when_not_matched_by_source="delete",
        scope="country IN ('C1', 'C2', 'NEW') OR id < 30",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_spark_merge_equals_the_core_merge(tmp_path, spark, case):
    options = CASES[case]
    core, dist = pair(tmp_path)
    data = changes()
    expected = core.merge_insert(data, options)
    got = merge_dataframe(spark_df(spark, data), dist.uri, options)
    assert counts(got) == counts(expected)
    dist.refresh()
    assert contents(dist) == contents(core)
    assert got.manifest_version == dist.version  # one manifest commit
    assert dist.version == core.version


def test_older_spec_partitions_are_searched_and_emptied(tmp_path, spark):
    core, dist = pair(tmp_path)
    for ns in (core, dist):
        ns.update_spec([PartitionField.identity("country"), PartitionField.year("event_date")])
    data = changes()
    options = MergeOptions(("id", "country"), when_not_matched_by_source="delete", scope="TRUE")
    expected = core.merge_insert(data, options)
    got = merge_dataframe(spark_df(spark, data), dist.uri, options)
    assert counts(got) == counts(expected)
    assert contents(dist.refresh()) == contents(core)
    assert expected.partitions_removed  # the old spec's partitions were emptied


def test_rows_are_merged_in_tasks_not_collected_on_the_driver(tmp_path, spark, monkeypatch):
    ns = PartitionedNamespace.create(tmp_path / "ns", schema=SCHEMA, partition_fields=BY_COUNTRY)
    ns.write(stored(3000))
    df = spark_df(spark, changes(3000))
    collected: list[list[str]] = []

    def refuse(self, *args, **kwargs):
        raise AssertionError("the merge input was collected on the driver")

    cls = type(df)  # the session's DataFrame class (classic or Connect) defines these
    real_collect = cls.collect

    def collect(self):
        rows = real_collect(self)
        collected.append(list(self.columns))
        assert "value" not in self.columns and len(rows) <= 10, "data collected on the driver"
        return rows

    for name in ("toArrow", "toPandas", "toLocalIterator", "take", "tail"):
        monkeypatch.setattr(cls, name, refuse)
    monkeypatch.setattr(cls, "collect", collect)
    result = merge_dataframe(df, ns.uri, on="id")
    # what came back: at most one row of the key check, one message per partition table
    assert collected[-1] == ["route", "message"]
    assert len(collected) == 2
    assert result.rows_updated == 1000 and result.rows_inserted == 60
    assert result.rows_moved == 500 and len(result.partitions) == 9


def test_duplicate_keys_fail_naming_one_and_change_nothing(tmp_path, spark):
    ns = PartitionedNamespace.create(tmp_path / "ns", schema=SCHEMA, partition_fields=BY_COUNTRY)
    ns.write(stored())
    before = fingerprint(ns.uri)
    # the same id in two partitions: no task sees both rows
    data = pa.Table.from_pylist(
        [
            {"id": 7, "country": "C1", "event_date": D1, "value": 1.0},
            {"id": 8, "country": "C1", "event_date": D1, "value": 1.0},
            {"id": 7, "country": "C5", "event_date": D1, "value": 2.0},
        ],
        schema=SCHEMA,
    )
    with pytest.raises(DuplicateKeyError) as err:
        merge_dataframe(spark_df(spark, data), ns.uri, on="id")
    assert err.value.key == {"id": 7} and "occurs 2 times" in str(err.value)
    nulls = spark.createDataFrame(
        [(None, "C1", D1, 1.0)], "id long, country string, event_date date, value double"
    )
    with pytest.raises(MergeKeyError) as err:
        merge_dataframe(nulls, ns.uri, on=["id"])
    assert err.value.args and "'id'" in str(err.value)
    assert fingerprint(ns.uri) == before  # refused before any table was touched
    # keys that include the partition column: found by the task merging the partition (other
    # tasks may have made detached versions no manifest registers)
    twice = pa.concat_tables([data, data.slice(1, 1)])
    version, rows = ns.version, sorted_rows(ns.to_table())
    with pytest.raises(DuplicateKeyError) as err:
        merge_dataframe(spark_df(spark, twice), ns.uri, on=["id", "country"])
    assert err.value.key == {"id": 8, "country": "C1"}
    assert ns.refresh().version == version and sorted_rows(ns.to_table()) == rows


def test_an_error_raised_in_a_task_keeps_its_class(tmp_path, spark):
    schema = pa.schema([*[*SCHEMA][:3], pa.field("value", pa.float64(), nullable=False)])
    ns = PartitionedNamespace.create(tmp_path / "ns", schema=schema, partition_fields=BY_COUNTRY)
    ns.write(stored().cast(schema))
    before = fingerprint(ns.uri)
    df = spark.createDataFrame(
        [(1, "C1", D1, None)], "id long, country string, event_date date, value double"
    )
    with pytest.raises(NullabilityError) as err:  # raised by conform_for_write in a task
        merge_dataframe(df, ns.uri, on="id")
    assert err.value.column == "value"
    assert fingerprint(ns.uri) == before
    bad = spark.createDataFrame(
        [(1, "C1", D1, "x")], "id long, country string, event_date date, value string"
    )
    with pytest.raises(SchemaMismatchError):  # on the driver, before any job
        merge_dataframe(bad, ns.uri, on="id")


def test_confine_refuses_moving_a_key_out_of_a_partition_it_does_not_name(tmp_path, spark):
    """Raised in the task that would delete the key from its partition, with its class;
    nothing becomes visible (tasks of other partitions may have left unregistered table
    versions, which vacuum removes)."""
    _, ns = pair(tmp_path)
    before = (ns.version, contents(ns))
    # sample_table puts id 1 in the second country: merged as a C0 row it would move
    home = ns.to_table(filter="id = 1").column("country")[0].as_py()
    assert home != "C0"
    df = spark_df(spark, pa.Table.from_pylist(
        [{"id": 1, "country": "C0", "event_date": D2, "value": 1.0}], schema=SCHEMA
    ))  # fmt: skip
    with pytest.raises(UnnamedPartitionError, match=f"{home}.*may not touch") as err:
        merge_dataframe(df, ns.uri, MergeOptions("id", confine="country = 'C0'"))
    assert err.value.sample == {"id": 1}
    assert (ns.refresh().version, contents(ns)) == before
    result = merge_dataframe(df, ns.uri, MergeOptions("id", confine=f"country IN ('C0', '{home}')"))
    assert (result.rows_updated, result.rows_moved) == (1, 1)


def test_a_concurrent_commit_to_a_touched_partition_is_kept(tmp_path, spark, monkeypatch):
    ns = PartitionedNamespace.create(tmp_path / "ns", schema=SCHEMA, partition_fields=BY_COUNTRY)
    ns.write(stored())
    other = PartitionedNamespace.open(ns.uri)
    real = spark_merge.commit_outcomes
    calls = []

    def racing(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:  # another writer lands between the tasks and the commit
            other.write(
                pa.Table.from_pylist(
                    [{"id": 9000, "country": "C1", "event_date": D1, "value": 9.0}], schema=SCHEMA
                )
            )
        return real(*args, **kwargs)

    monkeypatch.setattr(spark_merge, "commit_outcomes", racing)
    data = pa.Table.from_pylist(
        [{"id": 1, "country": "C1", "event_date": D1, "value": 100.0}], schema=SCHEMA
    )
    result = merge_dataframe(spark_df(spark, data), ns.uri, on="id")
    assert len(calls) == 2  # made again on the new state
    rows = {r["id"]: r for r in ns.refresh().to_table().to_pylist()}
    assert rows[9000]["value"] == 9.0 and rows[1]["value"] == 100.0  # neither change lost
    assert result.rows_updated == 1 and result.manifest_version == ns.version

    def always(*args, **kwargs):
        other.write(
            pa.Table.from_pylist(
                [{"id": 9100 + len(calls), "country": "C1", "event_date": D1, "value": 9.0}],
                schema=SCHEMA,
            )
        )
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(spark_merge, "commit_outcomes", always)
    version = ns.refresh().version
    with pytest.raises(CommitConflictError):
        merge_dataframe(spark_df(spark, data), ns.uri, on="id")
    assert ns.refresh().version == version + spark_merge.MAX_ATTEMPTS  # only the others


def test_write_dataframe_merge_mode(tmp_path, spark):
    ns = PartitionedNamespace.create(tmp_path / "ns", schema=SCHEMA, partition_fields=BY_COUNTRY)
    ns.write(sample_table())
    version = ns.version
    df = spark.createDataFrame(
        [(0, "FR", D1, -1.0), (99, "IT", D2, 9.9)],
        "id long, country string, event_date date, value double",
    )
    result = write_dataframe(df, ns.uri, mode="merge", on=["id"])
    assert result.manifest_version == version + 1
    assert (result.rows_updated, result.rows_moved, result.rows_inserted) == (1, 1, 1)
    ns.refresh()
    assert ns.count_rows() == 13
    assert ns.to_table(filter="id = 0").to_pylist()[0]["country"] == "FR"
    props = ns.state.store.commit_properties(result.manifest_version)
    assert props["source"] == "spark" and props["operation"] == "merge"
    with pytest.raises(MergeKeyError):
        write_dataframe(df, ns.uri, mode="merge")  # no key columns


def test_write_dataframe_merge_passes_the_merge_options(tmp_path, spark):
    ns = PartitionedNamespace.create(tmp_path / "ns", schema=SCHEMA, partition_fields=BY_COUNTRY)
    ns.write(sample_table())  # ids 0-11 over US, FR, DE (DE: 2, 5, 8, 11)
    version = ns.version
    df = spark.createDataFrame(
        [(0, "FR", D1, -1.0), (99, "IT", D2, 9.9)],
        "id long, country string, event_date date, value double",
    )
    with pytest.raises(WriteError, match="on only apply with mode='merge'"):
        write_dataframe(df, ns.uri, "append", on="id")
    with pytest.raises(WriteError, match="does not take partition_by"):
        write_dataframe(
            df, ns.uri, "merge", "country", on=MergeOptions("id", when_matched="ignore")
        )
    assert ns.refresh().version == version  # refused before anything was written
    result = write_dataframe(
        df,
        ns.uri,
        mode="merge",
        on=MergeOptions(
            "id",
            when_matched="ignore",
            when_not_matched_by_source="delete",
            scope="country = 'DE'",
        ),
    )
    assert (result.rows_updated, result.rows_inserted, result.rows_deleted) == (0, 1, 4)
    ns.refresh()
    assert ns.to_table(filter="id = 0").to_pylist()[0]["country"] == "US"  # matched: ignored
    assert ns.count_rows() == 9 and ns.count_rows("country = 'DE'") == 0
    props = ns.state.store.commit_properties(result.manifest_version)
    assert props["when_matched"] == "ignore" and props["scope"] == "country = 'DE'"


CONNECT_MERGE = """
import json, sys
import datetime as dt
from pyspark.sql import SparkSession
from dagster_lance_partitioned.core.errors import DuplicateKeyError
from dagster_lance_partitioned.spark import register
from dagster_lance_partitioned.spark.merge import merge_dataframe

uri, out = sys.argv[1], sys.argv[2]
spark = SparkSession.builder.remote("local[2]").getOrCreate()
register(spark)
schema = "id long, country string, event_date date, value double"
rows = [(0, "FR", dt.date(2025, 12, 10), -1.0), (99, "IT", dt.date(2025, 12, 11), 9.9)]
result = merge_dataframe(spark.createDataFrame(rows, schema).repartition(2), uri, on="id")
try:
    merge_dataframe(spark.createDataFrame(rows + rows[:1], schema), uri, on=["id", "country"])
    error = None
except DuplicateKeyError as e:  # raised in a task on the server
    error = {"class": type(e).__name__, "key": e.key}
with open(out, "w") as fh:
    json.dump({
        "session": type(spark).__module__,
        "counts": [result.rows_updated, result.rows_moved, result.rows_inserted],
        "error": error,
    }, fh)
spark.stop()
"""


def test_a_spark_connect_dataframe_is_merged_in_the_server_tasks(tmp_path):
    import subprocess
    import sys

    ns = PartitionedNamespace.create(tmp_path / "ns", schema=SCHEMA, partition_fields=BY_COUNTRY)
    ns.write(sample_table())
    script, out = tmp_path / "connect_merge.py", tmp_path / "out.json"
    script.write_text(CONNECT_MERGE)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    proc = subprocess.run(
        [sys.executable, str(script), ns.uri, str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    report = json.loads(out.read_text())
    assert report["session"].startswith("pyspark.sql.connect")
    assert report["counts"] == [1, 1, 1]
    assert report["error"] == {"class": "DuplicateKeyError", "key": {"id": 0, "country": "FR"}}
    ns.refresh()
    assert ns.count_rows() == 13 and ns.to_table(filter="id = 0")["country"][0].as_py() == "FR"
