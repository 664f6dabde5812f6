"""The write side of the Spark data source.

On the driver (``writer()``): open the namespace (or create it from the DataFrame schema with
option ``partitionBy``), check the DataFrame schema against the namespace schema before any
data is written, and begin a :class:`~dagster_lance_partitioned.core.write.staged.StagedWrite`
against the latest manifest version. On the executors (``write()``): each task splits its rows
by partition and writes Lance fragments straight into the partition tables, returning the
fragment metadata as its commit message (packed to about 30 bytes per partition it wrote into,
see ``messages``). On the driver again (``commit()``): every partition
table is committed once, then one ``__manifest`` commit makes all of it visible. A failed job
(``abort()``) commits nothing: readers stay on the previous state, the fragments written are
orphans a vacuum removes. A package error raised by any of them reaches the caller as a
PySparkException carrying it (``result.carried``); ``write_dataframe`` raises it again with its
own class (``result.package_error``).

Modes: ``append``; ``overwrite`` replaces the whole table (static) or only the partitions present
in the data (dynamic). As for Spark's file sources, option ``partitionOverwriteMode`` decides,
else the session's ``spark.sql.sources.partitionOverwriteMode``, else static.

The driver-side planner worker that runs ``writer()`` gets no SQL conf from Spark (and the
source has no ``SessionConfigSupport``), but every task of the write job gets the session's
SQL confs as job local properties, read when the job runs. So without the option, each task
reports the session's mode in its commit message and ``commit()`` applies it: a conf changed
after ``register()`` counts, also in Spark Connect sessions. Static and dynamic overwrites
stage the same fragments; they differ only in what the ``__manifest`` commit deregisters.

Spark gives a Python data source no way to ask for its input clustered, so a plain ``df.write``
makes one fragment per task in every partition table the task has rows of. The driver warns
(``ScatteredWriteWarning``, once per namespace and driver process) when the tasks wrote at
least twice as many fragments as partitions, small ones; ``write_dataframe`` clusters first."""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import json
import pickle
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from ..core import Changes, NamespaceNotFoundError, PartitionedNamespace, WriteError, WriteMode
from ..core.engine import StagedWrite, parse_partition_by
from . import options as opt
from .errors import ScatteredWriteWarning, SparkOptionError
from .messages import pack, unpack
from .result import RESULT_PROPERTY, Summary, carried, check_write_id, summarize
from .types import arrow_schema

WRITE_ID_OPTION = "writeId"  # the write id recorded in the commit (dlp.write_id)
PARTITIONS_OPTION = "partitions"  # JSON list of {field id: value}: the only partitions written
# JSON of a transaction's uncommitted schema / spec changes (core.manifest.changes.Changes): the
# rows are written under them and the driver commits them just before the data
CHANGES_OPTION = "transactionChanges"
SESSION_OVERWRITE_CONF = "spark.sql.sources.partitionOverwriteMode"


@dataclass
class StagedMessage(WriterCommitMessage):
    """One task's commit message: the fragments it staged, packed compactly (None: no rows),
    how many partitions it wrote into, and (when the write's overwrite mode is the session's)
    the session's partition overwrite mode the task saw."""

    packed: bytes | None
    partitions: int = 0
    session_mode: str | None = None


def write_mode(
    options: Mapping[str, str], overwrite: bool, session_mode: str | None = None
) -> WriteMode:
    """The core write mode of a Spark save mode: for an overwrite, option
    ``partitionOverwriteMode`` wins, else ``session_mode`` (the session's
    ``spark.sql.sources.partitionOverwriteMode``), else static."""
    chosen = opt.partition_overwrite_mode(options)
    if chosen is None and session_mode is not None:
        chosen = opt.overwrite_mode_value(session_mode, f"session conf {SESSION_OVERWRITE_CONF!r}")
    if not overwrite:
        return "append"
    return "overwrite_partitions" if chosen == "dynamic" else "overwrite"


def session_overwrite_mode() -> str | None:
    """The session's ``spark.sql.sources.partitionOverwriteMode`` as the running Spark task
    received it with its job (``static`` when the session does not set it); None outside a
    Spark task."""
    ctx = TaskContext.get()
    if ctx is None:
        return None
    raw = ctx.getLocalProperty(SESSION_OVERWRITE_CONF)
    if raw is None or not raw.strip():
        return "static"
    return opt.overwrite_mode_value(raw, f"session conf {SESSION_OVERWRITE_CONF!r}")


def open_or_create(
    uri: str,
    storage_options: dict[str, str] | None,
    schema: pa.Schema,
    partition_by: Any = None,
) -> PartitionedNamespace:
    """The namespace at ``uri``; a missing one is created with ``schema`` and ``partition_by``
    (simple or JSON ``partitionBy`` form, or PartitionFields)."""
    try:
        return PartitionedNamespace.open(uri, storage_options)
    except NamespaceNotFoundError:
        if partition_by is None:
            raise NamespaceNotFoundError(
                f"{uri}: no partitioned namespace here; to create one from this DataFrame, "
                "give option 'partitionBy' (e.g. \"country,year(event_date)\")"
            ) from None
    fields = parse_partition_by(partition_by)
    # a concurrent writer may create it first: write into that one
    return PartitionedNamespace.create(
        uri, schema, fields, storage_options=storage_options, exist_ok=True
    )


def _partitions(options: Mapping[str, str]) -> list[dict[str, Any]] | None:
    raw = opt._get(options, PARTITIONS_OPTION)
    if raw is None:
        return None
    try:
        parsed = json.loads(raw)
    except ValueError as e:
        raise SparkOptionError(f"option 'partitions' is not JSON: {e}") from None
    if not isinstance(parsed, list) or not all(isinstance(p, dict) for p in parsed):
        raise SparkOptionError("option 'partitions' must be a JSON list of objects")
    return parsed


def encode_partitions(partitions: list[Mapping[str, Any]]) -> str:
    """Partition values (field id -> value) as the JSON of option ``partitions``."""

    def default(v: Any) -> Any:
        if isinstance(v, dt.date | dt.datetime | dt.time):
            return v.isoformat()
        if isinstance(v, decimal.Decimal):
            return str(v)
        raise TypeError(f"cannot encode partition value {v!r}")

    return json.dumps([dict(p) for p in partitions], default=default)


def _changes(options: Mapping[str, str]) -> Changes | None:
    raw = opt._get(options, CHANGES_OPTION)
    if raw is None:
        return None
    try:
        return Changes.from_json(raw)
    except (ValueError, KeyError, TypeError) as e:
        raise SparkOptionError(
            f"option {CHANGES_OPTION!r} is not a transaction's changes: {e}"
        ) from None


def _commit_properties(options: Mapping[str, str]) -> dict[str, str]:
    raw = opt._get(options, "commitProperties")
    props: dict[str, str] = {"engine": "spark"}  # the manifest store adds the dlp. prefix
    if raw is None:
        return props
    try:
        parsed = json.loads(raw)
    except ValueError as e:
        raise SparkOptionError(f"option 'commitProperties' is not JSON: {e}") from None
    if not isinstance(parsed, dict):
        raise SparkOptionError("option 'commitProperties' must be a JSON object")
    props.update({str(k): str(v) for k, v in parsed.items()})
    return props


@carried
def make_writer(
    options: Mapping[str, str], schema: StructType, overwrite: bool
) -> LancePartitionedWriter:
    """The writer of one Spark write job (runs on the driver, before any task)."""
    uri = opt.path(options)
    storage = opt.storage_options(options)
    data_schema = arrow_schema(schema)
    ns = open_or_create(uri, storage, data_schema, opt._get(options, "partitionBy"))
    # an overwrite without the option follows the session, which only the tasks see; both
    # overwrite modes stage alike, commit() settles which one this write is
    session_decides = overwrite and opt.partition_overwrite_mode(options) is None
    staged = StagedWrite.begin(
        ns,
        write_mode(options, overwrite),
        commit_properties=_commit_properties(options),
        partitions=_partitions(options),
        changes=_changes(options),
    )
    staged.check_schema(data_schema)  # raises naming the column, before any data is written
    write_id = opt._get(options, WRITE_ID_OPTION)
    if write_id is not None:
        staged = dataclasses.replace(staged, write_id=check_write_id(write_id))
    return LancePartitionedWriter(staged, session_decides=session_decides)


class LancePartitionedWriter(DataSourceArrowWriter):
    """Stages fragments in the tasks, commits them once on the driver."""

    def __init__(self, staged: StagedWrite, session_decides: bool = False) -> None:
        self.staged = staged
        self.session_decides = session_decides  # overwrite mode: the session's, seen by tasks

    @carried
    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedMessage:
        """Write this task's rows as fragments of their partition tables (nothing visible)."""
        result = self.staged.stage(b for b in iterator if b.num_rows)
        return StagedMessage(
            pack(result) if result.partitions else None,
            len(result.partitions),
            session_overwrite_mode() if self.session_decides else None,
        )

    @carried
    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Commit every partition table once, then the single ``__manifest`` commit, which
        records the write's outcome (see :mod:`.result`)."""
        staged = self._settled(messages)
        writer = staged.writer()  # the partition writer the tasks used, on the driver
        results = unpack(_packed(messages), writer)
        size = sum(len(pickle.dumps(m)) for m in messages if m is not None)
        summary = summarize(writer.spec.spec_id, results, size)
        advice = scatter_advice(summary)
        if advice is not None:
            _warn_once(f"{staged.root}: {advice}")
        props = {**staged.commit_properties, RESULT_PROPERTY: summary.encode()}
        dataclasses.replace(staged, commit_properties=props).commit(results)

    @carried
    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Nothing becomes visible; staged fragments are left as orphans."""
        self.staged.abort([None for _ in messages])

    def _settled(self, messages: list[WriterCommitMessage | None]) -> StagedWrite:
        """The staged write with its final mode: an overwrite that follows the session takes
        the session's mode reported by the tasks; refused when no task reported it (replacing
        the whole table might deregister partitions the session means to keep)."""
        if not self.session_decides:
            return self.staged
        seen = {
            m.session_mode
            for m in messages
            if isinstance(m, StagedMessage) and m.session_mode is not None
        }
        if len(seen) != 1:
            found = "no task reported it" if not seen else f"tasks saw {sorted(seen)}"
            raise WriteError(
                f"overwrite of {self.staged.root}: the session's {SESSION_OVERWRITE_CONF} "
                f"decides between replacing the whole table and only the partitions written, "
                f"but {found}; nothing was committed (give option 'partitionOverwriteMode')"
            )
        mode = write_mode({}, True, seen.pop())
        return dataclasses.replace(self.staged, mode=mode)


def _packed(messages: list[WriterCommitMessage | None]) -> list[bytes | None]:
    out: list[bytes | None] = []
    for m in messages:
        if m is None:
            out.append(None)
        elif isinstance(m, StagedMessage):
            out.append(m.packed)
        else:
            raise WriteError(f"unexpected commit message {type(m).__name__}")
    return out


SMALL_PAIR_ROWS = 128 * 1024  # below this many rows per task and partition, fragments are small
_warned: set[str] = set()


def scatter_advice(summary: Summary) -> str | None:
    """The fix for a write whose tasks each wrote small fragments into many partitions (the
    rows were not clustered by partition); None for a write that was."""
    parts = len(summary.partitions)
    if not parts or summary.pairs < 2 * parts:
        return None
    rows = sum(r for r, _ in summary.partitions.values())
    if rows / summary.pairs >= SMALL_PAIR_ROWS:
        return None
    return (
        f"{summary.tasks} Spark tasks wrote {summary.pairs} fragments into {parts} partition "
        f"tables ({summary.pairs / parts:.1f} per table, {rows // summary.pairs} rows each): "
        "the rows were not clustered by partition. Write with "
        "dagster_lance_partitioned.spark.write_dataframe(df, uri, mode), which repartitions "
        "by the partition values first, or df.repartition(<partition columns>) before "
        "df.write; ns.maintenance.compact() merges the small fragments later."
    )


def _warn_once(message: str) -> None:
    """Warn (on the driver's stderr) once per process and namespace."""
    root = message.split(": ", 1)[0]
    if root in _warned:
        return
    _warned.add(root)
    warnings.warn(ScatteredWriteWarning(message), stacklevel=2)
