"""Subcommands that bring other layouts into the current shape: ``upgrade`` (draft-shaped
manifest metadata) and ``import-hive`` (a ``key=value/...`` tree of Lance tables)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, TextIO

from ..core import PartitionedNamespace
from ._args import AddCommand, Options, open_ns, typed_key
from ._output import plural, write_json
from .errors import CliError
from .inspect import write_info


def register(add: AddCommand) -> None:
    """Add the conversion subcommands."""
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
        type=typed_key,
        action="append",
        help="Arrow type of a partition key, e.g. year=int32 (repeatable; default: inferred)",
    )


def check_types(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse ``--type`` given twice for one key (a usage error)."""
    keys = [k for k, _ in args.types or []]
    repeated = sorted({k for k in keys if keys.count(k) > 1})
    if repeated:
        parser.error(f"--type given more than once for {', '.join(repeated)}")


def _optional_feature(name: str, call: Callable[[], Any]) -> Any:
    """Run ``call``, reporting a missing optional module of this package as a CLI error."""
    try:
        return call()
    except ModuleNotFoundError as e:
        if e.name and e.name.startswith("dagster_lance_partitioned"):
            raise CliError(
                f"{name} is not available: this version of dagster_lance_partitioned has no "
                f"module {e.name}"
            ) from None
        raise


def _cmd_upgrade(args: argparse.Namespace, opts: Options, out: TextIO) -> None:
    """``upgrade URI``."""
    ns = open_ns(args, opts)
    before = ns.version
    after = _optional_feature("upgrade", lambda: ns.upgrade())
    doc = {
        "uri": ns.uri,
        "previous_version": before,
        "manifest_version": after,
        "changed": after != before,
    }
    if opts.json:
        write_json(out, doc)
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
        out.write(f"imported {plural(len(ns.inspect.partitions()), 'partition table')}\n\n")
    write_info(ns, opts, out)
