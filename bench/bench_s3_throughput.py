"""Throughput of the S3-compatible test servers: requests per second at a range of concurrency
levels, straight to the server and through the latency proxy (``tests/helpers/delay_proxy.py``)
the object-storage benchmarks use. It tells whether a benchmark on that store measures the
client or the server: once a server is saturated, more requests in flight only queue.

Run by hand::

    python bench/bench_s3_throughput.py                              # moto, 1..32, no latency
    python bench/bench_s3_throughput.py --server moto,localbucket --latency-ms 0,20
    python bench/bench_s3_throughput.py --concurrency 1,8,32 --seconds 2 --json out.json

Options: ``--server`` (``moto``, ``localbucket``; see ``delay_proxy.SERVERS``), ``--concurrency``
(``1,2,4,8,16,32``), ``--latency-ms`` (the proxy's added delay per request; ``0,20``),
``--seconds`` (how long each measurement runs, 2), ``--ops`` (``put,get,head,list``),
``--json FILE``.

The client is ``obstore`` (the ``object_store`` crate Lance uses) on one asyncio loop, with
``--concurrency`` requests in flight: a PUT of a new 1 KiB object, a GET or HEAD of one of
64 objects, a LIST of a prefix holding 20 objects, each operation in a bucket of its own (holding
84 objects when it starts; the PUTs add to theirs). Each measurement is one server process (started
fresh for each server), ``direct`` (the server's own port) and ``proxy`` (through the proxy at
each latency). With a latency of L seconds a perfectly fast server gives ``concurrency / L``
requests per second; the table shows that bound beside the measured rate.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import uuid
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

from helpers.delay_proxy import SERVERS, S3ProxyProcess
from helpers.s3 import ACCESS_KEY, REGION, SECRET_KEY

OPS = ("put", "get", "head", "list")
PAYLOAD = os.urandom(1024)
LISTED = 20  # objects under the listed prefix


def _store(endpoint: str, bucket: str) -> Any:
    from obstore.store import S3Store

    return S3Store(
        bucket,
        endpoint=endpoint,
        access_key_id=ACCESS_KEY,
        secret_access_key=SECRET_KEY,
        region=REGION,
        client_options={"allow_http": True, "pool_max_idle_per_host": "64"},
        virtual_hosted_style_request=False,
    )


async def _measure(store: Any, op: str, concurrency: int, seconds: float, keys: list[str]) -> dict:
    """Run ``op`` with ``concurrency`` requests in flight for ``seconds``: requests, errors,
    requests per second and the median latency of one request."""
    import obstore

    done = 0
    errors = 0
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds
    prefix = f"tp-{uuid.uuid4().hex[:8]}"

    async def one(i: int) -> None:
        if op == "put":
            await obstore.put_async(store, f"{prefix}/{i}", PAYLOAD)
        elif op == "get":
            await (await obstore.get_async(store, keys[i % len(keys)])).bytes_async()
        elif op == "head":
            await obstore.head_async(store, keys[i % len(keys)])
        else:
            await obstore.list(store, "listed/").collect_async()

    async def worker(w: int) -> None:
        nonlocal done, errors
        i = w
        while time.perf_counter() < deadline:
            t0 = time.perf_counter()
            try:
                await one(i)
            except Exception:
                errors += 1
            else:
                done += 1
                latencies.append(time.perf_counter() - t0)
            i += concurrency

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(w) for w in range(concurrency)))
    elapsed = time.perf_counter() - t0
    latencies.sort()
    return {
        "requests": done,
        "errors": errors,
        "rps": done / elapsed,
        "p50_ms": 1000 * latencies[len(latencies) // 2] if latencies else None,
    }


async def _prepare(store: Any) -> list[str]:
    """Objects to GET / HEAD and a prefix of :data:`LISTED` objects to LIST."""
    import obstore

    keys = [f"objects/{i}" for i in range(64)]
    await asyncio.gather(*(obstore.put_async(store, k, PAYLOAD) for k in keys))
    await asyncio.gather(*(obstore.put_async(store, f"listed/{i}", PAYLOAD) for i in range(LISTED)))
    return keys


def run_server(server: str, args: argparse.Namespace) -> list[dict]:
    """Every measurement of one server: direct, then through the proxy at each latency."""
    rows: list[dict] = []
    with S3ProxyProcess(0.0, server=server) as s3:
        targets: list[tuple[str, float | None]] = [("direct", None)]
        targets += [("proxy", ms) for ms in args.latency_ms]
        for route, ms in targets:
            endpoint = s3.server_endpoint if route == "direct" else s3.endpoint
            if ms is not None:
                s3.set_latency(ms / 1000)
            for op in args.ops:
                # a fresh bucket per operation: a server's listing may cost more the more
                # objects the bucket holds (moto's and LocalBucket's do)
                bucket = s3.create_bucket(f"tp-{uuid.uuid4().hex[:10]}")
                store = _store(endpoint, bucket)
                keys = asyncio.run(_prepare(store))
                for c in args.concurrency:
                    if ms is not None:
                        s3.reset()
                    m = asyncio.run(_measure(store, op, c, args.seconds, keys))
                    bound = c / (ms / 1000) if ms else None
                    row = {"server": server, "route": route, "latency_ms": ms, "op": op}
                    row.update({"concurrency": c, **m, "latency_bound_rps": bound})
                    if ms is not None:
                        row["proxy_counted"] = s3.counts()["total"]
                    rows.append(row)
                    label = "direct" if ms is None else f"proxy {ms:g} ms"
                    print(
                        f"  {server:<11} {label:<13} {op:<5} c={c:<3} {m['rps']:8.1f} req/s"
                        f"  p50 {m['p50_ms'] or 0:6.1f} ms  errors {m['errors']}",
                        flush=True,
                    )
    return rows


def markdown(rows: list[dict], concurrency: list[int]) -> str:
    """One line per server, route, latency and operation; one column per concurrency."""
    head = ["server", "route", "op"] + [f"c={c}" for c in concurrency]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    keys: dict[tuple, dict[int, dict]] = {}
    for r in rows:
        route = "direct" if r["latency_ms"] is None else f"proxy, {r['latency_ms']:g} ms"
        keys.setdefault((r["server"], route, r["op"]), {})[r["concurrency"]] = r
    for (server, route, op), by_c in keys.items():
        cells = [server, route, op]
        for c in concurrency:
            r = by_c.get(c)
            if r is None:
                cells.append("")
                continue
            text = f"{r['rps']:.0f}"
            if r["latency_bound_rps"]:
                text += f" ({min(r['latency_bound_rps'], 1e9):.0f})"
            cells.append(text + (f" [{r['errors']} err]" if r["errors"] else ""))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", type=lambda t: t.split(","), default=["moto"])
    ap.add_argument(
        "--concurrency",
        type=lambda t: [int(x) for x in t.split(",")],
        default=[1, 2, 4, 8, 16, 32],
    )
    ap.add_argument(
        "--latency-ms", type=lambda t: [float(x) for x in t.split(",")], default=[0.0, 20.0]
    )
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--ops", type=lambda t: t.split(","), default=list(OPS))
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args(argv)
    bad = [s for s in args.server if s not in SERVERS] + [o for o in args.ops if o not in OPS]
    if bad:
        ap.error(f"unknown server or op: {bad}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    command = "python bench/bench_s3_throughput.py " + " ".join(sys.argv[1:])
    rows: list[dict] = []
    for server in args.server:
        rows += run_server(server, args)
    print()
    print(f"`{command}` (requests/s; in brackets: concurrency / latency, a perfect server)")
    print()
    print(markdown(rows, args.concurrency))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"command": command, "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
