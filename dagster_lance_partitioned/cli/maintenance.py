"""Subcommands that check or change a namespace's storage: ``check``, ``compact``, ``cleanup``,
``vacuum`` and ``drop-partitions``."""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
from collections.abc import Sequence
from typing import Any, TextIO

from ..core.namespace import PartitionedNamespace
from ..core.ops.health import ORPHAN_GRACE
from ..core.read.field_filters import resolve_filter
from ._args import (
    EXIT_ERROR,
    EXIT_OK,
    AddCommand,
    Options,
    non_negative_float,
    non_negative_int,
    open_ns,
    positive_int,
)
from ._output import Text, error_text, plural, size_text, write_json


def register(add: AddCommand) -> None:
    """Add the health-check and maintenance subcommands."""
    p = add(
        "check",
        _cmd_check,
        True,
        "health checks: partition schemas, pinned versions, uncommitted versions, orphan tables "
        "and partition integrity (exit 1 when any issue is found)",
    )
    p.add_argument(
        "--history",
        metavar="N",
        type=non_negative_int,
        default=50,
        help="newest manifest versions that count as referencing table versions (default 50)",
    )
    p.add_argument(
        "--sample",
        metavar="N",
        type=non_negative_int,
        help="check the rows of N sampled partitions only (default: every partition)",
    )
    p.add_argument(
        "--grace-hours",
        metavar="N",
        type=non_negative_float,
        default=ORPHAN_GRACE.total_seconds() / 3600,
        help="orphan tables younger than N hours are writes in flight, reported but not an issue "
        "(default 168, vacuum's grace)",
    )
    p = add(
        "compact",
        _cmd_compact,
        False,
        "rewrite partition tables with fewer, larger fragments (one manifest commit)",
    )
    p.add_argument("--filter", metavar="SQL", help="only the partitions a scan with SQL reads")
    p.add_argument(
        "--target-rows",
        metavar="N",
        type=positive_int,
        default=1 << 20,
        help="rows per fragment to aim at (default 1048576)",
    )
    p = add(
        "cleanup",
        _cmd_cleanup,
        False,
        "remove old manifest versions and the partition-table versions no retained one pins",
    )
    p.add_argument(
        "--older-than-days",
        metavar="N",
        type=non_negative_float,
        default=7.0,
        help="only versions older than N days are removed (default 7)",
    )
    p.add_argument(
        "--keep-versions",
        metavar="N",
        type=positive_int,
        default=10,
        help="always keep the N newest manifest versions (default 10)",
    )
    p = add(
        "vacuum",
        _cmd_vacuum,
        False,
        "delete orphan partition tables and unreferenced files older than a grace period",
    )
    p.add_argument(
        "--grace-hours",
        metavar="N",
        type=non_negative_float,
        default=168.0,
        help="only what is older than N hours is deleted (default 168)",
    )
    p = add(
        "drop-partitions",
        _cmd_drop_partitions,
        False,
        "deregister the partitions all of whose rows match a filter (one manifest commit)",
    )
    p.add_argument("--filter", metavar="SQL", required=True, help="DataFusion SQL predicate")


def _cmd_check(args: argparse.Namespace, opts: Options, out: TextIO) -> int:
    """``check URI [--history N] [--sample N]``: exit 1 when any issue is found."""
    ns = open_ns(args, opts)
    schema = ns.inspect.check_schemas()
    broken, uncommitted = ns.inspect.check_read_versions(history=args.history)
    orphans = ns.inspect.find_orphans()  # what vacuum would remove (every version on storage)
    grace = dt.timedelta(hours=args.grace_hours)
    stale = [o for o in orphans if o.stale(grace)]
    integrity = ns.inspect.check_integrity(sample=args.sample)
    partitions = len(ns.inspect.partitions())
    checked = partitions if args.sample is None else min(args.sample, partitions)
    found = len(schema) + len(broken) + len(uncommitted) + len(stale) + len(integrity)
    if opts.json:
        write_json(
            out,
            {
                "uri": ns.uri,
                "manifest_version": ns.version,
                "healthy": found == 0,
                "issues": found,
                "partitions": partitions,
                "integrity_partitions_checked": checked,
                "schema": [dataclasses.asdict(i) for i in schema],
                "read_versions": [
                    {**dataclasses.asdict(i), "detail": error_text(i.detail)} for i in broken
                ],
                "uncommitted": [dataclasses.asdict(i) for i in uncommitted],
                "orphans": [{**dataclasses.asdict(i), "stale": i.stale(grace)} for i in orphans],
                "integrity": [dataclasses.asdict(i) for i in integrity],
            },
        )
        return EXIT_OK if found == 0 else EXIT_ERROR
    text = Text(out, opts.max_width)

    def status(items: Sequence[Any], word: str, ok: str = "ok") -> str:
        return plural(len(items), word) if items else ok

    oldest = max((o.age_seconds for o in orphans), default=0.0) / 3600
    text.pairs(
        [
            ("root", ns.uri),
            ("manifest version", str(ns.version)),
            ("partitions", str(partitions)),
            ("schema", status(schema, "problem")),
            ("read versions", status(broken, "unreadable table")),
            ("uncommitted", status(uncommitted, "table")),
            (
                "orphans",
                f"{plural(len(orphans), 'orphan table')} "
                f"({size_text(sum(o.bytes for o in orphans))}, oldest {oldest:.1f} h; "
                f"{len(stale)} older than {args.grace_hours:g} h)"
                if orphans
                else "none",
            ),
            ("integrity", status(integrity, "problem", f"ok ({checked} checked)")),
        ]
    )
    sections: list[tuple[str, list[str], list[list[str]]]] = [
        (
            "schema problems",
            ["object_id", "values", "column", "problem"],
            [
                [
                    text.cell(i.object_id),
                    text.values(i.values),
                    text.cell(i.column),
                    text.cell(i.problem),
                ]
                for i in schema
            ],
        ),
        (
            "unreadable tables",
            ["object_id", "location", "problem", "detail"],
            [
                [
                    text.cell(i.object_id),
                    text.cell(i.location),
                    i.problem,
                    text.cut(error_text(i.detail)),
                ]
                for i in broken
            ],
        ),
        (
            "uncommitted versions",
            ["object_id", "read_version", "newer versions nobody references"],
            [
                [
                    text.cell(u.object_id),
                    str(u.read_version),
                    text.cut(", ".join(str(v) for v in u.versions)),
                ]
                for u in uncommitted
            ],
        ),
        (
            "orphan tables",
            ["location", "age_hours", "size"],
            [
                [text.cell(o.location), f"{o.age_seconds / 3600:.2f}", size_text(o.bytes)]
                for o in orphans
            ],
        ),
        (
            "rows in the wrong partition",
            ["object_id", "values", "rows_wrong", "sample row"],
            [
                [
                    text.cell(i.object_id),
                    text.values(i.values),
                    str(i.rows_wrong),
                    text.cell(i.sample),
                ]
                for i in integrity
            ],
        ),
    ]
    for title, headers, rows in sections:
        if rows:
            out.write(f"\n{title}:\n")
            text.table(headers, rows)
    out.write("\n" + ("healthy" if found == 0 else f"{plural(found, 'issue')} found") + "\n")
    return EXIT_OK if found == 0 else EXIT_ERROR


def _result_doc(ns: PartitionedNamespace, result: Any) -> dict[str, Any]:
    """A maintenance result as JSON: the root and the result's fields."""
    return {"uri": ns.uri, **dataclasses.asdict(result)}


def _cmd_compact(args: argparse.Namespace, opts: Options, out: TextIO) -> None:
    """``compact URI [--filter SQL] [--target-rows N]``."""
    ns = open_ns(args, opts)
    result = ns.maintenance.compact(
        filter=resolve_filter(ns, args.filter).row_filter(),
        target_rows_per_fragment=args.target_rows,
    )
    if opts.json:
        write_json(out, _result_doc(ns, result))
        return
    text = Text(out, opts.max_width)
    if not result.partitions:
        out.write(f"{ns.uri}: nothing to compact (manifest version {result.manifest_version})\n")
    else:
        out.write(
            f"compacted {plural(len(result.partitions), 'partition')} in manifest version "
            f"{result.manifest_version}\n"
        )
        text.table(
            ["object_id", "fragments before", "fragments after"],
            [[text.cell(oid), str(b), str(a)] for oid, b, a in result.partitions],
            right=[1, 2],
        )
    if result.skipped:
        out.write(
            f"skipped {plural(len(result.skipped), 'partition')} a concurrent commit changed: "
            + text.cut(", ".join(result.skipped))
            + "\n"
        )


def _cmd_cleanup(args: argparse.Namespace, opts: Options, out: TextIO) -> None:
    """``cleanup URI [--older-than-days N] [--keep-versions N]``."""
    ns = open_ns(args, opts)
    result = ns.maintenance.cleanup(
        older_than=dt.timedelta(days=args.older_than_days),
        keep_manifest_versions=args.keep_versions,
    )
    if opts.json:
        write_json(out, _result_doc(ns, result))
        return
    text = Text(out, opts.max_width)
    text.pairs(
        [
            ("manifest versions removed", str(result.manifest_versions_removed)),
            ("manifest versions kept", str(result.manifest_versions_kept)),
            ("table versions removed", str(result.table_versions_removed)),
            ("files removed", str(result.files_removed)),
            ("bytes removed", size_text(result.bytes_removed)),
            ("tables skipped", text.cut(", ".join(result.tables_skipped)) or "none"),
        ]
    )


def _cmd_vacuum(args: argparse.Namespace, opts: Options, out: TextIO) -> None:
    """``vacuum URI [--grace-hours N]``."""
    ns = open_ns(args, opts)
    result = ns.maintenance.vacuum(grace=dt.timedelta(hours=args.grace_hours))
    if opts.json:
        write_json(out, _result_doc(ns, result))
        return
    text = Text(out, opts.max_width)
    text.pairs(
        [
            ("orphans removed", str(len(result.orphans_removed))),
            ("orphans kept", f"{len(result.orphans_kept)} (inside the grace period)"),
            ("files removed", str(result.files_removed)),
            ("bytes removed", size_text(result.bytes_removed)),
            ("tables skipped", text.cut(", ".join(result.tables_skipped)) or "none"),
        ]
    )
    for location in result.orphans_removed:
        out.write(f"removed {text.cut(location)}\n")


def _cmd_drop_partitions(args: argparse.Namespace, opts: Options, out: TextIO) -> None:
    """``drop-partitions URI --filter SQL``."""
    ns = open_ns(args, opts)
    result = ns.maintenance.drop_partitions(resolve_filter(ns, args.filter).row_filter())
    if opts.json:
        write_json(out, {**_result_doc(ns, result), "rows": result.rows})
        return
    text = Text(out, opts.max_width)
    if not result.partitions:
        out.write(
            f"no partition has all its rows matching the filter; nothing dropped "
            f"(manifest version {result.manifest_version})\n"
        )
        return
    out.write(
        f"dropped {plural(len(result.partitions), 'partition')} "
        f"({plural(result.rows, 'row')}) in manifest version {result.manifest_version}\n"
    )
    text.table(
        ["object_id", "values", "rows"],
        [[text.cell(p.object_id), text.values(p.values), str(p.rows)] for p in result.partitions],
        right=[2],
    )
