"""Partition fields and spec versions as the CLI's JSON shows them: the stored form plus how
people name each field (:mod:`dagster_lance_partitioned.core.partitioning.describe`)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pyarrow as pa

from ..core import PartitionSpec, SpecField
from ..core.engine import field_summary, source_names, source_types, window_of


def field_doc(f: SpecField, schema: pa.Schema) -> dict[str, Any]:
    """A spec field as JSON: its stored form plus source names, type name, manifest column, a
    description and, for time windows, the window."""
    doc = f.to_json()
    doc["source_columns"] = source_names(f, schema)
    doc["result_type_name"] = str(f.result_type)
    doc["column"] = f.column
    doc["description"] = field_summary(f, schema)
    window = window_of(f, source_types(f, schema))
    doc["window"] = None if window is None else dataclasses.asdict(window)
    return doc


def spec_doc(spec: PartitionSpec, schema: pa.Schema, current: bool) -> dict[str, Any]:
    """A spec version as JSON."""
    return {
        "spec_id": spec.spec_id,
        "current": current,
        "draft": spec.draft,
        "fields": [field_doc(f, schema) for f in spec.fields],
    }
