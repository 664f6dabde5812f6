"""Subcommands of search across partitions: ``indexes`` (the declared indexes and their
coverage) and ``search`` (a vector or full-text query, merged across partitions), which read;
``create-index``, ``drop-index`` and ``optimize-indexes``, which change the namespace (each
registers its partition tables in one manifest commit)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import pyarrow as pa

from ..core import IndexCoverage, PartitionedNamespace
from ..core.engine import (
    DISTANCE,
    METRICS,
    SCORE,
    VECTOR_TYPES,
    canonical_type,
    is_list_like,
    kind_of,
    resolve_filter,
    strip_field_ids,
    text_index,
    vector_column,
)
from ..core.engine import declared_indexes as declared
from ..core.engine import find_index as find
from ._args import AddCommand, Options, column_list, key_value, open_ns, positive_int
from ._output import PROG, Text, first_line, is_numeric, plural, to_json_value, write_json
from .errors import CliError

DEFAULT_K = 10
_INDEX_TYPES = (
    "IVF_PQ, IVF_HNSW_SQ, IVF_FLAT (vector); INVERTED or FTS (full text); BTREE, BITMAP, "
    "LABEL_LIST (scalar)"
)
_DISTANCES = {  # what Lance's _distance is, per metric
    "l2": "squared L2 distance",
    "cosine": "1 - cosine similarity",
    "dot": "1 - dot product",
}


def register(add: AddCommand) -> None:
    """Add the index and search subcommands."""
    p = add(
        "indexes",
        _cmd_indexes,
        True,
        "the declared indexes with their coverage: partitions indexed, needing one, searched "
        "flat (below min_rows) and in total, and rows appended since an index was built",
    )
    p.add_argument(
        "--filter", metavar="SQL", help="coverage over the partitions holding matching rows only"
    )
    p.add_argument("--name", metavar="NAME", help="only the index NAME")
    p = add(
        "search",
        _cmd_search,
        True,
        "the k rows nearest a vector, or best matching a text, across the partitions a filter "
        "keeps (each searched with its own index, merged into one top k)",
    )
    query = p.add_argument_group("query (exactly one)").add_mutually_exclusive_group(required=True)
    query.add_argument(
        "--vector",
        metavar="JSON",
        help="the query vector as a JSON array of numbers, e.g. '[0.1, -2, 3.5]'",
    )
    query.add_argument(
        "--vector-file",
        metavar="PATH",
        help="the query vector from a .json file (an array of numbers) or a .npy file (a 1-D "
        "NumPy array); - reads JSON from stdin",
    )
    query.add_argument(
        "--text", metavar="TEXT", help="a full-text query (needs an INVERTED / FTS index)"
    )
    p.add_argument(
        "--column",
        metavar="NAME",
        help="the vector or text column to search (default: the column of the one declared "
        "index of the query's kind, or the only vector column)",
    )
    p.add_argument(
        "-k",
        dest="k",
        metavar="N",
        type=positive_int,
        default=DEFAULT_K,
        help=f"how many rows (default {DEFAULT_K})",
    )
    p.add_argument(
        "--filter",
        metavar="SQL",
        help="DataFusion SQL predicate: prunes partitions, then applies inside each before "
        "ranking (k rows come back whenever k rows match)",
    )
    p.add_argument(
        "--columns",
        metavar="A,B",
        type=column_list,
        action="extend",
        help="columns to return, comma-separated (repeatable; default: all), followed by "
        f"{DISTANCE} or {SCORE}",
    )
    params = p.add_argument_group("vector search parameters (passed to Lance)")
    params.add_argument(
        "--probes",
        metavar="N",
        type=positive_int,
        help="IVF clusters probed across the tables searched, nearest first (default 20)",
    )
    params.add_argument(
        "--nprobes",
        metavar="N",
        type=positive_int,
        help="IVF clusters probed in every table instead",
    )
    params.add_argument(
        "--refine-factor",
        metavar="N",
        type=positive_int,
        help="re-rank N * k candidates per table by exact distance",
    )
    params.add_argument("--ef", metavar="N", type=positive_int, help="HNSW search breadth")
    params.add_argument(
        "--metric",
        metavar="NAME",
        help=f"distance metric ({', '.join(METRICS)}; default: the index's)",
    )
    params.add_argument(
        "--no-index",
        dest="use_index",
        action="store_false",
        default=None,
        help="search every row exhaustively (exact), ignoring the indexes",
    )
    params.add_argument(
        "--param",
        metavar="KEY=VALUE",
        type=key_value,
        action="append",
        help="any other search parameter, e.g. minimum_nprobes=4 (VALUE read as JSON when it "
        "parses, else as text; repeatable)",
    )
    p = add(
        "create-index",
        _cmd_create_index,
        False,
        "declare an index for the whole namespace and build it on every partition table whose "
        "size calls for it (two manifest commits: the declaration, then every table's index; "
        "interrupted between them, `indexes` shows the partitions pending); later writes index "
        "what they write",
    )
    p.add_argument("column", metavar="COLUMN", help="the column to index")
    p.add_argument("index_type", metavar="TYPE", help=_INDEX_TYPES)
    p.add_argument("--name", metavar="NAME", help="the index's name (default: COLUMN_TYPE)")
    p.add_argument(
        "--min-rows",
        metavar="N",
        type=positive_int,
        help="partition tables with fewer rows are searched without the index (default: 4096 "
        "for vector indexes, 1 otherwise)",
    )
    p.add_argument(
        "--metric",
        metavar="NAME",
        help=f"vector distance metric ({', '.join(METRICS)}; default l2)",
    )
    p.add_argument(
        "--param",
        metavar="KEY=VALUE",
        type=key_value,
        action="append",
        help="an index parameter, e.g. num_partitions=16 or num_sub_vectors=4 (VALUE read as "
        "JSON when it parses, else as text; repeatable)",
    )
    p = add(
        "drop-index",
        _cmd_drop_index,
        False,
        "remove a declared index and the partition tables' indexes of that name (one "
        "manifest commit)",
    )
    p.add_argument("name", metavar="NAME", help="the index's name (see `indexes`)")
    p = add(
        "optimize-indexes",
        _cmd_optimize_indexes,
        False,
        "build the declared indexes partition tables lack and fold appended rows into the "
        "others (one manifest commit)",
    )
    p.add_argument("--filter", metavar="SQL", help="only the partitions a scan with SQL reads")


# -- indexes ----------------------------------------------------------------------------------
def coverage_doc(c: IndexCoverage) -> dict[str, Any]:
    """An index's coverage as JSON: every field, and whether it is complete."""
    return {**c.to_dict(), "complete": c.complete}


def _coverage_table(text: Text, coverages: list[IndexCoverage]) -> None:
    """The coverage of ``coverages`` as an aligned table."""
    text.table(
        [
            "name",
            "column",
            "type",
            "indexed",
            "needing",
            "flat",
            "total",
            "unindexed rows",
            "min_rows",
            "params",
        ],
        [
            [
                text.cell(c.name),
                text.cell(c.column),
                c.index_type,
                str(c.partitions_indexed),
                str(c.partitions_needing),
                str(c.partitions_flat),
                str(c.partitions_total),
                str(c.unindexed_rows),
                str(c.min_rows),
                text.cell(c.params) if c.params else "-",
            ]
            for c in coverages
        ],
        right=[3, 4, 5, 6, 7, 8],
    )


def _needing_lines(text: Text, out: TextIO, coverages: list[IndexCoverage]) -> None:
    """The partitions lacking an index their size calls for (pending), per index."""
    for c in coverages:
        if c.needing:
            out.write(
                f"{c.name}: pending, not built yet on {plural(len(c.needing), 'partition')} "
                f"(searched exhaustively meanwhile; `{PROG} optimize-indexes`, or a write to "
                "them, builds it): " + text.cut(", ".join(c.needing)) + "\n"
            )


def _cmd_indexes(args: argparse.Namespace, opts: Options, out: TextIO) -> None:
    """``indexes URI [--filter SQL] [--name NAME]``."""
    ns = open_ns(args, opts)
    flt = resolve_filter(ns, args.filter)
    if args.name is not None:
        find(ns, args.name)  # IndexNotFoundError naming the declared ones
    coverages = [
        c for c in ns.indexes(flt.row_filter()) if args.name is None or c.name == args.name
    ]
    if opts.json:
        write_json(
            out,
            {
                "uri": ns.uri,
                "manifest_version": ns.version,
                "filter": flt.given,
                "indexes": [coverage_doc(c) for c in coverages],
            },
        )
        return
    if not coverages:
        out.write(
            f"{ns.uri}: no index is declared (declare one with `{PROG} create-index URI "
            "COLUMN TYPE`)\n"
        )
        return
    text = Text(out, opts.max_width)
    _coverage_table(text, coverages)
    _needing_lines(text, out, coverages)
    scope = plural(coverages[0].partitions_total, "partition")
    if flt.given is not None:
        scope += f" selected by filter: {text.cut(flt.given)}"
    out.write(
        f"{_indexes(len(coverages))} over {scope} (manifest version {ns.version}); "
        "flat: below min_rows, searched exhaustively\n"
    )


def _indexes(n: int) -> str:
    """``1 index`` / ``2 indexes``."""
    return f"{n} index" if n == 1 else f"{n} indexes"


# -- search -----------------------------------------------------------------------------------
def json_vector(text: str, where: str) -> list[float]:
    """A query vector from JSON text: a non-empty array of numbers (raises :class:`CliError`
    naming ``where`` and what is wrong)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise CliError(
            f"{where}: not JSON ({e.msg} at line {e.lineno} column {e.colno}); expected an "
            "array of numbers such as [0.1, -2, 3.5]"
        ) from None
    if not isinstance(value, list):
        raise CliError(f"{where}: expected a JSON array of numbers, got a JSON {_json_kind(value)}")
    if not value:
        raise CliError(f"{where}: the vector is empty")
    for i, v in enumerate(value):
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise CliError(f"{where}: element {i} is {json.dumps(v)}, not a number")
    return [float(v) for v in value]


def _json_kind(value: Any) -> str:
    """``object``, ``string``, ``number``, ... for a parsed JSON value."""
    if isinstance(value, dict):
        return "object"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if value is None:
        return "null"
    return "number"


def npy_vector(path: Path, where: str) -> np.ndarray:
    """A query vector from a ``.npy`` file: a 1-D array of real numbers (a single-row 2-D
    array is taken as its row)."""
    try:
        loaded: Any = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:
        raise CliError(f"{where}: not a NumPy .npy array ({first_line(e)})") from None
    if not isinstance(loaded, np.ndarray):
        raise CliError(f"{where}: not a NumPy .npy array")
    array: np.ndarray = loaded
    if array.ndim == 2 and array.shape[0] == 1:
        array = array[0]
    if array.ndim != 1:
        raise CliError(
            f"{where}: holds an array of shape {tuple(array.shape)}; a query is one vector "
            "(a 1-D array)"
        )
    if array.dtype == np.bool_ or not (
        np.issubdtype(array.dtype, np.integer) or np.issubdtype(array.dtype, np.floating)
    ):
        raise CliError(f"{where}: holds {array.dtype} values; a vector holds numbers")
    if array.size == 0:
        raise CliError(f"{where}: the vector is empty")
    return array


def query_of(args: argparse.Namespace) -> str | list[float] | np.ndarray:
    """The query the command line gives: a text, or a vector from ``--vector`` or
    ``--vector-file`` (raises :class:`CliError` naming the option and what is wrong)."""
    if args.text is not None:
        if not args.text.strip():
            raise CliError("--text: the query is empty")
        return str(args.text)
    if args.vector is not None:
        return json_vector(args.vector, "--vector")
    given = str(args.vector_file)
    if given == "-":
        return json_vector(sys.stdin.read(), "--vector-file - (stdin)")
    path = Path(given)
    where = f"--vector-file {given}"
    if not path.is_file():
        raise CliError(f"{where}: no such file")
    suffix = path.suffix.lower()
    if suffix == ".npy":
        return npy_vector(path, where)
    if suffix != ".json":
        raise CliError(
            f"{where}: expected a .json file (an array of numbers) or a .npy file (a 1-D "
            "NumPy array)"
        )
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise CliError(f"{where}: cannot be read ({first_line(e)})") from None
    return json_vector(text, where)


def param_value(text: str) -> Any:
    """A ``--param`` value: JSON when it parses (numbers, booleans, lists), else the text."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _params(pairs: list[tuple[str, str]] | None, given: dict[str, Any]) -> dict[str, Any]:
    """``given`` (the named options that were set) and the ``--param`` pairs; one key given
    two ways must agree."""
    out = {k: v for k, v in given.items() if v is not None}
    for key, raw in pairs or []:
        value = param_value(raw)
        if key in out and out[key] != value:
            raise CliError(f"--param {key}={raw} contradicts {key} = {out[key]!r} given before")
        out[key] = value
    return out


def search_params(args: argparse.Namespace) -> dict[str, Any]:
    """The search parameters the command line passes to Lance."""
    return _params(
        args.param,
        {
            "probes": args.probes,
            "nprobes": args.nprobes,
            "refine_factor": args.refine_factor,
            "ef": args.ef,
            "metric": args.metric,
            "use_index": args.use_index,
        },
    )


def _short(value: float) -> float:
    """A float32 value as the shortest decimal that reads back as the same float32 (``0.1``,
    not ``0.10000000149011612``)."""
    return float(str(np.float32(value)))


def _shortener(t: pa.DataType) -> Callable[[Any], Any] | None:
    """How values of a float32 column, or of a list of float32 (a vector), are shortened."""
    if t == pa.float32():
        return lambda v: None if v is None else _short(v)
    if is_list_like(t) and t.value_type == pa.float32():
        return lambda v: None if v is None else [None if x is None else _short(x) for x in v]
    return None


def rows_of(table: pa.Table) -> list[dict[str, Any]]:
    """The rows of a search result as dicts (keys in column order), float32 values (the
    ``_distance`` or ``_score``, vectors) as their shortest decimals."""
    rows: list[dict[str, Any]] = table.to_pylist()
    for f in table.schema:
        shorten = _shortener(f.type)
        if shorten is not None:
            for row in rows:
                row[f.name] = shorten(row[f.name])
    return rows


def _what_searched(
    ns: PartitionedNamespace, args: argparse.Namespace, text_query: bool, params: dict[str, Any]
) -> str:
    """``on column v (squared L2 distance), nearest first`` / ``on column t (BM25 ...)``."""
    plain = strip_field_ids(ns.schema_with_ids)
    decls = declared(ns)
    if text_query:
        decl = text_index(plain, decls, args.column)
        return f"matching the text on column {decl.column} ({SCORE}: BM25), best first"
    column, metric = vector_column(plain, decls, args.column)
    metric = str(params.get("metric", metric)).lower()
    how = _DISTANCES.get(metric, metric)
    return f"nearest to the vector on column {column} ({DISTANCE}: {how}), nearest first"


def _check_text_index(ns: PartitionedNamespace, args: argparse.Namespace) -> None:
    """Refuse a text query that no declared full-text index serves, naming the command that
    declares one (a column the namespace lacks is left to the search's own error)."""
    text = [d for d in declared(ns) if d.kind == "text"]
    column = args.column
    if column is None and text:
        return
    if column is not None and (
        any(d.column == column for d in text) or ns.schema.get_field_index(column) < 0
    ):
        return
    shown = shlex.quote(column) if column is not None else "COLUMN"
    where = f" on {column!r}" if column is not None else "; none is declared"
    raise CliError(
        f"{ns.uri}: a text query needs a full-text (INVERTED) index{where}: declare one with "
        f"`{PROG} create-index {shlex.quote(args.uri)} {shown} INVERTED`"
    )


def _cmd_search(args: argparse.Namespace, opts: Options, out: TextIO) -> None:
    """``search URI (--vector JSON | --vector-file PATH | --text TEXT) [-k N] [--filter SQL]
    [--column NAME] [--columns A,B] [--probes N] [--refine-factor N] ...``."""
    query = query_of(args)
    params = search_params(args)
    ns = open_ns(args, opts)
    if isinstance(query, str):
        _check_text_index(ns, args)
    flt = resolve_filter(ns, args.filter)
    row_filter = flt.row_filter()
    found = ns.search(
        query, column=args.column, k=args.k, filter=row_filter, columns=args.columns, **params
    )
    rows = rows_of(found)
    if opts.json:
        write_json(out, rows)
        return
    text = Text(out, opts.max_width)
    text.table(
        found.schema.names,
        [[text.cell(row[name]) for name in found.schema.names] for row in rows],
        right=[i for i, f in enumerate(found.schema) if is_numeric(f.type)],
    )
    plan = ns.plan_scan(row_filter)
    what = _what_searched(ns, args, isinstance(query, str), params)
    fewer = f"; fewer than k = {args.k}: no more rows match" if len(rows) < args.k else ""
    out.write(
        f"{plural(len(rows), 'row')} {what} ({len(plan.tasks)} of "
        f"{plural(plan.total_partitions, 'partition')} searched{fewer})\n"
    )


# -- create-index / drop-index / optimize-indexes ---------------------------------------------
def _cmd_create_index(args: argparse.Namespace, opts: Options, out: TextIO) -> None:
    """``create-index URI COLUMN TYPE [--name NAME] [--min-rows N] [--metric M] [--param K=V]``."""
    params = _params(args.param, {"metric": args.metric})
    for reserved in ("name", "min_rows", "column", "index_type"):
        if reserved in params:
            option = {"name": "--name", "min_rows": "--min-rows"}.get(reserved, reserved.upper())
            raise CliError(f"--param {reserved}=...: give it as {option}")
    if args.metric is not None and kind_of(canonical_type(args.index_type)) != "vector":
        raise CliError(
            f"--metric applies to vector indexes ({', '.join(VECTOR_TYPES)}), not to "
            f"{args.index_type}"
        )
    ns = open_ns(args, opts)
    coverage = ns.create_index(
        args.column, args.index_type, name=args.name, min_rows=args.min_rows, **params
    )
    ns.refresh()
    if opts.json:
        write_json(
            out, {"uri": ns.uri, "manifest_version": ns.version, "index": coverage_doc(coverage)}
        )
        return
    text = Text(out, opts.max_width)
    out.write(
        f"index {coverage.name} ({coverage.index_type} on {coverage.column}) declared; "
        f"{plural(coverage.partitions_indexed, 'partition')} indexed, manifest version "
        f"{ns.version}\n"
    )
    _coverage_table(text, [coverage])
    _needing_lines(text, out, [coverage])


def _result_doc(ns: PartitionedNamespace, result: Any, **more: Any) -> dict[str, Any]:
    """An index change's result as JSON: the root, ``more`` and the result's fields."""
    return {"uri": ns.uri, **more, **to_json_value(dataclasses.asdict(result))}


def _skipped_line(text: Text, out: TextIO, skipped: tuple[str, ...]) -> None:
    if skipped:
        out.write(
            f"skipped {plural(len(skipped), 'partition')} a concurrent commit changed (run "
            f"`{PROG} optimize-indexes` later): " + text.cut(", ".join(skipped)) + "\n"
        )


def _cmd_drop_index(args: argparse.Namespace, opts: Options, out: TextIO) -> None:
    """``drop-index URI NAME``."""
    ns = open_ns(args, opts)
    result = ns.drop_index(args.name)
    if opts.json:
        write_json(out, _result_doc(ns, result, index=args.name))
        return
    text = Text(out, opts.max_width)
    out.write(
        f"index {args.name} dropped: declaration removed, "
        f"{plural(len(result.partitions), 'partition table')} rewritten without it, manifest "
        f"version {result.manifest_version}\n"
    )
    _skipped_line(text, out, result.skipped)


def _cmd_optimize_indexes(args: argparse.Namespace, opts: Options, out: TextIO) -> None:
    """``optimize-indexes URI [--filter SQL]``."""
    ns = open_ns(args, opts)
    row_filter = resolve_filter(ns, args.filter).row_filter()
    result = ns.maintenance.optimize_indexes(row_filter)
    if opts.json:
        write_json(out, _result_doc(ns, result))
        return
    text = Text(out, opts.max_width)
    if not declared(ns):
        out.write(f"{ns.uri}: no index is declared, nothing to optimize\n")
    elif not result.partitions:
        out.write(
            f"{ns.uri}: every index is up to date, nothing to optimize (manifest version "
            f"{result.manifest_version})\n"
        )
    else:
        out.write(
            f"optimized the indexes of {plural(len(result.partitions), 'partition')} in "
            f"manifest version {result.manifest_version}: "
            + text.cut(", ".join(result.partitions))
            + "\n"
        )
    _skipped_line(text, out, result.skipped)
