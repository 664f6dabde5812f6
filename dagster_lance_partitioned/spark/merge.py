"""Row-level changes from Spark: merge a DataFrame into a namespace (upsert on key columns).

The merge itself runs on the driver through the core (``PartitionedNamespace.merge_insert``):
the DataFrame is collected as Arrow, so it suits change sets that fit in the driver's memory
(typically a small fraction of the table). Deletes and updates need no Spark:
``PartitionedNamespace.delete`` / ``update``."""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame

from ..core.filters import FilterLike
from ..core.namespace import PartitionedNamespace
from ..core.row_changes import RowChangeResult


def merge_dataframe(
    df: DataFrame,
    uri: str,
    on: str | Sequence[str],
    *,
    when_matched: str = "update",
    when_not_matched: str = "insert",
    when_not_matched_by_source: str = "keep",
    scope: FilterLike = None,
    storage_options: dict[str, str] | None = None,
    commit_properties: dict[str, str] | None = None,
) -> RowChangeResult:
    """Merge the rows of ``df`` into the namespace at ``uri`` on the key columns ``on``, in one
    manifest commit (semantics of :func:`~dagster_lance_partitioned.core.row_changes.merge_rows`:
    matched keys updated or ignored, new keys inserted or ignored, moved keys deleted from their
    old partition; keys must be unique and not NULL)."""
    ns = PartitionedNamespace.open(uri, storage_options)
    data = df.toArrow()
    return ns.merge_insert(
        data,
        on,
        when_matched=when_matched,
        when_not_matched=when_not_matched,
        when_not_matched_by_source=when_not_matched_by_source,
        scope=scope,
        commit_properties={"source": "spark", **(commit_properties or {})},
    )
