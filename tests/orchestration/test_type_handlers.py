"""Type handlers are extensible: a user's Polars handler (plain Arrow conversion), given to the
IO manager by overriding ``type_handlers()``, writes, merges and loads Polars DataFrames in real
Dagster runs; ``TypeHandler`` is abstract; a type no handler supports is refused by name; and
package errors carried through Spark's messages come back with their class and fields."""

import base64
import datetime as dt
import decimal
import json
import os
import traceback
from collections.abc import Sequence
from typing import Any

import dagster as dg
import polars as pl
import pyarrow as pa
import pytest

from dagster_lance_partitioned import PartitionedNamespace
from dagster_lance_partitioned.core.errors import (
    CommitConflictError,
    DuplicateKeyError,
    UnnamedPartitionError,
)
from dagster_lance_partitioned.orchestration import (
    LancePartitionedIOManager,
    PartitionKeyMismatchError,
    TypeHandler,
    UnsupportedTypeError,
    default_type_handlers,
)
from dagster_lance_partitioned.spark.result import (
    carried,
    decode_error,
    encode_error,
    package_error,
)

DAILY = dg.DailyPartitionsDefinition(start_date="2024-05-01", end_date="2024-06-01")


class PolarsHandler(TypeHandler[pl.DataFrame]):
    """A user's handler: Polars DataFrames through Arrow."""

    @property
    def supported_types(self) -> Sequence[type]:
        return (pl.DataFrame,)

    def to_arrow(self, obj: pl.DataFrame) -> pa.Table:
        return obj.to_arrow()

    def from_arrow(self, data: pa.RecordBatchReader) -> pl.DataFrame:
        return pl.from_arrow(data.read_all())


class PolarsIOManager(LancePartitionedIOManager):
    @staticmethod
    def type_handlers() -> Sequence[TypeHandler[Any]]:
        return [PolarsHandler(), *default_type_handlers()]


def day_frame(day: str, ids: Sequence[int], score: float = 0.0) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "id": list(ids),
            "day": [dt.date.fromisoformat(day)] * len(ids),
            "name": [f"n{i}" for i in ids],
            "score": [score + i for i in ids],
        },
        schema={"id": pl.Int64, "day": pl.Date, "name": pl.String, "score": pl.Float64},
    )


def test_user_polars_handler_round_trips_through_real_runs(tmp_path):
    frames = {
        "2024-05-01": day_frame("2024-05-01", range(4)),
        "2024-05-02": day_frame("2024-05-02", range(10, 13)),
    }
    loaded: dict[str, pl.DataFrame] = {}

    @dg.asset(partitions_def=DAILY, metadata={"partition_expr": "day"})
    def scores(context: dg.AssetExecutionContext) -> pl.DataFrame:
        return frames[context.partition_key]

    @dg.asset(
        partitions_def=DAILY,
        metadata={
            "partition_expr": "day",
            "lance/write_mode": "merge",
            "lance/merge_on": ["id"],
        },
    )
    def best(context: dg.AssetExecutionContext, scores: pl.DataFrame) -> pl.DataFrame:
        loaded[context.partition_key] = scores
        return scores.filter(pl.col("score") >= 2)

    instance = dg.DagsterInstance.ephemeral()
    io = PolarsIOManager(root=str(tmp_path))
    for key in frames:
        result = dg.materialize(
            [scores, best], instance=instance, partition_key=key, resources={"io_manager": io}
        )
        assert result.success
        [mat] = result.asset_materializations_for_node("scores")
        assert mat.metadata["dagster/partition_row_count"].value == frames[key].height
        assert mat.metadata["lance/engine"].value == "arrow"

    # the input came back as a Polars DataFrame equal to what was written
    for key, frame in frames.items():
        got = loaded[key]
        assert isinstance(got, pl.DataFrame)
        assert got.sort("id").equals(frame)
    ns = PartitionedNamespace.open(os.path.join(str(tmp_path), "scores"))
    assert ns.count_rows() == 7
    best_ns = PartitionedNamespace.open(os.path.join(str(tmp_path), "best"))
    assert sorted(best_ns.to_table()["id"].to_pylist()) == [2, 3, 10, 11, 12]

    # a merge written from Polars (the default merge goes through to_arrow)
    frames["2024-05-01"] = day_frame("2024-05-01", [0, 1, 2, 3, 4], score=10.0)
    result = dg.materialize(
        [scores, best], instance=instance, partition_key="2024-05-01", resources={"io_manager": io}
    )
    assert result.success
    [mat] = result.asset_materializations_for_node("best")
    assert mat.metadata["lance/rows_inserted"].value == 3  # ids 0, 1 and 4
    assert mat.metadata["lance/rows_updated"].value == 2  # ids 2 and 3
    got = best_ns.refresh().to_table(filter="day = DATE '2024-05-01'")
    assert sorted(zip(got["id"].to_pylist(), got["score"].to_pylist(), strict=True)) == [
        (0, 10.0), (1, 11.0), (2, 12.0), (3, 13.0), (4, 14.0),
    ]  # fmt: skip


def test_a_type_without_a_handler_is_refused_naming_the_handlers(tmp_path):
    @dg.asset
    def frame() -> pl.DataFrame:
        return day_frame("2024-05-01", [1])

    result = dg.materialize(
        [frame],
        resources={"io_manager": LancePartitionedIOManager(root=str(tmp_path))},
        raise_on_error=False,
    )
    assert not result.success
    [event] = result.get_step_failure_events()
    err, text = event.step_failure_data.error, []
    while err is not None:
        text.append((err.cls_name, err.message))
        err = err.cause
    [message] = [m for cls, m in text if cls == "UnsupportedTypeError"]
    assert "polars" in message and "pyarrow.Table" in message and "type_handlers()" in message
    assert not (tmp_path / "frame").exists()


def test_type_handler_is_abstract_and_generic():
    class Incomplete(TypeHandler[pl.DataFrame]):
        @property
        def supported_types(self) -> Sequence[type]:
            return (pl.DataFrame,)

        def to_arrow(self, obj: pl.DataFrame) -> pa.Table:
            return obj.to_arrow()

    with pytest.raises(TypeError, match="from_arrow"):
        Incomplete()  # type: ignore[abstract]
    handler = PolarsHandler()
    assert handler.handles(pl.DataFrame()) and not handler.handles(pa.table({"a": [1]}))
    assert handler.handles_type(pl.DataFrame) and not handler.handles_type(pa.Table)
    assert handler.name == "polars.DataFrame"


class BadIOManager(LancePartitionedIOManager):
    @staticmethod
    def type_handlers() -> Sequence[Any]:
        return [PolarsHandler, *default_type_handlers()]  # the class, not an instance


def test_type_handlers_must_be_handler_instances(tmp_path):
    @dg.asset
    def numbers() -> pa.Table:
        return pa.table({"a": [1]})

    result = dg.materialize(
        [numbers],
        resources={"io_manager": BadIOManager(root=str(tmp_path))},
        raise_on_error=False,
    )
    assert not result.success
    err = result.get_step_failure_events()[0].step_failure_data.error
    names = []
    while err is not None:
        names.append(err.cls_name)
        err = err.cause
    assert "UnsupportedTypeError" in names


# -- errors carried through Spark's messages -------------------------------------------------------
def test_package_errors_round_trip_through_the_carried_note():
    values = {"country": "US", "event_date": dt.date(2025, 12, 11), "hour": dt.time(3, 4)}
    sample = {
        "id": 4,
        "at": dt.datetime(2025, 12, 11, 3, tzinfo=dt.UTC),
        "amount": decimal.Decimal("12.30"),
        "raw": b"\x00\xff",
        "nan": float("nan"),
        "tags": ["a", None],
        "pair": (1, 2),
    }
    error = UnnamedPartitionError("a row belongs to partition ... may not touch", values, sample)
    back = decode_error(encode_error(error))
    assert type(back) is UnnamedPartitionError
    assert str(back) == str(error) and back.values == values
    assert {k: v for k, v in back.sample.items() if k != "nan"} == {
        k: v for k, v in sample.items() if k != "nan"
    }
    assert back.sample["nan"] != back.sample["nan"]  # still NaN

    conflict = decode_error(encode_error(CommitConflictError("lost the race", ["p1", "p2"])))
    assert type(conflict) is CommitConflictError and conflict.partitions == ["p1", "p2"]
    mismatch = decode_error(encode_error(PartitionKeyMismatchError("m", "2024-05-01", {"a": 1})))
    assert type(mismatch) is PartitionKeyMismatchError
    assert (mismatch.partition_key, mismatch.sample) == ("2024-05-01", {"a": 1})

    # only classes of this package, and nothing from text that merely looks like a note
    assert decode_error("not base64 json") is None
    foreign = {"c": "builtins:SystemExit", "a": ["x"], "f": {}}
    assert decode_error(base64.urlsafe_b64encode(json.dumps(foreign).encode()).decode()) is None


def test_carried_errors_are_found_in_a_wrapping_exception_message():
    @carried
    def task() -> None:
        raise DuplicateKeyError("key {'id': 5} occurs twice in the merge input", {"id": 5})

    with pytest.raises(DuplicateKeyError) as raised:
        task()
    [note] = raised.value.__notes__
    assert note.startswith("[dlp-error:")

    # what Spark hands the caller: a message holding the worker's traceback (with the note)
    text = "".join(traceback.format_exception(raised.value))

    class PythonException(Exception):
        pass

    wrapped = PythonException(f"An exception was thrown from the Python worker:\n{text}")
    rebuilt = package_error(wrapped)
    assert type(rebuilt) is DuplicateKeyError
    assert rebuilt.key == {"id": 5} and str(rebuilt) == str(raised.value)
    assert package_error(PythonException("no note here")) is None
    assert isinstance(UnsupportedTypeError("x"), TypeError)
