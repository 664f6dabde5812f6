"""A run's price as the namespace grows: Dagster runs of one daily partition (900 rows) with
``LancePartitionedIOManager``, beside the same runs with ``dagster-deltalake``'s
``DeltaLakePyarrowIOManager`` (local disk, one ephemeral Dagster instance each, same process).

1. ``--runs`` sequential runs (default 365, one new day each, as a daily schedule makes them):
   the median of the first 30 and of the last 30, for both IO managers.
2. Namespaces of ``--sizes`` partitions (default 30,365,1000,3650; built by one core write, the
   Delta tables by one write): ``--repeat`` runs each, taking turns, medians and the ratio to
   the smallest.

Run by hand (progress on stderr, Markdown on stdout):

    .venv/bin/python bench/bench_run_scaling.py [--runs 365] [--sizes 30,365,1000,3650]

Results: docs/explanation/benchmarks.md ("A run's price as the namespace grows")."""

import argparse
import datetime as dt
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import dagster as dg
import numpy as np
import pyarrow as pa

from dagster_lance_partitioned import PartitionedNamespace
from dagster_lance_partitioned.orchestration import LancePartitionedIOManager

START = dt.date(2000, 1, 1)
DAILY = dg.DailyPartitionsDefinition(start_date="2000-01-01", end_date="2040-01-01")
ROWS = 900


def rows_for(day: dt.date) -> pa.Table:
    rng = np.random.default_rng(day.toordinal())
    return pa.table(
        {
            "day": pa.array([day] * ROWS, pa.date32()),
            "x": np.arange(ROWS, dtype=np.int64),
            "v": rng.random(ROWS),
        }
    )


@dg.asset(partitions_def=DAILY, metadata={"partition_expr": "day"})
def events(context: dg.AssetExecutionContext) -> pa.Table:
    return rows_for(dt.date.fromisoformat(context.partition_key))


def io_manager(system: str, root: str) -> Any:
    if system == "lance":
        return LancePartitionedIOManager(root=root)
    from dagster_deltalake import DeltaLakePyarrowIOManager, LocalConfig

    return DeltaLakePyarrowIOManager(root_uri=root, storage_options=LocalConfig())


def runner(system: str, root: str) -> Callable[[dt.date], float]:
    """A function materializing one day into ``root`` and returning the run's seconds."""
    manager = io_manager(system, root)
    instance = dg.DagsterInstance.ephemeral()

    def run(day: dt.date) -> float:
        started = time.perf_counter()
        dg.materialize(
            [events],
            partition_key=day.isoformat(),
            resources={"io_manager": manager},
            instance=instance,
            raise_on_error=True,
        )
        return time.perf_counter() - started

    return run


def seed(system: str, root: str, days: int) -> None:
    """``days`` days stored before the timed runs (one run, then one write of the rest)."""
    runner(system, root)(START)
    if days <= 1:
        return
    rest = pa.concat_tables([rows_for(START + dt.timedelta(days=i)) for i in range(1, days)])
    if system == "lance":
        PartitionedNamespace.open(os.path.join(root, "events")).write(rest)
    else:
        import deltalake

        deltalake.write_deltalake(os.path.join(root, "public", "events"), rest, mode="append")


def sequential(work: str, runs: int) -> dict[str, tuple[float, float]]:
    out = {}
    for system in ("lance", "delta"):
        root = os.path.join(work, f"seq-{system}")
        run = runner(system, root)
        times = []
        for i in range(runs):
            times.append(run(START + dt.timedelta(days=i)))
            if i % 50 == 0:
                print(f"  {system}: {i}/{runs} runs", file=sys.stderr, flush=True)
        out[system] = (statistics.median(times[:30]), statistics.median(times[-30:]))
    return out


def by_size(work: str, sizes: list[int], repeat: int) -> dict[tuple[str, int], float]:
    runs: dict[tuple[str, int], Callable[[dt.date], float]] = {}
    for system in ("lance", "delta"):
        for n in sizes:
            root = os.path.join(work, f"{system}-{n}")
            seed(system, root, n)
            runs[system, n] = runner(system, root)
            print(f"  {system}: {n} partitions stored", file=sys.stderr, flush=True)
    times: dict[tuple[str, int], list[float]] = {k: [] for k in runs}
    for r in range(repeat + 2):  # two warm-up rounds
        for (system, n), run in runs.items():
            took = run(START + dt.timedelta(days=n + 10 + r))
            if r >= 2:
                times[system, n].append(took)
    return {k: statistics.median(v) for k, v in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=365)
    parser.add_argument("--sizes", default="30,365,1000,3650")
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args()
    logging.getLogger("dagster").setLevel(logging.WARNING)
    work = args.workdir or tempfile.mkdtemp(prefix="dlp-runs-")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"{dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, load {os.getloadavg()[0]:.2f}\n")
    seq = sequential(work, args.runs)
    print(f"### {args.runs} sequential one-day runs\n")
    print("| IO manager | median of the first 30 (ms) | of the last 30 (ms) | last / first |")
    print("|---|---:|---:|---:|")
    for system, (first, last) in seq.items():
        print(f"| {system} | {first * 1e3:.1f} | {last * 1e3:.1f} | {last / first:.2f} |")
    medians = by_size(work, sizes, args.repeat)
    print(f"\n### One-day runs on namespaces of {args.sizes} partitions (runs taking turns)\n")
    print("| partitions | lance (ms) | lance / smallest | delta (ms) | delta / smallest |")
    print("|---:|---:|---:|---:|---:|")
    for n in sizes:
        lance_ms, delta_ms = medians["lance", n], medians["delta", n]
        print(
            f"| {n} | {lance_ms * 1e3:.1f} | {lance_ms / medians['lance', sizes[0]]:.2f} "
            f"| {delta_ms * 1e3:.1f} | {delta_ms / medians['delta', sizes[0]]:.2f} |"
        )
    print(f"\n(load at the end {os.getloadavg()[0]:.2f})")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
