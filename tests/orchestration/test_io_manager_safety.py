"""``LancePartitionedIOManager`` under concurrent first outputs and hostile asset keys.

Races use real processes (``helpers/io_race_proc.py``), each one ``dg.materialize`` of one daily
partition into a shared root, released together by a start barrier so that their
``handle_output`` calls reach the not-yet-existing (or not-yet-evolved) namespace at once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from helpers.io_race_proc import DAILY, ROWS_PER_KEY, rows_for

from dagster_lance_partitioned import PartitionedNamespace
from dagster_lance_partitioned.core.errors import PartitionedNamespaceError, StorageError
from dagster_lance_partitioned.core.partitioning.partition_by import parse_partition_by
from dagster_lance_partitioned.orchestration import LancePartitionedIOManager
from dagster_lance_partitioned.orchestration.errors import InvalidAssetKeyError

HELPERS = Path(__file__).resolve().parents[1] / "helpers"

RACE_SCRIPT = HELPERS / "io_race_proc.py"
WAIT = 120.0  # seconds; generous bound for one process to start Dagster and finish its run
KEYS = [f"2024-01-0{d}" for d in range(1, 7)]


# -- race harness ------------------------------------------------------------------------------
def races(tmp: Path, roots: list[Path], keys: list[str], extra: bool = False) -> list[list[dict]]:
    """For each root in turn (a trial), materialize each of ``keys`` into it from its own
    process, all released at one instant; per trial, every process's result record (``key``,
    ``ok``, ``error``, ``message``). The same processes run every trial."""
    trials = []
    for t, root in enumerate(roots):
        sync = tmp / f"sync{t}"
        sync.mkdir()
        trials.append({"root": str(root), "sync_dir": str(sync)})
    procs = []
    for i, key in enumerate(keys):
        cfg = {
            "key": key,
            "extra": extra,
            "name": f"p{i}",
            "timeout": WAIT,
            "trials": [
                {**tr, "result": str(tmp / f"p{i}.t{t}.json")} for t, tr in enumerate(trials)
            ],
        }
        (tmp / f"p{i}.cfg.json").write_text(json.dumps(cfg))
        with open(tmp / f"p{i}.log", "wb") as log:  # a file: Dagster's logs never block
            procs.append(
                subprocess.Popen(
                    [sys.executable, str(RACE_SCRIPT), str(tmp / f"p{i}.cfg.json")],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
    try:
        for t, trial in enumerate(trials):
            sync = Path(trial["sync_dir"])
            deadline = time.monotonic() + WAIT
            while not all(
                (sync / f"p{i}.ready").exists() or (tmp / f"p{i}.t{t}.json").exists()
                for i in range(len(keys))
            ):
                dead = [i for i, p in enumerate(procs) if p.poll() not in (None, 0, 1)]
                assert not dead, f"process {dead[0]} died: {tail(tmp / f'p{dead[0]}.log')}"
                if time.monotonic() > deadline:
                    raise AssertionError(f"trial {t}: " + stuck(procs, tmp, sync, t))
                time.sleep(0.005)
            (sync / "go.tmp").write_text(f"{time.time() + 0.1:.6f}")
            os.replace(sync / "go.tmp", sync / "go")  # appears complete, never half-written
        for p in procs:
            p.wait(timeout=WAIT * len(trials))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    out = []
    for t in range(len(trials)):
        records = []
        for i in range(len(keys)):
            path = tmp / f"p{i}.t{t}.json"
            assert path.exists(), f"process {i} wrote no result: {tail(tmp / f'p{i}.log')}"
            records.append({"key": keys[i], **json.loads(path.read_text().splitlines()[-1])})
        out.append(records)
    return out


def stuck(procs: list[subprocess.Popen], tmp: Path, sync: Path, t: int) -> str:
    """Which processes missed trial ``t``'s barrier, with their Python stacks."""
    late = [
        i
        for i, p in enumerate(procs)
        if not (sync / f"p{i}.ready").exists() and not (tmp / f"p{i}.t{t}.json").exists()
    ]
    for i in late:
        if procs[i].poll() is None:
            procs[i].send_signal(signal.SIGUSR1)
    time.sleep(1)
    stacks = {i: tail(tmp / f"p{i}.log", 6000) for i in late}
    return f"processes {late} missed the barrier; their stacks:\n" + "\n".join(
        f"-- p{i}:\n{text}" for i, text in stacks.items()
    )


def tail(path: Path, chars: int = 3000) -> str:
    """The end of a process's log."""
    return path.read_text(errors="replace")[-chars:] if path.exists() else "(no log)"


def landed(root: Path, keys: list[str]) -> dict[str, list[int]]:
    """The ids stored for each key (sorted; duplicates kept)."""
    table = PartitionedNamespace.open(str(root / "events")).to_table()
    out = {}
    for key in keys:
        day = pa.scalar(rows_for(key)["day"][0].as_py(), pa.date32())
        ids = table.filter(pc.equal(table["day"], day))["id"].to_pylist()
        out[key] = sorted(ids)
    return out


def check_race(records: list[dict], root: Path, keys: list[str]) -> None:
    """Every run succeeded and every key's rows are stored exactly once."""
    failed = [r for r in records if not r["ok"]]
    assert not failed, "failed runs: " + "; ".join(
        f"{r['key']}: {r['error']}: {r['message'][:300]}" for r in failed
    )
    got = landed(root, keys)
    for key in keys:
        assert got[key] == sorted(rows_for(key)["id"].to_pylist()), key


def first_output_trials(tmp_path: Path, trials: int) -> tuple[int, int, list[str]]:
    """Run ``trials`` races of 6 first outputs; (failed runs, rows lost or duplicated, errors)."""
    roots = [tmp_path / f"root{t}" for t in range(trials)]
    failed = bad_rows = 0
    errors: list[str] = []
    for root, records in zip(roots, races(tmp_path, roots, KEYS), strict=True):
        failed += sum(not r["ok"] for r in records)
        errors += [f"{r['error']}: {r['message'][:200]}" for r in records if not r["ok"]]
        try:
            got = landed(root, KEYS)
        except PartitionedNamespaceError as e:
            errors.append(f"namespace unreadable: {e}")
            got = {k: [] for k in KEYS}
        for key in KEYS:
            ok = next(r["ok"] for r in records if r["key"] == key)
            want = sorted(rows_for(key)["id"].to_pylist()) if ok else []
            bad_rows += len(set(want) ^ set(got[key])) + len(got[key]) - len(set(got[key]))
    return failed, bad_rows, errors


# -- (A) concurrent first outputs ----------------------------------------------------------
@pytest.mark.multiprocess
def test_simultaneous_first_outputs_all_succeed(tmp_path: Path) -> None:
    """Six runs creating the namespace at the same instant all succeed, each key once
    (3 trials)."""
    roots = [tmp_path / f"root{t}" for t in range(3)]
    for root, records in zip(roots, races(tmp_path, roots, KEYS), strict=True):
        check_race(records, root, KEYS)


@pytest.mark.slow
def test_simultaneous_first_outputs_soak(tmp_path: Path) -> None:
    """30 trials of six simultaneous first outputs: no failed run, no row lost or doubled."""
    failed, bad_rows, errors = first_output_trials(tmp_path, 30)
    print(f"\n30 trials x 6 runs: {failed} failed runs, {bad_rows} rows lost/duplicated")
    assert (failed, bad_rows) == (0, 0), "\n".join(errors[:20])


@pytest.mark.multiprocess
def test_simultaneous_schema_evolution_all_succeed(tmp_path: Path) -> None:
    """Six runs that all add the same column at the same instant: the first adds it, the
    others find it added; every run succeeds and the column holds every key's values."""
    root = tmp_path / "root"
    seed = "2024-01-10"

    @dg.asset(name="events", partitions_def=DAILY, metadata={"partition_expr": "day"})
    def events() -> pa.Table:
        return rows_for(seed)

    io = LancePartitionedIOManager(root=str(root))
    assert dg.materialize([events], partition_key=seed, resources={"io_manager": io}).success
    [records] = races(tmp_path, [root], KEYS, extra=True)
    check_race(records, root, [*KEYS, seed])
    ns = PartitionedNamespace.open(str(root / "events"))
    assert ns.schema.names == ["id", "day", "value", "note"]
    notes = ns.to_table(filter="note IS NOT NULL")
    assert notes.num_rows == ROWS_PER_KEY * len(KEYS)


# -- (B) asset keys as paths -------------------------------------------------------------------
def tree(top: Path) -> set[str]:
    """Every file and directory under ``top`` (relative paths)."""
    return {str(p.relative_to(top)) for p in top.rglob("*")}


def io_at(tmp_path: Path) -> tuple[LancePartitionedIOManager, Path]:
    """An IO manager whose root is three levels below ``tmp_path`` (so '..' parts stay inside
    ``tmp_path``, where the test can see them)."""
    root = tmp_path / "a" / "b" / "root"
    root.mkdir(parents=True)
    return LancePartitionedIOManager(root=str(root)), root


@pytest.mark.parametrize(
    "key",
    [["..", "..", "x"], ["a", "..", "..", "..", "x"], [".", "x"], ["x", ""], ["x", "."]],
    ids=["up-up", "down-then-up", "dot", "empty", "trailing-dot"],
)
def test_output_with_unsafe_key_part_creates_nothing(tmp_path: Path, key: list[str]) -> None:
    """Dagster accepts these keys; the IO manager refuses them before writing anything, so the
    directory tree around the root is exactly as it was."""
    io, _root = io_at(tmp_path)

    @dg.asset(key=key, metadata={"lance/partition_by": ["day"]})
    def escaping() -> pa.Table:
        return rows_for("2024-01-01")

    before = tree(tmp_path)
    with pytest.raises(InvalidAssetKeyError) as info:
        dg.materialize([escaping], resources={"io_manager": io})
    assert tree(tmp_path) == before
    bad = next(p for p in key if p in ("..", ".", ""))
    assert info.value.part == bad and info.value.asset_key == repr(key)
    assert repr(bad) in str(info.value) and repr(key) in str(info.value)


@pytest.mark.parametrize("key", [["..", "..", "x"], ["../../x"], ["..\\..\\x"]])
def test_input_with_unsafe_key_reads_nothing_outside_root(tmp_path: Path, key: list[str]) -> None:
    """A namespace where an escaping key would point (outside the root) is never read."""
    io, _root = io_at(tmp_path)
    outside = PartitionedNamespace.create(
        str(tmp_path / "a" / "x"), rows_for("2024-01-01").schema, parse_partition_by(["day"])
    )
    outside.write(rows_for("2024-01-01"))
    loaded: list[pa.Table] = []

    @dg.asset(ins={"upstream": dg.AssetIn(key=dg.AssetKey(key))})
    def reader(upstream: pa.Table) -> None:
        loaded.append(upstream)

    before = tree(tmp_path)
    with pytest.raises(InvalidAssetKeyError) as info:
        source = dg.AssetSpec(key=key).with_io_manager_key("io_manager")
        dg.materialize([source, reader], resources={"io_manager": io})
    assert not loaded and tree(tmp_path) == before
    assert info.value.part == key[0]


@pytest.mark.parametrize(
    "part",
    [
        "..",
        ".",
        "",
        "a/b",
        "a\\b",
        "s3:",
        "C:",
        "a\x00b",
        "a\nb",
        "%2e%2e",
        " a",
        "é",
        ".hidden",
        "a.",
        "a..b",
        "a b",
        "a?b",
        "a#b",
    ],
)
def test_uri_for_refuses_unsafe_parts(tmp_path: Path, part: str) -> None:
    io = LancePartitionedIOManager(root=str(tmp_path))
    with pytest.raises(InvalidAssetKeyError) as info:
        io.uri_for(dg.AssetKey(["ok", part]))
    assert info.value.part == part


def test_uri_for_maps_safe_parts_unchanged(tmp_path: Path) -> None:
    io = LancePartitionedIOManager(root=str(tmp_path))
    key = dg.AssetKey(["raw", "my-source_2", "events.v1.2"])
    assert io.uri_for(key) == f"{tmp_path}/raw/my-source_2/events.v1.2"
    s3 = LancePartitionedIOManager(root="s3://bucket/warehouse/")
    assert s3.uri_for(dg.AssetKey(["a", "b"])) == "s3://bucket/warehouse/a/b"
    with pytest.raises(InvalidAssetKeyError):
        io.uri_for(dg.AssetKey([]))


# -- raw Lance / Arrow errors ------------------------------------------------------------------
def test_arrow_error_in_output_is_a_package_error(tmp_path: Path) -> None:
    """An output Arrow cannot convert fails the run with a StorageError naming the asset."""

    @dg.asset(metadata={"lance/partition_by": ["day"]})
    def mixed() -> pd.DataFrame:
        return pd.DataFrame({"day": [1, 2], "label": ["a", 1]})

    io = LancePartitionedIOManager(root=str(tmp_path / "root"))
    with pytest.raises(StorageError, match=r"asset mixed: .*ArrowTypeError") as info:
        dg.materialize([mixed], resources={"io_manager": io})
    assert isinstance(info.value.__cause__, pa.ArrowException)
    assert not (tmp_path / "root" / "mixed").exists()
