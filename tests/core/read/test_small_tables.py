"""Small partition tables read from their data files and filtered together, and kept in
memory from their second read: the rows equal an unpruned read of every table filtered by
DataFusion (independent of that path), whatever the tables' shapes (deleted rows, renamed and
added columns, several fragments, Hive-style tables without their key columns), in plan order;
a repeated read opens no table; ``DLP_READ_CACHE_MB=0`` keeps nothing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import datafusion as dfn
import numpy as np
import pyarrow as pa
import pytest

from dagster_lance_partitioned import PartitionedNamespace, PartitionField
from dagster_lance_partitioned.core.read import data_files
from dagster_lance_partitioned.core.read.scan import clear_caches

SCHEMA = pa.schema([("id", pa.int64()), ("part", pa.utf8()), ("price", pa.float64())])


def rows(n: int, parts: int, start: int = 0) -> pa.Table:
    rng = np.random.default_rng(start)
    return pa.table(
        {
            "id": np.arange(start, start + n, dtype=np.int64),
            "part": [f"p{i % parts:02d}" for i in range(n)],
            "price": rng.random(n) * 100,
        },
        schema=SCHEMA,
    )


def reference(table: pa.Table, flt: str) -> list[int]:
    ctx = dfn.SessionContext()
    ctx.register_record_batches("t", [table.to_batches()])
    return sorted(ctx.sql(f"SELECT id FROM t WHERE {flt}").to_arrow_table()["id"].to_pylist())


@pytest.fixture(autouse=True)
def _cold() -> None:
    clear_caches()


def test_every_table_shape_reads_the_rows_a_reference_selects(tmp_path: Path) -> None:
    ns = PartitionedNamespace.create(tmp_path / "ns", SCHEMA, [PartitionField.identity("part")])
    data = rows(400, 8)
    ns.write(data)
    ns.write(rows(40, 2, start=1000))  # two fragments in p00 and p01
    ns.delete("id % 7 = 0")  # deleted rows in every table
    ns.rename_column("price", "cost")  # files written under the old name
    ns.add_columns(pa.field("note", pa.utf8()))  # a column no file holds
    ns.write(pa.table({"id": [5000], "part": ["p09"], "cost": [1.0], "note": ["x"]}))
    full = ns.to_table()
    kept = [i for i in full["id"].to_pylist()]
    assert len(kept) == len(set(kept))
    for flt in ("cost < 30", "cost >= 30 AND id > 100", "note IS NULL", "part = 'p03'"):
        want = reference(full, flt)
        for _ in range(3):  # read, read again (kept), read from memory
            assert sorted(ns.to_table(flt)["id"].to_pylist()) == want, flt
        assert ns.count_rows(flt) == len(want)


def test_rows_come_in_plan_order(tmp_path: Path) -> None:
    ns = PartitionedNamespace.create(tmp_path / "ns", SCHEMA, [PartitionField.identity("part")])
    ns.write(rows(3000, 150))
    plan = ns.plan_scan("price < 50")
    order = [t.partition_values["part"] for t in plan.tasks]
    for _ in range(2):
        got = ns.to_table("price < 50")["part"].to_pylist()
        seen = list(dict.fromkeys(got))
        assert seen == [p for p in order if p in set(got)]


def test_a_repeated_read_opens_no_table(tmp_path: Path) -> None:
    """Read twice (the second read keeps the rows), the tables' data files removed: the third
    read still answers, from memory; nothing is kept with a budget of 0."""
    ns = PartitionedNamespace.create(tmp_path / "ns", SCHEMA, [PartitionField.identity("part")])
    ns.write(rows(600, 30))
    want = sorted(ns.to_table("price < 20")["id"].to_pylist())
    assert sorted(ns.to_table("price < 20")["id"].to_pylist()) == want
    assert data_files.kept_bytes() > 0
    for p in ns.inspect.partitions():
        shutil.rmtree(os.path.join(ns.uri, p["location"], "data"))
    assert sorted(ns.to_table("price < 20")["id"].to_pylist()) == want


def test_a_read_cache_of_zero_keeps_nothing(tmp_path: Path) -> None:
    code = (
        "import sys, shutil, os, pyarrow as pa\n"
        "from dagster_lance_partitioned import PartitionedNamespace\n"
        "from dagster_lance_partitioned.core.read import data_files\n"
        "ns = PartitionedNamespace.open(sys.argv[1])\n"
        "ns.to_table('price < 20'); ns.to_table('price < 20')\n"
        "print(data_files.kept_bytes())\n"
    )
    ns = PartitionedNamespace.create(tmp_path / "ns", SCHEMA, [PartitionField.identity("part")])
    ns.write(rows(600, 30))
    for budget, kept in (("0", False), ("64", True)):
        proc = subprocess.run(
            [sys.executable, "-c", code, ns.uri],
            env={**os.environ, "DLP_READ_CACHE_MB": budget},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert (int(proc.stdout.strip()) > 0) is kept, budget
