"""What this package records about each ``__manifest`` commit it makes: a
:class:`CommitSummary`, stored as the commit's Lance transaction properties
(docs/reference/format.md, "Recorded beyond the spec"; :class:`~.store.ManifestStore` adds
the ``dlp.`` prefix when it commits and strips it when it reads them back).

:meth:`CommitSummary.to_properties` is the one place they are serialized, and
:meth:`CommitSummary.from_properties` the one place they are parsed. The property that matters
most is ``overwritten``, the table object ids a commit replaced or removed: a concurrent writer
reads it to decide whether it may rebase onto the commit. A commit *without* it (another tool,
or an old one) is read as having replaced every table (conservative), so every summary this
package writes carries it -- ``[]`` unless the writer says otherwise.

This module imports nothing of the package: every layer may use it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Final

WRITER_ID: Final = "dagster-lance-partitioned"
"""Property ``writer`` of this package's writes, compactions, row changes and index commits."""

OVERWRITE_ALL: Final = "*"
"""The JSON value of ``overwritten`` (``"*"``, a JSON string) of a whole-table overwrite."""

# -- property names (without the ``dlp.`` prefix) ------------------------------------------------
PROP_OPERATION: Final = "operation"
"""What the commit did: an :class:`Operation` value."""
PROP_OVERWRITTEN: Final = "overwritten"
"""JSON list of the table object ids the commit replaced or removed, or ``"*"``: every table."""
PROP_MODE: Final = "mode"
"""A write's mode: ``append``, ``overwrite_partitions`` or ``overwrite``."""
PROP_WRITER: Final = "writer"
"""Which software made the commit (:data:`WRITER_ID` for this package's data commits)."""
PROP_OF: Final = "of"
"""A retirement's maintenance run: ``cleanup`` or ``vacuum``."""
PROP_FILTER: Final = "filter"
"""The SQL filter of a drop_partitions, delete or update."""
PROP_INDEX: Final = "index"
"""The index a create_index or drop_index commit is about."""
PROP_SET: Final = "set"
"""An update's assignments (JSON object: column -> SQL expression)."""
PROP_STEPS: Final = "steps"
"""JSON list of the operations of an ``evolve`` commit's metadata steps, in order."""
PROP_TRANSACTION: Final = "transaction"
"""The id of the transaction a commit belongs to."""
PROP_WRITE_ID: Final = "write_id"
"""A staged (distributed) write's id: 16 hex digits, one per write."""
PROP_SOURCE: Final = "source"
"""Who wrote the commit, when the caller says (e.g. the Dagster IO manager, Spark)."""
PROP_DAGSTER_RUN_ID: Final = "dagster.run_id"
"""The Dagster run that made the commit."""
PROP_DAGSTER_ASSET_KEY: Final = "dagster.asset_key"
"""The Dagster asset the commit stored."""
PROP_DAGSTER_PARTITION_KEYS: Final = "dagster.partition_keys"
"""JSON list of the Dagster partition keys the commit stored."""


class Operation(StrEnum):
    """The ``operation`` property of this package's commits (the stored strings: never change
    a value, old namespaces hold them)."""

    CREATE = "create"  # a namespace's first two commits
    WRITE = "write"  # append, overwrite_partitions, overwrite
    METADATA = "metadata"  # other table-metadata changes (e.g. the naming key)
    UPDATE_SPEC = "update_spec"  # a new partition spec version
    EVOLVE = "evolve"  # several schema / spec changes in one commit (see ``steps``)
    REVERT = "revert"  # undoes a transaction's metadata changes after its data commit failed
    ADD_COLUMNS = "add_columns"
    RENAME_COLUMN = "rename_column"
    DROP_COLUMN = "drop_column"
    PROMOTE_COLUMN = "promote_column"
    UPGRADE = "upgrade"  # a draft-shaped namespace converted to the current shape
    COMPACT = "compact"
    RETIRE = "retire"  # a cleanup's or vacuum's announcement (see ``of``)
    DROP_PARTITIONS = "drop_partitions"
    MERGE = "merge"
    DELETE = "delete"
    UPDATE = "update"
    CREATE_INDEX = "create_index"
    DROP_INDEX = "drop_index"
    OPTIMIZE_INDEXES = "optimize_indexes"
    STATISTICS = "statistics"  # table statistics filled in (no table version changes)


_FIELDS: Final = (PROP_OPERATION, PROP_MODE, PROP_WRITER, PROP_OF, PROP_FILTER, PROP_INDEX)


def _operation(raw: Operation | str | None) -> Operation | str | None:
    """``raw`` as an :class:`Operation` when it is one (else the string as it is)."""
    if raw is None or isinstance(raw, Operation):
        return raw
    try:
        return Operation(raw)
    except ValueError:
        return raw  # another version's or tool's operation: kept as stored


def _overwritten(raw: str | None) -> tuple[str, ...] | None:
    """The value of property ``overwritten``; None (every table) when it is missing, ``"*"``
    or not a JSON list of strings."""
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return None
    return tuple(value)


@dataclass(frozen=True)
class CommitSummary:
    """The properties of one ``__manifest`` commit.

    ``operation`` is an :class:`Operation` (a string when read from a commit whose operation
    this version does not know; None when read from one that recorded none). ``overwritten``
    are the table object ids the commit replaced or removed, None for every table (written
    ``"*"``; also what a commit read without the property means); the default, ``()``, says
    it replaced nothing. ``mode``, ``writer``, ``of``, ``filter`` and ``index`` are written
    when set. ``user`` holds every other property: an operation's details and the caller's
    ``commit_properties``, added last (so a caller may set any property, as before)."""

    operation: Operation | str | None
    overwritten: tuple[str, ...] | None = ()
    mode: str | None = None
    writer: str | None = None
    of: str | None = None
    filter: str | None = None
    index: str | None = None
    user: Mapping[str, str] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "operation", _operation(self.operation))
        if self.overwritten is not None:
            object.__setattr__(self, "overwritten", tuple(sorted(self.overwritten)))
        object.__setattr__(self, "user", MappingProxyType(dict(self.user)))

    def to_properties(self) -> dict[str, str]:
        """The commit properties (without the ``dlp.`` prefix) recording this summary."""
        out: dict[str, str] = {}
        if self.operation is not None:
            out[PROP_OPERATION] = str(self.operation)
        for name, value in (
            (PROP_MODE, self.mode),
            (PROP_WRITER, self.writer),
            (PROP_OF, self.of),
            (PROP_FILTER, self.filter),
            (PROP_INDEX, self.index),
        ):
            if value is not None:
                out[name] = value
        replaced = OVERWRITE_ALL if self.overwritten is None else list(self.overwritten)
        out[PROP_OVERWRITTEN] = json.dumps(replaced)
        out.update(self.user)
        return out

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> CommitSummary:
        """The summary of a commit with ``properties`` (without the ``dlp.`` prefix), also one
        written by another version or tool: an unknown operation is kept as its string, a
        missing or unreadable ``overwritten`` reads as every table replaced."""
        return cls(
            operation=properties.get(PROP_OPERATION),
            overwritten=_overwritten(properties.get(PROP_OVERWRITTEN)),
            mode=properties.get(PROP_MODE),
            writer=properties.get(PROP_WRITER),
            of=properties.get(PROP_OF),
            filter=properties.get(PROP_FILTER),
            index=properties.get(PROP_INDEX),
            user={
                k: v for k, v in properties.items() if k not in _FIELDS and k != PROP_OVERWRITTEN
            },
        )

    @property
    def replaces_all(self) -> bool:
        """Whether the commit is to be taken as having replaced every table."""
        return self.overwritten is None

    @property
    def source(self) -> str | None:
        """Who wrote the commit, when the caller said (property ``source``)."""
        return self.user.get(PROP_SOURCE)


def creation_properties() -> dict[str, str]:
    """The properties of a namespace's very first ``__manifest`` commit (version 1, which
    holds no table yet): only ``operation`` = ``create``. The one commit of this package
    without ``overwritten``; readers never look for replaced tables in it."""
    return {PROP_OPERATION: Operation.CREATE.value}


__all__ = [
    "OVERWRITE_ALL",
    "PROP_DAGSTER_ASSET_KEY",
    "PROP_DAGSTER_PARTITION_KEYS",
    "PROP_DAGSTER_RUN_ID",
    "PROP_FILTER",
    "PROP_INDEX",
    "PROP_MODE",
    "PROP_OF",
    "PROP_OPERATION",
    "PROP_OVERWRITTEN",
    "PROP_SET",
    "PROP_SOURCE",
    "PROP_STEPS",
    "PROP_TRANSACTION",
    "PROP_WRITER",
    "PROP_WRITE_ID",
    "WRITER_ID",
    "CommitSummary",
    "Operation",
    "creation_properties",
]
