"""Namespaces nested below a namespace (Dagster asset keys ``["sales"]`` and
``["sales", "eu", "data"]`` put one at ``<root>/sales`` and one at ``<root>/sales/eu/data``):
maintenance of the outer one never lists, reads or deletes anything of a nested one, at any
depth and whatever the directory names on the way, and deletes only table directories named
as this package names them."""

from __future__ import annotations

import datetime as dt
import os
import time
from pathlib import Path

import pytest
from helpers.data import SCHEMA, file_hashes, sample_table, sorted_rows

from dagster_lance_partitioned import PartitionedNamespace, PartitionField
from dagster_lance_partitioned.core.manifest.layout import is_table_dir_name

DAY = 24 * 3600

# where the nested namespace lives, relative to the outer root
NESTED = [
    "eu/data",  # asset keys ["sales"], ["sales", "eu", "data"]
    "x/_versions",  # a directory that holds "_versions/" like a Lance table
    "0123abcd_x/c",  # a directory named like a partition table
    "eu/data/deeper/still",  # several levels down
    "0123abcd_v1$aaaaaaaaaaaaaaaa$dataset/n",  # named exactly as this package names tables
]


def age(path: Path, seconds: float = 30 * DAY) -> None:
    """Make every file and directory under ``path`` ``seconds`` old."""
    when = time.time() - seconds
    for dirpath, dirs, names in os.walk(path):
        for name in [*dirs, *names]:
            os.utime(os.path.join(dirpath, name), (when, when), follow_symlinks=False)


def build(tmp_path: Path, nested: str) -> tuple[PartitionedNamespace, PartitionedNamespace]:
    fields = [PartitionField.identity("country")]
    outer = PartitionedNamespace.create(tmp_path / "sales", SCHEMA, fields)
    for i in range(3):
        outer.write(sample_table(6, start=100 * i))
    inner = PartitionedNamespace.create(tmp_path / "sales" / nested, SCHEMA, fields)
    for i in range(3):
        inner.write(sample_table(9, start=1000 + 100 * i))
    age(tmp_path)
    return outer, inner


@pytest.mark.parametrize("nested", NESTED)
def test_maintenance_of_the_outer_namespace_leaves_a_nested_one_alone(
    tmp_path: Path, nested: str
) -> None:
    outer, inner = build(tmp_path, nested)
    inner_root = Path(inner.uri)
    inner_files = file_hashes(inner_root)
    inner_rows = sorted_rows(inner.to_table())
    outer_rows = sorted_rows(outer.to_table())

    assert outer.inspect.find_orphans() == []
    vacuumed = outer.maintenance.vacuum(grace=dt.timedelta(0))
    assert vacuumed.orphans_removed == () and vacuumed.orphans_kept == ()
    outer.maintenance.cleanup(older_than=dt.timedelta(0), keep_manifest_versions=1)
    outer.maintenance.compact()
    outer.maintenance.vacuum(grace=dt.timedelta(0))

    assert file_hashes(inner_root) == inner_files
    assert sorted_rows(PartitionedNamespace.open(inner_root).to_table()) == inner_rows
    assert sorted_rows(PartitionedNamespace.open(outer.uri).to_table()) == outer_rows


@pytest.mark.parametrize("nested", ["eu/data", "0123abcd_x/c"])
def test_a_nested_namespace_inside_an_orphan_directory_keeps_it(
    tmp_path: Path, nested: str
) -> None:
    """An orphan of the outer namespace (a table directory named as this package names them,
    no manifest row) that a namespace was later created in is not deleted: what lies below a
    ``__manifest`` is not the outer namespace's to delete."""
    outer, _ = build(tmp_path, nested)
    orphan = "feedbeef_v1$bbbbbbbbbbbbbbbb$dataset"
    inner = PartitionedNamespace.create(
        tmp_path / "sales" / orphan / "sub", SCHEMA, [PartitionField.identity("country")]
    )
    inner.write(sample_table(4))
    age(tmp_path)
    before = file_hashes(tmp_path / "sales" / orphan)
    assert outer.inspect.find_orphans() == []
    outer.maintenance.vacuum(grace=dt.timedelta(0))
    assert file_hashes(tmp_path / "sales" / orphan) == before


def test_only_directories_named_by_this_package_are_orphans(tmp_path: Path) -> None:
    """A directory holding Lance files (``_versions/``, ``data/``) that no manifest row names is
    an orphan only when its name is one this package gives table directories."""
    outer, _ = build(tmp_path, "eu/data")
    import lance

    lance.write_dataset(sample_table(2), str(tmp_path / "sales" / "someone_elses_table"))
    ours = "0a0b0c0d_v1$cccccccccccccccc$dataset"
    lance.write_dataset(sample_table(2), str(tmp_path / "sales" / ours))
    age(tmp_path)
    assert [o.location for o in outer.inspect.find_orphans()] == [ours]
    result = outer.maintenance.vacuum(grace=dt.timedelta(0))
    assert result.orphans_removed == (ours,)
    assert (tmp_path / "sales" / "someone_elses_table" / "_versions").is_dir()


@pytest.mark.parametrize(
    ("name", "ours"),
    [
        ("0123abcd_v1$aaaaaaaaaaaaaaaa$dataset", True),
        ("0123abcd_v12$aaaaaaaaaaaaaaaa$bbbbbbbbbbbbbbbb$dataset", True),
        ("0123abcd_v1$dataset", True),  # a spec without partition fields
        ("0123abcd_x", False),
        ("0123abcd_v1$aaaa", False),
        ("0123ABCD_v1$aaaaaaaaaaaaaaaa$dataset", False),
        ("eu", False),
        ("_versions", False),
        ("__manifest", False),
    ],
)
def test_table_directory_names_of_this_package(name: str, ours: bool) -> None:
    assert is_table_dir_name(name) is ours
