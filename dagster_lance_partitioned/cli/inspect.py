"""Read-only subcommands: ``info``, ``specs``, ``partitions``, ``explain``, ``scan``,
``history`` and ``ls``."""

from __future__ import annotations

import argparse
import datetime as dt
import json
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any, TextIO, cast

import pyarrow as pa

from ..core import (
    CommitSummary,
    Operation,
    PartitionedNamespace,
    PartitionedNamespaceError,
    ScanTask,
    TableChange,
)
from ..core.engine import (
    LEGACY_WRITER_FLAG_BIT,
    PROP_DAGSTER_ASSET_KEY,
    PROP_DAGSTER_RUN_ID,
    PROP_SOURCE,
    WRITER_FLAG_BIT,
    WRITER_FLAG_KEY,
    ManifestStore,
    field_summary,
    file_sizes,
    is_storage_failure,
    open_table,
    parallel_map,
    parse_writer_flags,
    resolve_filter,
    source_labels,
    transform_text,
)
from ._args import (
    AddCommand,
    Options,
    column_list,
    non_negative_int,
    open_ns,
    open_ns_or_below,
)
from ._fields import spec_doc
from ._output import Text, is_numeric, plural, size_text, to_json_value, write_json
from ._walk import DEFAULT_LS_DEPTH, find_namespaces

DEFAULT_HISTORY = 20


def register(add: AddCommand) -> None:
    """Add the read-only subcommands."""
    add(
        "info",
        _cmd_info,
        True,
        "summary: root, manifest version, current spec, counts (of each namespace a directory "
        "holding several has)",
    )
    add("specs", _cmd_specs, True, "every partition spec version with its fields")
    p = add(
        "partitions",
        _cmd_partitions,
        True,
        "registered partition tables with their rows and size, sorted by partition values",
    )
    p.add_argument("--filter", metavar="SQL", help="only the partitions holding matching rows")
    p.add_argument(
        "--no-stats",
        action="store_true",
        help="do not open the partition tables to count rows and bytes",
    )
    p = add("explain", _cmd_explain, True, "how a filter prunes partitions, per spec version")
    p.add_argument("--filter", metavar="SQL", required=True, help="DataFusion SQL predicate")
    p = add("scan", _cmd_scan, True, "read rows")
    p.add_argument("--filter", metavar="SQL", help="DataFusion SQL predicate")
    p.add_argument(
        "--columns",
        metavar="A,B",
        type=column_list,
        action="extend",
        help="columns to read, comma-separated (repeatable; default: all)",
    )
    p.add_argument(
        "--limit", metavar="N", type=non_negative_int, help="stop after N rows (default: all)"
    )
    p = add(
        "history",
        _cmd_history,
        True,
        "manifest versions, newest first: time, operation, partitions touched, Dagster run id",
    )
    p.add_argument(
        "--limit",
        metavar="N",
        type=non_negative_int,
        default=DEFAULT_HISTORY,
        help=f"the N newest versions (0: all; default {DEFAULT_HISTORY})",
    )
    p = add(
        "ls",
        _cmd_ls,
        False,
        "the partitioned namespaces under a root (e.g. a Dagster IO manager's base path)",
        uri="ROOT",
    )
    p.add_argument(
        "--max-depth",
        metavar="N",
        type=non_negative_int,
        default=DEFAULT_LS_DEPTH,
        help=f"look N directory levels below ROOT (default {DEFAULT_LS_DEPTH})",
    )


# -- info / specs -----------------------------------------------------------------------------
# what the bits of the writer feature flags mean (docs/reference/format.md, "Writer feature flag")
_OUR_BIT = WRITER_FLAG_BIT.bit_length() - 1  # 62
_LEGACY_BIT = LEGACY_WRITER_FLAG_BIT.bit_length() - 1  # 1


def writer_flag_bits(value: str | None) -> list[dict[str, Any]]:
    """The set bits of a ``__manifest``'s writer feature flags, each with what it means (an
    empty list when unset; ``ManifestError`` when the value is not a u64 bitmask)."""
    flags = parse_writer_flags(value)
    ours = bool(flags & WRITER_FLAG_BIT)
    out = []
    for bit in range(64):
        if not flags >> bit & 1:
            continue
        if bit == _OUR_BIT:
            meaning = (
                "set by dagster-lance-partitioned, so Lance's own namespace tools read this "
                "__manifest but do not change it"
            )
        elif bit == _LEGACY_BIT and not ours:
            meaning = (
                "the legacy flag of an earlier dagster-lance-partitioned (`upgrade` replaces "
                f"it by bit {_OUR_BIT})"
            )
        elif bit == 0:
            meaning = "Lance's namespace lifecycle feature"
        else:
            meaning = "unknown to this package (another writer's feature)"
        out.append({"bit": bit, "meaning": meaning})
    return out


def _writer_flag_text(value: str | None) -> str:
    """``4611686018427387904 = bit 62: set by dagster-lance-partitioned, ...``, or ``(not set)``
    with what that means."""
    if value is None or value == "":
        return "(not set): Lance's own namespace tools may rewrite this __manifest"
    try:
        bits = writer_flag_bits(value)
    except PartitionedNamespaceError:
        return f"{value} (not a decimal u64 bitmask)"
    return f"{value} = " + "; ".join(f"bit {b['bit']}: {b['meaning']}" for b in bits)


UNPARTITIONED = "no partition fields (one table holds every row)"


def info_doc(ns: PartitionedNamespace) -> dict[str, Any]:
    """The ``info`` document of a namespace."""
    schema = ns.schema_with_ids
    spec = ns.current_spec
    rows, size = _recorded_totals(ns)
    return {
        "uri": ns.uri,
        "manifest_version": ns.version,
        "current_spec": spec_doc(spec, schema, current=True),
        "spec_versions": len(ns.specs),
        "partitions": len(ns.inspect.partitions()),
        "rows": rows,
        "bytes": size,
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
        "writer_feature_flag_bits": _flag_bits_or_none(ns.metadata.get(WRITER_FLAG_KEY)),
    }


def _totals_text(rows: int | None, size: int | None) -> str:
    if rows is None:
        return "? (some tables have no statistics: collect-statistics records them)"
    return f"{rows}" + ("" if size is None else f" ({size_text(size)})")


def _recorded_totals(ns: PartitionedNamespace) -> tuple[int | None, int | None]:
    """Rows and data-file bytes of every partition table, as the manifest records them (None:
    some table has no statistics; no table is opened)."""
    tables = ns.state.snapshot.tables()
    found = [t.stats for t in tables]
    if any(s is None for s in found):
        return None, None
    rows = sum(s.rows for s in found if s is not None)
    sizes = [s.bytes for s in found if s is not None]
    return rows, None if any(b is None for b in sizes) else sum(b for b in sizes if b is not None)


def _flag_bits_or_none(value: str | None) -> list[dict[str, Any]] | None:
    """``writer_flag_bits``, or None for a value that is not a bitmask."""
    try:
        return writer_flag_bits(value)
    except PartitionedNamespaceError:
        return None


def write_info(ns: PartitionedNamespace, opts: Options, out: TextIO) -> None:
    """Write the ``info`` summary of ``ns``."""
    if opts.json:
        write_json(out, info_doc(ns))
        return
    text = Text(out, opts.max_width)
    schema = ns.schema_with_ids
    spec = ns.current_spec
    fields = ", ".join(field_summary(f, schema) for f in spec.fields) or UNPARTITIONED
    flag = ns.metadata.get(WRITER_FLAG_KEY)
    text.pairs(
        [
            ("root", ns.uri),
            ("manifest version", str(ns.version)),
            ("current spec", f"v{spec.spec_id}{' (draft shape)' if spec.draft else ''}: {fields}"),
            ("spec versions", str(len(ns.specs))),
            ("partitions", str(len(ns.inspect.partitions()))),
            ("rows", _totals_text(*_recorded_totals(ns))),
            ("columns", text.cut(f"{len(schema)} ({', '.join(schema.names)})")),
            ("writer flag", _writer_flag_text(flag)),
        ]
    )


def _cmd_info(args: argparse.Namespace, opts: Options, out: TextIO) -> None:
    """``info URI``: a namespace's summary, or that of each namespace a ``URI`` holding
    several has (as ``ls`` finds them)."""
    found = open_ns_or_below(args, opts)
    if not isinstance(found, list):
        write_info(found, opts, out)
        return
    if opts.json:
        write_json(
            out,
            {
                "root": args.uri,
                "namespaces": [
                    {"path": f.path, **info_doc(f.ns)}
                    if f.ns is not None
                    else {"path": f.path, "uri": f.uri, "error": f.error}
                    for f in found
                ],
            },
        )
        return
    for i, f in enumerate(found):
        out.write(("\n" if i else "") + f"== {f.path}\n")
        if f.ns is None:
            out.write(f"unreadable: {f.error}\n")
        else:
            write_info(f.ns, opts, out)


def _cmd_specs(args: argparse.Namespace, opts: Options, out: TextIO) -> None:
    """``specs URI``."""
    ns = open_ns(args, opts)
    schema = ns.schema_with_ids
    current = ns.current_spec.spec_id
    if opts.json:
        write_json(
            out,
            {
                "uri": ns.uri,
                "manifest_version": ns.version,
                "current_spec": current,
                "specs": [spec_doc(s, schema, s.spec_id == current) for s in ns.specs],
            },
        )
        return
    text = Text(out, opts.max_width)
    for i, spec in enumerate(ns.specs):
        if i:
            out.write("\n")
        flags = (("current", spec.spec_id == current), ("draft shape", spec.draft))
        notes = [n for n, on in flags if on]
        out.write(f"spec v{spec.spec_id}" + (f" ({', '.join(notes)})" if notes else "") + "\n")
        if not spec.fields:
            out.write(UNPARTITIONED + "\n")
            continue
        text.table(
            ["field_id", "sources", "transform", "result_type", "manifest column"],
            [
                [
                    text.cut(f.field_id),
                    text.cut(", ".join(source_labels(f, schema))),
                    text.cut(transform_text(f, schema)),
                    text.cut(str(f.result_type)),
                    text.cut(f.column),
                ]
                for f in spec.fields
            ],
        )


# -- partitions -------------------------------------------------------------------------------
def _table_stats(task: ScanTask, storage_options: dict[str, str] | None) -> tuple[int, int]:
    """Rows and data-file bytes of a partition table at its pinned version (as the manifest
    records them; a table without statistics is opened)."""
    if task.stats is not None and task.stats.bytes is not None:
        return task.stats.rows, task.stats.bytes
    ds = open_table(task, storage_options)
    rows = ds.count_rows()
    size, unknown = 0, []
    for fragment in ds.get_fragments():
        for data_file in fragment.metadata.files:
            if data_file.file_size_bytes is not None:
                size += data_file.file_size_bytes
            elif getattr(data_file, "base_id", None) is None:
                unknown.append(data_file.path)
    if unknown:  # older files do not record their size: ask the store
        paths = [f"data/{name}" for name in unknown]
        size += sum(file_sizes(task.uri, paths, storage_options).values())
    return rows, size


def _stats_or_none(
    task: ScanTask, storage_options: dict[str, str] | None
) -> tuple[int | None, int | None]:
    """``_table_stats``, or (None, None) for a table that cannot be read (``check`` says why)."""
    try:
        return _table_stats(task, storage_options)
    except PartitionedNamespaceError:
        return None, None
    except Exception as e:
        if is_storage_failure(e):
            return None, None
        raise


def _values_key(values: dict[str, Any]) -> list[tuple[str, bool, Any]]:
    """Sort key of partition values: field by field, NULL last."""
    return [(k, v is None, 0 if v is None else v) for k, v in values.items()]


def _sorted_partitions(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    try:
        return sorted(parts, key=lambda p: (_values_key(p["values"]), p["object_id"]))
    except TypeError:  # values of one field that do not compare: sort them as text
        return sorted(parts, key=lambda p: (json.dumps(to_json_value(p["values"])), p["object_id"]))


def _cmd_partitions(args: argparse.Namespace, opts: Options, out: TextIO) -> None:
    """``partitions URI [--filter SQL] [--no-stats]``."""
    ns = open_ns(args, opts)
    flt = resolve_filter(ns, args.filter)
    plan = ns.plan_scan(flt.sql, by_stats=False)
    tasks = [t for t in plan.tasks if flt.keeps(t.partition_values)]
    stats: list[tuple[int | None, int | None]] = (
        [(None, None)] * len(tasks)
        if args.no_stats
        else parallel_map(lambda t: _stats_or_none(t, opts.storage_options), tasks)
    )
    parts = _sorted_partitions(
        [
            {
                "object_id": t.object_id,
                "location": t.location,
                "spec_id": t.spec_id,
                "values": t.partition_values,
                "rows": rows,
                "bytes": size,
                "read_version": t.read_version,
                "read_branch": t.read_branch,
                "read_tag": t.read_tag,
            }
            for t, (rows, size) in zip(tasks, stats, strict=True)
        ]
    )
    total = plan.total_partitions
    if opts.json:
        write_json(
            out,
            {
                "uri": ns.uri,
                "manifest_version": ns.version,
                "filter": flt.given,
                "total_partitions": total,
                "partitions": parts,
            },
        )
        return
    text = Text(out, opts.max_width)
    headers = ["values"] + ([] if args.no_stats else ["rows", "size"])
    headers += ["spec", "read_version", "object_id", "location"]
    extra = [k for k in ("read_branch", "read_tag") if any(p[k] is not None for p in parts)]
    rows = [
        [text.values(p["values"])]
        + (
            []
            if args.no_stats
            else [
                "?" if p["rows"] is None else str(p["rows"]),
                "?" if p["bytes"] is None else size_text(p["bytes"]),
            ]
        )
        + [f"v{p['spec_id']}", text.cell(p["read_version"])]
        + [text.cell(p["object_id"]), text.cell(p["location"])]
        + [text.cell(p[k]) for k in extra]
        for p in parts
    ]
    numbers = [1, 2, 4] if not args.no_stats else [2]
    text.table(headers + extra, rows, right=numbers)
    counted = _plural_partitions(len(parts), total, flt.given, text)
    if not args.no_stats:
        unreadable = sum(1 for p in parts if p["rows"] is None)
        counted += (
            f" ({plural(sum(p['rows'] or 0 for p in parts), 'row')}, "
            f"{size_text(sum(p['bytes'] or 0 for p in parts))}"
            + (f"; {unreadable} unreadable, see `check`" if unreadable else "")
            + ")"
        )
    out.write(counted + "\n")


def _plural_partitions(n: int, total: int, given: str | None, text: Text) -> str:
    if given is None:
        return plural(n, "partition")
    return f"{n} of {plural(total, 'partition')} selected by filter: {text.cut(given)}"


# -- explain / scan ---------------------------------------------------------------------------
def _cmd_explain(args: argparse.Namespace, opts: Options, out: TextIO) -> None:
    """``explain URI --filter SQL``."""
    ns = open_ns(args, opts)
    flt = resolve_filter(ns, args.filter)
    result = ns.plan_scan(flt.row_filter())
    if opts.json:
        doc = result.to_dict()
        if flt.fields:
            doc["given_filter"] = flt.given
            doc["partition_fields"] = dict(flt.fields)
        write_json(out, doc)
        return
    if flt.fields:
        out.write(f"given filter: {flt.given}\n")
        for fid, description in flt.fields:
            out.write(f"  {fid}: partition field {description}, filtered on its source\n")
    out.write(str(result).rstrip("\n") + "\n")


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
    ns = open_ns(args, opts)
    limit = args.limit
    reader = ns.scan(filter=resolve_filter(ns, args.filter).row_filter(), columns=args.columns)
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
        text = Text(out, opts.max_width)
        schema = reader.schema
        cells = [[text.cell(row[name]) for name in schema.names] for row in rows]
        right = [i for i, f in enumerate(schema) if is_numeric(f.type)]
        text.table(schema.names, cells, right=right)
        reached = limit is not None and len(cells) == limit
        out.write(plural(len(cells), "row") + (" (limit reached)" if reached else "") + "\n")
    finally:
        close = getattr(reader, "close", None)
        if close is not None:
            close()


# -- history ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Version:
    """One manifest version as ``history`` shows it."""

    version: int
    time: dt.datetime | None  # UTC
    operation: str | None
    properties: dict[str, str] | None
    changes: tuple[TableChange, ...] | None  # None: unknown (the previous is gone)
    through: int | None = None  # the last manifest version of a creation's two commits

    @property
    def label(self) -> str:
        """``7``, or ``1-2`` for a creation's two commits."""
        return f"{self.version}-{self.through}" if self.through else str(self.version)

    def doc(self) -> dict[str, Any]:
        props = self.properties or {}
        return {
            "version": self.version,
            "through_version": self.through or self.version,
            "time": self.time,
            "operation": self.operation,
            "source": props.get(PROP_SOURCE),
            "dagster_run_id": props.get(PROP_DAGSTER_RUN_ID),
            "dagster_asset_key": props.get(PROP_DAGSTER_ASSET_KEY),
            "partitions_touched": None if self.changes is None else len(self.changes),
            "changes": None
            if self.changes is None
            else [
                {
                    "object_id": c.object_id,
                    "spec_id": c.spec_id,
                    "values": c.values,
                    "kind": c.kind,
                    "read_version": c.read_version,
                    "previous_read_version": c.previous_read_version,
                }
                for c in self.changes
            ],
            "properties": self.properties,
        }


_LANCE_OPERATIONS = {"UpdateConfig": "update metadata"}


def _operation(store: ManifestStore, version: int, props: dict[str, str] | None) -> str | None:
    """The operation this package recorded, else the Lance operation of the commit."""
    recorded = CommitSummary.from_properties(props).operation if props else None
    if recorded:
        return str(recorded)
    try:
        tx = store.dataset(version).read_transaction(version)
    except (OSError, ValueError, PartitionedNamespaceError):
        return None
    if tx is None:
        return None
    name = type(tx.operation).__name__
    return _LANCE_OPERATIONS.get(name, f"lance {name}")


def _versions(ns: PartitionedNamespace, opts: Options, limit: int) -> list[_Version]:
    """The newest ``limit`` manifest versions up to the namespace's, newest first."""
    store = ns.state.store
    times = {
        int(v["version"]): cast(dt.datetime, v["timestamp"])
        for v in store.dataset(ns.version).versions()
    }  # naive local time (Lance's conversion)
    present = sorted(v for v in times if v <= ns.version)
    wanted = present[-limit:] if limit else present
    if not wanted:
        return []
    first, since = wanted[0], wanted[0] - 1
    out: list[_Version] = []

    def add(version: int, props: dict[str, str] | None, changes: Any) -> None:
        stamp = times.get(version)
        out.append(
            _Version(
                version,
                stamp.astimezone(dt.UTC) if stamp is not None else None,
                _operation(store, version, props),
                props,
                changes,
            )
        )

    if since >= 1 and since not in times:  # removed by cleanup: what `first` changed is unknown
        add(first, store.commit_properties(first), None)
        since = first
    for commit in ns.inspect.history(since, ns.version):
        add(commit.version, commit.properties, commit.changes)
    return _one_creation(out)[::-1]


def _one_creation(versions: list[_Version]) -> list[_Version]:
    """``versions`` (oldest first) with the two commits that create a namespace (version 1:
    the manifest table, version 2: its schema, spec and writer flag; docs/reference/format.md,
    "Creating a namespace") shown as the one ``create`` they are."""
    if len(versions) < 2:
        return versions
    first, second = versions[0], versions[1]
    if (first.version, second.version) != (1, 2) or not (
        first.operation == second.operation == Operation.CREATE
    ):
        return versions
    both = tuple(first.changes or ()) + tuple(second.changes or ())
    created = replace(
        first,
        properties={**(first.properties or {}), **(second.properties or {})},
        changes=None if first.changes is None or second.changes is None else both,
        through=second.version,
    )
    return [created, *versions[2:]]


def _touched(changes: tuple[TableChange, ...] | None) -> str:
    """``+2 ~1 -1`` (added, updated, removed partitions), ``none`` or ``?``."""
    if changes is None:
        return "?"
    counts = [sum(1 for c in changes if c.kind == k) for k in ("added", "updated", "removed")]
    shown = [f"{sign}{n}" for sign, n in zip("+~-", counts, strict=True) if n]
    return " ".join(shown) or "none"


def _cmd_history(args: argparse.Namespace, opts: Options, out: TextIO) -> None:
    """``history URI [--limit N]``."""
    ns = open_ns(args, opts)
    versions = _versions(ns, opts, args.limit)
    if opts.json:
        write_json(
            out,
            {
                "uri": ns.uri,
                "manifest_version": ns.version,
                "versions": [v.doc() for v in versions],
            },
        )
        return
    text = Text(out, opts.max_width)
    text.table(
        ["version", "time (UTC)", "operation", "partitions", "dagster run id"],
        [
            [
                v.label,
                v.time.strftime("%Y-%m-%d %H:%M:%S") if v.time else "?",
                text.cut(v.operation or "?"),
                _touched(v.changes),
                text.cut((v.properties or {}).get(PROP_DAGSTER_RUN_ID) or "-"),
            ]
            for v in versions
        ],
        right=[0],
    )
    count = sum((v.through or v.version) - v.version + 1 for v in versions)
    out.write(f"{plural(count, 'manifest version')} of {ns.uri}\n")


# -- ls ---------------------------------------------------------------------------------------
def _cmd_ls(args: argparse.Namespace, opts: Options, out: TextIO) -> None:
    """``ls ROOT [--max-depth N]``."""
    found = sorted(
        find_namespaces(args.uri, opts.storage_options, args.max_depth), key=lambda f: f.path
    )
    docs = []
    for f in found:
        doc: dict[str, Any] = {"path": f.path, "uri": f.uri, "error": f.error}
        if f.ns is not None:
            schema = f.ns.schema_with_ids
            doc |= {
                "manifest_version": f.ns.version,
                "partitions": len(f.ns.inspect.partitions()),
                "spec_id": f.ns.current_spec.spec_id,
                "fields": [field_summary(x, schema) for x in f.ns.current_spec.fields],
            }
        docs.append(doc)
    if opts.json:
        write_json(out, {"root": args.uri, "namespaces": docs})
        return
    text = Text(out, opts.max_width)
    text.table(
        ["namespace", "version", "partitions", "current spec"],
        [
            [text.cut(d["path"])]
            + (
                ["?", "?", text.cut(f"unreadable: {d['error']}")]
                if d["error"]
                else [
                    str(d["manifest_version"]),
                    str(d["partitions"]),
                    text.cut(f"v{d['spec_id']}: " + (", ".join(d["fields"]) or UNPARTITIONED)),
                ]
            )
            for d in docs
        ],
        right=[1, 2],
    )
    out.write(f"{plural(len(docs), 'partitioned namespace')} under {args.uri}\n")
