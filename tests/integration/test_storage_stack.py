"""One storage stack (core/storage.py): maintenance, health checks and the put-if-absent probe
list, stat and delete through obstore -- the object_store crate Lance itself uses -- with
Lance's storage option names.

S3: moto's server on 127.0.0.1 (plain HTTP endpoint, ``allow_http``), through a counting proxy
where the number of requests matters. Azure: Azurite on 127.0.0.1 when it is installed
(``scripts/run_tests.sh`` installs it with npm into ``.venv/azurite``): the storage functions,
the probe, and a partitioned namespace created, written, read, cleaned up and vacuumed on an
``az://`` root. ``gs://`` has no emulator here and is untested."""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import lance
import obstore
import pyarrow as pa
import pytest
from helpers.azurite import Azurite, azurite, azurite_executable
from helpers.data import SCHEMA, sample_table, sorted_rows
from helpers.faults import CommitHooks
from helpers.s3 import (
    S3Server,
    StripProxy,
    free_port,
    storage_options,
)

from dagster_lance_partitioned import PartitionedNamespace, PartitionField
from dagster_lance_partitioned.core import conditional_put, storage
from dagster_lance_partitioned.core.errors import PathEscapeError, StorageError

pytestmark = pytest.mark.object_store

FIELDS = [PartitionField.identity("country"), PartitionField.year("event_date")]


# -- S3 (moto) ------------------------------------------------------------------------------------
def put(server: S3Server, bucket: str, files: dict[str, bytes]) -> None:
    client = server.client()
    for key, body in files.items():
        client.put_object(Bucket=bucket, Key=key, Body=body)


def requests(proxy: StripProxy) -> dict[str, int]:
    return dict(proxy.requests)


def grown(proxy: StripProxy, before: dict[str, int]) -> dict[str, int]:
    now = requests(proxy)
    return {m: now[m] - before.get(m, 0) for m in now if now[m] != before.get(m, 0)}


TABLE = {
    "ns/t1/_versions/1.manifest": b"v1",
    "ns/t1/_versions/2.manifest": b"v22",
    "ns/t1/data/a.lance": b"aaaa",
    "ns/t1/_indices/u1/index.idx": b"i",
    "ns/t1/": b"",  # a directory marker (as pyarrow's delete_dir used to leave)
    "ns/t10/data/x.lance": b"not t1",  # shares the text prefix "ns/t1"
    "ns/other$x$dataset/data/b.lance": b"bb",
}


def test_listing_stat_and_delete_on_s3_with_lance_option_names(
    server: S3Server, bucket: str
) -> None:
    put(server, bucket, TABLE)
    opts = storage_options(server.endpoint)  # aws_* names, aws_endpoint http://..., allow_http
    assert opts["aws_endpoint"].startswith("http://") and opts["allow_http"] == "true"
    t1 = f"s3://{bucket}/ns/t1"
    started = time.time()

    files = storage.list_files(t1, opts)
    assert [(f.path, f.size) for f in files] == [
        ("_indices/u1/index.idx", 1),
        ("_versions/1.manifest", 2),
        ("_versions/2.manifest", 3),
        ("data/a.lance", 4),
    ]
    assert all(abs(f.mtime - started) < 120 for f in files)
    assert storage.list_tree(t1, opts) == (files, [])
    assert storage.list_files(f"s3://{bucket}/ns/missing", opts) == []
    assert storage.list_dirs(f"s3://{bucket}/ns", opts) == ["other$x$dataset", "t1", "t10"]
    assert storage.list_dirs(t1, opts) == ["_indices", "_versions", "data"]
    assert storage.list_dirs(f"s3://{bucket}/nothing", opts) == []

    mtime = storage.mtime(f"{t1}/data/a.lance", opts)
    assert mtime is not None and abs(mtime - started) < 120
    assert storage.mtime(t1 + "/data", opts) is None  # a prefix has no time
    assert storage.mtime(f"{t1}/data/none.lance", opts) is None
    assert storage.file_sizes(t1, ["data/a.lance", "data/none.lance"], opts) == {"data/a.lance": 4}
    assert storage.manifest_exists(t1, opts)
    assert not storage.manifest_exists(f"s3://{bucket}/ns/t10", opts)
    assert storage.is_dir(t1, opts) and storage.is_dir(f"s3://{bucket}", opts)
    assert not storage.is_dir(f"s3://{bucket}/ns/t", opts)

    # only what existed counts; the paths are relative to the directory, nothing else goes
    removed = storage.delete_files(t1, ["_versions/1.manifest", "data/a.lance", "data/gone"], opts)
    assert removed == 2
    assert sorted(server.keys(bucket)) == sorted(
        set(TABLE) - {"ns/t1/_versions/1.manifest", "ns/t1/data/a.lance"}
    )
    with pytest.raises(PathEscapeError):
        storage.delete_files(t1, ["../t10/data/x.lance"], opts)

    storage.delete_tree(t1, opts)
    assert sorted(server.keys(bucket)) == [
        "ns/other$x$dataset/data/b.lance",
        "ns/t1/",  # the marker is not below the prefix ns/t1/: object_store lists it as ns/t1
        "ns/t10/data/x.lance",
    ]
    storage.delete_tree(t1, opts)  # gone: no error
    with pytest.raises(PathEscapeError, match="bucket or container"):
        storage.delete_tree(f"s3://{bucket}", opts)


def test_listings_and_deletes_are_one_listing_and_batched(
    server: S3Server, counting: StripProxy, bucket: str, tune
) -> None:
    files = {f"ns/t/data/f{i:03d}.lance": b"x" for i in range(60)}
    files |= {f"ns/t/_versions/{i}.manifest": b"m" for i in range(5)}
    put(server, bucket, files)
    opts = storage_options(counting.endpoint)
    table = f"s3://{bucket}/ns/t"
    storage.list_files(table, opts)  # the store is built (and cached) before counting

    before = requests(counting)
    assert len(storage.list_files(table, opts)) == 65
    assert grown(counting, before) == {"GET": 1}  # one recursive listing (under 1000 keys)

    # 3 manifests: a HEAD each, then one bulk delete
    before = requests(counting)
    assert storage.delete_files(table, [f"_versions/{i}.manifest" for i in range(3)], opts) == 3
    assert grown(counting, before) == {"HEAD": 3, "POST": 1}

    # 60 data files, one missing: the directory is listed once instead of 61 HEADs, and the
    # deletes go in batches (of 25 here), several at a time
    tune(delete_batch=25)
    before = requests(counting)
    doomed = [f"data/f{i:03d}.lance" for i in range(60)] + ["data/missing.lance"]
    assert storage.delete_files(table, doomed, opts) == 60
    assert grown(counting, before) == {"GET": 1, "POST": 3}
    assert sorted(server.keys(bucket)) == ["ns/t/_versions/3.manifest", "ns/t/_versions/4.manifest"]


def test_listings_page_through_more_than_a_thousand_keys(server: S3Server, bucket: str) -> None:
    opts = storage_options(server.endpoint)
    loc = storage.object_location(f"s3://{bucket}/big", opts)
    keys = [loc.key(f"d{i:04d}/f") for i in range(1005)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda k: obstore.put(loc.store, k, b"x"), keys))
    assert len(storage.list_files(f"s3://{bucket}/big", opts)) == 1005
    dirs = storage.list_dirs(f"s3://{bucket}/big", opts)
    assert len(dirs) == 1005 and dirs[0] == "d0000" and dirs[-1] == "d1004"
    storage.delete_tree(f"s3://{bucket}/big", opts)
    assert server.keys(bucket) == []


def test_one_store_per_url_and_options_shared_by_threads(server: S3Server, bucket: str) -> None:
    opts = storage_options(server.endpoint)
    root = f"s3://{bucket}/lake/ns"
    found: list[object] = []
    lock = threading.Lock()

    def look() -> None:
        loc = storage.object_location(f"{root}/t{threading.get_ident()}", opts)
        with lock:
            found.append(loc.store)

    threads = [threading.Thread(target=look) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(s) for s in found}) == 1
    # s3+ddb roots (their files are on plain S3) use the same store
    same = storage.object_location(f"s3+ddb://{bucket}/lake/ns?ddbTableName=commits", opts)
    assert same.store is found[0] and (same.url, same.path) == (f"s3://{bucket}", "lake/ns")
    other = storage.object_location(root, {**opts, "aws_region": "eu-west-1"})
    assert other.store is not found[0]


def test_option_names_upper_case_lance_only_and_client_options(
    server: S3Server, bucket: str
) -> None:
    """Lance lower-cases option names and leaves out options object_store does not know;
    client options under a store prefix (aws_timeout) are client options."""
    put(server, bucket, {"ns/t/data/a.lance": b"a"})
    opts = {k.upper(): v for k, v in storage_options(server.endpoint).items()}
    opts |= {
        "download_retry_count": "3",  # Lance's own
        "client_max_retries": "2",  # Lance's: the retry config
        "client_retry_timeout": "20",
        "aws_timeout": "30s",
        "connect_timeout": "5s",
        "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false",
    }
    cfg = storage.store_config(f"s3://{bucket}", {k.lower(): v for k, v in opts.items()})
    assert "download_retry_count" not in cfg.config and "client_max_retries" not in cfg.config
    assert cfg.client_options == {"allow_http": "true", "timeout": "30s", "connect_timeout": "5s"}
    assert cfg.retry_config["max_retries"] == 2
    assert cfg.retry_config["retry_timeout"] == dt.timedelta(seconds=20)
    assert [f.path for f in storage.list_files(f"s3://{bucket}/ns/t", opts)] == ["data/a.lance"]


def test_store_failures_are_storage_errors(server: S3Server) -> None:
    unreachable = {
        **storage_options(f"http://127.0.0.1:{free_port()}"),
        "client_max_retries": "0",
    }
    for call in (
        lambda: storage.list_files("s3://nowhere/ns/t", unreachable),
        lambda: storage.list_dirs("s3://nowhere/ns", unreachable),
        lambda: storage.mtime("s3://nowhere/ns/t/f", unreachable),
        lambda: storage.delete_files("s3://nowhere/ns/t", ["a"], unreachable),
        lambda: storage.delete_tree("s3://nowhere/ns/t", unreachable),
        lambda: storage.manifest_exists("s3://nowhere/ns/__manifest", unreachable),
        lambda: storage.list_files("s3://no-such-bucket-dlp/ns", storage_options(server.endpoint)),
    ):
        with pytest.raises(StorageError) as caught:
            call()
        message = str(caught.value)
        assert message.startswith("s3://"), message
        assert "Debug source" not in message and ".rs:" not in message, message
    with pytest.raises(StorageError, match="client_max_retries"):
        storage.list_files("s3://b/ns", {"client_max_retries": "many"})
    with pytest.raises(StorageError, match="cannot list or delete files on hdfs://"):
        storage.list_files("hdfs://host/ns", None)


def test_secrets_are_kept_out_of_error_messages() -> None:
    text = (
        "Error performing GET http://h/c/b?comp=list&sig=SECRET1%2Fdef&se=2030 "
        "X-Amz-Signature=SECRET2&x-amz-security-token=SECRET3\n\nDebug source:\nsecret dump"
    )
    message = storage.store_message(text)
    assert "SECRET" not in message, message
    assert "secret dump" not in message and "comp=list" in message


# -- Azure (Azurite) ---------------------------------------------------------------------------
AZURITE = azurite_executable()
needs_azurite = pytest.mark.skipif(
    AZURITE is None,
    reason="azurite is not installed (scripts/run_tests.sh installs it with npm into "
    ".venv/azurite when node and npm exist; or set DLP_AZURITE to an azurite-blob executable)",
)


@pytest.fixture(scope="module")
def azure() -> Iterator[Azurite]:
    assert AZURITE is not None
    with azurite(AZURITE) as service:
        yield service


@pytest.fixture
def container(azure: Azurite) -> str:
    return azure.create_container()


@needs_azurite
def test_listing_stat_and_delete_on_azure(azure: Azurite, container: str) -> None:
    opts = azure.storage_options()
    loc = storage.object_location(f"az://{container}", opts)
    for key, body in TABLE.items():
        if not key.endswith("/"):  # (object_store writes no directory markers)
            obstore.put(loc.store, key, body)
    t1 = f"az://{container}/ns/t1"
    assert [(f.path, f.size) for f in storage.list_files(t1, opts)] == [
        ("_indices/u1/index.idx", 1),
        ("_versions/1.manifest", 2),
        ("_versions/2.manifest", 3),
        ("data/a.lance", 4),
    ]
    assert storage.list_dirs(f"az://{container}/ns", opts) == ["other$x$dataset", "t1", "t10"]
    assert storage.mtime(f"{t1}/data/a.lance", opts) is not None
    assert storage.mtime(f"{t1}/data/none.lance", opts) is None
    assert storage.manifest_exists(t1, opts)
    # Azure refuses a batch holding a missing blob: what exists is found first, so the count
    # is right and the batch goes through
    removed = storage.delete_files(t1, ["_versions/1.manifest", "data/a.lance", "data/gone"], opts)
    assert removed == 2
    assert [f.path for f in storage.list_files(t1, opts)] == [
        "_indices/u1/index.idx",
        "_versions/2.manifest",
    ]
    storage.delete_tree(t1, opts)
    assert storage.list_files(t1, opts) == []
    assert storage.list_dirs(f"az://{container}/ns", opts) == ["other$x$dataset", "t10"]


@needs_azurite
def test_a_batch_meeting_a_blob_deleted_meanwhile_still_deletes_the_rest(
    azure: Azurite, container: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    opts = azure.storage_options()
    table = f"az://{container}/ns/t"
    loc = storage.object_location(table, opts)
    for i in range(6):
        obstore.put(loc.store, loc.key(f"data/{i}.lance"), b"x")
    real = storage._existing

    def stale(loc: storage.ObjectLocation, uri: str, keys: list[str]) -> list[str]:
        found = real(loc, uri, keys)
        obstore.delete(loc.store, found[0])  # a concurrent deletion after the check
        return found

    monkeypatch.setattr(storage, "_existing", stale)
    assert storage.delete_files(table, [f"data/{i}.lance" for i in range(6)], opts) == 6
    assert storage.list_files(table, opts) == []


@needs_azurite
def test_put_if_absent_probe_passes_on_azurite(azure: Azurite, container: str) -> None:
    conditional_put.clear_probe_cache()
    try:
        conditional_put.ensure_conditional_put(f"az://{container}/ns", azure.storage_options())
    finally:
        conditional_put.clear_probe_cache()
    assert storage.list_files(f"az://{container}", azure.storage_options()) == []


@needs_azurite
def test_namespace_create_write_read_cleanup_and_vacuum_on_azure(
    azure: Azurite, container: str, before_commit: CommitHooks
) -> None:
    opts = azure.storage_options()
    uri = f"az://{container}/lake/ns"
    ns = PartitionedNamespace.create(uri, SCHEMA, FIELDS, storage_options=opts)
    ns.write(sample_table(12))
    for i in range(2):
        ns.write(sample_table(12, start=100 * (i + 1)))
    rows = sorted_rows(PartitionedNamespace.open(uri, opts).to_table())
    assert len(rows) == 36
    assert sorted_rows(ns.to_table(filter="country = 'FR'")) == [
        r for r in rows if r["country"] == "FR"
    ]
    registered = {p["location"] for p in ns.inspect.partitions()}
    assert set(storage.list_dirs(uri, opts)) == registered | {"__manifest"}

    # an orphan: a write whose tables were written but whose manifest commit never happened
    def boom(pending: list) -> None:
        raise RuntimeError("injected failure before the manifest commit")

    before_commit(ns, boom)
    with pytest.raises(RuntimeError, match="injected"):
        ns.write(sample_table(2, countries=("JP",), start=700))
    before_commit(ns, None)
    (orphan,) = set(storage.list_dirs(uri, opts)) - registered - {"__manifest"}
    assert [o.location for o in ns.inspect.find_orphans()] == [orphan]

    before_compact = ns.version
    ns.maintenance.compact()
    manifests_before = len(storage.list_files(f"{uri}/__manifest/_versions", opts))
    cleaned = ns.maintenance.cleanup(older_than=dt.timedelta(0), keep_manifest_versions=2)
    assert cleaned.manifest_versions_removed == before_compact + 1 - 2
    assert cleaned.table_versions_removed > 0 and cleaned.files_removed > 0
    assert cleaned.tables_skipped == ()
    assert len(storage.list_files(f"{uri}/__manifest/_versions", opts)) < manifests_before
    assert sorted_rows(PartitionedNamespace.open(uri, opts, version=before_compact).to_table()) == (
        rows
    )

    vacuumed = ns.maintenance.vacuum(grace=dt.timedelta(0))
    assert vacuumed.orphans_removed == (orphan,)
    assert storage.list_files(f"{uri}/{orphan}", opts) == []
    assert set(storage.list_dirs(uri, opts)) == registered | {"__manifest"}
    assert sorted_rows(PartitionedNamespace.open(uri, opts).to_table()) == rows
    assert ns.inspect.check_integrity() == []


@needs_azurite
def test_lance_and_the_storage_stack_with_the_emulator_option(
    azure: Azurite, container: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``azure_storage_use_emulator``: object_store (Lance's and obstore's) takes the
    emulator's account key and its URL from AZURITE_BLOB_STORAGE_URL."""
    monkeypatch.setenv("AZURITE_BLOB_STORAGE_URL", f"http://127.0.0.1:{azure.port}")
    opts = {"azure_storage_use_emulator": "true", "azure_storage_account_name": "devstoreaccount1"}
    uri = f"az://{container}/emulated/t"
    lance.write_dataset(pa.table({"a": [1, 2, 3]}), uri, storage_options=opts)
    assert lance.dataset(uri, storage_options=opts).count_rows() == 3
    assert storage.list_dirs(uri, opts) == ["_transactions", "_versions", "data"]
    storage.delete_tree(uri, opts)
    assert storage.list_files(uri, opts) == []
