"""Maintenance (core/ops/maintenance.py): compaction keeps rows and time travel and commits once;
cleanup removes old versions but keeps every retained manifest version readable; vacuum removes
only orphans and unreferenced files past the grace period; drop_partitions deregisters exactly
the fully matching partitions in one commit or changes nothing. Real pylance tables."""

from __future__ import annotations

import datetime as dt
import os
import time
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest
from helpers.data import SCHEMA, fail_write, fingerprint, sample_table, sorted_rows
from lance.fragment import write_fragments

from dagster_lance_partitioned import PartitionedNamespace, PartitionField
from dagster_lance_partitioned.core.errors import (
    PartialPartitionError,
    PartitionedNamespaceError,
    WriteError,
)
from dagster_lance_partitioned.core.manifest.state import load_snapshot
from dagster_lance_partitioned.core.manifest.store import ManifestEdit
from dagster_lance_partitioned.core.ops import health, maintenance
from dagster_lance_partitioned.core.storage import DETACHED_BIT

FIELDS = [PartitionField.identity("country"), PartitionField.year("event_date")]
DAY = 24 * 3600


# -- helpers ----------------------------------------------------------------------------------
def make_ns(root: Path, appends: int = 3) -> PartitionedNamespace:
    """country x year(event_date): six partitions, each with ``appends + 1`` fragments."""
    ns = PartitionedNamespace.create(root, SCHEMA, FIELDS)
    ns.write(sample_table(12))
    for i in range(appends):
        ns.write(sample_table(12, start=100 * (i + 1)))
    return ns


def key(p: dict[str, Any]) -> tuple[str, int]:
    return p["values"]["country"], p["values"]["event_date_year"]


def by_key(ns: PartitionedNamespace) -> dict[tuple[str, int], dict[str, Any]]:
    return {key(p): p for p in ns.inspect.partitions()}


def pinned(ns: PartitionedNamespace, p: dict[str, Any]) -> lance.LanceDataset:
    return lance.dataset(os.path.join(ns.uri, p["location"]), version=p["read_version"])


def rows_at(uri: str, version: int | None = None) -> list[dict]:
    return sorted_rows(PartitionedNamespace.open(uri, version=version).to_table())


def manifest_versions(uri: str) -> list[int]:
    return [v["version"] for v in lance.dataset(os.path.join(uri, "__manifest")).versions()]


def first_write(uri: str) -> PartitionedNamespace:
    """The namespace as the first write left it."""
    for v in manifest_versions(uri)[1:]:  # version 1 is the bare table, before its metadata
        old = PartitionedNamespace.open(uri, version=v)
        if old.inspect.partitions():
            return old
    raise AssertionError("no write")


def table_version_files(uri: str) -> int:
    """Version manifests of every partition table under ``uri``."""
    return sum(
        1
        for d in os.listdir(uri)
        if d != "__manifest" and os.path.isdir(os.path.join(uri, d, "_versions"))
        for f in os.listdir(os.path.join(uri, d, "_versions"))
        if f.endswith(".manifest")
    )


def age(path: str, seconds: float) -> None:
    """Make every file under ``path`` (or the file) ``seconds`` old."""
    when = time.time() - seconds
    files = (
        [os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs]
        if os.path.isdir(path)
        else [path]
    )
    for f in files:
        os.utime(f, (when, when))


@pytest.fixture
def ns(tmp_path: Path) -> PartitionedNamespace:
    return make_ns(tmp_path / "ns")


# -- compact ----------------------------------------------------------------------------------
def test_compact_reduces_fragments_keeps_rows_and_time_travel(ns):
    before_rows = rows_at(ns.uri)
    before_version = ns.version
    before = by_key(ns)
    assert {len(pinned(ns, p).get_fragments()) for p in before.values()} == {4}

    result = ns.maintenance.compact()
    assert result.manifest_version == before_version + 1 == ns.version  # one commit
    assert result.skipped == ()
    assert sorted(r[0] for r in result.partitions) == sorted(
        p["object_id"] for p in before.values()
    )
    assert {(b, a) for _, b, a in result.partitions} == {(4, 1)}
    after = by_key(ns)
    for k, p in after.items():
        ds = pinned(ns, p)
        assert len(ds.get_fragments()) == 1
        assert p["read_version"] >= DETACHED_BIT and p["read_version"] != before[k]["read_version"]
        assert p["location"] == before[k]["location"]
        assert ds.schema == pinned(ns, before[k]).schema  # dlp:field_ids kept
    assert rows_at(ns.uri) == before_rows
    assert rows_at(ns.uri, before_version) == before_rows  # time travel still reads
    assert ns.state.store.commit_properties(ns.version)["operation"] == "compact"
    assert health.check_read_versions(ns, history=None) == ([], [])

    again = ns.maintenance.compact()  # nothing left to gain: no commit
    assert again.partitions == () and again.manifest_version == ns.version == before_version + 1


def test_compact_filter_and_target(ns):
    us = {k: p for k, p in by_key(ns).items() if k[0] == "US"}
    others = {k: p for k, p in by_key(ns).items() if k[0] != "US"}
    result = ns.maintenance.compact(filter="country = 'US'", target_rows_per_fragment=5)
    assert sorted(r[0] for r in result.partitions) == sorted(p["object_id"] for p in us.values())
    after = by_key(ns)
    for k, p in us.items():
        rows = pinned(ns, p).count_rows()
        assert len(pinned(ns, after[k]).get_fragments()) == -(-rows // 5)
    for k, p in others.items():
        assert after[k]["read_version"] == p["read_version"]


def test_compact_skips_partitions_a_concurrent_commit_moved(ns, monkeypatch):
    real = maintenance._compact_table
    concurrent = sample_table(2, countries=("US",), start=900)  # both in (US, 2025)
    raced: list[int] = []

    def racing(ns_, task, target):
        out = real(ns_, task, target)
        if task.partition_values == {"country": "US", "event_date_year": 2025} and not raced:
            raced.append(PartitionedNamespace.open(ns.uri).write(concurrent).manifest_version)
        return out

    monkeypatch.setattr(maintenance, "_compact_table", racing)
    expected = sorted_rows(pa.concat_tables([ns.to_table(), concurrent]))
    us = by_key(ns)[("US", 2025)]
    result = ns.maintenance.compact()
    assert raced
    assert result.skipped == (us["object_id"],)
    assert us["object_id"] not in {r[0] for r in result.partitions}
    assert len(result.partitions) == 5
    assert result.manifest_version == raced[0] + 1
    assert rows_at(ns.uri) == expected  # the concurrent rows are kept
    assert (
        by_key(ns)[("US", 2025)]["read_version"]
        == by_key(PartitionedNamespace.open(ns.uri, version=raced[0]))[("US", 2025)]["read_version"]
    )


@pytest.mark.parametrize("mode", ["overwrite_partitions", "append"])
def test_writes_based_before_a_compaction_commit_after_it(ns, mode, before_commit):
    """A write planned before a compaction and committing after it: a replacement does not
    conflict (the compaction replaced nothing), an append rebases onto the compacted version."""
    data = sample_table(2, countries=("US",), start=900)  # (US, 2025) only
    us = by_key(ns)[("US", 2025)]
    others = {k: p for k, p in by_key(ns).items() if k != ("US", 2025)}
    rows = rows_at(ns.uri)
    compacted: list = []
    writer = PartitionedNamespace.open(ns.uri)
    before_commit(
        writer,
        lambda pending: compacted.append(PartitionedNamespace.open(ns.uri).maintenance.compact()),
    )
    result = writer.write(data, mode=mode)
    assert compacted and len(compacted[0].partitions) == 6
    assert result.manifest_version == compacted[0].manifest_version + 1
    new = data.to_pylist()
    kept = [r for r in rows if (r["country"], r["event_date"].year) != ("US", 2025)]
    if mode == "overwrite_partitions":
        expected = sorted_rows(pa.Table.from_pylist(kept + new, schema=SCHEMA))
    else:
        expected = sorted_rows(pa.Table.from_pylist(rows + new, schema=SCHEMA))
        after = by_key(PartitionedNamespace.open(ns.uri))[("US", 2025)]
        assert len(pinned(ns, after).get_fragments()) == 2  # compacted one + the appended one
    assert rows_at(ns.uri) == expected
    after = by_key(PartitionedNamespace.open(ns.uri))
    for k, p in others.items():
        assert after[k]["read_version"] != p["read_version"]  # compacted
    assert after[("US", 2025)]["location"] == us["location"]


# -- cleanup ----------------------------------------------------------------------------------
def test_cleanup_keeps_every_retained_version_readable(ns):
    ns.write(sample_table(6, start=600), mode="overwrite_partitions")
    ns.maintenance.compact()
    history = {v: rows_at(ns.uri, v) for v in manifest_versions(ns.uri)[1:]}
    n_manifest, n_tables = len(history) + 1, table_version_files(ns.uri)
    latest = ns.version

    result = ns.maintenance.cleanup(older_than=dt.timedelta(0), keep_manifest_versions=3)
    kept = manifest_versions(ns.uri)
    # the three newest, then the two commits announcing what the run removed
    # (core/manifest/retire.py)
    assert kept[:3] == sorted(history)[-3:]
    assert kept[3:] == [latest + 1, latest + 2]
    assert rows_at(ns.uri, latest + 2) == history[latest]
    assert result.manifest_versions_removed == n_manifest - 3
    assert result.manifest_versions_kept == 3
    for v in kept[:3]:
        assert rows_at(ns.uri, v) == history[v]  # time travel to every retained version
    for v in set(history) - set(kept):
        with pytest.raises(PartitionedNamespaceError):
            PartitionedNamespace.open(ns.uri, version=v)
    assert table_version_files(ns.uri) == n_tables - result.table_versions_removed
    assert result.table_versions_removed > 0 and result.files_removed > 0
    assert result.bytes_removed > 0
    assert ns.version == latest + 2  # cleanup commits only its announcement
    assert health.check_read_versions(ns, history=None) == ([], [])
    assert health.check_integrity(ns) == []

    # once only the latest is kept, every unpinned version goes
    ns.maintenance.cleanup(older_than=dt.timedelta(0), keep_manifest_versions=1)
    assert manifest_versions(ns.uri)[0] == latest + 2  # and what this run announced
    assert rows_at(ns.uri) == history[latest]
    for p in ns.inspect.partitions():
        versions = os.listdir(os.path.join(ns.uri, p["location"], "_versions"))
        assert sorted(v for v in versions if v.endswith(".manifest")) == sorted(
            {f"d{p['read_version']}.manifest", "18446744073709551614.manifest"}  # pin + main v1
        )


def test_cleanup_leaves_young_versions(ns):
    before = fingerprint(ns.uri)
    result = ns.maintenance.cleanup()  # everything is younger than 7 days
    assert (result.manifest_versions_removed, result.table_versions_removed) == (0, 0)
    assert result.files_removed == 0
    assert fingerprint(ns.uri) == before


def test_cleanup_keeps_tagged_and_tag_pinned_versions(ns):
    first = first_write(ns.uri)
    second = PartitionedNamespace.open(ns.uri, version=first.version + 1)
    third = PartitionedNamespace.open(ns.uri, version=first.version + 2)
    us_second, us_third = by_key(second)[("US", 2025)], by_key(third)[("US", 2025)]
    us_uri = os.path.join(ns.uri, us_second["location"])
    # a user's tag on a superseded detached version of the US table ...
    lance.dataset(us_uri).tags.create("audit", us_second["read_version"])
    # ... and FR registered through a tag instead of a read_version
    fr_now = by_key(ns)[("FR", 2025)]
    lance.dataset(os.path.join(ns.uri, fr_now["location"])).tags.create(
        "pin", fr_now["read_version"]
    )
    ns.state.store.commit(
        load_snapshot,
        lambda s: ManifestEdit(
            upserts={fr_now["object_id"]: {"read_version": None, "read_tag": "pin"}}
        ),
    )
    ns.refresh()
    expected = rows_at(ns.uri)

    ns.maintenance.cleanup(older_than=dt.timedelta(0), keep_manifest_versions=1)
    assert rows_at(ns.uri) == expected  # FR read through its tag
    audit = lance.dataset(us_uri, version="audit")
    assert audit.version == us_second["read_version"]
    assert audit.count_rows() == 6  # the first two writes' US 2025 rows: files kept too
    versions = os.listdir(os.path.join(us_uri, "_versions"))
    assert f"d{us_second['read_version']}.manifest" in versions
    assert f"d{us_third['read_version']}.manifest" not in versions  # untagged: removed
    assert health.check_read_versions(ns) == ([], [])


def test_cleanup_protects_a_pin_lance_cleanup_would_break(ns):
    """The main line of a table moved on outside the package: Lance's cleanup would delete the
    files the detached pin reads (see test_health); ours removes the old main-line version but
    keeps those files."""
    us = by_key(ns)[("US", 2025)]
    uri = os.path.join(ns.uri, us["location"])
    lance.write_dataset(sample_table(3, start=900), uri, mode="overwrite")  # main line: v2
    expected = rows_at(ns.uri)
    result = ns.maintenance.cleanup(older_than=dt.timedelta(0), keep_manifest_versions=1)
    assert result.table_versions_removed > 0
    assert not os.path.exists(os.path.join(uri, "_versions", "18446744073709551614.manifest"))
    assert rows_at(ns.uri) == expected
    assert health.check_read_versions(ns)[0] == []


# -- vacuum -----------------------------------------------------------------------------------
def test_vacuum_removes_old_orphans_and_unreferenced_files_only(ns):
    dirs = set(os.listdir(ns.uri))
    fail_write(ns, sample_table(2, countries=("JP",), start=700))
    (old_orphan,) = set(os.listdir(ns.uri)) - dirs
    fail_write(ns, sample_table(2, countries=("BR",), start=710))
    (young_orphan,) = set(os.listdir(ns.uri)) - dirs - {old_orphan}
    age(os.path.join(ns.uri, old_orphan), 8 * DAY)
    # fragments of a write that died before committing a table version, old and young
    us = by_key(ns)[("US", 2025)]
    uri = os.path.join(ns.uri, us["location"])
    ds = pinned(ns, us)
    data_before = set(os.listdir(os.path.join(uri, "data")))
    write_fragments(sample_table(1, countries=("US",), start=720), uri, schema=ds.schema)
    (stale,) = set(os.listdir(os.path.join(uri, "data"))) - data_before
    age(os.path.join(uri, "data"), 8 * DAY)  # referenced files are old too: must stay
    write_fragments(sample_table(1, countries=("US",), start=730), uri, schema=ds.schema)
    (fresh,) = set(os.listdir(os.path.join(uri, "data"))) - data_before - {stale}

    before = fingerprint(ns.uri)
    expected = {
        path: digest
        for path, digest in before["files"].items()
        if not path.startswith(old_orphan + os.sep) and not path.endswith(stale)
    }
    assert len(expected) < len(before["files"]) - 1
    rows = rows_at(ns.uri)

    result = ns.maintenance.vacuum()  # grace: 7 days
    assert result.orphans_removed == (old_orphan,)
    assert result.orphans_kept == (young_orphan,)
    assert result.files_removed == 1
    assert result.bytes_removed > 0
    after = fingerprint(ns.uri)
    # registered tables untouched; __manifest only gained the announcement of the deletions
    outside = lambda files: {p: d for p, d in files.items() if not p.startswith("__manifest")}  # noqa: E731
    assert outside(after["files"]) == outside(expected)
    assert after["manifest_version"] == before["manifest_version"] + 2
    assert ns.refresh().inspect.history(since=before["manifest_version"] + 1)
    assert os.path.exists(os.path.join(uri, "data", fresh))
    assert rows_at(ns.uri) == rows
    assert [o.location for o in health.find_orphans(ns)] == [young_orphan]

    # with no grace left, the young orphan and the fresh fragment go too
    result = ns.maintenance.vacuum(grace=dt.timedelta(0))
    assert result.orphans_removed == (young_orphan,)
    assert result.files_removed == 1
    assert not os.path.exists(os.path.join(uri, "data", fresh))
    assert health.find_orphans(ns) == []
    assert rows_at(ns.uri) == rows


def test_vacuum_keeps_tables_older_manifest_versions_reference(ns):
    us = by_key(ns)[("US", 2025)]
    before_drop = ns.version
    ns.maintenance.drop_partitions("country = 'US' AND event_date < DATE '2026-01-01'")
    result = ns.maintenance.vacuum(grace=dt.timedelta(0))
    assert result.orphans_removed == ()
    assert os.path.isdir(os.path.join(ns.uri, us["location"]))
    assert len(rows_at(ns.uri, before_drop)) == 48  # time travel before the drop still reads
    # once no retained manifest version references it, cleanup + vacuum remove it
    ns.maintenance.cleanup(older_than=dt.timedelta(0), keep_manifest_versions=1)
    result = ns.maintenance.vacuum(grace=dt.timedelta(0))
    assert result.orphans_removed == (us["location"],)
    assert not os.path.exists(os.path.join(ns.uri, us["location"]))
    assert health.check_read_versions(ns) == ([], [])


# -- drop_partitions --------------------------------------------------------------------------
def test_drop_partitions_drops_exactly_the_matching_ones_in_one_commit(ns):
    before = by_key(ns)
    rows = rows_at(ns.uri)
    version = ns.version
    result = ns.maintenance.drop_partitions("country = 'US'")
    assert result.manifest_version == version + 1 == ns.version
    assert sorted(p.object_id for p in result.partitions) == sorted(
        p["object_id"] for k, p in before.items() if k[0] == "US"
    )
    assert result.rows == sum(1 for r in rows if r["country"] == "US")
    assert set(by_key(ns)) == {k for k in before if k[0] != "US"}
    assert rows_at(ns.uri) == [r for r in rows if r["country"] != "US"]
    assert rows_at(ns.uri, version) == rows  # time travel
    props = ns.state.store.commit_properties(ns.version)
    assert props["operation"] == "drop_partitions"
    # the US namespace rows went with its tables; data stays on storage
    manifest = lance.dataset(os.path.join(ns.uri, "__manifest")).to_table().to_pylist()
    assert all(r["partition_field_country"] != "US" for r in manifest)
    for p in before.values():
        assert os.path.isdir(os.path.join(ns.uri, p["location"]))


def test_drop_partitions_by_a_data_column(ns):
    """Rows of a whole year match a date range: those partitions go, the others stay."""
    before = by_key(ns)
    result = ns.maintenance.drop_partitions("event_date >= DATE '2026-01-01'")
    assert sorted(p.object_id for p in result.partitions) == sorted(
        p["object_id"] for k, p in before.items() if k[1] == 2026
    )
    assert {k[1] for k in by_key(ns)} == {2025}
    # namespaces: every country still has its 2025 partition
    assert {k[0] for k in by_key(ns)} == {"US", "FR", "DE"}


def test_drop_partitions_refuses_a_partial_match_and_changes_nothing(ns):
    before = fingerprint(ns.uri)
    with pytest.raises(PartialPartitionError) as err:
        ns.maintenance.drop_partitions(
            "country = 'US' AND id < 100"
        )  # the first write's US rows only
    us = sorted(p["object_id"] for k, p in by_key(ns).items() if k[0] == "US")
    assert sorted(err.value.partitions) == us
    assert {v["country"] for v in err.value.values} == {"US"}
    assert "US" in str(err.value)
    assert fingerprint(ns.uri) == before


def test_drop_partitions_without_a_match_commits_nothing(ns):
    before = fingerprint(ns.uri)
    result = ns.maintenance.drop_partitions("country = 'XX'")
    assert result.partitions == () and result.manifest_version == ns.version
    result = ns.maintenance.drop_partitions("value < 0")  # read every partition, none matches
    assert result.partitions == ()
    assert fingerprint(ns.uri) == before
    with pytest.raises(WriteError, match="needs a filter"):
        ns.maintenance.drop_partitions(None)


def test_maintenance_refuses_a_pinned_namespace(ns):
    old = PartitionedNamespace.open(ns.uri, version=2)
    before = fingerprint(ns.uri)
    for call in (
        lambda: old.maintenance.compact(),
        lambda: old.maintenance.cleanup(older_than=dt.timedelta(0)),
        lambda: old.maintenance.vacuum(grace=dt.timedelta(0)),
        lambda: old.maintenance.drop_partitions("country = 'US'"),
    ):
        with pytest.raises(WriteError, match="opened at manifest version 2"):
            call()
    assert fingerprint(ns.uri) == before


def test_vacuum_never_takes_a_nested_namespace_for_an_orphan(tmp_path):
    """Dagster asset keys ["a"] and ["a", "deadbeef_x"] nest one namespace inside another; the
    inner one (even with a table-like directory name) is not an orphan of the outer one."""
    outer = PartitionedNamespace.create(
        tmp_path / "a", SCHEMA, [PartitionField.identity("country")]
    )
    outer.write(sample_table(3))
    inner = PartitionedNamespace.create(
        tmp_path / "a" / "deadbeef_x", SCHEMA, [PartitionField.identity("country")]
    )
    inner.write(sample_table(4))
    result = outer.maintenance.vacuum(grace=dt.timedelta(0))
    assert result.orphans_removed == ()
    assert PartitionedNamespace.open(tmp_path / "a" / "deadbeef_x").count_rows() == 4


def test_vacuum_removes_an_orphan_directory_without_files(tmp_path):
    """A writer killed while creating a partition table can leave an empty table directory;
    its age is the directory's, so vacuum removes it once the grace period has passed."""
    ns = PartitionedNamespace.create(tmp_path / "ns", SCHEMA, [PartitionField.identity("country")])
    ns.write(sample_table(3))
    empty = os.path.join(ns.uri, "0123abcd_v1$zzzzzzzzzzzzzzzz$dataset", "data")
    os.makedirs(empty)
    kept = ns.maintenance.vacuum(grace=dt.timedelta(hours=1))
    assert "0123abcd_v1$zzzzzzzzzzzzzzzz$dataset" in kept.orphans_kept
    result = ns.maintenance.vacuum(grace=dt.timedelta(0))
    assert result.orphans_removed == ("0123abcd_v1$zzzzzzzzzzzzzzzz$dataset",)
    assert not os.path.exists(os.path.dirname(empty))
    assert ns.count_rows() == 3
