"""``lance-partitioned``: inspect, scan, search, check, maintain, upgrade and import Lance
partitioned namespaces.

Output is a human-readable text (aligned tables) by default and one JSON document on stdout with
``--json``. Exit codes: 0 success, 1 error reported by the package (message on stderr) or a
problem ``check`` found, 2 usage.

Subcommands live in one module per group: :mod:`.inspect` (read-only), :mod:`.search`
(indexes and search across partitions), :mod:`.check` (health checks), :mod:`.maintenance`
(storage maintenance) and :mod:`.convert` (upgrade, import).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TextIO

from .. import __version__
from ..core import PartitionedNamespaceError
from ..core.engine import is_storage_failure
from . import check, convert, inspect, maintenance, search
from ._args import (
    DEFAULT_MAX_WIDTH,
    EXIT_ERROR,
    EXIT_OK,
    EXIT_USAGE,
    Command,
    Options,
    add_global_options,
    parse_arrow_type,
)
from ._output import PROG, first_line, report, silence_stdout, to_json_value, write_json
from .errors import CliError

__all__ = [
    "DEFAULT_MAX_WIDTH",
    "PROG",
    "CliError",
    "Options",
    "build_parser",
    "main",
    "parse",
    "parse_arrow_type",
    "to_json_value",
]

_EPILOG = """\
output:
  Human-readable text by default: aligned tables, NULL shown as `null`, cells longer than
  --max-width cut with an ellipsis, binary shown as 0x-hex. With --json, stdout holds exactly
  one JSON document: dates, times and timestamps as ISO-8601 strings, decimals as strings,
  binary as base64 strings, NaN/Infinity as strings. `scan --json` emits a JSON array of row
  objects (keys in column order), written row by row as it is read; `search --json` too, each
  row ending with its `_distance` (vector query) or `_score` (text query).

filters:
  DataFusion SQL over the namespace's columns. A partition field id that is not a column
  (e.g. event_date_year, time_hour_day) can be named too: it stands for the field's value.
  String values go in single quotes (origin = 'JFK'); a bare word or "double quotes" name a
  column.

exit codes:
  0 success; 1 error (missing namespace, bad filter, ...: message on stderr), or `check` found
  a problem (the report on stdout; leftovers of interrupted writes count only with --strict);
  2 usage error.
"""


def _program_version() -> str:
    return f"{PROG} {__version__}"


def _cmd_version(args: argparse.Namespace, opts: Options, out: TextIO) -> None:
    """``version``."""
    if opts.json:
        write_json(out, {"program": PROG, "version": __version__})
    else:
        out.write(_program_version() + "\n")


def build_parser() -> argparse.ArgumentParser:
    """The ``lance-partitioned`` argument parser."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Inspect and read Lance partitioned namespaces (one Lance table per "
        "partition, listed in __manifest).",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-V", action="version", version=_program_version())
    add_global_options(parser, "", suppress=False)
    common = argparse.ArgumentParser(add_help=False)
    add_global_options(common, "sub_", suppress=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def add(
        name: str, func: Command, reads: bool, help: str, uri: str | None = "URI"
    ) -> argparse.ArgumentParser:
        p = sub.add_parser(
            name,
            parents=[common],
            help=help,
            description=help,
            epilog=_EPILOG,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        if uri is not None:
            what = "namespace root" if uri == "URI" else "directory holding namespaces"
            p.add_argument("uri", metavar=uri, help=f"{what} (directory or object-store URI)")
        p.set_defaults(func=func, reads=reads)
        return p

    inspect.register(add)
    search.register(add)
    check.register(add)
    maintenance.register(add)
    convert.register(add)
    add("version", _cmd_version, False, "print the program's version (also: -V)", uri=None)
    return parser


def parse(argv: Sequence[str] | None) -> tuple[argparse.Namespace, Options]:
    """Parse ``argv``; exits with status 2 on a usage error (argparse's behaviour)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    version = getattr(args, "sub_version", None)
    if version is None:
        version = args.version
    storage = list(args.storage_option or []) + list(getattr(args, "sub_storage_option", []) or [])
    options = Options(
        json=bool(args.json or getattr(args, "sub_json", False)),
        version=version,
        storage_options=dict(storage) or None,
        max_width=getattr(args, "sub_max_width", args.max_width),
    )
    if version is not None and not args.reads:
        parser.error(f"--as-of selects a manifest version to read; {args.command} cannot use it")
    if args.command == "import-hive":
        convert.check_types(parser, args)
    return args, options


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``lance-partitioned`` on ``argv`` (default: ``sys.argv[1:]``); return the exit code."""
    try:
        args, opts = parse(argv)
    except SystemExit as e:  # usage error (2), --help or -V (0)
        return e.code if isinstance(e.code, int) else (EXIT_OK if e.code is None else EXIT_USAGE)
    out = sys.stdout
    try:
        code = args.func(args, opts, out)
        out.flush()
    except (PartitionedNamespaceError, CliError) as e:
        report(e)
        return EXIT_ERROR
    except BrokenPipeError:  # e.g. piped into `head`: stop quietly
        silence_stdout()
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # raised by Lance / Arrow, e.g. a missing table file
        if not (isinstance(e, OSError | ValueError) or is_storage_failure(e)):
            raise
        where = getattr(args, "uri", None)
        report(f"{where}: {first_line(e)}" if where else first_line(e))
        return EXIT_ERROR
    return code if isinstance(code, int) else EXIT_OK
