"""Argument types, the global options and what every subcommand shares."""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
import shlex
from collections.abc import Callable
from typing import Any, Protocol, TextIO

import pyarrow as pa

from ..core import (
    NamespaceNotFoundError,
    NotAPartitionedNamespaceError,
    PartitionedNamespace,
    PartitionedNamespaceError,
)
from ._output import PROG, error_text
from ._walk import DEFAULT_LS_DEPTH, Found, find_namespaces, namespaces_below
from .errors import CliError

DEFAULT_MAX_WIDTH = 80
EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2
HINT_NAMESPACES = 3  # how many namespaces below a root the error of a namespace command names


@dataclasses.dataclass(frozen=True)
class Options:
    """Global options after merging the ones given before and after the subcommand."""

    json: bool
    version: int | None  # --as-of: the manifest version to read
    storage_options: dict[str, str] | None
    max_width: int


Command = Callable[[argparse.Namespace, Options, TextIO], int | None]


class AddCommand(Protocol):
    """Adds a subcommand to the parser (see ``build_parser``)."""

    def __call__(
        self, name: str, func: Command, reads: bool, help: str, uri: str | None = ...
    ) -> argparse.ArgumentParser: ...


# -- argument types ---------------------------------------------------------------------------
def non_negative_int(text: str) -> int:
    """An argparse type: an integer >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {value}")
    return value


def positive_int(text: str) -> int:
    """An argparse type: a positive integer (1 or more, of any size)."""
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < 1:
        shown = text if value is not None else repr(text)
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {shown}")
    return value


def non_negative_float(text: str) -> float:
    """An argparse type: a finite number >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text}")
    return value


def key_value(text: str) -> tuple[str, str]:
    """An argparse type: ``KEY=VALUE`` with a non-empty key."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value


def column_list(text: str) -> list[str]:
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


def typed_key(text: str) -> tuple[str, pa.DataType]:
    """An argparse type: ``KEY=ARROW_TYPE``."""
    key, value = key_value(text)
    try:
        return key, parse_arrow_type(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text!r}: {e}") from None


# -- global options ---------------------------------------------------------------------------
def add_global_options(parser: argparse.ArgumentParser, prefix: str, suppress: bool) -> None:
    """Add the global options, stored under ``prefix``-ed names (unset when ``suppress``)."""

    def default(value: Any) -> Any:
        return argparse.SUPPRESS if suppress else value

    group = parser.add_argument_group("global options")
    group.add_argument(
        "--as-of",
        dest=prefix + "version",
        type=non_negative_int,
        metavar="N",
        default=default(None),
        help="read manifest version N (read commands; default: the latest)",
    )
    group.add_argument(  # the option's earlier name, kept working for scripts
        "--version",
        dest=prefix + "version",
        type=non_negative_int,
        default=argparse.SUPPRESS,
        help=argparse.SUPPRESS,
    )
    group.add_argument(
        "--storage-option",
        dest=prefix + "storage_option",
        type=key_value,
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
        type=non_negative_int,
        metavar="N",
        default=default(DEFAULT_MAX_WIDTH),
        help=f"cut text cells longer than N characters (0: never; default {DEFAULT_MAX_WIDTH})",
    )


def open_ns(args: argparse.Namespace, opts: Options) -> PartitionedNamespace:
    """Open the namespace named on the command line, at the ``--as-of`` version if given.

    When ``URI`` is no namespace but holds some below it (e.g. a Dagster IO manager's root),
    the error names a few and suggests ``ls``."""
    try:
        return PartitionedNamespace.open(
            args.uri, storage_options=opts.storage_options, version=opts.version
        )
    except (NamespaceNotFoundError, NotAPartitionedNamespaceError) as e:
        found = namespaces_below(args.uri, opts.storage_options, HINT_NAMESPACES + 1)
        if not found:
            raise
        names = ", ".join(found[:HINT_NAMESPACES]) + (
            ", ..." if len(found) > HINT_NAMESPACES else ""
        )
        one = len(found) == 1
        held = f"the partitioned namespace {names}" if one else f"partitioned namespaces {names}"
        ls = f"`{PROG} ls {shlex.quote(args.uri)}`"
        example = f"`{PROG} {args.command} {shlex.quote(args.uri.rstrip('/') + '/' + found[0])}`"
        raise CliError(
            f"{error_text(e)}; it holds {held} (list "
            f"{'namespaces' if one else 'them'} with {ls}; open {'it' if one else 'one'} "
            f"with {example})"
        ) from None


def open_ns_or_below(args: argparse.Namespace, opts: Options) -> PartitionedNamespace | list[Found]:
    """The namespace named on the command line (at the ``--as-of`` version if given), or, when
    ``URI`` is no namespace but holds some below it (e.g. a Dagster IO manager's root), every
    one ``ls`` finds there, by path (those that cannot be opened with their error)."""
    try:
        return PartitionedNamespace.open(
            args.uri, storage_options=opts.storage_options, version=opts.version
        )
    except (NamespaceNotFoundError, NotAPartitionedNamespaceError) as e:
        try:
            found = [
                f
                for f in find_namespaces(args.uri, opts.storage_options, DEFAULT_LS_DEPTH)
                if f.path != "."
            ]
        except (CliError, PartitionedNamespaceError, OSError, ValueError):
            found = []
        if not found:
            raise e from None
        if opts.version is not None:
            raise CliError(
                f"{args.uri} holds {len(found)} partitioned namespaces, each with its own "
                "manifest versions: --as-of reads one namespace, give its path "
                f"(e.g. {shlex.quote(args.uri.rstrip('/') + '/' + found[0].path)})"
            ) from None
        return sorted(found, key=lambda f: f.path)
