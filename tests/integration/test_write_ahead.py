"""Rows written ahead (``core/write/ahead.py``): on an object store, the rows a write appends to
or replaces in a registered table are uploaded as a data file while that table is opened, in
the layout and storage version the table most likely has. When the opened table has another
(a column added since it was written, an imported table of an older storage version), the rows
are written again for it and the file written ahead is deleted: the rows stored are exact and
the table directory holds no data file that no version references."""

import datetime as dt
from collections.abc import Iterator

import lance
import pyarrow as pa
import pytest
from helpers.delay_proxy import DelayProxy, delay_proxy
from helpers.s3 import S3Server, s3_server, storage_options

from dagster_lance_partitioned import PartitionedNamespace, PartitionField
from dagster_lance_partitioned.core import storage
from dagster_lance_partitioned.core.read import scan

pytestmark = pytest.mark.object_store

SCHEMA = pa.schema([pa.field("day", pa.date32()), pa.field("id", pa.int64())])
DAY0 = dt.date(2024, 1, 1)

Timed = tuple[str, str, float, float]  # (kind, path, arrived, answered)


@pytest.fixture(scope="module")
def proxied() -> Iterator[tuple[S3Server, DelayProxy]]:
    with s3_server() as server, delay_proxy(server.port, latency=0.0) as proxy:
        yield server, proxy


def _rows(days: range, per_day: int, first_id: int = 0, schema: pa.Schema = SCHEMA) -> pa.Table:
    days_col = [DAY0 + dt.timedelta(days=d) for d in days for _ in range(per_day)]
    cols: dict[str, object] = {
        "day": pa.array(days_col, pa.date32()),
        "id": pa.array(range(first_id, first_id + len(days_col)), pa.int64()),
    }
    for f in schema:
        if f.name not in cols:
            cols[f.name] = pa.array([f"{f.name}-{i}" for i in range(len(days_col))], f.type)
    return pa.table(cols, schema=schema)


def _namespace(
    proxied: tuple[S3Server, DelayProxy], schema: pa.Schema = SCHEMA
) -> tuple[str, dict[str, str]]:
    """A new namespace holding days 0 and 1 (ids 0-5), its URI and options."""
    server, proxy = proxied
    options = storage_options(proxy.endpoint)
    uri = f"s3://{server.create_bucket()}/events"
    PartitionedNamespace.create(
        uri, schema, [PartitionField.identity("day")], storage_options=options
    ).write(_rows(range(2), 3, schema=schema), mode="append")
    return uri, options


def _data_files(ns: PartitionedNamespace) -> set[str]:
    """Every data file in the directories of the namespace's partition tables."""
    ns.refresh()
    return {
        f"{task.uri}/{e.path}"
        for task in ns.plan_scan().tasks
        for e in storage.list_files(task.uri, ns.storage_options)
        if e.path.startswith("data/")
    }


def _unreferenced(ns: PartitionedNamespace, before: set[str]) -> set[str]:
    """The data files added since ``before`` that no registered table version references."""
    ns.refresh()
    referenced = {
        f"{task.uri}/data/{f.path}"
        for task in ns.plan_scan().tasks
        for frag in lance.dataset(
            task.uri, version=task.read_version, storage_options=ns.storage_options
        ).get_fragments()
        for f in frag.metadata.files
    }
    return _data_files(ns) - before - referenced


def _timeline(proxy: DelayProxy, run: object) -> list[Timed]:
    """The proxy's timeline of ``run`` (50 ms a request), in a cold process."""
    scan.clear_caches()
    storage.clear_lance_session()
    proxy.reset()
    proxy.latency = 0.05
    try:
        run()  # type: ignore[operator]
        return list(proxy.timeline)
    finally:
        proxy.latency = 0.0


def _overlap(a: Timed, b: Timed) -> bool:
    return a[2] < b[3] and b[2] < a[3]


@pytest.mark.parametrize("mode", ["append", "overwrite_partitions"])
def test_the_rows_file_is_uploaded_while_the_table_version_is_read(
    proxied: tuple[S3Server, DelayProxy], mode: str
) -> None:
    uri, options = _namespace(proxied)
    ns = PartitionedNamespace.open(uri, options)
    before = _data_files(ns)
    rows = _rows(range(1), 2, 100)
    timeline = _timeline(proxied[1], lambda: ns.write(rows, mode=mode))

    read = [t for t in timeline if t[0] == "GET" and "dataset/_versions/" in t[1]]
    uploaded = [t for t in timeline if t[0] == "PUT" and "dataset/data/" in t[1]]
    assert len(read) == 1 and len(uploaded) == 1, timeline
    assert _overlap(read[0], uploaded[0]), timeline

    stored = PartitionedNamespace.open(uri, options).to_table()
    day0 = sorted(r["id"] for r in stored.to_pylist() if r["day"] == DAY0)
    assert day0 == ([0, 1, 2, 100, 101] if mode == "append" else [100, 101])
    assert stored.num_rows == len(day0) + 3
    assert _unreferenced(ns, before) == set()


def test_rows_written_ahead_for_a_table_of_an_older_schema_are_written_again(
    proxied: tuple[S3Server, DelayProxy],
) -> None:
    # day 0's table was written before a column was dropped: appended rows take its layout
    # (the dropped column kept, as NULL), not the write schema guessed, so they are laid out
    # again and the file written ahead is deleted
    uri, options = _namespace(proxied, SCHEMA.append(pa.field("note", pa.string())))
    ns = PartitionedNamespace.open(uri, options)
    ns.drop_column("note")
    ns = PartitionedNamespace.open(uri, options)
    before = _data_files(ns)
    ns.write(_rows(range(1), 2, 100), mode="append")

    stored = PartitionedNamespace.open(uri, options).to_table().sort_by("id")
    assert stored.schema.names == ["day", "id"]
    assert [(r["day"], r["id"]) for r in stored.to_pylist()] == [
        *[(DAY0, i) for i in (0, 1, 2)],
        *[(DAY0 + dt.timedelta(days=1), i) for i in (3, 4, 5)],
        (DAY0, 100),
        (DAY0, 101),
    ]
    assert _unreferenced(ns, before) == set()


def _hive_tree(server: S3Server, options: dict[str, str], version: str) -> str:
    """A Hive tree of two Lance tables of data storage ``version`` (with their key column) on
    the store; its URI."""
    root = f"s3://{server.create_bucket()}/hive"
    for d in range(2):
        day = DAY0 + dt.timedelta(days=d)
        lance.write_dataset(
            _rows(range(d, d + 1), 3, 10 * d),
            f"{root}/day={day.isoformat()}/part.lance",
            data_storage_version=version,
            storage_options=options,
        )
    return root


@pytest.mark.parametrize("mode", ["append", "overwrite_partitions"])
def test_rows_written_ahead_for_a_table_of_an_older_storage_version_are_written_again(
    proxied: tuple[S3Server, DelayProxy], mode: str
) -> None:
    server, proxy = proxied
    options = storage_options(proxy.endpoint)
    root = _hive_tree(server, options, "2.1")
    ns = PartitionedNamespace.import_hive(root, types={"day": pa.date32()}, storage_options=options)
    before = _data_files(ns)
    ns.write(_rows(range(1), 2, 100), mode=mode)

    stored = PartitionedNamespace.open(root, options).to_table()
    day0 = sorted(r["id"] for r in stored.to_pylist() if r["day"] == DAY0)
    assert day0 == ([0, 1, 2, 100, 101] if mode == "append" else [100, 101])
    assert sorted(r["id"] for r in stored.to_pylist() if r["day"] != DAY0) == [10, 11, 12]
    for task in ns.refresh().plan_scan("day = date '2024-01-01'").tasks:
        ds = lance.dataset(task.uri, version=task.read_version, storage_options=options)
        assert ds.data_storage_version == "2.1"
        versions = {
            (f.file_major_version, f.file_minor_version)
            for frag in ds.get_fragments()
            for f in frag.metadata.files
        }
        assert versions == {(2, 1)}
    assert _unreferenced(ns, before) == set()
