"""Reliability measurements: kill -9 during writes, concurrent writers, and bad inputs.

Run by hand::

    .venv/bin/python bench/bench_reliability.py [--at COMMIT] [--trials 200] [--writers 4 8]
        [--writes 10] [--sections kill concurrency bad-input] [--json results.json] [--seed 1]
        [--modes append overwrite_partitions tx_append tx_overwrite_partitions]

``--at COMMIT`` measures the package as committed there (``git archive`` into a scratch
directory put first on PYTHONPATH for this process and every writer process), not the
working tree (the ``tx_`` kill modes need a commit with ``ns.transaction()``; before it, pass
``--modes append overwrite_partitions``).

Prints Markdown tables (figures go to docs/explanation/reliability.md with the command that made
them); ``--json`` also writes every figure and per-trial record.
``tests/integration/test_reliability_slow.py`` runs the same functions with assertions
(``pytest -m slow``).

1. kill -9: a writer process makes one 50-partition write (40 existing partitions and 10 new
   ones, ``append`` or ``overwrite_partitions``, plain or in a transaction that first adds a
   column: ``tx_append``, ``tx_overwrite_partitions``) into a namespace holding a known state;
   the parent SIGKILLs it after a random delay. A fresh reader must then see exactly the old or
   exactly the new state, or, for a transaction killed between its two manifest commits, the
   new column (null) with exactly the old rows and partitions ("changes only");
   ``vacuum(grace=0)`` removes what the killed write left behind and the namespace must read
   identically afterwards, and accept a further write.
2. Concurrency: N writer processes x M writes each, into their own partitions, into one shared
   partition (appends), and overwriting one partition; every row accounted for.
3. Bad inputs: each input is refused with an exception; the exception class is recorded and
   the root fingerprinted before and after.

Writer processes are this file run with ``--child CONFIG.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import hashlib
import json
import os
import random
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def _rerun_at_commit() -> None:
    """Run this script again on the package as committed at ``--at REV``; exits."""
    argv = sys.argv[1:]
    i = argv.index("--at")
    rev, rest = argv[i + 1], argv[:i] + argv[i + 2 :]
    repo = Path(__file__).resolve().parents[1]
    sha = subprocess.run(
        ["git", "rev-parse", "--short", rev], cwd=repo, capture_output=True, text=True, check=True
    ).stdout.strip()
    src = tempfile.mkdtemp(prefix="bench_reliability_src_")
    try:
        archive = subprocess.run(
            ["git", "archive", sha, "dagster_lance_partitioned"],
            cwd=repo,
            capture_output=True,
            check=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", src], input=archive, check=True)
        env = dict(os.environ, DLP_BENCH_SOURCE=sha)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
        code = subprocess.run([sys.executable, str(Path(__file__).resolve()), *rest], env=env)
    finally:
        shutil.rmtree(src, ignore_errors=True)
    sys.exit(code.returncode)


if __name__ == "__main__" and "--at" in sys.argv:  # before the package is imported
    _rerun_at_commit()

import lance  # noqa: E402
import pyarrow as pa  # noqa: E402

import dagster_lance_partitioned  # noqa: E402
from dagster_lance_partitioned import (  # noqa: E402
    CommitConflictError,
    PartitionedNamespace,
    PartitionedNamespaceError,
    PartitionField,
)
from dagster_lance_partitioned.core.errors import clean_message  # noqa: E402

try:
    from dagster_lance_partitioned.core.ops.health import check_read_versions, find_orphans
except ImportError:  # --at a commit from before core/ was grouped into subpackages
    from dagster_lance_partitioned.core.health import (
        check_read_versions,
        find_orphans,
    )

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("part", pa.utf8()),
        pa.field("value", pa.float64()),
        pa.field("tag", pa.utf8()),
    ]
)
FIELDS = [PartitionField.identity("part")]
EXTRA = pa.field("extra", pa.int64())  # the column a transaction trial adds
WAIT = 300.0  # seconds; upper bound for any one subprocess step

Row = tuple  # (id, part, value, tag), the order of SCHEMA, then (extra,) once it was added


# ---------------------------------------------------------------------------------------------
# Rows and states


def make_rows(part: str, first_id: int, n: int, tag: str) -> list[Row]:
    """``n`` rows of partition ``part`` with consecutive ids from ``first_id``."""
    return [(first_id + i, part, float(first_id + i) / 2, tag) for i in range(n)]


def to_table(rows: Iterable[Row]) -> pa.Table:
    """Rows as an Arrow table of ``SCHEMA`` (4-tuples) or ``SCHEMA`` + ``EXTRA`` (5-tuples)."""
    rows = list(rows)
    fields = [*SCHEMA, EXTRA] if rows and len(rows[0]) == len(SCHEMA) + 1 else list(SCHEMA)
    cols = list(zip(*rows, strict=True)) if rows else [[] for _ in fields]
    return pa.table({f.name: pa.array(c, f.type) for f, c in zip(fields, cols, strict=True)})


def with_extra(rows: Iterable[Row], value: Callable[[Row], int | None]) -> list[Row]:
    """``rows`` with an ``extra`` value appended to each (``value(row)``)."""
    return [(*r[: len(SCHEMA)], value(r)) for r in rows]


def apply_write(state: Sequence[Row], data: Sequence[Row], mode: str) -> list[Row]:
    """The rows after applying one write to ``state`` (reference semantics)."""
    if mode == "append":
        return sorted([*state, *data])
    if mode == "overwrite_partitions":
        touched = {r[1] for r in data}
        return sorted([*(r for r in state if r[1] not in touched), *data])
    if mode == "overwrite":
        return sorted(data)
    raise ValueError(mode)


@dataclass(frozen=True)
class State:
    """What a fresh reader sees: manifest version, registered tables, rows sorted by id (the
    ``SCHEMA`` columns, then ``extra`` when the namespace has it)."""

    version: int
    partitions: tuple[tuple, ...]
    rows: tuple[Row, ...]
    columns: tuple[str, ...] = tuple(SCHEMA.names)


def read_state(uri: str, version: int | None = None) -> State:
    """Open the namespace (at ``version``) and read everything."""
    ns = PartitionedNamespace.open(uri, version=version)
    parts = tuple(
        sorted(
            (p["object_id"], p["location"], p["values"]["part"], p["read_version"])
            for p in ns.inspect.partitions()
        )
    )
    t = ns.to_table()
    columns = tuple(SCHEMA.names) + ((EXTRA.name,) if EXTRA.name in ns.schema.names else ())
    rows = sorted(zip(*(t[name].to_pylist() for name in columns), strict=True))
    return State(ns.version, parts, tuple(rows), columns)


def by_partition(rows: Iterable[Row]) -> dict[str, set[Row]]:
    """Rows grouped by partition value."""
    out: dict[str, set[Row]] = {}
    for r in rows:
        out.setdefault(r[1], set()).add(r)
    return out


def rows_lost(old: Sequence[Row], new: Sequence[Row], seen: Sequence[Row]) -> int:
    """Rows of ``old`` a reader no longer sees, not counting partitions that hold exactly their
    ``new`` content (replaced by the write)."""
    seen_set, seen_parts, new_parts = set(seen), by_partition(seen), by_partition(new)
    return sum(
        1
        for r in old
        if r not in seen_set and seen_parts.get(r[1], set()) != new_parts.get(r[1], set())
    )


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``, nearest rank; NaN when empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def new_namespace(uri: str, rows: Sequence[Row]) -> None:
    """Create a namespace at ``uri`` holding ``rows``."""
    ns = PartitionedNamespace.create(uri, schema=SCHEMA, partition_fields=FIELDS)
    if rows:
        ns.write(to_table(rows), mode="append")


# ---------------------------------------------------------------------------------------------
# Child processes


def _count_manifest_retries() -> list[int]:
    """Count failed ``__manifest`` commit attempts in this process (the namespace retries them);
    the real ``lance.LanceDataset.commit`` still does every commit."""
    counter = [0]
    original = lance.LanceDataset.commit

    def commit(*args: Any, **kwargs: Any) -> Any:
        try:
            return original(*args, **kwargs)
        except Exception:
            base = args[0] if args else kwargs.get("base_uri")
            if str(getattr(base, "uri", base)).rstrip("/").endswith("__manifest"):
                counter[0] += 1
            raise

    lance.LanceDataset.commit = staticmethod(commit)
    return counter


def _child_kill(cfg: dict) -> None:
    """One write; prints ``ready``, waits for ``go`` on stdin, prints ``tables <t>`` once every
    partition table is written and ``committed <version> <t>`` when the write returned, then
    blocks until killed (or stdin closes).

    A ``tx_<mode>`` write is ``with ns.transaction() as tx: tx.add_columns(EXTRA);
    tx.write(rows, mode=<mode>)``; it also prints ``changes <t>`` once its first manifest
    commit (the new column, no data) returned, before the data's commit."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from helpers.faults import CommitHooks  # the moment between the table and manifest commits

    class RootHooks(CommitHooks):
        """Hooks matched by root: a transaction's write commits through a
        ``ChangesFirstStore`` wrapping the namespace's store, not through that store."""

        def hook_of(self, store: object) -> Any:
            root = getattr(store, "root", None)
            return next((h for s, h in self._hooks if getattr(s, "root", None) == root), None)

    if cfg["mode"].startswith("tx_"):  # (imported here: --at a commit before transactions)
        try:
            from dagster_lance_partitioned.core.manifest.changes import ChangesFirstStore
        except ImportError:  # --at a commit from before core/ was grouped into subpackages
            from dagster_lance_partitioned.core.changes import ChangesFirstStore

        commit_changes = ChangesFirstStore.commit_changes

        def reported_commit_changes(store: ChangesFirstStore) -> Any:
            first = store.made is None
            made = commit_changes(store)
            if first:
                print(f"changes {time.time()}", flush=True)
            return made

        ChangesFirstStore.commit_changes = reported_commit_changes  # type: ignore[method-assign]

    ns = PartitionedNamespace.open(cfg["uri"])
    table = to_table(tuple(r) for r in cfg["rows"])
    RootHooks.install()(ns, lambda pending: print(f"tables {time.time()}", flush=True))
    mode = cfg["mode"].removeprefix("tx_")
    print("ready", flush=True)
    sys.stdin.readline()
    if cfg["mode"].startswith("tx_"):
        with ns.transaction() as tx:
            tx.add_columns(EXTRA)
            tx.write(table, mode=mode)
        version = tx.result.manifest_version
    else:
        version = ns.write(table, mode=mode).manifest_version
    print(f"committed {version} {time.time()}", flush=True)
    sys.stdin.read()


def _child_writer(cfg: dict) -> None:
    """A list of writes started together with other writers (``go`` file); one JSON result."""
    retries = _count_manifest_retries()
    ns = PartitionedNamespace.open(cfg["uri"])
    tables = [(to_table(tuple(r) for r in w["rows"]), w["mode"]) for w in cfg["writes"]]
    Path(cfg["ready"]).touch()
    while not os.path.exists(cfg["go"]):
        time.sleep(0.001)
    records = []
    for i, (table, mode) in enumerate(tables):
        before = retries[0]
        t0 = time.time()
        record: dict[str, Any] = {"i": i}
        try:
            result = ns.write(table, mode=mode)
            record.update(ok=True, manifest_version=result.manifest_version)
        except Exception as e:
            record.update(ok=False, error=type(e).__name__, message=clean_message(e)[:300])
        record.update(t0=t0, t1=time.time(), retries=retries[0] - before)
        records.append(record)
    Path(cfg["result"]).write_text(json.dumps(records))


def child_main(config_path: str) -> None:
    """Entry point of a writer process."""
    cfg = json.loads(Path(config_path).read_text())
    {"kill": _child_kill, "writer": _child_writer}[cfg["kind"]](cfg)


def _spawn(workdir: Path, name: str, cfg: dict, stdin: bool = False) -> subprocess.Popen:
    path = workdir / f"{name}.json"
    path.write_text(json.dumps(cfg))
    with open(workdir / f"{name}.stderr", "wb") as err:
        return subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--child", str(path)],
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stderr=err,
            text=True,
        )


def _stderr(workdir: Path, name: str) -> str:
    path = workdir / f"{name}.stderr"
    return path.read_text(errors="replace")[-3000:] if path.exists() else ""


def _readline(proc: subprocess.Popen, timeout: float) -> str:
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    if not ready:
        raise TimeoutError("writer process sent nothing")
    return proc.stdout.readline()


# ---------------------------------------------------------------------------------------------
# 1. kill -9 trials

KILL_EXISTING, KILL_NEW, KILL_ROWS = 40, 10, 20  # partitions kept / created by the write; rows
CALIBRATION_RUNS = 3  # uninterrupted writes per mode, to time it
# plain writes, and the same writes in a transaction that first adds the column EXTRA
KILL_MODES = ("append", "overwrite_partitions", "tx_append", "tx_overwrite_partitions")
OUTCOMES = ("old", "changes only", "new", "MIXED", "ERROR")


@dataclass
class KillTrial:
    """One kill: when (``bucket``, ``delay``), where the writer was (``phase``), what a reader
    saw (``outcome``), what vacuum found and removed, and what was left after it."""

    trial: int
    mode: str
    bucket: str
    delay: float
    phase: str
    outcome: str = ""
    versions_added: int = 0
    rows_lost: int = 0
    orphan_dirs: int = 0
    uncommitted_versions: int = 0
    vacuum_orphans_removed: int = 0
    vacuum_orphans_kept: int = 0
    vacuum_kept_without_files: int = 0
    vacuum_files_removed: int = 0
    vacuum_bytes_removed: int = 0
    orphan_dirs_after_vacuum: int = 0
    uncommitted_versions_after_vacuum: int = 0
    unchanged_after_vacuum: bool = False
    version_issues_after_vacuum: int = 0
    follow_up_ok: bool = False
    detail: str = ""


@dataclass
class KillReport:
    """Figures of a kill -9 run (sums over trials)."""

    trials: int
    seed: int
    write_ms_median: float
    tables_written_ms_median: float
    commit_ms_median: float
    wall_seconds: float
    outcomes: dict[str, int]
    phases: dict[str, dict[str, int]]
    buckets: dict[str, dict[str, int]]
    modes: dict[str, dict[str, int]]  # outcomes per mode, plus "rows lost" and "follow-up ok"
    timings_ms: dict[str, dict[str, float]]  # per mode: medians of "tables", "write"
    mixed: int
    errors: int
    rows_lost: int
    orphan_dirs: int
    uncommitted_versions: int
    vacuum_orphans_removed: int
    vacuum_orphans_kept: int
    vacuum_kept_without_files: int
    vacuum_files_removed: int
    vacuum_bytes_removed: int
    orphan_dirs_after_vacuum: int
    uncommitted_versions_after_vacuum: int
    unchanged_after_vacuum: int
    version_issues_after_vacuum: int
    follow_up_ok: int
    records: list[KillTrial] = field(default_factory=list)


def _kill_data(mode: str) -> tuple[list[Row], list[Row]]:
    """(old state, the write's rows): 40 partitions in the old state, 50 written; a
    transaction's rows carry ``extra`` (their id times 3, never null)."""
    old = [
        r for p in range(KILL_EXISTING) for r in make_rows(f"p{p:02d}", p * 1000, KILL_ROWS, "old")
    ]
    new = [
        r
        for p in range(KILL_EXISTING + KILL_NEW)
        for r in make_rows(f"p{p:02d}", 100_000 + p * 1000, KILL_ROWS, mode)
    ]
    if mode.startswith("tx_"):
        new = with_extra(new, lambda r: r[0] * 3)
    return sorted(old), new


def _expected(mode: str, old: list[Row], data: list[Row]) -> tuple[list[Row] | None, list[Row]]:
    """(the rows a transaction's first commit leaves: ``old`` with ``extra`` null, or None
    for a plain write; the rows after the whole write)."""
    if not mode.startswith("tx_"):
        return None, apply_write(old, data, mode)
    base = with_extra(old, lambda r: None)
    return base, apply_write(base, data, mode.removeprefix("tx_"))


def _read_until(proc: subprocess.Popen, word: str, workdir: Path) -> list[str]:
    lines: list[str] = []
    while not lines or not lines[-1].startswith(word):
        line = _readline(proc, WAIT)
        if not line:
            raise RuntimeError(f"writer failed:\n{_stderr(workdir, 'killer')}")
        lines.append(line.strip())
    return lines


def _run_writer_once(
    workdir: Path,
    uri: str,
    mode: str,
    rows: list[Row],
    delay: float | None,
    after_tables: bool = False,
) -> tuple[list[str], float]:
    """Start a kill-writer on ``uri`` and SIGKILL it ``delay`` s after go, or after it reported
    every table written (``after_tables``); ``delay`` None lets it commit. Returns the words
    it printed after go, and the go time."""
    proc = _spawn(workdir, "killer", {"kind": "kill", "uri": uri, "mode": mode, "rows": rows}, True)
    try:
        if _readline(proc, WAIT).strip() != "ready":
            raise RuntimeError(f"writer did not start:\n{_stderr(workdir, 'killer')}")
        t_go = time.time()
        proc.stdin.write("go\n")
        proc.stdin.flush()
        if delay is None:
            lines = _read_until(proc, "committed", workdir)
            proc.stdin.close()
            proc.wait(timeout=WAIT)
            return lines, t_go
        seen: list[str] = []
        start = t_go
        if after_tables:
            seen = _read_until(proc, "tables", workdir)
            start = time.time()
        time.sleep(max(0.0, start + delay - time.time()))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=WAIT)
        return " ".join(seen).split() + proc.stdout.read().split(), t_go
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdin, proc.stdout):
            if stream and not stream.closed:
                stream.close()


PHASES = (
    "writing tables",
    "tables written, write not returned",
    "changes committed, write not returned",  # a transaction's first commit returned
    "after the write returned",
)


def _phase(out: list[str]) -> str:
    if "committed" in out:
        return PHASES[3]
    if "changes" in out:
        return PHASES[2]
    if "tables" in out:
        return PHASES[1]
    return PHASES[0]


def _calibrate(
    workdir: Path, template: str, modes: Sequence[str], runs: int
) -> dict[str, tuple[float, float]]:
    """Per mode, median seconds from go to 'every table written' and to 'write returned'
    (``runs`` uninterrupted writes, each checked to produce the new state)."""
    tables: dict[str, list[float]] = {m: [] for m in modes}
    done: dict[str, list[float]] = {m: [] for m in modes}
    uri = str(workdir / "calibrate")
    for _ in range(runs):
        for mode in modes:
            shutil.rmtree(uri, ignore_errors=True)
            shutil.copytree(template, uri)
            old, data = _kill_data(mode)
            lines, t_go = _run_writer_once(workdir, uri, mode, data, None)
            stamps = {ln.split()[0]: float(ln.split()[-1]) for ln in lines}
            if "tables" not in stamps or (mode.startswith("tx_") and "changes" not in stamps):
                raise AssertionError(f"the {mode} writer did not report its commits: {lines}")
            tables[mode].append(stamps["tables"] - t_go)
            done[mode].append(stamps["committed"] - t_go)
            if list(read_state(uri).rows) != _expected(mode, old, data)[1]:
                raise AssertionError(f"an uninterrupted {mode} did not produce the new state")
    shutil.rmtree(uri, ignore_errors=True)
    return {m: (statistics.median(tables[m]), statistics.median(done[m])) for m in modes}


def run_kill_trials(
    trials: int,
    workdir: Path,
    seed: int = 1,
    log: Callable[[str], None] | None = None,
    modes: Sequence[str] = KILL_MODES,
) -> KillReport:
    """``trials`` SIGKILLed 50-partition writes, each on a fresh copy of the same old state;
    the trials cycle through ``modes`` (see ``KILL_MODES``).

    Half the kills of each mode come after a delay uniform over [0, 1.2 x the mode's median
    write duration] from go; the other half once the writer reported every table written (it
    is then about to commit the manifest), after a delay uniform over [0, 2 x the mode's
    median time from there to the write returning], so that kills land around the manifest
    commit(s)."""
    unknown = sorted(set(modes) - set(KILL_MODES))
    if unknown or not modes:
        raise ValueError(f"kill modes {unknown or modes!r}: use some of {KILL_MODES}")
    rng = random.Random(seed)
    workdir.mkdir(parents=True, exist_ok=True)
    template = str(workdir / "template")
    shutil.rmtree(template, ignore_errors=True)
    old, _ = _kill_data("append")
    new_namespace(template, old)
    old_state = read_state(template)
    timings = _calibrate(workdir, template, modes, CALIBRATION_RUNS)
    started = time.perf_counter()
    records = []
    uri = str(workdir / "trial")
    for trial in range(trials):
        mode = modes[trial % len(modes)]
        _, data = _kill_data(mode)
        changes_only, new_rows = _expected(mode, old, data)
        t_tables, t_done = timings[mode]
        after_tables = (trial // len(modes)) % 2 == 1
        if after_tables:
            t_commit = max(t_done - t_tables, 0.001)
            bucket, delay = "after tables written", rng.uniform(0, 2 * t_commit)
        else:
            bucket, delay = "uniform from go", rng.uniform(0, 1.2 * t_done)
        shutil.rmtree(uri, ignore_errors=True)
        shutil.copytree(template, uri)
        out, _ = _run_writer_once(workdir, uri, mode, data, delay, after_tables)
        rec = KillTrial(trial, mode, bucket, delay, _phase(out))
        _inspect_trial(rec, uri, old_state, old, new_rows, changes_only)
        records.append(rec)
        if log and (trial + 1) % 20 == 0:
            log(f"  {trial + 1}/{trials} kill trials, {time.perf_counter() - started:.0f} s")
    wall = time.perf_counter() - started
    shutil.rmtree(uri, ignore_errors=True)
    return _kill_report(records, seed, timings, wall)


def _has_files(path: str) -> bool:
    return any(names for _dir, _dirs, names in os.walk(path))


def _classify(
    state: State,
    old_state: State,
    new: list[Row],
    changes_only: list[Row] | None,
) -> str:
    """old / changes only (a transaction's schema change without its data) / new / MIXED."""
    if (state.columns, state.rows, state.partitions) == (
        old_state.columns,
        old_state.rows,
        old_state.partitions,
    ):
        return "old"
    if list(state.rows) == new:
        return "new"
    if (
        changes_only is not None
        and EXTRA.name in state.columns
        and list(state.rows) == changes_only
        and state.partitions == old_state.partitions
    ):
        return "changes only"
    return "MIXED"


def _inspect_trial(
    rec: KillTrial,
    uri: str,
    old_state: State,
    old: list[Row],
    new: list[Row],
    changes_only: list[Row] | None = None,
) -> None:
    """Classify what a fresh reader sees after a kill; vacuum; check the namespace again."""
    try:
        state = read_state(uri)
    except Exception as e:
        rec.outcome, rec.detail = "ERROR", f"read: {type(e).__name__}: {clean_message(e)[:200]}"
        return
    rec.outcome = _classify(state, old_state, new, changes_only)
    rec.versions_added = state.version - old_state.version
    if rec.outcome == "MIXED":
        rec.detail = f"version {state.version}, columns {state.columns}, {len(state.rows)} rows"
    width = len(SCHEMA)  # rows are lost or not whatever the extra column holds
    rec.rows_lost = rows_lost(
        [r[:width] for r in old], [r[:width] for r in new], [r[:width] for r in state.rows]
    )
    try:
        ns = PartitionedNamespace.open(uri)
        rec.orphan_dirs = len(find_orphans(ns))
        rec.uncommitted_versions = sum(len(u.versions) for u in check_read_versions(ns, None)[1])
        vac = ns.maintenance.vacuum(grace=dt.timedelta(0))
        rec.vacuum_orphans_removed = len(vac.orphans_removed)
        rec.vacuum_orphans_kept = len(vac.orphans_kept)
        rec.vacuum_kept_without_files = sum(
            not _has_files(os.path.join(uri, loc)) for loc in vac.orphans_kept
        )
        rec.vacuum_files_removed = vac.files_removed
        rec.vacuum_bytes_removed = vac.bytes_removed
        after = read_state(uri)  # the manifest version moves (vacuum announces its deletions)
        rec.unchanged_after_vacuum = (after.columns, after.partitions, after.rows) == (
            state.columns,
            state.partitions,
            state.rows,
        )
        ns.refresh()
        rec.orphan_dirs_after_vacuum = len(find_orphans(ns))
        issues, uncommitted = check_read_versions(ns, None)
        rec.version_issues_after_vacuum = len(issues)
        rec.uncommitted_versions_after_vacuum = sum(len(u.versions) for u in uncommitted)
        extra = [*make_rows("p00", 900_000, 3, "after"), *make_rows("p77", 910_000, 3, "after")]
        if EXTRA.name in state.columns:  # the follow-up rows fit the schema the kill left
            extra = with_extra(extra, lambda r: -r[0])
        ns.write(to_table(extra), mode="append")
        rec.follow_up_ok = list(read_state(uri).rows) == apply_write(state.rows, extra, "append")
    except Exception as e:
        rec.detail += f" after-kill checks: {type(e).__name__}: {clean_message(e)[:200]}"


def _kill_report(
    records: list[KillTrial],
    seed: int,
    timings: dict[str, tuple[float, float]],
    wall: float,
) -> KillReport:
    phases: dict[str, Counter] = {}
    buckets: dict[str, Counter] = {}
    modes: dict[str, Counter] = {m: Counter() for m in timings}
    for r in records:
        phases.setdefault(r.phase, Counter())[r.outcome] += 1
        buckets.setdefault(r.bucket, Counter())[r.outcome] += 1
        per_mode = modes.setdefault(r.mode, Counter())
        per_mode[r.outcome] += 1
        per_mode["trials"] += 1
        per_mode["rows lost"] += r.rows_lost
        per_mode["follow-up ok"] += int(r.follow_up_ok)
    outcomes = Counter(r.outcome for r in records)
    t_tables = statistics.median(t for t, _ in timings.values())
    t_done = statistics.median(d for _, d in timings.values())

    def total(name: str) -> int:
        return sum(int(getattr(r, name)) for r in records)

    return KillReport(
        trials=len(records),
        seed=seed,
        write_ms_median=t_done * 1000,
        tables_written_ms_median=t_tables * 1000,
        commit_ms_median=(t_done - t_tables) * 1000,
        wall_seconds=wall,
        outcomes=dict(outcomes),
        phases={k: dict(v) for k, v in phases.items()},
        buckets={k: dict(v) for k, v in buckets.items()},
        modes={k: dict(v) for k, v in modes.items()},
        timings_ms={m: {"tables": t * 1000, "write": d * 1000} for m, (t, d) in timings.items()},
        mixed=outcomes["MIXED"],
        errors=outcomes["ERROR"],
        rows_lost=total("rows_lost"),
        orphan_dirs=total("orphan_dirs"),
        uncommitted_versions=total("uncommitted_versions"),
        vacuum_orphans_removed=total("vacuum_orphans_removed"),
        vacuum_orphans_kept=total("vacuum_orphans_kept"),
        vacuum_kept_without_files=total("vacuum_kept_without_files"),
        vacuum_files_removed=total("vacuum_files_removed"),
        vacuum_bytes_removed=total("vacuum_bytes_removed"),
        orphan_dirs_after_vacuum=total("orphan_dirs_after_vacuum"),
        uncommitted_versions_after_vacuum=total("uncommitted_versions_after_vacuum"),
        unchanged_after_vacuum=total("unchanged_after_vacuum"),
        version_issues_after_vacuum=total("version_issues_after_vacuum"),
        follow_up_ok=total("follow_up_ok"),
        records=records,
    )


def kill_markdown(rep: KillReport) -> str:
    """The kill -9 figures as Markdown tables."""
    n = rep.trials
    timing = "; ".join(
        f"{m}: {t['write']:.0f} ms, every table written after {t['tables']:.0f} ms"
        for m, t in rep.timings_ms.items()
    )
    has_tx = any(m.startswith("tx_") for m in rep.modes)
    lines = [
        f"Each trial: a writer process makes one {KILL_EXISTING + KILL_NEW}-partition write "
        f"({KILL_EXISTING} existing partitions, {KILL_NEW} new, {KILL_ROWS} rows each; the "
        f"modes {', '.join(rep.modes)} take turns) and is SIGKILLed."
        + (
            f" A `tx_` mode is `with ns.transaction() as tx: tx.add_columns(pa.field("
            f'"{EXTRA.name}", pa.int64())); tx.write(rows, mode=...)`, the rows carrying '
            f"non-null `{EXTRA.name}` values: two manifest commits, the new column and then "
            "the data."
            if has_tx
            else ""
        )
        + f" Uninterrupted, the write returns (median, from go) after {timing}.",
        "",
        "| figure | value |",
        "|---|---|",
        f"| trials | {n} |",
        f"| killed before the manifest commit: reader sees exactly the old state "
        f"| {rep.outcomes.get('old', 0)} |",
    ]
    if has_tx:
        lines.append(
            "| transaction killed between its two commits: reader sees the new column (null) "
            f"and exactly the old rows and partitions | {rep.outcomes.get('changes only', 0)} |"
        )
    lines += [
        f"| killed after the manifest commit: reader sees exactly the new state "
        f"| {rep.outcomes.get('new', 0)} |",
        f"| MIXED states (neither) | {rep.mixed} |",
        f"| unreadable after the kill | {rep.errors} |",
        f"| rows lost | {rep.rows_lost} |",
        f"| orphan table directories left by the kills (find_orphans) | {rep.orphan_dirs} |",
        f"| unregistered partition-table versions left (check_read_versions) "
        f"| {rep.uncommitted_versions} |",
        f"| orphan directories removed by vacuum(grace=0) | {rep.vacuum_orphans_removed} |",
        f"| orphan directories vacuum(grace=0) kept (of which holding no file) "
        f"| {rep.vacuum_orphans_kept} ({rep.vacuum_kept_without_files}) |",
        f"| unreferenced files removed by vacuum | {rep.vacuum_files_removed} "
        f"({rep.vacuum_bytes_removed / 1e6:.2f} MB with the orphan directories) |",
        f"| orphan directories left after vacuum | {rep.orphan_dirs_after_vacuum} |",
        f"| unregistered table versions left after vacuum | "
        f"{rep.uncommitted_versions_after_vacuum} |",
        f"| reads identical after vacuum (stored data unchanged) "
        f"| {rep.unchanged_after_vacuum}/{n} |",
        f"| registered versions unreadable after vacuum | {rep.version_issues_after_vacuum} |",
        f"| next append after vacuum exact | {rep.follow_up_ok}/{n} |",
        f"| wall time | {rep.wall_seconds:.0f} s ({rep.wall_seconds / max(n, 1):.2f} s/trial) |",
        "",
        "| mode | trials | old state | changes only | new state | MIXED | unreadable "
        "| rows lost | next append exact |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for m, t in rep.modes.items():
        changes = t.get("changes only", 0) if m.startswith("tx_") else "–"
        lines.append(
            f"| {m} | {t.get('trials', 0)} | {t.get('old', 0)} | {changes} | {t.get('new', 0)} "
            f"| {t.get('MIXED', 0)} | {t.get('ERROR', 0)} | {t.get('rows lost', 0)} "
            f"| {t.get('follow-up ok', 0)}/{t.get('trials', 0)} |"
        )
    lines += [
        "",
        "| kill | old state | changes only | new state | MIXED | unreadable |",
        "|---|---|---|---|---|---|",
    ]
    rows = [(f"writer was {p}", rep.phases[p]) for p in PHASES if p in rep.phases]
    rows += [(f"delay {b}", t) for b, t in sorted(rep.buckets.items())]
    for label, t in rows:
        lines.append(
            f"| {label} | {t.get('old', 0)} | {t.get('changes only', 0)} | {t.get('new', 0)} "
            f"| {t.get('MIXED', 0)} | {t.get('ERROR', 0)} |"
        )
    bad = [r for r in rep.records if r.outcome in ("MIXED", "ERROR") or r.detail]
    for r in bad[:10]:
        lines.append(f"\n- trial {r.trial} ({r.mode}, {r.phase}): {r.outcome} {r.detail}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# 2. Concurrency

SCENARIOS = ("own partitions, append", "one shared partition, append", "one partition, overwrite")


@dataclass
class ConcurrencyResult:
    """Figures of one concurrency scenario."""

    scenario: str
    writers: int
    writes_each: int
    rows_per_write: int
    commits: int
    conflicts: int
    other_errors: int
    manifest_retries: int
    manifest_versions_added: int
    rows_expected: int
    rows_seen: int
    rows_lost: int
    rows_unexpected: int
    versions_checked: int
    versions_wrong: int
    latency_p50_ms: float
    latency_p99_ms: float
    wall_seconds: float
    commits_per_second: float
    errors: list[str] = field(default_factory=list)


def _plans(scenario: str, writers: int, writes: int, rows: int) -> list[list[tuple[list, str]]]:
    plans = []
    for w in range(writers):
        plan = []
        for i in range(writes):
            first = 1_000_000 + w * 100_000 + i * 1000
            if scenario == SCENARIOS[0]:
                plan.append((make_rows(f"w{w}", first, rows, f"w{w}.{i}"), "append"))
            elif scenario == SCENARIOS[1]:
                plan.append((make_rows("shared", first, rows, f"w{w}.{i}"), "append"))
            else:
                plan.append((make_rows("hot", first, rows, f"w{w}.{i}"), "overwrite_partitions"))
        plans.append(plan)
    return plans


def run_concurrency(
    scenario: str, writers: int, writes: int, workdir: Path, rows: int = 10
) -> ConcurrencyResult:
    """``writers`` processes, started together, each making ``writes`` writes of ``rows`` rows;
    checks the final rows and every committed version against the writes that succeeded."""
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    uri = str(workdir / "ns")
    initial = sorted([*make_rows("base", 0, 5, "init"), *make_rows("hot", 100, 5, "init")])
    new_namespace(uri, initial)
    version0 = read_state(uri).version
    plans = _plans(scenario, writers, writes, rows)
    go = workdir / "go"
    procs = []
    for w, plan in enumerate(plans):
        cfg = {
            "kind": "writer",
            "uri": uri,
            "writes": [{"rows": data, "mode": mode} for data, mode in plan],
            "ready": str(workdir / f"w{w}.ready"),
            "go": str(go),
            "result": str(workdir / f"w{w}.result.json"),
        }
        procs.append(_spawn(workdir, f"w{w}", cfg))
    try:
        deadline = time.monotonic() + WAIT
        while not all((workdir / f"w{w}.ready").exists() for w in range(writers)):
            if any(p.poll() not in (None, 0) for p in procs) or time.monotonic() > deadline:
                raise RuntimeError(f"a writer did not start:\n{_stderr(workdir, 'w0')}")
            time.sleep(0.01)
        go.touch()
        for w, p in enumerate(procs):
            if p.wait(timeout=WAIT * 4) != 0:
                raise RuntimeError(
                    f"writer w{w} exited {p.returncode}:\n{_stderr(workdir, f'w{w}')}"
                )
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    results = [json.loads((workdir / f"w{w}.result.json").read_text()) for w in range(writers)]
    return _concurrency_result(
        scenario, writers, writes, rows, uri, version0, initial, plans, results
    )


def _concurrency_result(
    scenario: str,
    writers: int,
    writes: int,
    rows: int,
    uri: str,
    version0: int,
    initial: list[Row],
    plans: list[list[tuple[list, str]]],
    results: list[list[dict]],
) -> ConcurrencyResult:
    done = [
        (rec["manifest_version"], [tuple(r) for r in plans[w][rec["i"]][0]], plans[w][rec["i"]][1])
        for w, recs in enumerate(results)
        for rec in recs
        if rec["ok"]
    ]
    failed = [rec for recs in results for rec in recs if not rec["ok"]]
    conflicts = sum(rec["error"] == CommitConflictError.__name__ for rec in failed)
    errors = sorted({f"{rec['error']}: {rec['message'][:150]}" for rec in failed})
    expected = sorted(initial)
    versions_wrong = 0
    for version, data, mode in sorted(done):
        expected = apply_write(expected, data, mode)
        # the rows as of that version are exactly the serial application up to it
        if list(read_state(uri, version).rows) != expected:
            versions_wrong += 1
    final = read_state(uri)
    seen = list(final.rows)
    latencies = sorted(
        (rec["t1"] - rec["t0"]) * 1000 for recs in results for rec in recs if rec["ok"]
    )
    t0 = min(rec["t0"] for recs in results for rec in recs)
    t1 = max(rec["t1"] for recs in results for rec in recs)
    return ConcurrencyResult(
        scenario=scenario,
        writers=writers,
        writes_each=writes,
        rows_per_write=rows,
        commits=len(done),
        conflicts=conflicts,
        other_errors=len(failed) - conflicts,
        manifest_retries=sum(rec["retries"] for recs in results for rec in recs),
        manifest_versions_added=final.version - version0,
        rows_expected=len(expected),
        rows_seen=len(seen),
        rows_lost=len(set(expected) - set(seen)),
        rows_unexpected=sum((Counter(seen) - Counter(expected)).values()),
        versions_checked=len(done),
        versions_wrong=versions_wrong,
        latency_p50_ms=percentile(latencies, 0.5),
        latency_p99_ms=percentile(latencies, 0.99),
        wall_seconds=t1 - t0,
        commits_per_second=len(done) / (t1 - t0) if t1 > t0 else float("nan"),
        errors=errors,
    )


def concurrency_markdown(results: list[ConcurrencyResult]) -> str:
    """The concurrency figures as one Markdown table."""
    lines = [
        "| scenario | writers x writes | commits | CommitConflictError | other errors "
        "| manifest retries | manifest versions added | rows expected / seen | rows lost "
        "| versions exact | p50 / p99 write ms | commits/s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r.scenario} | {r.writers} x {r.writes_each} | {r.commits} | {r.conflicts} "
            f"| {r.other_errors} | {r.manifest_retries} | {r.manifest_versions_added} "
            f"| {r.rows_expected} / {r.rows_seen} "
            f"| {r.rows_lost} | {r.versions_checked - r.versions_wrong}/{r.versions_checked} "
            f"| {r.latency_p50_ms:.0f} / {r.latency_p99_ms:.0f} | {r.commits_per_second:.1f} |"
        )
    for r in results:
        for e in r.errors[:3]:
            lines.append(f"\n- {r.scenario}, {r.writers} writers: {e}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# 3. Bad inputs


@dataclass
class BadInputResult:
    """What one bad input gave: the exception (None: accepted), whether it is one of this
    package's errors, and whether the reader-visible state and the files stayed the same."""

    case: str
    exception: str | None
    package_error: bool
    message: str
    reader_state_unchanged: bool
    files_unchanged: bool
    files_added: int = 0
    files_removed: int = 0
    files_modified: int = 0


@dataclass
class BadInputContext:
    """A fresh namespace for one case, and a directory outside its root."""

    uri: str
    outside: str

    @property
    def ns(self) -> PartitionedNamespace:
        return PartitionedNamespace.open(self.uri)

    @property
    def manifest(self) -> str:
        return os.path.join(self.uri, "__manifest")


def fingerprint_files(*roots: str) -> dict[str, str]:
    """sha1 of every file under ``roots``."""
    files = {}
    for root in roots:
        for dirpath, _dirs, names in os.walk(root):
            for name in names:
                path = os.path.join(dirpath, name)
                with open(path, "rb") as fh:
                    files[path] = hashlib.sha1(fh.read()).hexdigest()
    return files


def reader_view(uri: str) -> Any:
    """What a fresh reader sees, or the exception class it gets."""
    try:
        return read_state(uri)
    except Exception as e:
        return f"unreadable: {type(e).__name__}"


def _exception_name(e: BaseException) -> str:
    cls = type(e)
    if cls.__module__.startswith("dagster_lance_partitioned"):
        return cls.__name__
    return f"{cls.__module__}.{cls.__qualname__}".removeprefix("builtins.")


def _write(ctx: BadInputContext, table: pa.Table, mode: str = "append", **kw: Any) -> None:
    ctx.ns.write(table, mode=mode, **kw)


def _open_read_write(ctx: BadInputContext) -> None:
    ns = PartitionedNamespace.open(ctx.uri)
    ns.to_table()
    ns.write(to_table(make_rows("p00", 500_000, 2, "bad")), mode="append")


def _latest_manifest_file(ctx: BadInputContext) -> Path:
    return max(
        (Path(ctx.manifest) / "_versions").glob("*.manifest"), key=lambda p: p.stat().st_mtime
    )


def _corrupt_latest_manifest(ctx: BadInputContext) -> None:
    path = _latest_manifest_file(ctx)
    path.write_bytes(b"\x00garbage" * (path.stat().st_size // 8 + 1))


def _delete_manifest_data(ctx: BadInputContext) -> None:
    for path in (Path(ctx.manifest) / "data").glob("*"):
        path.unlink()


def _point_outside(ctx: BadInputContext, absolute: bool) -> None:
    """Re-register partition p00 at a copy of its table outside the root."""
    ns = ctx.ns
    entry = next(p for p in ns.inspect.partitions() if p["values"]["part"] == "p00")
    target = os.path.join(ctx.outside, "stolen.lance")
    shutil.copytree(os.path.join(ctx.uri, entry["location"]), target)
    location = target if absolute else os.path.relpath(target, ctx.uri)
    lance.dataset(ctx.manifest).update(
        {"location": f"'{location}'"}, where=f"object_id = '{entry['object_id']}'"
    )


def _vacuum_and_cleanup(ctx: BadInputContext) -> None:
    ns = ctx.ns
    ns.maintenance.vacuum(grace=dt.timedelta(0))
    ns.maintenance.cleanup(older_than=dt.timedelta(0), keep_manifest_versions=1)


def _field_id(ctx: BadInputContext) -> str:
    return ctx.ns.current_spec.fields[0].field_id


Case = tuple[str, Callable[[BadInputContext], None] | None, Callable[[BadInputContext], None]]

BAD_INPUTS: list[Case] = [
    (
        "wrong column type (value as list<int64>)",
        None,
        lambda c: _write(
            c,
            pa.table(
                {
                    "id": pa.array([1], pa.int64()),
                    "part": ["p00"],
                    "value": pa.array([[1]], pa.list_(pa.int64())),
                    "tag": ["x"],
                }
            ),
        ),
    ),
    (
        "missing non-nullable column (no id)",
        None,
        lambda c: _write(c, to_table(make_rows("p00", 500_000, 2, "bad")).drop_columns(["id"])),
    ),
    (
        "NULL in non-nullable column id",
        None,
        lambda c: _write(
            c,
            pa.table(
                {
                    "id": pa.array([500_000, None], pa.int64()),
                    "part": ["p00", "p01"],
                    "value": [1.0, 2.0],
                    "tag": ["bad", "bad"],
                }
            ),
        ),
    ),
    (
        "unknown write mode 'upsert'",
        None,
        lambda c: _write(c, to_table(make_rows("p00", 500_000, 2, "bad")), mode="upsert"),
    ),
    (
        "row outside the named partitions",
        None,
        lambda c: _write(
            c,
            to_table([*make_rows("p00", 500_000, 2, "bad"), *make_rows("p01", 500_010, 2, "bad")]),
            mode="overwrite_partitions",
            partitions=[{_field_id(c): "p00"}],
        ),
    ),
    ("filter with LIMIT (to_table)", None, lambda c: c.ns.to_table("part = 'p00' LIMIT 1")),
    (
        "filter with LIMIT (drop_partitions)",
        None,
        lambda c: c.ns.maintenance.drop_partitions("part = 'p00' LIMIT 1"),
    ),
    (
        "dropped column written (tag)",
        lambda c: c.ns.drop_column("tag"),
        lambda c: _write(c, to_table(make_rows("p00", 500_000, 2, "bad"))),
    ),
    ("corrupted latest __manifest version file", _corrupt_latest_manifest, _open_read_write),
    ("__manifest data files deleted", _delete_manifest_data, _open_read_write),
    (
        "__manifest directory missing",
        lambda c: shutil.rmtree(c.manifest),
        _open_read_write,
    ),
    (
        "manifest version that does not exist (open version=9999)",
        None,
        lambda c: PartitionedNamespace.open(c.uri, version=9999),
    ),
    (
        "location ../outside the root (read)",
        lambda c: _point_outside(c, absolute=False),
        lambda c: c.ns.to_table(),
    ),
    (
        "location ../outside the root (vacuum + cleanup)",
        lambda c: _point_outside(c, absolute=False),
        _vacuum_and_cleanup,
    ),
    (
        "absolute location outside the root (read)",
        lambda c: _point_outside(c, absolute=True),
        lambda c: c.ns.to_table(),
    ),
    (
        "absolute location outside the root (append to it)",
        lambda c: _point_outside(c, absolute=True),
        lambda c: _write(c, to_table(make_rows("p00", 500_000, 2, "bad"))),
    ),
]


def run_bad_input(case: Case, workdir: Path) -> BadInputResult:
    """Set up a fresh namespace, apply the case's damage, then fingerprint, run, fingerprint."""
    name, setup, action = case
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    ctx = BadInputContext(str(workdir / "ns"), str(workdir / "outside"))
    os.makedirs(ctx.outside)
    new_namespace(ctx.uri, [r for p in range(3) for r in make_rows(f"p{p:02d}", p * 100, 5, "ok")])
    if setup is not None:
        setup(ctx)
    files0, view0 = fingerprint_files(ctx.uri, ctx.outside), reader_view(ctx.uri)
    exception, package_error, message = None, False, ""
    try:
        action(ctx)
    except Exception as e:
        exception = _exception_name(e)
        package_error = isinstance(e, PartitionedNamespaceError)
        text = clean_message(e).replace(str(workdir), "<tmp>").replace(str(workdir)[1:], "<tmp>")
        message = " ".join(text.split())[:160]
    files1, view1 = fingerprint_files(ctx.uri, ctx.outside), reader_view(ctx.uri)
    return BadInputResult(
        case=name,
        exception=exception,
        package_error=package_error,
        message=message,
        reader_state_unchanged=view0 == view1,
        files_unchanged=files0 == files1,
        files_added=len(files1.keys() - files0.keys()),
        files_removed=len(files0.keys() - files1.keys()),
        files_modified=sum(files0[k] != files1[k] for k in files0.keys() & files1.keys()),
    )


def bad_input_markdown(results: list[BadInputResult]) -> str:
    """The bad-input battery as one Markdown table."""

    def yes(ok: bool) -> str:
        return "yes" if ok else "**NO**"

    lines = [
        "| bad input | exception raised | package error | reader state unchanged "
        "| files unchanged (+added -removed ~modified) | message |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        files = yes(r.files_unchanged)
        if not r.files_unchanged:
            files += f" (+{r.files_added} -{r.files_removed} ~{r.files_modified})"
        msg = r.message.replace("|", "\\|")
        lines.append(
            f"| {r.case} | {r.exception or '**none (accepted)**'} | {yes(r.package_error)} "
            f"| {yes(r.reader_state_unchanged)} | {files} | {msg} |"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Main


def sources_digest() -> str:
    """sha1 over the package's Python sources (to tell whether they changed during a run)."""
    package = Path(dagster_lance_partitioned.__file__).resolve().parent
    digest = hashlib.sha1()
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def provenance() -> dict[str, str]:
    """Date, the commit measured, and whether the package's sources differ from it."""
    repo = Path(__file__).resolve().parents[1]
    snapshot = os.environ.get("DLP_BENCH_SOURCE")

    def git(*args: str) -> str:
        try:
            return subprocess.run(
                ["git", *args], cwd=repo, capture_output=True, text=True, check=True
            ).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return "?"

    dirty = "" if snapshot else git("status", "--porcelain", "--", "dagster_lance_partitioned")
    return {
        "package": str(Path(dagster_lance_partitioned.__file__).resolve().parent),
        "sources_sha1": sources_digest(),
        "date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "commit": f"{snapshot} (git archive)" if snapshot else git("rev-parse", "--short", "HEAD"),
        "uncommitted_package_changes": " ".join(ln.split()[-1] for ln in dirty.splitlines()),
        "python": sys.version.split()[0],
        "pylance": lance.__version__,
        "cpus": str(os.cpu_count()),
    }


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--at", metavar="COMMIT", help="measure the package as committed at COMMIT")
    ap.add_argument("--trials", type=int, default=200, help="kill -9 trials")
    ap.add_argument(
        "--modes",
        nargs="+",
        default=list(KILL_MODES),
        choices=KILL_MODES,
        help="kill -9 write modes, taking turns (tx_*: in a transaction adding a column)",
    )
    ap.add_argument("--writers", type=int, nargs="+", default=[4, 8], help="writer processes")
    ap.add_argument("--writes", type=int, default=10, help="writes per writer process")
    ap.add_argument(
        "--sections",
        nargs="+",
        default=["kill", "concurrency", "bad-input"],
        choices=["kill", "concurrency", "bad-input"],
    )
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", help="also write every figure to this JSON file")
    ap.add_argument("--workdir", help="scratch directory (default: a temporary one)")
    args = ap.parse_args(argv)
    if args.child:
        child_main(args.child)
        return
    scratch = Path(args.workdir or tempfile.mkdtemp(prefix="bench_reliability_"))
    out: dict[str, Any] = {"provenance": provenance(), "argv": sys.argv}
    prov = out["provenance"]
    print(
        f"# Reliability figures\n\n{prov['date']}, commit {prov['commit']}"
        + (
            f" + uncommitted changes to {prov['uncommitted_package_changes']}"
            if prov["uncommitted_package_changes"]
            else ""
        )
        + f", sources sha1 {prov['sources_sha1']}, Python {prov['python']}, "
        f"pylance {prov['pylance']}, {prov['cpus']} CPUs\n",
        flush=True,
    )
    try:
        if "kill" in args.sections:

            def log(msg: str) -> None:
                print(msg, file=sys.stderr, flush=True)

            rep = run_kill_trials(args.trials, scratch / "kill", args.seed, log, args.modes)
            print(
                f"## kill -9 during a write ({args.trials} trials)\n\n{kill_markdown(rep)}\n",
                flush=True,
            )
            out["kill"] = dataclasses.asdict(rep)
        if "concurrency" in args.sections:
            results = []
            for scenario in SCENARIOS:
                for n in args.writers:
                    results.append(run_concurrency(scenario, n, args.writes, scratch / "conc"))
            print(f"## Concurrent writers\n\n{concurrency_markdown(results)}\n", flush=True)
            out["concurrency"] = [dataclasses.asdict(r) for r in results]
        if "bad-input" in args.sections:
            bad = [run_bad_input(case, scratch / "bad") for case in BAD_INPUTS]
            print(f"## Bad inputs\n\n{bad_input_markdown(bad)}\n", flush=True)
            out["bad_input"] = [dataclasses.asdict(r) for r in bad]
    finally:
        if not args.workdir:
            shutil.rmtree(scratch, ignore_errors=True)
    out["sources_sha1_at_end"] = sources_digest()
    if out["sources_sha1_at_end"] != prov["sources_sha1"]:
        print(
            "**Warning: the package sources changed during this run** (sha1 "
            f"{prov['sources_sha1']} -> {out['sources_sha1_at_end']}); writer processes started "
            "at different times may have run different code.\n"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
