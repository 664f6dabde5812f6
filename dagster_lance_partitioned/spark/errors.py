"""Errors and warnings of the Spark layer (core errors are re-raised with their own class)."""

from __future__ import annotations

from ..core import PartitionedNamespaceError


class SparkOptionError(PartitionedNamespaceError, ValueError):
    """An option of the ``lance_partitioned`` format is missing or malformed."""


class ScatteredWriteWarning(UserWarning):
    """A Spark write whose tasks each wrote small fragments into many partition tables."""
