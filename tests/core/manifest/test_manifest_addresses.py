"""The row addresses a manifest snapshot keeps with the rows it read whole (for the deletion
vectors of row-level commits) are the ones Lance's own scan returns, across fragments and
deletion files, also when a later snapshot takes the rows from the process's cache."""

from pathlib import Path

import lance
import pyarrow as pa
import pyarrow.compute as pc
from helpers.data import SCHEMA, sample_table

from dagster_lance_partitioned import PartitionedNamespace, PartitionField
from dagster_lance_partitioned.core.manifest import snapshot as manifest
from dagster_lance_partitioned.core.manifest.snapshot import ROW_ADDRESS, ManifestSnapshot


def _scanned(snap: ManifestSnapshot, ids: list[str]) -> dict[str, int]:
    """object id -> row address, by a Lance scan of the snapshot's version."""
    rows = lance.dataset(snap.dataset.uri, version=snap.version).to_table(
        columns=["object_id"],
        filter=pc.field("object_id").isin(pa.array(ids, pa.utf8())),
        with_row_address=True,
    )
    return dict(zip(rows["object_id"].to_pylist(), rows[ROW_ADDRESS].to_pylist(), strict=True))


def _kept(snap: ManifestSnapshot, ids: list[str]) -> dict[str, int]:
    rows = snap.rows_by_id(ids, with_address=True)
    return dict(zip(rows["object_id"].to_pylist(), rows[ROW_ADDRESS].to_pylist(), strict=True))


def test_kept_row_addresses_match_lances_scan(tmp_path: Path) -> None:
    ns = PartitionedNamespace.create(tmp_path / "ns", SCHEMA, [PartitionField.identity("country")])
    ns.write(sample_table(12))
    for start in (100, 200, 300):  # row-level commits: deletion vectors, more fragments
        ns.write(sample_table(3, countries=("US",), start=start))
    ns.write(sample_table(3, countries=("FR",), start=400), mode="overwrite_partitions")
    manifest.clear_version_cache()

    ds = lance.dataset(str(tmp_path / "ns" / manifest.MANIFEST_DIR))
    assert len(ds.get_fragments()) > 1
    assert any(f.metadata.deletion_file is not None for f in ds.get_fragments())

    snap = ManifestSnapshot(ds, list(ns.state.snapshot.specs.values())).verify()
    assert snap.loaded  # small: read whole, with addresses
    ids = sorted(set(snap.table["object_id"].to_pylist()))
    expected = _scanned(snap, ids)
    assert len(expected) == len(ids) > 3
    assert _kept(snap, ids) == expected
    some = ids[::2]
    assert _kept(snap, some) == {i: expected[i] for i in some}
    rows = snap.rows_by_id(some, with_address=True)
    assert rows.column_names == [*snap.table.column_names, ROW_ADDRESS]

    # a later snapshot of the same version takes rows and addresses from the process's cache
    again = ManifestSnapshot(lance.dataset(ds.uri), list(snap.specs.values())).verify(latest=True)
    assert again.loaded
    assert _kept(again, ids) == expected
