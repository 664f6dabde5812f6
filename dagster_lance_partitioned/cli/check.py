"""``check``: the health checks of a namespace, read only. Problems (partition schemas,
unreadable pinned versions, orphan tables older than the grace, rows in the wrong partition)
fail it; leftovers of interrupted writes (uncommitted table versions, orphan tables inside
the grace) are reported and fail it only with ``--strict``."""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
from collections.abc import Sequence
from typing import Any, TextIO

from ..core.ops.health import (
    ORPHAN_GRACE,
    IntegrityIssue,
    Orphan,
    SchemaIssue,
    UncommittedVersion,
    VersionIssue,
)
from ._args import (
    EXIT_ERROR,
    EXIT_OK,
    AddCommand,
    Options,
    non_negative_float,
    non_negative_int,
    open_ns,
)
from ._output import Text, error_text, plural, size_text, write_json


def register(add: AddCommand) -> None:
    """Add the ``check`` subcommand."""
    p = add(
        "check",
        _cmd_check,
        True,
        "health checks: partition schemas, pinned versions, uncommitted versions, orphan tables "
        "and partition integrity (exit 1 when a problem is found; leftovers of interrupted "
        "writes are reported and do not count unless --strict)",
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
    p.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 for leftovers of interrupted writes too (uncommitted table versions, "
        "orphan tables younger than the grace)",
    )


def _cmd_check(args: argparse.Namespace, opts: Options, out: TextIO) -> int:
    """``check URI [--history N] [--sample N] [--grace-hours N] [--strict]``: exit 1 when a
    problem is found, or with ``--strict`` a leftover of an interrupted write."""
    ns = open_ns(args, opts)
    schema = ns.inspect.check_schemas()
    broken, uncommitted = ns.inspect.check_read_versions(history=args.history)
    orphans = ns.inspect.find_orphans()  # what vacuum would remove (every version on storage)
    grace = dt.timedelta(hours=args.grace_hours)
    stale = [o for o in orphans if o.stale(grace)]
    young = [o for o in orphans if not o.stale(grace)]
    integrity = ns.inspect.check_integrity(sample=args.sample)
    partitions = len(ns.inspect.partitions())
    checked = partitions if args.sample is None else min(args.sample, partitions)
    found = len(schema) + len(broken) + len(stale) + len(integrity)
    leftovers = len(uncommitted) + len(young)
    code = EXIT_ERROR if found or (args.strict and leftovers) else EXIT_OK
    if opts.json:
        write_json(
            out,
            {
                "uri": ns.uri,
                "manifest_version": ns.version,
                "healthy": found == 0,
                "issues": found,
                "leftovers": leftovers,
                "strict": bool(args.strict),
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
        return code
    text = Text(out, opts.max_width)

    def status(items: Sequence[Any], word: str, ok: str = "ok") -> str:
        return plural(len(items), word) if items else ok

    hours = f"{args.grace_hours:g} h"
    oldest = max((o.age_seconds for o in orphans), default=0.0) / 3600
    text.pairs(
        [
            ("root", ns.uri),
            ("manifest version", str(ns.version)),
            ("partitions", str(partitions)),
            ("schema", status(schema, "problem")),
            ("read versions", status(broken, "unreadable table")),
            ("uncommitted", status(uncommitted, "table") + _leftover(len(uncommitted))),
            (
                "orphans",
                f"{plural(len(orphans), 'orphan table')} "
                f"({size_text(sum(o.bytes for o in orphans))}, oldest {oldest:.1f} h; "
                f"{len(stale)} older than {hours})"
                if orphans
                else "none",
            ),
            ("integrity", status(integrity, "problem", f"ok ({checked} checked)")),
        ]
    )
    for title, headers, rows in _problem_sections(text, schema, broken, stale, integrity, hours):
        _section(text, out, title, headers, rows)
    if leftovers:
        out.write(
            "\nleftovers of interrupted writes (harmless: reads never see them; the "
            "partition's next write supersedes an uncommitted version, `vacuum` removes orphan "
            f"tables past its grace, {ORPHAN_GRACE.total_seconds() / 3600:g} h by default):\n"
        )
        for title, headers, rows in _leftover_sections(text, uncommitted, young, hours):
            _section(text, out, title, headers, rows)
    out.write("\n" + _verdict(found, leftovers, args.strict) + "\n")
    return code


Section = tuple[str, list[str], list[list[str]]]


def _section(
    text: Text, out: TextIO, title: str, headers: list[str], rows: list[list[str]]
) -> None:
    """One titled table of the report (nothing when it has no rows)."""
    if rows:
        out.write(f"\n{title}:\n")
        text.table(headers, rows)


def _problem_sections(
    text: Text,
    schema: Sequence[SchemaIssue],
    broken: Sequence[VersionIssue],
    stale: Sequence[Orphan],
    integrity: Sequence[IntegrityIssue],
    hours: str,
) -> list[Section]:
    """The report's tables of problems: schemas, unreadable tables, stale orphans, rows in
    the wrong partition."""
    return [
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
        (f"orphan tables older than {hours} (run `vacuum`)", *_orphan_rows(text, stale)),
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


def _leftover_sections(
    text: Text, uncommitted: Sequence[UncommittedVersion], young: Sequence[Orphan], hours: str
) -> list[Section]:
    """The report's tables of leftovers: uncommitted versions, orphans inside the grace."""
    return [
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
        (f"orphan tables younger than {hours}", *_orphan_rows(text, young)),
    ]


def _orphan_rows(text: Text, orphans: Sequence[Orphan]) -> tuple[list[str], list[list[str]]]:
    return (
        ["location", "age_hours", "size"],
        [
            [text.cell(o.location), f"{o.age_seconds / 3600:.2f}", size_text(o.bytes)]
            for o in orphans
        ],
    )


def _leftover(n: int) -> str:
    """`` (leftover)`` / `` (leftovers)`` after a count of them (nothing for none)."""
    return "" if not n else " (leftover)" if n == 1 else " (leftovers)"


def _verdict(found: int, leftovers: int, strict: bool) -> str:
    """The report's last line: problems found, and the leftovers (counted with ``strict``)."""
    left = plural(leftovers, "leftover") + " of interrupted writes"
    if found:
        return f"{plural(found, 'issue')} found" + (f"; {left}" if leftovers else "")
    if not leftovers:
        return "healthy"
    return (
        f"{left} found (--strict)"
        if strict
        else f"healthy; {left} (harmless; --strict counts them)"
    )
