"""Subcommands that change a namespace's storage: ``compact``, ``cleanup``, ``vacuum``,
``drop-partitions`` and ``collect-statistics`` (``check``, which only reads, is in
:mod:`.check`)."""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
from typing import Any, TextIO

from ..core import PartitionedNamespace
from ..core.engine import resolve_filter
from ._args import (
    AddCommand,
    Options,
    non_negative_float,
    open_ns,
    positive_int,
)
from ._output import Text, plural, size_text, write_json


def register(add: AddCommand) -> None:
    """Add the maintenance subcommands."""
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
    p = add(
        "collect-statistics",
        _cmd_collect_statistics,
        False,
        "record the statistics of partition tables that have none (one manifest commit)",
    )
    p.add_argument("--filter", metavar="SQL", help="only the partitions a scan with SQL reads")
    p.add_argument(
        "--refresh", action="store_true", help="read every selected table, not only those without"
    )


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


def _cmd_collect_statistics(args: argparse.Namespace, opts: Options, out: TextIO) -> None:
    """``collect-statistics URI [--filter SQL] [--refresh]``."""
    ns = open_ns(args, opts)
    result = ns.maintenance.collect_statistics(
        resolve_filter(ns, args.filter).row_filter(), refresh=args.refresh
    )
    if opts.json:
        write_json(out, _result_doc(ns, result))
        return
    if not result.partitions:
        out.write(f"{ns.uri}: every selected partition has statistics\n")
    else:
        out.write(
            f"recorded the statistics of {plural(len(result.partitions), 'partition')} in "
            f"manifest version {result.manifest_version}\n"
        )
    if result.skipped:
        out.write(
            f"skipped {plural(len(result.skipped), 'partition')} a concurrent commit changed\n"
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
