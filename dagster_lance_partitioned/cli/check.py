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

from ..core import (
    HealthReport,
    IntegrityIssue,
    Orphan,
    SchemaIssue,
    UncommittedVersion,
    VersionIssue,
)
from ..core.engine import ORPHAN_GRACE
from ._args import (
    EXIT_ERROR,
    EXIT_OK,
    AddCommand,
    Options,
    non_negative_float,
    non_negative_int,
    open_ns_or_below,
)
from ._output import Text, error_text, plural, size_text, write_json


def register(add: AddCommand) -> None:
    """Add the ``check`` subcommand."""
    p = add(
        "check",
        _cmd_check,
        True,
        "health checks: partition schemas, pinned versions, uncommitted versions, orphan tables "
        "and partition integrity, of the namespace or of each namespace a directory holding "
        "several has (exit 1 when a problem is found; leftovers of interrupted writes are "
        "reported and do not count unless --strict)",
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
    problem is found, or with ``--strict`` a leftover of an interrupted write. A ``URI``
    holding several namespaces (``ls`` finds them) has each of them checked."""
    grace = dt.timedelta(hours=args.grace_hours)
    found = open_ns_or_below(args, opts)
    if not isinstance(found, list):
        report = found.inspect.check(history=args.history, sample=args.sample, grace=grace)
        if opts.json:
            write_json(out, _report_doc(report, args.strict))
        else:
            _write_report(report, args, opts, out)
            out.write("\n" + _verdict(report.problems, report.leftovers, args.strict) + "\n")
        return _exit_code(report, args.strict)
    reports = [
        (f, f.ns.inspect.check(history=args.history, sample=args.sample, grace=grace))
        if f.ns is not None
        else (f, None)
        for f in found
    ]
    failed = [f.path for f, r in reports if r is None or _exit_code(r, args.strict)]
    if opts.json:
        write_json(
            out,
            {
                "root": args.uri,
                "healthy": not failed,
                "strict": bool(args.strict),
                "failed": failed,
                "namespaces": [
                    {"path": f.path, **_report_doc(r, args.strict)}
                    if r is not None
                    else {"path": f.path, "uri": f.uri, "healthy": False, "error": f.error}
                    for f, r in reports
                ],
            },
        )
    else:
        for i, (f, r) in enumerate(reports):
            out.write(("\n" if i else "") + f"== {f.path}\n")
            if r is None:
                out.write(f"unreadable: {f.error}\n")
                continue
            _write_report(r, args, opts, out)
            out.write("\n" + _verdict(r.problems, r.leftovers, args.strict) + "\n")
        out.write(
            f"\n{plural(len(reports), 'namespace')} under {args.uri}: "
            + (f"{len(failed)} failed ({', '.join(failed)})" if failed else "all healthy")
            + "\n"
        )
    return EXIT_ERROR if failed else EXIT_OK


def _exit_code(report: HealthReport, strict: bool) -> int:
    return EXIT_ERROR if not report.ok or (strict and report.leftovers) else EXIT_OK


def _report_doc(report: HealthReport, strict: bool) -> dict[str, Any]:
    """The JSON document of one namespace's report."""
    return {
        "uri": report.uri,
        "manifest_version": report.manifest_version,
        "healthy": report.ok,
        "issues": report.problems,
        "leftovers": report.leftovers,
        "strict": bool(strict),
        "partitions": report.partitions,
        "integrity_partitions_checked": report.integrity_checked,
        "schema": [dataclasses.asdict(i) for i in report.schema_issues],
        "read_versions": [
            {**dataclasses.asdict(i), "detail": error_text(i.detail)} for i in report.version_issues
        ],
        "uncommitted": [dataclasses.asdict(i) for i in report.uncommitted],
        "orphans": [
            {**dataclasses.asdict(o), "stale": o.stale(report.grace)} for o in report.orphans
        ],
        "integrity": [dataclasses.asdict(i) for i in report.integrity_issues],
    }


def _write_report(
    report: HealthReport, args: argparse.Namespace, opts: Options, out: TextIO
) -> None:
    """One namespace's report as text, up to its verdict."""
    text = Text(out, opts.max_width)

    def status(items: Sequence[Any], word: str, ok: str = "ok") -> str:
        return plural(len(items), word) if items else ok

    hours = f"{args.grace_hours:g} h"
    orphans = report.orphans
    uncommitted = report.uncommitted
    oldest = max((o.age_seconds for o in orphans), default=0.0) / 3600
    text.pairs(
        [
            ("root", report.uri),
            ("manifest version", str(report.manifest_version)),
            ("partitions", str(report.partitions)),
            ("schema", status(report.schema_issues, "problem")),
            ("read versions", status(report.version_issues, "unreadable table")),
            ("uncommitted", status(uncommitted, "table") + _leftover(len(uncommitted))),
            (
                "orphans",
                f"{plural(len(orphans), 'orphan table')} "
                f"({size_text(sum(o.bytes for o in orphans))}, oldest {oldest:.1f} h; "
                f"{len(report.stale_orphans)} older than {hours})"
                if orphans
                else "none",
            ),
            (
                "integrity",
                status(
                    report.integrity_issues, "problem", f"ok ({report.integrity_checked} checked)"
                ),
            ),
        ]
    )
    sections = _problem_sections(
        text,
        report.schema_issues,
        report.version_issues,
        report.stale_orphans,
        report.integrity_issues,
        hours,
    )
    for title, headers, rows in sections:
        _section(text, out, title, headers, rows)
    if report.leftovers:
        out.write(
            "\nleftovers of interrupted writes (harmless: reads never see them; the "
            "partition's next write supersedes an uncommitted version, `vacuum` removes orphan "
            f"tables past its grace, {ORPHAN_GRACE.total_seconds() / 3600:g} h by default):\n"
        )
        for title, headers, rows in _leftover_sections(
            text, uncommitted, report.young_orphans, hours
        ):
            _section(text, out, title, headers, rows)


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
