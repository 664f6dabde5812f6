"""A namespace without partition fields (``partition_fields=[]``): spec ``{"id": 1, "fields":
[]}``, one partition table ``v1$dataset`` directly under the spec namespace holding every row.
Every operation works on it as on any namespace -- writes in each mode, time travel, row-level
changes, maintenance, health checks, indexes and search, spec evolution to and from
partitioning -- and the command line describes it. Real namespaces on local disk."""

from __future__ import annotations

import json

import lance
import numpy as np
import pyarrow as pa
import pytest
from helpers.cli import run, run_json

from dagster_lance_partitioned import PartitionedNamespace, PartitionField

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.utf8()), ("v", pa.list_(pa.float32(), 4))])


def rows(ids: list[int]) -> pa.Table:
    rng = np.random.default_rng(ids[0] if ids else 0)
    return pa.table(
        {
            "id": ids,
            "name": [f"n{i}" for i in ids],
            "v": [rng.random(4, dtype=np.float32).tolist() for _ in ids],
        },
        schema=SCHEMA,
    )


@pytest.fixture
def ns(tmp_path) -> PartitionedNamespace:
    return PartitionedNamespace.create(str(tmp_path / "plain"), SCHEMA, [])


def ids(ns: PartitionedNamespace, **kw) -> list[int]:
    return sorted(ns.to_table(**kw)["id"].to_pylist())


def test_its_spec_has_no_fields_and_its_one_table_sits_under_the_spec_namespace(ns):
    assert json.loads(ns.metadata["partition_spec_v1"]) == {"id": 1, "fields": []}
    result = ns.write(rows([1, 2, 3]))
    [written] = result.partitions
    assert (written.object_id, written.values, written.rows) == ("v1$dataset", {}, 3)
    [table] = ns.inspect.partitions()
    assert table["object_id"] == "v1$dataset"
    assert table["location"].endswith("_v1$dataset")
    plain = lance.dataset(f"{ns.uri}/{table['location']}", version=table["read_version"])
    assert plain.count_rows() == 3  # a plain Lance table


def test_each_write_mode_and_time_travel(ns):
    first = ns.write(rows([1, 2, 3])).manifest_version
    ns.write(rows([4]), mode="append")
    assert ids(ns) == [1, 2, 3, 4]
    replaced = ns.write(rows([7, 8]), mode="overwrite")
    assert replaced.manifest_version == ns.version  # one commit
    assert ids(ns) == [7, 8] and len(ns.inspect.partitions()) == 1
    ns.write(rows([9]), mode="overwrite_partitions")  # the one partition: replaced
    assert ids(ns) == [9]
    assert ids(PartitionedNamespace.open(ns.uri, version=first)) == [1, 2, 3]
    assert ns.count_rows("id > 0") == 1
    assert ids(ns, filter="name = 'n9'") == [9]


def test_row_changes_maintenance_and_health(ns):
    ns.write(rows(list(range(10))))
    ns.write(rows([10, 11]), mode="append")
    ns.merge_insert(rows([1, 20]), on="id")
    ns.delete("id < 3")
    ns.update("id = 5", {"name": "'five'"})
    assert ids(ns) == [3, 4, 5, 6, 7, 8, 9, 10, 11, 20]
    assert ns.to_table(filter="id = 5")["name"].to_pylist() == ["five"]
    compacted = ns.maintenance.compact()
    assert [p[0] for p in compacted.partitions] == ["v1$dataset"]
    assert ns.inspect.check_schemas() == []
    assert ns.inspect.check_read_versions() == ([], [])
    assert ns.inspect.check_integrity() == []
    assert ns.inspect.find_orphans() == []
    dropped = ns.maintenance.drop_partitions("id >= 0")
    assert [d.object_id for d in dropped.partitions] == ["v1$dataset"]
    assert ns.count_rows() == 0


def test_indexes_and_search(ns):
    ns.write(rows(list(range(50))))
    ns.create_index("name", "BTREE")
    [coverage] = ns.indexes()
    assert (coverage.partitions_indexed, coverage.partitions_total) == (1, 1)
    query = ns.to_table(filter="id = 7")["v"].to_pylist()[0]
    [best] = ns.search(query, column="v", k=1, columns=["id"]).to_pylist()
    assert best["id"] == 7


def test_spec_evolution_to_and_from_partitioning(ns):
    ns.write(rows([1, 2, 3]))
    ns.update_spec([PartitionField.bucket("id", 2)])
    ns.write(rows([4, 5, 6]), mode="overwrite")
    assert len(ns.inspect.partitions()) == 2 and ids(ns) == [4, 5, 6]
    ns.update_spec([])
    assert ns.current_spec.fields == () and ns.current_spec.spec_id == 3
    ns.write(rows([7]), mode="overwrite")
    [table] = ns.inspect.partitions()
    assert table["object_id"] == "v3$dataset" and ids(ns) == [7]


def test_the_command_line_describes_it(ns, capsys):
    ns.write(rows([1, 2]))
    code, out, _ = run(capsys, "info", ns.uri)
    assert code == 0
    assert "current spec      v1: no partition fields (one table holds every row)" in out
    code, out, _ = run(capsys, "specs", ns.uri)
    assert out.splitlines()[1] == "no partition fields (one table holds every row)"
    doc = run_json(capsys, "partitions", ns.uri)
    [partition] = doc["partitions"]
    assert partition["values"] == {} and partition["rows"] == 2
    code, out, _ = run(capsys, "check", ns.uri)
    assert code == 0 and out.rstrip().endswith("healthy")
