"""Compact commit messages: what one Spark task staged, small enough that hundreds of tasks
times hundreds of partitions stay far below ``spark.driver.maxResultSize``.

A task's :class:`~dagster_lance_partitioned.core.write.staged.StageResult` is packed as one
zlib-compressed pickle of plain values: per partition only its key, rows, layout number and,
per fragment, the fields that differ between fragments (id, file path, file size, rows). The
layouts (schema, storage version, file fields) are listed once per message. What the driver can
derive from the key (the registered table, its location and namespace path) is not sent: the
driver recomputes it from the same manifest version the task planned against."""

from __future__ import annotations

import json
import pickle
import zlib
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
from lance.fragment import FragmentMetadata

from ..core import WriteError
from ..core.engine import PartitionWriter, StagedPartition, StageResult

FORMAT_VERSION = 1
COMPRESSION_LEVEL = 6

Layout = tuple[bytes | None, str | None, tuple[Any, ...]]
"""(schema as Arrow IPC or None, storage version, file template of its fragments)."""


def _template(frag: dict[str, Any]) -> tuple[Any, ...] | None:
    """What a fragment shares with the others of its layout (None: not a plain fragment)."""
    files = frag.get("files") or []
    rest = {k: v for k, v in frag.items() if k not in ("id", "files", "physical_rows")}
    plain: dict[str, Any] = {
        "overlays": [],
        "deletion_file": None,
        "row_id_meta": None,
        "created_at_version_meta": None,
        "last_updated_at_version_meta": None,
    }
    if len(files) != 1 or rest != plain:
        return None
    f = files[0]
    extra = set(f) - {"fields", "column_indices", "file_major_version", "file_minor_version"}
    if extra != {"file_size_bytes", "base_id", "path"} or f["base_id"] is not None:
        return None
    return (
        tuple(f["fields"]),
        tuple(f["column_indices"]),
        f["file_major_version"],
        f["file_minor_version"],
    )


def _expand(template: tuple[Any, ...], fid: int, path: str, size: int, rows: int) -> dict[str, Any]:
    fields, indices, major, minor = template
    return {
        "id": fid,
        "files": [
            {
                "fields": list(fields),
                "column_indices": list(indices),
                "file_major_version": major,
                "file_minor_version": minor,
                "file_size_bytes": size,
                "base_id": None,
                "path": path,
            }
        ],
        "overlays": [],
        "physical_rows": rows,
        "deletion_file": None,
        "row_id_meta": None,
        "created_at_version_meta": None,
        "last_updated_at_version_meta": None,
    }


def pack(result: StageResult) -> bytes:
    """``result`` as compact bytes (see the module doc); :func:`unpack` reverses it."""
    layouts: list[Layout] = []
    index: dict[Layout, int] = {}
    entries = []
    for part in result.partitions:
        schema = None if part.layout is None else part.layout.serialize().to_pybytes()
        frags: list[Any] = []
        template: tuple[Any, ...] | None = None
        for fragment in part.fragments:
            raw = fragment.to_json()
            shape = _template(raw)
            if template is None:
                template = shape
            if shape is not None and shape == template:
                f = raw["files"][0]
                frags.append((raw["id"], f["path"], f["file_size_bytes"], raw["physical_rows"]))
            else:  # anything unusual travels whole
                frags.append(json.dumps(raw, separators=(",", ":")))
        layout = (schema, part.storage_version, template or ())
        number = index.setdefault(layout, len(layouts))
        if number == len(layouts):
            layouts.append(layout)
        entries.append((part.key, part.rows, number, frags, part.stats))
    payload = (FORMAT_VERSION, layouts, entries)
    return zlib.compress(pickle.dumps(payload, protocol=5), COMPRESSION_LEVEL)


def unpack(packed: Sequence[bytes | None], writer: PartitionWriter) -> list[StageResult | None]:
    """The :class:`StageResult` s packed by :func:`pack` in the tasks of a staged write, given
    that write's partition writer on the driver (``StagedWrite.writer()``); None stays
    None."""
    return [None if p is None else _unpack(p, writer) for p in packed]


def _unpack(data: bytes, writer: PartitionWriter) -> StageResult:
    version, layouts, entries = pickle.loads(zlib.decompress(data))
    if version != FORMAT_VERSION:
        raise WriteError(f"commit message format {version} (this driver reads {FORMAT_VERSION})")
    schemas = [None if s is None else pa.ipc.read_schema(pa.py_buffer(s)) for s, _, _ in layouts]
    parts = []
    for key, rows, number, frags, stats in entries:
        _schema, storage_version, template = layouts[number]
        fragments = []
        for frag in frags:
            raw = json.loads(frag) if isinstance(frag, str) else _expand(template, *frag)
            fragments.append(FragmentMetadata.from_json(json.dumps(raw)))
        # what the task derived from the key and the manifest version, derived again
        pending = writer.new_partition(key)
        parts.append(
            StagedPartition(
                key,
                pending.existing.object_id if pending.existing else None,
                pending.location,
                tuple(pending.path),
                rows,
                tuple(fragments),
                schemas[number],
                storage_version,
                stats,
            )
        )
    return StageResult(tuple(parts))
