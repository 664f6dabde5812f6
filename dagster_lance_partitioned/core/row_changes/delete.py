"""Deleting the rows that match a filter, in one manifest commit."""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa

from ..concurrency import parallel_map, table_threads
from ..errors import WriteError
from ..expr.filters import FilterLike, to_sql
from ..expr.filters import check as check_filter
from ..manifest.commit_summary import PROP_FILTER, Operation
from ..manifest.state import HasState, NamespaceState, state_of
from ..read.field_filters import namespace_row_filter
from ..read.planning import ScanTask
from ..read.scan import count_matching
from .change import RowChangeResult
from .commit import run
from .executor import TableExecutor
from .plan import ChangePlan


def delete_rows(
    ns: NamespaceState | HasState,
    filter: FilterLike,
    *,
    commit_properties: Mapping[str, str] | None = None,
) -> RowChangeResult:
    """Delete the rows matching ``filter`` (NULL is not a match) in one manifest commit.

    Only the partitions ``plan_scan(filter)`` selects are read (every spec version); a
    partition all of whose rows match is deregistered, others get a detached version without
    the matching rows. A filter is required (``"TRUE"`` deletes everything)."""
    ns = state_of(ns)
    ns.require_unpinned("delete rows")
    if to_sql(filter) is None:
        raise WriteError("delete needs a filter (use 'TRUE' to delete every row)")
    sql = namespace_row_filter(ns.refresh(), filter)
    assert sql is not None
    check_filter(sql, ns.schema_with_ids)  # a bad filter fails here, before anything is written
    executor = TableExecutor(ns.uri, ns.storage_options)
    counts: dict[tuple[str, int | None, str | None], tuple[int, int]] = {}

    def count(task: ScanTask, schema: pa.Schema) -> tuple[int, int]:
        """(rows matching, rows) of ``task``'s table."""
        key = (task.location, task.read_version, task.read_tag)
        if key not in counts or task.read_version is None:
            matching = count_matching(task, schema, sql, ns.storage_options)
            counts[key] = (matching, executor.dataset(task).count_rows())
        return counts[key]

    def build(p: ChangePlan) -> None:
        tasks = p.tasks(sql)
        found = parallel_map(lambda t: count(t, p.schema), tasks, table_threads(ns.uri))
        for task, (matching, rows) in zip(tasks, found, strict=True):
            if matching == 0:
                continue
            p.deleted += matching
            if matching == rows:
                p.deregister[task.object_id] = task
            else:
                p.change(task).delete_filter = sql

    props = {PROP_FILTER: sql, **(commit_properties or {})}
    return run(ns, Operation.DELETE, build, props, executor)
