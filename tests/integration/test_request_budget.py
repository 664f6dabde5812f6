"""The requests a write makes on an S3-compatible store, counted by the latency proxy of the
object-storage benchmark (``tests/helpers/delay_proxy.py``, no latency) in front of moto's
server: each operation stays within its budget (what docs/explanation/benchmarks.md "Object storage"
accounts for), in a cold process (every cache of this package dropped first), and the
stored rows are right."""

import datetime as dt
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from helpers.delay_proxy import DelayProxy, delay_proxy
from helpers.s3 import S3Server, s3_server, storage_options

from dagster_lance_partitioned import PartitionedNamespace, PartitionField
from dagster_lance_partitioned.core import storage
from dagster_lance_partitioned.core.errors import PartitionedNamespaceError
from dagster_lance_partitioned.core.read import scan

pytestmark = pytest.mark.object_store

SCHEMA = pa.schema([pa.field("day", pa.date32()), pa.field("id", pa.int64())])
DAY0 = dt.date(2024, 1, 1)
NEW = 4  # new partitions of the first write


def _rows(days: range, per_day: int, first_id: int = 0) -> pa.Table:
    days_col = [DAY0 + dt.timedelta(days=d) for d in days for _ in range(per_day)]
    return pa.table(
        {"day": pa.array(days_col, pa.date32()), "id": range(first_id, first_id + len(days_col))},
        schema=SCHEMA,
    )


@pytest.fixture(scope="module")
def proxied() -> Iterator[tuple[S3Server, DelayProxy]]:
    with s3_server() as server, delay_proxy(server.port, latency=0.0) as proxy:
        yield server, proxy


def _cold() -> None:
    """Forget what this process read and the write session's client (a new process)."""
    scan.clear_caches()
    storage.clear_lance_session()


def _counted(proxy: DelayProxy, run: object) -> dict[str, int]:
    _cold()
    proxy.reset()
    run()  # type: ignore[operator]
    return proxy.counts()


def _new_namespace(
    proxied: tuple[S3Server, DelayProxy],
) -> tuple[PartitionedNamespace, str, dict[str, str]]:
    """A new namespace in a bucket of its own, reached through the proxy."""
    server, proxy = proxied
    options = storage_options(proxy.endpoint)
    uri = f"s3://{server.create_bucket()}/events"
    ns = PartitionedNamespace.create(
        uri, SCHEMA, [PartitionField.identity("day")], storage_options=options
    )
    return ns, uri, options


def test_writes_stay_within_their_request_budgets(
    proxied: tuple[S3Server, DelayProxy],
) -> None:
    proxy = proxied[1]
    ns, uri, options = _new_namespace(proxied)

    # N new partitions: the refresh (1 listing: the version the handle read is the newest,
    # nothing read again; it was 3), 5 per new table (Lance's floor: 2 LIST + 3 PUT), the
    # manifest commit (6: a listing shows the base is the newest, so it is not read again)
    write = _counted(proxy, lambda: ns.write(_rows(range(NEW), 10), mode="append"))
    assert write["total"] <= 1 + 5 * NEW + 6, write
    assert write["LIST"] <= 2 * NEW + 3 and write["PUT"] <= 3 * NEW + 3, write
    assert write["GET"] <= 1 and write["HEAD"] == 0, write

    # one row into one partition: the refresh (1), the table version (HEAD, GET, 3 PUT), the
    # manifest commit (5: its replaced rows deleted by address, no read); it was 18 before
    # the session and the kept row addresses, 15 before deletion by address, 14 before the
    # refresh and the commit listed instead of reading the version the handle holds
    ns = PartitionedNamespace.open(uri, options)
    append = _counted(proxy, lambda: ns.write(_rows(range(1), 1, 1000), mode="append"))
    assert append["total"] <= 12, append
    assert append["GET"] <= 1, append

    # the partition just appended to, replaced (its manifest row and the sentinel row share
    # one manifest fragment, as in the benchmark): it was 20, then 16, then 15
    ns = PartitionedNamespace.open(uri, options)
    replace = _counted(
        proxy, lambda: ns.write(_rows(range(1), 5, 2000), mode="overwrite_partitions")
    )
    assert replace["total"] <= 11, replace
    assert replace["GET"] <= 1, replace

    _cold()
    stored = PartitionedNamespace.open(uri, options).to_table()
    assert stored.num_rows == (NEW - 1) * 10 + 5
    by_day = pa.TableGroupBy(stored, "day").aggregate([("id", "count")]).to_pylist()
    assert {r["day"]: r["id_count"] for r in by_day} == {DAY0: 5} | {
        DAY0 + dt.timedelta(days=d): 10 for d in range(1, NEW)
    }
    day0 = stored.filter(pc.equal(stored["day"], pa.scalar(DAY0, pa.date32())))
    assert sorted(day0["id"].to_pylist()) == list(range(2000, 2005))


def _two_handles(
    proxied: tuple[S3Server, DelayProxy],
) -> tuple[PartitionedNamespace, PartitionedNamespace, str, dict[str, str]]:
    """Two handles of a new namespace holding 6 rows (days 0 and 1), its URI and options."""
    ns, uri, options = _new_namespace(proxied)
    ns.write(_rows(range(2), 3), mode="append")
    return (
        PartitionedNamespace.open(uri, options),
        PartitionedNamespace.open(uri, options),
        uri,
        options,
    )


def test_a_handle_behind_the_newest_version_reads_it_and_commits_on_it(
    proxied: tuple[S3Server, DelayProxy],
) -> None:
    # the listing that spares re-reading a version must never keep a handle on an old one
    from dagster_lance_partitioned.core.transaction import write_rows

    behind, ahead, uri, options = _two_handles(proxied)
    ahead.write(_rows(range(1, 3), 2, 100), mode="append")  # day 1 appended, day 2 new
    _cold()
    assert behind.refresh().version == ahead.version
    assert behind.to_table().num_rows == 6 + 4

    # a write planned on a version that is no longer the newest commits on the newest
    stale = PartitionedNamespace.open(uri, options)
    ahead.write(_rows(range(3, 4), 2, 200), mode="append")
    _cold()
    write_rows(stale.state, _rows(range(0, 1), 1, 300), "append")  # no refresh first
    _cold()
    stored = PartitionedNamespace.open(uri, options).to_table()
    assert sorted(stored["id"].to_pylist()) == sorted([*range(6), *range(100, 104), 200, 201, 300])


Timed = tuple[str, str, float, float]  # (kind, path, arrived, answered)


def _timed_append(proxied: tuple[S3Server, DelayProxy], first_id: int) -> list[Timed]:
    """The proxy's timeline of a one-row append (50 ms a request) by a handle that holds the
    newest version; the rows stored are checked."""
    proxy = proxied[1]
    ns, uri, options = _new_namespace(proxied)
    ns.write(_rows(range(2), 3), mode="append")
    ns = PartitionedNamespace.open(uri, options)
    proxy.latency = 0.05
    try:
        _counted(proxy, lambda: ns.write(_rows(range(1), 1, first_id), mode="append"))
        timeline = list(proxy.timeline)
    finally:
        proxy.latency = 0.0
    stored = PartitionedNamespace.open(uri, options).to_table()
    assert sorted(stored["id"].to_pylist()) == [0, 1, 2, 3, 4, 5, first_id]
    return timeline


def _overlap(a: Timed, b: Timed) -> bool:
    return a[2] < b[3] and b[2] < a[3]


def _version_listings(timeline: list[Timed]) -> list[Timed]:
    return [t for t in timeline if t[0] == "LIST" and "__manifest%2F_versions" in t[1]]


def test_the_manifest_commit_lists_its_versions_beside_writing_its_rows(
    proxied: tuple[S3Server, DelayProxy],
) -> None:
    # the check that the write's base is still the newest version is one listing, made while
    # the commit's new manifest rows are written, not one round trip before them
    timeline = _timed_append(proxied, 500)
    rows_written = [t for t in timeline if t[0] == "PUT" and "/__manifest/data/" in t[1]]
    assert len(rows_written) == 1, timeline
    beside = [t for t in _version_listings(timeline) if _overlap(t, rows_written[0])]
    assert len(beside) == 1, timeline


def test_a_write_lists_the_newest_version_beside_opening_its_tables(
    proxied: tuple[S3Server, DelayProxy],
) -> None:
    # the refresh's listing is made while the rows are routed and the table they are appended
    # to is opened (its version file read), not one round trip before
    timeline = _timed_append(proxied, 600)
    first_listing = min(_version_listings(timeline), key=lambda t: t[2])
    opened = [t for t in timeline if t[0] == "HEAD" and "/_versions/" in t[1]]
    assert len(opened) == 1, timeline
    assert _overlap(first_listing, opened[0]), timeline


def test_rows_routed_on_a_version_that_is_no_longer_newest_are_routed_again(
    proxied: tuple[S3Server, DelayProxy],
) -> None:
    # a handle behind a column addition writes rows holding the new column: routed on the
    # version it holds they do not fit; the listing shows a newer version, which is read and
    # the write made from it
    behind, ahead, uri, options = _two_handles(proxied)
    ahead.add_columns(pa.field("score", pa.int32()))
    ahead.write(_rows(range(2, 3), 2, 100).append_column("score", pa.array([7, 8], pa.int32())))
    rows = _rows(range(0, 2), 1, 300).append_column("score", pa.array([1, 2], pa.int32()))
    _cold()
    result = behind.write(rows, mode="append")
    assert result.manifest_version == behind.version == ahead.refresh().version
    stored = PartitionedNamespace.open(uri, options).to_table().sort_by("id")
    assert stored["id"].to_pylist() == [0, 1, 2, 3, 4, 5, 100, 101, 300, 301]
    assert stored["score"].to_pylist() == [None] * 6 + [7, 8, 1, 2]
    # and a handle that is current writes rows that do not fit: refused, nothing written
    before = stored
    with pytest.raises(PartitionedNamespaceError, match="nope"):
        behind.write(rows.append_column("nope", pa.array([1, 2], pa.int64())), mode="append")
    assert PartitionedNamespace.open(uri, options).to_table().sort_by("id").equals(before)
