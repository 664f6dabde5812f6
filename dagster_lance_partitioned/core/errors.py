"""Exceptions raised by the partitioned-namespace core.

Every error names what is at fault (column, partition, field id, path) so a user can act on it.
All derive from :class:`PartitionedNamespaceError`; the one warning,
:class:`MixedCalendarPeriodsWarning`, is a ``UserWarning``.
"""

from __future__ import annotations

import re
from typing import Any

import pyarrow as pa


class PartitionedNamespaceError(Exception):
    """Base class of every error raised by this package."""


class NamespaceNotFoundError(PartitionedNamespaceError):
    """The URI does not exist or holds no ``__manifest`` table."""


class NotAPartitionedNamespaceError(PartitionedNamespaceError):
    """The root holds a ``__manifest`` table whose metadata has no partition spec."""


class NamespaceExistsError(PartitionedNamespaceError):
    """``create`` was asked to create a namespace where one already exists."""


class SchemaError(PartitionedNamespaceError):
    """A schema cannot be converted, or a schema change is not allowed."""


class SchemaMismatchError(SchemaError):
    """Data to write does not fit the namespace schema; names the column at fault."""

    def __init__(self, message: str, column: str | None = None) -> None:
        super().__init__(message)
        self.column = column


class NullabilityError(SchemaMismatchError):
    """A NULL value was given for a non-nullable column."""


class EvolutionRefusedError(SchemaError):
    """Data to write implies a schema change (added columns, widened types) or a partition
    spec change that the writer does not allow (for the IO manager: its partitions definition
    or schema changed and the asset's metadata says ``error``); nothing was written."""


class SpecError(PartitionedNamespaceError):
    """A partition spec is malformed (unknown transform, bad source id, ...)."""


class MixedCalendarPeriodsWarning(UserWarning):
    """A new partition spec has a date-part field that groups rows of many periods into one
    partition: ``month`` (the month of the year) without ``year``, ``day`` (the day of the
    month) without ``year`` and ``month``, ``hour`` (the hour of the day) without the date, on
    the same column. The message names each such field and the window field
    (``PartitionField.window``) that gives one partition per month, day or hour."""


class UnknownTransformError(SpecError):
    """A partition field names a transform this implementation does not know."""


class ResultTypeMismatchError(SpecError):
    """A partition expression evaluates to a type incompatible with its ``result_type``."""


class ExpressionError(PartitionedNamespaceError):
    """A partition expression failed to compile or evaluate."""


class TransactionError(PartitionedNamespaceError):
    """A transaction was used wrongly: a second data operation, a schema or spec change after
    its data operation, a call after it was committed or discarded."""


class CommitConflictError(PartitionedNamespaceError):
    """A concurrent commit touched the same partition with overwrite semantics.

    Nothing was made visible by the failed write; the caller may retry it.
    """

    def __init__(self, message: str, partitions: list[str] | None = None) -> None:
        super().__init__(message)
        self.partitions = partitions or []


class ManifestError(PartitionedNamespaceError):
    """``__manifest`` is malformed (missing column, duplicate object id, ...)."""


class TableLocationError(ManifestError):
    """A manifest table row whose location lies inside the root but is not a partition table
    of this namespace: ``__manifest`` (or inside it), inside or at a namespace nested below
    the root, or the table of another row (or inside it). Names the row (``object_id``) and
    its ``location``; nothing was read, written or deleted through it."""

    def __init__(self, message: str, object_id: str | None = None, location: str | None = None):
        super().__init__(message)
        self.object_id = object_id
        self.location = location


class WriteError(PartitionedNamespaceError):
    """A write was refused before anything became visible."""


class UnnamedPartitionError(WriteError):
    """A row belongs to a partition the write was not allowed to touch (``partitions=``);
    ``values`` are that partition's values (field id -> value), ``sample`` one such row."""

    def __init__(self, message: str, values: dict[str, Any], sample: dict[str, Any]) -> None:
        super().__init__(message)
        self.values = values
        self.sample = sample


class PathEscapeError(PartitionedNamespaceError):
    """A manifest location (or branch / tag name) points outside the namespace root: absolute,
    a URI, or climbing out with ``..``. Nothing was read, written or deleted through it."""

    def __init__(self, message: str, object_id: str | None = None, location: str | None = None):
        super().__init__(message)
        self.object_id = object_id
        self.location = location


class StorageError(PartitionedNamespaceError):
    """A Lance or Arrow read/write failed (missing or corrupt file, unreachable store); names
    the namespace, the object and the path involved."""

    def __init__(
        self,
        message: str,
        namespace: str | None = None,
        object_id: str | None = None,
        path: str | None = None,
    ) -> None:
        super().__init__(message)
        self.namespace = namespace
        self.object_id = object_id
        self.path = path


class PartitionReadError(StorageError):
    """A registered partition table cannot be read (missing, or its pinned version is gone)."""


class ConditionalPutUnsupportedError(WriteError):
    """The object store ignores put-if-absent (``If-None-Match``), which Lance's commits rely on:
    concurrent writers would silently lose commits. Nothing was written."""


class VersionGoneError(WriteError):
    """A table version a write was about to register no longer exists (removed by a concurrent
    cleanup or vacuum); the manifest commit was not made, nothing of the write is visible."""


class MaintenanceConflictError(CommitConflictError, VersionGoneError):
    """A maintenance run (cleanup, vacuum) announced the deletion of table versions or files a
    commit depended on -- versions it made, or built on, before the announcement -- while the
    commit was in flight; nothing of the commit is visible, the caller may retry it.
    ``partitions`` holds the table locations concerned."""


_RUST_LOCATION = re.compile(r",?\s*/?(?:[\w.\-]+/)*[\w.\-]+\.rs:\d+:\d+")


def clean_message(error: BaseException | str) -> str:
    """An exception's message without Lance's internal Rust source locations."""
    text = str(error)
    return _RUST_LOCATION.sub("", text).strip().rstrip(",")


_FILE = re.compile(r"(?:[a-z0-9+]+://)?/?(?:[^\s,:]+/)+[^\s,:/]+\.(?:lance|manifest|txn|idx|arrow)")


def is_storage_failure(error: BaseException) -> bool:
    """Whether ``error`` is a raw Lance / Arrow / I/O failure (not one of this package's)."""
    if isinstance(error, PartitionedNamespaceError):
        return False
    if isinstance(error, (OSError, pa.ArrowException)):
        return True
    text = str(error)
    return isinstance(error, (ValueError, RuntimeError)) and (
        "LanceError" in text or _RUST_LOCATION.search(text) is not None
    )


def storage_error(
    error: BaseException,
    namespace: str,
    what: str,
    object_id: str | None = None,
    cls: type[StorageError] = StorageError,
) -> StorageError:
    """``error`` (a raw Lance / Arrow failure) as this package's ``cls``: the namespace, what
    was being done, the object id and the file named in the message, no Rust locations."""
    text = clean_message(error)
    match = _FILE.search(text)
    path = match.group(0) if match else None
    owner = f" ({object_id})" if object_id else ""
    at = f"; file {path}" if path else ""
    return cls(f"{namespace}: {what}{owner} failed{at}: {text}", namespace, object_id, path)


class RowChangeError(WriteError):
    """A row-level change (merge, delete, update) was refused before anything became
    visible; ``column`` names the column at fault when there is one."""

    def __init__(self, message: str, column: str | None = None) -> None:
        super().__init__(message)
        self.column = column


class MergeKeyError(RowChangeError):
    """A merge key is unusable: not a namespace column, or NULL in an input row."""


class DuplicateKeyError(RowChangeError):
    """A merge key occurs more than once in the merge input; ``key`` is one such key
    (column -> value)."""

    def __init__(self, message: str, key: dict[str, Any]) -> None:
        super().__init__(message)
        self.key = key


class UpdateExpressionError(RowChangeError):
    """An update's ``set`` names an unknown column, or an expression does not evaluate to a
    value its column can hold."""


class FilterError(PartitionedNamespaceError):
    """A filter does not parse, or names a column the namespace does not have."""


class PartialPartitionError(PartitionedNamespaceError):
    """``drop_partitions``: a filter matches some rows of a partition but not all of them, so
    the partition cannot be dropped as a whole; nothing was changed. ``partitions`` are the
    object ids of those partitions, ``values`` their partition values."""

    def __init__(self, message: str, partitions: list[str], values: list[dict[str, Any]]) -> None:
        super().__init__(message)
        self.partitions = partitions
        self.values = values


class HiveImportError(PartitionedNamespaceError):
    """A Hive-style tree cannot be imported (layout, keys, values); names the path at fault."""


class PartitionByError(SpecError, ValueError):
    """A ``partition_by`` text or list is malformed; names the field at fault."""


class StaleChangeError(CommitConflictError):
    """A partition the change was made on was changed (or a partition it creates was created)
    by a concurrent commit since the snapshot it was planned on; nothing is visible."""


class SearchError(PartitionedNamespaceError):
    """An index or search request that cannot be served; nothing was changed."""


class IndexDeclarationError(SearchError, ValueError):
    """An index declaration names an unknown column or index type, a column of a type the
    index cannot hold, or a name already declared otherwise; names the one at fault."""


class IndexNotFoundError(SearchError, LookupError):
    """No index of that name is declared on the namespace."""


class SearchQueryError(SearchError, ValueError):
    """A search names an unknown column, passes a query of the wrong kind or dimension, or
    asks for fewer than one row; names what is at fault."""


class IndexBuildError(SearchError):
    """Lance could not build a declared index on a partition table (for instance, too few
    rows to train a vector index with the given parameters); names the partition."""
