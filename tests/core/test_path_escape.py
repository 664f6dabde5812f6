"""Nothing outside the root: manifest locations (and branch / tag names) that are absolute, URIs
or climb out with ``..`` are refused by every read, write and maintenance path, and nothing
outside the root is read, written or deleted through them."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import lance
import pytest
from helpers.data import SCHEMA, file_hashes, fingerprint, sample_table

from dagster_lance_partitioned import PartitionedNamespace, PartitionField
from dagster_lance_partitioned.core import storage
from dagster_lance_partitioned.core.errors import PathEscapeError
from dagster_lance_partitioned.core.manifest.snapshot import ManifestSnapshot
from dagster_lance_partitioned.core.manifest.store import ManifestEdit, ManifestStore

_tree = file_hashes


@pytest.fixture
def setup(tmp_path: Path):
    """A namespace under ``tmp_path/lake/ns`` and a foreign Lance table (with old versions and
    an uncommitted file) at ``tmp_path/foreign``, outside the root."""
    foreign = tmp_path / "foreign"
    for i in range(3):  # three versions: cleanup would have old ones to delete
        lance.write_dataset(
            sample_table(4, start=100 * i), str(foreign), mode="append" if i else "create"
        )
    (foreign / "data" / "stray-uncommitted.lance").write_bytes(b"not ours")
    old = os.path.getmtime(foreign / "data")
    for p in foreign.rglob("*"):
        os.utime(p, (old - 30 * 86400, old - 30 * 86400))  # everything looks old
    ns = PartitionedNamespace.create(
        tmp_path / "lake" / "ns", SCHEMA, [PartitionField.identity("country")]
    )
    ns.write(sample_table(6))
    return ns, foreign


def _hijack(ns: PartitionedNamespace, **columns) -> str:
    """Point the US partition's manifest row at ``columns`` (a hostile manifest edit)."""
    us = next(p for p in ns.inspect.partitions() if p["values"]["country"] == "US")
    store = ManifestStore(ns.uri)

    def plan(snap: ManifestSnapshot) -> ManifestEdit:
        return ManifestEdit(upserts={us["object_id"]: dict(columns)})

    store.commit(lambda ds: ManifestSnapshot(ds, ns.specs), plan)
    ns.refresh()
    return us["object_id"]


def _hostile_locations(foreign: Path, root: str) -> list[str]:
    return [
        str(foreign),  # absolute
        foreign.as_uri(),  # a URI
        "../../foreign",  # climbs out
        "x/../../../foreign",
        os.path.relpath(foreign, root),
    ]


@pytest.mark.parametrize("which", range(5))
def test_reads_refuse_locations_outside_the_root(setup, tmp_path: Path, which: int) -> None:
    ns, foreign = setup
    location = _hostile_locations(foreign, ns.uri)[which]
    oid = _hijack(ns, location=location)
    with pytest.raises(PathEscapeError) as info:
        ns.to_table()
    assert oid in str(info.value) and location in str(info.value)
    assert info.value.object_id == oid and info.value.location == location
    with pytest.raises(PathEscapeError):
        ns.to_table(filter="country = 'US'")
    # partitions whose rows cannot come from the foreign table are still pruned away
    assert ns.count_rows("country = 'FR'") == 2


def test_writes_refuse_locations_outside_the_root(setup, tmp_path: Path) -> None:
    ns, foreign = setup
    _hijack(ns, location=str(foreign))
    before, foreign_before = fingerprint(ns.uri), _tree(foreign)
    for mode in ("append", "overwrite_partitions"):
        with pytest.raises(PathEscapeError):
            ns.write(sample_table(3), mode=mode)
    assert _tree(foreign) == foreign_before
    assert fingerprint(ns.uri)["manifest_version"] == before["manifest_version"]


@pytest.mark.parametrize("location", ["abs", "uri", "dotdot"])
def test_maintenance_never_deletes_outside_the_root(setup, tmp_path: Path, location) -> None:
    ns, foreign = setup
    hostile = {
        "abs": str(foreign),
        "uri": foreign.as_uri(),
        "dotdot": "../../foreign",
    }[location]
    _hijack(ns, location=hostile)
    foreign_before = _tree(foreign)
    with pytest.raises(PathEscapeError):
        ns.maintenance.cleanup(older_than=dt.timedelta(0), keep_manifest_versions=1)
    with pytest.raises(PathEscapeError):
        ns.maintenance.vacuum(grace=dt.timedelta(0))
    with pytest.raises(PathEscapeError):
        ns.maintenance.compact()
    assert _tree(foreign) == foreign_before
    # the health check reports the row instead of following it
    from dagster_lance_partitioned.core.ops.health import check_read_versions

    issues, _ = check_read_versions(ns)
    assert [i.problem for i in issues] == ["location outside the root"]


@pytest.mark.parametrize("column", ["read_branch", "read_tag"])
def test_branch_and_tag_names_cannot_escape(setup, column: str) -> None:
    ns, _ = setup
    oid = _hijack(ns, **{column: "../../../foreign"})
    with pytest.raises(PathEscapeError) as info:
        ns.to_table()
    assert column in str(info.value) and oid in str(info.value)


def test_location_rules() -> None:
    ok = ["abcd1234_v1$aaaa$dataset", "country=US/year=2025/t.lance", "a/b:c"]
    bad = ["", "/abs", "s3://b/x", "file:///x", "..", "a/../b", "./a", "a//b", "a\\b", "a\x00"]
    assert [storage.location_problem(x) for x in ok] == [None] * len(ok)
    assert all(storage.location_problem(x) for x in bad)
    with pytest.raises(PathEscapeError):
        storage.join("/root", "../x")


def test_uris_with_a_query_keep_it_on_every_table() -> None:
    """Lance's DynamoDB commit store is configured in the root's query string; every table
    URI below the root keeps it, and listings go to the plain S3 paths."""
    root = storage.normalize_root("s3+ddb://bucket/lake/ns/?ddbTableName=commits")
    assert root == "s3+ddb://bucket/lake/ns?ddbTableName=commits"
    assert (
        storage.join(root, "__manifest")
        == "s3+ddb://bucket/lake/ns/__manifest?ddbTableName=commits"
    )
    assert storage.table_uri(root, "abcd1234_v1$x$dataset", "v1$x$dataset") == (
        "s3+ddb://bucket/lake/ns/abcd1234_v1$x$dataset?ddbTableName=commits"
    )
    loc = storage.object_location(
        storage.join(root, "__manifest"),
        {"aws_endpoint": "http://127.0.0.1:1", "aws_region": "us-east-1"},
    )
    assert (loc.url, loc.path) == ("s3://bucket", "lake/ns/__manifest")
    assert type(loc.store).__name__ == "S3Store"
