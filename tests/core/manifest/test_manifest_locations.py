"""Manifest rows added with plain pylance whose location lies inside the root but is not a
partition table of this namespace: ``__manifest`` itself, a table of a namespace nested below
the root, or another row's table. Every open, read and maintenance call refuses them with
:class:`ManifestError` naming the row, and nothing is read as data or deleted."""

from __future__ import annotations

import datetime as dt
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from helpers.data import SCHEMA, file_hashes, sample_table, sorted_rows

from dagster_lance_partitioned import PartitionedNamespace, PartitionField
from dagster_lance_partitioned.core.errors import ManifestError

HOSTILE_ID = "v1$hostilehostileh$dataset"
KINDS = [
    "manifest",
    "manifest_inside",
    "nested_table",
    "nested_manifest",
    "other_row",
    "inside_row",
]
ON_STORAGE = {"nested_table", "nested_manifest"}  # the manifest alone does not show them


def age(path: Path, seconds: float = 30 * 24 * 3600) -> None:
    when = time.time() - seconds
    for dirpath, dirs, names in os.walk(path):
        for name in [*dirs, *names]:
            os.utime(os.path.join(dirpath, name), (when, when), follow_symlinks=False)


def add_row(root: str, location: str, country: str = "XX") -> None:
    """Append, with plain pylance, a table row of spec v1 for ``country`` at ``location``
    (and its partition namespace row), keeping the manifest's table metadata."""
    uri = os.path.join(root, "__manifest")
    before = lance.dataset(uri)
    rows = before.to_table()
    tables = rows.filter(pc.equal(rows.column("object_type"), "table"))
    template = tables.slice(0, 1).to_pylist()[0]
    namespace = dict(template, object_id=HOSTILE_ID.rsplit("$", 1)[0], object_type="namespace")
    namespace.update(location=None, read_version=None)
    table = dict(template, object_id=HOSTILE_ID, location=location)
    table.pop("dlp_stats", None)  # written by hand: no statistics (nothing prunes it)
    column = next(c for c in rows.column_names if c.startswith("partition_field_"))
    namespace[column] = table[column] = country
    lance.write_dataset(
        pa.Table.from_pylist([namespace, table], schema=rows.schema), uri, mode="append"
    )
    after = lance.dataset(uri)
    assert dict(after.metadata) == dict(before.metadata)


@pytest.fixture
def lake(tmp_path: Path) -> tuple[PartitionedNamespace, PartitionedNamespace]:
    """An outer namespace at ``sales`` and one nested at ``sales/eu/data``, several versions
    each, everything old (so that maintenance at any bound would remove what it may)."""
    fields = [PartitionField.identity("country")]
    outer = PartitionedNamespace.create(tmp_path / "sales", SCHEMA, fields)
    inner = PartitionedNamespace.create(tmp_path / "sales" / "eu" / "data", SCHEMA, fields)
    for i in range(3):
        outer.write(sample_table(6, start=100 * i))
        inner.write(sample_table(9, start=1000 + 100 * i))
    return outer, inner


def hostile_location(kind: str, outer: PartitionedNamespace, inner: PartitionedNamespace) -> str:
    us = next(p for p in outer.inspect.partitions() if p["values"]["country"] == "US")
    nested = next(p for p in inner.inspect.partitions() if p["values"]["country"] == "US")
    return {
        "manifest": "__manifest",
        "manifest_inside": "eu/data/__manifest",
        "nested_table": f"eu/data/{nested['location']}",
        "nested_manifest": "eu/data",  # the nested namespace's root
        "other_row": us["location"],
        "inside_row": f"{us['location']}/data",
    }[kind]


READS: dict[str, Callable[[PartitionedNamespace], Any]] = {
    "to_table": lambda ns: ns.to_table(),
    "filtered": lambda ns: ns.to_table("country = 'XX'"),
    "count_rows": lambda ns: ns.count_rows(),
    "scan": lambda ns: ns.scan().read_all(),
    "plan_scan": lambda ns: ns.plan_scan("country = 'XX'"),
    "partitions": lambda ns: ns.inspect.partitions(),
}
MAINTENANCE: dict[str, Callable[[PartitionedNamespace], Any]] = {
    "cleanup": lambda ns: ns.maintenance.cleanup(
        older_than=dt.timedelta(0), keep_manifest_versions=1
    ),
    "vacuum": lambda ns: ns.maintenance.vacuum(grace=dt.timedelta(0)),
    "compact": lambda ns: ns.maintenance.compact(),
    "drop_partitions": lambda ns: ns.maintenance.drop_partitions("country = 'XX'"),
    "find_orphans": lambda ns: ns.inspect.find_orphans(),
    "append": lambda ns: ns.write(sample_table(3, start=500)),
    "append_to_it": lambda ns: ns.write(sample_table(3, countries=("XX",), start=500)),
}
# what a row whose directory holds (or lies in) a nested namespace does not stop: reading the
# manifest only, and changes that never meet that directory
MANIFEST_ONLY = {"partitions", "find_orphans", "append"}


def _assert_names(error: pytest.ExceptionInfo[ManifestError], location: str) -> None:
    message = str(error.value)
    assert HOSTILE_ID in message and repr(location) in message, message
    assert ".rs:" not in message


@pytest.mark.parametrize("large", [False, True], ids=["small", "large"])
@pytest.mark.parametrize("kind", KINDS)
def test_open_and_reads_refuse(lake, tmp_path: Path, tune, kind: str, large: bool) -> None:
    outer, inner = lake
    location = hostile_location(kind, outer, inner)
    if large:  # a manifest too large to read whole: queried, and only some columns verified
        tune(small_manifest_rows=0)
    add_row(outer.uri, location)
    if kind in ON_STORAGE:  # what lies there is seen when the row's directory is met
        latest = PartitionedNamespace.open(outer.uri)
        for name, read in READS.items():
            if name in MANIFEST_ONLY:
                continue
            with pytest.raises(ManifestError) as error:
                read(latest)
            _assert_names(error, location)
        return
    with pytest.raises(ManifestError) as error:
        PartitionedNamespace.open(outer.uri)
    _assert_names(error, location)
    with pytest.raises(ManifestError) as error:
        outer.refresh()
    _assert_names(error, location)
    for name, read in READS.items():  # the handle stays on the version before the row
        assert read(outer) is not None, name


@pytest.mark.parametrize(
    ("kind", "call"),
    [
        (kind, call)
        for kind in KINDS
        for call in sorted(MAINTENANCE)
        if not (kind in ON_STORAGE and call in MANIFEST_ONLY)
    ],
)
def test_maintenance_refuses_and_deletes_nothing(lake, tmp_path: Path, kind: str, call: str):
    outer, inner = lake
    location = hostile_location(kind, outer, inner)
    add_row(outer.uri, location)
    age(tmp_path)
    before = file_hashes(tmp_path)
    inner_rows = sorted_rows(inner.to_table())
    with pytest.raises(ManifestError) as error:  # a handle opened before the row was added
        MAINTENANCE[call](outer)
    _assert_names(error, location)
    assert file_hashes(tmp_path) == before
    assert sorted_rows(PartitionedNamespace.open(inner.uri).to_table()) == inner_rows


@pytest.mark.parametrize("kind", ["manifest", "nested_table"])
def test_an_old_manifest_version_with_the_row_stops_cleanup(lake, tmp_path: Path, kind: str):
    """The row was removed again, but a retained manifest version still names it: cleanup
    reads the pins of every retained version and refuses before deleting anything."""
    outer, inner = lake
    location = hostile_location(kind, outer, inner)
    add_row(outer.uri, location)
    uri = os.path.join(outer.uri, "__manifest")
    lance.dataset(uri).delete(f"object_id LIKE '{HOSTILE_ID.rsplit('$', 1)[0]}%'")
    age(tmp_path)
    before = file_hashes(tmp_path)
    fresh = PartitionedNamespace.open(outer.uri)  # the latest version has no such row
    with pytest.raises(ManifestError) as error:
        fresh.maintenance.cleanup(older_than=dt.timedelta(0), keep_manifest_versions=100)
    _assert_names(error, location)
    assert file_hashes(tmp_path) == before
