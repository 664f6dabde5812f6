"""Every column name a namespace accepts (``helpers.names.ACCEPTED``: spaces, quotes, SQL
keywords and operators, unicode, control characters, a 300-character name, ...) round-trips
through the Spark data source: read (also nested fields of those names), filters on them pushed
to the source (two of them are partition columns, so the filters also prune), and an append
written by Spark. The battery is split into a few groups, each one namespace with a column per
name (Spark jobs are slow). Names differing only in case stay two columns (Spark resolves them
with ``spark.sql.caseSensitive``). A DataFrame with a column name Lance cannot store does not
create a namespace it then cannot write (SchemaError at creation, nothing left behind)."""

from __future__ import annotations

import functools
import operator
import os

import pyarrow as pa
import pytest
from helpers.data import sorted_rows
from helpers.names import ACCEPTED
from pyspark.sql import functions as F

from dagster_lance_partitioned import PartitionedNamespace, PartitionField
from dagster_lance_partitioned.spark import FORMAT

LABELS = list(ACCEPTED)
GROUPS = [LABELS[i : i + 10] for i in range(0, len(LABELS), 10)]


def _schema(names: list[str]) -> pa.Schema:
    return pa.schema(
        [
            pa.field("id", pa.int64()),
            *(pa.field(n, pa.utf8()) for n in names),
            pa.field("st", pa.struct([pa.field(n, pa.int32()) for n in names])),
        ]
    )


def _rows(names: list[str], ids=(1, 2, 3)) -> pa.Table:
    """Row i holds ``v<i>`` in every name column (NULL in row 3) and i in every nested field."""
    values = [f"v{i}" if i != 3 else None for i in ids]
    columns = {"id": list(ids), **{n: values for n in names}}
    columns["st"] = [dict.fromkeys(names, i) for i in ids]
    return pa.table(columns, schema=_schema(names))


def _spark_col(name: str):
    return F.col("`" + name + "`")  # accepted names hold no backtick


@pytest.mark.parametrize("labels", GROUPS, ids=[f"{g[0]}..{g[-1]}" for g in GROUPS])
def test_accepted_names_round_trip_through_spark(spark, tmp_path, labels):
    names = [ACCEPTED[label] for label in labels]
    fields = [PartitionField.identity(names[0]), PartitionField.identity(names[1])]
    ns = PartitionedNamespace.create(tmp_path / "ns", _schema(names), fields)
    ns.write(_rows(names))

    df = spark.read.format(FORMAT).load(ns.uri)
    assert df.columns == ["id", *names, "st"]
    got = sorted(df.collect(), key=lambda r: r["id"])
    for n in names:
        assert [r[n] for r in got] == ["v1", "v2", None], n
        assert [r["st"][n] for r in got] == [1, 2, 3], n

    # one filter per name, all pushed to the source in one query
    where = functools.reduce(operator.and_, [_spark_col(n) == "v2" for n in names])
    found = spark.read.format(FORMAT).load(ns.uri).where(where).collect()
    assert [r["id"] for r in found] == [2]

    appended = _rows(names, ids=(2, 4))
    spark.createDataFrame(appended).write.format(FORMAT).mode("append").save(ns.uri)
    ns.refresh()
    assert sorted_rows(ns.to_table()) == sorted_rows(pa.concat_tables([_rows(names), appended]))
    assert len(ns.plan_scan([(names[0], "=", "v2")]).tasks) == 1  # appended into v2's partition
    assert [r["id"] for r in ns.to_table(filter=[(names[1], "=", "v2")]).to_pylist()] == [2, 2]


def test_names_differing_only_in_case_through_spark(spark, tmp_path):
    schema = pa.schema(
        [pa.field("id", pa.int64()), pa.field("MyCol", pa.utf8()), pa.field("mycol", pa.utf8())]
    )
    rows = pa.table({"id": [1, 2], "MyCol": ["A", "B"], "mycol": ["a", "b"]}, schema=schema)
    ns = PartitionedNamespace.create(tmp_path / "ns", schema, [PartitionField.identity("mycol")])
    ns.write(rows)
    spark.createDataFrame(rows).write.format(FORMAT).mode("append").save(ns.uri)
    ns.refresh()
    assert sorted_rows(ns.to_table()) == sorted_rows(pa.concat_tables([rows, rows]))
    previous = spark.conf.get("spark.sql.caseSensitive")
    spark.conf.set("spark.sql.caseSensitive", "true")
    try:
        df = spark.read.format(FORMAT).load(ns.uri)
        assert sorted(r["id"] for r in df.where(F.col("MyCol") == "B").collect()) == [2, 2]
        assert sorted(r["id"] for r in df.where(F.col("mycol") == "a").collect()) == [1, 1]
    finally:
        spark.conf.set("spark.sql.caseSensitive", previous)


def test_spark_write_refuses_to_create_a_namespace_with_a_dotted_column(spark, tmp_path):
    df = spark.createDataFrame([(1, "x", 2)], "id long, k string, `a.b` int")
    target = str(tmp_path / "new")
    with pytest.raises(Exception, match=r"SchemaError.*'a\.b'.*cannot contain '\.'"):
        df.write.format(FORMAT).option("partitionBy", "k").mode("append").save(target)
    assert not os.path.exists(os.path.join(target, "__manifest"))
