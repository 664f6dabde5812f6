"""Lance / Arrow failures reach callers as this package's exceptions, naming the namespace, the
object and the file, without Rust source locations; failed writes change nothing."""

from __future__ import annotations

import glob
import os
import shutil
from pathlib import Path

import pytest
from helpers.data import SCHEMA, fingerprint, sample_table

from dagster_lance_partitioned import PartitionedNamespace, PartitionField
from dagster_lance_partitioned.core.errors import (
    ManifestError,
    PartitionedNamespaceError,
    PartitionReadError,
    StorageError,
)


def _ns(tmp_path: Path) -> PartitionedNamespace:
    ns = PartitionedNamespace.create(tmp_path / "ns", SCHEMA, [PartitionField.identity("country")])
    ns.write(sample_table(6))
    return ns


def _clean(error: BaseException) -> str:
    text = str(error)
    assert ".rs:" not in text, text
    assert "/rustc/" not in text and "runner/work" not in text, text
    return text


def _us(ns: PartitionedNamespace) -> dict:
    return next(p for p in ns.inspect.partitions() if p["values"]["country"] == "US")


def test_missing_manifest_data_file(tmp_path: Path) -> None:
    ns = _ns(tmp_path)
    for f in glob.glob(f"{ns.uri}/__manifest/data/*"):
        os.remove(f)
    with pytest.raises(StorageError) as info:
        PartitionedNamespace.open(ns.uri).to_table()
    text = _clean(info.value)
    assert ns.uri in text and "__manifest/data/" in text
    assert info.value.path is not None and "__manifest/data/" in info.value.path


def test_corrupt_manifest_data_file(tmp_path: Path) -> None:
    ns = _ns(tmp_path)
    for f in glob.glob(f"{ns.uri}/__manifest/data/*"):
        Path(f).write_bytes(b"garbage" * 10)
    with pytest.raises(StorageError) as info:
        PartitionedNamespace.open(ns.uri).inspect.partitions()
    assert ns.uri in _clean(info.value) and "__manifest" in str(info.value)


def test_truncated_latest_manifest_version_is_not_called_missing(tmp_path: Path) -> None:
    ns = _ns(tmp_path)
    newest = sorted(glob.glob(f"{ns.uri}/__manifest/_versions/*.manifest"))[0]  # V2: counts down
    with open(newest, "r+b") as fh:
        fh.truncate(10)
    with pytest.raises(StorageError) as info:
        PartitionedNamespace.open(ns.uri)
    text = _clean(info.value)
    assert "not a partitioned namespace" not in text and "no partitioned namespace" not in text
    assert os.path.basename(newest) in text


def test_missing_partition_data_file(tmp_path: Path) -> None:
    ns = _ns(tmp_path)
    us = _us(ns)
    for f in glob.glob(os.path.join(ns.uri, us["location"], "data", "*")):
        os.remove(f)
    with pytest.raises(PartitionReadError) as info:
        ns.to_table()
    text = _clean(info.value)
    assert us["object_id"] in text and info.value.object_id == us["object_id"]
    assert info.value.path and us["location"] in info.value.path
    assert ns.count_rows("country = 'FR'") == 2  # other partitions still read


def test_write_into_a_deleted_partition_table_changes_nothing(tmp_path: Path) -> None:
    ns = _ns(tmp_path)
    shutil.rmtree(os.path.join(ns.uri, _us(ns)["location"]))
    before = fingerprint(ns.uri)
    with pytest.raises(PartitionedNamespaceError) as info:
        ns.write(sample_table(3), mode="append")
    assert ns.uri in _clean(info.value)
    after = fingerprint(ns.uri)
    assert after["manifest_version"] == before["manifest_version"]
    assert after["manifest_rows"] == before["manifest_rows"]


@pytest.mark.parametrize("version", [-1, 0, True, "3"])
def test_bad_versions(tmp_path: Path, version) -> None:
    ns = _ns(tmp_path)
    with pytest.raises(ManifestError, match="positive integer"):
        PartitionedNamespace.open(ns.uri, version=version)


def test_a_version_that_does_not_exist(tmp_path: Path) -> None:
    ns = _ns(tmp_path)
    with pytest.raises(ManifestError, match="no manifest version 99") as info:
        PartitionedNamespace.open(ns.uri, version=99)
    _clean(info.value)
