"""The ``ls`` walk: the partitioned namespaces below a directory (``ls``, and the hint of a
command given a directory that holds namespaces rather than being one)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

from ..core import NotAPartitionedNamespaceError, PartitionedNamespace, PartitionedNamespaceError
from ..core.engine import is_dir, is_storage_failure, join_uri, list_dirs, location_problem
from ._output import error_text
from .errors import CliError

DEFAULT_LS_DEPTH = 6


@dataclass(frozen=True)
class Found:
    """A directory holding a ``__manifest``: the namespace opened, or why it could not be."""

    path: str  # relative to the root ('.' for the root itself)
    uri: str
    ns: PartitionedNamespace | None
    error: str | None


def find_namespaces(
    root: str, storage_options: dict[str, str] | None, max_depth: int
) -> Iterator[Found]:
    """The directories under ``root`` holding a partitioned namespace's ``__manifest``,
    breadth first; namespaces and Lance tables are not looked into."""
    if not is_dir(root, storage_options):
        raise CliError(f"{root}: no such directory")
    pending = [("", 0)]
    while pending:
        rel, depth = pending.pop(0)
        here = join_uri(root, rel) if rel else root
        dirs = list_dirs(here, storage_options, links=True)
        if "_versions" in dirs:
            continue  # a Lance table
        if "__manifest" in dirs:
            uri = join_uri(root, rel) if rel else root
            try:
                yield Found(rel or ".", uri, _open_quietly(uri, storage_options), None)
                continue
            except NotAPartitionedNamespaceError:
                pass  # another kind of Lance namespace: look below it
            except PartitionedNamespaceError as e:
                yield Found(rel or ".", uri, None, error_text(e))
                continue
        if depth < max_depth:
            pending += [
                (f"{rel}/{d}" if rel else d, depth + 1)
                for d in dirs
                if d != "__manifest"
                and not d.startswith(".")
                and location_problem(d) is None  # e.g. a backslash: not joinable
            ]


def namespaces_below(root: str, storage_options: dict[str, str] | None, limit: int) -> list[str]:
    """The paths (relative to ``root``) of at most ``limit`` readable namespaces ``ls`` finds
    below ``root``, nearest first; none when ``root`` is no directory."""
    try:
        walk = find_namespaces(root, storage_options, DEFAULT_LS_DEPTH)
        found = [f.path for f in itertools.islice(walk, limit) if f.ns is not None]
    except (CliError, PartitionedNamespaceError, OSError, ValueError):
        return []
    return [p for p in found if p != "."]


def _open_quietly(uri: str, storage_options: dict[str, str] | None) -> PartitionedNamespace:
    try:
        return PartitionedNamespace.open(uri, storage_options=storage_options)
    except PartitionedNamespaceError:
        raise
    except Exception as e:
        if is_storage_failure(e):
            raise PartitionedNamespaceError(error_text(e)) from None
        raise
