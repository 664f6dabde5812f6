"""Every ``lance/...`` key of the Dagster layer, in one place: the asset, output and input
metadata the IO manager reads, and the metadata (and the one run tag) this package writes on
materializations, observations and check results. No ``lance/`` key is spelled anywhere else in
the package (a test holds this).

Numbers a multi-key run reports for the whole run are named ``lance/run_<name>``
(:func:`scoped`): each key's own event carries ``lance/<name>``, every event of the run the
run's total."""

from __future__ import annotations

from typing import Final

PREFIX: Final = "lance/"
"""The prefix of every key below."""
RUN_PREFIX: Final = "lance/run_"
"""The prefix of a multi-key run's totals (see :func:`scoped`)."""

# -- asset / output metadata read by the IO manager -------------------------------------------
PARTITION_BY: Final = "lance/partition_by"
"""How an asset without a partitions definition is partitioned by its data (``partitionBy``)."""
SPEC_UPDATE_MODE: Final = "lance/partition_spec_update_mode"
"""``update`` or ``error``: what a changed partitioning does (overrides the IO manager's)."""
SCHEMA_UPDATE_MODE: Final = "lance/schema_update_mode"
"""``update`` or ``error``: what a changed schema does (overrides the IO manager's)."""
WRITE_MODE: Final = "lance/write_mode"
"""The output's write mode (``overwrite_partitions``, ``append``, ``overwrite``, ``merge``);
also on a merge's materialization."""
MERGE_ON: Final = "lance/merge_on"
"""A merge's key columns (also on its materialization)."""
MERGE_WHEN_MATCHED: Final = "lance/merge_when_matched"
"""A merge's action for input rows matching a stored row: ``update`` or ``ignore``."""
MERGE_WHEN_NOT_MATCHED: Final = "lance/merge_when_not_matched"
"""A merge's action for input rows matching none: ``insert`` or ``ignore``."""
MERGE_WHEN_NOT_MATCHED_BY_SOURCE: Final = "lance/merge_when_not_matched_by_source"
"""A merge's action for stored rows no input row matches: ``keep`` or ``delete``."""
MERGE_SCOPE: Final = "lance/merge_scope"
"""A filter: the stored rows a merge's by-source delete may remove."""
INDEXES: Final = "lance/indexes"
"""Asset metadata: the indexes to declare; on materializations and observations: their
coverage table."""

# -- input metadata ---------------------------------------------------------------------------
VERSION: Final = "lance/version"
"""The manifest version an input reads (default: the latest)."""
ALLOW_MISSING: Final = "lance/allow_missing_partitions"
"""True: an input loads absent partition keys as no rows (with a warning) instead of failing."""

# -- written on materializations, observations and check results ------------------------------
MANIFEST_VERSION: Final = "lance/manifest_version"
"""The namespace's manifest version the event describes."""
SPEC_VERSION: Final = "lance/spec_version"
"""The current partition spec's id after the write."""
SPEC_UPDATED: Final = "lance/spec_updated"
"""Whether the write changed the namespace's partitioning."""
ENGINE: Final = "lance/engine"
"""What wrote the output: ``arrow`` or the type handler's engine (e.g. ``spark``)."""
READ_VERSIONS: Final = "lance/read_versions"
"""The Lance table version now registered for each partition table written (as text)."""
PARTITIONS_WRITTEN: Final = "lance/partitions_written"
"""Partition tables written or changed."""
PARTITIONS_REMOVED: Final = "lance/partitions_removed"
"""Partition tables deregistered."""
BYTES_WRITTEN: Final = "lance/bytes_written"
"""Bytes written (an integer the UI plots)."""
SIZE_WRITTEN: Final = "lance/size_written"
"""Bytes written, as text a person reads (e.g. ``2.8 MiB``)."""
ROWS_INSERTED: Final = "lance/rows_inserted"
"""A merge's rows inserted."""
ROWS_UPDATED: Final = "lance/rows_updated"
"""A merge's stored rows replaced by an input row."""
ROWS_DELETED: Final = "lance/rows_deleted"
"""Rows deleted: by a merge, or by the maintenance job's retention (per asset on its output)."""
ROWS_MOVED: Final = "lance/rows_moved"
"""A merge's rows moved to another partition."""
COMMITTED: Final = "lance/committed"
"""Whether a merge made a manifest commit (False: it changed nothing)."""
RUN_ROWS_WRITTEN: Final = "lance/run_rows_written"
"""Rows a multi-key run wrote in all."""
RUN_PARTITION_KEYS: Final = "lance/run_partition_keys"
"""The number of partition keys of a multi-key run."""
PARTITION_ROW_COUNTS: Final = "lance/partition_row_counts"
"""Each key's row count, when they cannot be attached to each key's own event."""
INDEXES_DECLARED: Final = "lance/indexes_declared"
"""The indexes a run declared on the namespace."""
INDEX_PARTITIONS_NEEDING: Final = "lance/index_partitions_needing"
"""Partition tables lacking an index their size calls for (summed over the indexes)."""
INDEX_UNINDEXED_ROWS: Final = "lance/index_unindexed_rows"
"""Rows not covered by an index (summed over the indexes)."""
MAINTENANCE: Final = "lance/maintenance"
"""What the maintenance job did to an asset's namespace; also the tag (``"true"``) of its
runs."""
SCHEMA_CHANGES: Final = "lance/schema_changes"
"""The schema sensor's observation: the columns changed since the last one."""
EXTERNAL: Final = "lance/external"
"""True on a materialization the external-change sensor reports (a commit made outside
Dagster)."""
WRITER: Final = "lance/writer"
"""The writer of such a commit (commit property ``writer``)."""
OPERATION: Final = "lance/operation"
"""The operation of such a commit (commit property ``operation``)."""


def scoped(key: str, run: bool) -> str:
    """``key`` (a number of one event's own), or with ``run`` the key of a multi-key run's
    total of it: ``lance/run_<name>`` (a ``lance/run_...`` key is its own total)."""
    if not run or key.startswith(RUN_PREFIX):
        return key
    return RUN_PREFIX + key.removeprefix(PREFIX)


__all__ = [
    "ALLOW_MISSING",
    "BYTES_WRITTEN",
    "COMMITTED",
    "ENGINE",
    "EXTERNAL",
    "INDEXES",
    "INDEXES_DECLARED",
    "INDEX_PARTITIONS_NEEDING",
    "INDEX_UNINDEXED_ROWS",
    "MAINTENANCE",
    "MANIFEST_VERSION",
    "MERGE_ON",
    "MERGE_SCOPE",
    "MERGE_WHEN_MATCHED",
    "MERGE_WHEN_NOT_MATCHED",
    "MERGE_WHEN_NOT_MATCHED_BY_SOURCE",
    "OPERATION",
    "PARTITIONS_REMOVED",
    "PARTITIONS_WRITTEN",
    "PARTITION_BY",
    "PARTITION_ROW_COUNTS",
    "PREFIX",
    "READ_VERSIONS",
    "ROWS_DELETED",
    "ROWS_INSERTED",
    "ROWS_MOVED",
    "ROWS_UPDATED",
    "RUN_PARTITION_KEYS",
    "RUN_PREFIX",
    "RUN_ROWS_WRITTEN",
    "SCHEMA_CHANGES",
    "SCHEMA_UPDATE_MODE",
    "SIZE_WRITTEN",
    "SPEC_UPDATED",
    "SPEC_UPDATE_MODE",
    "SPEC_VERSION",
    "VERSION",
    "WRITER",
    "WRITE_MODE",
    "scoped",
]
