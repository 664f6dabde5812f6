"""A ``__manifest`` edited around this package (with Lance directly) so that one object id is
listed twice: the same row twice, or two table rows sharing an id with different locations.

Every open, read, write, row change and maintenance operation refuses it with
:class:`ManifestError` naming the id (reads would otherwise return the partition's rows
twice), and a refused operation leaves the stored data exactly as it was."""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from helpers.data import SCHEMA, fingerprint, sample_table
from helpers.faults import CommitHooks

from dagster_lance_partitioned import PartitionedNamespace, PartitionField
from dagster_lance_partitioned.core.errors import ManifestError, PartitionedNamespaceError
from dagster_lance_partitioned.core.manifest.state import load_snapshot
from dagster_lance_partitioned.core.manifest.store import SCHEMA_KEY

KINDS = ["identical_row", "shared_id"]


def _manifest_uri(root: str) -> str:
    return os.path.join(root, "__manifest")


def duplicate(root: str, kind: str) -> str:
    """Append to ``__manifest`` (with Lance, keeping its table metadata) a second row for the
    first table row's object id: an identical copy, or one pointing at another partition's
    location. Returns that object id."""
    uri = _manifest_uri(root)
    before = lance.dataset(uri)
    rows = before.to_table()
    tables = rows.filter(pc.equal(rows.column("object_type"), "table"))
    row = tables.slice(0, 1)
    if kind == "shared_id":
        other = tables.column("location")[1]
        row = row.set_column(
            row.schema.get_field_index("location"),
            row.schema.field("location"),
            pa.array([other.as_py()], pa.utf8()),
        )
    lance.write_dataset(row, uri, mode="append")
    after = lance.dataset(uri)
    assert after.version == before.version + 1
    assert dict(after.metadata) == dict(before.metadata) and SCHEMA_KEY in after.metadata
    assert after.count_rows() == before.count_rows() + 1
    return str(row.column("object_id")[0].as_py())


@pytest.fixture(params=KINDS)
def hostile(request, tmp_path: Path) -> tuple[PartitionedNamespace, str]:
    """A namespace handle opened (and read) before the duplicate landed, and the id."""
    ns = PartitionedNamespace.create(tmp_path / "ns", SCHEMA, [PartitionField.identity("country")])
    ns.write(sample_table(6))
    ns.write(sample_table(6, start=100))  # several versions, for cleanup to consider
    assert ns.count_rows() == 12
    return ns, duplicate(ns.uri, request.param)


def _assert_names(error: pytest.ExceptionInfo[ManifestError], oid: str) -> None:
    message = str(error.value)
    assert repr(oid) in message, message
    assert "__manifest" in message and ".rs:" not in message


def _unverified(root: str) -> PartitionedNamespace:
    """A handle on the latest manifest version built without ``open`` (its check skipped), to
    show that the reads themselves refuse the duplicate."""
    ds = lance.dataset(_manifest_uri(root))
    return PartitionedNamespace(root, None, load_snapshot(ds), pinned=False)


# -- open ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("large", [False, True], ids=["small", "large"])
def test_open_refuses(hostile, tune, large: bool) -> None:
    ns, oid = hostile
    if large:  # a manifest too large to be read whole: only its object ids are read
        tune(small_manifest_rows=0)
    with pytest.raises(ManifestError) as error:
        PartitionedNamespace.open(ns.uri)
    _assert_names(error, oid)
    latest = lance.dataset(_manifest_uri(ns.uri)).version
    with pytest.raises(ManifestError) as error:
        PartitionedNamespace.open(ns.uri, version=latest)
    _assert_names(error, oid)
    assert f"version {latest}" in str(error.value)
    # the version before the duplicate is still readable
    old = PartitionedNamespace.open(ns.uri, version=latest - 1)
    assert old.count_rows() == 12


def test_refresh_refuses_and_keeps_the_version_read(hostile) -> None:
    ns, oid = hostile
    version = ns.version
    with pytest.raises(ManifestError) as error:
        ns.refresh()
    _assert_names(error, oid)
    assert ns.version == version and ns.count_rows() == 12


# -- read -----------------------------------------------------------------------------------------
READS: dict[str, Callable[[PartitionedNamespace], Any]] = {
    "to_table": lambda ns: ns.to_table(),
    "scan": lambda ns: ns.scan().read_all(),
    "count_rows": lambda ns: ns.count_rows(),
    "filtered": lambda ns: ns.to_table("country = 'US'"),
    "plan_scan": lambda ns: ns.plan_scan("country IN ('US', 'FR', 'DE')"),
    "partitions": lambda ns: ns.inspect.partitions(),
}


@pytest.mark.parametrize("large", [False, True], ids=["small", "large"])
@pytest.mark.parametrize("read", sorted(READS))
def test_reads_refuse(hostile, tune, read: str, large: bool) -> None:
    ns, oid = hostile
    if large:  # plans query __manifest with Lance's scanner instead of reading it whole
        tune(small_manifest_rows=0)
    with pytest.raises(ManifestError) as error:
        READS[read](_unverified(ns.uri))
    _assert_names(error, oid)


# -- write, row changes, maintenance ------------------------------------------------------------
CHANGES: dict[str, Callable[[PartitionedNamespace], Any]] = {
    "append": lambda ns: ns.write(sample_table(3, start=500)),
    "overwrite": lambda ns: ns.write(sample_table(3, start=500), mode="overwrite"),
    "overwrite_partitions": lambda ns: ns.write(
        sample_table(3, start=500), mode="overwrite_partitions"
    ),
    "merge_insert": lambda ns: ns.merge_insert(sample_table(3, start=1), on="id"),
    "delete": lambda ns: ns.delete("id = 1"),
    "update": lambda ns: ns.update("id = 1", {"value": "value + 1"}),
    "compact": lambda ns: ns.maintenance.compact(),
    "cleanup": lambda ns: ns.maintenance.cleanup(),
    "vacuum": lambda ns: ns.maintenance.vacuum(grace=dt.timedelta(0)),
    "drop_partitions": lambda ns: ns.maintenance.drop_partitions("country = 'US'"),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_changes_refuse_and_write_nothing(hostile, change: str) -> None:
    ns, oid = hostile
    before = fingerprint(ns.uri)
    with pytest.raises(ManifestError) as error:
        CHANGES[change](ns)
    _assert_names(error, oid)
    assert fingerprint(ns.uri) == before


def test_cleanup_of_old_versions_refuses_before_removing_anything(hostile) -> None:
    ns, oid = hostile
    before = fingerprint(ns.uri)
    with pytest.raises(ManifestError) as error:
        ns.maintenance.cleanup(older_than=dt.timedelta(0), keep_manifest_versions=1)
    _assert_names(error, oid)
    assert fingerprint(ns.uri) == before


@pytest.mark.parametrize("large", [False, True], ids=["small", "large"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_duplicate_landing_during_a_write_refuses_its_commit(
    tmp_path: Path,
    tune,
    kind: str,
    large: bool,
    before_commit: CommitHooks,
) -> None:
    """The duplicate appears after the write read the manifest, before its commit: the commit
    (which re-reads the rows it touches) is refused and the manifest does not move."""
    if large:
        tune(small_manifest_rows=0)
    ns = PartitionedNamespace.create(tmp_path / "ns", SCHEMA, [PartitionField.identity("country")])
    ns.write(sample_table(6))
    landed: list[str] = []
    before_commit(ns, lambda pending: landed.append(duplicate(ns.uri, kind)))
    with pytest.raises(ManifestError) as error:
        ns.write(sample_table(6, start=100))
    _assert_names(error, landed[0])
    m = lance.dataset(_manifest_uri(ns.uri))
    assert m.version == ns.version + 1  # only the duplicate's own version


# -- a manifest version a concurrent cleanup removed under a reader -----------------------------
def _package_error(run: Callable[[], Any]) -> PartitionedNamespaceError | None:
    """The package error ``run`` raised (None when it succeeded); anything else fails."""
    try:
        run()
    except PartitionedNamespaceError as e:
        assert ".rs:" not in str(e), str(e)
        return e
    except Exception as e:  # a raw Lance / Arrow error crossed the package boundary
        pytest.fail(f"raw {type(e).__module__}.{type(e).__name__} escaped: {e}")
    return None


def _churn(root: str, rounds: int = 12) -> None:
    """Writes and deletes from another handle (the manifest's upkeep compacts its fragments, so
    the files of old versions are no longer referenced), then a cleanup keeping one version."""
    other = PartitionedNamespace.open(root)
    for i in range(1, rounds + 1):
        other.write(sample_table(6, start=100 * i))
        other.delete(f"id = {100 * i}")
    other.maintenance.cleanup(older_than=dt.timedelta(0), keep_manifest_versions=1)


STALE_READS: dict[str, Callable[[PartitionedNamespace], Any]] = {
    "to_table": lambda ns: ns.to_table(),
    "filtered": lambda ns: ns.to_table("country = 'US'"),
    "plan_scan": lambda ns: ns.plan_scan("country = 'FR'"),
    "count_rows": lambda ns: ns.count_rows(),
    "scan": lambda ns: list(ns.scan()),
    "partitions": lambda ns: ns.inspect.partitions(),
    "describe_namespace": lambda ns: ns.describe_namespace(["v1", "x"]),
    "check_schemas": lambda ns: ns.inspect.check_schemas(),
    "check_read_versions": lambda ns: ns.inspect.check_read_versions(),
    "check_integrity": lambda ns: ns.inspect.check_integrity(),
}


@pytest.mark.parametrize("handle", ["unread", "ids_read"])
def test_reading_a_manifest_version_cleanup_removed_is_a_package_error(
    tmp_path: Path, tune, handle: str
) -> None:
    """A handle keeps reading the manifest version it opened; another handle writes and cleans
    up (keeping one version). Reading the stale version's rows then fails with a package error
    naming that manifest version (no raw Arrow / Lance error, no Rust source path), and a
    refresh recovers."""
    ns = PartitionedNamespace.create(tmp_path / "ns", SCHEMA, [PartitionField.identity("country")])
    ns.write(sample_table(6))
    ns.delete("id = 0")
    if handle == "ids_read":  # a large manifest: open reads only its object ids
        tune(small_manifest_rows=0)
        stale = PartitionedNamespace.open(ns.uri)
    else:  # a handle that has read no row yet
        stale = _unverified(ns.uri)
    version = stale.version
    _churn(ns.uri)
    with pytest.raises(ValueError):  # the premise: the version is gone
        lance.dataset(_manifest_uri(ns.uri), version=version).to_table()
    for name, read in STALE_READS.items():
        error = _package_error(lambda read=read: read(stale))
        assert error is not None, name
        assert f"__manifest version {version}" in str(error), (name, str(error))
        assert "refresh" in str(error), (name, str(error))
    stale.refresh()
    assert stale.version > version and stale.count_rows() == 5 + 12 * 5


def test_reading_old_manifest_versions_with_files_gone_is_a_package_error(
    tmp_path: Path,
) -> None:
    """Inspections that read every manifest version meet one whose data files are gone (a
    cleanup half done, or running concurrently): a package error, never a raw Arrow error."""
    ns = PartitionedNamespace.create(tmp_path / "ns", SCHEMA, [PartitionField.identity("country")])
    for i in range(12):  # enough commits for the manifest's upkeep to compact its fragments
        ns.write(sample_table(6, start=100 * i))
    m = lance.dataset(_manifest_uri(ns.uri))
    live = {f.path for fragment in m.get_fragments() for f in fragment.data_files()}
    data = Path(ns.uri) / "__manifest" / "data"
    dead = [p for p in data.iterdir() if p.name not in live]
    assert dead  # old versions' files, no longer referenced by the latest
    for p in dead:
        p.unlink()
    assert ns.count_rows() == 72  # the latest version is intact
    for name, run in {
        "find_orphans": lambda: ns.inspect.find_orphans(),
        "check_read_versions": lambda: ns.inspect.check_read_versions(history=None),
        "history": lambda: list(ns.inspect.history()),
        "open_old": lambda: PartitionedNamespace.open(ns.uri, version=4).to_table(),
        "cleanup": lambda: ns.maintenance.cleanup(),
        "vacuum": lambda: ns.maintenance.vacuum(),
    }.items():
        error = _package_error(run)
        assert error is not None, name
        assert "__manifest" in str(error), (name, str(error))
