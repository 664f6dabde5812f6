"""Atomicity, isolation and concurrency of partitioned-namespace writes (FORMAT.md, "Transactions").

A write first writes every affected partition table, then makes one ``__manifest`` commit.
These tests check that nothing is visible before that commit (injected failure, SIGKILL),
that concurrent writers in separate processes rebase onto each other without losing anything,
that overwrites of the same partition conflict, and that a manifest version is a stable snapshot.
Real concurrency uses subprocesses running ``helpers/writer_proc.py``; a hook run just before the
manifest commit (once every partition table is written; ``helpers/faults.py``) holds them at a
barrier so their commits really overlap.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import lance
import pyarrow as pa
import pytest
from helpers.faults import CommitHooks

from dagster_lance_partitioned import CommitConflictError, PartitionedNamespace, PartitionField
from dagster_lance_partitioned.core.errors import WriteError

HELPERS = Path(__file__).resolve().parents[2] / "helpers"

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("country", pa.utf8()),
        pa.field("day", pa.int32()),
        pa.field("tag", pa.utf8()),
    ]
)
FIELDS = [PartitionField.identity("country"), PartitionField.identity("day")]
WRITER_SCRIPT = HELPERS / "writer_proc.py"
COUNTRY_COL, DAY_COL = "partition_field_country", "partition_field_day"  # manifest columns
WAIT = 60.0  # seconds; generous upper bound for any one subprocess step

Row = dict[str, Any]


# -- rows and expected states ------------------------------------------------------------------
def rows(first_id: int, country: str, day: int, n: int, tag: str) -> list[Row]:
    """``n`` rows with consecutive ids, all in partition (country, day)."""
    return [{"id": first_id + i, "country": country, "day": day, "tag": tag} for i in range(n)]


def table_of(data: list[Row]) -> pa.Table:
    return pa.Table.from_pylist(data, schema=SCHEMA)


def by_id(data: Iterable[Row]) -> list[Row]:
    """Rows sorted by id, for row-for-row comparison."""
    return sorted(data, key=lambda r: r["id"])


def rows_of(ns: PartitionedNamespace) -> list[Row]:
    return by_id(ns.to_table().to_pylist())


def key(row: Row) -> tuple[Any, Any]:
    return (row["country"], row["day"])


def apply_write(state: list[Row], data: list[Row], mode: str) -> list[Row]:
    """The rows after applying one write to ``state`` serially (the reference semantics)."""
    if mode == "append":
        return by_id([*state, *data])
    if mode == "overwrite_partitions":
        touched = {key(r) for r in data}
        return by_id([*(r for r in state if key(r) not in touched), *data])
    if mode == "overwrite":
        return by_id(data)
    raise AssertionError(mode)


def partition_keys(ns: PartitionedNamespace) -> list[tuple[Any, Any]]:
    return sorted((p["values"]["country"], p["values"]["day"]) for p in ns.inspect.partitions())


def partitions_canon(ns: PartitionedNamespace) -> list[tuple]:
    """Everything a reader uses from the registered tables, order-independent."""
    return sorted(
        (
            p["object_id"],
            p["location"],
            p["values"]["country"],
            p["values"]["day"],
            p["read_version"],
            p["read_branch"],
            p["read_tag"],
        )
        for p in ns.inspect.partitions()
    )


def state_of(uri: str) -> tuple[int, list[tuple], list[Row]]:
    """(manifest version, partitions, rows) as a fresh reader sees them."""
    ns = PartitionedNamespace.open(uri)
    return ns.version, partitions_canon(ns), rows_of(ns)


def assert_manifest_consistent(uri: str) -> None:
    """No duplicate registrations: one row per object id, one table per partition value
    tuple, one namespace per (level, values) prefix; every table's parent namespaces exist and
    its directory is on disk."""
    manifest = lance.dataset(os.path.join(uri, "__manifest")).to_table().to_pylist()
    ids = [r["object_id"] for r in manifest]
    assert len(ids) == len(set(ids)), f"duplicate object ids: {ids}"
    by_oid = {r["object_id"]: r for r in manifest}
    seen: dict[tuple, str] = {}
    for r in manifest:
        r["country"], r["day"] = r[COUNTRY_COL], r[DAY_COL]
    for r in manifest:
        depth = r["object_id"].count("$")
        if r["object_type"] == "table":
            k = ("table", r["country"], r["day"])
        elif depth == 1:
            k = ("namespace", r["country"])
        elif depth == 2:
            k = ("namespace", r["country"], r["day"])
        else:
            continue  # the spec namespace v1
        assert k not in seen, f"{k} registered twice: {seen[k]} and {r['object_id']}"
        seen[k] = r["object_id"]
    for r in manifest:
        if r["object_type"] != "table":
            continue
        parts = r["object_id"].split("$")
        for level in (2, 3):
            parent = "$".join(parts[:level])
            assert parent in by_oid, f"table {r['object_id']} has no namespace row {parent}"
            assert by_oid[parent]["object_type"] == "namespace"
        assert by_oid["$".join(parts[:2])]["country"] == r["country"]
        assert os.path.isdir(os.path.join(uri, r["location"])), r["location"]


def new_namespace(tmp_path: Path, initial: list[Row]) -> str:
    uri = str(tmp_path / "ns")
    ns = PartitionedNamespace.create(uri, schema=SCHEMA, partition_fields=FIELDS)
    if initial:
        ns.write(table_of(initial), mode="append")
    return uri


INITIAL = [
    *rows(1, "US", 1, 3, "init"),
    *rows(11, "US", 2, 2, "init"),
    *rows(21, "FR", 1, 2, "init"),
    *rows(31, "DE", 3, 2, "init"),
]


# -- subprocess writers ------------------------------------------------------------------------
class Writer:
    """One ``helpers/writer_proc.py`` subprocess running a list of writes."""

    def __init__(
        self,
        tmp_path: Path,
        uri: str,
        name: str,
        writes: list[tuple[list[Row], str]],
        barrier: list[str] | None = None,
        release: str | None = None,
        hook: bool = True,
    ) -> None:
        self.name = name
        self.writes = writes
        self.sync_dir = tmp_path / "sync"
        self.sync_dir.mkdir(exist_ok=True)
        self.result_path = tmp_path / f"{name}.results.jsonl"
        self.stderr_path = tmp_path / f"{name}.stderr"
        config = {
            "uri": uri,
            "writes": [{"rows": data, "mode": mode} for data, mode in writes],
            "sync_dir": str(self.sync_dir) if hook else None,
            "name": name,
            "barrier": barrier,
            "release": release,
            "result": str(self.result_path),
            "timeout": WAIT,
        }
        config_path = tmp_path / f"{name}.json"
        config_path.write_text(json.dumps(config))
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, str(WRITER_SCRIPT), str(config_path)],
                stdout=subprocess.DEVNULL,
                stderr=err,
            )

    def marker(self, i: int = 0) -> Path:
        return self.sync_dir / f"{self.name}.{i}.ready"

    def wait_for_marker(self, i: int = 0) -> None:
        deadline = time.monotonic() + WAIT
        while not self.marker(i).exists():
            if self.proc.poll() is not None:
                pytest.fail(f"{self.name} exited early:\n{self.stderr()}")
            assert time.monotonic() < deadline, f"{self.name} never reached its commit"
            time.sleep(0.01)

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")[-4000:]

    def results(self) -> list[dict]:
        if not self.result_path.exists():
            return []
        lines = self.result_path.read_text().splitlines()
        return [json.loads(line) for line in lines if line.strip()]

    def finish(self) -> list[dict]:
        """Wait for a normal exit; return one result per write."""
        try:
            code = self.proc.wait(timeout=WAIT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            pytest.fail(f"{self.name} did not finish:\n{self.stderr()}")
        assert code == 0, f"{self.name} exited {code}:\n{self.stderr()}"
        results = self.results()
        assert len(results) >= 1, f"{self.name} reported nothing:\n{self.stderr()}"
        return results

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=WAIT)


@pytest.fixture
def spawn(tmp_path: Path):
    """Start writer subprocesses; any still running at teardown are killed."""
    started: list[Writer] = []

    def start(*args: Any, **kwargs: Any) -> Writer:
        w = Writer(tmp_path, *args, **kwargs)
        started.append(w)
        return w

    yield start
    for w in started:
        w.kill()


def all_ok(results: list[dict]) -> None:
    for r in results:
        assert r["ok"], f"write {r['i']} failed: {r['error']}: {r['message']}"


# -- 1. injected failure before the manifest commit --------------------------------------------
@pytest.mark.parametrize("mode", ["append", "overwrite_partitions", "overwrite"])
def test_failure_before_manifest_commit_publishes_nothing(
    tmp_path: Path, mode: str, before_commit: CommitHooks
) -> None:
    uri = new_namespace(tmp_path, INITIAL)
    version0, parts0, rows0 = state_of(uri)
    dirs0 = set(os.listdir(uri))

    # Existing partitions (US,1), (FR,1); new partitions (US,7) (existing country) and (JP,1).
    failed = [
        *rows(1001, "US", 1, 3, "failed"),
        *rows(1011, "FR", 1, 2, "failed"),
        *rows(1021, "US", 7, 2, "failed"),
        *rows(1031, "JP", 1, 4, "failed"),
    ]
    seen_pending: list[int] = []

    def boom(pending: list) -> None:
        seen_pending.append(len(pending))
        raise RuntimeError("injected failure before the manifest commit")

    ns = PartitionedNamespace.open(uri)
    before_commit(ns, boom)
    with pytest.raises(RuntimeError, match="injected failure"):
        ns.write(table_of(failed), mode=mode)
    assert seen_pending == [4], "the hook must run once, after all four partitions are written"

    # Readers (fresh and the writer's own object) see exactly the previous state.
    assert state_of(uri) == (version0, parts0, rows0)
    assert ns.version == version0
    assert rows_of(ns) == rows0
    assert lance.dataset(os.path.join(uri, "__manifest")).version == version0

    # The two new partition tables were written (orphans) but are not registered.
    orphans = set(os.listdir(uri)) - dirs0
    registered = {p[1] for p in parts0}
    assert len(orphans) == 2, orphans
    assert not orphans & registered
    orphan_ids = set()
    for d in orphans:
        orphan_ids |= set(lance.dataset(os.path.join(uri, d)).to_table()["id"].to_pylist())
    assert orphan_ids == {r["id"] for r in failed if r["country"] == "JP" or r["day"] == 7}

    # A later successful write to the same partitions publishes none of the failed rows:
    # it is based on the manifest's read_version, not on whatever the tables hold.
    ok = [
        *rows(2001, "US", 1, 1, "ok"),
        *rows(2011, "FR", 1, 1, "ok"),
        *rows(2021, "US", 7, 1, "ok"),
        *rows(2031, "JP", 1, 1, "ok"),
    ]
    before_commit(ns, None)
    result = ns.write(table_of(ok), mode=mode)
    assert result.manifest_version == version0 + 1
    version1, _parts1, rows1 = state_of(uri)
    assert version1 == version0 + 1
    assert rows1 == apply_write(rows0, ok, mode)
    assert not {r["id"] for r in rows1} & {r["id"] for r in failed}
    fresh = PartitionedNamespace.open(uri)
    assert {p["location"] for p in fresh.inspect.partitions()}.isdisjoint(orphans)
    assert_manifest_consistent(uri)


# -- 2. a writer killed before (or while) committing ---------------------------------------------
def test_sigkill_before_manifest_commit_publishes_nothing(tmp_path: Path, spawn) -> None:
    uri = new_namespace(tmp_path, INITIAL)
    version0, parts0, rows0 = state_of(uri)
    killed = [
        *rows(1001, "US", 1, 3, "killed"),
        *rows(1011, "DE", 3, 2, "killed"),
        *rows(1021, "IT", 5, 2, "killed"),
    ]
    w = spawn(uri, "victim", [(killed, "append")], release="never")
    w.wait_for_marker()
    os.kill(w.proc.pid, signal.SIGKILL)
    assert w.proc.wait(timeout=WAIT) == -signal.SIGKILL
    assert w.results() == []

    assert state_of(uri) == (version0, parts0, rows0)
    assert_manifest_consistent(uri)

    after = [*rows(2001, "US", 1, 2, "after"), *rows(2011, "IT", 5, 2, "after")]
    ns = PartitionedNamespace.open(uri)
    ns.write(table_of(after), mode="append")
    version1, _, rows1 = state_of(uri)
    assert version1 == version0 + 1
    assert rows1 == apply_write(rows0, after, "append")
    assert not any(r["tag"] == "killed" for r in rows1)
    assert_manifest_consistent(uri)


def test_readers_see_a_held_write_only_after_its_manifest_commit(tmp_path: Path, spawn) -> None:
    uri = new_namespace(tmp_path, INITIAL)
    version0, parts0, rows0 = state_of(uri)
    early_reader = PartitionedNamespace.open(uri)
    data = [*rows(1001, "US", 2, 2, "held"), *rows(1011, "NL", 4, 3, "held")]
    w = spawn(uri, "held", [(data, "overwrite_partitions")], release="go")
    w.wait_for_marker()
    # Partition tables are written; the manifest commit has not happened.
    assert state_of(uri) == (version0, parts0, rows0)
    (w.sync_dir / "go").touch()
    all_ok(w.finish())
    version1, _, rows1 = state_of(uri)
    assert version1 == version0 + 1
    assert rows1 == apply_write(rows0, data, "overwrite_partitions")
    # A namespace object opened earlier keeps its snapshot until refreshed.
    assert early_reader.version == version0
    assert rows_of(early_reader) == rows0
    assert rows_of(early_reader.refresh()) == rows1


def test_sigkill_at_a_random_moment_leaves_whole_writes_only(tmp_path: Path, spawn) -> None:
    uri = new_namespace(tmp_path, INITIAL)
    _, _, rows0 = state_of(uri)
    writes: list[tuple[list[Row], str]] = []
    for k in range(300):
        base = 10_000 + 10 * k
        data = [
            *rows(base, "US", 1, 2, f"w{k}"),
            *rows(base + 2, "FR", 1, 1, f"w{k}"),
            *rows(base + 3, f"K{k % 3}", 9, 2, f"w{k}"),
        ]
        writes.append((data, "overwrite_partitions" if k % 4 == 3 else "append"))
    w = spawn(uri, "looper", writes, hook=False)
    deadline = time.monotonic() + WAIT
    while len(w.results()) < 3:
        assert w.proc.poll() is None, w.stderr()
        assert time.monotonic() < deadline
        time.sleep(0.01)
    time.sleep(random.uniform(0.0, 0.4))
    os.kill(w.proc.pid, signal.SIGKILL)
    w.proc.wait(timeout=WAIT)
    reported = len(w.results())
    assert reported < len(writes), "the writer finished before it was killed"

    # Visible state = the first m writes applied whole, m = reported or reported + 1 (the
    # write that was in flight may or may not have reached its manifest commit).
    state = rows0
    for data, mode in writes[:reported]:
        state = apply_write(state, data, mode)
    candidates = {reported: state, reported + 1: apply_write(state, *writes[reported])}
    _, _, visible = state_of(uri)
    assert any(visible == c for c in candidates.values()), (
        f"visible state is not {reported} or {reported + 1} whole writes"
    )
    assert_manifest_consistent(uri)

    more = rows(99_001, "US", 1, 2, "after")
    PartitionedNamespace.open(uri).write(table_of(more), mode="append")
    assert state_of(uri)[2] == apply_write(visible, more, "append")


# -- 3. concurrent writers on disjoint partitions --------------------------------------------------
@pytest.mark.parametrize(
    ("mode_a", "mode_b"),
    [
        ("append", "append"),
        ("overwrite_partitions", "overwrite_partitions"),
        ("append", "overwrite_partitions"),
    ],
)
def test_concurrent_writers_on_disjoint_partitions_both_land(
    tmp_path: Path, spawn, mode_a: str, mode_b: str
) -> None:
    uri = new_namespace(tmp_path, INITIAL)
    version0, _, rows0 = state_of(uri)
    # Existing partitions plus new ones; both create a partition under the new country "NEW".
    a = [*rows(1001, "US", 1, 3, "a"), *rows(1011, "NEW", 1, 2, "a")]
    b = [*rows(2001, "FR", 1, 2, "b"), *rows(2011, "NEW", 2, 2, "b"), *rows(2021, "DE", 3, 1, "b")]
    names = ["a", "b"]
    wa = spawn(uri, "a", [(a, mode_a)], barrier=names)
    wb = spawn(uri, "b", [(b, mode_b)], barrier=names)
    ra, rb = wa.finish(), wb.finish()
    all_ok(ra + rb)
    assert {ra[0]["manifest_version"], rb[0]["manifest_version"]} == {
        version0 + 1,
        version0 + 2,
    }
    version, _, final = state_of(uri)
    assert version == version0 + 2
    assert final == apply_write(apply_write(rows0, a, mode_a), b, mode_b)
    ns = PartitionedNamespace.open(uri)
    assert partition_keys(ns) == sorted(
        {("US", 1), ("US", 2), ("FR", 1), ("DE", 3), ("NEW", 1), ("NEW", 2)}
    )
    assert_manifest_consistent(uri)


def test_many_writers_many_rounds_all_land(tmp_path: Path, spawn) -> None:
    n_writers, n_rounds = 4, 3
    countries = [f"C{w}" for w in range(n_writers)]
    initial = [r for w, c in enumerate(countries) for r in rows(w * 100, c, 1, 2, "init")]
    uri = new_namespace(tmp_path, initial)
    version0, _, rows0 = state_of(uri)
    names = [f"w{w}" for w in range(n_writers)]
    plans: list[list[tuple[list[Row], str]]] = []
    for w, c in enumerate(countries):
        mode = "append" if w % 2 == 0 else "overwrite_partitions"
        plan = []
        for r in range(n_rounds):
            base = 10_000 * (w + 1) + 100 * r
            data = [
                *rows(base, c, 1, 2, f"{w}.{r}"),
                *rows(base + 10, c, 2, 1, f"{w}.{r}"),
                *rows(base + 20, c, 10 + r, 2, f"{w}.{r}"),  # a new partition every round
            ]
            plan.append((data, mode))
        plans.append(plan)
    writers = [spawn(uri, names[w], plans[w], barrier=names) for w in range(n_writers)]
    results = [w.finish() for w in writers]
    for res in results:
        all_ok(res)
        assert len(res) == n_rounds
    versions = sorted(r["manifest_version"] for res in results for r in res)
    assert len(set(versions)) == n_writers * n_rounds and versions[0] > version0
    # any other version in between is the manifest's own compaction (rows unchanged)
    manifest = lance.dataset(os.path.join(uri, "__manifest"))
    others = set(range(version0 + 1, manifest.version + 1)) - set(versions)
    for v in others:  # no write of ours: pylance reads compaction's Rewrite as BaseOperation
        tx = manifest.read_transaction(v)
        assert type(tx.operation).__name__ in ("Rewrite", "BaseOperation"), v
        assert not any(k.startswith("dlp.") for k in tx.transaction_properties or {}), v

    expected = rows0
    for plan in plans:  # disjoint partitions: any interleaving gives the same result
        for data, mode in plan:
            expected = apply_write(expected, data, mode)
    version, _, final = state_of(uri)
    assert version == versions[-1] + len([v for v in others if v > versions[-1]])
    assert final == expected
    ns = PartitionedNamespace.open(uri)
    assert len(ns.inspect.partitions()) == n_writers * (2 + n_rounds)
    assert_manifest_consistent(uri)


# -- 4. concurrent appends to the same partition -------------------------------------------------
def test_concurrent_appends_to_the_same_partition_both_land(tmp_path: Path, spawn) -> None:
    uri = new_namespace(tmp_path, INITIAL)
    version0, parts0, rows0 = state_of(uri)
    names = ["a", "b", "c"]
    data = {
        n: [*rows(1000 * (i + 1), "US", 1, 3, n), *rows(1000 * (i + 1) + 50, "FR", 1, 1, n)]
        for i, n in enumerate(names)
    }
    writers = [spawn(uri, n, [(data[n], "append")], barrier=names) for n in names]
    for w in writers:
        all_ok(w.finish())
    version, parts, final = state_of(uri)
    assert version == version0 + len(names)
    expected = rows0
    for n in names:
        expected = apply_write(expected, data[n], "append")
    assert final == expected
    ids = [r["id"] for r in final]
    assert len(ids) == len(set(ids)), "duplicated rows"
    # Still the same partition tables (no re-registration), only newer read versions.
    assert [p[:4] for p in parts] == [p[:4] for p in parts0]
    assert_manifest_consistent(uri)


# -- 5. overwrite conflicts ------------------------------------------------------------------------
def test_concurrent_overwrites_of_the_same_partition_conflict(tmp_path: Path, spawn) -> None:
    uri = new_namespace(tmp_path, INITIAL)
    version0, _, rows0 = state_of(uri)
    # Both replace (US,1); each also creates a partition of its own.
    data = {
        "a": [*rows(1001, "US", 1, 2, "a"), *rows(1011, "SE", 1, 2, "a")],
        "b": [*rows(2001, "US", 1, 3, "b"), *rows(2011, "NO", 1, 1, "b")],
    }
    names = ["a", "b"]
    writers = {n: spawn(uri, n, [(data[n], "overwrite_partitions")], barrier=names) for n in names}
    results = {n: w.finish()[0] for n, w in writers.items()}
    winners = [n for n in names if results[n]["ok"]]
    assert len(winners) == 1, results
    winner = winners[0]
    loser = "b" if winner == "a" else "a"
    err = results[loser]
    assert err["error"] == CommitConflictError.__name__, err
    assert "US" in err["message"] and "country" in err["message"], err["message"]
    us1_id = next(
        p["object_id"]
        for p in PartitionedNamespace.open(uri).inspect.partitions()
        if p["values"] == {"country": "US", "day": 1}
    )
    assert err["partitions"] == [us1_id]

    version, _, final = state_of(uri)
    assert version == version0 + 1
    assert final == apply_write(rows0, data[winner], "overwrite_partitions")
    assert [r for r in final if key(r) == ("US", 1)] == by_id(
        r for r in data[winner] if key(r) == ("US", 1)
    )
    assert_manifest_consistent(uri)

    # The loser may retry and then wins over the current state.
    PartitionedNamespace.open(uri).write(table_of(data[loser]), mode="overwrite_partitions")
    assert state_of(uri)[2] == apply_write(final, data[loser], "overwrite_partitions")
    assert_manifest_consistent(uri)


def test_concurrent_append_and_overwrite_of_a_partition_serialize(tmp_path: Path, spawn) -> None:
    uri = new_namespace(tmp_path, INITIAL)
    version0, _, rows0 = state_of(uri)
    appended = rows(1001, "US", 1, 3, "append")
    replacing = rows(2001, "US", 1, 2, "overwrite")
    names = ["app", "ow"]
    wa = spawn(uri, "app", [(appended, "append")], barrier=names)
    wo = spawn(uri, "ow", [(replacing, "overwrite_partitions")], barrier=names)
    ra, ro = wa.finish()[0], wo.finish()[0]
    all_ok([ra, ro])
    version, _, final = state_of(uri)
    assert version == version0 + 2
    if ra["manifest_version"] < ro["manifest_version"]:  # append, then overwrite
        expected = apply_write(
            apply_write(rows0, appended, "append"), replacing, "overwrite_partitions"
        )
    else:  # overwrite, then append (rebased onto the overwritten version)
        expected = apply_write(
            apply_write(rows0, replacing, "overwrite_partitions"), appended, "append"
        )
    assert final == expected
    assert_manifest_consistent(uri)


@pytest.mark.parametrize("first", ["append", "overwrite_partitions"])
def test_interleaved_append_and_overwrite_follow_commit_order(
    tmp_path: Path, first: str, before_commit: CommitHooks
) -> None:
    """Deterministic interleaving: the second write has written its tables from the old base
    when the first one commits (the first runs inside the second's ``before_commit`` hook)."""
    uri = new_namespace(tmp_path, INITIAL)
    _, _, rows0 = state_of(uri)
    data = {
        "append": [*rows(1001, "US", 1, 3, "append"), *rows(1011, "FR", 1, 1, "append")],
        "overwrite_partitions": [*rows(2001, "US", 1, 1, "ow"), *rows(2011, "BE", 2, 2, "ow")],
    }
    second = "append" if first == "overwrite_partitions" else "overwrite_partitions"
    outer, inner = PartitionedNamespace.open(uri), PartitionedNamespace.open(uri)
    inner_results = []
    before_commit(
        outer, lambda pending: inner_results.append(inner.write(table_of(data[first]), mode=first))
    )
    outer_result = outer.write(table_of(data[second]), mode=second)
    assert outer_result.manifest_version == inner_results[0].manifest_version + 1
    expected = apply_write(apply_write(rows0, data[first], first), data[second], second)
    assert state_of(uri)[2] == expected
    assert_manifest_consistent(uri)


def test_interleaved_overwrites_of_a_partition_conflict(
    tmp_path: Path, before_commit: CommitHooks
) -> None:
    uri = new_namespace(tmp_path, INITIAL)
    _, _, rows0 = state_of(uri)
    theirs = rows(1001, "US", 2, 2, "theirs")
    ours = [*rows(2001, "US", 2, 1, "ours"), *rows(2011, "SE", 1, 2, "ours")]
    outer, inner = PartitionedNamespace.open(uri), PartitionedNamespace.open(uri)
    before_commit(outer, lambda pending: inner.write(table_of(theirs), mode="overwrite_partitions"))
    with pytest.raises(CommitConflictError) as info:
        outer.write(table_of(ours), mode="overwrite_partitions")
    assert "'US'" in str(info.value) and "2" in str(info.value)
    us2 = [p for p in inner.inspect.partitions() if p["values"] == {"country": "US", "day": 2}]
    assert info.value.partitions == [us2[0]["object_id"]]
    version, _, final = state_of(uri)
    assert version == inner.version
    assert final == apply_write(rows0, theirs, "overwrite_partitions")
    assert ("SE", 1) not in partition_keys(PartitionedNamespace.open(uri))
    assert_manifest_consistent(uri)


@pytest.mark.parametrize("first", ["append", "overwrite"])
def test_append_and_whole_table_overwrite_follow_commit_order(
    tmp_path: Path, first: str, before_commit: CommitHooks
) -> None:
    """An append has no overwrite semantics, so meeting a concurrent whole-table overwrite it
    must rebase (FORMAT.md, Transactions), as if it had run after the overwrite."""
    uri = new_namespace(tmp_path, INITIAL)
    _, _, rows0 = state_of(uri)
    data = {
        "append": rows(1001, "US", 1, 2, "append"),  # (US,1) exists and is not overwritten
        "overwrite": [*rows(2001, "FR", 1, 1, "ow"), *rows(2011, "SK", 4, 1, "ow")],
    }
    second = "append" if first == "overwrite" else "overwrite"
    outer, inner = PartitionedNamespace.open(uri), PartitionedNamespace.open(uri)
    before_commit(outer, lambda pending: inner.write(table_of(data[first]), mode=first))
    outer.write(table_of(data[second]), mode=second)
    expected = apply_write(apply_write(rows0, data[first], first), data[second], second)
    assert state_of(uri)[2] == expected
    assert_manifest_consistent(uri)


def test_concurrently_created_sibling_partitions_follow_the_location_rule(
    tmp_path: Path, spawn
) -> None:
    """Two writers each create a partition under the same new parent value; the second
    registers its table under the first one's namespace. FORMAT.md: a table's directory is
    ``<8 hex>_<object_id>``."""
    uri = new_namespace(tmp_path, INITIAL)
    names = ["a", "b"]
    spawn_args = {"a": rows(1001, "NEW", 1, 1, "a"), "b": rows(2001, "NEW", 2, 1, "b")}
    writers = [spawn(uri, n, [(spawn_args[n], "append")], barrier=names) for n in names]
    for w in writers:
        all_ok(w.finish())
    assert_manifest_consistent(uri)
    for p in PartitionedNamespace.open(uri).inspect.partitions():
        prefix, _, rest = p["location"].partition("_")
        assert len(prefix) == 8 and rest == p["object_id"], (p["location"], p["object_id"])


# -- 6. concurrent creation of the same new partition ----------------------------------------------
def test_concurrent_appends_creating_the_same_partition_register_one_table(
    tmp_path: Path, spawn
) -> None:
    uri = new_namespace(tmp_path, INITIAL)
    version0, _, rows0 = state_of(uri)
    names = ["a", "b"]
    data = {
        "a": [*rows(1001, "ZZ", 9, 3, "a"), *rows(1011, "US", 1, 1, "a")],
        "b": [*rows(2001, "ZZ", 9, 2, "b")],
    }
    writers = {n: spawn(uri, n, [(data[n], "append")], barrier=names) for n in names}
    results = {n: w.finish()[0] for n, w in writers.items()}
    all_ok(list(results.values()))
    zz = [
        p
        for res in results.values()
        for p in res["partitions"]
        if p["values"] == {"country": "ZZ", "day": 9}
    ]
    assert len(zz) == 2
    assert zz[0]["object_id"] == zz[1]["object_id"], "the writers registered different tables"
    assert sorted(p["created"] for p in zz) == [False, True]

    version, _, final = state_of(uri)
    assert version == version0 + 2
    assert final == by_id([*rows0, *data["a"], *data["b"]])
    ns = PartitionedNamespace.open(uri)
    assert partition_keys(ns).count(("ZZ", 9)) == 1
    assert_manifest_consistent(uri)


def test_concurrent_overwrites_creating_the_same_partition_conflict(tmp_path: Path, spawn) -> None:
    uri = new_namespace(tmp_path, INITIAL)
    version0, _, rows0 = state_of(uri)
    names = ["a", "b"]
    data = {"a": rows(1001, "ZZ", 9, 3, "a"), "b": rows(2001, "ZZ", 9, 2, "b")}
    writers = {n: spawn(uri, n, [(data[n], "overwrite_partitions")], barrier=names) for n in names}
    results = {n: w.finish()[0] for n, w in writers.items()}
    winners = [n for n in names if results[n]["ok"]]
    assert len(winners) == 1, results
    loser = next(n for n in names if n not in winners)
    assert results[loser]["error"] == CommitConflictError.__name__
    assert "ZZ" in results[loser]["message"]
    version, _, final = state_of(uri)
    assert version == version0 + 1
    assert final == by_id([*rows0, *data[winners[0]]])
    assert partition_keys(PartitionedNamespace.open(uri)).count(("ZZ", 9)) == 1
    assert_manifest_consistent(uri)


# -- 7. snapshot isolation and time travel --------------------------------------------------------
def test_snapshots_are_stable_and_time_travel_reproduces_history(tmp_path: Path) -> None:
    uri = new_namespace(tmp_path, INITIAL)
    held = PartitionedNamespace.open(uri)
    version0, parts0, rows0 = held.version, partitions_canon(held), rows_of(held)
    pinned = PartitionedNamespace.open(uri, version=version0)

    history = {version0: (parts0, rows0)}
    writer = PartitionedNamespace.open(uri)
    steps = [
        (rows(1001, "US", 1, 2, "s1"), "append"),
        ([*rows(1011, "FR", 1, 1, "s2"), *rows(1021, "PL", 2, 2, "s2")], "overwrite_partitions"),
        (rows(1031, "US", 1, 1, "s3"), "append"),
        ([*rows(1041, "US", 2, 1, "s4"), *rows(1051, "CZ", 1, 1, "s4")], "overwrite"),
        (rows(1061, "CZ", 1, 2, "s5"), "append"),
    ]
    expected = rows0
    for data, mode in steps:
        result = writer.write(table_of(data), mode=mode)
        expected = apply_write(expected, data, mode)
        version, parts, current = state_of(uri)
        assert version == result.manifest_version
        assert current == expected
        history[version] = (parts, current)
        # The held (unrefreshed) and pinned objects keep reading the old snapshot.
        for ns in (held, pinned):
            assert ns.version == version0
            assert partitions_canon(ns) == parts0
            assert rows_of(ns) == rows0

    assert len(history) == len(steps) + 1
    for version, (parts, expected_rows) in history.items():
        old = PartitionedNamespace.open(uri, version=version)
        assert old.version == version
        assert partitions_canon(old) == parts
        assert rows_of(old) == expected_rows
        assert old.count_rows() == len(expected_rows)
        assert rows_of(old.refresh()) == expected_rows  # pinned: refresh does not move

    with pytest.raises(WriteError):
        pinned.write(table_of(rows(5001, "US", 1, 1, "x")), mode="append")
    assert state_of(uri)[2] == expected
