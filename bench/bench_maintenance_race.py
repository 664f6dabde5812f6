"""Maintenance racing writers: compact + cleanup(older_than=0, keep_manifest_versions=1) +
vacuum(grace=0) in a loop beside writer processes doing appends, partition overwrites and
merges, on local disk or the S3-compatible server (moto) on 127.0.0.1.

After every round the namespace must open and read; at the end it must hold exactly what the
acknowledged operations, replayed, give (rows lost = 0, rows extra = 0), and every registered
table must read at its pin.

    python bench/bench_maintenance_race.py --store local --writers 4 --rounds 20
    python bench/bench_maintenance_race.py --store s3 --writers 4 --rounds 20

Figures: docs/explanation/reliability.md. ``tests/integration/test_maintenance_race.py`` runs it
(a short run by default, the full one with ``-m slow``)."""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

ZERO = dt.timedelta(0)
OPS = ("append", "overwrite", "merge")


def schema() -> pa.Schema:
    return pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("part", pa.utf8()),
            pa.field("v", pa.int64()),
        ]
    )


# -- a writer process -----------------------------------------------------------------------------
def writer_main(config_path: str) -> int:
    """Cycle append / overwrite_partitions / merge_insert until the stop file exists; one JSON
    line per operation (acknowledged or not) in the result file, rows included."""
    from dagster_lance_partitioned import PartitionedNamespace, PartitionedNamespaceError

    cfg = json.loads(Path(config_path).read_text())
    w, stop, out = cfg["writer"], Path(cfg["stop"]), Path(cfg["result"])
    ns = PartitionedNamespace.open(cfg["uri"], cfg.get("storage_options"))
    Path(cfg["result"] + ".ready").touch()
    seq = 0
    with out.open("a", encoding="utf-8") as fh:
        while not stop.exists() and seq < cfg["max_ops"]:
            op = OPS[seq % len(OPS)]
            base = (w + 1) * 10_000_000 + seq * 100
            if op == "append":
                rows = [
                    {"id": base + r, "part": f"w{w}" if r % 2 else "shared", "v": seq}
                    for r in range(6)
                ]
            elif op == "overwrite":
                rows = [{"id": base + r, "part": f"w{w}o", "v": seq} for r in range(4)]
            else:  # ten keys merged over and over, five new each time
                keys = [(w + 1) * 1000 + (seq + r) % 10 for r in range(5)]
                rows = [{"id": k, "part": f"w{w}m", "v": seq} for k in keys]
            record: dict[str, Any] = {"seq": seq, "op": op, "rows": rows}
            started = time.monotonic()
            try:
                data = pa.Table.from_pylist(rows, schema=ns.schema)
                if op == "append":
                    ns.write(data, mode="append")
                elif op == "overwrite":
                    ns.write(data, mode="overwrite_partitions")
                else:
                    ns.merge_insert(data, on="id")
                record["ok"] = True
            except PartitionedNamespaceError as e:
                record.update(ok=False, error=type(e).__name__, message=str(e)[:300])
            except Exception as e:  # a raw error crossing the package boundary: a bug
                record.update(ok=False, error=type(e).__name__, raw=True, message=str(e)[:300])
            record["seconds"] = round(time.monotonic() - started, 3)
            fh.write(json.dumps(record) + "\n")
            fh.flush()
            seq += 1
            ns.refresh()
    return 0


# -- the run --------------------------------------------------------------------------------------
@dataclass
class Report:
    store: str
    writers: int
    rounds: int
    seconds: float = 0.0
    ops_ok: dict[str, int] = field(default_factory=dict)
    ops_failed: dict[str, int] = field(default_factory=dict)
    raw_errors: int = 0
    maintenance_errors: list[str] = field(default_factory=list)
    reads_ok: int = 0
    reads_failed: list[str] = field(default_factory=list)
    table_versions_removed: int = 0
    files_removed: int = 0
    orphans_removed: int = 0
    compacted: int = 0
    rows_expected: int = 0
    rows_lost: int = 0
    rows_extra: int = 0
    unreadable_tables: int = 0


def expected_rows(records: list[list[dict[str, Any]]]) -> collections.Counter[tuple[Any, ...]]:
    """The rows the acknowledged operations give, replayed (each writer owns its overwrite and
    merge partitions; appends only add)."""
    out: collections.Counter[tuple[Any, ...]] = collections.Counter()
    for writer in records:
        overwritten: list[dict[str, Any]] = []
        merged: dict[int, dict[str, Any]] = {}
        for rec in writer:
            if not rec.get("ok"):
                continue
            if rec["op"] == "append":
                out.update((r["id"], r["part"], r["v"]) for r in rec["rows"])
            elif rec["op"] == "overwrite":
                overwritten = rec["rows"]
            else:
                merged.update({r["id"]: r for r in rec["rows"]})
        out.update((r["id"], r["part"], r["v"]) for r in overwritten)
        out.update((r["id"], r["part"], r["v"]) for r in merged.values())
    return out


def run(store: str, writers: int, rounds: int, work: Path, max_ops: int = 100_000) -> Report:
    """One measured run (see the module doc)."""
    from dagster_lance_partitioned import PartitionedNamespace, PartitionField

    rep = Report(store, writers, rounds)
    with ExitStack() as stack:
        options: dict[str, str] | None = None
        if store == "s3":
            sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
            from helpers.s3 import s3_server, storage_options

            server = stack.enter_context(s3_server())
            uri = f"s3://{server.create_bucket()}/ns"
            options = storage_options(server.endpoint)
        else:
            uri = str(work / "ns")
        ns = PartitionedNamespace.create(
            uri, schema(), [PartitionField.identity("part")], storage_options=options
        )
        ns.write(pa.Table.from_pylist([{"id": 0, "part": "seed", "v": 0}], schema=schema()))
        stop = work / "stop"
        procs = []
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        for w in range(writers):
            cfg = work / f"w{w}.json"
            cfg.write_text(
                json.dumps(
                    {
                        "writer": w,
                        "uri": uri,
                        "storage_options": options,
                        "stop": str(stop),
                        "result": str(work / f"w{w}.jsonl"),
                        "max_ops": max_ops,
                    }
                )
            )
            procs.append(subprocess.Popen([sys.executable, __file__, "writer", str(cfg)], env=env))
        deadline = time.monotonic() + 120
        while not all((work / f"w{w}.jsonl.ready").exists() for w in range(writers)):
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise RuntimeError("writer processes did not start")
            time.sleep(0.05)
        started = time.monotonic()
        try:
            for _ in range(rounds):
                for name, call in (
                    ("compact", lambda: ns.maintenance.compact()),
                    (
                        "cleanup",
                        lambda: ns.maintenance.cleanup(older_than=ZERO, keep_manifest_versions=1),
                    ),
                    ("vacuum", lambda: ns.maintenance.vacuum(grace=ZERO)),
                ):
                    try:
                        result = call()
                    except Exception as e:  # recorded: maintenance may conflict, never corrupt
                        rep.maintenance_errors.append(f"{name}: {type(e).__name__}: {str(e)[:200]}")
                        continue
                    if name == "compact":
                        rep.compacted += len(result.partitions)
                    elif name == "cleanup":
                        rep.table_versions_removed += result.table_versions_removed
                        rep.files_removed += result.files_removed
                    else:
                        rep.orphans_removed += len(result.orphans_removed)
                        rep.files_removed += result.files_removed
                try:
                    PartitionedNamespace.open(uri, options).to_table()
                    rep.reads_ok += 1
                except Exception as e:
                    rep.reads_failed.append(f"{type(e).__name__}: {str(e)[:200]}")
        finally:
            stop.touch()
            for p in procs:
                try:
                    p.wait(timeout=300)
                except subprocess.TimeoutExpired:
                    p.kill()
        rep.seconds = round(time.monotonic() - started, 1)
        records = [
            [json.loads(line) for line in (work / f"w{w}.jsonl").read_text().splitlines()]
            for w in range(writers)
        ]
        for rec in (r for writer in records for r in writer):
            bucket = rep.ops_ok if rec.get("ok") else rep.ops_failed
            key = rec["op"] if rec.get("ok") else f"{rec['op']}: {rec['error']}"
            bucket[key] = bucket.get(key, 0) + 1
            rep.raw_errors += bool(rec.get("raw"))
        expected = expected_rows(records)
        expected[(0, "seed", 0)] += 1
        rep.rows_expected = sum(expected.values())
        try:
            final = PartitionedNamespace.open(uri, options)
            got = collections.Counter(
                (r["id"], r["part"], r["v"]) for r in final.to_table().to_pylist()
            )
        except Exception as e:  # the namespace no longer reads: every row counts as lost
            rep.reads_failed.append(f"final: {type(e).__name__}: {str(e)[:200]}")
            got = collections.Counter()
        else:
            rep.unreadable_tables = len(final.inspect.check_read_versions()[0])
        rep.rows_lost = sum((expected - got).values())
        rep.rows_extra = sum((got - expected).values())
    return rep


def markdown(reports: list[Report]) -> str:
    lines = [
        "| store | writers | rounds | s | ops ok (append/overwrite/merge) | ops refused | "
        "raw errors | reads ok | reads failed | versions removed | files removed | "
        "orphans removed | "
        "rows expected | rows lost | rows extra |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in reports:
        ok = "/".join(str(r.ops_ok.get(o, 0)) for o in OPS)
        refused = sum(r.ops_failed.values())
        lines.append(
            f"| {r.store} | {r.writers} | {r.rounds} | {r.seconds} | {ok} | {refused} | "
            f"{r.raw_errors} | {r.reads_ok} | {len(r.reads_failed)} | {r.table_versions_removed} | "
            f"{r.files_removed} | {r.orphans_removed} | {r.rows_expected} | {r.rows_lost} | "
            f"{r.rows_extra} |"
        )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if argv[:1] == ["writer"]:
        return writer_main(argv[1])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", choices=["local", "s3"], default="local")
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--json", help="write the report here as JSON")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        rep = run(args.store, args.writers, args.rounds, Path(tmp))
    print(markdown([rep]))
    print("refused:", json.dumps(rep.ops_failed), "maintenance errors:", rep.maintenance_errors)
    if args.json:
        Path(args.json).write_text(json.dumps(asdict(rep), indent=2))
    bad = (
        rep.rows_lost
        or rep.rows_extra
        or rep.reads_failed
        or rep.unreadable_tables
        or rep.raw_errors
    )
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
