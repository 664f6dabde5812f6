"""Rows written ahead: a partition's rows written as a data file of its registered table while
the table is still being opened, so that on an object store the file's upload overlaps the
reads of the table's version instead of following them.

The file is written by path, in the layout and data storage version the table most likely has
(what this write would create it with); the table commit checks both against the opened table
and writes the rows again when either differs (see :meth:`.table.TableWriter.append_into`),
deleting the file written ahead. Nothing is committed here."""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass

import pyarrow as pa
from lance.file import LanceFileWriter
from lance.fragment import DataFile, FragmentMetadata, write_fragments

from .. import storage

# rows a file written ahead may hold (larger writes are split into several files by Lance)
MAX_AHEAD_ROWS = 1024 * 1024
DATA_DIR = "data"

_templates: dict[bytes, DataFile] = {}
_lock = threading.Lock()


def _template(rows: pa.Table, layout: pa.Schema) -> DataFile:
    """How Lance describes a data file of ``layout`` at its default storage version (the one
    this package creates tables with): the field ids of its columns and their indexes, and the
    file version; from one row written to memory, once per process and layout."""
    key = layout.serialize().to_pybytes()
    with _lock:
        known = _templates.get(key)
    if known is None:
        fragments = write_fragments(
            rows.slice(0, 1),
            f"memory://dlp-layout-{uuid.uuid4().hex}",
            schema=layout,
            mode="create",
        )
        known = fragments[0].files[0]
        with _lock:
            _templates[key] = known
    return known


def file_version(data_file: DataFile) -> str:
    """The data storage version of ``data_file`` (``"2.2"``)."""
    return f"{data_file.file_major_version}.{data_file.file_minor_version}"


@dataclass
class AheadFile:
    """A data file about to be written ahead: its writer is made (the store client, the
    layout's description) but nothing is sent before :meth:`write`."""

    rows: pa.Table
    name: str
    template: DataFile
    writer: LanceFileWriter

    def write(self) -> tuple[FragmentMetadata, str]:
        """Upload the rows: the fragment that holds them (not committed) and the file's data
        storage version."""
        for batch in self.rows.to_batches():
            self.writer.write_batch(batch)
        written = self.writer.close()
        t = self.template
        data_file = DataFile(
            self.name,
            list(t.fields),
            list(t.column_indices),
            t.file_major_version,
            t.file_minor_version,
            self.writer.size_bytes,
        )
        return FragmentMetadata(0, [data_file], int(written or self.rows.num_rows)), file_version(t)


def prepare(
    table_uri: str, rows: pa.Table, layout: pa.Schema, storage_options: dict[str, str] | None
) -> AheadFile:
    """The file that will hold ``rows`` (shaped ``layout``, at least one, at most
    :data:`MAX_AHEAD_ROWS`) as a new data file of the table at ``table_uri``, written without
    reading the table; nothing is sent yet (a file prepared and never written leaves nothing)."""
    template = _template(rows, layout)
    name = f"{uuid.uuid4().hex}.lance"
    writer = LanceFileWriter(
        storage.join(table_uri, f"{DATA_DIR}/{name}"),
        layout,
        version=file_version(template),
        storage_options=storage_options,
    )
    return AheadFile(rows, name, template, writer)


def written_paths(fragments: list[FragmentMetadata]) -> list[str]:
    """The data files of ``fragments``, relative to their table's directory."""
    return [f"{DATA_DIR}/{f.path}" for frag in fragments for f in frag.files]
