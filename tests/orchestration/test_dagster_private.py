"""Each use of Dagster's non-public API (``orchestration/dagster_private.py``) on real Dagster
objects -- contexts built by ``build_output_context`` / ``build_input_context`` and the contexts
of real in-process runs -- so that a Dagster release changing one fails here, naming the
attribute, rather than silently in a user's run (where each degrades to what a public API
gives). No mocks: the probes below are plain IO managers whose calls Dagster makes."""

from typing import Any

import dagster as dg
import pyarrow as pa
import pytest
from helpers.dagster_runs import range_tags

from dagster_lance_partitioned.orchestration import LancePartitionedIOManager, dagster_private
from dagster_lance_partitioned.orchestration.dagster_private import (
    SUBSET_ATTRIBUTE,
    add_partition_metadata,
    emit_in_order,
    input_instance,
    is_partitioned_step,
    output_instance,
    output_step,
    target_materialization,
    unordered_partition_keys,
)

# backfill policies are beta in Dagster 1.13
pytestmark = pytest.mark.filterwarnings("ignore::dagster.BetaWarning")

LETTERS = dg.StaticPartitionsDefinition(["d", "b", "a", "c"])  # defined out of alphabetical order
SINGLE_RUN = dg.BackfillPolicy.single_run()


class Probe(dg.IOManager):
    """Records what the private helpers see in a real run's contexts, and stores nothing."""

    def __init__(self) -> None:
        self.seen: dict[str, Any] = {}

    def handle_output(self, context: dg.OutputContext, obj: Any) -> None:
        step = output_step(context)
        self.seen["step"] = step
        self.seen["step has add_asset_metadata"] = callable(
            getattr(step, "add_asset_metadata", None)
        )
        self.seen["output instance"] = output_instance(context)
        self.seen["subset"] = getattr(context, SUBSET_ATTRIBUTE, "missing")
        self.seen["unordered"] = unordered_partition_keys(context)
        if context.has_asset_partitions and len(context.asset_partition_keys) > 1:
            per_key = {k: {"probe/key": k} for k in context.asset_partition_keys}
            self.seen["attached"] = add_partition_metadata(context, per_key)
            ordered = sorted(self.seen["unordered"] or [], reverse=True)
            emit_in_order(context, ordered)
            self.seen["after emit_in_order"] = list(context.asset_partition_keys)

    def load_input(self, context: dg.InputContext) -> Any:
        try:
            step = context.step_context
        except Exception:
            step = None
        self.seen["input step"] = step
        self.seen["input instance"] = input_instance(context)
        self.seen["partitioned step"] = is_partitioned_step(context)
        return None


@dg.asset(partitions_def=LETTERS, backfill_policy=SINGLE_RUN)
def letters(context: dg.AssetExecutionContext) -> int:
    return len(context.partition_keys)


@dg.asset(partitions_def=LETTERS, backfill_policy=SINGLE_RUN)
def downstream(context: dg.AssetExecutionContext, letters: Any) -> int:
    return 0


def _range_run(probe: Probe, instance: dg.DagsterInstance) -> dg.ExecuteInProcessResult:
    result = dg.materialize(
        [letters, downstream],
        instance=instance,
        tags=range_tags(("d", "c")),  # all four keys, one run
        resources={"io_manager": probe},
    )
    assert result.success
    return result


# -- OutputContext._asset_partitions_subset, DefaultPartitionsSubset ---------------------------
def test_the_output_context_holds_a_runs_static_keys_in_a_default_partitions_subset():
    assert dagster_private.DefaultPartitionsSubset is not None, (
        "dagster._core.definitions.partitions.subset.DefaultPartitionsSubset is gone: "
        "dagster_private.emit_in_order has no subset to put the run's keys in"
    )
    context = dg.build_output_context(
        asset_key="letters",
        asset_partitions_def=LETTERS,
        asset_partition_key_range=dg.PartitionKeyRange("d", "c"),
    )
    subset = getattr(context, SUBSET_ATTRIBUTE, "missing")
    assert subset != "missing", (
        f"OutputContext.{SUBSET_ATTRIBUTE} is gone: dagster_private.unordered_partition_keys "
        "and emit_in_order cannot order a run's materializations"
    )
    assert type(subset) is dagster_private.DefaultPartitionsSubset, (
        f"OutputContext.{SUBSET_ATTRIBUTE} of static keys is a {type(subset).__name__}, no "
        "longer a DefaultPartitionsSubset: a run's materializations keep Dagster's order"
    )
    assert isinstance(getattr(subset, "subset", None), (set, frozenset)), (
        "DefaultPartitionsSubset.subset is no longer the set of the run's keys"
    )
    keys = unordered_partition_keys(context)
    assert keys is not None and sorted(keys) == ["a", "b", "c", "d"]

    emit_in_order(context, ["d", "b", "a", "c"])
    assert list(context.asset_partition_keys) == ["d", "b", "a", "c"], (
        f"OutputContext.asset_partition_keys no longer lists {SUBSET_ATTRIBUTE} in the order "
        "its set iterates: emit_in_order has no effect"
    )


def test_a_time_window_run_is_left_in_dagsters_order():
    daily = dg.DailyPartitionsDefinition(start_date="2024-01-01", end_date="2024-01-10")
    context = dg.build_output_context(
        asset_key="days",
        asset_partitions_def=daily,
        asset_partition_key_range=dg.PartitionKeyRange("2024-01-02", "2024-01-04"),
    )
    assert unordered_partition_keys(context) is None  # time windows come in order already


def test_a_real_run_emits_its_materializations_in_the_order_given():
    probe = Probe()
    result = _range_run(probe, dg.DagsterInstance.ephemeral())
    assert type(probe.seen["subset"]) is dagster_private.DefaultPartitionsSubset, (
        f"in a run, OutputContext.{SUBSET_ATTRIBUTE} is a {type(probe.seen['subset'])}"
    )
    assert probe.seen["after emit_in_order"] == ["d", "c", "b", "a"]
    events = [str(m.partition) for m in result.asset_materializations_for_node("letters")]
    assert events == ["d", "c", "b", "a"], (
        f"Dagster no longer emits a run's materializations in the order of "
        f"OutputContext.{SUBSET_ATTRIBUTE}: got {events}"
    )


def test_the_io_manager_emits_static_keys_in_the_definitions_order(tmp_path):
    @dg.asset(
        partitions_def=LETTERS,
        metadata={"partition_expr": "letter"},
        backfill_policy=SINGLE_RUN,
        name="stored_letters",
    )
    def stored_letters(context: dg.AssetExecutionContext) -> pa.Table:
        keys = list(context.partition_keys)
        return pa.table({"letter": keys, "n": list(range(len(keys)))})

    result = dg.materialize(
        [stored_letters],
        instance=dg.DagsterInstance.ephemeral(),
        tags=range_tags(("d", "c")),
        resources={"io_manager": LancePartitionedIOManager(root=str(tmp_path))},
    )
    assert result.success
    events = [str(m.partition) for m in result.asset_materializations_for_node("stored_letters")]
    assert events == ["d", "b", "a", "c"]


# -- OutputContext.step_context, StepExecutionContext.add_asset_metadata / .instance ----------
def test_a_real_runs_output_context_has_its_step_with_per_key_metadata():
    probe = Probe()
    instance = dg.DagsterInstance.ephemeral()
    result = _range_run(probe, instance)
    assert probe.seen["step"] is not None, (
        "OutputContext.step_context is gone (or raises) in a run: dagster_private.output_step "
        "finds no step, so no per-key metadata and no dynamic-partition order"
    )
    assert probe.seen["step has add_asset_metadata"], (
        "StepExecutionContext.add_asset_metadata is gone: dagster_private.add_partition_metadata "
        "cannot attach each key's metadata to its own materialization"
    )
    assert probe.seen["attached"] is True
    for m in result.asset_materializations_for_node("letters"):
        assert m.metadata["probe/key"].value == m.partition, (
            "StepExecutionContext.add_asset_metadata(partition_key=) no longer puts metadata "
            "on that key's materialization only"
        )
    assert probe.seen["output instance"] is instance, (
        "StepExecutionContext.instance is not the run's instance: dagster_private."
        "output_instance cannot list dynamic partitions in the order they were added"
    )


def test_a_context_built_outside_a_run_has_no_step():
    context = dg.build_output_context(asset_key="letters", asset_partitions_def=LETTERS)
    assert output_step(context) is None
    assert output_instance(context) is None
    assert add_partition_metadata(context, {"a": {"probe/key": "a"}}) is False


# -- InputContext.instance, InputContext.step_context ------------------------------------------
def test_an_input_context_gives_the_instance_it_was_built_with():
    instance = dg.DagsterInstance.ephemeral()
    context = dg.build_input_context(asset_key="letters", instance=instance)
    assert "instance" in dir(context), "InputContext.instance is gone"
    assert input_instance(context) is instance, (
        "InputContext.instance no longer returns the instance: dagster_private.input_instance "
        "cannot read recorded manifest versions or materialized partitions"
    )
    assert input_instance(dg.build_input_context(asset_key="letters")) is None


def test_a_real_runs_input_context_knows_its_step_runs_a_key_range():
    probe = Probe()
    instance = dg.DagsterInstance.ephemeral()
    _range_run(probe, instance)
    step = probe.seen["input step"]
    assert step is not None, "InputContext.step_context is gone (or raises) in a run"
    for name in ("has_partition_key", "has_partition_key_range"):
        assert hasattr(step, name), (
            f"StepExecutionContext.{name} is gone: dagster_private.is_partitioned_step cannot "
            "tell a partitioned load (missing upstream keys are then never refused)"
        )
    assert step.has_partition_key_range and not step.has_partition_key  # a range run
    assert probe.seen["partitioned step"] is True
    assert probe.seen["input instance"] is instance


def test_an_input_context_built_outside_a_run_is_not_a_partitioned_step():
    context = dg.build_input_context(
        asset_key="letters", asset_partitions_def=LETTERS, partition_key="a"
    )
    assert is_partitioned_step(context) is False


# -- AssetCheckEvaluationTargetMaterializationData ---------------------------------------------
def test_a_check_evaluation_takes_the_target_materialization_built_here():
    assert dagster_private.AssetCheckEvaluationTargetMaterializationData is not None, (
        "dagster._core.definitions.asset_checks.asset_check_evaluation."
        "AssetCheckEvaluationTargetMaterializationData is gone: per-partition checks name no "
        "target materialization"
    )

    @dg.asset
    def checked() -> int:
        return 1

    instance = dg.DagsterInstance.ephemeral()
    assert dg.materialize([checked], instance=instance, resources={"io_manager": Probe()}).success
    [record] = instance.fetch_materializations(dg.AssetKey("checked"), limit=1).records
    target = target_materialization(record)
    assert (target.storage_id, target.run_id, target.timestamp) == (
        record.storage_id,
        record.run_id,
        record.timestamp,
    )
    evaluation = dg.AssetCheckEvaluation(
        asset_key=dg.AssetKey("checked"),
        check_name="probe",
        passed=True,
        target_materialization_data=target,
    )
    assert evaluation.target_materialization_data == target, (
        "AssetCheckEvaluation(target_materialization_data=) no longer keeps an "
        "AssetCheckEvaluationTargetMaterializationData"
    )
