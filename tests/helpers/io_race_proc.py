"""Dagster runs for ``test_io_manager_safety.py``: materializes one partition of a
daily-partitioned pyarrow asset into a shared IO manager root, once per trial, in its own
process (started once for every trial, so Dagster's start-up is paid once).

Usage: ``python io_race_proc.py CONFIG.json``. The config holds::

    key         the partition key (a date, 2024-01-01 or later) this process materializes
    extra       whether the output has the extra nullable column ``note`` (schema evolution)
    name        this process's name (its marker is ``<sync_dir>/<name>.ready``)
    timeout     seconds to wait at a barrier (default 60)
    trials      [{"root": IO manager root, "sync_dir": barrier directory,
                  "result": file receiving one JSON line {"ok", "error", "message"}}, ...]

Start barrier of each trial: the asset body (so Dagster and the run are already up) creates its
ready marker, then waits for ``<sync_dir>/go``, which holds a wall-clock timestamp; at that
instant it returns its table and the IO manager's ``handle_output`` runs in every process at
once.
"""

import datetime as dt
import faulthandler
import json
import os
import signal
import sys
import time
import traceback

import dagster as dg
import pyarrow as pa

from dagster_lance_partitioned.orchestration import LancePartitionedIOManager

DAILY = dg.DailyPartitionsDefinition(start_date="2024-01-01")
ROWS_PER_KEY = 40


def rows_for(key: str, extra: bool = False) -> pa.Table:
    """The rows of partition ``key``: ids ``day_index * 1000 + i``, one date, values."""
    day = dt.date.fromisoformat(key)
    base = (day - dt.date(2024, 1, 1)).days * 1000
    columns: dict[str, pa.Array] = {
        "id": pa.array(range(base, base + ROWS_PER_KEY), pa.int64()),
        "day": pa.array([day] * ROWS_PER_KEY, pa.date32()),
        "value": pa.array([float(i) for i in range(ROWS_PER_KEY)], pa.float64()),
    }
    if extra:
        columns["note"] = pa.array([f"{key}#{i}" for i in range(ROWS_PER_KEY)], pa.utf8())
    return pa.table(columns)


def _wait_for(path: str, deadline: float) -> None:
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up waiting for {path}")
        time.sleep(0.002)


def _barrier(sync_dir: str, name: str, timeout: float) -> None:
    open(os.path.join(sync_dir, f"{name}.ready"), "w").close()
    go = os.path.join(sync_dir, "go")
    _wait_for(go, time.monotonic() + timeout)
    with open(go, encoding="utf-8") as fh:
        start_at = float(fh.read().strip() or 0)
    while (left := start_at - time.time()) > 0:
        time.sleep(min(left, 0.001))


def run_trial(cfg: dict, trial: dict, timeout: float) -> dict:
    """Materialize this process's key into the trial's root; the result record."""

    @dg.asset(name="events", partitions_def=DAILY, metadata={"partition_expr": "day"})
    def events(context: dg.AssetExecutionContext) -> pa.Table:
        table = rows_for(context.partition_key, bool(cfg.get("extra")))
        _barrier(trial["sync_dir"], cfg["name"], timeout)
        return table

    try:
        dg.materialize(
            [events],
            partition_key=cfg["key"],
            resources={"io_manager": LancePartitionedIOManager(root=trial["root"])},
        )
    except Exception as e:
        cause = e.__cause__ if isinstance(e, dg.DagsterError) and e.__cause__ else e
        return {
            "ok": False,
            "error": f"{type(cause).__module__}.{type(cause).__name__}",
            "message": str(cause)[:2000],
            "traceback": traceback.format_exc()[-4000:],
        }
    return {"ok": True, "error": None, "message": None}


def main(config_path: str) -> int:
    faulthandler.register(signal.SIGUSR1)  # the test asks a stuck process where it is
    with open(config_path, encoding="utf-8") as fh:
        cfg = json.load(fh)
    timeout = float(cfg.get("timeout", 60))
    failed = 0
    for trial in cfg["trials"]:
        record = run_trial(cfg, trial, timeout)
        failed += not record["ok"]
        with open(trial["result"], "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
