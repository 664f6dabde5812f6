"""Writer subprocess for ``test_atomicity.py``.

Usage: ``python writer_proc.py CONFIG.json``. The config holds::

    uri         namespace root
    writes      [{"rows": [{column: value, ...}, ...], "mode": "append"}, ...]  (run in order)
    sync_dir    directory for marker files
    name        this writer's name (marker prefix)
    barrier     names of every writer taking part in each write's barrier (or null)
    release     marker name to wait for before committing (or null)
    result      file receiving one JSON line per finished write
    timeout     seconds to wait at the barrier / for the release (default 60)

For write ``i`` a hook run just before the manifest commit (``faults.CommitHooks``) creates
``<sync_dir>/<name>.<i>.ready`` (every partition table has been written at that point), waits
until ``<n>.<i>.ready`` exists for every ``n`` in ``barrier``, then waits for
``<sync_dir>/<release>`` if one is set. A write that raises is reported (exception type,
message, partitions) and ends the process.
"""

from __future__ import annotations

import json
import os
import sys
import time

import pyarrow as pa

from dagster_lance_partitioned import PartitionedNamespace


def _wait_for(paths: list[str], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not all(os.path.exists(p) for p in paths):
        if time.monotonic() > deadline:
            missing = [p for p in paths if not os.path.exists(p)]
            raise TimeoutError(f"gave up waiting for {missing}")
        time.sleep(0.005)


def _report(path: str, record: dict) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def main(config_path: str) -> int:
    with open(config_path, encoding="utf-8") as fh:
        cfg = json.load(fh)
    sync_dir = cfg.get("sync_dir")
    name = cfg.get("name", "writer")
    barrier = cfg.get("barrier")
    release = cfg.get("release")
    timeout = float(cfg.get("timeout", 60))
    from faults import CommitHooks  # this script's directory (tests/helpers) is on sys.path

    before_commit = CommitHooks.install()
    ns = PartitionedNamespace.open(cfg["uri"])
    for i, write in enumerate(cfg["writes"]):

        def hook(pending: list, i: int = i) -> None:
            open(os.path.join(sync_dir, f"{name}.{i}.ready"), "w").close()
            if barrier:
                _wait_for([os.path.join(sync_dir, f"{n}.{i}.ready") for n in barrier], timeout)
            if release:
                _wait_for([os.path.join(sync_dir, release)], timeout)

        before_commit(ns, hook if sync_dir else None)
        table = pa.Table.from_pylist(write["rows"], schema=ns.schema)
        try:
            result = ns.write(table, mode=write.get("mode", "append"))
        except Exception as e:
            _report(
                cfg["result"],
                {
                    "i": i,
                    "ok": False,
                    "error": type(e).__name__,
                    "message": str(e),
                    "partitions": list(getattr(e, "partitions", []) or []),
                },
            )
            return 0
        _report(
            cfg["result"],
            {
                "i": i,
                "ok": True,
                "manifest_version": result.manifest_version,
                "partitions": [
                    {"object_id": p.object_id, "values": p.values, "created": p.created}
                    for p in result.partitions
                ],
            },
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
