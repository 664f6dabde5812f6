"""Searches run in a subprocess under an address-space limit, for ``test_search_params.py``:
a search that asks Lance for more than memory holds aborts the whole process, so it must not
run inside the test process.

Usage: ``python search_proc.py CONFIG.json``. The config holds::

    headroom_gb  address space the searches may add to what the process holds once opened
    searches     [{"uri": namespace root, "query": [numbers] or "text", "kwargs": {...}}, ...]

Integers in ``kwargs`` may be written as strings of digits (JSON numbers lose precision).
Prints one JSON line per search: ``{"ids": [...], "values": [...]}`` (the ``_distance`` or
``_score`` of each row), or ``{"error": "<type>: <message>"}``.
"""

from __future__ import annotations

import json
import resource
import sys
from typing import Any

import numpy as np

from dagster_lance_partitioned import PartitionedNamespace


def _address_space() -> int:
    """Bytes of address space this process holds now."""
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize in /proc/self/status")


def _value(v: Any) -> Any:
    return int(v) if isinstance(v, str) and v.isdigit() else v


def main(config_path: str) -> None:
    with open(config_path, encoding="utf-8") as f:
        config = json.load(f)
    opened = {s["uri"]: PartitionedNamespace.open(s["uri"]) for s in config["searches"]}
    # warm up Lance's runtime (threads, allocator) before the limit applies
    for ns in opened.values():
        ns.to_table(columns=["id"], filter="id < 0")
    limit = _address_space() + int(float(config["headroom_gb"]) * (1 << 30))
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    for search in config["searches"]:
        query = search["query"]
        if not isinstance(query, str):
            query = np.asarray(query, dtype=np.float32)
        kwargs = {k: _value(v) for k, v in search["kwargs"].items()}
        try:
            found = opened[search["uri"]].search(query, **kwargs)
        except Exception as e:  # reported, the next search runs
            print(json.dumps({"error": f"{type(e).__name__}: {e}"}), flush=True)
            continue
        value = "_distance" if "_distance" in found.schema.names else "_score"
        out = {"ids": found["id"].to_pylist(), "values": found[value].to_pylist()}
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
