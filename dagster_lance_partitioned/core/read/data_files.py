"""Small partition tables read straight from their data files.

A scan of a Lance table plans a query and runs it, about half a millisecond before the first
row even for a table of a few thousand rows; over hundreds of partitions that fixed price is
the read. A small table version whose every fragment is one data file holding every column,
without deleted rows, is read instead with Lance's file reader (kept open per file: a pinned
version's files never change), and the rows of many such tables are filtered together, once
(see :func:`.scan.scan_reader`). Any other table is scanned by Lance as before.

The rows of a small table version read a second time in a process are kept in memory (a
version never changes), within ``DLP_READ_CACHE_MB`` (default 256 MiB, ``0`` keeps nothing;
the least recently read go first): a repeated read of many small partitions then costs its
filter, not its tables."""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass
from typing import Any

import lance
import pyarrow as pa
from lance.file import LanceFileReader

from ..lru import Lru, Sightings

# tables of at most this many rows are read in one pass (from their files, or scanned without
# late materialization)
SMALL_TABLE_ROWS = 100_000
KEPT_READERS = 4096  # data-file readers kept open per process
KEPT_LAYOUTS = 4096  # table versions whose file layout is remembered
READ_BATCH_ROWS = 65_536


@dataclass(frozen=True)
class DataFiles:
    """The data files of a small table version, one per fragment, each holding every column
    (paths or URIs), and its rows."""

    paths: tuple[str, ...]
    rows: int


READ_CACHE_ENV = "DLP_READ_CACHE_MB"
DEFAULT_READ_CACHE_MB = 256
KEPT_TABLE_BYTES = 16 * 1024 * 1024  # a table larger than this is never kept

_layouts: Lru[DataFiles | bool] = Lru(KEPT_LAYOUTS)  # (uri, version) -> files | False
_readers: Lru[LanceFileReader] = Lru(KEPT_READERS)  # (path, options) -> a reader


def data_files(ds: lance.LanceDataset, uri: str) -> DataFiles | None:
    """The data files of the table version ``ds`` (at ``uri``) when it is small, every fragment
    is one data file holding every field of its schema, and no row is deleted; else None (it
    is scanned)."""
    key = (uri, int(ds.version))
    known = _layouts.get(key)
    if known is not None:
        return known if isinstance(known, DataFiles) else None
    found = _layout(ds, uri)
    _layouts.put(key, found if found is not None else False)
    return found


def _layout(ds: lance.LanceDataset, uri: str) -> DataFiles | None:
    fields = _field_ids(ds.lance_schema.fields())
    paths = []
    rows = 0
    for fragment in ds.get_fragments():
        meta = fragment.metadata
        if len(meta.files) != 1 or meta.deletion_file is not None:
            return None
        data_file = meta.files[0]
        if getattr(data_file, "base_id", None) is not None:
            return None
        if sorted(i for i in data_file.fields if i >= 0) != fields:
            return None
        rows += int(meta.physical_rows or 0)
        if rows > SMALL_TABLE_ROWS:
            return None
        paths.append(_join(uri, "data/" + data_file.path))
    return DataFiles(tuple(paths), rows)


def _field_ids(fields: list[Any]) -> list[int]:
    out: list[int] = []
    for f in fields:
        out.append(f.id())
        out.extend(_field_ids(f.children()))
    return sorted(out)


def _join(uri: str, relative: str) -> str:
    path, sep, query = uri.partition("?")
    return posixpath.join(path, relative) + sep + query


def read(
    files: DataFiles, schema: pa.Schema, storage_options: dict[str, str] | None
) -> pa.Table | None:
    """Every row of the table ``files`` describes, with the columns of ``schema`` (the table's
    own, which its files must hold under the same names and types), or None when a file was
    written under other names (a column renamed since): then the table is scanned."""
    kept = _kept_tables().get(files.paths)
    if kept is not None and kept.schema.equals(schema):
        return kept
    options = tuple(sorted((storage_options or {}).items()))
    parts = []
    for path in files.paths:
        reader = _reader(path, options)
        table = reader.read_all(batch_size=READ_BATCH_ROWS).to_table()
        if table.schema.names != schema.names or any(
            a.type != b.type for a, b in zip(table.schema, schema, strict=True)
        ):
            return None
        parts.append(pa.Table.from_arrays(table.columns, schema=schema))
    table = pa.concat_tables(parts) if parts else schema.empty_table()
    if _read_before.again(files.paths) and table.nbytes <= KEPT_TABLE_BYTES:
        _kept_tables().put(files.paths, table)
    return table


def _budget() -> int:
    raw = os.environ.get(READ_CACHE_ENV, "").strip()
    mb = int(raw) if raw.isdigit() else DEFAULT_READ_CACHE_MB
    return mb * 1024 * 1024


_kept: Lru[pa.Table] | None = None
_read_before = Sightings(65_536)  # tables read once: kept from their second read


def _kept_tables() -> Lru[pa.Table]:
    """The rows of small table versions kept in memory (budget read on first use)."""
    global _kept
    if _kept is None:
        _kept = Lru(_budget(), weight=lambda t: int(t.nbytes))
    return _kept


def kept_rows(uri: str, version: int | None) -> pa.Table | None:
    """The rows of the table version at ``uri`` when this process keeps them (its own
    schema), else None."""
    if version is None or _kept is None:
        return None
    layout = _layouts.get((uri, int(version)))
    return _kept.get(layout.paths) if isinstance(layout, DataFiles) else None


def kept_bytes() -> int:
    """Bytes of table rows kept in memory."""
    return 0 if _kept is None else _kept.used


def _reader(path: str, options: tuple[tuple[str, str], ...]) -> LanceFileReader:
    key = (path, options)
    reader = _readers.get(key)
    if reader is None:
        reader = LanceFileReader(path, storage_options=dict(options) or None)
        _readers.put(key, reader)
    return reader


def forget() -> None:
    """Forget the kept readers, layouts and rows (a cold read can be measured)."""
    _readers.clear()
    _layouts.clear()
    _read_before.clear()
    if _kept is not None:
        _kept.clear()


__all__ = [
    "SMALL_TABLE_ROWS",
    "DataFiles",
    "data_files",
    "forget",
    "kept_bytes",
    "kept_rows",
    "read",
]
