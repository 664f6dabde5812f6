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


def test_writes_stay_within_their_request_budgets(
    proxied: tuple[S3Server, DelayProxy],
) -> None:
    server, proxy = proxied
    options = storage_options(proxy.endpoint)
    uri = f"s3://{server.create_bucket()}/events"
    ns = PartitionedNamespace.create(
        uri, SCHEMA, [PartitionField.identity("day")], storage_options=options
    )

    # N new partitions: the refresh (3), 5 per new table (Lance's floor: 2 LIST + 3 PUT),
    # the manifest commit (6)
    write = _counted(proxy, lambda: ns.write(_rows(range(NEW), 10), mode="append"))
    assert write["total"] <= 3 + 5 * NEW + 6, write
    assert write["LIST"] <= 2 * NEW + 3 and write["PUT"] <= 3 * NEW + 3, write
    assert write["GET"] <= 3 and write["HEAD"] == 0, write

    # one row into one partition: the refresh (3), the table version (HEAD, GET, 3 PUT), the
    # manifest commit (6: its replaced rows deleted by address, no read); it was 18 before
    # the session and the kept row addresses, 15 before deletion by address
    ns = PartitionedNamespace.open(uri, options)
    append = _counted(proxy, lambda: ns.write(_rows(range(1), 1, 1000), mode="append"))
    assert append["total"] <= 14, append
    assert append["GET"] <= 3, append

    # the partition just appended to, replaced (its manifest row and the sentinel row share
    # one manifest fragment, as in the benchmark): it was 20, then 16
    ns = PartitionedNamespace.open(uri, options)
    replace = _counted(
        proxy, lambda: ns.write(_rows(range(1), 5, 2000), mode="overwrite_partitions")
    )
    assert replace["total"] <= 15, replace
    assert replace["GET"] <= 5, replace

    _cold()
    stored = PartitionedNamespace.open(uri, options).to_table()
    assert stored.num_rows == (NEW - 1) * 10 + 5
    by_day = pa.TableGroupBy(stored, "day").aggregate([("id", "count")]).to_pylist()
    assert {r["day"]: r["id_count"] for r in by_day} == {DAY0: 5} | {
        DAY0 + dt.timedelta(days=d): 10 for d in range(1, NEW)
    }
    day0 = stored.filter(pc.equal(stored["day"], pa.scalar(DAY0, pa.date32())))
    assert sorted(day0["id"].to_pylist()) == list(range(2000, 2005))
