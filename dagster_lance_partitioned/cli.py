"""``lance-partitioned``: inspect, scan, check, maintain, upgrade and import Lance partitioned
namespaces.

Output is a human-readable text (aligned tables) by default and one JSON document on stdout with
``--json``. Exit codes: 0 success, 1 error reported by the package (message on stderr), 2 usage.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import datetime as dt
import decimal
import json
import math
import os
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TextIO

import pyarrow as pa

from .core.errors import PartitionedNamespaceError
from .core.manifest import WRITER_FLAG_KEY
from .core.namespace import PartitionedNamespace
from .core.spec import PartitionSpec, SpecField, source_names

PROG = "lance-partitioned"
DEFAULT_MAX_WIDTH = 80
EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2

_EPILOG = """\
output:
  Human-readable text by default: aligned tables, NULL shown as `null`, cells longer than
  --max-width cut with an ellipsis, binary shown as 0x-hex. With --json, stdout holds exactly
  one JSON document: dates, times and timestamps as ISO-8601 strings, decimals as strings,
  binary as base64 strings, NaN/Infinity as strings. `scan --json` emits a JSON array of row
  objects (keys in column order), written row by row as it is read.

exit codes:
  0 success; 1 error (missing namespace, bad filter, ...: message on stderr), or `check` found
  an issue (the report on stdout); 2 usage error.
"""


class CliError(Exception):
    """An error the CLI reports itself, as the package's errors: message on stderr, exit 1."""


@dataclasses.dataclass(frozen=True)
class Options:
    """Global options after merging the ones given before and after the subcommand."""

    json: bool
    version: int | None
    storage_options: dict[str, str] | None
    max_width: int


# -- argument parsing -------------------------------------------------------------------------
def _non_negative_int(text: str) -> int:
    """An argparse type: an integer >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {value}")
    return value


def _positive_int(text: str) -> int:
    """An argparse type: an integer >= 1."""
    value = _non_negative_int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def _non_negative_float(text: str) -> float:
    """An argparse type: a finite number >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text}")
    return value


def _key_value(text: str) -> tuple[str, str]:
    """An argparse type: ``KEY=VALUE`` with a non-empty key."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value


def _column_list(text: str) -> list[str]:
    """An argparse type: comma-separated column names."""
    names = [c.strip() for c in text.split(",") if c.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"expected column names separated by commas, got {text!r}")
    return names


_DECIMAL_RE = re.compile(r"^decimal(128|256)?\(\s*(\d+)\s*,\s*(-?\d+)\s*\)$")
_TIMESTAMP_RE = re.compile(r"^timestamp\[\s*(s|ms|us|ns)\s*(?:,\s*tz\s*=\s*([^\]]+?)\s*)?\]$")


def parse_arrow_type(text: str) -> pa.DataType:
    """An Arrow type from its name: ``int64``, ``utf8``, ``date32``, ``decimal128(10,2)``, ..."""
    name = text.strip()
    m = _DECIMAL_RE.match(name)
    if m:
        make = pa.decimal256 if m.group(1) == "256" else pa.decimal128
        try:
            return make(int(m.group(2)), int(m.group(3)))
        except (ValueError, pa.ArrowInvalid) as e:
            raise ValueError(f"invalid decimal type {name!r}: {e}") from None
    m = _TIMESTAMP_RE.match(name)
    if m:
        return pa.timestamp(m.group(1), tz=m.group(2))
    try:
        return pa.type_for_alias(name)
    except (ValueError, KeyError):
        raise ValueError(
            f"unknown Arrow type {name!r} (e.g. int32, int64, float64, utf8, bool, date32, "
            "timestamp[us], timestamp[us, tz=UTC], decimal128(10,2))"
        ) from None


def _typed_key(text: str) -> tuple[str, pa.DataType]:
    """An argparse type: ``KEY=ARROW_TYPE``."""
    key, value = _key_value(text)
    try:
        return key, parse_arrow_type(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text!r}: {e}") from None


def _add_global_options(parser: argparse.ArgumentParser, prefix: str, suppress: bool) -> None:
    """Add the global options, stored under ``prefix``-ed names (unset when ``suppress``)."""

    def default(value: Any) -> Any:
        return argparse.SUPPRESS if suppress else value

    group = parser.add_argument_group("global options")
    group.add_argument(
        "--version",
        dest=prefix + "version",
        type=_non_negative_int,
        metavar="N",
        default=default(None),
        help="manifest version to read (read commands; default: latest)",
    )
    group.add_argument(
        "--storage-option",
        dest=prefix + "storage_option",
        type=_key_value,
        action="append",
        metavar="KEY=VALUE",
        default=default(None),
        help="object-store option passed to Lance (repeatable)",
    )
    group.add_argument(
        "--json",
        dest=prefix + "json",
        action="store_true",
        default=default(False),
        help="print one JSON document on stdout instead of text",
    )
    group.add_argument(
        "--max-width",
        dest=prefix + "max_width",
        type=_non_negative_int,
        metavar="N",
        default=default(DEFAULT_MAX_WIDTH),
        help=f"cut text cells longer than N characters (0: never; default {DEFAULT_MAX_WIDTH})",
    )


def build_parser() -> argparse.ArgumentParser:
    """The ``lance-partitioned`` argument parser."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Inspect and read Lance partitioned namespaces (one Lance table per "
        "partition, listed in __manifest).",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_global_options(parser, "", suppress=False)
    common = argparse.ArgumentParser(add_help=False)
    _add_global_options(common, "sub_", suppress=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def add(
        name: str, func: Callable[..., int | None], reads: bool, help: str
    ) -> argparse.ArgumentParser:
        p = sub.add_parser(
            name,
            parents=[common],
            help=help,
            description=help,
            epilog=_EPILOG,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        p.add_argument("uri", metavar="URI", help="namespace root (directory or object-store URI)")
        p.set_defaults(func=func, reads=reads)
        return p

    add("info", _cmd_info, True, "summary: root, manifest version, current spec, counts")
    add("specs", _cmd_specs, True, "every partition spec version with its fields")
    p = add("partitions", _cmd_partitions, True, "registered partition tables")
    p.add_argument("--filter", metavar="SQL", help="only the partitions a scan with SQL reads")
    p = add("explain", _cmd_explain, True, "how a filter prunes partitions, per spec version")
    p.add_argument("--filter", metavar="SQL", required=True, help="DataFusion SQL predicate")
    p = add("scan", _cmd_scan, True, "read rows")
    p.add_argument("--filter", metavar="SQL", help="DataFusion SQL predicate")
    p.add_argument(
        "--columns",
        metavar="A,B",
        type=_column_list,
        action="extend",
        help="columns to read, comma-separated (repeatable; default: all)",
    )
    p.add_argument(
        "--limit", metavar="N", type=_non_negative_int, help="stop after N rows (default: all)"
    )
    add("upgrade", _cmd_upgrade, False, "rewrite draft-shaped manifest metadata in current shape")
    p = add(
        "import-hive",
        _cmd_import_hive,
        False,
        "register a key=value/.../name.lance tree of Lance tables as a partitioned namespace",
    )
    p.add_argument(
        "--type",
        dest="types",
        metavar="KEY=ARROW_TYPE",
        type=_typed_key,
        action="append",
        help="Arrow type of a partition key, e.g. year=int32 (repeatable; default: inferred)",
    )
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
        type=_non_negative_int,
        default=50,
        help="newest manifest versions that count as referencing table versions (default 50)",
    )
    p.add_argument(
        "--sample",
        metavar="N",
        type=_non_negative_int,
        help="check the rows of N sampled partitions only (default: every partition)",
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
        type=_positive_int,
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
        type=_non_negative_float,
        default=7.0,
        help="only versions older than N days are removed (default 7)",
    )
    p.add_argument(
        "--keep-versions",
        metavar="N",
        type=_positive_int,
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
        type=_non_negative_float,
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
        parser.error(f"--version selects a manifest version to read; {args.command} cannot use it")
    if args.command == "import-hive":
        keys = [k for k, _ in args.types or []]
        repeated = sorted({k for k in keys if keys.count(k) > 1})
        if repeated:
            parser.error(f"--type given more than once for {', '.join(repeated)}")
    return args, options


# -- value rendering --------------------------------------------------------------------------
def to_json_value(value: Any) -> Any:
    """``value`` made JSON-serialisable: ISO dates, string decimals, base64 bytes."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, dt.date | dt.time | dt.datetime):
        return value.isoformat()
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, dict):
        return {str(k): to_json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json_value(v) for v in value]
    if hasattr(value, "isoformat"):  # e.g. pandas.Timestamp
        return value.isoformat()
    return str(value)


def _ellipsis(out: TextIO) -> str:
    """``…`` when ``out`` can encode it, else ``...``."""
    try:
        "…".encode(getattr(out, "encoding", None) or "utf-8")
    except (UnicodeEncodeError, LookupError):
        return "..."
    return "…"


class _Text:
    """Renders values and tables as text for one output stream."""

    def __init__(self, out: TextIO, max_width: int) -> None:
        self.out = out
        self.max_width = max_width
        self.ellipsis = _ellipsis(out)

    def value(self, value: Any) -> str:
        """One value as text (``null`` for NULL), without cutting."""
        if value is None:
            return "null"
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, bytes | bytearray | memoryview):
            return "0x" + bytes(value).hex()
        if isinstance(value, dt.datetime | dt.date | dt.time):
            return value.isoformat()
        if isinstance(value, dict | list | tuple):
            return json.dumps(to_json_value(value), ensure_ascii=False, separators=(", ", ": "))
        return str(value)

    def cut(self, text: str) -> str:
        """``text`` on one line, cut to the maximum width with an ellipsis."""
        text = text.replace("\r", "\\r").replace("\n", "\\n").replace("\t", "\\t")
        if self.max_width and len(text) > self.max_width:
            keep = max(self.max_width - len(self.ellipsis), 1)
            return text[:keep] + self.ellipsis
        return text

    def cell(self, value: Any) -> str:
        """One table cell."""
        return self.cut(self.value(value))

    def table(
        self, headers: Sequence[str], rows: Iterable[Sequence[str]], right: Iterable[int] = ()
    ) -> None:
        """Write an aligned table: header, dashes, rows (cells already rendered)."""
        heads = [self.cut(h) for h in headers]
        body = [list(r) for r in rows]
        widths = [len(h) for h in heads]
        for r in body:
            for i, c in enumerate(r):
                widths[i] = max(widths[i], len(c))
        align_right = set(right)

        def line(cells: Sequence[str]) -> str:
            parts = [
                c.rjust(widths[i]) if i in align_right else c.ljust(widths[i])
                for i, c in enumerate(cells)
            ]
            return "  ".join(parts).rstrip()

        self.out.write(line(heads) + "\n")
        self.out.write(line(["-" * w for w in widths]) + "\n")
        for r in body:
            self.out.write(line(r) + "\n")

    def pairs(self, items: Sequence[tuple[str, str]]) -> None:
        """Write ``key  value`` lines with the keys aligned."""
        width = max((len(k) for k, _ in items), default=0)
        for k, v in items:
            self.out.write(f"{k.ljust(width)}  {v}".rstrip() + "\n")


def _write_json(out: TextIO, doc: Any) -> None:
    """Write ``doc`` as one JSON document."""
    out.write(json.dumps(to_json_value(doc), indent=2, ensure_ascii=False, allow_nan=False))
    out.write("\n")


def _plural(n: int, word: str) -> str:
    """``1 partition`` / ``2 partitions``."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


# -- specs ------------------------------------------------------------------------------------
def _transform_text(f: SpecField) -> str:
    """``identity``, ``bucket[16]``, ``truncate[4]`` or ``expression: <sql>``."""
    if f.transform is None:
        return f"expression: {f.expression}"
    obj = f.transform.to_json()
    params = [str(v) for k, v in obj.items() if k != "type"]
    return obj["type"] + (f"[{', '.join(params)}]" if params else "")


def _source_labels(f: SpecField, schema: pa.Schema) -> list[str]:
    """The field's source columns by name (``#<id> (dropped)`` for ids no longer present)."""
    names = source_names(f, schema)
    return [
        n if n is not None else f"#{sid} (dropped)"
        for n, sid in zip(names, f.source_ids, strict=True)
    ]


def _field_summary(f: SpecField, schema: pa.Schema) -> str:
    """``event_date_year=year(event_date)``."""
    sources = ", ".join(_source_labels(f, schema))
    if f.transform is None:
        return f"{f.field_id}=({f.expression} over {sources})"
    return f"{f.field_id}={_transform_text(f)}({sources})"


def _field_doc(f: SpecField, schema: pa.Schema) -> dict[str, Any]:
    """A spec field as JSON: its stored form plus source names, type name and manifest column."""
    doc = f.to_json()
    doc["source_columns"] = source_names(f, schema)
    doc["result_type_name"] = str(f.result_type)
    doc["column"] = f.column
    return doc


def _spec_doc(spec: PartitionSpec, schema: pa.Schema, current: bool) -> dict[str, Any]:
    """A spec version as JSON."""
    return {
        "spec_id": spec.spec_id,
        "current": current,
        "draft": spec.draft,
        "fields": [_field_doc(f, schema) for f in spec.fields],
    }


# -- commands ---------------------------------------------------------------------------------
def _open(args: argparse.Namespace, opts: Options) -> PartitionedNamespace:
    """Open the namespace named on the command line."""
    return PartitionedNamespace.open(
        args.uri, storage_options=opts.storage_options, version=opts.version
    )


def _info_doc(ns: PartitionedNamespace) -> dict[str, Any]:
    """The ``info`` document of a namespace."""
    schema = ns.schema_with_ids
    spec = ns.current_spec
    return {
        "uri": ns.uri,
        "manifest_version": ns.version,
        "current_spec": _spec_doc(spec, schema, current=True),
        "spec_versions": len(ns.specs),
        "partitions": len(ns.partitions()),
        "columns": len(schema),
        "schema": [
            {
                "name": f.name,
                "type": str(f.type),
                "nullable": f.nullable,
                "field_id": int(f.metadata[b"lance:field_id"])
                if f.metadata and b"lance:field_id" in f.metadata
                else None,
            }
            for f in schema
        ],
        "writer_feature_flags": ns.metadata.get(WRITER_FLAG_KEY),
    }


def _write_info(ns: PartitionedNamespace, opts: Options, out: TextIO) -> None:
    """Write the ``info`` summary of ``ns``."""
    if opts.json:
        _write_json(out, _info_doc(ns))
        return
    text = _Text(out, opts.max_width)
    schema = ns.schema_with_ids
    spec = ns.current_spec
    fields = ", ".join(_field_summary(f, schema) for f in spec.fields)
    flag = ns.metadata.get(WRITER_FLAG_KEY)
    text.pairs(
        [
            ("root", ns.uri),
            ("manifest version", str(ns.version)),
            ("current spec", f"v{spec.spec_id}{' (draft shape)' if spec.draft else ''}: {fields}"),
            ("spec versions", str(len(ns.specs))),
            ("partitions", str(len(ns.partitions()))),
            ("columns", text.cut(f"{len(schema)} ({', '.join(schema.names)})")),
            ("writer flag", flag if flag is not None else "(not set)"),
        ]
    )


def _cmd_info(args: argparse.Namespace, opts: Options, out: TextIO) -> None:
    """``info URI``."""
    _write_info(_open(args, opts), opts, out)


def _cmd_specs(args: argparse.Namespace, opts: Options, out: TextIO) -> None:
    """``specs URI``."""
    ns = _open(args, opts)
    schema = ns.schema_with_ids
    current = ns.current_spec.spec_id
    if opts.json:
        _write_json(
            out,
            {
                "uri": ns.uri,
                "manifest_version": ns.version,
                "current_spec": current,
                "specs": [_spec_doc(s, schema, s.spec_id == current) for s in ns.specs],
            },
        )
        return
    text = _Text(out, opts.max_width)
    for i, spec in enumerate(ns.specs):
        if i:
            out.write("\n")
        flags = (("current", spec.spec_id == current), ("draft shape", spec.draft))
        notes = [n for n, on in flags if on]
        out.write(f"spec v{spec.spec_id}" + (f" ({', '.join(notes)})" if notes else "") + "\n")
        text.table(
            ["field_id", "sources", "transform", "result_type", "manifest column"],
            [
                [
                    text.cut(f.field_id),
                    text.cut(", ".join(_source_labels(f, schema))),
                    text.cut(_transform_text(f)),
                    text.cut(str(f.result_type)),
                    text.cut(f.column),
                ]
                for f in spec.fields
            ],
        )


def _cmd_partitions(args: argparse.Namespace, opts: Options, out: TextIO) -> None:
    """``partitions URI [--filter SQL]``."""
    ns = _open(args, opts)
    filter_sql = args.filter if args.filter and args.filter.strip() else None
    if filter_sql is None:
        parts = ns.partitions()
        total = len(parts)
    else:
        plan = ns.plan_scan(filter_sql)
        total = plan.total_partitions
        parts = [
            {
                "object_id": t.object_id,
                "location": t.location,
                "spec_id": t.spec_id,
                "values": t.partition_values,
                "read_version": t.read_version,
                "read_branch": t.read_branch,
                "read_tag": t.read_tag,
            }
            for t in plan.tasks
        ]
    if opts.json:
        _write_json(
            out,
            {
                "uri": ns.uri,
                "manifest_version": ns.version,
                "filter": filter_sql,
                "total_partitions": total,
                "partitions": parts,
            },
        )
        return
    text = _Text(out, opts.max_width)
    headers = ["object_id", "location", "spec", "values", "read_version"]
    extra = [k for k in ("read_branch", "read_tag") if any(p[k] is not None for p in parts)]
    rows = [
        [
            text.cell(p["object_id"]),
            text.cell(p["location"]),
            f"v{p['spec_id']}",
            text.cut(", ".join(f"{k}={text.value(v)}" for k, v in p["values"].items())),
            text.cell(p["read_version"]),
        ]
        + [text.cell(p[k]) for k in extra]
        for p in parts
    ]
    text.table(headers + extra, rows, right=[4])
    if filter_sql is None:
        out.write(_plural(total, "partition") + "\n")
    else:
        out.write(f"{len(parts)} of {_plural(total, 'partition')} planned for filter: ")
        out.write(text.cut(filter_sql) + "\n")


def _cmd_explain(args: argparse.Namespace, opts: Options, out: TextIO) -> None:
    """``explain URI --filter SQL``."""
    ns = _open(args, opts)
    explain = getattr(ns, "explain", None)
    if explain is None:
        raise CliError(
            "explain is not available: this version of dagster_lance_partitioned has no "
            "PartitionedNamespace.explain"
        )
    result = explain(args.filter)
    if opts.json:
        _write_json(out, result.to_dict())
    else:
        out.write(str(result).rstrip("\n") + "\n")


def _is_numeric(t: pa.DataType) -> bool:
    """Whether values of ``t`` are right-aligned in tables."""
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)


def _iter_rows(reader: pa.RecordBatchReader, limit: int | None) -> Iterable[dict[str, Any]]:
    """Rows of ``reader`` as dicts, stopping after ``limit`` rows without reading further."""
    left = limit
    if left is not None and left <= 0:
        return
    for batch in reader:
        if left is not None:
            if batch.num_rows > left:
                batch = batch.slice(0, left)
            left -= batch.num_rows
        yield from batch.to_pylist()
        if left is not None and left <= 0:
            return


def _cmd_scan(args: argparse.Namespace, opts: Options, out: TextIO) -> None:
    """``scan URI [--filter SQL] [--columns A,B] [--limit N]``."""
    ns = _open(args, opts)
    limit = args.limit
    reader = ns.scan(filter=args.filter or None, columns=args.columns)
    try:
        rows = _iter_rows(reader, limit)
        if opts.json:
            n = 0
            for row in rows:
                out.write("[\n  " if n == 0 else ",\n  ")
                out.write(json.dumps(to_json_value(row), ensure_ascii=False, allow_nan=False))
                n += 1
            out.write("[]\n" if n == 0 else "\n]\n")
            return
        text = _Text(out, opts.max_width)
        schema = reader.schema
        cells = [[text.cell(row[name]) for name in schema.names] for row in rows]
        right = [i for i, f in enumerate(schema) if _is_numeric(f.type)]
        text.table(schema.names, cells, right=right)
        reached = limit is not None and len(cells) == limit
        out.write(_plural(len(cells), "row") + (" (limit reached)" if reached else "") + "\n")
    finally:
        close = getattr(reader, "close", None)
        if close is not None:
            close()


def _cmd_upgrade(args: argparse.Namespace, opts: Options, out: TextIO) -> None:
    """``upgrade URI``."""
    ns = _open(args, opts)
    before = ns.version
    after = _optional_feature("upgrade", lambda: ns.upgrade())
    doc = {
        "uri": ns.uri,
        "previous_version": before,
        "manifest_version": after,
        "changed": after != before,
    }
    if opts.json:
        _write_json(out, doc)
    elif after != before:
        out.write(f"{ns.uri}: upgraded, manifest version {before} -> {after}\n")
    else:
        out.write(f"{ns.uri}: already in the current shape (manifest version {after})\n")


def _cmd_import_hive(args: argparse.Namespace, opts: Options, out: TextIO) -> None:
    """``import-hive URI [--type KEY=ARROW_TYPE ...]``."""
    types = dict(args.types or []) or None
    ns = _optional_feature(
        "import-hive",
        lambda: PartitionedNamespace.import_hive(
            args.uri, types=types, storage_options=opts.storage_options
        ),
    )
    if not opts.json:
        out.write(f"imported {_plural(len(ns.partitions()), 'partition table')}\n\n")
    _write_info(ns, opts, out)


# -- health and maintenance -------------------------------------------------------------------
def _values_text(text: _Text, values: dict[str, Any]) -> str:
    """``country=US, year=2025``."""
    return text.cut(", ".join(f"{k}={text.value(v)}" for k, v in values.items()))


def _size_text(n: int) -> str:
    """A byte count for people: ``512 B``, ``2.0 KiB``, ``3.1 MiB``."""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{n} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def _cmd_check(args: argparse.Namespace, opts: Options, out: TextIO) -> int:
    """``check URI [--history N] [--sample N]``: exit 1 when any issue is found."""
    from .core import health

    ns = _open(args, opts)
    schema = health.check_schemas(ns)
    broken, uncommitted = health.check_read_versions(ns, history=args.history)
    orphans = health.find_orphans(ns)  # what vacuum would remove (every version on storage)
    integrity = health.check_integrity(ns, sample=args.sample)
    partitions = len(ns.partitions())
    checked = partitions if args.sample is None else min(args.sample, partitions)
    found = len(schema) + len(broken) + len(uncommitted) + len(orphans) + len(integrity)
    if opts.json:
        _write_json(
            out,
            {
                "uri": ns.uri,
                "manifest_version": ns.version,
                "healthy": found == 0,
                "issues": found,
                "partitions": partitions,
                "integrity_partitions_checked": checked,
                "schema": [dataclasses.asdict(i) for i in schema],
                "read_versions": [dataclasses.asdict(i) for i in broken],
                "uncommitted": [dataclasses.asdict(i) for i in uncommitted],
                "orphans": [dataclasses.asdict(i) for i in orphans],
                "integrity": [dataclasses.asdict(i) for i in integrity],
            },
        )
        return EXIT_OK if found == 0 else EXIT_ERROR
    text = _Text(out, opts.max_width)

    def status(items: Sequence[Any], word: str, ok: str = "ok") -> str:
        return _plural(len(items), word) if items else ok

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
                f"{_plural(len(orphans), 'orphan table')} "
                f"({_size_text(sum(o.bytes for o in orphans))}, oldest {oldest:.1f} h)"
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
                    _values_text(text, i.values),
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
                [text.cell(i.object_id), text.cell(i.location), i.problem, text.cell(i.detail)]
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
                [text.cell(o.location), f"{o.age_seconds / 3600:.2f}", _size_text(o.bytes)]
                for o in orphans
            ],
        ),
        (
            "rows in the wrong partition",
            ["object_id", "values", "rows_wrong", "sample row"],
            [
                [
                    text.cell(i.object_id),
                    _values_text(text, i.values),
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
    out.write("\n" + ("healthy" if found == 0 else f"{_plural(found, 'issue')} found") + "\n")
    return EXIT_OK if found == 0 else EXIT_ERROR


def _result_doc(ns: PartitionedNamespace, result: Any) -> dict[str, Any]:
    """A maintenance result as JSON: the root and the result's fields."""
    return {"uri": ns.uri, **dataclasses.asdict(result)}


def _cmd_compact(args: argparse.Namespace, opts: Options, out: TextIO) -> None:
    """``compact URI [--filter SQL] [--target-rows N]``."""
    ns = _open(args, opts)
    result = ns.compact(filter=args.filter or None, target_rows_per_fragment=args.target_rows)
    if opts.json:
        _write_json(out, _result_doc(ns, result))
        return
    text = _Text(out, opts.max_width)
    if not result.partitions:
        out.write(f"{ns.uri}: nothing to compact (manifest version {result.manifest_version})\n")
    else:
        out.write(
            f"compacted {_plural(len(result.partitions), 'partition')} in manifest version "
            f"{result.manifest_version}\n"
        )
        text.table(
            ["object_id", "fragments before", "fragments after"],
            [[text.cell(oid), str(b), str(a)] for oid, b, a in result.partitions],
            right=[1, 2],
        )
    if result.skipped:
        out.write(
            f"skipped {_plural(len(result.skipped), 'partition')} a concurrent commit changed: "
            + text.cut(", ".join(result.skipped))
            + "\n"
        )


def _cmd_cleanup(args: argparse.Namespace, opts: Options, out: TextIO) -> None:
    """``cleanup URI [--older-than-days N] [--keep-versions N]``."""
    ns = _open(args, opts)
    result = ns.cleanup(
        older_than=dt.timedelta(days=args.older_than_days),
        keep_manifest_versions=args.keep_versions,
    )
    if opts.json:
        _write_json(out, _result_doc(ns, result))
        return
    text = _Text(out, opts.max_width)
    text.pairs(
        [
            ("manifest versions removed", str(result.manifest_versions_removed)),
            ("manifest versions kept", str(result.manifest_versions_kept)),
            ("table versions removed", str(result.table_versions_removed)),
            ("files removed", str(result.files_removed)),
            ("bytes removed", _size_text(result.bytes_removed)),
            ("tables skipped", text.cut(", ".join(result.tables_skipped)) or "none"),
        ]
    )


def _cmd_vacuum(args: argparse.Namespace, opts: Options, out: TextIO) -> None:
    """``vacuum URI [--grace-hours N]``."""
    ns = _open(args, opts)
    result = ns.vacuum(grace=dt.timedelta(hours=args.grace_hours))
    if opts.json:
        _write_json(out, _result_doc(ns, result))
        return
    text = _Text(out, opts.max_width)
    text.pairs(
        [
            ("orphans removed", str(len(result.orphans_removed))),
            ("orphans kept", f"{len(result.orphans_kept)} (inside the grace period)"),
            ("files removed", str(result.files_removed)),
            ("bytes removed", _size_text(result.bytes_removed)),
            ("tables skipped", text.cut(", ".join(result.tables_skipped)) or "none"),
        ]
    )
    for location in result.orphans_removed:
        out.write(f"removed {text.cut(location)}\n")


def _cmd_drop_partitions(args: argparse.Namespace, opts: Options, out: TextIO) -> None:
    """``drop-partitions URI --filter SQL``."""
    ns = _open(args, opts)
    result = ns.drop_partitions(args.filter)
    if opts.json:
        _write_json(out, {**_result_doc(ns, result), "rows": result.rows})
        return
    text = _Text(out, opts.max_width)
    if not result.partitions:
        out.write(
            f"no partition has all its rows matching the filter; nothing dropped "
            f"(manifest version {result.manifest_version})\n"
        )
        return
    out.write(
        f"dropped {_plural(len(result.partitions), 'partition')} "
        f"({_plural(result.rows, 'row')}) in manifest version {result.manifest_version}\n"
    )
    text.table(
        ["object_id", "values", "rows"],
        [
            [text.cell(p.object_id), _values_text(text, p.values), str(p.rows)]
            for p in result.partitions
        ],
        right=[2],
    )


def _optional_feature(name: str, call: Callable[[], Any]) -> Any:
    """Run ``call``, reporting a missing optional module of this package as a CLI error."""
    try:
        return call()
    except ModuleNotFoundError as e:
        if e.name and e.name.startswith(__package__ or "dagster_lance_partitioned"):
            raise CliError(
                f"{name} is not available: this version of dagster_lance_partitioned has no "
                f"module {e.name}"
            ) from None
        raise


# -- entry point ------------------------------------------------------------------------------
def _report(message: str) -> None:
    """Write ``lance-partitioned: error: <message>`` on stderr."""
    sys.stderr.write(f"{PROG}: error: {message}\n")


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``lance-partitioned`` on ``argv`` (default: ``sys.argv[1:]``); return the exit code."""
    try:
        args, opts = parse(argv)
    except SystemExit as e:  # usage error (2) or --help (0)
        return e.code if isinstance(e.code, int) else (EXIT_OK if e.code is None else EXIT_USAGE)
    out = sys.stdout
    try:
        code = args.func(args, opts, out)
        out.flush()
    except (PartitionedNamespaceError, CliError) as e:
        _report(str(e) or type(e).__name__)
        return EXIT_ERROR
    except BrokenPipeError:  # e.g. piped into `head`: stop quietly
        _silence_stdout()
        return EXIT_ERROR
    except (OSError, ValueError) as e:  # raised by Lance / Arrow, e.g. a missing table file
        _report(f"{args.uri}: {_first_line(e)}")
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    return code if isinstance(code, int) else EXIT_OK


def _first_line(e: BaseException) -> str:
    """The first line of an exception's message (its type name when empty)."""
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


if __name__ == "__main__":
    sys.exit(main())
