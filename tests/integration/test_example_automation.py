"""The example's downstream assets follow backfills of any day, not only the latest one: their
automation conditions (``nyc_flights.automation``) are evaluated through Dagster's own
``evaluate_automation_conditions`` on a real, persistent instance, after real runs of the
example's assets (Spark in local mode) and after a runless materialization the external change
sensor reports for a commit made outside Dagster.

2013-03-01 is far from the partitions' latest window (2013-12-31), which is all
``AutomationCondition.eager()`` considers: the same ticks evaluated with ``eager()`` request
nothing."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dagster as dg
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from dagster_lance_partitioned import PartitionedNamespace

ROOT = Path(__file__).resolve().parents[2]
DAY = "2013-03-01"
FLIGHTS, WEATHER = dg.AssetKey("flights"), dg.AssetKey("weather")
ENRICHED, MONTHLY = dg.AssetKey("flight_delays_enriched"), dg.AssetKey("monthly_carrier_delays")
QUIET: dict[str, Any] = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
pytestmark = [
    pytest.mark.example,
    pytest.mark.spark,  # the flights asset runs Spark in local mode
    # Dagster's own calls of its beta parameters (evaluate_automation_conditions, and
    # the repository rebuilding the component's checks; nyc_flights/__init__.py says more)
    pytest.mark.filterwarnings(
        "ignore:Parameter `include_sources` of function:dagster.BetaWarning"
    ),
    pytest.mark.filterwarnings("ignore:Parameter `execution_type` of function:dagster.BetaWarning"),
    pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning"),
]


def _range(first: str, last: str) -> dict[str, str]:
    return {"dagster/asset_partition_range_start": first, "dagster/asset_partition_range_end": last}


def _with_eager(defs: dg.Definitions) -> dg.Definitions:
    """The same definitions with Dagster's ``eager()`` on both downstream assets."""

    def eager(spec: dg.AssetSpec) -> dg.AssetSpec:
        if spec.key not in (ENRICHED, MONTHLY):
            return spec
        return spec.replace_attributes(automation_condition=dg.AutomationCondition.eager())

    return dg.Definitions(
        assets=[a.map_asset_specs(eager) for a in defs.assets or []],
        resources=defs.resources,
    )


@dataclass
class Ticks:
    """Ticks of the example's automation conditions and, beside them, of ``eager()``."""

    defs: dg.Definitions
    eager_defs: dg.Definitions
    instance: dg.DagsterInstance
    cursor: Any = None
    eager_cursor: Any = None
    eager_requested: list[int] = field(default_factory=list)

    def tick(self) -> dg.EvaluateAutomationConditionsResult:
        result = dg.evaluate_automation_conditions(
            defs=self.defs, instance=self.instance, cursor=self.cursor
        )
        self.cursor = result.cursor
        eager = dg.evaluate_automation_conditions(
            defs=self.eager_defs, instance=self.instance, cursor=self.eager_cursor
        )
        self.eager_cursor = eager.cursor
        self.eager_requested.append(eager.total_requested)
        return result

    def run(self, keys: list[dg.AssetKey], **kw: Any) -> dg.ExecuteInProcessResult:
        """A real run of the example's assets ``keys`` in the instance."""
        result = dg.materialize(
            list(self.defs.assets or []),
            selection=keys,
            instance=self.instance,
            resources=self.defs.resources,
            run_config=QUIET,
            **kw,
        )
        assert result.success
        return result


@pytest.fixture
def ticks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Ticks]:
    monkeypatch.setenv("DLP_ROOT", str(tmp_path / "lake"))
    monkeypatch.setenv("DLP_SOURCE_DIR", str(tmp_path / "source"))
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    monkeypatch.setenv("SPARK_LOCAL_IP", "127.0.0.1")
    monkeypatch.syspath_prepend(str(ROOT))
    from nyc_flights.definitions import defs as load_definitions

    defs = load_definitions()
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    with dg.DagsterInstance.local_temp(str(home)) as instance:
        yield Ticks(defs, _with_eager(defs), instance)


def _requested(result: dg.EvaluateAutomationConditionsResult) -> dict[str, set[str | None]]:
    return {
        key.to_user_string(): set(result.get_requested_partitions(key))
        for key in (ENRICHED, MONTHLY)
        if result.get_requested_partitions(key)
    }


def test_a_backfilled_day_is_followed_downstream(ticks: Ticks) -> None:
    ticks.run([dg.AssetKey("planes"), dg.AssetKey("airlines")])
    assert ticks.tick().total_requested == 0  # the first tick only starts the cursor

    # flights of the day, by a real run (Spark); its weather is still missing: nothing yet
    ticks.run([FLIGHTS], tags=_range(f"{DAY}|EWR", f"{DAY}|LGA"))
    assert ticks.tick().total_requested == 0

    # the day's weather completes the upstream of that day: exactly that day is requested, and
    # its month waits until the day has been materialized (it must not run beside it)
    ticks.run([WEATHER], tags=_range(f"{DAY}-00:00", f"{DAY}-23:00"))
    assert _requested(ticks.tick()) == {"flight_delays_enriched": {DAY}}
    assert ticks.tick().total_requested == 0  # requested once, not again

    # the daemon's run of that request: then the month follows (with the one day there is)
    ticks.run([ENRICHED], partition_key=DAY)
    assert _requested(ticks.tick()) == {"monthly_carrier_delays": {DAY}}
    ticks.run([MONTHLY], partition_key=DAY)
    assert ticks.tick().total_requested == 0

    # Dagster's eager() saw the same ticks and requested nothing: 2013-03 is not the latest
    assert ticks.eager_requested == [0] * len(ticks.eager_requested)


def test_a_change_made_outside_dagster_is_followed_downstream(ticks: Ticks) -> None:
    """The external change sensor's runless materialization, recorded in the instance as the
    sensor daemon records it, triggers the downstream day like a run would."""
    ticks.run([dg.AssetKey("planes"), dg.AssetKey("airlines")])
    ticks.run([FLIGHTS], tags=_range(f"{DAY}|EWR", f"{DAY}|LGA"))
    ticks.run([WEATHER], tags=_range(f"{DAY}-00:00", f"{DAY}-23:00"))
    ticks.run([ENRICHED], partition_key=DAY)
    ticks.run([MONTHLY], partition_key=DAY)
    assert ticks.tick().total_requested == 0  # the first tick: everything is up to date
    assert ticks.tick().total_requested == 0

    sensor = ticks.defs.resolve_sensor_def("lance_external_changes")
    repo = ticks.defs.get_repository_def()

    def sensor_tick(cursor: str | None) -> dg.SensorResult:
        context = dg.build_sensor_context(
            instance=ticks.instance, repository_def=repo, cursor=cursor
        )
        result = sensor(context)
        assert isinstance(result, dg.SensorResult)
        return result

    first = sensor_tick(None)  # starts watching at the current manifest versions
    assert not first.asset_events
    # another tool corrects one partition of the day: no missing departure delays
    flights = PartitionedNamespace.open(Path(ticks.defs.resources["io_manager"].root) / "flights")
    where = "origin = 'JFK' AND time_hour >= '2013-03-01T05:00:00Z' AND time_hour < "
    jfk = flights.to_table(where + "'2013-03-02T05:00:00Z'")
    assert jfk.num_rows > 0
    fixed = pc.fill_null(jfk["dep_delay"], pa.scalar(0.0, jfk.schema.field("dep_delay").type))
    flights.write(
        jfk.set_column(jfk.schema.get_field_index("dep_delay"), "dep_delay", fixed),
        mode="overwrite_partitions",
    )
    assert ticks.tick().total_requested == 0  # the instance knows nothing of it yet

    second = sensor_tick(first.cursor)
    assert [(e.asset_key, e.partition) for e in second.asset_events] == [(FLIGHTS, f"{DAY}|JFK")]
    for event in second.asset_events:  # what the sensor daemon does with a tick's events
        ticks.instance.report_runless_asset_event(event)
    record = ticks.instance.get_latest_materialization_event(FLIGHTS)
    assert record is not None and record.run_id == ""  # runless
    assert _requested(ticks.tick()) == {"flight_delays_enriched": {DAY}}
    assert ticks.eager_requested == [0] * len(ticks.eager_requested)


def test_the_sensor_tick_as_the_daemon_evaluates_it(ticks: Ticks) -> None:
    """The external change sensor evaluated through ``SensorDefinition.evaluate_tick``, as the
    sensor daemon evaluates it (calling the sensor directly skips Dagster's resolution of its
    run requests)."""
    ticks.run([WEATHER], tags=_range(f"{DAY}-00:00", f"{DAY}-23:00"))  # pandas: no Spark
    repo = ticks.defs.get_repository_def()
    sensor = repo.get_sensor_def("lance_external_changes")
    first = sensor.evaluate_tick(
        dg.build_sensor_context(instance=ticks.instance, repository_def=repo)
    )
    weather = PartitionedNamespace.open(Path(ticks.defs.resources["io_manager"].root) / "weather")
    hour = "time_hour = TIMESTAMP '2013-03-01T17:00:00Z'"
    weather.write(weather.to_table(hour), mode="overwrite_partitions")  # another tool rewrites it
    tick = sensor.evaluate_tick(
        dg.build_sensor_context(instance=ticks.instance, repository_def=repo, cursor=first.cursor)
    )
    assert [e.partition for e in tick.asset_events] == ["2013-03-01-12:00"]
    assert [(r.asset_selection, r.partition_key) for r in tick.run_requests] == [([ENRICHED], DAY)]
