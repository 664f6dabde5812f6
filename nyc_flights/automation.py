"""When the example's downstream assets run by themselves: automation conditions composed from
Dagster's own, for partitions of any date, not only the latest.

``AutomationCondition.eager()`` starts with ``in_latest_time_window()``: for these 2013
partitions (whose latest window is 2013-12-31) it never requests the day a backfill just filled.
The conditions below keep everything else of ``eager()`` and drop that restriction, so a
backfill of 2013-03-01, a scheduled run, or a runless materialization reported by the external
change sensor (a commit made outside Dagster) leads to exactly the downstream partitions it
maps to. They are evaluated by ``default_automation_condition_sensor``, which starts stopped."""

from __future__ import annotations

import dagster as dg

AC = dg.AutomationCondition


def eager_any_partition() -> dg.AutomationCondition:
    """``eager()`` without ``in_latest_time_window()``: a partition is requested when one of the
    partitions it depends on was updated (by a run, or reported without a run) or will be
    requested on this tick, or when it became missing, since it was last requested or updated;
    not while any of those partitions is missing or in progress, nor while it is in progress
    itself. Flights and weather of one day lead to that day's enriched flights."""
    return AC.eager().without(AC.in_latest_time_window()).with_label("eager (any partition)")


def aggregate_any_partition() -> dg.AutomationCondition:
    """For an aggregate that reads what there is so far (``lance/allow_missing_partitions``): a
    partition is requested when one of the partitions it depends on was updated since it was
    last requested or updated, once none of them is in progress or about to be requested on
    this tick (the aggregate then runs after them, not beside them), and it is not in progress
    itself. Unlike ``eager()`` it does not wait for every partition it depends on: one new day
    updates its month."""
    return (
        AC.any_deps_updated().since_last_handled()
        & ~AC.any_deps_match(AC.will_be_requested()).with_label("any_deps_requested_this_tick")
        & ~AC.any_deps_in_progress()
        & ~AC.in_progress()
    ).with_label("aggregate (any partition, deps so far)")
