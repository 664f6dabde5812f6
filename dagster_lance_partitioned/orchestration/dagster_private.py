"""Every use of Dagster's non-public API in this package, each where no public API serves,
saying why. ``tests/orchestration/test_dagster_private.py`` exercises each on real Dagster
objects and fails, naming the attribute, when a Dagster release changes it. At run time a
missing attribute degrades to what a public API gives (no per-key metadata, events in
Dagster's order, no check target), never to a failed run.

Written against Dagster 1.13."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import dagster as dg

try:
    from dagster._core.definitions.partitions.subset import DefaultPartitionsSubset
except ImportError:  # pragma: no cover - a Dagster that moved it: events keep Dagster's order
    DefaultPartitionsSubset = None  # type: ignore[assignment,misc]
try:
    from dagster._core.definitions.asset_checks.asset_check_evaluation import (
        AssetCheckEvaluationTargetMaterializationData,
    )
except ImportError:  # pragma: no cover - a Dagster that moved it: evaluations name no target
    AssetCheckEvaluationTargetMaterializationData = None  # type: ignore[assignment,misc]

SUBSET_ATTRIBUTE = "_asset_partitions_subset"


# -- the step an output or input belongs to ----------------------------------------------------
def output_step(context: dg.OutputContext) -> Any | None:
    """The step execution context of a run's output (None for a context built outside a run).

    ``OutputContext.step_context`` is not public API. An IO manager gets nothing else of the
    step: its instance (which knows the keys of dynamic partitions, for
    :func:`output_instance`) and the per-partition-key metadata of
    :func:`add_partition_metadata` are only there."""
    try:
        return context.step_context
    except dg.DagsterInvariantViolationError:
        return None


def output_instance(context: dg.OutputContext) -> dg.DagsterInstance | None:
    """The Dagster instance of a run's output (None outside a run).

    ``OutputContext`` has no public ``instance`` (``InputContext`` has one, not public
    either); the step's is read through :func:`output_step`."""
    step = output_step(context)
    return step.instance if step is not None else None


def input_instance(context: dg.InputContext) -> dg.DagsterInstance | None:
    """The Dagster instance of an input being loaded (None for a context built without
    one, as for direct IO manager calls).

    ``InputContext.instance`` is not public API, and no public one gives the instance whose
    materializations (recorded manifest versions, materialized partitions) a load reads."""
    try:
        return context.instance
    except Exception:  # a context built without an instance
        return None


def is_partitioned_step(context: dg.InputContext) -> bool:
    """Whether the step loading an input runs for partition keys (one key or a range).

    ``InputContext.has_partition_key`` is public but False for a run of a key range, and
    ``InputContext`` has no ``has_partition_key_range``: only the (non-public) step context
    knows both. False for a context built outside a run."""
    try:
        step = context.step_context
        return bool(step.has_partition_key or step.has_partition_key_range)
    except Exception:  # a context built outside a run
        return False


# -- per-key materialization metadata ----------------------------------------------------------
def add_partition_metadata(
    context: dg.OutputContext, per_key: Mapping[str, Mapping[str, Any]]
) -> bool:
    """Attach each key's metadata to that key's materialization only (so a run of N keys
    stores N small events, not N copies of every key's numbers); False for a context built
    outside a run, which has no step to attach them to.

    ``OutputContext.add_output_metadata`` (public) puts the same metadata on every key's
    event; the per-key form, ``add_asset_metadata(..., partition_key=)``, is public only on
    the asset's own execution context, which an IO manager does not get: it is called on
    the step context (:func:`output_step`)."""
    step = output_step(context)
    if step is None:
        return False
    for key, meta in per_key.items():
        step.add_asset_metadata(dict(meta), asset_key=context.asset_key, partition_key=key)
    return True


# -- the order of a run's materializations -----------------------------------------------------
def unordered_partition_keys(context: dg.OutputContext) -> list[str] | None:
    """The partition keys of a run's output when Dagster holds them in a set (static,
    dynamic and multi-partitions: any order); None when it holds them otherwise (time
    windows, already in order) or this Dagster holds them differently.

    Dagster emits a run's materializations in the order of the output context's
    ``_asset_partitions_subset``, not public API; no public API chooses that order."""
    subset = getattr(context, SUBSET_ATTRIBUTE, None)
    if DefaultPartitionsSubset is None or type(subset) is not DefaultPartitionsSubset:
        return None
    return list(subset.subset)


def emit_in_order(context: dg.OutputContext, ordered: Sequence[str]) -> None:
    """Have Dagster emit the materializations of the output's keys in the order of
    ``ordered`` (the same keys :func:`unordered_partition_keys` returned), so that the run's
    newest event, the asset's "latest materialization" in the UI, is its last key.

    Replaces the context's ``_asset_partitions_subset`` (not public API) by a
    ``DefaultPartitionsSubset`` (not public API either) of the same keys whose set iterates
    in that order."""
    setattr(context, SUBSET_ATTRIBUTE, DefaultPartitionsSubset(_KeysInOrder(ordered)))


class _KeysInOrder(set):  # type: ignore[type-arg]
    """A set of partition keys that iterates in a given order."""

    def __init__(self, ordered: Sequence[str]) -> None:
        super().__init__(ordered)
        self.ordered = list(ordered)

    def __iter__(self) -> Iterator[str]:
        return iter(self.ordered)


# -- asset checks ------------------------------------------------------------------------------
def target_materialization(record: dg.EventLogRecord) -> Any | None:
    """What an asset check evaluation checked: the materialization ``record`` points at, as
    ``AssetCheckEvaluation(target_materialization_data=...)`` takes it (None when this
    Dagster does not have the class).

    The argument is public, but its type, ``AssetCheckEvaluationTargetMaterializationData``,
    is not exported by ``dagster``."""
    if AssetCheckEvaluationTargetMaterializationData is None:
        return None
    return AssetCheckEvaluationTargetMaterializationData(
        storage_id=record.storage_id, run_id=record.run_id, timestamp=record.timestamp
    )
