"""Exceptions raised by the partitioned-namespace core.

Every error names what is at fault (column, partition, field id, path) so a user can act on it.
All derive from :class:`PartitionedNamespaceError`.
"""

from __future__ import annotations


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


class SpecError(PartitionedNamespaceError):
    """A partition spec is malformed (unknown transform, bad source id, ...)."""


class UnknownTransformError(SpecError):
    """A partition field names a transform this implementation does not know."""


class ResultTypeMismatchError(SpecError):
    """A partition expression evaluates to a type incompatible with its ``result_type``."""


class ExpressionError(PartitionedNamespaceError):
    """A partition expression failed to compile or evaluate."""


class CommitConflictError(PartitionedNamespaceError):
    """A concurrent commit touched the same partition with overwrite semantics.

    Nothing was made visible by the failed write; the caller may retry it.
    """

    def __init__(self, message: str, partitions: list[str] | None = None) -> None:
        super().__init__(message)
        self.partitions = partitions or []


class ManifestError(PartitionedNamespaceError):
    """``__manifest`` is malformed (missing column, duplicate object id, ...)."""


class PartitionReadError(PartitionedNamespaceError):
    """A registered partition table cannot be read (missing, or its pinned version is gone)."""


class WriteError(PartitionedNamespaceError):
    """A write was refused before anything became visible."""


class UnnamedPartitionError(WriteError):
    """A row belongs to a partition the write was not allowed to touch (``partitions=``);
    ``values`` are that partition's values (field id -> value), ``sample`` one such row."""

    def __init__(self, message: str, values: dict, sample: dict) -> None:
        super().__init__(message)
        self.values = values
        self.sample = sample
