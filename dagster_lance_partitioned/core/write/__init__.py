"""The write path: :class:`PartitionWriter` routes a write's rows to partitions
(:mod:`.ingest`), commits a new version of each partition table (:mod:`.table`), then registers
them in one ``__manifest`` commit whose rules against concurrent commits are its mode's
(:mod:`.append`, :mod:`.overwrite`, on :mod:`.commit`)."""

from .append import AppendCommit
from .commit import WRITER_ID, WriteCommit
from .ingest import PartitionIngest, as_reader
from .mode import WRITE_MODES, WriteMode, check_mode
from .overwrite import OverwriteCommit, OverwritePartitionsCommit, covering_keys
from .pending import BaseIndex, PendingPartition
from .result import PartitionWrite, WriteResult
from .table import MAX_ROWS_PER_FILE, TableWriter
from .writer import COMMITS, PartitionWriter

__all__ = [
    "COMMITS",
    "MAX_ROWS_PER_FILE",
    "WRITER_ID",
    "WRITE_MODES",
    "AppendCommit",
    "BaseIndex",
    "OverwriteCommit",
    "OverwritePartitionsCommit",
    "PartitionIngest",
    "PartitionWrite",
    "PartitionWriter",
    "PendingPartition",
    "TableWriter",
    "WriteCommit",
    "WriteMode",
    "WriteResult",
    "as_reader",
    "check_mode",
    "covering_keys",
]
