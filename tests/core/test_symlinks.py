"""Symbolic links under a local root: a partition table whose directory is (or passes through)
a link is refused by reads, writes and maintenance with :class:`PathEscapeError` naming the
partition and its location, so nothing outside the root is read, written or deleted through
it; deleting (vacuum's orphans, listings) never follows a link. A root that is itself reached
through a link works as any other root."""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import shutil
import time
from pathlib import Path

import lance
import pytest
from helpers.data import (
    SCHEMA,
    file_hashes,
    fingerprint,
    link_data_file,
    sample_table,
    sorted_rows,
)

from dagster_lance_partitioned import PartitionedNamespace, PartitionField
from dagster_lance_partitioned.core import storage
from dagster_lance_partitioned.core.errors import PathEscapeError

pytestmark = pytest.mark.skipif(os.name == "nt", reason="symbolic links need privileges")

DAY = 24 * 3600


tree = file_hashes


def age(path: Path, seconds: float = 30 * DAY) -> None:
    """Make every file and directory under ``path`` ``seconds`` old (links not followed)."""
    when = time.time() - seconds
    for dirpath, dirs, names in os.walk(path):
        for name in [*dirs, *names]:
            os.utime(os.path.join(dirpath, name), (when, when), follow_symlinks=False)


@pytest.fixture
def ns(tmp_path: Path) -> PartitionedNamespace:
    """US, FR and DE partitions, each with three table versions (old ones for cleanup)."""
    ns = PartitionedNamespace.create(
        tmp_path / "lake" / "ns", SCHEMA, [PartitionField.identity("country")]
    )
    for i in range(3):
        ns.write(sample_table(6, start=100 * i))
    return ns


def us(ns: PartitionedNamespace) -> dict:
    return next(p for p in ns.inspect.partitions() if p["values"]["country"] == "US")


def move_out(ns: PartitionedNamespace, target: Path) -> tuple[str, str]:
    """Move the US partition table to ``target`` (outside or inside the root) and leave a link
    to it where it was, everything old, with an unreferenced stray data file; its object id
    and location."""
    p = us(ns)
    here = Path(ns.uri) / p["location"]
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(here), str(target))
    (target / "data" / "stray-uncommitted.lance").write_bytes(b"not referenced")
    age(target)
    here.symlink_to(target, target_is_directory=True)
    age(Path(ns.uri))
    return p["object_id"], p["location"]


def assert_refused(info: pytest.ExceptionInfo, oid: str | None, location: str) -> None:
    assert info.value.location == location and location in str(info.value)
    if oid is not None:
        assert info.value.object_id == oid and oid in str(info.value)


# -- a partition table directory that is a link ----------------------------------------------
def test_reads_refuse_a_table_linked_outside(ns, tmp_path: Path) -> None:
    oid, location = move_out(ns, tmp_path / "outside" / "us")
    with pytest.raises(PathEscapeError) as info:
        ns.to_table()
    assert_refused(info, oid, location)
    assert "outside" in str(info.value)
    with pytest.raises(PathEscapeError):
        ns.to_table(filter="country = 'US'")
    with pytest.raises(PathEscapeError):
        PartitionedNamespace.open(ns.uri, version=ns.version - 1).to_table()  # time travel
    assert ns.count_rows("country = 'FR'") == 6  # pruned partitions still read


@pytest.mark.parametrize(
    "change",
    ["append", "overwrite_partitions", "overwrite", "merge_insert", "update", "delete"],
)
def test_writes_refuse_a_table_linked_outside(ns, tmp_path: Path, change: str) -> None:
    outside = tmp_path / "outside" / "us"
    oid, location = move_out(ns, outside)
    before, outside_before = fingerprint(ns.uri), tree(outside)
    with pytest.raises(PathEscapeError) as info:
        if change in ("append", "overwrite_partitions", "overwrite"):
            ns.write(sample_table(6, start=900), mode=change)
        elif change == "merge_insert":
            ns.merge_insert(sample_table(6, start=200), on="id")
        elif change == "update":
            ns.update("country = 'US'", {"value": "value + 1"})
        else:
            ns.delete("country = 'US'")
    assert_refused(info, oid, location)
    assert tree(outside) == outside_before  # nothing written (or deleted) outside
    after = fingerprint(ns.uri)
    assert after["manifest_version"] == before["manifest_version"]
    assert after["manifest_rows"] == before["manifest_rows"]


def test_compact_refuses_a_table_linked_outside(ns, tmp_path: Path) -> None:
    outside = tmp_path / "outside" / "us"
    oid, location = move_out(ns, outside)
    before, outside_before = fingerprint(ns.uri), tree(outside)
    with pytest.raises(PathEscapeError) as info:
        ns.maintenance.compact()
    assert_refused(info, oid, location)
    assert tree(outside) == outside_before
    assert fingerprint(ns.uri) == before


@pytest.mark.parametrize("how", ["cleanup", "vacuum"])
def test_cleanup_and_vacuum_refuse_a_table_linked_outside(ns, tmp_path: Path, how: str) -> None:
    outside = tmp_path / "outside" / "us"
    _, location = move_out(ns, outside)
    # an old orphan: refused before anything is deleted, it stays too
    orphan = Path(ns.uri) / "deadbeef_v1$orphan$dataset"
    lance.write_dataset(sample_table(2), str(orphan))
    age(Path(ns.uri))
    before, outside_before = fingerprint(ns.uri), tree(outside)
    assert any(p.startswith("_versions/") for p in outside_before)
    with pytest.raises(PathEscapeError) as info:
        if how == "cleanup":
            ns.maintenance.cleanup(older_than=dt.timedelta(0), keep_manifest_versions=1)
        else:
            ns.maintenance.vacuum(grace=dt.timedelta(0))
    assert_refused(info, None, location)
    assert tree(outside) == outside_before
    assert fingerprint(ns.uri) == before  # nothing at all was deleted


def test_the_health_check_reports_a_linked_table(ns, tmp_path: Path) -> None:
    from dagster_lance_partitioned.core.ops.health import check_read_versions, find_orphans

    oid, _ = move_out(ns, tmp_path / "outside" / "us")
    issues, _ = check_read_versions(ns)
    assert [(i.object_id, i.problem) for i in issues] == [(oid, "location through a symbolic link")]
    assert find_orphans(ns) == []  # a registered location, link or not, is no orphan


def test_a_table_linked_inside_the_root_is_refused_too(ns, tmp_path: Path) -> None:
    """Decision: a table directory must be a real directory below the root. A link to another
    place inside the root is refused as well: it could alias another partition's table, whose
    versions cleanup would then judge by the wrong manifest rows."""
    inside = Path(ns.uri) / "moved" / "us"
    oid, location = move_out(ns, inside)
    inside_before = tree(inside)
    with pytest.raises(PathEscapeError) as info:
        ns.to_table()
    assert_refused(info, oid, location)
    assert "link" in str(info.value)
    with pytest.raises(PathEscapeError):
        ns.write(sample_table(3))
    with pytest.raises(PathEscapeError):
        ns.maintenance.cleanup(older_than=dt.timedelta(0), keep_manifest_versions=1)
    with pytest.raises(PathEscapeError):
        ns.maintenance.vacuum(grace=dt.timedelta(0))
    assert tree(inside) == inside_before


# -- links inside a registered table ---------------------------------------------------------
@pytest.mark.parametrize("subdir", ["data", "_versions", "_deletions", "_indices"])
def test_a_linked_table_subdirectory_is_refused(ns, tmp_path: Path, subdir: str) -> None:
    p = us(ns)
    table = Path(ns.uri) / p["location"]
    outside = tmp_path / "outside" / subdir
    outside.parent.mkdir(parents=True)
    if (table / subdir).exists():
        shutil.move(str(table / subdir), str(outside))
    else:
        outside.mkdir()
    # files vacuum / cleanup would take for unreferenced ones, were they inside the table
    (outside / "stray.lance").write_bytes(b"outside")
    (outside / "0a0a0a0a-0000-0000-0000-000000000000").mkdir()
    (outside / "0a0a0a0a-0000-0000-0000-000000000000" / "index.idx").write_bytes(b"outside")
    age(outside)
    (table / subdir).symlink_to(outside, target_is_directory=True)
    outside_before = tree(outside)
    for run in (
        lambda: ns.maintenance.vacuum(grace=dt.timedelta(0)),
        lambda: ns.maintenance.cleanup(older_than=dt.timedelta(0), keep_manifest_versions=1),
        ns.maintenance.compact,
        ns.to_table,
        lambda: ns.write(sample_table(3)),
    ):
        with pytest.raises(PathEscapeError) as info:
            run()
        assert p["location"] in str(info.value)
    assert tree(outside) == outside_before


def test_links_deeper_in_a_table_stop_maintenance(ns, tmp_path: Path) -> None:
    """A link further down (an index directory, a data file) is met by the listing that
    maintenance walks: cleanup and vacuum refuse the table and delete nothing through it."""
    p = us(ns)
    table = Path(ns.uri) / p["location"]
    outside = tmp_path / "outside"
    (outside / "index").mkdir(parents=True)
    (outside / "index" / "part.idx").write_bytes(b"outside")
    (outside / "file.lance").write_bytes(b"outside")
    age(outside)
    (table / "_indices").mkdir()
    (table / "_indices" / "0a0a0a0a-0000-0000-0000-000000000000").symlink_to(outside / "index")
    (table / "data" / "linked.lance").symlink_to(outside / "file.lance")
    outside_before = tree(outside)
    for run in (
        lambda: ns.maintenance.vacuum(grace=dt.timedelta(0)),
        lambda: ns.maintenance.cleanup(older_than=dt.timedelta(0), keep_manifest_versions=1),
    ):
        with pytest.raises(PathEscapeError) as info:
            run()
        assert p["location"] in str(info.value) and "link" in str(info.value)
    assert tree(outside) == outside_before


# -- links at the root -----------------------------------------------------------------------
def test_vacuum_never_follows_a_stray_link_at_the_root(ns, tmp_path: Path) -> None:
    """A link directly under the root named like a partition table, to a Lance table outside,
    is no orphan to delete: vacuum leaves the link and its target alone. An orphan directory
    holding a link is removed without following the link."""
    outside = tmp_path / "outside"
    lance.write_dataset(sample_table(3), str(outside / "table"))
    (outside / "dir").mkdir()
    (outside / "dir" / "keep.txt").write_bytes(b"outside")
    age(outside)
    link = Path(ns.uri) / "deadbeef_v1$stray$dataset"
    link.symlink_to(outside / "table", target_is_directory=True)
    orphan = Path(ns.uri) / "cafebabe_v1$orphan$dataset"
    lance.write_dataset(sample_table(2), str(orphan))
    (orphan / "data" / "linked").symlink_to(outside / "dir", target_is_directory=True)
    (orphan / "linked-file").symlink_to(outside / "dir" / "keep.txt")
    age(Path(ns.uri))
    outside_before = tree(outside)
    rows = sorted_rows(ns.to_table())

    result = ns.maintenance.vacuum(grace=dt.timedelta(0))
    assert result.orphans_removed == (orphan.name,)
    assert not os.path.lexists(orphan)
    assert link.is_symlink()  # left alone
    assert tree(outside) == outside_before
    assert sorted_rows(ns.to_table()) == rows


def test_a_root_reached_through_a_link_works(ns, tmp_path: Path) -> None:
    """Links above the root are not the namespace's business: a root opened through a link
    reads, writes and is maintained as usual."""
    alias = tmp_path / "alias"
    alias.symlink_to(Path(ns.uri).parent, target_is_directory=True)
    via = PartitionedNamespace.open(alias / "ns")
    rows = sorted_rows(via.to_table())
    assert len(rows) == 18
    via.write(sample_table(3, start=500))
    via.maintenance.compact()
    via.maintenance.cleanup(older_than=dt.timedelta(0), keep_manifest_versions=1)
    via.maintenance.vacuum(grace=dt.timedelta(0))
    assert len(via.to_table()) == 21
    via.merge_insert(sample_table(3, start=500), on="id")
    assert len(PartitionedNamespace.open(ns.uri).to_table()) == 21


# -- storage helpers -------------------------------------------------------------------------
def test_listing_and_deleting_never_follow_links(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    (outside / "sub").mkdir(parents=True)
    (outside / "sub" / "f").write_bytes(b"x")
    (outside / "g").write_bytes(b"y")
    base = tmp_path / "base"
    (base / "real").mkdir(parents=True)
    (base / "real" / "h").write_bytes(b"z")
    (base / "dirlink").symlink_to(outside, target_is_directory=True)
    (base / "real" / "filelink").symlink_to(outside / "g")
    assert [f.path for f in storage.list_files(str(base))] == ["real/h"]
    files, links = storage.list_tree(str(base))
    assert [f.path for f in files] == ["real/h"]
    assert sorted(links) == ["dirlink", "real/filelink"]
    with pytest.raises(PathEscapeError):
        storage.delete_files(str(base), ["dirlink/g"])
    assert storage.delete_files(str(base), ["real/filelink"]) == 1  # the link, not its target
    storage.delete_tree(str(base / "dirlink"))  # removes the link only
    assert not os.path.lexists(base / "dirlink")
    storage.delete_tree(str(base))
    assert not base.exists()
    assert tree(outside) == {
        "g": hashlib.sha1(b"y").hexdigest(),
        "sub/f": hashlib.sha1(b"x").hexdigest(),
    }


def test_table_uri_checks_links_only_on_local_roots(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (root / "t").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    with pytest.raises(PathEscapeError) as info:
        storage.table_uri(str(root), "t", "v1$t$dataset")
    assert info.value.object_id == "v1$t$dataset" and info.value.location == "t"
    with pytest.raises(PathEscapeError):
        storage.table_uri(root.as_uri(), "t", "v1$t$dataset")
    assert storage.table_uri(str(root), "new", "x") == str(root / "new")  # not there yet
    assert storage.table_uri("s3://bucket/root", "t", "x") == "s3://bucket/root/t"


# -- links at any depth, met at the moment of use ------------------------------------------------
def link_a_data_file(ns: PartitionedNamespace, outside: Path) -> tuple[str, str, Path]:
    """Replace one data file of the US table's pinned version by a link to a copy of it
    outside the root (the rows are the same: only the link is wrong). Its object id,
    location and the link."""
    p = us(ns)
    return p["object_id"], p["location"], link_data_file(ns.uri, p, outside)


def test_a_data_file_linked_outside_is_never_read(ns, tmp_path: Path) -> None:
    """Reads, counts, compaction, row changes, index builds and the integrity check meet the
    link when they are about to read the table, warm handles included, and read nothing."""
    rows = sorted_rows(ns.to_table())  # the table is opened (and kept) before the link
    oid, location, link = link_a_data_file(ns, tmp_path / "outside")
    before = fingerprint(ns.uri)
    for name, run in {
        "to_table": ns.to_table,
        "filtered": lambda: ns.to_table("value > 0"),
        "count_rows": lambda: ns.count_rows("value > 0"),
        "scan": lambda: ns.scan().read_all(),
        "compact": ns.maintenance.compact,
        "update": lambda: ns.update("country = 'US'", {"value": "value + 1"}),
        "merge": lambda: ns.merge_insert(sample_table(3, start=0), on="id"),
        "create_index": lambda: ns.create_index("value", "BTREE"),
        "integrity": lambda: PartitionedNamespace.open(ns.uri).inspect.check_read_versions(),
    }.items():
        if name == "integrity":
            issues, _ = run()
            assert [(i.object_id, i.problem) for i in issues] == [
                (oid, "location through a symbolic link")
            ]
            continue
        with pytest.raises(PathEscapeError) as info:
            run()
        assert_refused(info, oid, location)
        assert str(link) in str(info.value) and "outside the namespace root" in str(info.value)
        after = fingerprint(ns.uri)
        assert after["manifest_version"] == before["manifest_version"], name
    link.unlink()  # the real file back: everything reads as before
    shutil.copy(tmp_path / "outside" / link.name, link)
    assert sorted_rows(ns.to_table()) == rows


def test_a_linked_deletion_file_or_index_directory_is_never_read(ns, tmp_path: Path) -> None:
    ns.create_index("id", "BTREE")
    ns.delete("id = 0")
    p = us(ns)
    table = Path(ns.uri) / p["location"]
    ds = lance.dataset(str(table), version=p["read_version"])
    deletions = [
        f.metadata.deletion_file.path(f.metadata.id)
        for f in ds.get_fragments()
        if f.metadata.deletion_file is not None
    ]
    assert deletions
    index = table / "_indices" / str(ds.describe_indices()[0].segments[0].uuid)
    for target in (table / deletions[0], index):
        moved = tmp_path / "outside" / target.name
        moved.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(target), str(moved))
        target.symlink_to(moved, target_is_directory=moved.is_dir())
        with pytest.raises(PathEscapeError) as info:
            ns.to_table("id = 3")
        assert str(target) in str(info.value)
        target.unlink()
        shutil.move(str(moved), str(target))
    assert ns.count_rows("id = 3") == 1


def test_a_table_swapped_for_a_link_during_a_write_is_never_registered(
    ns, tmp_path: Path, before_commit
) -> None:
    """The table directory is swapped for a link after the write checked it, while it writes
    (here: once its tables are written, before its manifest commit). The commit meets the
    link and refuses: nothing of the write is visible."""
    p = us(ns)
    before = fingerprint(ns.uri)

    def swap(_pending: object) -> None:
        move_out(ns, tmp_path / "outside" / "us")

    before_commit(ns, swap)
    with pytest.raises(PathEscapeError) as info:
        ns.write(sample_table(6, start=900))
    assert p["location"] in str(info.value) and "link" in str(info.value)
    after = fingerprint(ns.uri)
    assert after["manifest_version"] == before["manifest_version"]
    assert after["manifest_rows"] == before["manifest_rows"]


def test_deleting_never_follows_a_directory_swapped_in_during_the_deletion(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A directory of the files being deleted is swapped for a link to a place outside, in
    the middle of a deletion: the remaining files are not deleted through it."""
    outside = tmp_path / "outside"
    (outside / "data").mkdir(parents=True)
    base = tmp_path / "table"
    (base / "data").mkdir(parents=True)
    names = [f"f{i}.lance" for i in range(4)]
    for name in names:
        (base / "data" / name).write_bytes(b"ours")
        (outside / "data" / name).write_bytes(b"theirs")
    outside_before = tree(outside)
    real_unlink = os.unlink
    calls = []

    def unlink_then_swap(path, *, dir_fd=None):
        real_unlink(path, dir_fd=dir_fd)
        calls.append(path)
        if len(calls) == 1:  # after the first file: data/ becomes a link to outside/data
            shutil.move(str(base / "data"), str(tmp_path / "moved"))
            (base / "data").symlink_to(outside / "data", target_is_directory=True)

    monkeypatch.setattr(os, "unlink", unlink_then_swap)
    removed = storage.delete_files(str(base), [f"data/{n}" for n in names])
    monkeypatch.undo()
    assert tree(outside) == outside_before  # nothing outside deleted
    assert removed == 4  # the directory opened first kept receiving the deletions
    assert sorted(os.listdir(tmp_path / "moved")) == []
